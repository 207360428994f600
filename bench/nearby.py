"""Plans borrowed from the nearest tuned size, against the predictor's first choice.

    python -m bench.nearby [--scripts sgemv,bicgk,...] [--dtype float32|float64|both]
                           [--size n=10001 ...] [--rounds 5] [--out bench/results] [--name h100-nearby]

At a size nothing was tuned for, fusec.compile runs the plan tuned for the
nearest sizes where the space offers it (fusec.tuning.nearby); without one, the
predictor's first choice. For every point (bench.peers's sizes for each --size)
where a nearby plan applies, both plans are timed as ``fusec tune`` times
candidates (checked against the float64 oracle first, L2 emptied, CUDA events,
median of 20), interleaved over --rounds rounds; the median of the rounds is
reported, and borrowed / predicted (below 1: the borrowed plan is faster).
Points with no nearby plan are listed as such. Writes <out>/<name>.md and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
from pathlib import Path

from bench import peers as P

SCRIPTS = ("sgemv", "bicgk", "atax", "gesummv", "sgemvt", "gemver", "madd")


def plans(dag, library, dtype: str, sizes) -> tuple | None:
    """(the borrowed program, the predictor's program), or None where nothing is borrowed."""
    from fusec.api import build_program
    borrowed, entry = build_program(dag, library, dtype, sizes=sizes)
    if not borrowed.nearby:
        return None
    predicted, _ = build_program(dag, library, dtype, sizes=sizes, tuned=False)
    return borrowed, predicted, entry


def measure(dag, library, dtype: str, sizes, programs, rounds: int) -> list[float | str]:
    """Each program's median over the rounds (µs), or why it failed."""
    from fusec.tune import GpuMeasurer
    times: list[list[float]] = [[] for _ in programs]
    failed: dict[int, str] = {}
    with GpuMeasurer(dag, library, dtype, sizes) as measurer:
        for i, error in enumerate(measurer.compile(list(programs), lambda _: None)):
            if error:
                failed[i] = error.splitlines()[0]
        for r in range(rounds):
            for i in (range(len(programs)) if r % 2 == 0 else reversed(range(len(programs)))):
                if i in failed:
                    continue
                got = measurer.measure(programs[i])
                if not got.passed:
                    failed[i] = f"{got.verdict}: {got.reason.splitlines()[0] if got.reason else ''}"
                    continue
                times[i].append(got.seconds * 1e6)
    return [failed.get(i) or statistics.median(t) for i, t in enumerate(times)]


def markdown(report: dict) -> str:
    lines = [f"# Plans tuned nearby against the predictor's first choice on {report['gpu']}", "",
             f"{report['when']}; `{report['command']}`; library hash {report['library']}. Each point with a"
             " nearby plan: both timed as `fusec tune` times candidates, interleaved over"
             f" {report['rounds']} rounds (median). borrowed / predicted below 1: the borrowed plan is faster.",
             "", "| script | dtype | sizes | tuned at | borrowed µs | predicted µs | borrowed / predicted"
             " | borrowed plan | predicted plan |", "|---|---|---|---|---:|---:|---:|---|---|"]
    for row in report["rows"]:
        sizes = ",".join(f"{k}={v}" for k, v in row["sizes"].items())
        if row.get("tuned_at") is None:
            lines.append(f"| {row['script']} | {row['dtype']} | {sizes} | none within 2× | | | | | |")
            continue
        at = ",".join(f"{k}={v}" for k, v in row["tuned_at"].items())
        b, p = row["borrowed_us"], row["predicted_us"]
        cells = [f"{x:.1f}" if isinstance(x, float) else str(x) for x in (b, p)]
        ratio = f"{b / p:.3f}" if isinstance(b, float) and isinstance(p, float) else "—"
        lines.append(f"| {row['script']} | {row['dtype']} | {sizes} | {at} | {cells[0]} | {cells[1]} | {ratio}"
                     f" | {row['borrowed_plan']} | {row['predicted_plan']} |")
    ratios = [r["borrowed_us"] / r["predicted_us"] for r in report["rows"]
              if isinstance(r.get("borrowed_us"), float) and isinstance(r.get("predicted_us"), float)]
    if ratios:
        mean = math.exp(statistics.fmean(math.log(x) for x in ratios))
        lines += ["", f"{len(ratios)} points: borrowed / predicted from {min(ratios):.3f} to {max(ratios):.3f},"
                      f" geometric mean {mean:.3f}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scripts", default=",".join(SCRIPTS))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64", "both"))
    parser.add_argument("--size", action="append", default=[], metavar="n=VALUE",
                        help="matrix side n (repeatable; default: 10001)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(P.ROOT / "bench" / "results"))
    parser.add_argument("--name", default="h100-nearby")
    args = parser.parse_args(argv)
    from fusec.runtime import cuda
    from fusec.script import load_script
    library = P._library()
    ns = [int(s.split("=", 1)[1]) for s in args.size] or [10001]
    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    rows = []
    for dtype in dtypes:
        for n in ns:
            for script in args.scripts.split(","):
                dag = load_script(P.ROOT / "scripts" / f"{script}.script", library)
                sizes = P.script_sizes(dag, n, P.default_vector_size(n, dtype))
                row = {"script": script, "dtype": dtype, "sizes": dict(sizes), "tuned_at": None}
                found = plans(dag, library, dtype, sizes)
                if found is not None:
                    borrowed, predicted, entry = found
                    row.update(tuned_at=dict(entry.key.sizes), borrowed_plan=borrowed.generated.plan.summary(dag),
                               predicted_plan=predicted.generated.plan.summary(dag))
                    if borrowed.generated.plan == predicted.generated.plan:
                        row["borrowed_us"] = row["predicted_us"] = "the same plan"
                    else:
                        row["borrowed_us"], row["predicted_us"] = measure(dag, library, dtype, sizes,
                                                                          [borrowed, predicted], args.rounds)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if not k.endswith("_plan")}), flush=True)
    with cuda.context() as ctx:
        gpu = cuda.device_name(ctx)
    report = {"gpu": gpu, "library": library.content_hash, "rounds": args.rounds, "rows": rows,
              "command": "python -m bench.nearby " + " ".join(argv if argv is not None else sys.argv[1:]),
              "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
