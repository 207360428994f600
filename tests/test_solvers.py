"""fusec.solvers without a GPU: the argument checks, and the solver loop (ping-pong ``out=``
sets, graph capture and replay, checkpoints, the stopping rule, breakdown) driven on NumPy
arrays by a stand-in program: the float64 oracle interpreting the shipped iteration scripts.
Its iterates are compared with SciPy's solvers (same x0, a fixed number of iterations) where
SciPy is importable, and with the NumPy reference of :mod:`fusec.solvers.methods`."""

from __future__ import annotations

import math
import re
import types

import numpy as np
import pytest

from fusec import ArgumentError, data, oracle
from fusec.errors import DriverError, FusecWarning
from fusec.frontend import load_script
from fusec.solvers import arrays as solver_arrays
from fusec.solvers import checks, device_loop, solve
from fusec.solvers.api import default_check_every, solve_with_outcome
from fusec.solvers.arrays import NumpyArrays
from fusec.solvers.driver import default_check_every as every_for_seconds
from fusec.solvers.driver import most_per_launch as default_most_per_launch
from fusec.solvers.driver import run
from fusec.solvers.methods import BICG, BICGSTAB, CG, METHODS, reference_iterates
from fusec.solvers.stepper import ProgramStepper
from tests.helpers import ROOT, library


class OracleProgram:
    """A fusec program's calling convention over the oracle's float64 evaluation of a shipped
    iteration script; checks, as the runtime does, that no result shares memory with an input."""

    def __init__(self, method):
        self.dag = load_script(method.script, library())
        self.calls = 0

    def __call__(self, out, **inputs):
        for name, target in out.items():
            for given, array in inputs.items():
                assert not np.shares_memory(target, array), f"out[{name!r}] overlaps input {given!r}"
        with np.errstate(all="ignore"):  # a breakdown divides by zero, as the GPU does
            values = oracle.evaluate(self.dag, library(), inputs)
        by_name = {self.dag.value(v).name: values[v] for v in self.dag.outputs}
        for name, target in out.items():
            target[...] = by_name[name]
        self.calls += 1


class CapturingArrays(NumpyArrays):
    """NumPy arrays whose 'graph' records the captured function and replays it by calling it."""

    def __init__(self):
        super().__init__()
        self.captures = 0

    def graph(self, function):
        self.captures += 1
        return function


def spd(n, seed=0):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return m @ m.T / n + np.eye(n)


def nonsymmetric(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.eye(n) * 2 + rng.standard_normal((n, n)) / (2 * np.sqrt(n))


def system(method, n=33, seed=0):
    A = spd(n, seed) if method is CG else nonsymmetric(n, seed)
    rng = np.random.default_rng(seed + 1)
    return A, rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)


METHOD_LIST = [CG, BICG, BICGSTAB]
IDS = [m.name for m in METHOD_LIST]


# -- the shipped scripts ------------------------------------------------------------------------

@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_package_scripts_are_the_scripts_of_scripts_solvers(method):
    assert method.script.read_text() == (ROOT / "scripts" / "solvers" / f"{method.name}.script").read_text()
    assert method.script.parent == data.SOLVERS


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_method_names_match_the_script(method):
    dag = load_script(method.script, library())
    inputs = {dag.value(v).name for v in dag.inputs}
    assert inputs == {"A", *method.state, *method.fixed}
    assert tuple(dag.value(v).name for v in dag.outputs) == method.outputs()


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_script_iteration_is_the_reference_iteration(method):
    A, b, x0 = system(method)
    values = method.start(x0, b - A @ x0, np.copy)
    program = OracleProgram(method)
    for _ in range(3):
        state, rr1 = method.reference(A, values)
        out = {f"{k}1": np.empty_like(v) for k, v in state.items()} | {"rr1": np.zeros(())}
        program(A=A, **{k: values[k] for k in method.state + method.fixed}, out=out)
        for k, v in state.items():
            np.testing.assert_allclose(out[f"{k}1"], v, rtol=1e-12, atol=1e-14)
        assert out["rr1"] == pytest.approx(rr1, rel=1e-12)
        values.update(state)


def test_bicgstab_script_returns_its_half_step():
    # h = x + alpha p and s = r - alpha A p: the iterate and residual the driver falls back on
    A, b, x0 = system(BICGSTAB)
    values = BICGSTAB.start(x0, b - A @ x0, np.copy)
    out = {name: np.full_like(b, np.nan) for name in BICGSTAB.outputs()} | {"rr1": np.zeros(())}
    OracleProgram(BICGSTAB)(A=A, **values, out=out)
    r, p = values["r"], values["p"]
    alpha = (values["rh"] @ r) / (values["rh"] @ (A @ p))
    np.testing.assert_allclose(out["h"], x0 + alpha * p, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["s"], r - alpha * (A @ p), rtol=1e-12, atol=1e-14)


# -- iterates against SciPy and the NumPy reference ----------------------------------------------

@pytest.mark.parametrize("check_every", [1, 3, 16])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_iterates_agree_with_scipy(method, check_every):
    A, b, x0 = system(method)
    x, info = solve(method, A, b, x0, rtol=0.0, maxiter=5, check_every=check_every, program=OracleProgram(method))
    assert info == 5
    reference = reference_iterates(method, A, b, x0, 5)
    np.testing.assert_allclose(x, reference, rtol=1e-12, atol=1e-13)
    linalg = pytest.importorskip("scipy.sparse.linalg")
    theirs, _ = getattr(linalg, method.name)(A, b, x0=x0, rtol=1e-30, atol=0.0, maxiter=5)
    np.testing.assert_allclose(x, theirs, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_converges_and_true_residual_is_small(method):
    A, b, _ = system(method, n=50, seed=4)
    x, info = solve(method, A, b, rtol=1e-10, program=OracleProgram(method))
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)


# -- the loop: ping-pong sets, graphs, checkpoints ------------------------------------------------

