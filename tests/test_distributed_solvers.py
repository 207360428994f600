"""CPU tier: fusec.distributed.solvers on thread ranks (fusec.distributed.threads), each stage
of the iterations evaluated by the float64 oracle. A solve over the ranks stops where the
NumPy iteration of the same method meets the rule, with the same x, and says so on every rank;
bad arguments are located ArgumentErrors."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import fusec.distributed.solvers as ds
from fusec.distributed.layout import block
from fusec.distributed.threads import oracle_executor, run_ranks
from fusec.errors import ArgumentError
from fusec.solvers.methods import METHODS
from tests.helpers import library


def system(n: int, symmetric: bool, seed: int = 3):
    rng = np.random.default_rng(seed)
    if symmetric:  # SPD, eigenvalues in [1, 10]
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        A = q @ np.diag(np.linspace(1.0, 10.0, n)) @ q.T
    else:
        A = 4.0 * np.eye(n) + rng.uniform(-0.5, 0.5, (n, n)) / math.sqrt(n)
    return A, rng.standard_normal(n)


def reference(method, A, b, x0, rtol, maxiter):
    """(x, iterations) of the NumPy iteration stopped by the driver's rule, checked every iteration."""
    values = method.start(x0, b - A @ x0, np.copy)
    limit = (rtol * np.linalg.norm(b)) ** 2
    for k in range(1, maxiter + 1):
        state, rr = method.reference(A, values)
        values.update(state)
        if rr <= limit:
            return values["x"], k
    return values["x"], maxiter


def solve_on(ranks: int, name: str, A, b, x0=None, **options):
    n = len(b)

    def work(comm):
        lo, hi = ds.rows(n, comm)
        return (lo, hi), getattr(ds, name)(A[lo:hi], b[lo:hi], None if x0 is None else x0[lo:hi], comm=comm,
                                          executor=oracle_executor(library(), "float64"), **options)
    return run_ranks(ranks, work, timeout=120)


@pytest.mark.parametrize("layouts", ["calls", "fewest", "agreed"])
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("name", ["cg", "bicg", "bicgstab"])
def test_a_solve_over_ranks_is_the_numpy_iteration(name, ranks, layouts):
    """In the layouts the calls want, in those of the fewest collectives, and in the fewest
    that leave no sum to each rank (the default) alike."""
    A, b = system(37, symmetric=name == "cg")
    results = solve_on(ranks, name, A, b, rtol=1e-8, layouts=layouts)
    assert [info for _, (_, info) in results] == [0] * ranks
    assert [rows for rows, _ in results] == [block(37, r, ranks) for r in range(ranks)]
    x = np.concatenate([x for _, (x, _) in results])
    want, _ = reference(METHODS[name], A, b, np.zeros(37), 1e-8, 370)
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)
    assert np.linalg.norm(b - A @ x) <= 1.001e-8 * np.linalg.norm(b)


def test_a_start_other_than_zero_and_a_limit_of_iterations():
    A, b = system(30, symmetric=True)
    x0 = np.linspace(-1.0, 1.0, 30)
    results = solve_on(3, "cg", A, b, x0, rtol=1e-12, maxiter=4)
    assert [info for _, (_, info) in results] == [4, 4, 4]  # not converged in 4: info = iterations done
    x = np.concatenate([x for _, (x, _) in results])
    want, k = reference(METHODS["cg"], A, b, x0, 1e-12, 4)
    assert k == 4
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)


