"""Would remembering how each plan ran at other sizes rank better than the fitted correction alone? (CPU)

    python -m experiments.prediction_memory [--gpu h200] [--before REV] [--out experiments/results]

The fitted correction (:mod:`fusec.cost.fit`) leaves each measured plan a residual, the log of
its measured time over its corrected price less its point's mean (what ranking sees). Plans of
the same structure (the same summary: calls, implementations, shape, serial axis) recur across
the sizes of a script. This adds to a plan's corrected log price the residuals the same plan
left at the script's other points in the same precision, weighted by
``exp(-(d / bandwidth)^2)`` of the distance ``d`` between the points' log sizes and shrunk
towards 0 by ``shrink`` (added to the weights' sum) — a nearest-neighbour memory of the
kind TVM's cost models keep of measured schedules. Plans match exactly, or with their serial
iterations left out of the key.

Scored two ways: cross-validated by point (the residuals of a point's own plans never used for
it: the correction from the 10-fold fit that did not see it, the memory from the other points);
and, with ``--before REV``, fitted and remembered on the points the training file held at REV,
scored on those measured since. The bandwidths and shrinks are chosen here on the same points
(optimistic by that choice).

Writes ``<out>/<gpu>-prediction-memory.md``.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np

from experiments.prediction_holdout import ROOT, earlier_keys, load, row, subset, write_report

BANDWIDTHS = (0.5, 1.0, 2.0)
SHRINKS = (0.1, 0.5)
KEYS = {"exact": lambda summary: summary, "iterations left out": lambda summary: re.sub(r"\d+it", "Nit", summary)}


def residuals(s, log_predicted: np.ndarray) -> np.ndarray:
    """Each plan's log measured time less its log prediction, less its point's weighted mean of those."""
    from fusec.cost import fit as F
    error = s.log_time - log_predicted
    weights = F.plan_weights(s)
    points = len(s.labels)
    mean = np.bincount(s.point_of, weights * error, points) / np.bincount(s.point_of, weights, points)
    return error - mean[s.point_of]


def log_sizes(label: str) -> np.ndarray:
    """(log rows, log columns) of a point from its label's sizes (a vector's n for both)."""
    sizes = dict(part.split("=") for part in label.split()[-1].split(","))
    n = float(sizes["n"])
    return np.log([float(sizes.get("m", n)), n])


def remembered(s, summaries, residual, source: np.ndarray, target: np.ndarray, key, bandwidth, shrink):
    """Per plan of the points in ``target``: the weighted residual of the same plan at the
    points in ``source`` of its script and precision (0 where none)."""
    out = np.zeros(s.plans)
    script_of = [" ".join(label.split()[:2]) for label in s.labels]
    where = {p: log_sizes(label) for p, label in enumerate(s.labels)}
    by_key: dict[tuple, list[tuple[int, float]]] = {}
    for i in range(s.plans):
        p = int(s.point_of[i])
        if source[p]:
            by_key.setdefault((script_of[p], key(summaries[i])), []).append((p, residual[i]))
    for i in range(s.plans):
        p = int(s.point_of[i])
        if not target[p]:
            continue
        total = weight = 0.0
        for q, r in by_key.get((script_of[p], key(summaries[i])), ()):
            if q == p:
                continue
            w = math.exp(-(np.linalg.norm(where[q] - where[p]) / bandwidth) ** 2)
            total, weight = total + w * r, weight + w
        out[i] = total / (weight + shrink) if weight else 0.0
    return out


def summaries_of(gpu: str, s) -> list[str]:
    """The summary of each measured plan, in the order of the samples."""
    import json

    from fusec.cost import training
    points = json.loads(training.path_for(gpu).read_text())["points"]
    found = {}
    for point in points:
        label = f"{point['script']} {point['dtype']} " + ",".join(
            f"{k}={v}" for k, v in sorted(point["sizes"].items()))
        found[label] = [plan["summary"] for plan in point["plans"] if plan.get("measured_us") is not None]
    out = []
    for p, label in enumerate(s.labels):
        out.extend(found[label][: int(np.sum(s.point_of == p))])
    if len(out) != s.plans:
        raise SystemExit("the training file's plans do not line up with the samples")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--before", default=None, metavar="REV", help="also fit on the points at REV, score the rest")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    from fusec.cost import fit as F

    s = load(args.gpu)
    summaries = summaries_of(args.gpu, s)
    header = ["| predictor | points | geometric mean | worst | ≤ 1.05x | ρ mean | ρ worst |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines = [f"# A memory of plans at other sizes on top of the correction ({args.gpu}, CPU)", "",
             f"`python -m experiments.prediction_memory --gpu {args.gpu}"
             + (f" --before {args.before}`" if args.before else "`") + f". {len(s.labels)} points, {s.plans} measured"
             " plans (the GPU's training file). A first choice: the measured time of the plan ranked first"
             " among a point's measured plans over the fastest measured.", "",
             "## Cross-validated by point", ""] + header
    everywhere = np.ones(len(s.labels), bool)
    predicted = F.cross_validated(s)
    residual = residuals(s, predicted)
    lines.append(row("correction (10 folds)", F.scores(s, predicted).summary()))
    for name, key in KEYS.items():
        for bandwidth in BANDWIDTHS:
            for shrink in SHRINKS:
                memory = remembered(s, summaries, residual, everywhere, everywhere, key, bandwidth, shrink)
                lines.append(row(f"+ memory, {name}, bandwidth {bandwidth:g}, shrink {shrink:g}",
                                 F.scores(s, predicted + memory).summary()))
    if args.before:
        old = earlier_keys(args.gpu, args.before)
        earlier = np.array([label in old for label in s.labels])
        train = subset(s, earlier)
        fitted = F.fit(train)
        predicted = F.log_predictions(s, fitted)
        residual = residuals(s, predicted)
        later = subset(s, ~earlier)
        keep = ~earlier[s.point_of]
        lines += ["", f"## Fitted and remembered on the {int(earlier.sum())} points at {args.before},"
                  f" scored on the {int((~earlier).sum())} since", ""] + header
        lines.append(row("correction", F.scores(later, predicted[keep]).summary()))
        for name, key in KEYS.items():
            for bandwidth in BANDWIDTHS:
                for shrink in SHRINKS:
                    memory = remembered(s, summaries, residual, earlier, ~earlier, key, bandwidth, shrink)
                    lines.append(row(f"+ memory, {name}, bandwidth {bandwidth:g}, shrink {shrink:g}",
                                     F.scores(later, (predicted + memory)[keep]).summary()))
    return write_report(Path(args.out) / f"{args.gpu}-prediction-memory.md", lines)


if __name__ == "__main__":
    raise SystemExit(main())