@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_graph_replays_give_the_plain_iterates(method, k):
    A, b, x0 = system(method, seed=7)

    def stepper(arrays, graphs):
        start = method.start(x0, b - A @ x0, np.copy)
        return ProgramStepper(OracleProgram(method), method, arrays, A, start, graphs=graphs)

    plain, arrays = stepper(NumpyArrays(), False), CapturingArrays()
    replayed = stepper(arrays, True)
    for _ in range(4):
        plain.advance(k)
        replayed.advance(k)
        np.testing.assert_array_equal(replayed.x(), plain.x())
        assert replayed.squared_norm() == plain.squared_norm()
    # the first chunk warms both sets outside a capture; then one graph per first set
    assert arrays.captures == (1 if k % 2 == 0 else 2)
    assert replayed.program.calls == plain.program.calls


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_stepper_begun_again_replays_its_graphs_for_the_same_matrix_only(method, monkeypatch):
    A, b, x0 = system(method, seed=8)
    other_b = np.flip(b).copy()

    def start(A, b):
        return method.start(x0, b - A @ x0, np.copy)

    def fresh(A, b):
        plain = ProgramStepper(OracleProgram(method), method, NumpyArrays(), A, start(A, b), graphs=False)
        plain.advance(4)
        plain.advance(4)
        return plain.x().copy()

    arrays = CapturingArrays()
    kept = ProgramStepper(OracleProgram(method), method, arrays, A, start(A, b))
    kept.advance(4)
    kept.advance(4)  # captured here (the first chunk warmed both sets)
    assert arrays.captures == 1
    np.testing.assert_array_equal(kept.x(), fresh(A, b))
    kept.end()
    assert kept.A is None  # the caller's matrix is not kept alive
    kept.begin(A, start(A, other_b))  # the same matrix, another right-hand side
    kept.advance(4)
    kept.advance(4)
    assert arrays.captures == 1  # both chunks replayed the graph
    np.testing.assert_array_equal(kept.x(), fresh(A, other_b))
    moved = A.copy()  # the same values in other memory: the graph holds the old address
    kept.begin(moved, start(moved, b))
    calls = kept.program.calls
    kept.advance(4)
    assert arrays.captures == 2  # captured again at once, on moved: the sets are warm
    assert kept.program.calls == calls + 4  # the capture's calls (the fake graph runs them), no plain ones
    kept.advance(4)
    assert arrays.captures == 2 and kept.own_matrix is None  # one change of matrix: no copy
    np.testing.assert_array_equal(kept.x(), fresh(A, b))
    for k in range(2):  # other matrices: the second change copies into the stepper's own, captured once
        other = A + np.diag(np.linspace(0.5, 1.0, A.shape[0]) * (k + 1))
        kept.begin(other, start(other, b))
        kept.advance(4)
        kept.advance(4)
        assert arrays.captures == 3 and kept.own_matrix is not None
        np.testing.assert_array_equal(kept.x(), fresh(other, b))
    transposed = moved.T  # the same memory read with other strides: another matrix to a graph
    from fusec.solvers import stepper
    monkeypatch.setattr(stepper, "OWN_MATRIX_BYTES", 0)  # no matrix copied: each captured on
    big = ProgramStepper(OracleProgram(method), method, CapturingArrays(), A, start(A, b))
    big.advance(4)
    big.advance(4)
    for k, matrix in enumerate((transposed, moved)):  # other strides: another matrix to a graph
        big.begin(matrix, start(matrix, b))
        big.advance(4)
        assert big.arrays.captures == 2 + k and big.own_matrix is None
        big.advance(4)
        np.testing.assert_array_equal(big.x(), fresh(matrix, b))


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_the_answer_is_the_callers_not_the_kept_stepper_arrays(method):
    A, b, _ = system(method, n=40, seed=9)
    program = OracleProgram(method)
    first, info = solve(method, A, b, rtol=1e-10, program=program)
    kept = first.copy()
    second, _ = solve(method, A, -b, rtol=1e-10, program=program)  # the same stepper again
    assert info == 0
    np.testing.assert_array_equal(first, kept)  # untouched by the second solve
    np.testing.assert_allclose(second, -first, rtol=1e-8, atol=1e-12)
    assert np.linalg.norm(b - A @ first) <= 1e-9 * np.linalg.norm(b)


def test_workspaces_lend_one_value_to_one_taker_and_keep_the_most_recent():
    from fusec.solvers.workspace import Workspaces
    kept, made = Workspaces(most=2), []

    def make():
        made.append(object())
        return made[-1]

    with kept.take("a", make) as first:
        with kept.take("a", make) as beside:  # taken out: a second taker gets its own
            assert beside is not first
    with kept.take("a", make) as again:
        assert again in made and len(made) == 2
    for key in ("b", "c"):
        with kept.take(key, make):
            pass
    assert len(kept) == 2
    with kept.take("a", make) as after:  # "a" was the least recently used: dropped
        assert after is made[-1] and len(made) == 5


def test_restore_returns_the_state_the_last_advance_started_from():
    A, b, x0 = system(CG)
    start = CG.start(x0, b - A @ x0, np.copy)
    stepper = ProgramStepper(OracleProgram(CG), CG, NumpyArrays(), A, start)
    stepper.advance(2)
    before = stepper.x().copy()
    stepper.advance(3)
    assert not np.array_equal(stepper.x(), before)
    stepper.restore()
    np.testing.assert_array_equal(stepper.x(), before)


NAN = float("nan")