def test_check_every_reads_the_residual_less_often_and_stops_on_a_multiple():
    A, b = system(25, symmetric=True)
    _, k = reference(METHODS["cg"], A, b, np.zeros(25), 1e-6, 250)
    results = solve_on(2, "cg", A, b, rtol=1e-6, check_every=4)
    assert [info for _, (_, info) in results] == [0, 0]
    x = np.concatenate([x for _, (x, _) in results])
    want, _ = reference(METHODS["cg"], A, b, np.zeros(25), 0.0, -(-k // 4) * 4)  # the iterations run: a multiple of 4
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("change", "argument", "why"), [
    (lambda A, b: (A[1:], b), "A", r"has \d+ rows, but rank 0 of 2 holds rows 0 to 10 of 20"),
    (lambda A, b: (A, b[:-1]), "b", r"has 9 rows, but rank 0 of 2 holds rows 0 to 10 of 20"),
    (lambda A, b: (A.astype(np.int64), b), "A", r"has dtype int64: pass float32 or float64"),
    (lambda A, b: (A, b.reshape(5, 2)), "b", r"is ndarray\(5, 2\): pass this rank's rows of a vector"),
])
def test_bad_blocks_are_argument_errors_naming_them(change, argument, why):
    A, b = system(20, symmetric=True)

    def work(comm):
        lo, hi = ds.rows(20, comm)
        A_, b_ = change(A[lo:hi], b[lo:hi])
        return ds.cg(A_, b_, comm=comm, executor=oracle_executor(library(), "float64"))
    with pytest.raises(ArgumentError, match=rf"argument '{argument}': {why}"):
        run_ranks(2, work, timeout=60)


@pytest.mark.parametrize(("option", "value", "why"), [
    ("rtol", 1.0, "it must be below 1"), ("atol", -1.0, "finite and >= 0"), ("maxiter", 0, "at least 1"),
    ("check_every", 1.5, "pass a whole number"), ("layouts", "fast", "pass 'agreed', 'fewest' or 'calls'")])
def test_bad_options_are_argument_errors(option, value, why):
    A, b = system(8, symmetric=True)
    with pytest.raises(ArgumentError, match=rf"argument '{option}': .*{why}"):
        ds.cg(A, b, **{option: value}, executor=oracle_executor(library(), "float64"))


def test_ranks_without_rows_and_one_process():
    """More ranks than rows: the last hold none and get empty blocks; one process (no
    communicator, nobody launched it): the plain iteration."""
    A, b = system(3, symmetric=True)
    results = solve_on(4, "cg", A, b, rtol=1e-10)
    assert [rows for rows, _ in results] == [(0, 1), (1, 2), (2, 3), (3, 3)]
    assert [info for _, (_, info) in results] == [0] * 4 and results[3][1][0].shape == (0,)
    x = np.concatenate([x for _, (x, _) in results])
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-8)
    x, info = ds.cg(A, b, rtol=1e-10, executor=oracle_executor(library(), "float64"))
    assert info == 0 and ds.rows(3) == (0, 3)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-8)


@pytest.mark.parametrize(("call", "argument", "why"), [
    (lambda A, b: ds.rows("abc"), "n", r"is 'abc': pass a whole number"),
    (lambda A, b: ds.rows(0), "n", r"is 0: it must be at least 1"),
    (lambda A, b: ds.cg(None, b), "A", r"is NoneType: pass this rank's rows of the matrix"),
    (lambda A, b: ds.cg(A, list(b)), "b", r"is list: pass this rank's rows of a vector \(1-D\), a NumPy"),
])
def test_bad_sizes_and_arrays_are_argument_errors(call, argument, why):
    A, b = system(6, symmetric=True)
    with pytest.raises(ArgumentError, match=rf"argument '{argument}': {why}"):
        call(A, b)



@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:overflow:RuntimeWarning")  # the oracle
@pytest.mark.parametrize(("spoil", "argument", "why"), [
    ("b", "b", "NaN"), ("b", "b", "inf"), ("x0", "x0", "NaN"), ("x0", "x0", "inf"), ("A", "A", "NaN")])
def test_nan_or_infinity_in_b_x0_or_a_times_x0_is_an_argument_error_on_every_rank(spoil, argument, why):
    """As fusec.solvers: b with an infinity was 'converged' with x = 0, x0 with a NaN returned x
    all NaN and info -1. One rank's rows hold the value; the norms the loop reads anyway are
    all-reduced, so every rank refuses, naming the same argument, and none waits for the others."""
    A, b = system(10, symmetric=True)
    x0 = np.linspace(-1.0, 1.0, 10)
    bad = {"NaN": np.nan, "inf": np.inf}[why]
    A, b, x0 = A.copy(), b.copy(), x0.copy()
    if spoil == "A":
        A[8, 3] = bad  # A x0 is not finite
    else:
        (b if spoil == "b" else x0)[8] = bad

    def work(comm):
        lo, hi = ds.rows(10, comm)
        try:
            ds.cg(A[lo:hi], b[lo:hi], x0[lo:hi], comm=comm, executor=oracle_executor(library(), "float64"))
        except ArgumentError as exc:
            return exc.argument
        return None
    assert run_ranks(2, work, timeout=60) == [argument, argument]


def test_the_arguments_are_checked_before_the_communicator_is_made(monkeypatch):
    """Made from mpirun's or torchrun's environment, a communicator joins NCCL on the GPU; all
    but the rows a rank holds (which its communicator says) are checked before."""
    def no_communicator(*args, **kwargs):
        raise AssertionError("the communicator was made before the arguments were checked")
    monkeypatch.setattr(ds, "communicator", no_communicator)
    A, b = system(6, symmetric=True)
    for options, argument in [({"rtol": 2.0}, "rtol"), ({"maxiter": 0}, "maxiter"), ({"graphs": "no"}, "graphs"),
                              ({"layouts": "most"}, "layouts"), ({"timeout": -1.0}, "timeout"),
                              ({"executor": 3}, "executor")]:
        with pytest.raises(ArgumentError) as caught:
            ds.cg(A, b, **options)
        assert caught.value.argument == argument
    for solver in (ds.cg, ds.bicg, ds.bicgstab):  # a misspelt option: Python's TypeError, naming the solver
        with pytest.raises(TypeError, match=rf"^{solver.__name__}\(\) got an unexpected keyword argument 'rtoll'"):
            solver(A, b, rtoll=1e-3)


