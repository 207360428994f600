"""CPU tier: distributed calls captured in CUDA graphs (DistributedProgram.capture, the
distributed solvers' ``graphs=``), on thread ranks with the oracle for the stages.

NumPy cannot capture, so two fakes stand in for CuPy's stream capture (monkeypatched onto the
NumPy helper of :mod:`fusec.distributed.arrays`, with thread ranks made capturable):

- ``running``: the calls run inside the capture (NumPy does the work at once) and a launch
  does nothing. What is checked is what the program does while capturing: no watch, no host
  wait, the collectives listed; and that a launch is watched once.
- ``recording``: inside the capture a call of the program is recorded, not run (its ``out=``
  arrays returned as they are); a launch runs the calls recorded, on the arrays recorded, as a
  CUDA graph replays the addresses it was captured with. A solve with it must give the bits of
  the solve without graphs, on every rank, breakdowns included.

Without the fakes (thread ranks cannot capture), ``graphs=True`` is the plain solve.
"""

from __future__ import annotations

import math
import re
import threading

import numpy as np
import pytest

import fusec.distributed as fd
import fusec.distributed.solvers as ds
from fusec import oracle
from fusec.distributed import arrays as dist_arrays
from fusec.distributed import program as dist_program
from fusec.distributed import watchdog
from fusec.distributed.comm import Communicator, NcclComm, TorchComm
from fusec.distributed.threads import ThreadComm, oracle_executor, run_ranks
from fusec.errors import ArgumentError, FusecWarning
from tests.helpers import ROOT, library, script_dag
from tests.test_distributed_solvers import system

CG = str(ROOT / "scripts" / "solvers" / "cg.script")


class Capturing:
    """What the fakes saw: whether a capture is under way (one flag for every thread rank: the
    ranks capture one after the other's barrier, so a flag per rank is kept), and the launches."""

    def __init__(self):
        self.now: dict[int, bool] = {}
        self.launches: dict[int, int] = {}
        self.captures: dict[int, int] = {}


@pytest.fixture
def capturing():
    return Capturing()


def _rank() -> int:
    """The thread rank running here (run_ranks names its threads fusec-rank-R)."""
    return int(threading.current_thread().name.rsplit("-", 1)[1])


@pytest.fixture
def running(monkeypatch, capturing):
    """Thread ranks that capture by running the calls at once (see the module's docstring)."""
    class Graph:
        def __init__(self, rank):
            self.rank = rank

        def launch(self, stream):
            capturing.launches[self.rank] = capturing.launches.get(self.rank, 0) + 1

    def capture(helper, stream, issue):
        rank = _rank()
        capturing.now[rank] = True
        try:
            issue()
        finally:
            capturing.now[rank] = False
        capturing.captures[rank] = capturing.captures.get(rank, 0) + 1
        return Graph(rank)
    monkeypatch.setattr(ThreadComm, "capturable", True)
    monkeypatch.setattr(dist_arrays.NumpyArrays, "capture", capture)
    return capturing


@pytest.fixture
def recording(monkeypatch, capturing):
    """Thread ranks that capture by recording the calls and replay them (see the module's docstring)."""
    real_run = dist_program.DistributedProgram.run
    recorded: dict[int, list | None] = {}

    def run(self, arrays, *, stream=None, timings=False, out=None):
        calls = recorded.get(_rank()) if self.comm is not None else None
        if calls is None:
            return real_run(self, arrays, stream=stream, timings=timings, out=out)
        assert out is not None and set(out) == set(self.outputs), "a captured call writes every result into out="
        calls.append((self, dict(arrays), stream, dict(out)))
        results = tuple(out[name] for name in self.outputs)
        return results if len(results) > 1 else results[0]

    class Graph:
        def __init__(self, rank, calls):
            self.rank, self.calls = rank, calls

        def launch(self, stream):
            capturing.launches[self.rank] = capturing.launches.get(self.rank, 0) + 1
            for program, arrays, call_stream, out in self.calls:
                real_run(program, arrays, stream=call_stream, out=out)

    def capture(helper, stream, issue):
        rank = _rank()
        recorded[rank] = []
        try:
            issue()
        finally:
            calls, recorded[rank] = recorded[rank], None
        capturing.captures[rank] = capturing.captures.get(rank, 0) + 1
        return Graph(rank, calls)
    monkeypatch.setattr(ThreadComm, "capturable", True)
    monkeypatch.setattr(dist_program.DistributedProgram, "run", run)
    monkeypatch.setattr(dist_arrays.NumpyArrays, "capture", capture)
    return capturing


