"""Scripts that call the BLAS-1 functions added to fusec/data/blas for issue 46 (snrm2, sasum,
saxpby, scopy, svmul, svdiv): each alone, and each beside a neighbour it fuses with. Shared
by tests/test_library_functions.py (CPU and nvcc) and tests/gpu/test_library_functions.py.
"""

from __future__ import annotations

NEW_FUNCTIONS = ("sasum", "saxpby", "scopy", "snrm2", "svdiv", "svmul")

ALONE = {
    "nrm2": """\
vector x[n];
scalar r;
input x;
r = snrm2(x);
return r;
""",
    "asum": """\
vector x[n];
scalar r;
input x;
r = sasum(x);
return r;
""",
    "axpby": """\
vector x[n], y[n];
scalar alpha, beta;
input alpha, x, beta, y;
y = saxpby(alpha, x, beta, y);
return y;
""",
    "copy": """\
vector x[n], y[n];
input x;
y = scopy(x);
return y;
""",
    "vmul": """\
vector x[n], y[n], z[n];
input x, y;
z = svmul(x, y);
return z;
""",
    "vdiv": """\
vector x[n], y[n], z[n];
input x, y;
z = svdiv(x, y);
return z;
""",
}

# Each pair fuses into one kernel: the first call's result reaches the second on chip.
FUSED = {
    "axpby_dot": """\
# z = alpha x + beta y; r = z . w
vector x[n], y[n], w[n], z[n];
scalar alpha, beta, r;
input alpha, x, beta, y, w;
z = saxpby(alpha, x, beta, y);
r = sdot(z, w);
return z, r;
""",
    "axpy_nrm2": """\
# a Krylov residual update and its norm: r = alpha q + r; rn = ||r||
vector q[n], r[n];
scalar alpha, rn;
input alpha, q, r;
r = saxpy(alpha, q, r);
rn = snrm2(r);
return r, rn;
""",
    "vmul_asum": """\
# s = sum_i |x_i y_i|; the product never reaches memory
vector x[n], y[n], t[n];
scalar s;
input x, y;
t = svmul(x, y);
s = sasum(t);
return s;
""",
    "vdiv_dot": """\
# r = sum_i w_i x_i / y_i; the quotient's padded lanes must add nothing
vector x[n], y[n], w[n], t[n];
scalar r;
input x, y, w;
t = svdiv(x, y);
r = sdot(t, w);
return r;
""",
    "copy_axpy": """\
# p = r; z = alpha p + q
vector r[n], q[n], p[n], z[n];
scalar alpha;
input alpha, r, q;
p = scopy(r);
z = saxpy(alpha, p, q);
return p, z;
""",
    "nrm2_asum": """\
# two norms of one vector, x read once
vector x[n];
scalar a, s;
input x;
a = snrm2(x);
s = sasum(x);
return a, s;
""",
}

# A nested and an unnested call never share a kernel (paper section 3.2): numerics only.
CHAINED = {
    "gemv_nrm2": """\
# the norm of a matrix-vector product
matrix A[m, n];
vector x[n], y[m];
scalar r;
input A, x;
y = sgemv(A, x);
r = snrm2(y);
return y, r;
""",
}

SCRIPTS = {**ALONE, **FUSED, **CHAINED}

# Inputs that are divisors: kept away from 0 (|y| in [0.25, 0.75]) so that a quotient's
# reference is finite and well conditioned.
DIVISORS = {"vdiv": "y", "vdiv_dot": "y"}

# The routines of the triangle parts (fusec/data/blas/triangle.fusec, triangle.cuh; the store of
# one stored triangle, triangle_store.fusec, triangle_store.cuh) and of the functions on them
# (strmv, strmtv_strict, ssyr, ssyr2) that no database timed before them, which
# `fusec perfdb build --missing` adds.
TRIANGLE_ROUTINES = ("strict_gemtv_compute", "strict_gemtv_x_compute", "syr2_compute", "syr_compute", "tri_x_load",
                     "triu_tile_load", "triu_tile_store", "trmv_x_compute")

# The routines of the lower triangle's part (triangle_lower.fusec, triangle_lower.cuh) and of
# the functions on it (strmv_lower, strmtv_strict_lower, ssyr_lower, ssyr2_lower), which no
# shipped database has timed: `fusec perfdb build --missing` adds them.
TRIL_ROUTINES = ("strict_lower_gemtv_compute", "strict_lower_gemtv_x_compute", "syr2_lower_compute",
                 "syr_lower_compute", "tril_tile_load", "tril_tile_store")

# The functions on the lower triangle (`stored A tril`).
TRIL_FUNCTIONS = ("ssyr2_lower", "ssyr_lower", "strmtv_strict_lower", "strmv_lower")

# The functions on those parts: a performance database built before them lacks their probes
# (their own routines, and the vector loads they make in every iteration of the loop).
TRIANGLE_FUNCTIONS = ("ssyr", "ssyr2", "strmtv_strict", "strmv") + TRIL_FUNCTIONS

# Scripts of one stored triangle of a square matrix (scripts/triangle/), sized by n alone: the
# upper triangle's, then the same of the lower one (NAME_lower).
TRIL_SCRIPTS = ("symv_lower", "syr2_lower", "syr_symv_lower", "trmv_lower")
TRIANGLE_SCRIPTS = ("symv", "syr2", "syr_symv", "trmv") + TRIL_SCRIPTS


def unstored(name: str, n: int) -> tuple:
    """The indices of an n x n matrix that script ``name`` of TRIANGLE_SCRIPTS neither reads nor
    writes: below the diagonal for the upper triangle's scripts, above it for the lower's."""
    import numpy as np
    return np.triu_indices(n, 1) if name in TRIL_SCRIPTS else np.tril_indices(n, -1)