class Script:
    """A stepper whose squared norms are given: the driver's logic alone. ``half``: the squared
    norms of the half-step residuals (None: a method without a half step)."""

    def __init__(self, norms, half=None):
        self.norms, self.at, self.saved = list(norms), 0, 0
        self.half, self.reads, self.answer = half, 0, None

    def advance(self, k):
        self.saved = self.at
        self.at += k

    def restore(self):
        self.at = self.saved

    def squared_norm(self):
        self.reads += 1
        return self.norms[self.at - 1]

    def half_step_norm(self):
        if self.half is None:
            return None
        self.reads += 1
        return self.half[self.at - 1]

    def finish_at_half_step(self):
        self.answer = f"h of iteration {self.at}"

    def x(self):
        return self.answer or self.at


def test_driver_stops_at_the_first_check_below_tolerance():
    norms = [10.0, 5.0, 0.5, 0.2, 0.1, 0.05]
    outcome = run(Script(norms), 100.0, tol=1.0, maxiter=10, check_every=2)
    assert (outcome.info, outcome.iterations) == (0, 4)  # read after 2 and 4: 0.2 <= 1


def test_driver_retraces_a_chunk_that_ends_non_finite():
    nan = float("nan")
    stepper = Script([4.0, 3.0, 2.0, nan, nan, nan])
    outcome = run(stepper, 9.0, tol=1e-3, maxiter=10, check_every=5)
    assert (outcome.info, outcome.iterations) == (-4, 3)
    assert stepper.x() == 3  # the iterate before the breakdown


def test_driver_finds_convergence_inside_a_chunk_that_ends_non_finite():
    nan = float("nan")
    outcome = run(Script([4.0, 0.0, nan, nan]), 9.0, tol=0.0, maxiter=10, check_every=4)
    assert (outcome.info, outcome.iterations) == (0, 2)


def test_driver_takes_a_half_step_within_the_tolerance_where_an_iteration_ends_non_finite():
    stepper = Script([4.0, 3.0, NAN, NAN], half=[5.0, 4.0, 1e-8, NAN])
    outcome = run(stepper, 9.0, tol=1e-3, maxiter=10, check_every=4)
    assert (outcome.info, outcome.iterations) == (0, 3)
    assert stepper.x() == "h of iteration 3"
    assert stepper.reads == 1 + 3 + 1  # the chunk's read, one per retraced iteration, one half step


@pytest.mark.parametrize("half", [[5.0, 4.0, 2e-6, NAN], [5.0, 4.0, NAN, NAN]], ids=["above", "nan"])
def test_driver_reports_a_breakdown_where_the_half_step_misses_the_tolerance(half):
    stepper = Script([4.0, 3.0, NAN, NAN], half=half)
    outcome = run(stepper, 9.0, tol=1e-3, maxiter=10, check_every=4)
    assert (outcome.info, outcome.iterations) == (-3, 2)
    assert stepper.x() == 2


def test_driver_reads_no_half_step_while_the_iterations_stay_finite():
    stepper = Script([4.0, 3.0, 2.0, 1e-8], half=[NAN] * 4)
    outcome = run(stepper, 9.0, tol=1e-3, maxiter=10, check_every=2)
    assert (outcome.info, outcome.iterations, stepper.reads) == (0, 4, 2)


def test_driver_reports_maxiter():
    outcome = run(Script([5.0] * 20), 9.0, tol=1.0, maxiter=7, check_every=3)
    assert (outcome.info, outcome.iterations) == (7, 7)


# -- the loop on the GPU, on NumPy ---------------------------------------------------------------------

class NumpyLoop:
    """:class:`fusec.solvers.device_loop.DeviceLoop`'s protocol on NumPy: a capture keeps the
    body, a run calls it as the WHILE node replays it, and the test applies the test kernel's
    rule to its record (tolerance, most, done, why)."""

    made: list = []

    def __init__(self, arrays, like, stream):
        self.stream, self.bodies, self.runs, self.captures, self.starts = stream, {}, 0, 0, 0
        self.done = []  # the iterations each run did
        self.record = None
        NumpyLoop.made.append(self)

    def captured(self, start):
        return start in self.bodies

    def capture(self, start, body):
        self.bodies[start] = body
        self.captures += 1

    def run(self, start, squared_tolerance, most):
        self.record = [squared_tolerance, float(most), 0.0, 0.0]
        _, done, why = self.launch(start)
        return done, why

    def start(self, survey, rtol, atol, most, pairs, x):
        """fusec_loop_start's rule: the record from the survey, x zeroed, b copied."""
        self.starts += 1
        tol = max(rtol * math.sqrt(survey.bb), atol)
        refused = (not (survey.b_finite and survey.x0_finite and math.isfinite(survey.A_sum))
                   or survey.zero_rows or survey.zero_columns)
        why = (device_loop.REFUSED if refused else device_loop.CONVERGED if survey.bb <= tol * tol
               else device_loop.RUNNING)
        self.record = [tol * tol, float(most), 0.0, why]
        x[...] = 0
        for dst, src in pairs:
            dst[...] = src

    def launch(self, start):
        self.runs += 1
        record, going = self.record, [True]

        def test(squared_norm):
            if record[3] != device_loop.RUNNING:  # the body's first test (or the start) stopped the loop
                going[0] = False
                return
            done, rr = record[2] + 1, float(squared_norm)
            why = (device_loop.NOT_FINITE if not np.isfinite(rr) else device_loop.CONVERGED if rr <= record[0]
                   else device_loop.MOST_ITERATIONS if done >= record[1] else device_loop.RUNNING)
            record[2:] = [done, why]
            going[0] = why == device_loop.RUNNING

        def copy(pairs):
            for dst, src in pairs:
                dst[...] = src

        while going[0]:
            self.bodies[start](test, copy)
        self.done.append(int(record[2]))
        return record[0], int(record[2]), int(record[3])

    def forget(self):
        self.bodies.clear()


class RefusedLoop(NumpyLoop):
    def capture(self, start, body):
        raise DriverError("cuStreamBeginCaptureToGraph failed: CUDA_ERROR_NOT_SUPPORTED")