def _solve(ranks, name, A, b, x0=None, **options):
    n = len(b)

    def work(comm):
        lo, hi = ds.rows(n, comm)
        return getattr(ds, name)(A[lo:hi], b[lo:hi], None if x0 is None else x0[lo:hi], comm=comm,
                                 executor=oracle_executor(library(), "float64"), **options)
    results = run_ranks(ranks, work, timeout=120)
    return np.concatenate([x for x, _ in results]), [info for _, info in results]


# ---------------------------------------------------------------------------------------------- choosing


def test_which_communicators_capture():
    """NCCL through CuPy captures; torch.distributed, thread ranks and the base class do not."""
    assert NcclComm.capturable and not TorchComm.capturable and not ThreadComm.capturable
    assert not Communicator.capturable


def test_a_program_that_cannot_capture_never_calls_issue():
    """Thread ranks (NumPy), and one process (the plain program): capture gives None, issuing nothing."""
    def work(comm):
        prog = fd.compile(CG, dtype="float64", sizes={"n": 9}, comm=comm, latency=False,
                          executor=oracle_executor(library(), "float64"))
        assert not prog.capturable
        return prog.capture(lambda: pytest.fail("issued"))
    assert run_ranks(2, work) == [None, None]
    one = fd.compile(CG, dtype="float64", sizes={"n": 9}, comm=None, executor=oracle_executor(library(), "float64"))
    assert not one.capturable and one.capture(lambda: pytest.fail("issued")) is None


@pytest.mark.filterwarnings("ignore::fusec.errors.FusecWarning")
def test_plans_and_calls_that_would_allocate_inside_a_capture_are_not_captured(running):
    """A rank holding no rows makes its blocks anew every call, and a call without out= for a
    result makes that result anew: an array made inside a capture is freed after it while the
    graph still writes it. Such a plan is not capturable (on every rank: it reads the plan); such
    a call makes the capture fail on its rank, and so give None on every rank."""
    dag = script_dag("solvers/cg")
    inputs = oracle.random_inputs(dag, {"n": 13}, "float64", 4)

    def work(comm):
        idle = fd.compile(CG, dtype="float64", sizes={"n": 13}, comm=comm, latency=False, active=1,
                          executor=oracle_executor(library(), "float64"))
        prog = fd.compile(CG, dtype="float64", sizes={"n": 13}, comm=comm, latency=False,
                          executor=oracle_executor(library(), "float64"))
        local = {k: prog.local(k, v) for k, v in inputs.items()}
        out = {name: np.full(prog.local_shape(name), np.nan) for name in prog.outputs}
        prog(**local, out=out)
        partly = {k: v for k, v in out.items() if k != "rr1"}
        # rank 0 captures nothing (this fake runs what it captures: a collective there would meet
        # rank 1's agreement), rank 1 a call lacking an out= array
        issue = (lambda: None) if comm.rank == 0 else (lambda: prog(**local, out=partly))
        return idle.capturable, prog.capturable, prog.capture(issue)
    assert run_ranks(2, work) == [(False, True, None), (False, True, None)]
    assert running.captures == {0: 1}  # rank 1's capture raised: not counted


def test_graphs_on_ranks_that_cannot_capture_are_the_plain_solve(monkeypatch):
    A, b = system(21, symmetric=True)
    plain = _solve(2, "cg", A, b, rtol=1e-8)
    monkeypatch.setenv(ds.GRAPHS_VARIABLE, "1")
    asked = _solve(2, "cg", A, b, rtol=1e-8)
    np.testing.assert_array_equal(asked[0], plain[0])
    assert asked[1] == plain[1] == [0, 0]


