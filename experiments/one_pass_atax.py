"""Does ATAX need two passes over its matrix? A hand-written one-pass kernel beside fusec's plan,
cuBLAS and torch.compile.

fusec reads ATAX's matrix twice (scripts/atax.script: y = A^T t needs the whole of t = A x, a
reduction across blocks in the library's tile geometry), and the targets judge it against its
two-pass floor. But t is a row reduction: a block that owns whole rows has t_r as soon as it has
read row r, while the row is still in its registers, so y's partials can be added from the same
read. experiments/one_pass_atax.cu does that with a band geometry (one block per SM, each a band of
whole rows, U rows at a time; y's partials in registers, added once per block with vector
atomics into a workspace the last block copies out). This asks what that geometry would give ATAX
before it is built into the library.

Each case (precision and n) times, in one process on the same inputs, fusec's program for
scripts/atax.script (its tuned plan where the tuning cache has one), every shape of SHAPES that
tiles n and fits in registers, the cuBLAS calls a BLAS user writes (two gemv, through CuPy) and
torch.compile (skipped without PyTorch or Triton). GPU time as experiments.band: a spinning kernel
first, then events around one call; each round times every contender (rotated order, L2 emptied
before each), the median of the rounds' medians. Every result is checked against a float64
product before and after the timed runs (relative error 1e-5 in fp32, 1e-12 in fp64). GB/s are on
the one-pass minimum (A once, x and y).

    python -m experiments.one_pass_atax [--case float32:16384 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy, an sm_90 GPU (vector atomics) and fusec's runtime (PyCUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from experiments.band import parse_case

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cu")
CASES = ("float32:4096", "float32:16384", "float64:8192")
# (BLOCK threads, U rows per batch): PER = n / (BLOCK * VEC) pieces of 16 bytes per row per thread.
SHAPES = ((512, 1), (512, 2), (1024, 1), (1024, 2), (256, 1), (256, 2))
REGISTERS_PER_SM, MOST_REGISTERS = 65536, 255
OTHER_REGISTERS = 32  # besides the row pieces and y's partials: indices, sums, addresses


def pieces(dtype: str, n: int, shape: tuple) -> int | None:
    """16-byte pieces of a row per thread, or None where the shape does not tile n or its
    registers (this batch's pieces, the next batch's and y's partials, 4 words a piece in either
    precision) would pass what a thread may have with one block per SM (ptxas would spill)."""
    block, batch = shape
    vec = 16 // np.dtype(dtype).itemsize
    if n % (block * vec):
        return None
    per = n // (block * vec)
    words = per * 4 * (2 * batch + 1) + OTHER_REGISTERS
    return per if words <= min(MOST_REGISTERS, REGISTERS_PER_SM // block) else None


def instantiation(ctype: str, shape: tuple, per: int) -> str:
    block, batch = shape
    return f"atax_band<{ctype},{block},{per},{batch}>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", type=parse_case, action="append",
                        help=f"DTYPE:N, repeatable (default: {', '.join(CASES)})")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-one-pass-atax")
    args = parser.parse_args()
    cases = args.case or [parse_case(c) for c in CASES]
    results = [measure(dtype, n, args.rounds, args.repeat) for dtype, n in cases]
    write(args, cases, results)


def measure(dtype: str, n: int, rounds: int, repeat: int) -> dict:
    import cupy as cp

    import fusec
    from bench.fusion import copy_bandwidth, device_inputs
    from experiments.gemv_patterns import Timer
    from experiments.l2_keep import l2_flusher
    bandwidth = copy_bandwidth(cp)
    np_dtype = np.dtype(dtype)
    ctype = "float" if dtype == "float32" else "double"
    sizes = {"m": n, "n": n}
    program = fusec.compile(ROOT / "scripts" / "atax.script", dtype=dtype, sizes=sizes)
    inputs = device_inputs(cp, program.dag, sizes, dtype, seed=7)
    A, x = inputs["A"], inputs["x"]
    A64 = A.astype(cp.float64)
    reference = A64.T @ (A64 @ x.astype(cp.float64))
    del A64
    shapes = [(s, pieces(dtype, n, s)) for s in SHAPES]
    shapes = [(s, per) for s, per in shapes if per]
    names = [instantiation(ctype, s, per) for s, per in shapes]
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17", "-arch=sm_90"),
                          name_expressions=names + ["spin"])
    module.compile()
    timer = Timer(cp, module.get_function("spin"), repeat)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    y = cp.empty(n, np_dtype)
    workspace, counter = cp.zeros(n, np_dtype), cp.zeros(1, cp.uint32)
    contenders = {}  # name: (detail, call returning y)
    plan = program.generated.plan.summary(program.dag)
    contenders["fusec"] = (("tuned: " if program.tuned else "untuned: ") + plan, lambda: program(**inputs))
    for (shape, per), expression in zip(shapes, names):
        block, batch = shape
        kernel = module.get_function(expression)
        shared = n * np_dtype.itemsize  # x
        kernel.max_dynamic_shared_size_bytes = shared

        def call(k=kernel, b=block, shared=shared):
            k((sms,), (b,), (A, x, y, workspace, counter, np.int32(n)), shared_mem=shared)
            return y
        contenders[f"one pass {block}t U{batch}"] = (
            f"{sms} blocks of {block} threads, {per} pieces of 16 bytes per row per thread, {batch} rows at once", call)
    contenders["cuBLAS"] = ("t = A @ x, then A.T @ t (two gemv through CuPy)", lambda: A.T @ (A @ x))
    try:
        import torch
        A_t, x_t = torch.from_dlpack(A), torch.from_dlpack(x)
        compiled = torch.compile(lambda: A_t.T @ (A_t @ x_t), dynamic=False)
        compiled()
        contenders["torch.compile"] = ("A.T @ (A @ x)", lambda: compiled())
    except Exception as exc:  # an optional peer: its absence is reported, not an error
        print(f"torch.compile skipped: {type(exc).__name__}: {exc}")

    tolerance = 1e-5 if dtype == "float32" else 1e-12

    def check(name: str) -> float:
        y.fill(np.nan)
        got = cp.asarray(contenders[name][1](), dtype=cp.float64)
        error = float(cp.max(cp.abs(got - reference)) / cp.max(cp.abs(reference)))
        if not error < tolerance:
            raise SystemExit(f"{name} at {dtype} n = {n}: wrong result (relative error {error:.2g})")
        return error

    errors = {name: check(name) for name in contenders}
    order, samples = list(contenders), {name: [] for name in contenders}
    flush = l2_flusher(cp)
    for k in range(rounds):
        for name in order[k % len(order):] + order[:k % len(order)]:
            flush()
            samples[name].append(timer.gpu(contenders[name][1]))
    for name in order:
        errors[name] = max(errors[name], check(name))
    nbytes = A.nbytes + 2 * x.nbytes
    rows = []
    for name in order:
        us = statistics.median(samples[name])
        rows.append({"name": name, "detail": contenders[name][0], "gpu_us": us, "gbs": nbytes / us / 1e3,
                     "of_floor": us / (nbytes / bandwidth * 1e6), "error": errors[name],
                     "rounds_us": samples[name]})
        print(f"{dtype} {n} {name:24s} {us:9.2f} us  {nbytes / us / 1e3:6.0f} GB/s", flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return {"device": device, "dtype": dtype, "n": n, "copy_gbs": bandwidth / 1e9, "rows": rows}


def write(args, cases: list, results: list[dict]) -> None:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = ("python -m experiments.one_pass_atax " + " ".join(f"--case {d}:{n}" for d, n in cases)
               + f" --rounds {args.rounds} --repeat {args.repeat}")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"when": when, "command": command, "rounds": args.rounds, "repeat": args.repeat, "cases": results}
    (args.out / f"{args.name}.json").write_text(json.dumps(record, indent=1))
    lines = [f"# ATAX in one pass over its matrix, hand-written, on {results[0]['device']}", "",
             f"{when}; `{command}`. y = Aᵀ (A x), A n x n row-major. GPU µs: a spinning kernel first, then"
             " events around one call; the median of the rounds' medians, every contender timed in each round"
             " (L2 emptied before each). 'one pass': experiments/one_pass_atax.cu, one block per SM, each a band of"
             " whole rows, t's rows summed inside the block, y's partials added with vector atomics. × floor:"
             " over the one-pass floor (A once, x and y, at the copy bandwidth measured in the run); fusec's"
             " plan reads A twice. vs fusec: fusec's µs over this row's (above 1: this row is faster). Every"
             " result checked against float64 before and after timing.", ""]
    for case in results:
        fusec_us = next(r["gpu_us"] for r in case["rows"] if r["name"] == "fusec")
        lines += [f"## {case['dtype']}, n = {case['n']} (copy bandwidth {case['copy_gbs']:.0f} GB/s)", "",
                  "| contender | what | GPU µs | GB/s | × floor | vs fusec |", "|---|---|---:|---:|---:|---:|"]
        for r in case["rows"]:
            lines.append(f"| {r['name']} | {r['detail']} | {r['gpu_us']:.1f} | {r['gbs']:.0f} |"
                         f" {r['of_floor']:.2f} | {fusec_us / r['gpu_us']:.2f}× |")
        lines.append("")
    (args.out / f"{args.name}.md").write_text("\n".join(lines))
    print(f"wrote {args.out / args.name}.md")


if __name__ == "__main__":
    main()