@pytest.mark.parametrize("timeout", [[1], "5", -1.0, 0, float("nan"), float("inf"), 10 ** 400, True],
                         ids=["list", "str", "negative", "zero", "nan", "inf", "10**400", "True"])
def test_a_bad_timeout_is_an_argument_error_before_any_communicator_starts(monkeypatch, timeout):
    """A solve's (and fd.compile's) timeout went unchecked to the communicator fusec starts from
    torchrun's or mpirun's environment (a timedelta of a str, a watchdog deadline already past);
    a list was a TypeError out of the solve's cache key."""
    from fusec.distributed import comm as comm_module

    def never(*args, **kwargs):
        raise AssertionError("a communicator was started with an unchecked timeout")
    monkeypatch.setattr(comm_module, "launched_by", lambda: "torchrun")
    monkeypatch.setattr(comm_module, "from_torchrun", never)
    monkeypatch.setattr(comm_module, "from_mpi", never)
    for call in (lambda: comm_module.communicator(None, timeout=timeout),
                 lambda: ds.cg(*system(6, symmetric=True), timeout=timeout)):
        with pytest.raises(ArgumentError) as caught:
            call()
        assert caught.value.argument == "timeout"


class FakeMpiComm:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


@pytest.mark.parametrize(("comm", "missing"), [("torch", "torch"), (FakeMpiComm(), "cupy")])
def test_a_communicator_whose_framework_does_not_import_is_a_fusec_error(monkeypatch, comm, missing):
    """comm='torch' without PyTorch, an mpi4py communicator without CuPy: was ModuleNotFoundError."""
    from fusec.distributed import comm as comm_module
    from fusec.errors import GPUUnavailableError
    monkeypatch.setitem(sys.modules, missing, None)  # import fails, as where it is not installed
    monkeypatch.setattr(comm_module, "_GIVEN", {})
    monkeypatch.setattr(comm_module, "_MADE", {})
    with pytest.raises(GPUUnavailableError, match=rf"comm.*{missing}"):
        ds.cg(*system(6, symmetric=True), comm=comm, executor=oracle_executor(library(), "float64"))


def test_solves_after_the_first_reuse_its_programs(monkeypatch):
    """A solver loop solves again and again on one communicator: the programs of the first
    solve (the iteration, the norm, the gather, the first residual) serve the next ones, and
    another size or dtype compiles its own."""
    compiled = []
    real = ds.compile_distributed

    def counting(*args, **kwargs):
        compiled.append((kwargs.get("name"), kwargs["sizes"]["n"], kwargs["dtype"]))
        return real(*args, **kwargs)
    monkeypatch.setattr(ds, "compile_distributed", counting)
    ds.forget_programs()
    executor = oracle_executor(library(), "float64")
    A, b = system(24, symmetric=True)
    x0 = np.linspace(-1.0, 1.0, 24)
    want, _ = reference(METHODS["cg"], A, b, x0, 1e-8, 240)

    def work(comm):
        lo, hi = ds.rows(24, comm)
        answers = [ds.cg(A[lo:hi], b[lo:hi], x0[lo:hi], comm=comm, executor=executor, rtol=1e-8)
                   for _ in range(3)]
        return lo, hi, answers
    for lo, hi, answers in run_ranks(2, work, timeout=120):
        for x, info in answers:
            assert info == 0
            np.testing.assert_allclose(x, want[lo:hi], rtol=1e-10, atol=1e-12)
    assert len(compiled) == 2 * 4  # two ranks, four programs each, once
    run_ranks(2, lambda comm: ds.cg(A[slice(*ds.rows(24, comm))].astype(np.float32),
                                    b[slice(*ds.rows(24, comm))].astype(np.float32), comm=comm,
                                    executor=oracle_executor(library(), "float32"), rtol=1e-4), timeout=120)
    assert len(compiled) == 2 * 4 + 2 * 3  # float32: its own (no first residual without x0)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")  # the oracle