class BreaksAfter(OracleProgram):
    """The oracle's iteration, whose squared norm is NaN in the iteration from state ``x``
    (bit for bit): a breakdown at a chosen iteration, again wherever that iteration is redone."""

    def __init__(self, method, x):
        super().__init__(method)
        self.x = x

    def __call__(self, out, **inputs):
        super().__call__(out, **inputs)
        if np.array_equal(inputs["x"], self.x):
            out["rr1"][...] = np.nan


def x_after(method, A, b, x0, iterations):
    plain = ProgramStepper(OracleProgram(method), method, NumpyArrays(), A, method.start(x0, b - A @ x0, np.copy),
                           graphs=False)
    if iterations:
        plain.advance(iterations)
    return plain.x().copy()


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_the_gpu_loop_stops_where_a_test_after_every_iteration_does(method):
    A, b, _ = system(method, n=40, seed=5)
    x_host, host = solve_with_outcome(method, A, b, rtol=1e-10, check_every=1, program=OracleProgram(method))
    NumpyLoop.made.clear()
    program = OracleProgram(method)
    x, outcome = solve_with_outcome(method, A, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    assert (outcome.info, outcome.iterations) == (host.info, host.iterations) and host.info == 0
    np.testing.assert_array_equal(x, x_host)
    (loop,) = NumpyLoop.made
    assert loop.runs == 1 and loop.captures == 1  # two plain iterations warm the sets; then one launch
    assert program.calls in (outcome.iterations, outcome.iterations + 1)  # a body ends its pair
    again, outcome = solve_with_outcome(method, A, -b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    assert loop.runs == 2 and loop.captures == 1  # the kept stepper: no plain calls, no capture
    np.testing.assert_allclose(again, -x, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_kept_stepper_loops_on_a_new_matrix_at_once(method):
    A, b, _ = system(method, n=40, seed=5)
    program = OracleProgram(method)
    NumpyLoop.made.clear()
    solve_with_outcome(method, A, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    (loop,) = NumpyLoop.made
    moved = A.copy()  # the same values in other memory: the loop's graphs hold the old address
    x, outcome = solve_with_outcome(method, moved, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    assert loop.runs == 2 and loop.captures == 2  # captured again on the new matrix
    assert loop.done[-1] == outcome.iterations  # every iteration in the loop: no plain ones first
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)
    for k in range(3):  # new memory again, other values: captured once on the stepper's own copy
        other = A + np.diag(np.linspace(0.5, 1.0, A.shape[0]) * (k + 1))
        y, outcome = solve_with_outcome(method, other, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
        assert loop.runs == 3 + k and loop.captures == 3 and loop.starts == k  # then copied in, started
        assert outcome.info == 0 and np.linalg.norm(b - other @ y) <= 1e-9 * np.linalg.norm(b)


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_large_new_matrix_is_captured_on_not_copied(method, monkeypatch):
    from fusec.solvers import stepper
    monkeypatch.setattr(stepper, "OWN_MATRIX_BYTES", 1000)  # below the 40 x 40 float64 A
    A, b, _ = system(method, n=40, seed=5)
    program = OracleProgram(method)
    NumpyLoop.made.clear()
    solve_with_outcome(method, A, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    (loop,) = NumpyLoop.made
    for k in range(3):
        moved = A.copy()
        x, outcome = solve_with_outcome(method, moved, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
        assert loop.captures == 2 + k and loop.starts == 0  # on its own memory each time: no copy kept
        assert outcome.info == 0 and np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)


@pytest.mark.parametrize("method, n, dtype, guarded", [
    (CG, 16384, "float32", True), (CG, 16383, "float32", False), (BICGSTAB, 11585, "float32", False),
    (BICGSTAB, 11586, "float32", True), (CG, 11585, "float64", False), (CG, 1024, "float64", False),
], ids=lambda v: getattr(v, "name", str(v)))
def test_the_gpu_loop_guards_second_iterations_where_an_iteration_reads_a_gib_of_a(method, n, dtype, guarded):
    from fusec.solvers.api import matrix_bytes
    from fusec.solvers.device_loop import guards
    assert guards(matrix_bytes(method, n, dtype)) == guarded


@pytest.mark.parametrize("per_launch", [3, 4])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_launches_of_a_few_iterations_each_give_the_one_launchs_answer(method, per_launch):
    A, b, _ = system(method, n=40, seed=5)
    tol = 1e-10 * np.linalg.norm(b)

    def solved(most):
        NumpyLoop.made.clear()
        stepper = ProgramStepper(OracleProgram(method), method, NumpyArrays(), A, method.start(b * 0, b, np.copy),
                                 make_loop=NumpyLoop)
        outcome = run(stepper, float(b @ b), tol, 500, 16, on_device=True, most_per_launch=most)
        return stepper.x().copy(), outcome, NumpyLoop.made[0].runs

    x_one, one, launches = solved(None)
    x, outcome, many = solved(per_launch)
    assert launches == 1 and many == -(-(one.iterations - 2) // per_launch)  # two plain ones warm
    assert (outcome.info, outcome.iterations) == (one.info, one.iterations) == (0, one.iterations)
    np.testing.assert_array_equal(x, x_one)
    assert default_most_per_launch(4 * 16384 ** 2) == 465  # 0.25 s of 0.54 ms iterations
    assert abs(default_most_per_launch(0) - 25000) <= 1 and default_most_per_launch(1e15) == 16


@pytest.mark.parametrize("maxiter", [5, 6])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_the_gpu_loop_stops_at_maxiter_with_that_iterate(method, maxiter):
    A, b, x0 = system(method)
    x, info = solve(method, A, b, x0, rtol=0.0, maxiter=maxiter, program=OracleProgram(method), make_loop=NumpyLoop)
    assert info == maxiter
    np.testing.assert_allclose(x, reference_iterates(method, A, b, x0, maxiter), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("broken", [5, 6], ids=["first-of-a-body", "second-of-a-body"])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_breakdown_inside_the_gpu_loop_is_found_from_its_checkpoint(method, broken):
    A, b, x0 = system(method, seed=3)
    program = BreaksAfter(method, x_after(method, A, b, x0, broken - 1))
    NumpyLoop.made.clear()
    x, outcome = solve_with_outcome(method, A, b, x0, rtol=0.0, program=program, make_loop=NumpyLoop)
    assert (outcome.info, outcome.iterations) == (-broken, broken - 1)
    np.testing.assert_array_equal(x, x_after(method, A, b, x0, broken - 1))
    assert NumpyLoop.made[0].runs == 1


def started(method, A, b, **kwargs):
    """A solve of ``A x = b`` by a stepper kept from a solve before on ``A`` (started on the GPU:
    no plain iterations, no capture), and the loop it ran."""
    program = kwargs.pop("program", None) or OracleProgram(method)
    NumpyLoop.made.clear()
    solve_with_outcome(method, A, np.ones_like(b), rtol=1e-10, program=program, make_loop=NumpyLoop)
    (loop,) = NumpyLoop.made
    result = solve_with_outcome(method, A, b, program=program, make_loop=NumpyLoop, **kwargs)
    assert loop.captures == 1 and loop.starts == 1
    return result, loop


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_kept_steppers_next_solve_starts_on_the_gpu_with_the_hosts_answer(method):
    A, b, _ = system(method, n=40, seed=5)
    x_host, host = solve_with_outcome(method, A, b, rtol=1e-10, check_every=1, program=OracleProgram(method))
    (x, outcome), loop = started(method, A, b, rtol=1e-10)
    assert (outcome.info, outcome.iterations) == (host.info, host.iterations) and host.info == 0
    assert loop.done[-1] == outcome.iterations  # every iteration in the one launch
    np.testing.assert_array_equal(x, x_host)


@pytest.mark.parametrize("maxiter", [5, 6])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_started_solve_stops_at_maxiter_with_that_iterate(method, maxiter):
    A, b, _ = system(method)
    (x, outcome), _ = started(method, A, b, rtol=0.0, maxiter=maxiter)
    assert (outcome.info, outcome.iterations) == (maxiter, maxiter)
    np.testing.assert_allclose(x, reference_iterates(method, A, b, np.zeros_like(b), maxiter), rtol=1e-12,
                               atol=1e-13)


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_started_solve_of_b_within_the_tolerance_is_zeros(method):
    A, b, _ = system(method, n=40, seed=5)
    (x, outcome), loop = started(method, A, b, atol=2 * np.linalg.norm(b))
    assert (outcome.info, outcome.iterations) == (0, 0) and loop.done[-1] == 0
    np.testing.assert_array_equal(x, np.zeros_like(b))


@pytest.mark.parametrize("broken", [5, 6], ids=["first-of-a-body", "second-of-a-body"])
@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_a_breakdown_in_a_started_solve_is_found_from_its_checkpoint(method, broken):
    A, b, _ = system(method, seed=3)
    zeros = np.zeros_like(b)
    program = BreaksAfter(method, x_after(method, A, b, zeros, broken - 1))
    (x, outcome), _ = started(method, A, b, rtol=0.0, program=program)
    assert (outcome.info, outcome.iterations) == (-broken, broken - 1)
    np.testing.assert_array_equal(x, x_after(method, A, b, zeros, broken - 1))


@pytest.mark.parametrize("spoil, name, says", [
    (lambda A, b: b.__setitem__(3, np.nan), "b", "contains NaN or infinity"),
    (lambda A, b: A.__setitem__((7, slice(None)), 0.0), "A", "row 7 is zero: A is singular"),
    (lambda A, b: A.__setitem__((slice(None), 2), 0.0), "A", "column 2 is zero: A is singular"),
    (lambda A, b: A.__setitem__((1, 1), np.inf), "A", "contains NaN or infinity"),
], ids=["nan-in-b", "zero-row", "zero-column", "inf-in-A"])
def test_a_started_solve_refuses_what_the_checks_refuse_and_the_next_solve_is_right(spoil, name, says):
    A, b, _ = system(CG, n=40, seed=6)
    program = OracleProgram(CG)
    NumpyLoop.made.clear()
    solve_with_outcome(CG, A, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    (loop,) = NumpyLoop.made
    kept, bad = A.copy(), b.copy()
    spoil(A, bad)  # A in place: the memory the loop was captured on
    with pytest.raises(ArgumentError, match=re.escape(says)) as caught:
        solve_with_outcome(CG, A, bad, rtol=1e-10, program=program, make_loop=NumpyLoop)
    assert caught.value.argument == name and loop.starts == 1 and loop.done[-1] == 0
    A[...] = kept
    x, outcome = solve_with_outcome(CG, A, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    assert outcome.info == 0 and loop.starts == 2
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)


def test_a_solve_looping_on_the_gpu_does_not_look_up_the_gpus_bandwidth(monkeypatch):
    from fusec.solvers import api

    def looked_up(**_):
        raise AssertionError("the bandwidth is for the host's check_every only")

    monkeypatch.setattr(api, "resolve", looked_up)
    A, b, _ = system(CG, n=40, seed=6)
    _, info = solve(CG, A, b, rtol=1e-10, program=OracleProgram(CG), make_loop=NumpyLoop)
    assert info == 0
    with pytest.raises(AssertionError, match="host's check_every"):
        solve(CG, A, b, rtol=1e-10, program=OracleProgram(CG))  # no loop: the host's, 16 or fewer


def test_a_refused_loop_capture_warns_and_the_host_loops():
    A, b, _ = system(CG, n=40, seed=6)
    with pytest.warns(FusecWarning, match="loops on the host.*CUDA_ERROR_NOT_SUPPORTED"):
        x, outcome = solve_with_outcome(CG, A, b, rtol=1e-10, program=OracleProgram(CG), make_loop=RefusedLoop,
                                        bandwidth=1e30)  # an instant iteration: check_every 16
    assert outcome.info == 0 and (outcome.iterations - 2) % 16 == 0  # two to warm, then 16 at a time
    assert np.linalg.norm(b - A @ x) <= 1e-9 * np.linalg.norm(b)


# -- the default check_every ----------------------------------------------------------------------

@pytest.mark.parametrize("seconds, every", [(1e-6, 16), (62.5e-6, 16), (63e-6, 8), (92e-6, 8), (200e-6, 4),
                                            (368e-6, 2), (500e-6, 2), (501e-6, 1), (736e-6, 1), (1.5e-3, 1)])
def test_default_check_every_keeps_a_chunk_within_a_millisecond(seconds, every):
    assert every_for_seconds(seconds) == every


@pytest.mark.parametrize("method, n, dtype, every", [
    (CG, 1024, "float32", 16), (CG, 4096, "float64", 16), (CG, 8192, "float32", 8), (BICGSTAB, 8192, "float32", 4),
    (CG, 16384, "float32", 2), (BICG, 16384, "float32", 2), (BICGSTAB, 16384, "float32", 1),
    (CG, 16384, "float64", 1), (CG, 32768, "float32", 1),
], ids=lambda v: getattr(v, "name", str(v)))
def test_default_check_every_from_the_passes_over_A(method, n, dtype, every):
    # at 2.9 TB/s (the H100's copy): one pass over a float32 A of n = 16384 takes 370 us
    assert default_check_every(method, n, dtype, bandwidth=2.9e12) == every


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_the_solve_reads_as_often_as_the_default_says(method):
    A, b, _ = system(method, n=50, seed=4)
    program = OracleProgram(method)
    _, exact = solve_with_outcome(method, A, b, rtol=1e-11, check_every=1, program=program)
    needed = exact.iterations
    assert exact.info == 0 and needed % 16 != 0  # (else reading every 16 would stop there too)
    # a fast GPU: 16 iterations between reads; a slow one: one
    _, fast = solve_with_outcome(method, A, b, rtol=1e-11, program=program, bandwidth=1e30)
    _, slow = solve_with_outcome(method, A, b, rtol=1e-11, program=program, bandwidth=1.0)
    assert (fast.info, fast.iterations) == (0, -(-needed // 16) * 16)
    assert (slow.info, slow.iterations) == (0, needed)


# -- breakdown and the trivial cases --------------------------------------------------------------

@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_breakdown_is_reported_with_the_iterate_before(method):
    # skew-symmetric A: p . A p = 0, a zero denominator in the first iteration of every method
    # (integer values: the sums are exact, so the zero is)
    rng = np.random.default_rng(2)
    m = rng.integers(-4, 5, (8, 8)).astype(np.float64)
    A, b, x0 = m - m.T, rng.integers(-4, 5, 8).astype(np.float64), np.zeros(8)
    x, info = solve(method, A, b, x0, check_every=4, program=OracleProgram(method))
    assert info == -1
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("method", [CG, BICG], ids=["cg", "bicg"])
def test_exact_solution_inside_a_chunk_is_converged_not_nan(method):
    # A = I: the first iteration solves exactly; the next would divide 0 by 0
    A, b = np.eye(5), np.arange(1.0, 6.0)
    x, info = solve(method, A, b, rtol=0.0, check_every=4, program=OracleProgram(method))
    assert info == 0
    np.testing.assert_allclose(x, b, rtol=1e-15)


@pytest.mark.parametrize("check_every", [1, 4])
@pytest.mark.parametrize("scale, x0", [(1.0, None), (4.0, np.ones(5))], ids=["I-x0=0", "4I-x0=1"])
def test_bicgstab_exact_half_step_is_converged(scale, x0, check_every):
    # A = c I: alpha = 1 / c, so s = r - alpha A p = 0 exactly and omega = 0 / 0 in the first
    # iteration; h = x + alpha p solves the system, and SciPy stops there converged: so does fusec
    A, b = scale * np.eye(5), np.arange(1.0, 6.0)
    x, info = solve(BICGSTAB, A, b, x0, rtol=0.0, check_every=check_every, program=OracleProgram(BICGSTAB))
    assert info == 0
    assert np.linalg.norm(b - A @ x) == 0.0  # rtol = 0: the true residual is exactly zero
    np.testing.assert_array_equal(x, b / scale)


def half_step_system(epsilon):
    """A singular 4 x 4 system where BiCGStab's first half step leaves s with A s = 0: omega =
    0 / 0, and h = b has the true residual s, of norm epsilon. A = u b^T (rank one, no zero row
    or column: the checks refuse those) with b = (1/2, ...) and u = b - s, s = (-e, e, -e, e) / 2:
    b.b = 1, A b = u, alpha = b.b / b.A b = 1 / b.u = 1, s = b - u, A s = u (b.s) = 0 (epsilon
    a power of 2, so every operation is exact)."""
    b = np.full(4, 0.5)
    s = np.array([-1.0, 1.0, -1.0, 1.0]) * epsilon / 2
    return np.outer(b - s, b), b


@pytest.mark.parametrize("check_every", [1, 4])
def test_bicgstab_tiny_half_step_residual_above_the_tolerance_is_a_reported_breakdown(check_every):
    epsilon = 2.0 ** -20
    A, b = half_step_system(epsilon)
    x, info = solve(BICGSTAB, A, b, rtol=epsilon / 2, check_every=check_every, program=OracleProgram(BICGSTAB))
    assert info == -1
    np.testing.assert_array_equal(x, np.zeros(4))  # the iterate before, not NaN


@pytest.mark.parametrize("check_every", [1, 4])
def test_bicgstab_tiny_half_step_residual_within_the_tolerance_is_converged(check_every):
    epsilon = 2.0 ** -20
    A, b = half_step_system(epsilon)
    rtol = 2 * epsilon
    x, info = solve(BICGSTAB, A, b, rtol=rtol, check_every=check_every, program=OracleProgram(BICGSTAB))
    assert info == 0
    np.testing.assert_array_equal(x, b)  # h = x0 + alpha p with alpha = 1, p = b
    assert np.linalg.norm(b - A @ x) == epsilon <= rtol * np.linalg.norm(b)


@pytest.mark.parametrize("method", METHOD_LIST, ids=IDS)
def test_zero_b_is_converged_at_once(method):
    program = OracleProgram(method)
    x, info = solve(method, spd(4), np.zeros(4), program=program)
    assert info == 0 and program.calls == 0 and not x.any()


# -- bad arguments ----------------------------------------------------------------------------------

def _bad(**change):
    args = {"A": spd(4), "b": np.ones(4), "x0": None, "rtol": 1e-5, "atol": 0.0, "maxiter": None,
            "check_every": None}
    args.update(change)
    return args


@pytest.mark.parametrize("args, argument", [
    (_bad(A=np.ones((4, 3))), "A"),
    (_bad(A=np.ones(4)), "A"),
    (_bad(A=np.ones((0, 0))), "A"),
    (_bad(A=spd(4).astype(np.float16)), "A"),
    (_bad(A=np.asfortranarray(nonsymmetric(4))), "A"),
    (_bad(A=[[1.0, 0.0], [0.0, 1.0]]), "A"),
    (_bad(A=np.diag([1.0, np.nan, 1.0, 1.0])), "A"),
    (_bad(b=np.ones(5)), "b"),
    (_bad(b=np.ones((4, 1))), "b"),
    (_bad(b=np.ones(4, dtype=np.float32)), "b"),
    (_bad(b=np.array([1.0, np.nan, 0.0, 0.0])), "b"),
    (_bad(b=np.array([1.0, np.inf, 0.0, 0.0])), "b"),
    (_bad(b=None), "b"),
    (_bad(x0=np.ones(3)), "x0"),
    (_bad(x0=np.full(4, np.nan)), "x0"),
    (_bad(maxiter=0), "maxiter"),
    (_bad(maxiter=-3), "maxiter"),
    (_bad(maxiter=2.5), "maxiter"),
    (_bad(maxiter=True), "maxiter"),
    (_bad(check_every=0), "check_every"),
    (_bad(rtol=-1e-3), "rtol"),
    (_bad(rtol=1.0), "rtol"),
    (_bad(rtol=float("nan")), "rtol"),
    (_bad(rtol="1e-5"), "rtol"),
    (_bad(atol=-1.0), "atol"),
    (_bad(atol=float("inf")), "atol"),
    (_bad(rtol=10 ** 400), "rtol"),  # an int no float holds: was OverflowError
    (_bad(atol=-10 ** 400), "atol"),
    (_bad(bandwidth=10 ** 400), "bandwidth"),
    (_bad(bandwidth=0.0), "bandwidth"),
    (_bad(bandwidth=float("nan")), "bandwidth"),
    (_bad(bandwidth="3e12"), "bandwidth"),
    (_bad(graphs="no"), "graphs"),
    (_bad(graphs=None), "graphs"),
    (_bad(check_finite=1), "check_finite"),
    (_bad(check_finite=None), "check_finite"),
    (_bad(b=np.array([1.0, np.nan, 0.0, 0.0]), check_finite=False), "b"),
    (_bad(x0=np.full(4, np.inf), check_finite=False), "x0"),
])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_bad_arguments_name_the_argument_before_anything_runs(name, args, argument):
    program, args = OracleProgram(METHODS[name]), dict(args)
    with pytest.raises(ArgumentError) as caught:
        solve(METHODS[name], args.pop("A"), args.pop("b"), args.pop("x0"), program=program, **args)
    assert caught.value.argument == argument
    assert program.calls == 0


# -- A with a zero row or column: singular, named before anything runs -----------------------------

def with_zeros(n, rows=(), columns=(), dtype=np.float64):
    """A nonsymmetric A of no zero entry, with the given rows and columns zero."""
    A = nonsymmetric(n, seed=n)
    A[np.abs(A) < 1e-3] = 1.0
    A[list(rows), :] = 0
    A[:, list(columns)] = 0
    return A.astype(dtype)


@pytest.mark.parametrize("A, message", [
    (with_zeros(5, rows=[3]), "row 3 is zero"),
    (with_zeros(5, rows=[3], dtype=np.float32), "row 3 is zero"),
    (with_zeros(5, columns=[0]), "column 0 is zero"),
    (with_zeros(40, rows=[17, 2, 39]), "row 2 is the first of 3 zero rows"),
    (with_zeros(6, rows=[4], columns=[5, 1]), "row 4 is zero; column 1 is the first of 2 zero columns"),
    (np.zeros((3, 3)), "row 0 is the first of 3 zero rows; column 0 is the first of 3 zero columns"),
    (np.zeros((1, 1)), "row 0 is zero; column 0 is zero"),
    (np.array([[2.0, 1.0], [-0.0, -0.0]]), "row 1 is zero"),
], ids=["row", "row-float32", "column", "rows", "row-and-columns", "zero-matrix", "n=1", "minus-zero"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_zero_row_or_column_of_A_is_named_before_anything_runs(name, A, message):
    program = OracleProgram(METHODS[name])
    with pytest.raises(ArgumentError) as caught:
        solve(METHODS[name], A, np.ones(len(A), A.dtype), program=program)
    assert caught.value.argument == "A"
    assert str(caught.value) == f"argument 'A': {message}: A is singular"
    assert program.calls == 0


@pytest.mark.parametrize("A", [
    np.diag([1.0, np.nan, 1.0, 1.0]),  # a NaN row is not zero
    with_zeros(4, rows=[2], columns=[0]) + np.diag([0.0, np.inf, 0.0, 0.0]),  # NaN and infinity first
], ids=["nan-row", "inf-and-zero-lines"])
def test_nan_or_infinity_in_A_is_reported_before_its_zero_rows(A):
    with pytest.raises(ArgumentError) as caught:
        solve(CG, A, np.ones(4), program=OracleProgram(CG))
    assert caught.value.argument == "A"
    assert str(caught.value) == "argument 'A': contains NaN or infinity (its sum is not finite)"


@pytest.mark.parametrize("A", [
    np.diag([1.0, np.nan, 1.0, 1.0]),
    with_zeros(4, rows=[2], columns=[0]),
], ids=["nan", "zero-lines"])
def test_without_check_finite_A_is_not_surveyed(A):
    """check_finite=False: A is not read before the solve (NaN and zero lines pass the checks),
    b and x0 still are, and ||b||^2 is the same number."""
    problem = checks.check(NumpyArrays(), A, np.arange(4.0), None, 1e-5, 0.0, None, None, check_finite=False)
    assert problem.b_squared_norm == 14.0
    with pytest.raises(ArgumentError) as caught:
        checks.check(NumpyArrays(), A, np.arange(4.0), None, 1e-5, 0.0, None, None)
    assert caught.value.argument == "A"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_check_finite_changes_nothing_for_a_sound_A(name):
    method = METHODS[name]
    A = spd(24) if name == "cg" else nonsymmetric(24)
    b = np.random.default_rng(5).uniform(-1, 1, 24)
    checked = solve(method, A, b, program=OracleProgram(method))
    unchecked = solve(method, A, b, program=OracleProgram(method), check_finite=False)
    np.testing.assert_array_equal(checked[0], unchecked[0])
    assert checked[1] == unchecked[1] == 0


@pytest.mark.parametrize("A", [np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[-3.0]]), with_zeros(33)],
                         ids=["permutation", "n=1", "full"])
def test_a_with_zero_entries_but_no_zero_row_or_column_is_accepted(A):
    n = len(A)
    problem = checks.check(NumpyArrays(), A, np.ones(n), None, 1e-5, 0.0, None, None)
    assert (problem.n, problem.b_squared_norm) == (n, float(n))


def zero_lines(A):
    """[zero rows, the first (-1: none), zero columns, the first] by NumPy on the whole matrix."""
    found = []
    for nonzero in ((A != 0).any(1), (A != 0).any(0)):
        zero = np.flatnonzero(~nonzero)
        found += [len(zero), int(zero[0]) if len(zero) else -1]
    return found


@pytest.mark.parametrize("block", [1, 3, 64, 1 << 22])
@pytest.mark.parametrize("n", [1, 2, 31, 33, 100])
def test_the_numpy_survey_finds_zero_lines_by_blocks_of_rows_as_the_whole_matrix_does(n, block, monkeypatch):
    monkeypatch.setattr(solver_arrays, "BLOCK_ELEMENTS", block * n)  # blocks of `block` rows
    rng = np.random.default_rng([n, block])
    for trial in range(4):
        A = rng.standard_normal((n, n)) * (rng.random((n, n)) < 0.9)
        A[rng.random(n) < 0.2, :] = 0
        A[:, rng.random(n) < 0.2] = 0
        if trial == 3:
            A[rng.integers(n), :] = np.nan
        b = rng.standard_normal(n)
        found = NumpyArrays().survey(A, b, None)
        assert list(found[4:]) == zero_lines(A)
        assert found[:2] == (1.0, 1.0)
        assert found.bb == pytest.approx(b @ b)
        assert np.isnan(found.A_sum) == (trial == 3)


def test_public_functions_take_scipys_arguments():
    import fusec.solvers
    for function in (fusec.solvers.cg, fusec.solvers.bicg, fusec.solvers.bicgstab):
        with pytest.raises(ArgumentError, match="maxiter"):
            function(spd(3), np.ones(3), None, rtol=1e-6, atol=0.0, maxiter=0)


def test_forgetting_the_kept_steppers_lets_go_of_their_own_matrices():
    import fusec.solvers
    from fusec.solvers import api
    A, b, _ = system(CG, n=40, seed=5)
    program = OracleProgram(CG)
    for matrix in (A, A.copy(), A.copy()):  # the third, the second change, is copied into the own matrix
        solve_with_outcome(CG, matrix, b, rtol=1e-10, program=program, make_loop=NumpyLoop)
    (kept,) = [k for k in api._KEPT._free.values() if k.stepper.program is program]
    assert kept.stepper.own_matrix is not None
    fusec.solvers.forget_kept_steppers()
    assert not any(k.stepper.program is program for k in api._KEPT._free.values())


class _OnGpu:
    """A stand-in for a CuPy array on GPU ``device`` (the checks look at its type's module,
    shape, dtype and ``device.id``; none of its values is read before the device check)."""
    __module__ = "cupy._core.core"

    def __init__(self, shape, device: int):
        self.shape, self.dtype, self.device = shape, np.dtype("float32"), types.SimpleNamespace(id=device)


class _ContiguousArrays:
    @staticmethod
    def contiguous(_):
        return True


@pytest.mark.parametrize("name", ["b", "x0"])
def test_a_cupy_vector_on_another_gpu_than_A_is_refused_by_name(name):
    A, on_0, on_1 = _OnGpu((4, 4), 0), _OnGpu((4,), 0), _OnGpu((4,), 1)
    b, x0 = (on_1, None) if name == "b" else (on_0, on_1)
    with pytest.raises(ArgumentError) as caught:
        checks.arguments(_ContiguousArrays(), A, b, x0, 1e-5, 0.0, None, None)
    assert caught.value.argument == name
    assert str(caught.value) == f"argument '{name}': is on GPU 1, but A is on GPU 0: pass both on one GPU"
    assert checks.arguments(_ContiguousArrays(), A, on_0, on_0, 1e-5, 0.0, None, None).n == 4
