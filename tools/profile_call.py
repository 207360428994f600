"""Where a program call's host time goes: cProfile of repeated calls on CuPy arrays,
and the whole call's time against the GPU's.

    python tools/profile_call.py [SCRIPT] [--n 4096] [--calls 500] [--parts] [--glue] [--compare]
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
    parser.add_argument("--glue", action="store_true",
                        help="µs of each step of a warm call on the host, launches made no-ops")
    parser.add_argument("--compare", action="store_true",
                        help="sscal only: host time per call of fusec, PyTorch and CuPy, three ways")
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
    if args.glue:
        glue(program, inputs)
    if args.compare and args.script == "sscal":
        compare(cupy, program, inputs)
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
        "driver_api.current_context()": driver_api.current_context,
        "ctypes push + pop": lambda: (driver_api.push_context(cuda.primary_handle()), driver_api.pop_context()),
    }
    for name, piece in pieces.items():
        best = min(timeit.repeat(piece, number=2000, repeat=5)) / 2000 * 1e6
        print(f"part {name:32s} {best:6.2f} us")
    cupy.cuda.runtime.deviceSynchronize()
    # the same launches queued behind a spinning kernel: the host's time alone
    # (back to back, empty kernels can fill the launch queue and time the GPU)
    import statistics
    for name, piece in (("_launch_kernel(empty)", pieces["_launch_kernel(empty)"]),
                        ("prepared_call(empty)", pieces["prepared_call(empty)"])):
        samples = []
        for _ in range(10):
            clock.spin.prepared_call((1, 1, 1), (32, 1, 1), 2_000_000)
            began = time.perf_counter()
            for _ in range(200):
                piece()
            samples.append((time.perf_counter() - began) / 200 * 1e6)
            cupy.cuda.runtime.deviceSynchronize()
        print(f"part {name + ' queued':32s} {statistics.median(samples):6.2f} us")
    drv.Context.pop()


def glue(program, inputs) -> None:
    """µs of each host step of a warm call on the Python path (timeit, best
    of 5), its launches made no-ops so that nothing waits for the GPU (the C
    extension's call is left out: tools/host_time.py compares the two)."""
    import timeit

    from fusec.runtime import driver_api
    from fusec.runtime.prepared import signature
    key, prepared = next(iter(program._prepared.items()))
    hot, program._hot = program._hot, None  # the Python path
    launchers = [launch for launch, _ in prepared.launches]
    saved = [launch.launch for launch in launchers]
    for launch in launchers:
        launch.launch = lambda: None
    context = driver_api.current_context()
    shape = prepared.output_shapes[0]
    first = launchers[0]
    steps = {
        "program(**inputs)": lambda: program(**inputs),
        "program._run_prepared(inputs)": lambda: program._run_prepared(inputs),
        "driver_api.current_context()": driver_api.current_context,
        "signature(...)": lambda: signature(context, inputs, program._array_names, program._scalar_names),
        "prepared(inputs)": lambda: prepared(inputs),
        "prepared.allocate(shape)": lambda: prepared.allocate(shape),
        "Launch(values), launch a no-op": lambda: first([0] * len(first.changing)),
    }
    for name, step in steps.items():
        best = min(timeit.repeat(step, number=5000, repeat=5)) / 5000 * 1e6
        print(f"glue {name:34s} {best:6.2f} us")
    for launch, original in zip(launchers, saved):
        launch.launch = original
    program._hot = hot


def compare(cupy, program, inputs) -> None:
    """µs per call of the same scaling by fusec, PyTorch eager and CuPy, as the
    host sees it: calls back to back with one wait at the end (1000 calls, and
    bench.peers's 10 calls, median of 20), and the host's share alone (calls
    queued behind a spinning kernel, so the GPU never waits for them)."""
    import statistics

    import torch

    from bench.peers import pipelined_ms
    from fusec.runtime import cuda
    x, alpha = inputs["x"], inputs["alpha"]
    tx = torch.as_tensor(x, device="cuda")
    contenders = {"fusec": lambda: program(**inputs), "torch": lambda: tx * alpha, "cupy": lambda: x * alpha}
    wait = lambda _=None: cupy.cuda.runtime.deviceSynchronize()  # noqa: E731
    ctx = cuda.primary_context()
    ctx.push()
    clock = cuda.gpu_clock(ctx)
    for name, call in contenders.items():
        for _ in range(50):
            call()
        wait()
        began = time.perf_counter()
        for _ in range(1000):
            call()
        wait()
        steady = (time.perf_counter() - began) / 1000 * 1e6
        depth10 = statistics.median(pipelined_ms(call, wait, 20)) * 1e3
        hosts = []
        for _ in range(10):
            clock.spin.prepared_call((1, 1, 1), (32, 1, 1), 2_000_000)  # ~1 ms: the 100 calls queue behind it
            began = time.perf_counter()
            for _ in range(100):
                call()
            hosts.append((time.perf_counter() - began) / 100 * 1e6)
            wait()
        print(f"compare {name:6s} back to back {steady:6.2f} us, 10 then wait {depth10:6.2f} us,"
              f" host alone {statistics.median(hosts):6.2f} us per call")
    cuda.driver().Context.pop()


if __name__ == "__main__":
    main()
