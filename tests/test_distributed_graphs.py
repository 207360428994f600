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
from tests.helpers import ROOT, library, script_dag

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


