"""Where does a plain distributed call's host time go? (BiCGK, one process a GPU)

Queued at fp32 n = 8192 on two H200s, BiCGK's distributed calls took 129-136 µs each against
60 timed alone (bench/results/h200-p2-distributed.md): the host's pace. This issues 300 plain
calls a rank, with out= arrays and without, times the issuing and the wait, then the host time
of each step of a call (``--phases``: the argument checks, the stage's call, the collective and
NCCL's own call, by perf_counter around each), and profiles the calls with out= (cProfile, the
top functions by own and by cumulative time into $OUT/prof-rank<R>.txt; Python 3.12's profiler
sees every thread, the watchdog's too). ``--watchdog all`` polls as the watchdog did before
2026-11-30's change (every pending event queried each poll) for an A/B in one sitting.

    mpirun -n 2 python -m mpi4py experiments/distributed_host_work.py [N] [--phases] [--watchdog all]

Answer (2026-11-30, two H200s): 150-172 µs a call of host work before dc627de, spread thin over
argument checks (each argument's expected shape worked out anew, NumPy's dtype names), event
creation and the stage's prepared call; 99-128 µs after it (five runs), still above the GPU's
62 µs at n = 8192 (experiments/results/h200-p2-distributed-host-work.md). The steps (``--phases``,
eight rank-runs later that day, 115-142 µs a call): the stage's prepared call 38-48 µs, NCCL's
all-reduce 19-27, the collective's event and watch 11-20, the argument checks 11-13; the
watchdog querying only the front of its queue changed nothing measurable (113-150 µs either way).
With the stages' out= calls in the C extension (the same afternoon): the stage's call 6.9-9.3 µs,
a call 60.0-70.4 µs, about the GPU's time.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import os
import pstats
import time

CALLS = 300


def poll_every_event(dog, now: float):
    """The watchdog's poll before 2026-11-30: every pending event queried, each poll."""
    with dog._lock:
        pending = list(dog._pending)
    finished, expired = [], None
    for item in pending:
        if item.comm.failed is not None or item.event.done():
            finished.append(item)
        elif now > item.deadline:
            expired = item
            break
    with dog._lock:
        for item in finished + ([expired] if expired is not None else []):
            dog._pending.remove(item)
    return expired


def timed(totals: dict, label: str, function):
    """``function`` with its host time added to ``totals[label]``."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start
    return wrapper


def time_phases(prog, totals: dict) -> None:
    """Each step of ``prog``'s calls timed into ``totals`` (the wrappers cost about 0.3 µs each)."""
    for name in ("_bind", "_check_out", "_stage", "_collective", "_end_collective", "_result"):
        setattr(prog, name, timed(totals, name, getattr(prog, name)))
    prog.comm.all_reduce = timed(totals, "comm.all_reduce", prog.comm.all_reduce)
    prog.programs[0].run = timed(totals, "stage program.run", prog.programs[0].run)


def check_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=8192, help="A is n x n (default: %(default)s)")
    parser.add_argument("--phases", action="store_true", help="time each step of a call on the host")
    parser.add_argument("--watchdog", choices=("front", "all"), default="front",
                        help="front: the watchdog as it is; all: every pending event queried each poll (as before)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"n {args.n}: 1 or more")
    return args


def main() -> None:
    args = check_arguments()
    n = args.n
    import cupy

    import fusec.distributed as fd
    from fusec import oracle
    from fusec.distributed import watchdog

    if args.watchdog == "all":
        watchdog.WATCHDOG.poll = functools.partial(poll_every_event, watchdog.WATCHDOG)
    prog = fd.compile("scripts/bicgk.script", dtype="float32", sizes={"n": n})
    root = prog.rank == 0
    inputs = oracle.random_inputs(prog.dag, {"m": n, "n": n}, "float32", 0) if root else None
    arrays = {name: prog.scatter(name, cupy.asarray(inputs[name]) if root else None) for name in ("A", "p", "r")}
    out = {name: cupy.empty(prog.local_shape(name), cupy.float32) for name in ("q", "s")}

    def loop(calls: int, with_out: bool) -> None:
        for _ in range(calls):
            prog(**arrays, out=out) if with_out else prog(**arrays)

    lines = []
    for with_out in (True, False):
        loop(20, with_out)
        prog.synchronize()
        start = time.perf_counter()
        loop(CALLS, with_out)
        issued = time.perf_counter()
        prog.synchronize()
        done = time.perf_counter()
        lines.append(f"rank {prog.rank} n={n} watchdog={args.watchdog} out={with_out}:"
                     f" issue {1e6 * (issued - start) / CALLS:.1f} us/call,"
                     f" issue+wait {1e6 * (done - start) / CALLS:.1f} us/call")
    if args.phases:
        totals: dict = collections.defaultdict(float)
        time_phases(prog, totals)
        loop(20, True)
        prog.synchronize()
        totals.clear()
        start = time.perf_counter()
        loop(CALLS, True)
        whole = time.perf_counter() - start
        prog.synchronize()
        parts = ", ".join(f"{label} {1e6 * seconds / CALLS:.1f}" for label, seconds in totals.items())
        lines.append(f"rank {prog.rank} phases (us/call of {1e6 * whole / CALLS:.1f} issued, out=True): {parts}")
    profile = cProfile.Profile()
    profile.enable()
    loop(CALLS, True)
    profile.disable()
    prog.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"prof-rank{prog.rank}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n\n" + text.getvalue())
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
