"""Does a fitted correction choose better than the database at sizes it never saw? On the CPU.

    python -m experiments.prediction_offline [--draw bench/results/h100-prediction-draw.json]
                                             [--training fusec/data/training/h100-80gb-hbm3.json]
                                             [--gpu h100] [--out experiments/results]

The GPU measured two sets of points: the training data of ``fusec perfdb measure-plans``
(each plan with its kernels' classes, features and database prices) and a draw of
``bench.prediction --draw`` (each measured candidate's summary, database price and time, no
plan). This rebuilds each draw point's space on the CPU (the database's predictor, the wide
candidates and the plans borrowed from nearby tunings, as the draw took them) and gives every
row the kernels of the candidate of the same summary (:func:`fusec.tune.plans.point_from_rows`,
which checks the price too and names any row it cannot match). Then it scores, by the first
choice among each point's measured plans (time over the fastest measured) and Spearman's rho,
the database alone against fits of the correction (:mod:`fusec.cost.fit`) in variants,
honestly: fitted on the training points and tested on the draw's (held out, never looked at
to pick a variant), and cross-validated by point over all of them.

Writes ``<out>/<gpu>-prediction-offline-points.json`` (every point, training and draw, in
the training format: ``fusec perfdb fit --training`` reads it) and
``<out>/<gpu>-prediction-offline.md`` / ``.json`` (the scores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def draw_points(draw: dict, library, base, log=print) -> list:
    """The training points of every complete point of every run in a draw report, with
    what could not be matched logged (and left out of its point)."""
    from fusec.frontend import load_script
    from fusec.target import slug
    from fusec.tune import plans, store
    out = []
    gpu = slug(draw["device"])
    for run in draw["runs"]:
        for raw in run["points"]:
            dag = load_script(ROOT / "scripts" / f"{raw['script']}.script", library)
            sizes = {k: int(v) for k, v in raw["sizes"].items()}
            borrowed = [e.plan for e in store.nearby(dag, library, raw["dtype"], sizes, gpu)]
            matched = plans.point_from_rows(
                dag, library, raw["dtype"], sizes, base, raw["rows"], extra=borrowed, seed=run["seed"], draw=0,
                when=run["date"], seconds=float(raw.get("seconds", 0.0)), complete=bool(raw["complete"]),
                top=run["top"], layouts=run["layouts"])
            point = matched.point
            log(f"{point.label}: {len(point.plans)}/{len(raw['rows'])} rows matched"
                + "".join(f"\n  not matched: {s}" for s in matched.unmatched)
                + "".join(f"\n  ambiguous: {s}" for s in matched.ambiguous)
                + "".join(f"\n  priced otherwise: {s}" for s in matched.mispriced))
            out.append(matched)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.prediction_offline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draw", default=str(ROOT / "bench" / "results" / "h100-prediction-draw.json"))
    parser.add_argument("--training", default=None, help="default: the bundled training data of --gpu")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)

    from fusec import data
    from fusec.cost import training
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    library = load_library(data.LIBRARY)
    base = predictor_for(library, args.gpu, corrected=False)
    database = base.database
    trained = training.read(Path(args.training) if args.training else training.path_for(database.slug))
    draw = json.loads(Path(args.draw).read_text(encoding="utf-8"))
    matched = draw_points(draw, library, base)
    rows = sum(len(p["rows"]) for run in draw["runs"] for p in run["points"])
    kept = sum(len(m.point.plans) for m in matched)
    print(f"draw: {kept}/{rows} rows matched" + ("" if kept == rows else " (see above)"))
    everything = trained
    for m in matched:
        everything = everything.with_point(m.point)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points_path = out / f"{database.slug.split('-')[0]}-prediction-offline-points.json"
    training.write(everything, points_path)
    print(f"wrote {points_path}: {len(trained.points)} training points and {len(matched)} of the draw")

    from experiments import prediction_study
    report = prediction_study.study(everything, {m.point.key for m in matched}, database)
    stem = out / f"{database.slug.split('-')[0]}-prediction-offline"
    report["command"] = "python -m experiments.prediction_offline" + ("" if not argv else " " + " ".join(argv))
    report["matched"] = {"rows": rows, "matched": kept,
                         "left_out": [s for m in matched for s in (*m.unmatched, *m.ambiguous, *m.mispriced)]}
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(prediction_study.markdown(report), encoding="utf-8")
    print(prediction_study.markdown(report))
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
