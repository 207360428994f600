"""GPU tier of fusec.solvers: cg, bicg and bicgstab compiled and looped on the GPU (CUDA graphs
replayed), in both precisions, at n = 33, 1000, 4097, on well-conditioned systems (SPD for CG):

- converged answers judged by their true residual ``||b - A x||`` in float64;
- the iterate after 5 iterations against SciPy's float64 solver from the same x0 (NumPy
  reference of the same algorithm where SciPy is missing), within the precision's tolerance;
- graph replay against plain calls; inputs unchanged; CuPy, PyTorch and NumPy arrays in,
  the same framework out;
- breakdown (a zero denominator) reported with the iterate before it, never NaN; BiCGStab's
  exact half step (s = 0, omega = 0 / 0) converged with the half-step iterate; b = 0 solved
  at once;
- the survey of the arguments by its kernel against NumPy: A's zero rows and columns (where a
  stripe or a block of threads begins or ends, n = 1 to 4097, past 2^31 entries), NaN not zero,
  and a zero row or column named before anything runs;
- a kept stepper's solve started on the GPU (survey, start and loop read once): the host's
  answer and iterations, b within the tolerance answered by zeros, and bad arguments refused
  with the checks' own errors, the next solve right.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from fusec.solvers import bicg, bicgstab, cg
from fusec.solvers.methods import BICG, BICGSTAB, CG, reference_iterates

pytestmark = pytest.mark.gpu

SOLVERS = {"cg": (cg, CG), "bicg": (bicg, BICG), "bicgstab": (bicgstab, BICGSTAB)}
SIZES = (33, 1000, 4097)
DTYPES = ("float32", "float64")
RTOL = {"float32": 1e-4, "float64": 1e-10}  # the stopping tolerance asked for
AGREE = {"float32": 2e-4, "float64": 1e-10}  # iterates against float64, relative to max |x|


def system(name: str, n: int, seed: int = 0):
    """float64 A (condition number below 2: eigenvalues within 0.8..1.2 for CG, 1 +- 0.2 in
    the complex plane otherwise), b and x0 uniform in [-0.5, 0.5]."""
    rng = np.random.default_rng([seed, n, len(name)])
    m = rng.uniform(-0.5, 0.5, (n, n))
    A = np.eye(n) + ((m + m.T) / (4 * np.sqrt(n)) if name == "cg" else m / (2 * np.sqrt(n)))
    return A, rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)


def device(framework: str, a):
    if a is None or framework == "numpy":
        return a
    if framework == "cupy":
        return pytest.importorskip("cupy").asarray(a)
    return pytest.importorskip("torch").as_tensor(a, device="cuda")


def host(a) -> np.ndarray:
    if hasattr(a, "get"):
        return a.get()
    if hasattr(a, "cpu"):
        return a.cpu().numpy()
    return np.asarray(a)


def framework_available() -> str:
    for name in ("cupy", "torch"):
        try:
            __import__(name)
            return name
        except ImportError:
            continue
    pytest.skip("needs CuPy or PyTorch")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_converges_with_a_small_true_residual(name, dtype, n):
    solve, _ = SOLVERS[name]
    A, b, _ = system(name, n)
    A, b = A.astype(dtype), b.astype(dtype)
    where = framework_available()
    x, info = solve(device(where, A), device(where, b), rtol=RTOL[dtype])
    x = host(x).astype(np.float64)
    assert info == 0
    assert np.isfinite(x).all()
    residual = np.linalg.norm(b.astype(np.float64) - A.astype(np.float64) @ x)
    assert residual <= 10 * RTOL[dtype] * np.linalg.norm(b.astype(np.float64))


def reference(name: str, A, b, x0, iterations: int) -> np.ndarray:
    """SciPy's float64 iterate (the same algorithm, unstopped), else the NumPy reference."""
    try:
        import scipy.sparse.linalg as linalg
    except ImportError:
        return reference_iterates(SOLVERS[name][1], A, b, x0, iterations)
    x, _ = getattr(linalg, name)(A, b, x0=x0, rtol=1e-30, atol=0.0, maxiter=iterations)
    return x


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_iterates_agree_with_scipy(name, dtype, n):
    solve, _ = SOLVERS[name]
    A, b, x0 = (a.astype(dtype) for a in system(name, n, seed=1))
    where = framework_available()
    x, info = solve(device(where, A), device(where, b), device(where, x0), rtol=0.0, maxiter=5, check_every=2)
    assert info == 5
    theirs = reference(name, *(a.astype(np.float64) for a in (A, b, x0)), 5)
    worst = np.abs(host(x).astype(np.float64) - theirs).max() / np.abs(theirs).max()
    assert worst <= AGREE[dtype]


