"""Do the solvers' iterations need their own training points? (CPU)

    python -m experiments.prediction_solvers [--gpu h200] [--out experiments/results]

QUESTION (issue 49). The H200's correction was fitted to the seven matrix sequences alone, and
a refit that chose better on them chose worse for the solvers' iterations
(experiments/results/h200-solvers-correction-ab.md). ``fusec perfdb measure-plans`` of
scripts/solvers/{bicg,bicgstab,cg}.script (seed 0, draws 0-7, 44 points) added them to the
training file. Scored here, first choice among each point's measured plans: the fit without any
solver point, the fit of the first 24 (draws 0-3) on the 20 later ones, and 10-fold
cross-validation and one script out over all points, each split into solver and matrix points.

ANSWER (H200, 187 points, 44 of them the solvers', 2026-11-29;
``experiments/results/h200-prediction-solvers.md``): fitted without them, the correction
chooses at the solver points at 1.090 (database alone 1.186); cross-validated with them in
the training data, 1.060 (one solver script out: 1.084, so each solver helps the others
little). At the 20 later solver points the fit that had the first 24 chose no better than the
fit without any (1.097 against 1.091; ρ 0.58 against 0.46): the gain is at the sizes measured,
which is why the solvers' benchmark sizes were measured on the GPU as well
(experiments/results/h200-solvers-training-ab.md). On the matrix sequences the cross-validated
first choice stays where it was (1.082 with the solver points, 1.083 without).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from experiments.prediction_holdout import ROOT, load, subset, write_report

SOLVERS = ("bicg", "bicgstab", "cg")
LATER = 4  # draws from this one on are the later solver points


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", default="h200", help="the GPU's slug (default: h200)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    from fusec.cost import fit as F
    from fusec.cost import training

    s = load(args.gpu)
    draws = {p.label: p.draw for p in training.read(training.path_for(args.gpu)).points}
    solver = np.array([label.split()[0] in SOLVERS for label in s.labels])
    later = solver & np.array([draws[label] >= LATER for label in s.labels])
    scripts = np.array([label.split()[0] for label in s.labels])

    def scored(log_predicted: np.ndarray, where: np.ndarray) -> dict:
        return F.scores(subset(s, where), log_predicted[where[s.point_of]]).summary()

    def one_script_out() -> np.ndarray:
        out = np.zeros(s.plans)
        for name in np.unique(scripts):
            held = (scripts == name)[s.point_of]
            out[held] = F.log_predictions(s.select(held), F.fit(subset(s, scripts != name)))
        return out

    database = F.log_predictions(s, None)
    groups = (("solver", solver), ("matrix", ~solver), ("all", np.ones_like(solver)))
    rows = [("database alone", g, scored(database, m)) for g, m in groups]
    rows.append(("fitted without the solver points", "solver",
                 scored(F.log_predictions(s, F.fit(subset(s, ~solver))), solver)))
    rows.append(("database alone", "solver, later", scored(database, later)))
    rows.append(("fitted without the solver points", "solver, later",
                 scored(F.log_predictions(s, F.fit(subset(s, ~solver))), later)))
    rows.append(("fitted with the earlier solver points", "solver, later",
                 scored(F.log_predictions(s, F.fit(subset(s, ~later))), later)))
    cross = F.cross_validated(s)
    rows += [("10-fold cross-validated", g, scored(cross, m)) for g, m in groups]
    alone = one_script_out()
    rows += [("one script out", g, scored(alone, m)) for g, m in groups]
    lines = [f"# The solvers' iterations as training points ({args.gpu}, CPU)", "",
             f"`python -m experiments.prediction_solvers --gpu {args.gpu}`. {len(s.labels)} points"
             f" ({int(solver.sum())} of scripts/solvers/{{{','.join(SOLVERS)}}}.script, {int(later.sum())} of them"
             f" from draw {LATER} on), {s.plans} measured plans. A first choice: the measured time of the plan"
             " ranked first among a point's measured plans over the fastest measured.", "",
             "| predictor | points | first choice gmean | worst | ≤ 1.05x | ρ mean | ρ worst | of |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, group, r in rows:
        lines.append(f"| {name} | {r['points']} | {r['first_gmean']:.3f} | {r['first_worst']:.3f} |"
                     f" {100 * r['within']:.0f} % | {r['rho_mean']:.2f} | {r['rho_worst']:.2f} | {group} |")
    return write_report(Path(args.out) / f"{args.gpu}-prediction-solvers.md", lines)


if __name__ == "__main__":
    raise SystemExit(main())
