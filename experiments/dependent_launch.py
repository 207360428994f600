"""Do programmatic dependent launches shorten fusec's programs and solver iterations?

Every generated kernel's first statement waits for the kernel before it in the stream
(``fusec_follow_previous`` in fusec/emit/support.cuh), so on sm_90 on the runtime may launch
each kernel while the one before still runs (``Program(dependent_launch=True)``, the
default). This times the same generated programs both ways, in one process, alternating
the order each round:

- programs: ``Program.time(host=False)`` (the GPU's time of one call, a spinning kernel
  first), median of ``--repeat``, for each script of ``--scripts`` at ``--size``;
- solver iterations: 50 iterations captured once in a CUDA graph and replayed (as
  ``bench.solvers`` times them), median of ``--repeat``;
- solves to a tolerance (``fusec.solvers.solve``, the GPU's while loop), median wall time.

Each pair's results are compared bit for bit first (the kernels' work is the same).

    python -m experiments.dependent_launch [--scripts bicgk,atax,...] [--size 4096]
        [--solvers cg,bicg,bicgstab] [--n 1024,4096] [--repeat 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = "atax,axpydot,bicgk,gemver,gesummv,madd,sgemv,sgemvt,sscal,vadd,waxpby"
ITERATIONS = 50


def both(program):
    from fusec.runtime.program import Program
    return {True: program, False: Program(program.generated, dependent_launch=False, turning=program.turning)}


def program_rows(args, rounds: int) -> list[dict]:
    import numpy as np

    from fusec import compile as fusec_compile
    from fusec import oracle
    from fusec.api import resolve_library, script_dag
    rows = []
    for name in args.scripts.split(","):
        for dtype in args.dtypes.split(","):
            script = ROOT / "scripts" / f"{name}.script"
            sizes = {d: args.size for d in script_dag(script, None, None, resolve_library(None)).sizes}
            program = fusec_compile(script, dtype=dtype, sizes=sizes)
            arrays = oracle.random_inputs(program.dag, sizes, dtype, np.random.default_rng(0))
            ways = both(program)
            results = {way: [np.asarray(r) for r in _tuple(p(**arrays))] for way, p in ways.items()}
            # a program adding column sums with atomics is not reproducible: its two results
            # differ by rounding, each right (the GPU tests check it against the oracle)
            same = (all(np.array_equal(a, b) for a, b in zip(results[True], results[False]))
                    if program.generated.reproducible else "not reproducible")
            times = {True: [], False: []}
            for r in range(rounds):
                for way in ((True, False) if r % 2 == 0 else (False, True)):
                    times[way] += ways[way].time(arrays, host=False, repeat=args.repeat)
            on, off = (statistics.median(times[w]) * 1e3 for w in (True, False))
            rows.append({"script": name, "dtype": dtype, "n": args.size, "kernels": len(program.kernels),
                         "dependent_us": on, "plain_us": off, "same_bits": same})
            print(f"{name:8s} {dtype} n={args.size}: {len(program.kernels)} kernels, dependent {on:8.2f} us,"
                  f" plain {off:8.2f} us ({off / on:.3f}x), same bits {same}", flush=True)
    return rows


def _tuple(results):
    return results if isinstance(results, tuple) else (results,)


def solver_rows(args, rounds: int) -> list[dict]:
    import cupy

    from bench.solvers import systems, wall_us
    from fusec.solvers.api import program_for, solve_with_outcome
    from fusec.solvers.arrays import CupyArrays
    from fusec.solvers.methods import METHODS
    from fusec.solvers.stepper import ProgramStepper
    rows = []
    for name in args.solvers.split(","):
        method = METHODS[name]
        for n in (int(v) for v in args.n.split(",")):
            hard, easy, b = systems(cupy, n, "float32")
            ways = both(program_for(name, "float32", n))
            iteration, tolerance, xs = {True: [], False: []}, {True: [], False: []}, {}
            arrays = CupyArrays()
            for r in range(rounds):
                for way in ((True, False) if r % 2 == 0 else (False, True)):
                    with arrays.stream() as stream:
                        stepper = ProgramStepper(ways[way], method, arrays, hard,
                                                 method.start(cupy.zeros_like(b), b, cupy.copy))
                        stepper.advance(ITERATIONS)
                        stepper.restore()
                        stepper.advance(ITERATIONS)
                        xs[way] = stepper.x().copy()
                        iteration[way].append(wall_us(lambda s=stepper: s.advance(ITERATIONS), stream.synchronize,
                                                      args.repeat, before=stepper.restore) / ITERATIONS)
                    for _ in range(args.repeat):
                        cupy.cuda.runtime.deviceSynchronize()
                        began = time.perf_counter()
                        solve_with_outcome(method, easy, b, rtol=1e-5, program=ways[way])
                        cupy.cuda.runtime.deviceSynchronize()
                        tolerance[way].append((time.perf_counter() - began) * 1e3)
            same = bool(cupy.array_equal(xs[True], xs[False]))
            row = {"solver": name, "dtype": "float32", "n": n, "kernels": len(ways[True].kernels),
                   "dependent_us_per_iteration": statistics.median(iteration[True]),
                   "plain_us_per_iteration": statistics.median(iteration[False]),
                   "dependent_ms_to_tolerance": statistics.median(tolerance[True]),
                   "plain_ms_to_tolerance": statistics.median(tolerance[False]), "same_bits": same}
            rows.append(row)
            print(f"{name:8s} float32 n={n}: {row['kernels']} kernels, per iteration dependent"
                  f" {row['dependent_us_per_iteration']:.2f} us, plain {row['plain_us_per_iteration']:.2f} us;"
                  f" to 1e-5 dependent {row['dependent_ms_to_tolerance']:.3f} ms,"
                  f" plain {row['plain_ms_to_tolerance']:.3f} ms; same bits {same}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=SCRIPTS, help="scripts/NAME.script to time (comma-separated; '' none)")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--size", type=int, default=4096, help="every size of the scripts")
    parser.add_argument("--solvers", default="cg,bicg,bicgstab", help="solver iterations to time ('' none)")
    parser.add_argument("--n", default="1024,4096", help="the solvers' sizes")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of both ways, the order alternating")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    import cupy
    print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)
    rows = {"programs": program_rows(args, args.rounds) if args.scripts else [],
            "solvers": solver_rows(args, args.rounds) if args.solvers else []}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "dependent-launch.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
