"""A warm call's host time, fusec's C extension against its Python path, in
bench.peers's process (every peer's framework loaded, as there).

    python tools/host_time.py [--scripts sscal,waxpby,...] [--n 4096]

For each sequence (matrices n x n, vectors n*n/4, float32, the tuned plan
where the cache has one) and each path: the host's time alone per call (100
calls queued behind a spinning kernel, so the GPU never waits for them;
median of 10), the time with the host (CuPy events around one whole call,
as bench.peers measures it; median of 100) and the GPU's time.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPTS = "sscal,waxpby,axpydot,vadd,sgemv,bicgk,sgemvt,gemver,atax,gesummv,madd"


def host_alone_us(call, clock, cupy, calls=100, samples=10) -> float:
    out = []
    for _ in range(samples):
        clock.spin.prepared_call((1, 1, 1), (32, 1, 1), 3_000_000)  # ~2 ms: the calls queue behind it
        began = time.perf_counter()
        for _ in range(calls):
            call()
        out.append((time.perf_counter() - began) / calls * 1e6)
        cupy.cuda.runtime.deviceSynchronize()
    return statistics.median(out)


def with_host_us(call, cupy, repeat=100) -> float:
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(5):
        call()
    out = []
    for _ in range(repeat):
        start.record()
        result = call()
        end.record()
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
        del result
    return statistics.median(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=SCRIPTS)
    parser.add_argument("--n", type=int, default=4096)
    args = parser.parse_args()
    import cupy

    import fusec
    from bench import peers
    from bench.fusion import device_inputs
    from fusec.frontend import load_script
    from fusec.runtime import cuda, native
    peers.make_peers(list(peers.PEER_CLASSES))
    print(f"C extension: {native.fastcall() is not None} ({native.unavailable() or 'built'})")
    ctx = cuda.primary_context()
    ctx.push()
    clock = cuda.gpu_clock(ctx)
    cuda.driver().Context.pop()
    built = native.fastcall
    for script in args.scripts.split(","):
        path = ROOT / "scripts" / f"{script}.script"
        dag = load_script(path, peers._library())
        sizes = peers.script_sizes(dag, args.n, peers.default_vector_size(args.n, "float32"))
        row = {}
        for label in ("C", "Python"):
            native.fastcall = built if label == "C" else (lambda: None)
            try:
                program = fusec.compile(path, dtype="float32", sizes=sizes)
                inputs = device_inputs(cupy, dag, sizes, "float32", seed=1)
                program(**inputs)
                cupy.cuda.runtime.deviceSynchronize()
                call = lambda: program(**inputs)  # noqa: E731
                row[label] = (host_alone_us(call, clock, cupy), with_host_us(call, cupy))
                gpu = statistics.median(program.time(inputs, repeat=30, host=False)) * 1e3
                program.release()
            finally:
                native.fastcall = built
        print(f"{script:8s} {'tuned' if program.tuned else 'untuned':7s} GPU {gpu:6.1f} us | host alone:"
              f" C {row['C'][0]:5.2f}, Python {row['Python'][0]:5.2f} us | with host: C {row['C'][1]:6.1f},"
              f" Python {row['Python'][1]:6.1f} us")


if __name__ == "__main__":
    main()