@pytest.mark.parametrize(("set_to", "captures"), [(None, True), ("1", True), ("0", False)])
def test_graphs_are_on_unless_the_variable_says_0(recording, monkeypatch, set_to, captures):
    """Measured faster in every case run on two H200s, graphs are the default where the
    communicator captures; $FUSEC_DISTRIBUTED_GRAPHS=0 makes plain calls (the same bits)."""
    monkeypatch.delenv(ds.GRAPHS_VARIABLE, raising=False)
    if set_to is not None:
        monkeypatch.setenv(ds.GRAPHS_VARIABLE, set_to)
    A, b = system(23, symmetric=True)
    plain = _solve(2, "cg", A, b, rtol=1e-30, maxiter=6, graphs=False)
    assert recording.captures == {}
    chosen = _solve(2, "cg", A, b, rtol=1e-30, maxiter=6)
    np.testing.assert_array_equal(chosen[0], plain[0])
    assert bool(recording.captures) == captures and bool(recording.launches) == captures


@pytest.mark.parametrize(("set_to", "given", "argument", "why"), [
    ("yes", None, "$FUSEC_DISTRIBUTED_GRAPHS", "set it to 1 or 0"),
    (None, "yes", "graphs", "pass True or False"),
])
def test_a_bad_switch_is_an_argument_error(monkeypatch, set_to, given, argument, why):
    if set_to is not None:
        monkeypatch.setenv(ds.GRAPHS_VARIABLE, set_to)
    A, b = system(6, symmetric=True)
    options = {} if given is None else {"graphs": given}
    with pytest.raises(ArgumentError, match=rf"argument '{re.escape(argument)}': .*{why}"):
        ds.cg(A, b, executor=oracle_executor(library(), "float64"), **options)


# ---------------------------------------------------------------------------------------------- capturing


@pytest.mark.filterwarnings("ignore::fusec.errors.FusecWarning")
def test_nothing_waits_on_the_host_inside_a_capture_and_a_launch_is_watched_once(running, monkeypatch):
    """Inside the capture no collective is watched and nothing waits (the watchdog, a timed
    call); the captured collectives are listed in order; the ranks agree once, after it; each
    launch is watched by one event."""
    watched, waited = [], []
    real_watch, real_wait = watchdog.WATCHDOG.watch, watchdog.wait

    def watch(event, what, comm, timeout, policy):
        watched.append((comm.rank, running.now.get(comm.rank, False), what))
        return real_watch(event, what, comm, timeout, policy)

    def wait(event, what, comm, timeout, policy):
        waited.append((comm.rank, running.now.get(comm.rank, False), what))
        return real_wait(event, what, comm, timeout, policy)
    monkeypatch.setattr(watchdog.WATCHDOG, "watch", watch)
    monkeypatch.setattr(watchdog, "wait", wait)
    dag = script_dag("solvers/cg")
    inputs = oracle.random_inputs(dag, {"n": 13}, "float64", 3)

    def work(comm):
        prog = fd.compile(CG, dtype="float64", sizes={"n": 13}, comm=comm, latency=False,
                          executor=oracle_executor(library(), "float64"), results={"p1": "whole"})
        local = {k: prog.local(k, v) for k, v in inputs.items()}
        out = {name: np.full(prog.local_shape(name), np.nan) for name in prog.outputs}
        prog(**local, out=out)  # warm
        assert prog.capturable

        def timed():
            prog.run(local, out=out, timings=True)
        assert prog.capture(timed) is None  # a timed call inside a capture is refused (a warning)
        graph = prog.capture(lambda: prog(**local, out=out))
        graph.launch()
        graph.launch()
        return graph.collectives
    listed = run_ranks(2, work)
    assert listed[0] == listed[1] == ("the all-reduce of rr, pq (16 bytes)", "the all-reduce of rr1 (8 bytes)",
                                      "the all-gather of p1 (104 bytes)")
    assert not [w for w in watched if w[1]] and not [w for w in waited if w[1]]
    for rank in (0, 1):
        launches = [what for r, _, what in watched if r == rank and "CUDA graph" in what]
        assert launches == ["a CUDA graph of 3 collective(s): the all-reduce of rr, pq (16 bytes) first"] * 2
        agreed = [what for r, _, what in waited if r == rank and "agreement" in what]
        assert agreed == ["the ranks' agreement on a captured graph"] * 2  # one per capture, the refused one too


