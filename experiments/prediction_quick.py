"""Which few plans should a quick tune time, to land near a wide tune's best? (CPU)

    python -m experiments.prediction_quick [--draws bench/results/h200-prediction-draw.json]
        [--runs 7] [--out experiments/results]
    python -m experiments.prediction_quick --replay [--draws ...] [--out experiments/results]

QUESTION (issue 49). Timing the predictor's first k choices gains little past k = 3
(``experiments.prediction_topk``): where the predictor errs, the fastest plan is of another
kernel family or of another shape of the same family, ranked far down. Would timing, instead,
the first choice and the best-predicted plan of each *family structure* (each kernel's class:
band, tile, horizontal, striped, held), then a few more plans of the winner's *structure* (its
cover and kernel classes), get within 1.05x everywhere, and for how many timings?

METHOD. The draws of ``bench.prediction --draw`` measured at each point tens of plans (a wide
tune) and kept the corrected predictor's price of each. Each rule here picks among those
measured plans, by the corrected price, and is scored by the fastest it picks over the best
measured. The plans' kernel structure is read from their summaries (``[band`` marks a band
kernel; ``H{``, ``S{``, ``B{`` horizontal, striped and held fusions; the rest tile), an
approximation of :func:`fusec.tune.quick.families` that cannot tell vector from tile kernels. A
rule limited to the measured plans may miss a plan the real quick tune would time: the GPU
draws since (the ``+ quick`` column) measure the rule as built.

REPLAY (``--replay``). The quick tune as fusec builds it now (:mod:`fusec.tune.quick`, on the
space rebuilt on the CPU with the shipped H200 predictor), its rounds scored from the measured
plans of each draw that scored a quick choice (a plan it picks that the draw did not measure
counts as not timed, and is counted): how the rule as it is now would have chosen at those
points. Where the draw ran this same rule the replay must give the draw's own choice.

ANSWER (the H200's 7 draws before the quick tune, 140 points; committed table
``experiments/results/h200-prediction-quick.md``): the first choice alone 1.068 gmean (worst
1.555); the first 2 by price plus the best of each family structure 1.023 (1.26, 82 % within
1.05x) for 5.5 timings on average; a second round of 3 more plans of the winner's structure
1.012 (1.233, 93 %) for 8.5; with the plan tuned at the nearest size in the first round, 1.009
(worst 1.10, 95 %). That rule was built (fusec.tune.quick, with layouts in place of the next
ranks, structures priced over 1.6x the first choice left out, and later the winner's other
routine orders): three GPU draws since scored its choice 1.003-1.007 gmean, worst 1.057-1.070,
95 % within 1.05x (bench/results/h200-prediction-draw.md). A fourth, with register-bound twins
as one layout: 1.007, worst 1.112 (BiCGK fp32 3342 x 667, measured again at 1.09-1.13x: the
first round had timed that point's fastest structure in its slow routine order). With each
fused first-round plan's other routine order and the second round refining each structure
within 2 % of the fastest (two at most), the replay of the four draws gives 1.000 / 1.001 /
1.007 / 1.002, worst 1.002 / 1.025 / 1.070 / 1.042 (the 1.070, VADD fp32, was the sitting's
noise), for 9.25 plans a point instead of 7.6: chosen with that miss in view. Its GPU draw (seed
1838348157): 1.011, worst 1.112, 91 % within 1.05x; the replay gives the draw's own choice at
22 of 22 points. Of its two misses, SGEMVT fp32 1654 x 1024 (1.09x) had its fastest plan, a
held fusion of band parts, stand behind one of tile parts as "the held structure": with a
fusion's class spelled with its parts' (``held(band,band)``) the replay of the five draws
gives 1.000 / 1.001 / 1.007 / 1.002 / 1.007, worst 1.002 / 1.025 / 1.070 / 1.042 / 1.112,
for 9.5 plans a point. The other, ATAX fp64 1510 x 510 (1.11x), is the model's: both kernels
at 128 threads measured fastest where every plan predicted near the first choice has 256
(:meth:`~fusec.space.combinations.Space.layouts` varies the heaviest kernel only); no rule
over these measurements reaches it without timing plans no draw measured. Two live draws of
the rule with a fusion's parts in its class (seeds 998389348, 2070343796): 1.004 and 1.003,
worst 1.042 and 1.033, every point within 1.05x; two more (37295766, 504874318): 1.003 and
1.005, worst 1.053 and 1.047; the replay gives each of the four its own choices at every point.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRAWS = ROOT / "bench" / "results" / "h200-prediction-draw.json"
BEFORE_QUICK = 7  # the draws measured before the quick tune existed


def kernels(summary: str) -> list[str]:
    return [k.strip() for k in summary.split(" | ")]


def kernel_class(kernel: str) -> str:
    for mark, name in (("H{", "horizontal"), ("S{", "striped"), ("B{", "held")):
        if kernel.startswith(mark):
            return name
    return "band" if "[band" in kernel else "tile"


def calls(kernel: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", kernel).replace("(band)", "").replace("(registers)", "").strip()


def families(summary: str) -> tuple:
    return tuple(kernel_class(k) for k in kernels(summary))


def structure(summary: str) -> tuple:
    return tuple((calls(k), kernel_class(k)) for k in kernels(summary))


def pick(point: dict, first: int, refine: int, nearby: bool, structures: bool = True) -> list[dict]:
    """The measured rows a rule times at ``point``: the ``first`` best-priced, the best-priced
    of each family structure (``structures``), the nearby plan (``nearby``), then ``refine``
    more of the winner's structure."""
    rows = sorted((r for r in point["rows"] if r.get("measured_us") and "corrected" in r["predicted_us"]),
                  key=lambda r: r["predicted_us"]["corrected"])
    chosen, seen = rows[:first], set()
    for row in rows if structures else ():
        key = families(row["summary"])
        if key not in seen:
            seen.add(key)
            if row not in chosen:
                chosen.append(row)
    borrowed = point["choices"].get("corrected + nearby", {})
    if nearby and borrowed.get("row") is not None and "nearest" in str(borrowed.get("origin")):
        row = point["rows"][borrowed["row"]]
        if row.get("measured_us") and row not in chosen:
            chosen.append(row)
    if refine:
        winner = min(chosen, key=lambda r: r["measured_us"])
        chosen += [r for r in rows if structure(r["summary"]) == structure(winner["summary"])
                   and r not in chosen][:refine]
    return chosen


