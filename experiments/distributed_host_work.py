"""Where does a plain distributed call's host time go? (BiCGK, one process a GPU)

Queued at fp32 n = 8192 on two H200s, BiCGK's distributed calls took 129-136 µs each against
60 timed alone (bench/results/h200-p2-distributed.md): the host's pace. This issues 300 plain
calls a rank, with out= arrays and without, times the issuing and the wait, and profiles the
calls with out= (cProfile, the top functions by own and by cumulative time into
$OUT/prof-rank<R>.txt).

    mpirun -n 2 python -m mpi4py experiments/distributed_host_work.py [N]

Answer (2026-11-30, two H200s): 150-172 µs a call of host work before dc627de, spread thin over
argument checks (each argument's expected shape worked out anew, NumPy's dtype names), event
creation and the stage's prepared call; 99-127 µs after it, below the GPU's time at n = 8192
with out= left out (experiments/results/h200-p2-distributed-host-work.md).
"""
import cProfile
import io
import os
import pstats
import sys
import time

import fusec.distributed as fd
from fusec import oracle

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
calls = 300
prog = fd.compile("scripts/bicgk.script", dtype="float32", sizes={"n": n})
import cupy

root = prog.rank == 0
inputs = oracle.random_inputs(prog.dag, {"m": n, "n": n}, "float32", 0) if root else None
A = prog.scatter("A", cupy.asarray(inputs["A"]) if root else None)
p = prog.scatter("p", cupy.asarray(inputs["p"]) if root else None)
r = prog.scatter("r", cupy.asarray(inputs["r"]) if root else None)
out = {"q": cupy.empty(prog.local_shape("q"), cupy.float32), "s": cupy.empty(prog.local_shape("s"), cupy.float32)}
lines = []


def loop(k, with_out):
    for _ in range(k):
        if with_out:
            prog(A=A, p=p, r=r, out=out)
        else:
            prog(A=A, p=p, r=r)


for with_out in (True, False):
    loop(20, with_out)
    prog.synchronize()
    t0 = time.perf_counter()
    loop(calls, with_out)
    t1 = time.perf_counter()
    prog.synchronize()
    t2 = time.perf_counter()
    lines.append(f"rank {prog.rank} out={with_out}: issue {1e6 * (t1 - t0) / calls:.1f} us/call,"
                 f" issue+wait {1e6 * (t2 - t0) / calls:.1f} us/call")
# the one-GPU program's call, for scale
one = prog.programs[0]
pr = cProfile.Profile()
pr.enable()
loop(calls, True)
pr.disable()
prog.synchronize()
s = io.StringIO()
st = pstats.Stats(pr, stream=s)
st.sort_stats("tottime").print_stats(35)
st.sort_stats("cumulative").print_stats(45)
with open(os.path.join(os.environ.get("OUT", "/tmp"), f"prof-rank{prog.rank}.txt"), "w") as f:
    f.write("\n".join(lines) + "\n\n" + s.getvalue())
print("\n".join(lines), flush=True)
