"""Horizontal fusion (HFuse) against the same kernels launched apart.

    python -m experiments.horizontal [--pairs two_gemv,gemv_dot,bicgk] [--sizes 1024,2048,4096]
                               [--dtype float32] [--repeat 30] [--tune-top 10] [--out experiments/results]

For each pair of independent calls (two gemvs on different matrices, a gemv
beside a dot, BiCGK's gemv and gemv-T) at n x n (vectors of n), every
horizontal kernel the space offers is timed three ways, on the same inputs:

- horizontal: the one kernel, the parts side by side in every block;
- one after another: the same two part kernels, back to back in one stream;
- two streams: the same two part kernels, one on each of two CUDA streams
  (the usual way to let independent kernels overlap).

The GPU's time (CUDA events; a spinning kernel goes first so the start event
fires once the launches are queued, and the host's launch overhead is not
counted), median of --repeat runs after warm-up. Inputs are rotated across
enough copies to exceed the 50 MB L2 (--no-rotate keeps one copy: warm L2),
so every run reads DRAM as a one-off call does. Each horizontal kernel is
checked against the float64 oracle before it is timed.

The table shows, per pair and size, the predicted-first horizontal kernel
and the fastest one measured, each against its own parts one after another
and on two streams; for BiCGK also the vertical fusion (A read once). Then
``fusec tune`` (top --tune-top, not cached) at each size: its winner, and
when that is a horizontal kernel, the same kernels one after another timed
the tuner's way: the issue asks that the tuner never picks a horizontal
kernel slower than that.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PAIRS = {"two_gemv": ROOT / "scripts" / "horizontal" / "two_gemv.script",
         "gemv_dot": ROOT / "scripts" / "horizontal" / "gemv_dot.script",
         "bicgk": ROOT / "scripts" / "bicgk.script"}
L2_BYTES = 50 * 2 ** 20
TARGET = 1.3  # over two streams, at n <= 2048, for at least one pair


class Timed:
    """A program's kernels, ready to launch on rotated input sets."""

    def __init__(self, program, sets, ctx):
        self.program, self.sets = program, []
        self.loaded = program._load(ctx)
        for arrays in sets:
            binding = program.bind(arrays)
            buffers = program._buffers_for(ctx, binding.sizes)
            pointers, outputs = program._place(binding, buffers)  # outputs stay alive while kernels write
            self.sets.append((program._launches(buffers, pointers, binding), outputs))

    def launch(self, index: int, streams=None) -> None:
        launches, _ = self.sets[index % len(self.sets)]
        for k, (kernel, function, grid, args) in enumerate(launches):
            self.loaded.launch(kernel, grid, args, streams[k % len(streams)] if streams else None, function)


def time_us(clock, timed: Timed, repeat: int, streams=None, warmup: int = 3) -> float:
    for i in range(warmup):
        timed.launch(i, streams)
    times = [clock.seconds(lambda i=i: timed.launch(i, streams)) for i in range(repeat)]
    return statistics.median(times) * 1e6


def twin(plan):
    from fusec.ir.plan import HorizontalPlan, ProgramPlan
    kernels = []
    for kernel in plan.kernels:
        kernels += list(kernel.parts) if isinstance(kernel, HorizontalPlan) else [kernel]
    return ProgramPlan(tuple(kernels))


