"""What an iteration of ``fusec.distributed.solvers`` costs apart from what a solve costs once:
solves of 50 and of 150 iterations (rtol 1e-30, so every solve runs them all), the difference
over 100 iterations, on two GPUs and on one (``fusec.solvers`` on rank 0's GPU, the whole matrix).

    mpirun -n 2 python -m mpi4py -m experiments.distributed_marginal OUT.json [--n 16384] [--dtype float32]

Answer (2 × H200, 2026-11-30): experiments/results/h200-p2-distributed-marginal.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.distributed_marginal", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="JSON of the rows (rank 0 writes it)")
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    if args.n < 2:
        parser.error(f"--n {args.n}: 2 or more")
    import cupy
    from mpi4py import MPI

    import fusec.distributed as fd
    import fusec.distributed.solvers as ds
    import fusec.solvers as fs
    from bench.solvers import systems

    world = MPI.COMM_WORLD
    comm = fd.communicator(world, timeout=300)
    hard, easy, b = systems(cupy, args.n, args.dtype)
    del easy
    lo, hi = ds.rows(args.n, comm)
    A_local, b_local = cupy.ascontiguousarray(hard[lo:hi]), b[lo:hi].copy()
    rows = []

    def timed(run, together=True) -> float:
        """The median of three solves after a first (the slowest rank's, where ``together``)."""
        samples = []
        for _ in range(4):
            cupy.cuda.Device().synchronize()
            if together:
                world.Barrier()
            start = time.perf_counter()
            run()
            cupy.cuda.Device().synchronize()
            seconds = time.perf_counter() - start
            samples.append(world.allreduce(seconds, op=MPI.MAX) if together else seconds)
        return statistics.median(samples[1:])

    def row(**fields) -> dict:
        t50, t150 = fields.pop("t50"), fields.pop("t150")
        each = (t150 - t50) / 100
        return {**fields, "n": args.n, "dtype": args.dtype, "t50_ms": t50 * 1e3, "t150_ms": t150 * 1e3,
                "per_iteration_us": each * 1e6, "fixed_ms": (t50 - 50 * each) * 1e3}

    for name in ("cg", "bicgstab"):
        for layouts in ("agreed", "calls"):
            solve = getattr(ds, name)
            t50, t150 = (timed(lambda k=k: solve(A_local, b_local, comm=comm, rtol=1e-30, maxiter=k, layouts=layouts))
                         for k in (50, 150))
            rows.append(row(solver=name, ranks=comm.size, layouts=layouts, t50=t50, t150=t150))
        if comm.rank == 0:
            single = getattr(fs, name)
            t50, t150 = (timed(lambda k=k: single(hard, b, rtol=1e-30, maxiter=k), together=False) for k in (50, 150))
            rows.append(row(solver=name, ranks=1, layouts="", t50=t50, t150=t150))
        world.Barrier()
    if comm.rank == 0:
        for r in rows:
            print(json.dumps(r), flush=True)
        with open(args.out, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
