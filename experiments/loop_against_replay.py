"""Does an iteration in the GPU loop cost more than one replayed from a graph? (GPU)

    python -m experiments.loop_against_replay [--cases bicgstab:float64:16384,...] [--k 20] [--repeat 10]

QUESTION (issue 46). On one H200 (experiments/results/h200-solvers-started.md, 2026-11-29) a BiCGStab
fp64 n = 16384 solve to tolerance took 20.92 ms for 20 iterations (20.39 without the pass over A
that checks it), where 20 iterations replayed from a graph take 20 x 0.9725 = 19.45 ms by the same
run's per-iteration column; JAX's took 20.53. Where does the other ms go?

METHOD. bench.solvers' hard system (it does not converge in k iterations), CuPy, one stepper
(``ProgramStepper``, the solve's own program), both sets warm. Timed by the host clock from a
synchronised GPU to the read that ends each: (1) the GPU loop launched for k iterations
(``stepper.loop(0.0, k)``: the bodies of two iterations with a test after each, the checkpoint
copied, guarded where solves guard), (2) ``stepper.advance(k)``: k iterations replayed from one
captured graph (the checkpoint copied too; no test), (3) ``advance(k)`` with graphs off (plain
calls). Medians of --repeat, in turns.
"""
import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="bicgstab:float64:16384,cg:float64:16384,bicgstab:float32:1024")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    from experiments.solver_fixed_cost import _case
    cases = [_case(parser, case) for case in args.cases.split(",")]
    if args.k < 2 or args.k % 2:
        parser.error(f"--k {args.k}: an even count of 2 or more (the loop's bodies are two iterations)")
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")
    import functools

    import cupy

    from bench.solvers import systems
    from fusec.solvers import device_loop
    from fusec.solvers.api import matrix_bytes, program_for
    from fusec.solvers.arrays import arrays_for
    from fusec.solvers.methods import METHODS
    from fusec.solvers.stepper import ProgramStepper
    sync = cupy.cuda.Device().synchronize
    print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}; k = {args.k}\n")
    print("| solver | dtype | n | guarded | loop ms | replayed ms | plain calls ms | loop / replayed |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for name, dtype, n in cases:
        method = METHODS[name]
        hard, _, b = systems(cupy, n, dtype)
        arrays = arrays_for("cupy")
        guarded = device_loop.guards(matrix_bytes(method, n, dtype))
        with arrays.stream():
            start = method.start(cupy.zeros_like(b), b, lambda a: a)
            program = program_for(name, dtype, n)
            looped = ProgramStepper(program, method, arrays, hard, start,
                                    make_loop=functools.partial(device_loop.DeviceLoop, guarded=guarded))
            plain = ProgramStepper(program, method, arrays, hard, start, graphs=False)
            looped.advance(2)
            looped.loop(0.0, 2)
            looped.advance(args.k)  # captured here
            plain.advance(2)
            runs = {"loop": functools.partial(looped.loop, 0.0, args.k),
                    "replayed": functools.partial(looped.advance, args.k),
                    "plain": functools.partial(plain.advance, args.k)}
            samples = {key: [] for key in runs}
            for _ in range(args.repeat):
                for key, run in runs.items():
                    sync()
                    began = time.perf_counter()
                    run()
                    sync()
                    samples[key].append((time.perf_counter() - began) * 1e3)
        ms = {key: statistics.median(v) for key, v in samples.items()}
        print(f"| {name} | {dtype} | {n} | {guarded} | {ms['loop']:.3f} | {ms['replayed']:.3f} | {ms['plain']:.3f}"
              f" | {ms['loop'] / ms['replayed']:.3f} |", flush=True)
        runs = looped = plain = hard = b = None
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