def measure_pair(name: str, n: int, dtype: str, repeat: int, rotate: bool, library, predictor, ctx) -> dict:
    import pycuda.driver as drv
    import pycuda.gpuarray as gpuarray

    from fusec import nvcc, oracle
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.ir.plan import HorizontalPlan, ProgramPlan
    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    from fusec.space.combinations import build_space
    dag = load_script(PAIRS[name], library)
    sizes = {s: n for s in dag.sizes}
    space = build_space(dag, library, dtype, sizes, predictor)
    (slot,) = space.horizontals
    options = space.options[slot]
    plans = [ProgramPlan((plan,)) for plan, _, _ in options]
    vertical = next((c.plan for c in space.ranked()
                     if len(c.plan.kernels) == 1 and not isinstance(c.plan.kernels[0], HorizontalPlan)), None)
    programs = {p: Program(generate(dag, library, p, dtype)) for p in plans}
    twins = {p: Program(generate(dag, library, twin(p), dtype)) for p in plans}
    extra = {vertical: Program(generate(dag, library, vertical, dtype))} if vertical else {}
    sources = [p.source for p in [*programs.values(), *twins.values(), *extra.values()]]
    nvcc.compile_many(list(dict.fromkeys(sources)), cuda.arch_of(ctx))
    rng = np.random.default_rng(n)
    host = oracle.random_inputs(dag, sizes, dtype, rng)
    per_set = sum(v.nbytes for v in host.values() if isinstance(v, np.ndarray))
    copies = min(64, max(1, math.ceil(4 * L2_BYTES / per_set))) if rotate else 1
    sets = [{k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in host.items()}]
    for _ in range(copies - 1):  # the same values elsewhere in memory
        sets.append({k: (v.copy() if isinstance(v, gpuarray.GPUArray) else v) for k, v in sets[0].items()})
    expected = oracle.expect(dag, library, host)
    clock = cuda.gpu_clock(ctx)
    streams = [drv.Stream(), drv.Stream()]
    rows = []
    for rank, (plan, (hplan, _, predicted)) in enumerate(zip(plans, options), 1):
        program = programs[plan]
        results = program.run(sets[0], poison=True)
        results = results if isinstance(results, tuple) else (results,)
        outputs = {o: (r.get() if hasattr(r, "get") else r) for o, r in zip(program.outputs, results)}
        checks = oracle.check_outputs(dag, library, host, outputs, dtype, expected=expected)
        if not all(c.passed for c in checks):
            rows.append({"rank": rank, "plan": plan.summary(dag),
                         "wrong": [c.reason for c in checks if not c.passed]})
            continue
        h = time_us(clock, Timed(program, sets, ctx), repeat)
        pair = Timed(twins[plan], sets, ctx)
        sequential = time_us(clock, pair, repeat)
        two_streams = time_us(clock, pair, repeat, streams)
        rows.append({"rank": rank, "plan": plan.summary(dag), "bound": hplan.bound,
                     "grids": [k.grid(sizes) for k in program.kernels[0].parts],
                     "predicted_us": predicted * 1e6, "horizontal_us": h, "sequential_us": sequential,
                     "streams_us": two_streams})
        program.release()
        twins[plan].release()
    out = {"pair": name, "n": n, "dtype": dtype, "sizes": sizes, "rotated_copies": copies, "rows": rows}
    if vertical is not None:
        v = extra[vertical]
        out["vertical"] = {"plan": vertical.summary(dag), "us": time_us(clock, Timed(v, sets, ctx), repeat)}
        v.release()
    return out


def tuned(name: str, n: int, dtype: str, top: int, repeat: int, library) -> dict:
    """fusec tune's winner (not cached) and, if horizontal, its twin timed the same way."""
    import pycuda.gpuarray as gpuarray

    from fusec import oracle
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.ir.plan import HorizontalPlan
    from fusec.runtime.program import Program
    from fusec.tune.search import tune
    dag = load_script(PAIRS[name], library)
    sizes = {s: n for s in dag.sizes}
    result = tune(dag, library, dtype, sizes, top=top, repeat=repeat, progress=False, store=False)
    out = {"pair": name, "n": n, "top": top,
           "candidates": [{"rank": r.rank, "plan": r.plan.summary(dag), "us": r.measured * 1e6,
                           "horizontal": any(isinstance(k, HorizontalPlan) for k in r.plan.kernels)}
                          for r in result.rows]}
    winner = result.winner
    if winner is None:
        return out
    out["winner"] = {"rank": winner.rank, "plan": winner.plan.summary(dag), "us": winner.measured * 1e6,
                     "horizontal": any(isinstance(k, HorizontalPlan) for k in winner.plan.kernels)}
    if out["winner"]["horizontal"]:
        host = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(0))
        device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        both = [Program(generate(dag, library, p, dtype)) for p in (winner.plan, twin(winner.plan))]
        for _ in range(2):  # both timed alike, twice: the first round warms up
            times = [statistics.median(p.time(device, repeat=repeat, host=False)) * 1e3 for p in both]
        out["winner"]["retimed_us"], out["winner"]["twin_us"] = times
        for p in both:
            p.release()
    return out


