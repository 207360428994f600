"""fusec's best-predicted combination against the cuBLAS call sequence.

    python -m bench.fusion [--scripts bicgk,gemver] [--repeat 30] [--out bench/results]

Both run in one process on the same device arrays (CuPy), timed with CUDA
events around the whole sequence (warm-up first, median of --repeat runs),
two ways for both sides alike: the GPU's time (a spinning kernel goes first,
so the start event fires once the sequence is queued and the host's launch
overhead is not counted), and the time with the host's launching in it (what
a Python caller waits for). fusec runs its tuned combination when the tuning
cache has one for the GPU and size (the table says so), else the
best-predicted.
Sizes are past the 50 MB L2: matrices n x n with n = 16384 (float32) or 8192
(float64), vectors of 2^26 or 2^25. GB/s are on minimum bytes (each input
read once, each output written once); the copy bandwidth is measured in the
same run (a device-to-device copy, bytes read plus bytes written). Before
timing, the two results are compared, so both compute the same thing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"float32": (16384, 1 << 26), "float64": (8192, 1 << 25)}
TARGETS = {"bicgk": 1.8, "gemver": 2.4, "axpydot": 1.6, "vadd": 1.6, "waxpby": 1.6}


def copy_bandwidth(cupy, nbytes: int = 1 << 30, repeat: int = 20) -> float:
    """Bytes per second of a device-to-device copy, counting read and write."""
    src, dst = cupy.empty(nbytes, np.uint8), cupy.empty(nbytes, np.uint8)
    src.fill(1)
    times = _time(cupy, lambda: dst.__setitem__(..., src), repeat, gpu_only=True)
    return 2 * nbytes / (statistics.median(times) * 1e-3)


def _time(cupy, run, repeat: int, warmup: int = 3, gpu_only: bool = False) -> list[float]:
    """Milliseconds of each run; ``gpu_only``: a spinning kernel first (see the module doc)."""
    spin = _spinner(cupy) if gpu_only else None
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(warmup):
        run()
    out = []
    for _ in range(repeat):
        if spin is not None:
            spin((1,), (32,), (np.int64(100_000),))
        start.record()
        run()
        end.record()
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end))
    return out


def _spinner(cupy):
    from fusec.runtime.cuda import TIMING_KERNELS
    return cupy.RawModule(code=TIMING_KERNELS).get_function("fusec_spin")


def device_inputs(cupy, dag, sizes, dtype, seed: int) -> dict:
    rng = cupy.random.default_rng(seed)
    out = {}
    for value in (dag.value(v) for v in dag.inputs):
        if value.kind.value == "scalar":
            out[value.name] = float(np.random.default_rng(seed + value.id).uniform(-1, 1))
        else:
            shape = tuple(sizes[d] for d in value.dims)
            out[value.name] = (rng.random(shape, dtype=dtype) - 0.5).astype(dtype)
    return out


def relative_difference(cupy, a, b) -> float:
    a, b = cupy.asarray(a, dtype=np.float64), cupy.asarray(b, dtype=np.float64)
    return float(cupy.max(cupy.abs(a - b)) / max(float(cupy.max(cupy.abs(b))), 1e-30))


def measure(script: str, dtype: str, repeat: int, cupy, bandwidth: float) -> dict:
    import fusec
    from bench.cublas import Blas, sequence
    from fusec.frontend import load_script
    from fusec.library.loader import load_library
    path = ROOT / "scripts" / f"{script}.script"
    from fusec import data
    library = load_library(data.LIBRARY)
    dag = load_script(path, library)
    matrix, vector = SIZES[dtype]
    has_matrix = any(dag.value(v).kind.value == "matrix" for v in dag.inputs)
    sizes = {s: matrix if has_matrix else vector for s in dag.sizes}
    program = fusec.compile(path, library, dtype, sizes=sizes)  # the tuned plan, if any
    inputs = device_inputs(cupy, dag, sizes, dtype, seed=7)
    blas = Blas(dtype)
    run_cublas, cublas_out = sequence(script, blas, inputs)
    ours = program(**inputs)
    ours = ours if isinstance(ours, tuple) else (ours,)
    run_cublas()
    cupy.cuda.runtime.deviceSynchronize()
    difference = max(relative_difference(cupy, a, b) for a, b in zip(ours, cublas_out))
    fusec_ms = statistics.median(program.time(inputs, repeat=repeat, host=False))
    cublas_ms = statistics.median(_time(cupy, run_cublas, repeat, gpu_only=True))
    fusec_host_ms = statistics.median(program.time(inputs, repeat=repeat))
    cublas_host_ms = statistics.median(_time(cupy, run_cublas, repeat))
    nbytes = program.minimum_bytes(sizes)
    return {
        "script": script, "dtype": dtype, "sizes": sizes, "minimum_bytes": nbytes,
        "kernels": [[dag.call(c).function for c in k.plan.calls] for k in program.kernels],
        "plan": program.generated.plan.summary(dag), "tuned": program.tuned,
        "fusec_us": fusec_ms * 1e3, "cublas_us": cublas_ms * 1e3,
        "fusec_gbs": nbytes / (fusec_ms * 1e-3) / 1e9, "cublas_gbs": nbytes / (cublas_ms * 1e-3) / 1e9,
        "fusec_of_copy": nbytes / (fusec_ms * 1e-3) / bandwidth,
        "speedup": cublas_ms / fusec_ms, "max_relative_difference": difference,
        "fusec_host_us": fusec_host_ms * 1e3, "cublas_host_us": cublas_host_ms * 1e3,
        "speedup_host": cublas_host_ms / fusec_host_ms,
    }


def table(rows: list[dict], bandwidth: dict) -> str:
    lines = ["| sequence | dtype | size | kernels | fusec µs | fusec GB/s | % of copy | cuBLAS µs"
             " | cuBLAS GB/s | speed-up | target | with host: fusec µs | cuBLAS µs | speed-up |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        size = "x".join(str(v) for v in dict.fromkeys(r["sizes"].values()))
        target = TARGETS.get(r["script"])
        verdict = "" if target is None else (f"≥ {target}× " + ("met" if r["speedup"] >= target else "MISSED"))
        kernels = " · ".join("+".join(k) for k in r["kernels"]) + (" (tuned)" if r.get("tuned") else "")
        lines.append(f"| {r['script']} | {r['dtype']} | {size} | {kernels} | {r['fusec_us']:.1f} |"
                     f" {r['fusec_gbs']:.0f} | {100 * r['fusec_of_copy']:.0f}% | {r['cublas_us']:.1f} |"
                     f" {r['cublas_gbs']:.0f} | {r['speedup']:.2f}× | {verdict} | {r['fusec_host_us']:.1f} |"
                     f" {r['cublas_host_us']:.1f} | {r['speedup_host']:.2f}× |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scripts", default=",".join(sorted(p.stem for p in (ROOT / "scripts").glob("*.script"))))
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default="h100-fusion")
    args = parser.parse_args(argv)
    import cupy
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows, bandwidth = [], {}
    for dtype in args.dtypes.split(","):
        bandwidth[dtype] = copy_bandwidth(cupy)
        for script in args.scripts.split(","):
            row = measure(script, dtype, args.repeat, cupy, bandwidth[dtype])
            rows.append(row)
            print(f"{script:8s} {dtype}  fusec {row['fusec_us']:9.1f} us {row['fusec_gbs']:7.0f} GB/s"
                  f"  cuBLAS {row['cublas_us']:9.1f} us  x{row['speedup']:.2f}"
                  f"  (with host: {row['fusec_host_us']:.1f} vs {row['cublas_host_us']:.1f},"
                  f" x{row['speedup_host']:.2f})"
                  f"  (results differ by {row['max_relative_difference']:.1e})", flush=True)
            cupy.get_default_memory_pool().free_all_blocks()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = list(argv if argv is not None else sys.argv[1:])
    if "--out" in shown:  # where the files went is not part of how they were measured
        del shown[shown.index("--out"):shown.index("--out") + 2]
    command = "python -m bench.fusion " + " ".join(shown)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = [f"# fusec vs the cuBLAS call sequence on {device}", "",
              f"{stamp}; `{command.strip()}`; median of {args.repeat} runs after 3 warm-ups, CUDA events;"
              " GB/s on minimum bytes. The first columns are the GPU's time for both (a spinning kernel"
              " goes first, so the host's launch overhead is left out); the last three include the"
              " host's launching, as a Python caller waits for it.",
              "Copy bandwidth measured in the same run: "
              + ", ".join(f"{d} run {b / 1e9:.0f} GB/s" for d, b in bandwidth.items()) + ".", "", ""]
    (out / f"{args.name}.md").write_text("\n".join(header) + table(rows, bandwidth) + "\n", encoding="utf-8")
    (out / f"{args.name}.json").write_text(json.dumps({"device": device, "when": stamp, "command": command,
                                                       "copy_bandwidth": bandwidth, "rows": rows}, indent=1))
    print(table(rows, bandwidth))
    bad = [r for r in rows if r["max_relative_difference"] > (1e-3 if r["dtype"] == "float32" else 1e-9)]
    for r in bad:
        print(f"MISMATCH {r['script']} {r['dtype']}: fusec and cuBLAS differ by {r['max_relative_difference']:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
