"""How a tile's accesses should go where matrix rows do not start on a 16-byte boundary.

At an odd n in float32 no tile of fusec's is full, and until 2026-11-24 every matrix access
went through load_values/store_values's guarded path: one condition per value. This times,
by hand (experiments/unaligned_access.cu), C = A + B (two matrices read, one written) and y = A x
(one read) over a 10000-row matrix of 10000 and of 10001 columns, fp32, with fusec's tile
layout (32 x 8 threads, 4 rows per thread, 128 columns per tile; 1 or 4 tiles per block), in
these ways:

- strided, guarded: lane tx holds columns col0 + tx*4 + v, every access checked (the old path);
- strided, straight: the same, tiles inside take no checks;
- piece (madd): a branch per row and 4-value piece, then 4 plain accesses (what load_values
  and store_values do now);
- coalesced, guarded / straight: lane tx holds columns col0 + v*32 + tx (128 consecutive
  bytes per warp access);
- vec: float4 accesses (aligned rows only; edge tiles skipped, so its results are not checked).

CUDA events around one launch after an L2 flush, median of 20 after 3 warm-ups; results
checked against CuPy (C exactly as A + B; y against a float64 product, rtol 1e-4).

    python -m experiments.unaligned_access [--rows 10000] [--cols 10000,10001] [--out DIR] [--name NAME]

Needs CuPy and a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cu")
VARIANTS = {"madd": ("strided_g", "strided_s", "piece_g", "coal_g", "coal_s", "vec"),
            "gemv": ("strided_g", "strided_s", "coal_g", "coal_s", "vec")}
LABELS = {"strided_g": "strided, guarded", "strided_s": "strided, straight", "piece_g": "piece branch",
          "coal_g": "coalesced, guarded", "coal_s": "coalesced, straight", "vec": "float4 (edges skipped)"}
ITERS = (1, 4)
TILE_ROWS, TILE_COLS = 32, 128


def grid(rows: int, cols: int, iters: int) -> int:
    row_tiles = -(-rows // TILE_ROWS)
    return -(-row_tiles // iters) * -(-cols // TILE_COLS)


def table(results: list[dict]) -> str:
    lines = ["| kernel | cols | way | tiles per block | µs | GB/s | check |", "|---|---:|---|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['kernel']} | {r['cols']} | {LABELS[r['variant']]} | {r['iters']} | {r['us']:.1f}"
                     f" | {r['gbps']:.0f} | {r['check']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--cols", default="10000,10001", help="comma-separated (default: 10000,10001)")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-unaligned-access")
    args = parser.parse_args()
    import cupy as cp
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",))
    start, end = cp.cuda.Event(), cp.cuda.Event()
    flush = cp.empty(64 << 20, dtype=cp.uint8)
    results = []
    rows = args.rows
    for cols in (int(c) for c in args.cols.split(",")):
        A = cp.random.rand(rows, cols, dtype=cp.float32)
        B = cp.random.rand(rows, cols, dtype=cp.float32)
        x = cp.random.rand(cols, dtype=cp.float32)
        C, y = cp.empty_like(A), cp.zeros(rows, dtype=cp.float32)
        want_c, want_y = A + B, A.astype(cp.float64) @ x.astype(cp.float64)
        for kernel, variants in VARIANTS.items():
            for variant in variants:
                if variant == "vec" and cols % 4:
                    continue
                for iters in ITERS:
                    fn = module.get_function(f"{kernel}_{variant}")
                    shape = (np.int32(rows), np.int32(cols), np.int32(iters))
                    call_args = (A, B, C, *shape) if kernel == "madd" else (A, x, y, *shape)
                    C.fill(np.nan)
                    times = []
                    for r in range(23):
                        flush.fill(r)
                        if kernel == "gemv":
                            y.fill(0)
                        start.record()
                        fn((grid(rows, cols, iters),), (32, 8, 1), call_args)
                        end.record()
                        end.synchronize()
                        if r >= 3:
                            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
                    if variant == "vec":
                        check = "not checked"
                    elif kernel == "madd":
                        check = "ok" if bool(cp.array_equal(C, want_c)) else "WRONG"
                    else:
                        check = "ok" if bool(cp.allclose(y, want_y, rtol=1e-4)) else "WRONG"
                    us = statistics.median(times)
                    nbytes = (3 if kernel == "madd" else 1) * rows * cols * 4
                    results.append(dict(kernel=kernel, cols=cols, variant=variant, iters=iters, us=us,
                                        gbps=nbytes / us / 1e3, check=check))
                    print(f"{kernel} cols={cols} {LABELS[variant]:22s} {iters} tiles/block  {us:8.1f} us"
                          f"  {nbytes / us / 1e3:6.0f} GB/s  {check}", flush=True)
        del A, B, C, x, y, want_c, want_y
    write(args, results, cp.cuda.runtime.getDeviceProperties(0)["name"].decode())


def write(args, results: list[dict], gpu: str) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (args.out / f"{args.name}.json").write_text(json.dumps(dict(gpu=gpu, when=when, rows=args.rows,
                                                                 results=results), indent=1))
    text = (f"# Row accesses off 16-byte boundaries, by hand, on {gpu}\n\n{when};"
            " `python -m experiments.unaligned_access"
            f" --rows {args.rows} --cols {args.cols}`. C = A + B (GB/s on 3 matrices) and y = A x (GB/s on A),"
            f" fp32, {args.rows} rows; events around one launch after an L2 flush, median of 20."
            " See the module's docstring for the ways.\n\n" + table(results) + "\n")
    (args.out / f"{args.name}.md").write_text(text)


if __name__ == "__main__":
    main()
