"""Does the fitted correction carry to sizes it never saw? Fit on earlier points, score on later ones (CPU).

    python -m experiments.prediction_holdout --before REV [--gpu h200] [--out experiments/results]

Cross-validation by point (``fusec perfdb fit``) deals a GPU's training points into folds, but
the points of one run of ``fusec perfdb measure-plans`` share a seed and the sizes of a script
cluster. This asks the plainer question: the correction fitted to the points the training file
held at revision REV (``git show REV:fusec/data/training/<gpu>.json``) — how good are its first
choices at the points measured since? Scored for ridges and both feature sets of
:data:`fusec.cost.fit.FEATURE_SETS`, against the database alone. Then, over every point
(cross-validated predictions, 10 folds): how often the best measured plan lies among the top K
of the corrected ranking — what a quick measurement of the top K at a first call would recover.

Writes ``<out>/<gpu>-prediction-holdout.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RIDGES = (1e-4, 1e-3, 1e-2, 1e-1)
TOP = (1, 2, 3, 4, 6, 8)


def load(gpu: str):
    """The GPU's training points as fit.Samples (features of this fusec, priced by the shipped
    database) and the key of each sample point."""
    from fusec import data as bundled
    from fusec.cost import fit as F
    from fusec.cost import training
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    from fusec.tune.plans import refeature_all, script_folders
    library = load_library(bundled.LIBRARY)
    base = predictor_for(library, gpu, corrected=False)
    points = refeature_all(training.read(training.path_for(gpu)), library, base.target,
                           script_folders(ROOT / "scripts"), log=lambda *_: None)
    samples, _ = F.samples(points, base.database)
    return samples


def key(script: str, dtype: str, sizes) -> str:
    return f"{script} {dtype} " + ",".join(f"{k}={v}" for k, v in sorted(dict(sizes).items()))


def earlier_keys(gpu: str, revision: str) -> set[str]:
    text = subprocess.run(["git", "show", f"{revision}:fusec/data/training/{gpu}.json"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    return {key(p["script"], p["dtype"], p["sizes"]) for p in json.loads(text)["points"]}


def subset(s, keep_point: np.ndarray):
    """The samples of the points where ``keep_point``, points renumbered from 0."""
    t = s.select(keep_point[s.point_of])
    kept, renumbered = np.unique(t.point_of, return_inverse=True)
    return dataclasses.replace(t, point_of=renumbered, labels=tuple(s.labels[i] for i in kept))


def row(name: str, summary: dict) -> str:
    return (f"| {name} | {summary['points']} | {summary['first_gmean']:.3f} | {summary['first_worst']:.3f} | "
            f"{100 * summary['within']:.0f} % | {summary['rho_mean']:.2f} | {summary['rho_worst']:.2f} |")


def top_k(s, log_predicted: np.ndarray, k: int) -> np.ndarray:
    """Per point: the fastest measured among the K best-predicted over the fastest measured."""
    out = []
    for p in range(len(s.labels)):
        mine = np.flatnonzero(s.point_of == p)
        top = mine[np.argsort(log_predicted[mine], kind="stable")[:k]]
        out.append(math.exp(s.log_time[top].min() - s.log_time[mine].min()))
    return np.asarray(out)


def write_report(path: Path, lines: list[str]) -> int:
    """Write the report's lines to ``path`` and show them; 0, the exit status."""
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {path}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, metavar="REV", help="revision whose training points fit")
    parser.add_argument("--gpu", default="h200", help="the GPU's slug (default: h200)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    from fusec.cost import fit as F

    s = load(args.gpu)
    old = earlier_keys(args.gpu, args.before)
    labels_old = np.array([label in old for label in s.labels])
    train, test = subset(s, labels_old), subset(s, ~labels_old)
    header = ["| predictor | points | geometric mean | worst | ≤ 1.05x | ρ mean | ρ worst |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    lines = [f"# The correction at later points, and the top K ({args.gpu}, CPU)", "",
             f"`python -m experiments.prediction_holdout --before {args.before} --gpu {args.gpu}`. "
             f"Fitted to the {len(train.labels)} points of the training file at {args.before} "
             f"({train.plans} measured plans), scored on the {len(test.labels)} measured since "
             f"({test.plans} plans). A first choice: the measured time of the plan ranked first among a point's "
             "measured plans over the fastest measured.", "", "## Fitted before, scored on the later points", ""]
    lines += header + [row("database alone", F.scores(test, F.log_predictions(test, None)).summary())]
    for used in F.FEATURE_SETS:
        for ridge in RIDGES:
            fitted = F.fit(train, ridge=ridge, used=used)
            name = f"{len(used)} features, ridge {ridge:g}"
            lines.append(row(name, F.scores(test, F.log_predictions(test, fitted)).summary()))
    lines += ["", f"## All {len(s.labels)} points, 10-fold cross-validated: the best of the top K", "",
              "| ranking | K | geometric mean | worst | ≤ 1.05x |", "|---|---:|---:|---:|---:|"]
    for name, predicted in (("database", F.log_predictions(s, None)), ("corrected", F.cross_validated(s))):
        for k in TOP:
            r = top_k(s, predicted, k)
            lines.append(f"| {name} | {k} | {math.exp(np.log(r).mean()):.3f} | {r.max():.3f} | "
                         f"{100 * np.mean(r <= F.WITHIN):.0f} % |")
    return write_report(Path(args.out) / f"{args.gpu}-prediction-holdout.md", lines)


if __name__ == "__main__":
    raise SystemExit(main())
