"""What does an iteration of fusec.distributed.solvers cost over P GPUs, against one GPU?

    mpirun -n 2 python -m mpi4py -m experiments.distributed_solvers [--n 16384,32768]
        [--solvers cg,bicgstab] [--dtype float32] [--iterations 50] [--check-every 1,4]
        [--graphs 0,1] [--out experiments/results]

Each rank builds bench.solvers' system that does not converge in 50 iterations (the same
seed everywhere, so the blocks are one matrix), keeps its rows, and runs ``--iterations``
iterations (maxiter, rtol 1e-30) of the distributed solver; wall time from a synchronised GPU
to a synchronised GPU on every rank, the slowest rank's, median of three after a first (reported
apart). Rank 0 then runs the one-GPU solver (fusec.solvers, its GPU loop) on the whole matrix the
same way. µs an iteration = time / iterations (the start, a norm of b, is in both). ``--graphs
0,1`` times each distributed solve with plain calls and with its calls captured in CUDA graphs
and replayed (``graphs=True``). Solves on one matrix keep their stepper and its graphs, as one
GPU's solvers do: the first solve with graphs captures (in its time), the three after it replay.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="16384,32768")
    parser.add_argument("--solvers", default="cg,bicgstab")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--check-every", default="1,4",
                        help="the distributed solves' check_every values, each timed (default: %(default)s)")
    parser.add_argument("--graphs", default="0,1",
                        help="the distributed solves' graphs values (0 plain calls, 1 CUDA graphs), each timed"
                             " (default: %(default)s)")
    parser.add_argument("--layouts", default="calls",
                        help="the distributed solves' layouts values (calls, fewest), each timed"
                             " (default: %(default)s)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)

    import cupy
    from mpi4py import MPI

    import fusec.distributed as fd
    import fusec.distributed.solvers as ds
    import fusec.solvers as fs
    from bench.solvers import systems
    from fusec.target import resolve, slug

    captures: list[bool] = []  # whether each capture worked: a graphs row that captured nothing timed plain calls
    real_capture = fd.DistributedProgram.capture

    def counting(self, issue, **options):
        graph = real_capture(self, issue, **options)
        captures.append(graph is not None)
        return graph
    fd.DistributedProgram.capture = counting

    world = MPI.COMM_WORLD
    comm = fd.communicator(world, timeout=300)
    gpu = resolve(unknown_ok=True).name
    rows = []

    def timed(run) -> tuple[float, float]:
        """The first solve's seconds (it compiles, warms and captures), and the median of three after it."""
        samples = []
        for _ in range(4):  # the first compiles and warms
            cupy.cuda.Device().synchronize()
            world.Barrier()
            start = time.perf_counter()
            run()
            cupy.cuda.Device().synchronize()
            samples.append(world.allreduce(time.perf_counter() - start, op=MPI.MAX))
        return samples[0], statistics.median(samples[1:])

    for n in (int(v) for v in args.n.split(",")):
        hard, easy, b = systems(cupy, n, args.dtype)
        del easy
        lo, hi = ds.rows(n, comm)
        A_local, b_local = cupy.ascontiguousarray(hard[lo:hi]), b[lo:hi].copy()
        for name in args.solvers.split(","):
            solve = getattr(ds, name)
            many, captured = {}, {}
            for every, graphs, layouts in itertools.product(args.check_every.split(","), args.graphs.split(","),
                                                            args.layouts.split(",")):
                del captures[:]
                many[every, graphs, layouts] = timed(
                    lambda solve=solve, A=A_local, b=b_local, check=int(every), graphs=graphs == "1",
                    layouts=layouts: solve(A, b, comm=comm, rtol=1e-30, maxiter=args.iterations, check_every=check,
                                           graphs=graphs, layouts=layouts))
                captured[every, graphs, layouts] = f"{sum(captures)}/{len(captures)}"
            one = None
            if comm.rank == 0:
                single = getattr(fs, name)
                samples = []
                for _ in range(4):
                    cupy.cuda.Device().synchronize()
                    start = time.perf_counter()
                    single(hard, b, rtol=1e-30, maxiter=args.iterations)
                    cupy.cuda.Device().synchronize()
                    samples.append(time.perf_counter() - start)
                one = statistics.median(samples[1:])
            one = world.bcast(one, root=0)
            for (every, graphs, layouts), (first, seconds) in many.items():
                row = {"solver": name, "n": n, "dtype": args.dtype, "ranks": comm.size, "check_every": every,
                       "graphs": graphs, "layouts": layouts, "captures": captured[every, graphs, layouts],
                       "one_gpu_us": one / args.iterations * 1e6,
                       "ranks_us": seconds / args.iterations * 1e6, "first_ranks_us": first / args.iterations * 1e6}
                row["speedup"] = row["one_gpu_us"] / row["ranks_us"]
                rows.append(row)
                if comm.rank == 0:
                    print(json.dumps(row), flush=True)
        hard = A_local = None  # the next size's memory
        cupy.get_default_memory_pool().free_all_blocks()
    if comm.rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{slug(gpu)}-p{comm.size}-distributed-solvers"
        (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
        lines = [f"# fusec.distributed.solvers over {comm.size} × {gpu}", "",
                 f"`mpirun -n {comm.size} python -m mpi4py -m experiments.distributed_solvers --n {args.n}"
                 f" --solvers {args.solvers} --dtype {args.dtype} --iterations {args.iterations}"
                 f" --check-every {args.check_every} --graphs {args.graphs} --layouts {args.layouts}`: µs an"
                 " iteration,"
                 f" {args.iterations} iterations a solve, median of three after a first, slowest rank; graphs 1:"
                 " the distributed calls captured in CUDA graphs and replayed (captures: those that worked / made,"
                 " over the four solves, on rank 0; the solves of one matrix keep their graphs, so the first solve"
                 " with graphs captures and the three after it replay).", "",
                 "| solver | dtype | n | check_every | graphs | layouts | captures | 1 GPU µs"
                 f" | {comm.size} GPUs µs | speed-up | first solve µs |",
                 "|---|---|---:|---|---|---|---|---:|---:|---:|---:|"]
        lines += [f"| {r['solver']} | {r['dtype']} | {r['n']} | {r['check_every']} | {r['graphs']} | {r['layouts']}"
                  f" | {r['captures']} |"
                  f" {r['one_gpu_us']:.1f} | {r['ranks_us']:.1f} |"
                  f" {r['speedup']:.2f}× | {r['first_ranks_us']:.1f} |" for r in rows]
        (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
