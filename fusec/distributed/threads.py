"""Ranks that are threads of one process, on NumPy arrays: the whole of a
distributed program (plan, stages, conversions, collectives, idle ranks)
without GPUs, for tests and for trying a plan out.

:class:`ThreadComm` exchanges arrays through shared slots and a barrier with a
timeout; a rank that fails aborts the barrier, so the others raise at once.
:func:`oracle_executor` runs each stage with fusec's float64 oracle instead
of compiled kernels, so a distributed result differs from the oracle's only
by the order of its sums.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from .. import oracle
from ..errors import ArgumentError
from ..frontend import check, parse
from .comm import Communicator
from .errors import CollectiveError, CollectiveTimeoutError


class ThreadGroup:
    """``size`` ranks, each a thread holding ``group.comm(rank)``."""

    def __init__(self, size: int, timeout: float = 30.0):
        self.size, self.timeout = size, timeout
        self.barrier = threading.Barrier(size)
        self.slots: list[Any] = [None] * size
        self.aborted = False

    def comm(self, rank: int) -> "ThreadComm":
        return ThreadComm(self, rank)


class ThreadComm(Communicator):
    backend = "threads"
    arrays_family = "numpy"

    def __init__(self, group: ThreadGroup, rank: int):
        super().__init__()
        self.group, self.rank, self.size, self.device = group, rank, group.size, None

    def _wait(self, what: str) -> None:
        try:
            self.group.barrier.wait(self.group.timeout)
        except threading.BrokenBarrierError:
            if self.group.aborted:
                error = CollectiveError(f"rank {self.rank} of {self.size}: {what}: another rank failed")
            else:
                error = CollectiveTimeoutError(
                    f"rank {self.rank} of {self.size}: {what} did not finish within {self.group.timeout:g} s")
            self.failed = self.failed or error
            raise error from None

    def _exchange(self, value, what: str) -> list:
        self.check()
        self.group.slots[self.rank] = value
        self._wait(what)
        values = list(self.group.slots)
        self._wait(what)  # nobody writes a slot again before every rank has read them
        return values

    def all_reduce(self, send, recv, stream=None) -> None:
        values = self._exchange(np.array(send), "all-reduce")
        recv[...] = sum(values[1:], values[0])

    def all_gather(self, send, recv, counts, stream=None) -> None:
        recv[...] = np.concatenate(self._exchange(np.array(send), "all-gather"))

    def reduce_scatter(self, send, recv, counts, stream=None) -> None:
        values = self._exchange(np.array(send), "reduce-scatter")
        total = sum(values[1:], values[0])
        lo = sum(counts[:self.rank])
        recv[...] = total[lo:lo + counts[self.rank]]

    def broadcast(self, buffer, root: int, stream=None) -> None:
        values = self._exchange(np.array(buffer) if self.rank == root else None, "broadcast")
        buffer[...] = values[root]

    def scatter(self, blocks, recv, root: int, stream=None) -> None:
        values = self._exchange([np.array(b) for b in blocks] if self.rank == root else None, "scatter")
        recv[...] = values[root][self.rank]

    def gather(self, send, blocks, root: int, stream=None) -> None:
        values = self._exchange(np.array(send), "gather")
        if self.rank == root:
            for block, value in zip(blocks, values):
                block[...] = value

    def abort(self) -> None:
        self.group.aborted = True
        self.group.barrier.abort()


def run_ranks(size: int, work: Callable[[ThreadComm], Any], timeout: float = 30.0) -> list:
    """``work(comm)`` on ``size`` threads, one a rank; their results in rank
    order. A rank that raises aborts the others' collectives, and the first
    error (by rank) is raised here once every thread has ended."""
    group = ThreadGroup(size, timeout)
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def body(rank: int) -> None:
        comm = group.comm(rank)
        try:
            results[rank] = work(comm)
        except BaseException as exc:  # handed to the caller below
            errors[rank] = exc
            comm.abort()

    threads = [threading.Thread(target=body, args=(r,), name=f"fusec-rank-{r}") for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = next((e for e in errors if e is not None and not isinstance(e, CollectiveError)), None)
    first = first or next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return results


def oracle_executor(library, dtype) -> Callable:
    """Stage programs evaluated by the float64 oracle, their results rounded to ``dtype``.
    A scalar of ``stage.device_scalars`` must come as a one-element array, as a compiled
    stage takes it (a host number there is an :class:`~fusec.errors.ArgumentError`)."""
    dtype = np.dtype(dtype)

    def compile_stage(stage) -> Callable:
        dag = check(parse(stage.source, stage.name), library)

        def run(**arrays):
            for name in stage.device_scalars:
                given = arrays.get(name)
                if not isinstance(given, np.ndarray) or given.size != 1:
                    raise ArgumentError(name, f"is read from device memory by {stage.name}: pass an array of one"
                                              f" element, not {type(given).__name__}")
                arrays[name] = given.reshape(())
            values = oracle.evaluate(dag, library, arrays)
            out = tuple(np.asarray(values[v]).astype(dtype) for v in dag.outputs)
            return out[0] if len(out) == 1 else out
        return run
    return compile_stage
