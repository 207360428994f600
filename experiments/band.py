"""Would a *band* geometry pay for BiCGK? Hand-written kernels beside fusec's tuned plan and torch.compile.

At fp32 n = 4096 fusec's BiCGK takes about 27 µs on the GPU, 1.21x its floor, and with the
host's launching it sits on the 1.5x-the-floor target (experiments/results/h100-peers-n4096.md). Its tile
geometry gives a block a 64 x 128 tile, so both reductions finish across blocks: every block
stores partials of q and of s, fences, takes tickets, and the last block at each tile sums them
(experiments.finish_cost: that finish was 16 % of the kernel at this size). Here each block owns a band
of whole rows instead (experiments/band.cu): q's rows are whole inside the block and written directly;
s's partials stay in registers over the band and are added once per block with vector atomics
(ACC 0: into s, zeroed by a memset first, inside the timed call; ACC 1: into a workspace the last
block copies to s and zeroes again). This is the geometry fusec's library would need; the bench
asks what it would give before it is built.

Each case (precision and n) times, in one process on the same inputs, fusec's program for
scripts/bicgk.script (its tuned plan where the tuning cache has one), every band shape of SHAPES
that tiles n, and torch.compile (skipped without PyTorch or Triton). GPU time as experiments.wide_tiles:
a spinning kernel first, then events around one call; each round times every contender (rotated
order, L2 emptied before each: experiments.l2_keep's flush), the median of the rounds' medians. Every
result is checked against a float64 product before and after the timed runs (relative error 1e-5
in fp32, 1e-12 in fp64).

    python -m experiments.band [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy, an sm_90 GPU (vector atomics) and fusec's runtime (PyCUDA).
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
CASES = ("float32:4096", "float64:4096")  # at fp32 16384 (8 pieces a row) the wide bands spill
# (BLOCK threads, R rows per block, U rows loaded at once, ACC): PER = n / (BLOCK * VEC) pieces per row.
SHAPES = ((512, 8, 2, 1), (512, 16, 2, 1), (512, 32, 2, 1), (512, 16, 4, 1), (512, 32, 4, 1),
          (256, 8, 2, 1), (256, 16, 2, 1), (256, 32, 2, 1), (1024, 8, 4, 1), (1024, 16, 4, 1),
          (1024, 32, 4, 1), (512, 16, 2, 0), (512, 32, 2, 0), (256, 16, 2, 0))
MAX_PER = 8  # 16-byte pieces of a row per thread: registers


def parse_case(text: str) -> tuple[str, int]:
    dtype, _, n = text.partition(":")
    if dtype not in ("float32", "float64") or not n.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected DTYPE:N, e.g. float32:4096")
    return dtype, int(n)


def pieces(dtype: str, n: int, block: int) -> int | None:
    """16-byte pieces of a row per thread, or None where the shape does not tile n."""
    vec = 16 // np.dtype(dtype).itemsize
    if n % (block * vec):
        return None
    per = n // (block * vec)
    return per if per <= MAX_PER else None


def name_of(shape: tuple) -> str:
    block, rows, batch, acc = shape
    return f"band {block}t {rows}r U{batch}" + (" (workspace)" if acc else " (memset)")


def instantiation(ctype: str, shape: tuple, per: int) -> str:
    block, rows, batch, acc = shape
    return f"bicgk_band<{ctype},{block},{per},{rows},{batch},{acc}>"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", type=parse_case, action="append",
                        help=f"DTYPE:N, repeatable (default: {', '.join(CASES)})")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-band")
    args = parser.parse_args()
    cases = args.case or [parse_case(c) for c in CASES]
    results = [measure(dtype, n, args.rounds, args.repeat) for dtype, n in cases]
    write(args, cases, results)


def measure(dtype: str, n: int, rounds: int, repeat: int) -> dict:
    import cupy as cp

    import fusec
    from bench.fusion import device_inputs
    from experiments.gemv_patterns import Timer
    from experiments.l2_keep import l2_flusher
    np_dtype = np.dtype(dtype)
    ctype = "float" if dtype == "float32" else "double"
    sizes = {"m": n, "n": n}
    program = fusec.compile(ROOT / "scripts" / "bicgk.script", dtype=dtype, sizes=sizes)
    inputs = device_inputs(cp, program.dag, sizes, dtype, seed=7)
    A, p, r = inputs["A"], inputs["p"], inputs["r"]
    A64 = A.astype(cp.float64)
    reference = (A64 @ p.astype(cp.float64), A64.T @ r.astype(cp.float64))
    del A64
    shapes = [(s, pieces(dtype, n, s[0])) for s in SHAPES]
    shapes = [(s, per) for s, per in shapes if per]
    names = [instantiation(ctype, s, per) for s, per in shapes]
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17", "-arch=sm_90"),
                          name_expressions=names + ["spin"])
    module.compile()
    timer = Timer(cp, module.get_function("spin"), repeat)
    q, s = cp.empty(n, np_dtype), cp.empty(n, np_dtype)
    workspace, counter = cp.zeros(n, np_dtype), cp.zeros(1, cp.uint32)
    contenders = {}  # name: (detail, call returning (q, s))
    plan = program.generated.plan.summary(program.dag)
    contenders["fusec"] = (("tuned: " if program.tuned else "untuned: ") + plan, lambda: program(**inputs))
    for (shape, per), expression in zip(shapes, names):
        block, rows, _, acc = shape
        kernel, grid = module.get_function(expression), -(-n // rows)

        def call(k=kernel, g=grid, b=block, zero=not acc):
            if zero:
                s.fill(0)
            k((g,), (b,), (A, p, r, q, s, workspace, counter, np.int32(n)))
            return q, s
        contenders[name_of(shape)] = (f"{grid} blocks of {block} threads, {per} pieces of 16 bytes per row"
                                      f" per thread", call)
    try:
        import torch
        A_t, p_t, r_t = (torch.from_dlpack(v) for v in (A, p, r))
        compiled = torch.compile(lambda: (A_t @ p_t, A_t.T @ r_t), dynamic=False)
        compiled()
        contenders["torch.compile"] = ("A @ p, A.T @ r", lambda: compiled())
    except Exception as exc:  # an optional peer: its absence is reported, not an error
        print(f"torch.compile skipped: {type(exc).__name__}: {exc}")

    tolerance = 1e-5 if dtype == "float32" else 1e-12

    def check(name: str) -> float:
        q.fill(np.nan)
        s.fill(np.nan)
        got = contenders[name][1]()
        error = 0.0
        for value, want in zip(got, reference):
            value = cp.asarray(value, dtype=cp.float64)
            error = max(error, float(cp.max(cp.abs(value - want)) / cp.max(cp.abs(want))))
        if not error < tolerance:
            raise SystemExit(f"{name} at {dtype} n = {n}: wrong result (relative error {error:.2g})")
        return error

    errors = {name: check(name) for name in contenders}
    order, samples = list(contenders), {name: [] for name in contenders}
    flush = l2_flusher(cp)
    for k in range(rounds):
        for name in order[k % len(order):] + order[:k % len(order)]:
            flush()  # nothing left in L2 by the contender before (evict-first loads would not displace it)
            samples[name].append(timer.gpu(contenders[name][1]))
    for name in order:
        errors[name] = max(errors[name], check(name))
    nbytes = A.nbytes + 4 * p.nbytes
    rows = []
    for name in order:
        us = statistics.median(samples[name])
        rows.append({"name": name, "detail": contenders[name][0], "gpu_us": us, "gbs": nbytes / us / 1e3,
                     "error": errors[name], "rounds_us": samples[name]})
        print(f"{dtype} {n} {name:34s} {us:8.2f} us  {nbytes / us / 1e3:6.0f} GB/s", flush=True)
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return {"device": device, "dtype": dtype, "n": n, "rows": rows}


def write(args, cases: list, results: list[dict]) -> None:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = ("python -m experiments.band " + " ".join(f"--case {d}:{n}" for d, n in cases)
               + f" --rounds {args.rounds} --repeat {args.repeat}")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"when": when, "command": command, "rounds": args.rounds, "repeat": args.repeat, "cases": results}
    (args.out / f"{args.name}.json").write_text(json.dumps(record, indent=1))
    lines = [f"# BiCGK with a band geometry, hand-written, on {results[0]['device']}", "",
             f"{when}; `{command}`. q = A p, s = Aᵀ r, A n x n row-major. GPU µs: a spinning kernel first,"
             " then events around one call; the median of the rounds' medians, every contender timed in each"
             " round. 'band': experiments/band.cu, each block a band of R whole rows, U rows' loads at once, q written"
             " directly, s's partials added with vector atomics (into s after a memset inside the timed call,"
             " or into a workspace the last block copies out). GB/s on minimum bytes (A once, four vectors)."
             " vs fusec / vs torch.compile: their µs over this row's (above 1: this row is faster). Every"
             " result checked against float64 before and after timing.", ""]
    for case in results:
        by_name = {r["name"]: r for r in case["rows"]}
        fusec_us, peer = by_name["fusec"]["gpu_us"], by_name.get("torch.compile")
        lines += [f"## {case['dtype']}, n = {case['n']}", "",
                  "| contender | what | GPU µs | GB/s | vs fusec | vs torch.compile |", "|---|---|---:|---:|---:|---:|"]
        for r in case["rows"]:
            versus = f"{peer['gpu_us'] / r['gpu_us']:.3f}×" if peer else "—"
            lines.append(f"| {r['name']} | {r['detail']} | {r['gpu_us']:.2f} | {r['gbs']:.0f} |"
                         f" {fusec_us / r['gpu_us']:.3f}× | {versus} |")
        lines.append("")
    (args.out / f"{args.name}.md").write_text("\n".join(lines))
    print(f"wrote {args.out / args.name}.md")


if __name__ == "__main__":
    main()