def score(points: list[dict], first: int, refine: int, nearby: bool, structures: bool = True) -> dict:
    ratios, counts = [], []
    for point in points:
        chosen = pick(point, first, refine, nearby, structures)
        ratios.append(min(r["measured_us"] for r in chosen) / point["best_us"])
        counts.append(len(chosen))
    return {"first": first, "refine": refine, "nearby": nearby, "points": len(ratios),
            "gmean": math.exp(sum(map(math.log, ratios)) / len(ratios)), "worst": max(ratios),
            "within_1_05": sum(r <= 1.05 for r in ratios) / len(ratios), "timings": sum(counts) / len(counts)}


def replay(report: dict) -> list[dict]:
    """Per draw that scored a quick choice: the quick rule as built now, from its measurements."""
    import warnings

    from fusec import data
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    from fusec.library.loader import load_library
    from fusec.space.combinations import build_space
    from fusec.tune import quick
    from fusec.tune.search import quick_first_round
    library = load_library(data.LIBRARY)
    predictor = predictor_for(library, "h200")
    out = []
    for run in report["runs"]:
        if "quick" not in run:
            continue
        ratios, picked, unmeasured, same, unscored = [], 0, 0, 0, 0
        for point in run["points"]:
            dag = load_script(ROOT / "scripts" / f"{point['script']}.script", library)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                space = build_space(dag, library, point["dtype"], point["sizes"], predictor)
            measured = {r["summary"]: r["measured_us"] for r in point["rows"] if r.get("measured_us")}
            first = quick_first_round(space, "h200")
            timed = [(measured[c.plan.summary(dag)], c.plan) for c in first if c.plan.summary(dag) in measured]
            second = quick.second_round(space, timed, [c.plan for c in first])
            timed += [(measured[c.plan.summary(dag)], c.plan) for c in second if c.plan.summary(dag) in measured]
            picked += len(first) + len(second)
            unmeasured += len(first) + len(second) - len(timed)
            if not timed:  # priced otherwise since, the rule picks no plan the draw measured
                unscored += 1
                continue
            ratio = min(t for t, _ in timed) / point["best_us"]
            ratios.append(ratio)
            same += abs(ratio - point["choices"]["corrected + quick"]["ratio"]) < 1e-9
        out.append({"seed": run["seed"], "rule": run["quick"], "points": len(ratios),
                    "gmean": math.exp(sum(map(math.log, ratios)) / len(ratios)), "worst": max(ratios),
                    "within_1_05": sum(r <= 1.05 for r in ratios) / len(ratios),
                    "draw_gmean": math.exp(sum(math.log(p["choices"]["corrected + quick"]["ratio"])
                                               for p in run["points"]) / len(run["points"])),
                    "draw_worst": max(p["choices"]["corrected + quick"]["ratio"] for p in run["points"]),
                    "picked": picked, "unmeasured": unmeasured, "same_choice": same, "unscored": unscored})
    return out