def test_a_rank_whose_capture_fails_makes_every_rank_run_plainly(recording, monkeypatch):
    """Rank 1's capture is refused (a CUDA error): both ranks get None (a collective is captured on
    all ranks or none), rank 1 warns, and the solve goes on with plain calls, the same bits."""
    real = dist_arrays.NumpyArrays.capture

    def refusing(helper, stream, issue):
        if _rank() == 1:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        return real(helper, stream, issue)
    monkeypatch.setattr(dist_arrays.NumpyArrays, "capture", refusing)
    A, b = system(23, symmetric=True)
    plain = _solve(2, "cg", A, b, rtol=1e-8, graphs=False)
    with pytest.warns(FusecWarning, match="rank 1: the calls are not captured in a CUDA graph"):
        graphs = _solve(2, "cg", A, b, rtol=1e-8, graphs=True)
    np.testing.assert_array_equal(graphs[0], plain[0])
    assert graphs[1] == plain[1] == [0, 0]
    assert recording.launches == {}


# ---------------------------------------------------------------------------------------------- replaying


@pytest.mark.parametrize("check_every", [1, 2, 3])
@pytest.mark.parametrize("name", ["cg", "bicg", "bicgstab"])
def test_a_solve_replaying_graphs_is_the_plain_solve_bit_for_bit(recording, name, check_every):
    A, b = system(29, symmetric=True, seed=5)  # eigenvalues 1 to 10: a score of iterations at least
    x0 = np.linspace(-1.0, 1.0, 29)
    plain = _solve(2, name, A, b, x0, rtol=1e-12, check_every=check_every, graphs=False)
    assert recording.launches == {}
    graphs = _solve(2, name, A, b, x0, rtol=1e-12, check_every=check_every, graphs=True)
    np.testing.assert_array_equal(graphs[0], plain[0])
    assert graphs[1] == plain[1] == [0, 0]
    # a graph from each turn the reads fall on (one for an even check_every), launched again and again
    graphs_made = 1 if check_every % 2 == 0 else 2
    assert recording.captures == {0: graphs_made, 1: graphs_made}
    assert recording.launches[0] == recording.launches[1] >= 2


