"""What would SGEMV gain from wide tiles and a direct finish? fusec's kernel, rewritten, beside torch.compile.

At n = 4096 fp32 fusec's tuned SGEMV takes about 9 % longer than torch.compile's
(experiments/results/h100-peers-n4096.md), at 16384 they tie. Triton gives each block one
row, all its threads along it, and writes y directly. fusec's tile geometry has
one warp per row of threads (BLOCK_X = 32, a 128-column tile in fp32) and
always finishes a reduction across blocks: every block stores partials, fences,
takes a ticket, and the last block sums. This takes fusec's generated program for
sgemv.script (the tuned plan where the tuning cache has one; where that is a band
kernel, the best-predicted plan of tile kernels), rewrites its source one thing at
a time (nothing in the library or the code generator changes), and times, in one
process on the same inputs:

- fusec: the program as generated (and "fusec's tile plan", the rewrites' start,
  where fusec's own plan is a band kernel);
- wide W: the same kernel with BLOCK_X = 32 W threads along a row (a tile of
  TILE_ROWS x 32 W VEC), ITERS making one block cover whole rows, the serial loop
  unrolled by up to 4 and the rows' warp sums meeting in shared memory; its
  reduction still finishes across blocks as fusec's does (one arrival per tile);
- wide W, direct: the same without partials, fence or ticket: the block writes
  ``alpha * sum + beta * y0`` itself, as it may when it covers whole rows;
- hand row per block (experiments/wide_tiles.cu): one row per block, every load issued
  together, Triton's pattern in CUDA;
- torch.compile (optional: skipped without PyTorch).

Every variant is checked against a float64 product (relative error at most
1e-5 in fp32, 1e-12 in fp64) before and after the timed runs. GPU time as in
bench.peers: a spinning kernel first, then events around one call; each round
times every contender (rotated order), --rounds rounds of --repeat runs, the
median of the rounds' medians.

    python -m experiments.wide_tiles [--n 4096] [--dtype float32] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy and fusec's runtime (PyCUDA).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import time
from pathlib import Path

import numpy as np

from .gemv_patterns import Timer

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cu")
# (threads per block, warps along a row W, tile rows): BLOCK_Y = threads / (32 W) rows of threads.
WIDE = ((128, 4, 1), (256, 8, 1), (256, 8, 4), (256, 4, 2), (512, 16, 1), (256, 1, 8))
HAND_THREADS = (256, 512)
UNROLL = 4

# The rows' sums of a wide tile: each warp sums its lanes, the W warps of a row meet in
# shared memory; `store` writes the finished row (direct) or its partial (to the workspace).
WIDE_ROUTINES = r'''
namespace {namespace} {{
template <bool DIRECT>
__device__ __forceinline__ void wide_rows_store(const real* e, real* __restrict__ y, const real* __restrict__ y0,
                                                real alpha, real beta, const fusec_tile& c) {{
  __shared__ real part[BLOCK_Y * ROWS_PER_THREAD][BLOCK_X / 32];
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {{
    const real s = warp_sum(e[k]);
    if (c.tx % 32 == 0) part[c.ty * ROWS_PER_THREAD + k][c.tx / 32] = s;
  }}
  __syncthreads();
  if (c.tx < ROWS_PER_THREAD) {{
    real s = real(0);
    #pragma unroll
    for (int w = 0; w < BLOCK_X / 32; ++w) s += part[c.ty * ROWS_PER_THREAD + c.tx][w];
    const int row = c.row0 + c.ty + c.tx * BLOCK_Y;
    if (row < c.rows) y[row] = DIRECT ? alpha * s + beta * y0[row] : s;
  }}
}}
}}
'''


@dataclasses.dataclass(frozen=True)
class Wide:
    threads: int
    warps: int  # along a row
    tile_rows: int
    direct: bool

    def iters(self, n: int, vec: int) -> int:
        return n // (32 * self.warps * vec)

    def fits(self, n: int, vec: int) -> bool:
        block_y = self.threads // (32 * self.warps)
        return (self.threads % (32 * self.warps) == 0 and self.tile_rows % block_y == 0
                and n % (32 * self.warps * vec) == 0 and n % self.tile_rows == 0)

    def name(self) -> str:
        return f"wide {self.warps}{', direct' if self.direct else ''}"

    def detail(self, n: int, vec: int) -> str:
        return (f"{self.threads} threads, tile {self.tile_rows} x {32 * self.warps * vec},"
                f" {self.iters(n, vec)} iterations: whole rows")


def rewrite(source: str, wide: Wide, n: int, vec: int) -> str:
    """fusec's generated SGEMV kernel as ``wide``: its macros, its row sums, its loop, its finish."""
    kernel = re.search(r'extern "C" __global__ void __launch_bounds__\(BLOCK\) (\w+)\(', source)
    assert kernel and "each block walks ITERS tiles along the columns" in source, \
        "experiments.wide_tiles rewrites a gemv whose serial loop walks the columns"
    block_x = 32 * wide.warps
    macros = {"ITERS": wide.iters(n, vec), "BLOCK": wide.threads, "TILE_ROWS": wide.tile_rows,
              "TILE_COLS": block_x * vec, "BLOCK_X": block_x, "BLOCK_Y": wide.threads // block_x}
    for name, value in macros.items():
        source, count = re.subn(rf"#define {name} \d+\n", f"#define {name} {value}\n", source, count=1)
        assert count == 1, name
    finish = re.search(r"\[&\]\(long long i, real acc\) \{ (g_\w+)\[i\] = "
                       r"axpby_finish\(acc, (\w+), (\w+), (g_\w+)\[i\]\); \}", source)
    assert finish, "experiments.wide_tiles expects sgemv_ab's finish"
    out, alpha, beta, y0 = finish.groups()
    routines = WIDE_ROUTINES.format(namespace=f"{kernel.group(1)}_routines")
    source = source.replace(kernel.group(0), routines + kernel.group(0))
    store = re.search(r"  rows_partial_store\((r_\w+), (ws_\w+ [^\n]*), c\);\n", source)
    assert store, "experiments.wide_tiles expects rows_partial_store"
    partial, target = store.groups()
    if wide.direct:
        call = f"  wide_rows_store<true>({partial}, {out}, {y0}, {alpha}, {beta}, c);\n"
        start = source.index("  // every partial of this block must be visible")
        end = source.index("#undef ITERS", start)
        source = source[:start] + "}\n" + source[end:]  # drops the fence, ticket and finish; closes the kernel
    else:
        call = f"  wide_rows_store<false>({partial}, {target}, {y0}, {alpha}, {beta}, c);\n"
    source = source.replace(store.group(0), call)
    # fusec_sum_partials takes BLOCK reals of shared memory
    source = re.sub(r"real smem\[(\d+)\];", lambda m: f"real smem[{max(int(m.group(1)), wide.threads)}];",
                    source, count=1)
    loop = "  for (int it = 0; it < ITERS && c.col0 < cols; ++it, c.col0 += TILE_COLS) {"
    assert loop in source
    unrolled = f"  #pragma unroll {UNROLL}\n  for (int it = 0; it < ITERS; ++it, c.col0 += TILE_COLS) {{"
    return source.replace(loop, unrolled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="matrix side, a multiple of 4096")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default=None, help="default: h100-wide-tiles-<dtype>-<n>")
    args = parser.parse_args()
    if args.n % 4096:
        parser.error("--n must be a multiple of 4096 (the rewritten kernels cover whole rows without guards)")
    rows = measure(args.n, args.dtype, args.rounds, args.repeat)
    write(args, rows)