@pytest.mark.parametrize("check_every", [1, 4])
def test_a_breakdown_is_reported_with_the_iterate_before(check_every):
    """p . A p = 0 in the first iteration (a skew A): alpha is infinite, the residual's norm not
    finite; every rank reports info -1 and gets x0 back (the state restored from before the
    chunk, then redone one iteration at a time)."""
    A = np.array([[0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.0, -1.0, 0.0]])
    b = np.array([1.0, 0.0, 1.0, 0.0])
    x0 = np.array([0.5, -0.5, 0.25, 0.0])
    results = solve_on(2, "cg", A, b + A @ x0, x0, rtol=1e-8, check_every=check_every)
    assert [info for _, (_, info) in results] == [-1, -1]
    np.testing.assert_array_equal(np.concatenate([x for _, (x, _) in results]), x0)


def test_going_back_never_writes_the_state_it_goes_back_to():
    """The iteration's results go to two sets of arrays in turn; after going back to the state
    before an iteration (a breakdown), the next call must not write the set that state lies in
    (on a GPU that is an out= array over an input the stages still read)."""
    from fusec.distributed.solvers import DistributedStepper
    from fusec.solvers.arrays import NumpyArrays

    class Iteration:  # x1 = x + 1, ...: records that no out= array is an input
        outputs = ("x1", "r1", "p1", "rr1")

        def __call__(self, A, out=None, **state):
            for array in (out or {}).values():
                assert not any(np.shares_memory(array, v) for v in state.values())
            results = {f"{k}1": v + 1.0 for k, v in state.items()}
            results["rr1"] = np.array(1.0)
            for name, value in results.items():
                if out:
                    out[name][...] = value
                    results[name] = out[name]
            return tuple(results[name] for name in self.outputs)

    zeros = np.zeros(3)
    stepper = DistributedStepper(METHODS["cg"], Iteration(), None, np.copy, NumpyArrays(), np.eye(3), zeros, zeros,
                                 set())
    for chunk in (1, 1, 2, 1):
        stepper.advance(chunk)
    before = stepper.saved["x"].copy()
    stepper.restore()
    np.testing.assert_array_equal(stepper.x(), before)
    stepper.advance(1)  # from the state gone back to
    np.testing.assert_array_equal(stepper.x(), before + 1.0)


def test_the_layouts_default_from_the_environment(monkeypatch):
    monkeypatch.setenv(ds.LAYOUTS_VARIABLE, "fewest")
    assert ds._layouts_choice(None) == "fewest" and ds._layouts_choice("calls") == "calls"
    monkeypatch.setenv(ds.LAYOUTS_VARIABLE, "most")
    with pytest.raises(ArgumentError, match=rf"argument '{ds.LAYOUTS_VARIABLE}': is 'most'"):
        ds._layouts_choice(None)
    monkeypatch.delenv(ds.LAYOUTS_VARIABLE)
    assert ds._layouts_choice(None) == "agreed"


def _compile_cg(comm, sources_by_rank, fewest: bool):
    """CG's iteration compiled as the solvers compile it, each rank's stage programs carrying
    the CUDA text ``sources_by_rank(rank)`` (another tuning cache, another GPU)."""
    import fusec.distributed as fd
    from fusec.distributed.threads import oracle_executor

    class Stage:
        def __init__(self, run, source):
            self.run, self.source = run, source

        def __call__(self, **arrays):
            return self.run(**arrays)
    compile_stage = oracle_executor(library(), "float64")
    state = ({"x": "split", "r": "whole", "p": "whole"} if fewest else None)
    results = ({f"{v}1": lay for v, lay in state.items()} if fewest else {"x1": "split", "r1": "split", "p1": "whole"})
    return fd.compile(METHODS["cg"].script, dtype="float64", sizes={"n": 30}, comm=comm, latency=False,
                      executor=lambda stage: Stage(compile_stage(stage), sources_by_rank(comm.rank)),
                      results=results, inputs=state)


def test_ranks_summing_for_themselves_must_have_compiled_the_same_kernels():
    """CG with r whole sums rr1 on every rank: ranks whose stage kernels differ are refused on
    every rank, naming the groups; the same kernels pass; the plan whose sums are all-reduced
    does not ask."""
    from fusec.distributed.errors import DistributionError

    def refused(comm):
        try:
            _compile_cg(comm, lambda rank: "kernels A" if rank != 1 else "kernels B", fewest=True)
        except DistributionError as error:
            return str(error)
        return None
    messages = run_ranks(3, refused, timeout=60)
    assert all(m is not None and "rank(s) 0, 2; rank(s) 1: one set each" in m and "rr1" in m for m in messages)
    run_ranks(3, lambda comm: _compile_cg(comm, lambda rank: "kernels A", fewest=True), timeout=60)
    run_ranks(3, lambda comm: _compile_cg(comm, lambda rank: f"kernels {rank}", fewest=False), timeout=60)