@pytest.mark.parametrize("check_every", [1, 2])
@pytest.mark.parametrize("name", ["cg", "bicgstab"])  # BiCGStab: a fixed input (rh), kept in its array too
def test_solves_one_after_another_keep_their_graphs_while_the_matrix_stays(recording, name, check_every):
    """Solves on one communicator keep their stepper (its stream, its two sets of arrays, the graphs
    captured on them). A second solve on the same A (another b) captures nothing and replays
    from its first call; one on another A drops the graphs, warms and captures again; so does one
    where a single rank's A moved (the ranks agree: a graph replayed on one rank and captured on
    another would pair their collectives wrongly). Every solve gives the bits of a plain solve,
    and an x given back stays the caller's (the next solve does not write it)."""
    n, iterations = 29, 6
    A, b = system(n, symmetric=True, seed=5)
    other, b2 = A + np.eye(n), b[::-1].copy()
    x0 = np.linspace(-1.0, 1.0, n)
    options = {"rtol": 1e-30, "maxiter": iterations, "check_every": check_every}
    plain = [_solve(2, name, M, v, x0, graphs=False, **options)[0] for M, v in ((A, b), (A, b2), (other, b))]

    def work(comm):
        lo, hi = ds.rows(n, comm)
        mine, theirs = np.ascontiguousarray(A[lo:hi]), np.ascontiguousarray(other[lo:hi])
        moved = theirs.copy() if comm.rank == 1 else theirs  # rank 1 alone passes other memory
        seen, executor = [], oracle_executor(library(), "float64")  # one: the programs are kept by it
        for M, v in ((mine, b), (mine, b2), (theirs, b), (moved, b)):
            x, info = getattr(ds, name)(M, v[lo:hi], x0[lo:hi], comm=comm, executor=executor, graphs=True,
                                        **options)
            seen.append((x, info, recording.captures.get(comm.rank, 0), recording.launches.get(comm.rank, 0)))
        return seen
    ranks = run_ranks(2, work, timeout=120)
    assert len(ds._STEPPERS) > 0
    ds.forget_programs()
    assert len(ds._STEPPERS) == 0
    for solve, expected in enumerate((plain[0], plain[1], plain[2], plain[2])):
        np.testing.assert_array_equal(np.concatenate([seen[solve][0] for seen in ranks]), expected)
        assert [seen[solve][1] for seen in ranks] == [iterations] * 2
    reads = -(-iterations // check_every)
    turns = 1 if check_every % 2 == 0 else 2  # the graphs a matrix needs: one from each turn a read falls on
    for seen in ranks:
        captures = [c for _, _, c, _ in seen]
        launches = [count for *_, count in seen]
        assert captures == [turns, turns, 2 * turns, 3 * turns]
        assert launches[1] - launches[0] == reads  # the second solve: every call a replay
        assert launches[2] - launches[1] < reads and launches[3] - launches[2] == launches[2] - launches[1]


def test_the_kept_graphs_go_before_the_communicators_fusec_made_are_destroyed(monkeypatch):
    """NCCL's destroy waits until every graph holding the communicator's collectives is destroyed:
    at exit the solvers' kept steppers (their graphs) are dropped first, then the communicators
    fusec made destroyed; a hook that raises does not stop the destroys."""
    from fusec.distributed import comm as comm_module
    assert ds.forget_programs in comm_module._BEFORE_CLOSING
    order = []

    class Nccl:
        def destroy(self):
            order.append("destroy")
    made = NcclComm.__new__(NcclComm)
    made.nccl, made.failed = Nccl(), None

    def failing():
        order.append("failing")
        raise RuntimeError("exiting")
    monkeypatch.setattr(comm_module, "_MADE", {"mpi": made})
    monkeypatch.setattr(comm_module, "_BEFORE_CLOSING", [failing, lambda: order.append("forget")])
    comm_module._close_made()
    assert order == ["failing", "forget", "destroy"]


@pytest.mark.filterwarnings("ignore::fusec.errors.FusecWarning")
def test_at_exit_every_graph_still_held_is_released_first(running):
    """A graph a caller (or a kept stepper) still holds at exit would hang the destroy of the
    communicator fusec made: the hook run before the destroys releases every one; a launch after
    it is a FusecError, not a launch of a destroyed graph."""
    from fusec.distributed import comm as comm_module
    from fusec.errors import FusecError
    assert dist_program._release_captured in comm_module._BEFORE_CLOSING
    dag = script_dag("solvers/cg")
    inputs = oracle.random_inputs(dag, {"n": 13}, "float64", 5)

    def work(comm):
        prog = fd.compile(CG, dtype="float64", sizes={"n": 13}, comm=comm, latency=False,
                          executor=oracle_executor(library(), "float64"))
        local = {k: prog.local(k, v) for k, v in inputs.items()}
        out = {name: np.full(prog.local_shape(name), np.nan) for name in prog.outputs}
        prog(**local, out=out)
        return prog.capture(lambda: prog(**local, out=out))
    held = run_ranks(2, work)
    assert all(graph.graph is not None for graph in held)
    dist_program._release_captured()
    assert all(graph.graph is None for graph in held)
    with pytest.raises(FusecError, match="released"):
        held[0].launch()


def test_the_iterations_a_solve_stops_at_are_the_same(recording):
    A, b = system(25, symmetric=True)
    plain = _solve(3, "cg", A, b, rtol=1e-12, maxiter=7, graphs=False)
    graphs = _solve(3, "cg", A, b, rtol=1e-12, maxiter=7, graphs=True)
    assert graphs[1] == plain[1] == [7, 7, 7]
    np.testing.assert_array_equal(graphs[0], plain[0])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning",
                            "ignore:overflow:RuntimeWarning")  # the oracle
