"""How well the predictor ranks combinations: the analog of the paper's Tables 4 and 5.

    python -m bench.prediction [--dtype float32] [--size n=8192] [--top 20] [--sample 20]
                               [--scripts bicgk,gemver] [--out bench/results]
    python -m bench.prediction --draw [--seed N] [--budget SECONDS] ...   (bench/prediction_draw.py)

For each sequence: the space's size; the times to predict the first
combination (a predict-only compile: space, ranking and code generation, no
nvcc), and to enumerate every combination; then an empirical search over the
--top best-predicted combinations plus a seeded uniform --sample of the rest
(every combination when the space is smaller), each compiled, checked against
the float64 oracle and timed by the tuner's measurer (CUDA events, median of
--repeat; the GPU's time, the host's launch overhead left out). Reported: the measured rank of the
predicted-first, its speed
relative to the best measured, the worst measured, the Spearman correlation
of predicted and measured times, and the search's time. Each kernel of each
measured program is also timed on its own (``kernels_us`` in the JSON), the
data to refit a predictor against without a GPU.

Writes <out>/<gpu>-prediction-<dtype>.md and .json.

With ``--draw``, the sizes are drawn at random instead, one per sequence and
precision, and each point's first choices (with and without the nearby-plan
borrowing, by the database and by its fitted correction) are scored against a
wide tune: see :mod:`bench.prediction_draw`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fusec.cost.fit import spearman

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("axpydot", "atax", "bicgk", "sgemv", "sgemvt", "sscal", "gemver", "gesummv", "madd", "vadd",
           "waxpby")


def kernel_times(program, arrays, repeat: int) -> list[float]:
    """Microseconds of each kernel of a program on its own, as the GPU runs it
    (median; the host's launch overhead not counted, see GpuClock)."""
    from fusec.runtime import cuda
    binding = program.bind(arrays)
    with cuda.context() as ctx:
        clock = cuda.gpu_clock(ctx)
        loaded = program._load(ctx)
        buffers = program._buffers_for(ctx, binding.sizes)
        pointers, outputs = program._place(binding, buffers)  # outputs stay alive while kernels write
        out = []
        for kernel in program.kernels:
            args = program._kernel_args(kernel, buffers, pointers, binding)
            launches = kernel.launches(binding.sizes)  # its own, and its sums where they run apart

            def launch():
                for function, grid in launches:
                    loaded.launch(kernel, grid, args, 0, function)

            times = [clock.seconds(launch) for _ in range(repeat + 2)]
            out.append(statistics.median(times[2:]) * 1e6)
        del outputs  # every launch is done (each clock waited for its kernel)
        return out


def study(script: str, library, dtype: str, sizes_given: dict, top: int, sample: int, repeat: int,
          predictor, seed: int = 0) -> dict:
    from fusec.api import compile_dag, default_sizes
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.runtime.program import Program
    from fusec.space.combinations import build_space
    from fusec.tune.search import GpuMeasurer

    path = ROOT / "scripts" / f"{script}.script"
    dag = load_script(path, library)
    has_matrix = any(v.kind.value == "matrix" for v in dag.values)
    n = sizes_given["n"] if has_matrix else sizes_given["vector"]
    sizes = default_sizes(dag, {s: n for s in dag.sizes})

    start = time.perf_counter()  # what a predict-only `fusec compile` does, less reading files
    compile_dag(dag, library, dtype, sizes=sizes, predictor=predictor, tuned=False)
    first_seconds = time.perf_counter() - start

    start = time.perf_counter()
    space = build_space(dag, library, dtype, sizes, predictor)
    ranked = list(space.ranked())
    all_seconds = time.perf_counter() - start
    rank_of = {c.plan: i for i, c in enumerate(ranked, 1)}

    chosen = ranked[:top]
    rest = ranked[top:]
    if len(rest) <= sample:
        chosen += rest
    else:
        rng = np.random.default_rng(seed)
        chosen += [rest[i] for i in sorted(rng.choice(len(rest), sample, replace=False))]

    start = time.perf_counter()
    rows = []
    with GpuMeasurer(dag, library, dtype, sizes, repeat=repeat, warmup=3, seed=seed) as measurer:
        programs = [Program(generate(dag, library, c.plan, dtype)) for c in chosen]
        errors = measurer.compile(programs, lambda _: None)
        for combination, program, error in zip(chosen, programs, errors):
            if error:
                measurement = None
            else:
                measurement = measurer.measure(program)
            row = {"rank": rank_of[combination.plan], "predicted_us": combination.predicted * 1e6,
                   "kernels_predicted_us": [t * 1e6 for t in combination.kernel_times],
                   "plan": json.loads(combination.plan.to_json()), "summary": combination.plan.summary(dag)}
            if measurement is None or not measurement.passed:
                row.update(verdict=measurement.verdict if measurement else "compile failed",
                           reason=(measurement.reason if measurement else error)[:400], measured_us=None)
            else:
                row.update(verdict="ok", measured_us=measurement.seconds * 1e6,
                           kernels_us=kernel_times(program, measurer.device, repeat))
                program.release()
            rows.append(row)
        gpu_name = measurer.gpu_name
    search_seconds = time.perf_counter() - start

    ok = [r for r in rows if r["measured_us"] is not None] or [{"measured_us": float("nan"), "predicted_us": 0}]
    best = min(r["measured_us"] for r in ok)
    first = next(r for r in rows if r["rank"] == 1)
    by_speed = sorted(r["measured_us"] for r in ok)
    first_rank = (1 + sum(1 for t in by_speed if t < first["measured_us"] / 1.001)
                  if first["measured_us"] is not None else None)
    rho = spearman([r["predicted_us"] for r in ok], [r["measured_us"] for r in ok]) if len(ok) >= 3 else None
    return {
        "script": script, "dtype": dtype, "sizes": sizes, "gpu": gpu_name,
        "predictor": getattr(predictor, "name", "?"),
        "fusions": len(space.fusions), "implementations": space.implementation_count,
        "combinations": space.combination_count, "measured": len(ok), "failed": len(rows) - len(ok),
        "first_us": first["measured_us"], "best_us": best, "worst_us": max(by_speed),
        "first_measured_rank": first_rank, "first_vs_best": best / first["measured_us"] if first["measured_us"] else 0,
        "worst_vs_best": best / max(by_speed), "spearman": rho,
        "first_seconds": first_seconds, "all_seconds": all_seconds, "search_seconds": search_seconds,
        "minimum_bytes": programs[0].minimum_bytes(sizes), "rows": rows,
    }


def markdown(results: list[dict], args, gpu: str) -> str:
    lines = [f"# Prediction accuracy on {gpu} ({args.dtype}; matrices {args.n} x {args.n},"
             f" vectors of the vector sequences {args.vector_size:,})", "",
             f"`python -m bench.prediction --dtype {args.dtype} --size n={args.n} --top {args.top}"
             f" --sample {args.sample} --repeat {args.repeat}`, {datetime.date.today()}, predictor"
             f" `{results[0]['predictor']}`.", "",
             f"Measured set per sequence: the {args.top} best-predicted combinations plus a seeded uniform"
             f" sample of {args.sample} others (all of them where the space is smaller). 'Best' and"
             " 'worst' are over the measured set; the measured rank counts combinations more than 0.1%"
             " faster than the predicted-first.", "",
             "## Table 4 analog", "",
             "| sequence | combinations | measured | predicted-first rank | first vs best | worst vs best"
             " | Spearman ρ | best µs | GB/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        rho = f"{r['spearman']:.2f}" if r["spearman"] is not None else "n/a"
        lines.append(f"| {r['script']} | {r['combinations']:,} | {r['measured']} | {r['first_measured_rank']}"
                     f" | {r['first_vs_best'] * 100:.1f} % | {r['worst_vs_best'] * 100:.1f} % | {rho}"
                     f" | {r['best_us']:.1f} | {r['minimum_bytes'] / r['best_us'] / 1e3:.0f} |")
    lines += ["", "## Table 5 analog", "",
              "| sequence | first combination (predict-only compile) | all combinations | empirical search"
              " (compile, check, time the measured set) |",
              "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['script']} | {r['first_seconds']:.3f} s | {r['all_seconds']:.3f} s"
                     f" | {r['search_seconds']:.1f} s ({r['measured'] + r['failed']} combinations) |")
    failed = [(r["script"], row) for r in results for row in r["rows"] if row["measured_us"] is None]
    if failed:
        lines += ["", "## Failed candidates", ""]
        lines += [f"- {s} rank {row['rank']}: {row['verdict']}: {row['reason']}" for s, row in failed]
    return "\n".join(lines) + "\n"


def write(results: list[dict], args) -> Path:
    from fusec.target import present
    info = present()
    gpu = info.slug if info else "gpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{gpu.split('-')[0]}-prediction-{args.dtype}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(results, args, info.name if info else "?"))
    return stem


def main(argv=None) -> int:
    if "--draw" in (sys.argv[1:] if argv is None else argv):
        from bench import prediction_draw
        return prediction_draw.main(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                        help="precision (default: %(default)s)")
    parser.add_argument("--size", default="n=8192", help="n=VALUE: matrices n x n (default n=8192)")
    parser.add_argument("--vector-size", type=int, default=8192 * 8192,
                        help="n of the sequences without a matrix (default 8192^2 = 2^26: as many"
                             " bytes per vector as a matrix has)")
    parser.add_argument("--top", type=int, default=20,
                        help="best-predicted candidates measured a point (default: %(default)s)")
    parser.add_argument("--sample", type=int, default=20,
                        help="further candidates drawn from the rest of the space (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=20,
                        help="timed runs a median is taken over (default: %(default)s)")
    parser.add_argument("--scripts", default=",".join(SCRIPTS), help="comma-separated (default: %(default)s)")
    parser.add_argument("--gpu", default=None, help="database to predict with (default: the GPU present)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder of the table and JSON")
    args = parser.parse_args(argv)
    args.n = int(args.size.partition("=")[2])

    from fusec import data
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    library = load_library(data.LIBRARY)
    predictor = predictor_for(library, args.gpu)
    results = []
    for script in args.scripts.split(","):
        result = study(script, library, args.dtype, {"n": args.n, "vector": args.vector_size}, args.top,
                       args.sample, args.repeat, predictor)
        rho = f"{result['spearman']:.2f}" if result["spearman"] is not None else "n/a"
        print(f"{script:8s} {result['combinations']:>7,} combos, first {result['first_us']:.1f} us,"
              f" best {result['best_us']:.1f} us ({result['first_vs_best'] * 100:.1f} %), worst"
              f" {result['worst_us']:.1f}, rank {result['first_measured_rank']}, rho {rho},"
              f" first {result['first_seconds']:.3f} s, all {result['all_seconds']:.2f} s,"
              f" search {result['search_seconds']:.1f} s", flush=True)
        results.append(result)
        write(results, args)  # after each sequence: a crash later keeps what was measured
    print(f"wrote {write(results, args)}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
