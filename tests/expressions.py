"""Scripts with scalar expressions, and plans of every kernel family for them:
shared by the CPU tests (``test_expressions``) and the GPU tests
(``tests/gpu/test_expressions``)."""

from __future__ import annotations

import functools
import warnings

from tests.helpers import ROOT, library

SOLVERS = ("cg", "bicg", "bicgstab")  # scripts/solvers/, one iteration each

# Small scripts: each returns an expression (the scalar kernel stores it) beside what calls make.
SCRIPTS = {
    # an expression over a dot and an input, read by a vector kernel; two returned
    "scaled": """\
vector x[n], y[n], z[n];
scalar a, rho, t, u;
input x, y, a;
rho = sdot(x, y);
t = -(a + 2.5) * abs(rho);
u = sqrt(abs(rho)) / (1 + a * a);
z = saxpy(t, x, y);
return z, t, u;
""",
    # GEMVER's second half with scalars made on the GPU: every family reads them
    # (band and held parts, a held producer's column sums finished after its barrier)
    "gemver": """\
matrix A[n, n], B[n, n];
vector u[n], v[n], y[n], z[n], x[n], w[n];
scalar s, alpha, beta, c;
input A, u, v, y, z, c;
s = sdot(y, z);
beta = c / (1 + abs(s));
alpha = -beta;
B = sger(A, u, v);
x = sgemtv_ab(beta, B, y, 1.0, z);
w = sgemv_a(alpha, B, x);
return B, x, w, beta;
""",
}

# Which plans of the "gemver" script show each family reading expressions.
FAMILIES = {
    "tile": lambda plan: all(k.family == "tile" for k in plan.kernels),
    "band": lambda plan: any(k.family == "band" for k in plan.kernels),
    "horizontal": lambda plan: any(k.family == "horizontal" for k in plan.kernels),
    "striped": lambda plan: any(k.family == "striped" for k in plan.kernels),
    "held": lambda plan: any(k.family == "held" and k.finish_after for k in plan.kernels),
}
PLAN_SIZE = 4097  # plans are made for the largest test size: a band kernel holds rows of at most its width


@functools.lru_cache(maxsize=None)
def script_dag(name: str):
    """The checked DAG of a solver script or of one of SCRIPTS."""
    from fusec.frontend import check, load_script, parse
    if name in SOLVERS:
        return load_script(ROOT / "scripts" / "solvers" / f"{name}.script", library())
    return check(parse(SCRIPTS[name], f"{name}.script"), library())


@functools.lru_cache(maxsize=None)
def _space(dtype: str):
    from fusec.cost.analytic import DEFAULT
    from fusec.space.combinations import build_space
    dag = script_dag("gemver")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_space(dag, library(), dtype, {s: PLAN_SIZE for s in dag.sizes}, DEFAULT)


@functools.lru_cache(maxsize=None)
def family_plan(family: str, dtype: str):
    """The best-ranked plan of the "gemver" script (analytic model) with a kernel of ``family``."""
    return _space(dtype).best_where(FAMILIES[family]).plan