def table(results: list[dict]) -> str:
    lines = ["| pair | n | which | horizontal kernel | grids | predicted µs | horizontal µs | one after another µs"
             " | two streams µs | vs one after another | vs two streams |",
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rows = [row for row in r["rows"] if "horizontal_us" in row]
        if not rows:
            continue
        first = rows[0] if rows[0]["rank"] == 1 else None
        fastest = min(rows, key=lambda row: row["horizontal_us"])
        for label, row in (("predicted first", first), ("fastest", fastest)):
            if row is None:
                continue
            lines.append(f"| {r['pair']} | {r['n']} | {label} (#{row['rank']}) | {row['plan']} |"
                         f" {'/'.join(map(str, row['grids']))} | {row['predicted_us']:.1f} |"
                         f" {row['horizontal_us']:.1f} | {row['sequential_us']:.1f} | {row['streams_us']:.1f} |"
                         f" {row['sequential_us'] / row['horizontal_us']:.2f}× |"
                         f" {row['streams_us'] / row['horizontal_us']:.2f}× |")
        if "vertical" in r:
            v = r["vertical"]
            lines.append(f"| {r['pair']} | {r['n']} | vertical fusion | {v['plan']} | | | {v['us']:.1f} | | |"
                         f" | |")
    return "\n".join(lines)


def tune_table(tunes: list[dict]) -> str:
    lines = ["| pair | n | horizontal among the candidates | winner | winner µs | same kernels one after"
             " another µs | verdict |", "|---|---:|---:|---|---:|---:|---|"]
    for t in tunes:
        w = t.get("winner")
        count = f"{sum(c['horizontal'] for c in t['candidates'])} of {len(t['candidates'])}"
        if w is None:
            lines.append(f"| {t['pair']} | {t['n']} | {count} | none passed | | | |")
            continue
        if w["horizontal"]:
            ok = w["retimed_us"] <= w["twin_us"] * 1.02
            verdict = "ok" if ok else "SLOWER than its kernels apart"
            lines.append(f"| {t['pair']} | {t['n']} | {count} | {w['plan']} | {w['us']:.1f} (again:"
                         f" {w['retimed_us']:.1f}) | {w['twin_us']:.1f} | {verdict} |")
        else:
            lines.append(f"| {t['pair']} | {t['n']} | {count} | {w['plan']} | {w['us']:.1f} | | not horizontal |")
    return "\n".join(lines)


def verdict(results: list[dict]) -> str:
    """Judged on the fastest horizontal kernel of each pair and size against its own
    parts on two streams: a single slow baseline (a hiccup of the machine) in
    another row cannot make the target."""
    best = []
    for r in results:
        rows = [row for row in r["rows"] if "horizontal_us" in row]
        if r["n"] <= 2048 and rows:
            fastest = min(rows, key=lambda row: row["horizontal_us"])
            best.append((fastest["streams_us"] / fastest["horizontal_us"], r["pair"], r["n"]))
    if not best:
        return "no measurement at n <= 2048"
    ratio, pair, n = max(best)
    met = "met" if ratio >= TARGET else "MISSED"
    return (f"Target ≥ {TARGET}× over two streams at n ≤ 2048 for at least one pair: {met}"
            f" (best {ratio:.2f}×, {pair} at n = {n}).")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--sizes", default="1024,2048,4096")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--no-rotate", action="store_true", help="one copy of the inputs (L2 stays warm)")
    parser.add_argument("--tune-top", type=int, default=10, help="K for fusec tune (0: skip the tuner check)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    parser.add_argument("--name", default="h100-horizontal")
    args = parser.parse_args(argv)
    from fusec import data
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    from fusec.runtime import cuda
    library = load_library(data.LIBRARY)
    results, tunes = [], []
    with cuda.context() as ctx:
        device = cuda.device_name(ctx)
        from fusec.target import slug
        predictor = predictor_for(library, slug(device))
        for name in args.pairs.split(","):
            for n in (int(s) for s in args.sizes.split(",")):
                r = measure_pair(name, n, args.dtype, args.repeat, not args.no_rotate, library, predictor, ctx)
                results.append(r)
                for row in r["rows"]:
                    if "horizontal_us" in row:
                        print(f"{name:8s} n={n:5d} #{row['rank']:<2d} H {row['horizontal_us']:7.1f} us"
                              f"  apart {row['sequential_us']:7.1f}  streams {row['streams_us']:7.1f}"
                              f"  x{row['streams_us'] / row['horizontal_us']:.2f} vs streams  {row['plan']}",
                              flush=True)
                    else:
                        print(f"{name:8s} n={n:5d} #{row['rank']:<2d} WRONG {row['wrong']}  {row['plan']}",
                              flush=True)
                if "vertical" in r:
                    print(f"{name:8s} n={n:5d} vertical {r['vertical']['us']:7.1f} us  {r['vertical']['plan']}")
        if args.tune_top:
            for name in args.pairs.split(","):
                for n in (int(s) for s in args.sizes.split(",")):
                    t = tuned(name, n, args.dtype, args.tune_top, args.repeat, library)
                    tunes.append(t)
                    print(f"tune {name} n={n}: {t.get('winner')}", flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = list(argv if argv is not None else sys.argv[1:])
    if "--out" in shown:
        del shown[shown.index("--out"):shown.index("--out") + 2]
    command = "python -m experiments.horizontal " + " ".join(shown)
    header = [f"# Horizontal fusion against the same kernels apart, on {device}", "",
              f"{stamp}; `{command.strip()}`; {args.dtype}; the GPU's time (CUDA events, a spinning kernel"
              f" first), median of {args.repeat} runs after 3 warm-ups;"
              + (" inputs rotated over copies past the 50 MB L2." if not args.no_rotate else " one input copy."),
              f"Predictor: {predictor.name}. Matrices n x n, vectors of n. Each horizontal kernel was checked"
              " against the float64 oracle before timing; 'one after another' and 'two streams' launch the"
              " same two part kernels.", "", verdict(results), "", table(results), ""]
    if tunes:
        header += ["## fusec tune", "", "Top-K candidates measured by `fusec tune` (not cached); a horizontal"
                   " winner is timed again beside the same kernels launched one after another (the tuner's"
                   " own method, `Program.time(host=False)`, no rotation).", "", tune_table(tunes), ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.md").write_text("\n".join(header), encoding="utf-8")
    (out / f"{args.name}.json").write_text(json.dumps({"device": device, "when": stamp, "command": command,
                                                       "results": results, "tune": tunes}, indent=1))
    print("\n".join(header))
    wrong = [row for r in results for row in r["rows"] if "wrong" in row]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
