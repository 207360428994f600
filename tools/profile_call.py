"""Where a program call's host time goes: cProfile of repeated calls on CuPy arrays.

    python tools/profile_call.py [SCRIPT] [--n 4096] [--calls 500]
"""
import argparse
import cProfile
import pstats
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("script", nargs="?", default="bicgk")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    import cupy
    import fusec
    from bench.fusion import device_inputs
    program = fusec.compile(ROOT / "scripts" / f"{args.script}.script", dtype="float32",
                            sizes=None, tuned=False)
    dag = program.dag
    has_matrix = any(v.kind.value == "matrix" for v in dag.values)
    n = args.n if has_matrix else args.n * args.n // 4
    inputs = device_inputs(cupy, dag, {s: n for s in dag.sizes}, "float32", seed=1)
    for _ in range(20):
        program(**inputs)
    cupy.cuda.runtime.deviceSynchronize()
    start = time.perf_counter()
    for _ in range(args.calls):
        program(**inputs)
    cupy.cuda.runtime.deviceSynchronize()
    print(f"{args.script} n={n}: {(time.perf_counter() - start) / args.calls * 1e6:.1f} us per call, pipelined")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        program(**inputs)
    profile.disable()
    cupy.cuda.runtime.deviceSynchronize()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