@pytest.mark.parametrize("framework", ["cupy", "torch", "numpy"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_frameworks_in_and_out_and_graphs_against_plain_calls(name, framework):
    if framework != "numpy":
        pytest.importorskip(framework)
    else:
        framework_available()
    solve, _ = SOLVERS[name]
    A, b, x0 = (a.astype(np.float64) for a in system(name, 1000, seed=2))
    dA, db, dx0 = (device(framework, a) for a in (A, b, x0))
    replayed, info = solve(dA, db, dx0, rtol=0.0, maxiter=12, check_every=3)
    plain, plain_info = solve(dA, db, dx0, rtol=0.0, maxiter=12, check_every=3, graphs=False)
    assert info == plain_info == 12
    assert type(replayed) is type(dA)
    np.testing.assert_allclose(host(replayed), host(plain), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(host(replayed), reference(name, A, b, x0, 12), rtol=1e-10, atol=1e-11)
    for given, before in ((dA, A), (db, b), (dx0, x0)):
        np.testing.assert_array_equal(host(given), before)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_breakdown_is_reported_not_nan(name, dtype):
    # skew-symmetric A, integer values (exact sums): p . A p = 0 in the first iteration
    solve, _ = SOLVERS[name]
    rng = np.random.default_rng(5)
    m = rng.integers(-4, 5, (33, 33))
    A, b = (m - m.T).astype(dtype), rng.integers(-4, 5, 33).astype(dtype)
    where = framework_available()
    x, info = solve(device(where, A), device(where, b), check_every=4)
    assert info == -1
    np.testing.assert_array_equal(host(x), np.zeros(33, dtype))


@pytest.mark.parametrize("scale", [1.0, 4.0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bicgstab_exact_half_step_is_converged(dtype, scale):
    # A = c I, b integer-valued: every dot is an exact sum in any order, so alpha = 1 / c exactly,
    # s = r - alpha A p = 0 and omega = 0 / 0; the half-step iterate h = b / c is the answer
    A, b = (scale * np.eye(33)).astype(dtype), np.arange(1, 34).astype(dtype)
    where = framework_available()
    x, info = bicgstab(device(where, A), device(where, b), rtol=0.0, check_every=4)
    assert info == 0
    np.testing.assert_array_equal(host(x), b / scale)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_zero_b_is_solved_at_once(name):
    solve, _ = SOLVERS[name]
    A, _, _ = system(name, 33)
    where = framework_available()
    x, info = solve(device(where, A.astype(np.float32)), device(where, np.zeros(33, np.float32)))
    assert info == 0 and not host(x).any()


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_kept_stepper_solves_the_next_system_right(name, framework):
    """The second solve of a size reuses the first's stepper and graphs: on the same A with
    another b, on A's memory given new values in place (a graph reads what the memory holds),
    and on another A; each answer as a plain-call solve's, the first answer untouched."""
    pytest.importorskip(framework)
    solve, _ = SOLVERS[name]
    A, b, x0 = (a.astype(np.float64) for a in system(name, 1000, seed=3))
    A2, _, _ = (a.astype(np.float64) for a in system(name, 1000, seed=4))
    dA, db, dx0 = (device(framework, a) for a in (A, b, x0))
    first, _ = solve(dA, db, dx0, rtol=0.0, maxiter=12, check_every=3)
    kept = host(first).copy()
    def changed_in_place():
        dA[:] = device(framework, A2)
        return dA, db

    cases = {"another b": lambda: (dA, device(framework, -b)),
             "A changed in place": changed_in_place,
             "another A": lambda: (device(framework, A), db)}
    for what, given in cases.items():
        dM, dv = given()
        replayed, info = solve(dM, dv, dx0, rtol=0.0, maxiter=12, check_every=3)
        plain, _ = solve(dM, dv, dx0, rtol=0.0, maxiter=12, check_every=3, graphs=False)
        assert info == 12, what
        np.testing.assert_allclose(host(replayed), host(plain), rtol=1e-12, atol=1e-13, err_msg=what)
        np.testing.assert_allclose(host(replayed), reference(name, host(dM), host(dv), x0, 12),
                                   rtol=1e-10, atol=1e-11, err_msg=what)
    np.testing.assert_array_equal(host(first), kept)


# -- the loop on the GPU: one graph launch, the stopping rule tested after every iteration ----------

@pytest.fixture
def loop_runs(monkeypatch):
    """The GPU loops launched (a solve loops on the GPU where the driver has conditional graph
    nodes; a given check_every makes the host loop)."""
    from fusec.solvers import device_loop, kernels
    if kernels.unsupported():
        pytest.skip(f"no loop on the GPU here: {kernels.unsupported()}")
    runs = []
    launch = device_loop.DeviceLoop.launch

    def counted(self, *args):
        runs.append(args)
        return launch(self, *args)

    monkeypatch.setattr(device_loop.DeviceLoop, "launch", counted)  # the host's launches and started solves'
    return runs


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_the_gpu_loop_stops_where_a_test_after_every_iteration_does(name, framework, loop_runs):
    pytest.importorskip(framework)
    from fusec.solvers.api import solve_with_outcome
    method = SOLVERS[name][1]
    A, b, _ = (a.astype(np.float64) for a in system(name, 1000, seed=6))
    dA, db = device(framework, A), device(framework, b)
    x_every, every = solve_with_outcome(method, dA, db, rtol=1e-10, check_every=1)
    assert not loop_runs
    x, outcome = solve_with_outcome(method, dA, db, rtol=1e-10)
    assert len(loop_runs) == 1  # the stepper kept from the first solve is warm: one launch
    assert (outcome.info, outcome.iterations) == (every.info, every.iterations) == (0, every.iterations)
    np.testing.assert_allclose(host(x), host(x_every), rtol=1e-10, atol=1e-12)
    residual = np.linalg.norm(b - A @ host(x))
    assert residual <= 1e-10 * np.linalg.norm(b) * 1.01


@pytest.mark.parametrize("maxiter", [5, 6])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_the_gpu_loop_stops_at_maxiter_with_that_iterate(name, maxiter, loop_runs):
    solve, _ = SOLVERS[name]
    A, b, x0 = (a.astype(np.float64) for a in system(name, 1000, seed=7))
    where = framework_available()
    dA, db, dx0 = (device(where, a) for a in (A, b, x0))
    for _ in range(2):  # the first warms the kept stepper (two plain iterations), the second loops at once
        x, info = solve(dA, db, dx0, rtol=0.0, maxiter=maxiter)
        assert info == maxiter
        np.testing.assert_allclose(host(x), reference(name, A, b, x0, maxiter), rtol=1e-10, atol=1e-11)
    assert len(loop_runs) == 2


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_breakdown_inside_the_gpu_loop_is_reported_not_nan(name, loop_runs):
    solve, _ = SOLVERS[name]
    rng = np.random.default_rng(5)
    m = rng.integers(-4, 5, (33, 33))
    A, b = (m - m.T).astype(np.float64), rng.integers(-4, 5, 33).astype(np.float64)
    where = framework_available()
    dA, db = device(where, A), device(where, b)
    for _ in range(2):  # the second solve's first iteration breaks down inside the loop
        before = len(loop_runs)
        x, info = solve(dA, db)
        assert info == -1
        np.testing.assert_array_equal(host(x), np.zeros(33))
    assert len(loop_runs) == before + 1


@pytest.mark.parametrize("name", ["cg", "bicg"])
def test_an_exact_solution_inside_the_gpu_loop_is_converged(name, loop_runs):
    # A = I: the first iteration solves exactly; the body's second divides 0 by 0, after the
    # first's test stopped the loop
    solve, _ = SOLVERS[name]
    A, b = np.eye(33), np.arange(1.0, 34.0)
    where = framework_available()
    dA, db = device(where, A), device(where, b)
    for _ in range(2):
        before = len(loop_runs)
        x, info = solve(dA, db, rtol=0.0)
        assert info == 0
        np.testing.assert_allclose(host(x), b, rtol=1e-15)
    assert len(loop_runs) == before + 1


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_survey_kernel_without_A_reads_the_vectors_alone(dtype, n):
    """check_finite=False: the survey of b and x0 alone (A None) finds what NumPy does of them,
    A's sum 0 and no zero line, after a survey of an A of zero rows left its bits behind."""
    kernels, arrays, where = solver_kernels()
    A, b, x0 = (a.astype(dtype) for a in system("cg", n, seed=9))
    A[n // 2] = 0
    kernels.survey(arrays, device(where, A), device(where, b), None, dtype)
    for poisoned in (None, "b", "x0"):
        values = {"b": b.copy(), "x0": x0.copy()}
        if poisoned:
            values[poisoned][n // 2] = np.nan
        for given_x0 in (values["x0"], None):
            got = kernels.survey(arrays, None, device(where, values["b"]),
                                 None if given_x0 is None else device(where, given_x0), dtype)
            assert got[:3] == [float(poisoned != "b"), float(given_x0 is None or poisoned != "x0"), 0.0]
            assert got[4:] == [0, -1, 0, -1]
            if poisoned != "b":
                wide = values["b"].astype(np.float64)
                assert got[3] == pytest.approx(wide @ wide, rel=1e-12)


def solver_kernels(framework: str | None = None):
    """fusec.solvers.kernels, the arrays of ``framework`` (None: the one present), and its name
    (skips where the kernels cannot run or the framework is missing)."""
    from fusec.solvers import kernels
    from fusec.solvers.arrays import arrays_for
    if kernels.unsupported():
        pytest.skip(kernels.unsupported())
    where = framework_available() if framework is None else pytest.importorskip(framework).__name__
    return kernels, arrays_for(where), where


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_survey_kernel_finds_what_numpy_does(dtype, n):
    kernels, arrays, where = solver_kernels()
    A, b, x0 = (a.astype(dtype) for a in system("cg", n, seed=8))
    for poisoned in (None, "b", "x0", "A"):
        values = {"A": A.copy(), "b": b.copy(), "x0": x0.copy()}
        if poisoned:
            values[poisoned].reshape(-1)[n // 2] = np.nan if poisoned != "x0" else np.inf
        for given_x0 in (values["x0"], None):
            got = kernels.survey(arrays, *(device(where, a) for a in (values["A"], values["b"], given_x0)), dtype)
            wide = {k: v.astype(np.float64) for k, v in values.items()}
            assert got[:2] == [float(poisoned != "b"), float(given_x0 is None or poisoned != "x0")]
            total = wide["A"].sum()
            assert np.isfinite(got[2]) == np.isfinite(total)
            if np.isfinite(total):
                assert got[2] == pytest.approx(total, rel=1e-9, abs=1e-9 * np.abs(wide["A"]).sum())
            if poisoned != "b":
                assert got[3] == pytest.approx(wide["b"] @ wide["b"], rel=1e-12)


def zero_lines(A: np.ndarray) -> list[int]:
    """[zero rows, the first (-1: none), zero columns, the first]: the survey's last four, by
    NumPy on the whole matrix (NaN is not 0)."""
    found = []
    for nonzero in ((A != 0).any(1), (A != 0).any(0)):
        zero = np.flatnonzero(~nonzero)
        found += [len(zero), int(zero[0]) if len(zero) else -1]
    return found


def singular_cases(n: int, dtype: str):
    """(what, A) pairs: an A with no zero entry, then zero rows and columns where a stripe or a
    block of threads begins or ends, a row or column zero but for its last entry (not zero), a
    NaN row (not zero), -0.0 (zero) and the zero matrix."""
    rng = np.random.default_rng([n, 11])
    full = (rng.uniform(0.5, 1.0, (n, n)) * rng.choice([-1.0, 1.0], (n, n))).astype(dtype)
    cases = [("no zero", full)]
    picks = sorted({0, n // 2, n - 1} | {k for k in (15, 16, 63, 64, 255, 256, 257, 4095, 4096) if k < n})
    for k in picks:
        cases.append((f"row {k}", full.copy()))
        cases[-1][1][k, :] = 0
        cases.append((f"column {k}", full.copy()))
        cases[-1][1][:, k] = 0
    several = full.copy()
    several[picks[1:], :] = 0
    several[:, picks[::2]] = 0
    cases.append(("several rows and columns", several))
    if n > 1:
        almost = full.copy()
        almost[0, :-1] = 0
        almost[:-1, n - 1] = 0  # row 0 and column n - 1 zero but for the entry they share
        cases.append(("all but one entry", almost))
        nan_row = full.copy()
        nan_row[n // 2, :] = 0
        nan_row[n // 2, n // 3] = np.nan
        cases.append(("a NaN in a row of zeros", nan_row))
    negative = full.copy()
    negative[n - 1, :] = -0.0
    cases.append(("a row of -0.0", negative))
    cases.append(("zero matrix", np.zeros((n, n), dtype)))
    return cases


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("n", (1, 33, 1000, 4097))
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_survey_kernel_finds_zero_rows_and_columns_as_numpy_does(dtype, n, framework):
    from fusec.solvers.arrays import NumpyArrays
    kernels, arrays, where = solver_kernels(framework)
    rng = np.random.default_rng(n)
    b = rng.uniform(-0.5, 0.5, n).astype(dtype)
    db = device(where, b)
    for what, A in singular_cases(n, dtype):
        got = kernels.survey(arrays, device(where, A), db, None, dtype)
        expected = zero_lines(A)
        assert got[4:] == expected, what
        assert list(NumpyArrays().survey(A, b, None))[4:] == expected, what
        assert got[:2] == [1.0, 1.0], what
        total = A.astype(np.float64).sum()
        assert np.isfinite(got[2]) == np.isfinite(total), what
        if np.isfinite(total):
            assert got[2] == pytest.approx(total, rel=1e-9, abs=1e-9 * np.abs(A.astype(np.float64)).sum()), what
        assert got[3] == pytest.approx(b.astype(np.float64) @ b.astype(np.float64), rel=1e-12), what


@pytest.mark.parametrize("blocks", (1, 3))
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_survey_kernel_with_fewer_blocks_than_stripes_finds_what_numpy_does(dtype, blocks, monkeypatch):
    # past MOST_BLOCKS stripes (n > 65536) each block takes every gridDim-th stripe: made here
    # at n = 1000 (63 stripes) by a smaller cap
    kernels, arrays, where = solver_kernels("cupy")
    monkeypatch.setattr(kernels, "MOST_BLOCKS", blocks)
    assert kernels.stripes(1000) == (kernels.STRIPE_ROWS, blocks)
    b = np.linspace(-1, 1, 1000).astype(dtype)
    for what, A in singular_cases(1000, dtype):
        got = kernels.survey(arrays, device(where, A), device(where, b), None, dtype)
        assert got[4:] == zero_lines(A), what
        total = A.astype(np.float64).sum()
        if np.isfinite(total):
            assert got[2] == pytest.approx(total, rel=1e-9, abs=1e-9 * np.abs(A.astype(np.float64)).sum()), what


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_the_survey_kernel_after_a_larger_one_finds_the_smaller_ones_zeros(framework):
    """The kept workspace (the largest n's) is zeroed again for each survey: flags a larger
    survey left past n, or in its first n, change nothing."""
    kernels, arrays, where = solver_kernels(framework)
    for n, zero_column in ((1000, None), (33, 5), (1000, 999), (33, None)):
        A = np.ones((n, n))
        if zero_column is not None:
            A[:, zero_column] = 0
        got = kernels.survey(arrays, device(where, A), device(where, np.ones(n)), None, "float64")
        assert got[4:] == zero_lines(A), (n, zero_column)


@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_the_survey_kernel_indexes_a_over_2_to_the_31_entries(framework):
    # n^2 > 2^31 (float32, 8.6 GB): the offsets of the last rows overflow an int; made on the GPU
    kernels, arrays, where = solver_kernels(framework)
    n = 46349
    module = pytest.importorskip(framework)
    if framework == "cupy":
        A, b = module.ones((n, n), dtype=module.float32), module.ones(n, dtype=module.float32)
    else:
        A, b = (module.ones(shape, dtype=module.float32, device="cuda") for shape in ((n, n), (n,)))
    A[n - 1, :] = 0
    A[n - 3, :] = 0
    A[:, n - 2] = 0
    try:
        got = kernels.survey(arrays, A, b, None, "float32")
    finally:
        del A
    assert got[2] == float(n * n - 3 * n + 2)  # integers below 2^53: the float64 sum is exact
    assert got[4:] == [2, n - 3, 1, n - 2]


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_frameworks_own_survey_finds_what_the_kernel_does(dtype, framework):
    # a strided b is surveyed by the framework's reductions (by blocks of rows of A), not the kernel
    kernels, arrays, where = solver_kernels(framework)
    n = 300
    strided = device(where, np.ones(2 * n, dtype))[::2]
    for what, A in singular_cases(n, dtype):
        dA = device(where, A)
        by_kernel = kernels.survey(arrays, dA, device(where, np.ones(n, dtype)), None, dtype)
        by_framework = arrays.survey(dA, strided, None)
        assert list(by_framework)[4:] == by_kernel[4:] == zero_lines(A), what


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_zero_row_or_column_on_the_gpu_is_named_before_anything_runs(name, framework):
    from fusec import ArgumentError
    pytest.importorskip(framework)
    solve, _ = SOLVERS[name]
    A, b, _ = system(name, 1000, seed=10)
    A[17, :] = 0
    A[:, [3, 500]] = 0
    with pytest.raises(ArgumentError) as caught:
        solve(device(framework, A), device(framework, b))
    assert caught.value.argument == "A"
    assert str(caught.value) == "argument 'A': row 17 is zero; column 3 is the first of 2 zero columns: A is singular"
    A[17, 17] = np.nan  # NaN is reported as before, not as a zero row
    with pytest.raises(ArgumentError, match="contains NaN or infinity"):
        solve(device(framework, A), device(framework, b))


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_the_gpu_loop_skips_a_bodys_second_iteration_once_its_first_stops_the_loop(name, loop_runs):
    from fusec.solvers import device_loop
    from fusec.solvers.api import program_for
    from fusec.solvers.arrays import arrays_for
    from fusec.solvers.stepper import ProgramStepper
    method = SOLVERS[name][1]
    A, b, x0 = (a.astype(np.float64) for a in system(name, 1000, seed=7))
    where = framework_available()
    arrays = arrays_for(where)
    with arrays.stream():
        dA, db, dx0 = (device(where, a) for a in (A, b, x0))
        start = method.start(dx0, db - arrays.matvec(dA, dx0), lambda a: a)
        guarded = functools.partial(device_loop.DeviceLoop, guarded=True)  # solves guard from 1 GiB of A
        stepper = ProgramStepper(program_for(name, "float64", 1000), method, arrays, dA, start, make_loop=guarded)
        stepper.advance(2)  # plain calls warm both sets; the loop starts from set 0
        done, why, _ = stepper.loop(0.0, 5)  # iterations 3..7: bodies (3, 4), (5, 6), then 7 alone
        assert (done, why) == (5, device_loop.MOST_ITERATIONS) and stepper.gpu_loop.guarded
        other = host(stepper.sets[0]["x"])  # iteration 6's x: iteration 8 would have written here
        answer = host(stepper.x())
    np.testing.assert_allclose(answer, reference_iterates(method, A, b, x0, 7), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(other, reference_iterates(method, A, b, x0, 6), rtol=1e-10, atol=1e-11)


@pytest.fixture
def starts(monkeypatch):
    """The solves started on the GPU (a kept stepper's, from x = 0: survey, start, loop, one read)."""
    from fusec.solvers.stepper import ProgramStepper
    made = []
    start = ProgramStepper.start_on_device

    def counted(self, *args):
        made.append(args)
        return start(self, *args)

    monkeypatch.setattr(ProgramStepper, "start_on_device", counted)
    return made


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_started_solve_answers_as_the_hosts_start_does(name, dtype, framework, loop_runs, starts):
    """The second solve on A starts on the GPU: the answer and iterations of a solve started
    by the host (checked every iteration), b unchanged; b within atol: zeros at once."""
    pytest.importorskip(framework)
    from fusec.solvers.api import solve_with_outcome
    method = SOLVERS[name][1]
    A, b, _ = (a.astype(dtype) for a in system(name, 1000, seed=11))
    dA, db = device(framework, A), device(framework, b)
    rtol = RTOL[dtype]
    x_every, every = solve_with_outcome(method, dA, db, rtol=rtol, check_every=1)
    solve_with_outcome(method, dA, device(framework, b[::-1].copy()), rtol=rtol)  # keeps a warm stepper
    before = len(starts)  # (a stepper kept from a test before may have started that one: A's memory reused)
    x, outcome = solve_with_outcome(method, dA, db, rtol=rtol)
    assert len(starts) == before + 1 and outcome.info == every.info == 0
    # float32 sums added by atomics in another order may cross the tolerance an iteration apart
    assert abs(outcome.iterations - every.iterations) <= (dtype == "float32")
    np.testing.assert_allclose(host(x), host(x_every), rtol=AGREE[dtype], atol=AGREE[dtype] * np.abs(host(x)).max())
    np.testing.assert_array_equal(host(db), b)
    zeros, at_once = solve_with_outcome(method, dA, db, atol=2 * float(np.linalg.norm(b.astype(np.float64))))
    assert len(starts) == before + 2 and (at_once.info, at_once.iterations) == (0, 0) and not host(zeros).any()


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_started_solve_refuses_what_the_checks_refuse_and_the_next_is_right(name, framework, starts):
    """Bad arguments to a solve started on the GPU: the checks' own errors (the survey read
    after the loop, which did not iterate), and the kept stepper serves the next solve."""
    from fusec import ArgumentError
    pytest.importorskip(framework)
    solve, _ = SOLVERS[name]
    A, b, _ = system(name, 1000, seed=10)
    dA, db = device(framework, A), device(framework, b)
    solve(dA, db)  # the stepper kept, its loop captured on dA
    before = len(starts)  # (a stepper kept from a test before may have started that one: A's memory reused)
    bad = b.copy()
    bad[5] = np.nan
    with pytest.raises(ArgumentError, match="contains NaN or infinity") as caught:
        solve(dA, device(framework, bad))
    assert caught.value.argument == "b" and len(starts) == before + 1
    spoiled = A.copy()
    spoiled[17, :] = 0
    spoiled[:, [3, 500]] = 0
    dA[...] = device(framework, spoiled)  # in place: the memory the loop was captured on
    with pytest.raises(ArgumentError) as caught:
        solve(dA, db)
    assert len(starts) == before + 2 and caught.value.argument == "A"
    assert str(caught.value) == "argument 'A': row 17 is zero; column 3 is the first of 2 zero columns: A is singular"
    dA[...] = device(framework, A)
    x, info = solve(dA, db)
    assert len(starts) == before + 3 and info == 0
    assert np.linalg.norm(b - A @ host(x).astype(np.float64)) <= 1e-5 * np.linalg.norm(b) * 1.01


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_new_matrices_of_one_shape_are_copied_in_and_started(name, framework, starts):
    """A kept stepper given matrices on new memory (a Newton method's) captures on the first
    change of matrix, copies each into its own matrix from the second on, and starts on the
    GPU from the third: each answer converged on its own A."""
    import fusec.solvers
    pytest.importorskip(framework)
    solve, _ = SOLVERS[name]
    _, b, _ = system(name, 1000, seed=12)
    db = device(framework, b)
    fusec.solvers.forget_kept_steppers()  # a stepper of its own, from its first solve
    held = []  # every matrix kept alive: each on memory of its own
    for k, seed in enumerate((12, 13, 14, 15, 13)):
        A = system(name, 1000, seed=seed)[0]
        held.append(device(framework, A))
        before = len(starts)
        x, info = solve(held[-1], db, rtol=1e-10)
        assert info == 0 and np.linalg.norm(b - A @ host(x)) <= 1e-10 * np.linalg.norm(b) * 1.01
        assert len(starts) == before + (k >= 3), k  # new stepper, first change, second (the copy's capture)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_solve_over_several_launches_of_the_gpu_loop_stops_where_one_launch_does(name, loop_runs, monkeypatch):
    from fusec.solvers import driver
    from fusec.solvers.api import solve_with_outcome
    method = SOLVERS[name][1]
    A, b, _ = (a.astype(np.float64) for a in system(name, 1000, seed=9))
    where = framework_available()
    dA, db = device(where, A), device(where, b)
    x_one, one = solve_with_outcome(method, dA, db, rtol=0.0, maxiter=40)
    monkeypatch.setattr(driver, "LAUNCH_SECONDS", 0.0)  # 16 iterations a launch: the least
    before = len(loop_runs)
    x, outcome = solve_with_outcome(method, dA, db, rtol=0.0, maxiter=40)
    assert len(loop_runs) - before == 3  # 16, 16 and 8 (the kept stepper is warm)
    assert (outcome.info, outcome.iterations) == (one.info, one.iterations) == (40, 40)
    np.testing.assert_allclose(host(x), host(x_one), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [1, 33, 4097])
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_arrays_copies_each_pair_eight_to_a_launch(dtype, n):
    kernels, arrays, where = solver_kernels()
    rng = np.random.default_rng(n)
    sources = [rng.standard_normal(n).astype(dtype) for _ in range(11)]  # two launches: 8 and 3
    src = [device(where, a) for a in sources]
    dst = [device(where, np.full(n + 1, np.nan, dtype))[:n] for _ in sources]  # a NaN past each end
    kernels.copy_arrays(arrays, list(zip(dst, src)), arrays.stream_handle())
    for copied, expected in zip(dst, sources):
        np.testing.assert_array_equal(host(copied), expected)
        assert np.isnan(host(copied._base if hasattr(copied, "_base") else copied.base)[n])
