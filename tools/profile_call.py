"""Where a program call's host time goes: cProfile of repeated calls on CuPy arrays,
and the whole call's time against the GPU's.

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
    parser.add_argument("--parts", action="store_true", help="also time the pieces a warm call is made of")
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
    from fusec.runtime import cuda, driver_api
    print(f"driver's current context where CuPy ran: {driver_api.current_context():#x}"
          f" (the primary: {cuda.primary_handle():#x})")
    for _ in range(20):
        program(**inputs)
    cupy.cuda.runtime.deviceSynchronize()
    start = time.perf_counter()
    for _ in range(args.calls):
        program(**inputs)
    cupy.cuda.runtime.deviceSynchronize()
    print(f"{args.script} n={n}: {(time.perf_counter() - start) / args.calls * 1e6:.1f} us per call, pipelined")
    import statistics
    whole = statistics.median(program.time(inputs, repeat=200, host=True)) * 1e3
    gpu = statistics.median(program.time(inputs, repeat=50, host=False)) * 1e3
    print(f"{args.script} n={n}: {whole:.1f} us per call waited for (events around the whole call),"
          f" {gpu:.1f} us of GPU time, {len(program._prepared)} prepared call(s)")
    if args.parts:
        parts(cupy, n)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        program(**inputs)
    profile.disable()
    cupy.cuda.runtime.deviceSynchronize()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)


def parts(cupy, n: int) -> None:
    """µs of each piece of a warm call, alone (timeit, best of 5)."""
    import timeit
    import numpy as np
    from pycuda._pvt_struct import pack
    from fusec.runtime import cuda, driver_api
    drv = cuda.driver()
    ctx = cuda.primary_context()
    ctx.push()
    clock = cuda.gpu_clock(ctx)
    empty = clock.empty
    launch = empty._launch_kernel
    module = driver_api.Module(clock.cubin)
    bound = driver_api.Launch(module.function("fusec_empty"), 1, 32, "", (), changing=())
    pieces = {
        "Context.get_current()": lambda: drv.Context.get_current(),
        "context_key(current)": lambda: cuda.context_key(drv.Context.get_current()),
        "push + pop": lambda: (ctx.push(), drv.Context.pop()),
        "cupy.ndarray((n,), float32)": lambda: cupy.ndarray((n,), np.float32),
        "cupy.empty((n,), float32)": lambda: cupy.empty((n,), np.float32),
        "cupy.cuda.runtime.getDevice()": lambda: cupy.cuda.runtime.getDevice(),
        "pack('PPPi')": lambda: pack("PPPi", 1, 2, 3, 4),
        "_launch_kernel(empty)": lambda: launch((1, 1, 1), (32, 1, 1), b"", 0, None),
        "prepared_call(empty)": lambda: empty.prepared_call((1, 1, 1), (32, 1, 1)),
        "driver_api.Launch(empty)": lambda: bound(()),
        "driver_api.current_context()": driver_api.current_context,
        "ctypes push + pop": lambda: (driver_api.push_context(cuda.primary_handle()), driver_api.pop_context()),
    }
    for name, piece in pieces.items():
        best = min(timeit.repeat(piece, number=2000, repeat=5)) / 2000 * 1e6
        print(f"part {name:32s} {best:6.2f} us")
    cupy.cuda.runtime.deviceSynchronize()
    drv.Context.pop()


if __name__ == "__main__":
    main()
