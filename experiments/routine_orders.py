"""Do a fused kernel's routine orders run alike, as the model prices them? (CPU)

    python -m experiments.routine_orders [--draws bench/results/h200-prediction-draw.json]
        [--out experiments/results]

QUESTION (issue 49). A kernel fusing several calls runs them in an order (``q>s``: q's
routine first) and loads its operands in one phase or more; the performance model prices
these variants alike, and a layout (fusec.space.combinations.Space.layouts) stands for all of
them. The quick tune's miss at BiCGK fp32 3342 x 667 (experiments/results/h200-prediction-quick-reruns.md)
was a vertical fusion timed in its slow order. How far apart do such twins run, and does one
variant win consistently enough for the model to price it?

METHOD. Every plan the draws of ``bench.prediction --draw`` measured, grouped with its twins:
the same summary but for the order and load phases of its kernels. Per group: the slowest
over the fastest, and which variant was fastest.

ANSWER (H200, 11 draws, 302 groups of twins measured at one point; committed table
``experiments/results/h200-routine-orders.md``): most twins run alike (median spread 1.006)
but 38 groups differ by more than 7 % (90th percentile 1.073, 95th 1.124, worst 1.505: BiCGK
fp32 by columns, s before q 11.7 us against q before s 17.4). No variant wins consistently:
one load phase is the fastest in most AXPYDOT groups but not all (two phases 10.7 against
12.9 us at fp64, 256 threads, streaming stores; GEMVER fp64's fused kernel three phases 52.7
against one 59.2), and BiCGK's fastest order turns with the serial iterations (s before q at 1
iteration a block, q before s at 2). So the model
keeps pricing them alike, and the quick tune times the best other order of each fused plan of
its first round, and of the winner's (fusec.tune.quick.FIRST_ORDERS, ORDERS).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAWS = ROOT / "bench" / "results" / "h200-prediction-draw.json"
VARIANT = re.compile(r"; ([A-Za-z0-9_#>]+), (\d+) load phases?")


def twins(report: dict) -> list[dict]:
    """Groups of plans measured at one point that differ only in their kernels' routine order
    and load phases: {"point", "plan" (the summary with the variants blanked), "times"
    [(us, variant)] fastest first}."""
    groups = collections.defaultdict(list)
    for run in report["runs"]:
        for point in run["points"]:
            for row in point["rows"]:
                variant = VARIANT.findall(row["summary"])
                if row.get("measured_us") and variant:
                    key = (run["seed"], f"{point['script']} {point['dtype']}", VARIANT.sub("; ORDER", row["summary"]))
                    groups[key].append((row["measured_us"], " ".join(f"{o}/{p}" for o, p in variant)))
    return [{"point": point, "plan": plan, "times": sorted(times)}
            for (_, point, plan), times in groups.items() if len(times) > 1]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))]


def report_markdown(groups: list[dict], draws: str, device: str) -> str:
    spreads = [g["times"][-1][0] / g["times"][0][0] for g in groups]
    lines = [f"# Routine-order twins, measured ({device}, CPU)", "",
             f"`python -m experiments.routine_orders --draws {Path(draws).name}`: plans measured at one"
             " point that differ only in their kernels' routine order and load phases (`q>s/1`: q's"
             " routine first, one load phase), the slowest over the fastest.", "",
             f"{len(groups)} groups; spread median {quantile(spreads, 0.5):.3f}, 75th percentile"
             f" {quantile(spreads, 0.75):.3f}, 90th {quantile(spreads, 0.9):.3f},"
             f" 95th {quantile(spreads, 0.95):.3f}, worst {max(spreads):.3f};"
             f" {sum(s > 1.07 for s in spreads)} over 1.07.", "",
             "| point | plan | spread | fastest first |", "|---|---|---:|---|"]
    for spread, group in sorted(zip(spreads, groups), key=lambda t: -t[0])[:20]:
        times = ", ".join(f"{variant} {us:.1f}" for us, variant in group["times"])
        lines.append(f"| {group['point']} | `{group['plan']}` | {spread:.2f} | {times} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", default=str(DRAWS))
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.draws).read_text(encoding="utf-8"))
        groups = twins(report)
    except OSError as exc:
        parser.error(f"--draws {args.draws}: cannot be read ({exc.strerror})")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        parser.error(f"--draws {args.draws}: not the JSON of bench.prediction --draw ({exc!r})")
    if not groups:
        parser.error(f"--draws {args.draws}: no plans measured with their routine-order twins")
    text = report_markdown(groups, args.draws, report.get("device", "?"))
    path = Path(args.out) / f"{Path(args.draws).stem.split('-')[0]}-routine-orders.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
