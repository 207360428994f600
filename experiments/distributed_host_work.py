"""Where does a plain distributed call's host time go? (BiCGK, one process a GPU)

Queued at fp32 n = 8192 on two H200s, BiCGK's distributed calls took 129-136 µs each against
60 timed alone (bench/results/h200-p2-distributed.md): the host's pace. This issues 300 plain
calls a rank, with out= arrays and without, times the issuing and the wait, and profiles the
calls with out= (cProfile, the top functions by own and by cumulative time into
$OUT/prof-rank<R>.txt).

    mpirun -n 2 python -m mpi4py experiments/distributed_host_work.py [N]

Answer (2026-11-30, two H200s): 150-172 µs a call of host work before dc627de, spread thin over
argument checks (each argument's expected shape worked out anew, NumPy's dtype names), event
creation and the stage's prepared call; 99-128 µs after it (five runs), still above the GPU's
62 µs at n = 8192 (experiments/results/h200-p2-distributed-host-work.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

CALLS = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", nargs="?", type=int, default=8192, help="A is n x n (default: %(default)s)")
    n = parser.parse_args().n
    if n < 1:
        parser.error(f"n {n}: 1 or more")
    import cupy

    import fusec.distributed as fd
    from fusec import oracle

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
        lines.append(f"rank {prog.rank} out={with_out}: issue {1e6 * (issued - start) / CALLS:.1f} us/call,"
                     f" issue+wait {1e6 * (done - start) / CALLS:.1f} us/call")
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