@pytest.mark.parametrize("check_every", [1, 2])
def test_a_breakdown_after_replays_goes_back_and_reports_the_iterate_before(recording, check_every):
    """CG on diag(1, 12, 15, 0) from b = (2, 2, 2, 1): exact sums, the part of r in A's range is
    exactly zero after three iterations' worth of rounding, and p . A p = 0 at iteration 7. That
    iteration is a replay; the solve goes back (to the set before it, or to copies of the state
    before two calls, whose next call is plain) and reports info -7 and the iterate before, on
    every rank, as without graphs."""
    A, b = np.diag([1.0, 12.0, 15.0, 0.0]), np.array([2.0, 2.0, 2.0, 1.0])
    plain = _solve(2, "cg", A, b, rtol=1e-12, check_every=check_every, graphs=False)
    graphs = _solve(2, "cg", A, b, rtol=1e-12, check_every=check_every, graphs=True)
    assert graphs[1] == plain[1] and plain[1][0] == plain[1][1] < -4  # broke down after graphs were replayed
    np.testing.assert_array_equal(graphs[0], plain[0])
    assert all(math.isfinite(v) for v in graphs[0]) and recording.launches[0] >= 1


def test_going_back_replays_only_from_the_set_it_was_captured_on():
    """The stepper with a fake iteration: a graph is captured for (turn, calls) once both turns
    have run plainly from the sets, replayed only where the state lies in the set it reads; after
    going back to copies (an advance of several calls) the next call is plain."""
    from fusec.distributed.solvers import DistributedStepper
    from fusec.solvers.arrays import NumpyArrays
    from fusec.solvers.methods import METHODS

    class Iteration:  # x1 = x + 1, ...; capture records the calls, launch replays them
        outputs = ("x1", "r1", "p1", "rr1")
        capturable = True

        def __init__(self):
            self.recording, self.plain, self.captured = None, 0, []

        def __call__(self, A, out=None, **state):
            if self.recording is not None:
                self.recording.append((dict(state), out))
                return tuple(out[name] for name in self.outputs)
            self.plain += 1
            for array in (out or {}).values():
                assert not any(np.shares_memory(array, v) for v in state.values())
            results = {f"{k}1": v + 1.0 for k, v in state.items()}
            results["rr1"] = np.array(1.0)
            for name, value in results.items():
                if out:
                    out[name][...] = value
                    results[name] = out[name]
            return tuple(results[name] for name in self.outputs)

        def capture(self, issue):
            self.recording = []
            issue()
            calls, self.recording = self.recording, None
            self.captured.append(len(calls))
            iteration = self

            class Graph:
                def launch(self):
                    for state, out in calls:
                        iteration.plain -= 1  # counted as replayed, not plain
                        iteration(None, out=out, **state)
            return Graph()

    zeros = np.zeros(3)
    iteration = Iteration()
    stepper = DistributedStepper(METHODS["cg"], iteration, None, np.copy, NumpyArrays(), np.eye(3), zeros, zeros,
                                 set(), graphs=True)
    for _ in range(3):  # from the start (plain), then each turn from the sets (plain: warming)
        stepper.advance(1)
    assert iteration.plain == 3 and iteration.captured == []
    stepper.advance(1)  # turn 1: captured and launched
    stepper.advance(1)  # turn 0: captured and launched
    stepper.advance(1)  # turn 1: replayed
    assert iteration.captured == [1, 1] and iteration.plain == 3
    np.testing.assert_array_equal(stepper.x(), np.full(3, 6.0))
    stepper.advance(2)  # captured: two calls
    assert iteration.captured == [1, 1, 2]
    np.testing.assert_array_equal(stepper.x(), np.full(3, 8.0))
    stepper.restore()  # back to copies of the state before the two calls
    np.testing.assert_array_equal(stepper.x(), np.full(3, 6.0))
    stepper.advance(1)  # from copies: plain
    assert iteration.plain == 4
    np.testing.assert_array_equal(stepper.x(), np.full(3, 7.0))
    stepper.advance(1)  # back in the sets: the graph of this turn replays
    assert iteration.plain == 4 and iteration.captured == [1, 1, 2]
    np.testing.assert_array_equal(stepper.x(), np.full(3, 8.0))
    before = stepper.x().copy()
    stepper.restore()  # one call back: the state still lies in a set, so a replay serves
    np.testing.assert_array_equal(stepper.x(), before - 1.0)
    stepper.advance(1)
    assert iteration.plain == 4
    np.testing.assert_array_equal(stepper.x(), before)
