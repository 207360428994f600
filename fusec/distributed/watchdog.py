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
import os
import sys
import threading
import time

from .errors import CollectiveTimeoutError

POLL_SECONDS = 0.005
EXIT_STATUS = 1


@dataclasses.dataclass
class Watched:
    event: object  # has done()
    deadline: float
    what: str
    comm: object  # has abort(), rank, size, failed
    timeout: float
    policy: str


class Watchdog:
    def __init__(self):
        self._lock = threading.Lock()
        self._pending: collections.deque[Watched] = collections.deque()
        self._thread: threading.Thread | None = None

    def watch(self, event, what: str, comm, timeout: float, policy: str) -> None:
        with self._lock:
            self._pending.append(Watched(event, time.monotonic() + timeout, what, comm, timeout, policy))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fusec-collective-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            with self._lock:
                pending = list(self._pending)
            finished, expired = [], None
            for item in pending:  # events of one stream finish in order: the first unfinished one decides
                if item.comm.failed is not None or item.event.done():
                    finished.append(item)
                elif time.monotonic() > item.deadline:
                    expired = item
                    break
            with self._lock:
                for item in finished:
                    self._pending.remove(item)
                if expired is not None:
                    self._pending.remove(expired)
            if expired is not None:
                fail(expired.comm, timeout_error(expired.what, expired.comm, expired.timeout), expired.policy)

    def pending(self) -> list[Watched]:
        with self._lock:
            return list(self._pending)


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
