"""What an iteration of ``fusec.distributed.solvers`` costs apart from what a solve costs once:
solves of 48 and of 144 iterations (rtol 1e-30, so every solve runs them all; counts that
check_every 1, 2, 4 divide), the difference over 96 iterations, on two GPUs and on one
(``fusec.solvers`` on rank 0's GPU, the whole matrix).

    mpirun -n 2 python -m mpi4py -m experiments.distributed_marginal OUT.json [--n 16384] [--dtype float32]
        [--layouts agreed,calls] [--check-every 1,2,4]

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
    parser.add_argument("--layouts", default="agreed,calls", help="the solves' layouts values (default: agreed,calls)")
    parser.add_argument("--check-every", default="1", help="the solves' check_every values (default: 1)")
    args = parser.parse_args()
    if args.n < 2:
        parser.error(f"--n {args.n}: 2 or more")
    layouts_values = args.layouts.split(",")
    if not set(layouts_values) <= {"agreed", "calls", "fewest"}:
        parser.error(f"--layouts {args.layouts!r}: agreed, calls or fewest, comma-separated")
    try:
        every_values = [int(v) for v in args.check_every.split(",")]
    except ValueError:
        every_values = [0]
    if min(every_values) < 1:
        parser.error(f"--check-every {args.check_every!r}: whole numbers of 1 or more, comma-separated")
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
        """The median of five solves after a first (the slowest rank's, where ``together``)."""
        samples = []
        for _ in range(6):
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
        short, long = fields.pop("short"), fields.pop("long")
        each = (long - short) / 96
        return {**fields, "n": args.n, "dtype": args.dtype, "t48_ms": short * 1e3, "t144_ms": long * 1e3,
                "per_iteration_us": each * 1e6, "fixed_ms": (short - 48 * each) * 1e3}

    for name in ("cg", "bicgstab"):
        for layouts in layouts_values:
            for every in every_values:
                solve = getattr(ds, name)
                short, long = (timed(lambda k=k: solve(A_local, b_local, comm=comm, rtol=1e-30, maxiter=k,
                                                     layouts=layouts, check_every=every)) for k in (48, 144))
                rows.append(row(solver=name, ranks=comm.size, layouts=layouts, check_every=every, short=short,
                                long=long))
        if comm.rank == 0:
            single = getattr(fs, name)
            short, long = (timed(lambda k=k: single(hard, b, rtol=1e-30, maxiter=k), together=False) for k in (48, 144))
            rows.append(row(solver=name, ranks=1, layouts="", check_every=0, short=short, long=long))
        world.Barrier()
    if comm.rank == 0:
        for r in rows:
            print(json.dumps(r), flush=True)
        with open(args.out, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
