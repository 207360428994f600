"""Every collective finishes within its timeout, or the run ends with the error.

A collective is queued on a stream and the host goes on; if another rank has
failed (raised, died) the collective never finishes, and whoever waits for the
stream waits for ever. So each collective is *watched*: an event recorded after
it, and a deadline. A thread of this process polls the events; for one past
its deadline

- ``on_timeout="exit"`` (the default, as PyTorch's NCCL watchdog does): prints
  the error and ends the process with exit status 1, however the main thread
  is stuck (in a synchronisation of its own, say); its NCCL kernels end with
  it. The launcher (mpirun, torchrun) then ends the other ranks;
- ``on_timeout="raise"``: the communicator is aborted, so that what waits for
  its collectives returns, and the error is raised by the program's next call
  or wait, and every call after.

Where fusec itself waits on the host (a scalar a later stage needs, a
``synchronize()``) it polls with the same deadline and raises
:class:`~fusec.distributed.errors.CollectiveTimeoutError`.

At exit, a communicator with collectives still in flight is aborted rather
than destroyed: destroying it would wait for them, for ever.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import itertools
import math
import os
import sys
import threading
import time

from .errors import CollectiveTimeoutError

POLL_SECONDS = 0.005
FRONT = 64  # events queried from the front of the queue before its lock is taken again
EXIT_STATUS = 1


@dataclasses.dataclass(eq=False)  # removed by identity
class Watched:
    event: object  # has done()
    deadline: float
    what: str
    comm: object  # has abort(), rank, size, failed
    timeout: float
    policy: str


class Watchdog:
    """The watched events, in the order watched, and the thread polling them.

    A poll queries the events from the front until the first unfinished one, and stops:
    a communicator's collectives finish in the order issued, so a host that queues
    thousands of calls ahead still costs each poll one or two queries (querying every one,
    each poll, held the interpreter for milliseconds: the thread shares it with the
    caller). An event finished behind an unfinished one waits for it to be dropped.
    Deadlines are compared without a query; only an event past its deadline is queried
    out of turn, so a finished one is never taken for expired. ``polling=False``: no
    thread, :meth:`poll` is the caller's to call (tests)."""

    def __init__(self, polling: bool = True):
        self._polling = polling
        self._lock = threading.Lock()
        self._pending: collections.deque[Watched] = collections.deque()
        self._earliest = math.inf  # no pending deadline before it (perhaps a finished item's)
        self._thread: threading.Thread | None = None

    def watch(self, event, what: str, comm, timeout: float, policy: str) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            self._pending.append(Watched(event, deadline, what, comm, timeout, policy))
            self._earliest = min(self._earliest, deadline)
            if self._thread is None and self._polling:
                self._thread = threading.Thread(target=self._run, name="fusec-collective-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            expired = self.poll(time.monotonic())
            if expired is not None:
                fail(expired.comm, timeout_error(expired.what, expired.comm, expired.timeout), expired.policy)

    def poll(self, now: float) -> Watched | None:
        """Drop the finished events at the front; return one unfinished past its deadline
        (no longer watched), or None. Called by one thread (the watchdog's); events are
        queried outside the lock, while the callers' threads only append."""
        while True:
            with self._lock:
                front = list(itertools.islice(self._pending, FRONT))
            finished = next((i for i, item in enumerate(front) if not _finished(item)), len(front))
            with self._lock:  # one lock a batch: the caller's thread takes it for every watch
                for _ in range(finished):
                    self._pending.popleft()  # only the polling thread removes: these are still the front
            if finished < FRONT:
                break
        if now <= self._earliest:
            return None
        with self._lock:
            late = [item for item in self._pending if item.deadline < now]
        states = [(item, _finished(item)) for item in late]
        expired = next((item for item, finished in states if not finished), None)
        with self._lock:
            for item, finished in states:
                if finished or item is expired:
                    self._pending.remove(item)
            self._earliest = min((item.deadline for item in self._pending), default=math.inf)
        return expired

    def pending(self) -> list[Watched]:
        with self._lock:
            return list(self._pending)


def _finished(item: Watched) -> bool:
    return item.comm.failed is not None or bool(item.event.done())


def timeout_error(what: str, comm, timeout: float) -> CollectiveTimeoutError:
    return CollectiveTimeoutError(
        f"rank {comm.rank} of {comm.size}: {what} did not finish within {timeout:g} s: another rank has failed,"
        " hangs or never called it (the communicator is aborted; set the timeout with timeout= or"
        " $FUSEC_COLLECTIVE_TIMEOUT)")


def fail(comm, error: Exception, policy: str) -> None:
    """End the process with the error (policy "exit": its NCCL kernels end with
    it, and an abort that waits for them is not risked), or abort ``comm`` so
    that whatever waits for its collectives returns, and keep the error for the
    next call (policy "raise")."""
    if comm.failed is None:
        comm.failed = error
    if policy == "exit":
        print(f"fusec.distributed: {error}", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS)
    comm.abort()


def abort_within(comm, seconds: float) -> None:
    """``comm.abort()``, waiting for it at most ``seconds`` (exiting must not hang on it)."""
    aborting = threading.Thread(target=comm.abort, name="fusec-abort", daemon=True)
    aborting.start()
    aborting.join(seconds)


def wait(event, what: str, comm, timeout: float, policy: str) -> None:
    """Wait on the host for ``event``, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 1e-5
    while not event.done():
        if comm.failed is not None:
            raise comm.failed
        if time.monotonic() > deadline:
            error = timeout_error(what, comm, timeout)
            fail(comm, error, policy)
            raise error
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)


WATCHDOG = Watchdog()


EXIT_ABORT_SECONDS = 5.0


@atexit.register
def _abort_in_flight() -> None:
    aborted = set()
    for item in WATCHDOG.pending():
        try:
            if id(item.comm) not in aborted and not item.event.done():
                aborted.add(id(item.comm))
                item.comm.failed = item.comm.failed or CollectiveTimeoutError("exiting with this collective in flight")
                abort_within(item.comm, EXIT_ABORT_SECONDS)
        except Exception:  # exiting: nothing more to do about it
            pass