def replay_markdown(rows: list[dict], draws: str) -> str:
    from fusec.tune import quick
    now = ", ".join(f"{k} {v}" for k, v in quick.rule().items()).replace("twins", "register-bound twins")
    lines = ["# The quick tune as built now, replayed on the H200's draws", "",
             f"`python -m experiments.prediction_quick --replay` over `{Path(draws).name}` (CPU, see the"
             " module's docstring): each draw that scored a quick choice, with the rule it ran then, and"
             f" the rule as it is now ({now}) scored from that draw's measurements. A plan the rule picks"
             " that the draw did not measure counts as not timed; a point where it picks none the draw"
             " measured is left out (the model has priced the plans otherwise since that draw).", "",
             "| seed | rule then | draw: gmean | draw: worst | now: gmean | now: worst | now: within 1.05x"
             " | plans picked | not measured in the draw | points choosing as the draw |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rule = ", ".join(f"{k} {v}" for k, v in r["rule"].items()).replace("twins", "register-bound twins")
        lines.append(f"| {r['seed']} | {rule} | {r['draw_gmean']:.3f} | {r['draw_worst']:.3f} | {r['gmean']:.3f}"
                     f" | {r['worst']:.3f} | {r['within_1_05']:.0%} | {r['picked']} | {r['unmeasured']}"
                     f" | {r['same_choice']}/{r['points']}"
                     + (f" ({r['unscored']} more unscored)" if r.get("unscored") else "") + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draws", default=str(DRAWS), help="a bench.prediction --draw JSON (default: the H200's)")
    parser.add_argument("--runs", type=int, default=BEFORE_QUICK,
                        help="score its first N runs (default: %(default)s, those before the quick tune)")
    parser.add_argument("--replay", action="store_true",
                        help="replay the quick tune as built now on the draws that scored one (see REPLAY)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    try:
        report = json.loads(Path(args.draws).read_text(encoding="utf-8"))
        if args.replay:
            rows = replay(report)
            text = replay_markdown(rows, args.draws)
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "h200-prediction-quick-replay.md").write_text(text, encoding="utf-8")
            (out / "h200-prediction-quick-replay.json").write_text(json.dumps(rows, indent=1) + "\n",
                                                                    encoding="utf-8")
            print(text)
            return 0
        points = [p for run in report["runs"][:args.runs] for p in run["points"] if p.get("best_us")]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--draws {args.draws}: not a bench.prediction --draw JSON ({type(exc).__name__}: {exc})")
    if args.runs < 1 or not points:
        parser.error(f"--runs {args.runs}: no measured point in the first {args.runs} run(s)")
    rows = [score(points, k, 0, False, structures=False) | {"rule": f"the first {k} by price"} for k in (1, 3, 8)]
    for first in (1, 2, 3):
        for refine in (0, 2, 3, 4):
            for nearby in (False, True):
                rows.append(score(points, first, refine, nearby)
                            | {"rule": f"first {first} + each family structure" + (" + nearby" if nearby else "")
                               + (f"; then {refine} of the winner's structure" if refine else "")})
    lines = ["# Which plans a quick tune should time: rules scored on the H200's draws", "",
             f"`python -m experiments.prediction_quick --runs {args.runs}` over `{Path(args.draws).name}`"
             f" ({len(points)} points; CPU, see the module's docstring for the method and its answer).", "",
             "| rule | timings (mean) | geometric mean | worst | within 1.05x |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['rule']} | {r['timings']:.1f} | {r['gmean']:.3f} | {r['worst']:.3f} | {r['within_1_05']:.0%} |"
              for r in rows]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "h200-prediction-quick.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "h200-prediction-quick.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
