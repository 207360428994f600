"""Which access pattern of y = A x does the H100 reward? fusec's gemv against hand-written ones.

fusec's tuned SGEMV trailed torch.compile's (Triton) by 2-3 % in bench.peers's
GPU time, until its reduction partials stopped being written back to DRAM
(experiments.l2_policies). This times, in one process and on the same
matrix, hand-written gemv kernels (experiments/gemv_patterns.cu, not fusec's library)
that differ from fusec's tile routines in one thing each:

- rows per thread and tiles per block (what fusec's space already searches);
- U: 16-byte vectors per thread and row (fusec's tile is one vector wide);
- pipe: the next tile's loads issued before this tile's arithmetic (fusec's
  serial loop loads, then computes).

Partial sums go to y by atomicAdd (fusec instead stores partials and the last
block sums them in a fixed order). Every variant is checked against a float64
product first. Two timings each, median of --repeat: GPU time (a spinning
kernel first, then CUDA events around one call: the host's launching is left
out, as in bench.peers) and pipelined (10 calls back to back, divided by 10).

    python -m experiments.gemv_patterns [--n 16384] [--dtype float32] [--repeat 30] [--out DIR]

Needs CuPy; PyTorch (torch.compile) and fusec's runtime (PyCUDA) are optional
rows. Sizes must be multiples of 4096; a variant whose tiles do not cover the
matrix exactly (wide ones at small n) is left out and said so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cu")

# (tile rows, block rows BY, U vectors per row, tiles per block, pipelined): the first is fusec's
# 32-row, 2-tile shape, then the shapes fusec searches at 4 tiles, then the wider and pipelined ones.
VARIANTS = ((32, 8, 1, 2, 0), (64, 8, 1, 2, 0), (32, 8, 1, 4, 0), (16, 8, 1, 4, 0), (8, 8, 1, 4, 0),
            (8, 8, 1, 4, 1), (16, 8, 1, 4, 1), (64, 8, 2, 2, 1), (8, 8, 2, 4, 1), (8, 8, 4, 2, 1),
            (8, 8, 8, 1, 0), (16, 8, 8, 2, 1), (8, 8, 8, 16, 1))
SPIN_CYCLES = 200_000  # ~0.1 ms: longer than any call takes to queue


def fitting(n: int, vec: int, variants=VARIANTS) -> list[tuple]:
    """The variants whose blocks cover an n x n matrix exactly (the kernels have no edge guards)."""
    return [v for v in variants
            if n % v[0] == 0 and n % (32 * vec * v[2] * v[3]) == 0]


class Timer:
    def __init__(self, cupy, spin, repeat: int):
        self.cp, self.spin, self.repeat = cupy, spin, repeat

    def gpu(self, call) -> float:
        """The GPU's time: a spinning kernel first, so that the call is queued before it starts."""
        return self._median(call, lambda: self.spin((1,), (1,), (np.int64(SPIN_CYCLES),)))

    def host(self, call) -> float:
        """Events around one whole call from an idle GPU, as a Python caller waits: the host's
        launching included (bench.peers' "with host")."""
        return self._median(call, self.cp.cuda.runtime.deviceSynchronize)

    def _median(self, call, before) -> float:
        """Median µs between events around ``call``, ``before()`` run ahead of each sample."""
        cp = self.cp
        call()
        cp.cuda.runtime.deviceSynchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(self.repeat):
            before()
            start.record()
            call()
            end.record()
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return statistics.median(samples)

    def pipelined(self, call, calls: int = 10) -> float:
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        samples = []
        for _ in range(self.repeat):
            start.record()
            for _ in range(calls):
                call()
            end.record()
            end.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / calls)
        return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=16384, help="matrix side, a multiple of 4096")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-gemv-patterns")
    args = parser.parse_args()
    if args.n % 4096:
        parser.error("--n must be a multiple of 4096 (the kernels have no edge guards)")
    import cupy as cp
    n, dtype = args.n, np.dtype(args.dtype)
    ctype = "float" if dtype == np.float32 else "double"
    vec = 16 // dtype.itemsize
    variants = fitting(n, vec)
    for left_out in sorted(set(VARIANTS) - set(variants)):
        print(f"hand {left_out} left out: its blocks do not cover n = {n} exactly")
    names = [f"gemv_wide<{ctype},{r},{b},{u},{i},{p}>" for r, b, u, i, p in variants]
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",), name_expressions=names + ["spin"])
    module.compile()
    timer = Timer(cp, module.get_function("spin"), args.repeat)
    rng = cp.random.default_rng(7)
    A = rng.standard_normal((n, n), dtype=np.float32).astype(dtype)
    x = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    y = cp.zeros(n, dtype)
    reference = A.astype(cp.float64) @ x.astype(cp.float64)
    nbytes = A.nbytes + x.nbytes + y.nbytes
    rows = []

    def add(name: str, detail: str, call, check=None) -> None:
        if check is not None:
            got = check()
            error = float(cp.max(cp.abs(got - reference)) / cp.max(cp.abs(reference)))
            tolerance = 1e-5 if dtype == np.float32 else 1e-12
            if not error < tolerance:
                raise SystemExit(f"{name}: wrong result (relative error {error:.2g})")
        gpu, piped = timer.gpu(call), timer.pipelined(call)
        rows.append({"name": name, "detail": detail, "gpu_us": gpu, "pipelined_us": piped,
                     "gbs": nbytes / gpu / 1e3})
        print(f"{name:28s} GPU {gpu:8.1f} us  pipelined {piped:8.1f} us  {nbytes / gpu / 1e3:6.0f} GB/s", flush=True)

    for variant, name in zip(variants, names):
        tile_rows, block_y, u, iters, pipe = variant
        kernel = module.get_function(name)
        grid = (n // tile_rows) * (n // (32 * vec * u * iters))
        launch = lambda k=kernel, g=grid, b=block_y: k((g,), (32, b), (A, x, y, np.int32(n), np.int32(n)))  # noqa: E731

        def checked(launch=launch):
            y.fill(0)
            launch()
            return y
        detail = (f"{tile_rows // block_y} row(s)/thread, {u * 16} B/row/thread, {iters} tile(s)/block"
                  + (", pipelined loads" if pipe else ""))
        add(f"hand {variant}", detail, launch, checked)  # timed runs accumulate into y: timing only
    add("cuBLAS (CuPy A @ x)", "", lambda: A @ x, lambda: A @ x)
    try:
        import torch
        tA, tx = torch.as_tensor(A, device="cuda"), torch.as_tensor(x, device="cuda")
        compiled = torch.compile(lambda a, v: a @ v, dynamic=False)
        add("torch.compile", "Triton reduction", lambda: compiled(tA, tx),
            lambda: cp.asarray(compiled(tA, tx)))
    except ImportError as exc:
        print(f"torch.compile skipped: {exc}")
    try:
        import fusec
        from fusec import data
        program = fusec.compile(ROOT / "scripts" / "sgemv.script", data.LIBRARY, args.dtype,
                                sizes={"m": n, "n": n})
        inputs = {"A": A, "x": x, "y": cp.zeros(n, dtype), "alpha": 1.0, "beta": 0.0}
        add("fusec sgemv" + (" (tuned)" if program.tuned else ""), program.generated.plan.summary(program.dag),
            lambda: program(**inputs), lambda: program(**inputs))
    except ImportError as exc:
        print(f"fusec skipped: {exc}")
    write(args, rows, n, dtype.name)


def write(args, rows, n: int, dtype: str) -> None:
    import cupy as cp
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    command = f"python -m experiments.gemv_patterns --n {n} --dtype {dtype} --repeat {args.repeat}"
    (args.out / f"{args.name}.json").write_text(json.dumps(
        {"device": device, "when": when, "command": command, "n": n, "dtype": dtype, "rows": rows}, indent=1))
    peer = next((r for r in rows if r["name"] == "torch.compile"), None)
    lines = [f"# y = A x access patterns on {device}", "",
             f"{when}; `{command}`; {dtype}, A {n} x {n}. GPU µs: a spinning kernel first, then events around"
             " one call; pipelined µs: 10 calls back to back. Hand-written kernels: experiments/gemv_patterns.cu"
             " (variant = tile rows, block rows, 16-byte vectors per row and thread, tiles per block,"
             " pipelined). vs torch.compile: its µs / this row's, in the same timing.", "",
             "| contender | what | GPU µs | GB/s | pipelined µs | vs torch.compile (GPU)"
             " | vs torch.compile (pipelined) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = (f"{peer['gpu_us'] / r['gpu_us']:.3f}×", f"{peer['pipelined_us'] / r['pipelined_us']:.3f}×") \
            if peer else ("", "")
        lines.append(f"| {r['name']} | {r['detail']} | {r['gpu_us']:.1f} | {r['gbs']:.0f} | {r['pipelined_us']:.1f}"
                     f" | {ratio[0]} | {ratio[1]} |")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / args.name}.md")


if __name__ == "__main__":
    main()