def tile_base(program, n: int, dtype: str, gpu: str | None = None):
    """The program the rewrites start from: ``program`` (fusec's for sgemv.script at n x n),
    or where that runs a band kernel, which they do not know, the best-predicted plan of
    tile kernels."""
    import fusec
    from fusec.cost.perfdb import predictor_for
    from fusec.space.combinations import build_space
    if not program.generated.plan.uses_band:
        return program
    library = program.generated.library
    space = build_space(program.dag, library, dtype, {"m": n, "n": n}, predictor_for(library, gpu))
    return fusec.compile(ROOT / "scripts" / "sgemv.script", library, dtype,
                         plan=space.best_where(lambda plan: not plan.uses_band).plan)


def measure(n: int, dtype: str, rounds: int, repeat: int) -> list[dict]:
    import cupy as cp

    import fusec
    from bench.fusion import device_inputs
    np_dtype = np.dtype(dtype)
    vec, ctype = 16 // np_dtype.itemsize, ("float" if dtype == "float32" else "double")
    program = fusec.compile(ROOT / "scripts" / "sgemv.script", dtype=dtype, sizes={"m": n, "n": n})
    base = tile_base(program, n, dtype)
    inputs = device_inputs(cp, program.dag, {"m": n, "n": n}, dtype, seed=5)
    A, x, y0 = inputs["A"], inputs["x"], inputs["y"]
    alpha, beta = np_dtype.type(inputs["alpha"]), np_dtype.type(inputs["beta"])
    reference = float(alpha) * (A.astype(cp.float64) @ x.astype(cp.float64)) + float(beta) * y0.astype(cp.float64)
    hand = {f"row_per_block<{ctype},{t},{n // (t * vec)}>": t for t in HAND_THREADS if n % (t * vec) == 0}
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",), name_expressions=list(hand) + ["spin"])
    module.compile()
    timer = Timer(cp, module.get_function("spin"), repeat)
    contenders = {}  # name: (detail, call, result array or None)
    plan = program.generated.plan.summary(program.dag)
    contenders["fusec"] = (("tuned: " if program.tuned else "") + plan, lambda: program(**inputs), None)
    if base is not program:
        contenders["fusec's tile plan"] = ("what the rewrites start from: " + base.generated.plan.summary(base.dag),
                                           lambda: base(**inputs), None)
    out = cp.empty(n, np_dtype)
    keep = []
    for wide in (Wide(t, w, r, d) for t, w, r in WIDE for d in (False, True)):
        if not wide.fits(n, vec):
            print(f"{wide.name()} ({wide.threads}, {wide.tile_rows}) left out: it does not tile n = {n}")
            continue
        kernel_module = cp.RawModule(code=rewrite(base.source, wide, n, vec), options=("-std=c++17",))
        kernel = kernel_module.get_function(re.search(r"void __launch_bounds__\(BLOCK\) (\w+)\(",
                                                      base.source).group(1))
        keep.append(kernel_module)
        row_tiles = n // wide.tile_rows
        workspace = cp.zeros(row_tiles * (wide.tile_rows + 128), np_dtype)  # one arrival per tile, whole lines
        counters = cp.zeros(row_tiles, cp.uint32)
        contenders[wide.name() + f" ({wide.threads}t, {wide.tile_rows}r)"] = (
            wide.detail(n, vec),
            lambda k=kernel, g=row_tiles, b=wide.threads, w=workspace, c=counters: k(
                (g,), (b,), (A, x, y0, out, w, c, alpha, beta, np.int32(n), np.int32(n), np.int32(1))),
            out)
    for name, threads in hand.items():
        contenders[f"hand row per block ({threads}t)"] = (
            f"{threads} threads, {n // (threads * vec)} 16-byte loads each, issued together",
            lambda k=module.get_function(name), t=threads: k((n,), (t,), (A, x, y0, out, alpha, beta, np.int32(n))),
            out)
    try:
        import torch
        tensors = {k: torch.from_dlpack(v) if hasattr(v, "__dlpack__") else v for k, v in inputs.items()}
        compiled = torch.compile(lambda i: i["alpha"] * (i["A"] @ i["x"]) + i["beta"] * i["y"], dynamic=False)
        contenders["torch.compile"] = ("Triton reduction", lambda: compiled(tensors), None)
    except ImportError as exc:
        print(f"torch.compile skipped: {exc}")

    def check(name: str) -> float:
        _, call, result = contenders[name]
        if result is not None:
            result.fill(0)
        got = call()
        got = cp.asarray(got[0] if isinstance(got, tuple) else got) if result is None else result
        error = float(cp.max(cp.abs(got - reference)) / cp.max(cp.abs(reference)))
        if not error < (1e-5 if dtype == "float32" else 1e-12):
            raise SystemExit(f"{name}: wrong result (relative error {error:.2g})")
        return error

    errors = {name: check(name) for name in contenders}
    names, samples = list(contenders), {name: [] for name in contenders}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(timer.gpu(contenders[name][1]))
    for name in names:
        errors[name] = max(errors[name], check(name))
    nbytes = A.nbytes + x.nbytes + 2 * y0.nbytes
    rows = []
    for name in names:
        us = statistics.median(samples[name])
        rows.append({"name": name, "detail": contenders[name][0], "gpu_us": us, "gbs": nbytes / us / 1e3,
                     "error": errors[name], "rounds_us": samples[name]})
        print(f"{name:34s} {us:8.2f} us  {nbytes / us / 1e3:6.0f} GB/s", flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return [{"device": device, "n": n, "dtype": dtype, "rounds": rounds, "repeat": repeat}] + rows


def write(args, rows: list[dict]) -> None:
    meta, rows = rows[0], rows[1:]
    n, dtype = meta["n"], meta["dtype"]
    name = args.name or f"h100-wide-tiles-{dtype}-{n}"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = f"python -m experiments.wide_tiles --n {n} --dtype {dtype} --rounds {args.rounds} --repeat {args.repeat}"
    args.out.mkdir(parents=True, exist_ok=True)
    record = {**meta, "when": when, "command": command, "rows": rows}
    (args.out / f"{name}.json").write_text(json.dumps(record, indent=1))
    by_name = {r["name"]: r for r in rows}
    fusec_us, peer = by_name["fusec"]["gpu_us"], by_name.get("torch.compile")
    lines = [f"# SGEMV with wide tiles and a direct finish on {meta['device']}", "",
             f"{when}; `{command}`; {dtype}, A {n} x {n}, y = alpha A x + beta y0. GPU µs: a spinning kernel"
             " first, then events around one call; the median of the rounds' medians, every contender timed in"
             " each round. Rows 'wide': fusec's generated kernel rewritten (experiments/wide_tiles.py), W warps along"
             " a row; 'direct': without partials, fence and ticket. vs fusec / vs torch.compile: their µs over"
             " this row's (above 1: this row is faster). Every result checked against float64 before and after"
             " timing.", "",
             "| contender | what | GPU µs | GB/s | vs fusec | vs torch.compile |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        versus = f"{peer['gpu_us'] / r['gpu_us']:.3f}×" if peer else "—"
        lines.append(f"| {r['name']} | {r['detail']} | {r['gpu_us']:.2f} | {r['gbs']:.0f} |"
                     f" {fusec_us / r['gpu_us']:.3f}× | {versus} |")
    (args.out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / name}.md")


if __name__ == "__main__":
    main()
