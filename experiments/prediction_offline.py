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


# the variants scored, declared before any was scored on the draw: (name, features kept, ridge, pool)
VARIANTS = (
    ("fit v1 features (as merged)", "v1", 1e-4, None),
    ("fit v2", "v2", 1e-4, None),
    ("fit v2, ridge 1e-3", "v2", 1e-3, None),
    ("fit v2, ridge 1e-2", "v2", 1e-2, None),
    ("fit v2, pooled 1e-3", "v2", 1e-4, 1e-3),
    ("fit v2, pooled 1e-2", "v2", 1e-4, 1e-2),
)
NEW_FEATURES = ("ahead", "evict_loads", "stream_stores")  # those of features version 2


def _kept(samples, which: str):
    """``samples`` with the features of version 2 zeroed for ``which`` == "v1" (a constant 0
    gets no weight: the fit of version 1's features)."""
    import dataclasses

    from fusec.cost.features import FEATURES
    if which == "v2":
        return samples
    x = samples.x.copy()
    x[:, [FEATURES.index(f) for f in NEW_FEATURES]] = 0.0
    return dataclasses.replace(samples, x=x)


def _subset(samples, keep_points):
    """The plans of the points ``keep_points`` (indices), renumbered from 0."""
    import dataclasses

    import numpy as np
    keep = np.isin(samples.point_of, list(keep_points))
    chosen = samples.select(keep)
    used, renumbered = np.unique(chosen.point_of, return_inverse=True)
    return dataclasses.replace(chosen, point_of=renumbered, labels=tuple(samples.labels[i] for i in used))


def study(data, draw_keys: set, database) -> dict:
    """The scores of the database alone and of each variant: fitted on the training points and
    tested on the draw's, and cross-validated by point over all (10 folds, and one point
    left out at a time); per point, the first choices; per class, the bias left."""
    import numpy as np

    from fusec.cost import fit as F
    everything, notes = F.samples(data, database)
    labels = everything.labels
    keys = [p.label for p in data.points if p.key in draw_keys]
    test = [i for i, label in enumerate(labels) if label in keys]
    train = [i for i in range(len(labels)) if i not in test]
    trained, tested = _subset(everything, train), _subset(everything, test)
    out = {"notes": notes, "points": {"training": len(train), "draw": len(test)},
           "plans": {"training": trained.plans, "draw": tested.plans}, "protocols": {}, "per_point": {}}
    protocols = {
        f"trained on the {len(train)} training points, tested on the draw": lambda v: _held_out(trained, tested, v),
        "cross-validated over all, 10 folds": lambda v: _cv(everything, v, F.FOLDS),
        "cross-validated over all, one point out": lambda v: _cv(everything, v, len(labels)),
        "cross-validated over the training points alone": lambda v: _cv(trained, v, F.FOLDS),
    }
    for name, run in protocols.items():
        rows = {}
        for variant in (("database", None, None, None),) + VARIANTS:
            samples, predicted = run(variant)
            scored = F.scores(samples, predicted)
            rows[variant[0]] = scored.summary()
            if name.startswith(("cross-validated over all, 10", "trained")):
                out["per_point"].setdefault(name, {})[variant[0]] = dict(
                    zip(samples.labels, [None if not np.isfinite(v) else float(v) for v in scored.first]))
        out["protocols"][name] = rows
    out["bias"] = _class_bias(everything)
    out["whole_space"] = _whole_space(trained, [p for p in data.points if p.key in draw_keys], database)
    return out


def _whole_space(trained, draw, database) -> list[dict]:
    """Per draw point: the plan the corrected predictor (fitted on the training points, the
    default fit) ranks first in the whole space, and whether the draw measured it. The
    scores above choose among the measured plans; where the space's first choice is not
    among them its time is not known, and only a GPU can tell."""
    from fusec import data as bundled
    from fusec.cost import correction
    from fusec.cost import fit as F
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    from fusec.library.loader import load_library
    from fusec.space.combinations import build_space
    from fusec.tune.plans import ProgramPlan, script_folders, script_path
    library = load_library(bundled.LIBRARY)
    base = predictor_for(library, database.slug, corrected=False)
    fitted = F.fit(trained)
    corrected = correction.CorrectedPredictor(base, correction.Correction(
        database.slug, str(database.library.get("hash")), database.built, fitted.classes()))
    out = []
    for point in draw:
        dag = load_script(script_path(point.script, script_folders(ROOT / "scripts")), library)
        sizes = dict(point.sizes)
        measured = {ProgramPlan.from_json(p.plan): p.measured for p in point.plans if p.measured is not None}
        best = min(measured.values())
        row = {"point": point.label}
        for name, predictor in (("database", base), ("corrected", corrected)):
            first = build_space(dag, library, point.dtype, sizes, predictor).best().plan
            row[name] = measured[first] / best if first in measured else None
        out.append(row)
    return out


def _fitted(samples, variant):
    from fusec.cost import fit as F
    _, which, ridge, pool = variant
    return F.fit(_kept(samples, which), ridge=ridge, pool=pool)


def _held_out(trained, tested, variant):
    from fusec.cost import fit as F
    if variant[1] is None:
        return tested, F.log_predictions(tested, None)
    return tested, F.log_predictions(_kept(tested, variant[1]), _fitted(trained, variant))


def _cv(samples, variant, folds):
    from fusec.cost import fit as F
    if variant[1] is None:
        return samples, F.log_predictions(samples, None)
    _, which, ridge, pool = variant
    return samples, F.cross_validated(_kept(samples, which), ridge=ridge, pool=pool, folds=folds)


def _class_bias(samples) -> dict:
    """Per class of a plan's dearest kernel: how the database's price departs from the measured
    time (log, each point's mean taken out, plans within 1.5x of their point's fastest), its
    mean and spread: a class priced slow has a positive mean."""
    import math

    import numpy as np

    from fusec.cost import fit as F
    from fusec.cost.features import CLASSES
    residual = F.log_predictions(samples, None) - samples.log_time
    weights = F.plan_weights(samples)
    for p in range(len(samples.labels)):
        mine = samples.point_of == p
        residual[mine] -= np.average(residual[mine], weights=weights[mine])
    dearest = np.full(samples.plans, -1)
    price = np.full(samples.plans, -np.inf)
    for k, plan in enumerate(samples.plan_of):
        if samples.log_price[k] > price[plan]:
            price[plan], dearest[plan] = samples.log_price[k], samples.kind_of[k]
    best = np.full(len(samples.labels), np.inf)
    np.minimum.at(best, samples.point_of, samples.log_time)
    near = samples.log_time <= best[samples.point_of] + math.log(F.NEAR)
    out = {}
    for c, kind in enumerate(CLASSES):
        mine = near & (dearest == c)
        if mine.any():
            out[kind] = {"plans": int(mine.sum()), "mean": float(residual[mine].mean()),
                         "spread": float(residual[mine].std())}
    return out


def markdown(report: dict) -> str:
    lines = ["# First choices of fitted corrections at sizes they did not see"
             f" (CPU, from {report.get('gpu', 'h100-80gb-hbm3')} measurements)", "",
             f"`{report['command']}`. Points: {report['points']['training']} of the training data"
             f" ({report['plans']['training']} measured plans, `fusec perfdb measure-plans`) and"
             f" {report['points']['draw']} of the draw ({report['plans']['draw']} measured plans,"
             " `bench.prediction --draw`); the draw's rows given their kernels on the CPU:"
             f" {report['matched']['matched']}/{report['matched']['rows']} matched"
             + (f", left out: {'; '.join(report['matched']['left_out'])}" if report["matched"]["left_out"] else "")
             + ". A first choice: the measured time of the plan a predictor ranks first among the point's"
             " measured plans over the fastest measured. ρ: Spearman's rho over the measured plans.", ""]
    for name, rows in report["protocols"].items():
        lines += [f"## {name}", "", "| predictor | points | geometric mean | worst | ≤ 1.05x | ρ mean | ρ worst |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for variant, r in rows.items():
            lines.append(f"| {variant} | {r['points']} | {r['first_gmean']:.3f} | {r['first_worst']:.3f}"
                         f" | {r['within'] * 100:.0f} % | {r['rho_mean']:.2f} | {r['rho_worst']:.2f} |")
        lines.append("")
    for name, table in report["per_point"].items():
        variants = list(table)
        lines += [f"## Per point: {name}", "", "| point | " + " | ".join(variants) + " |",
                  "|---|" + "---:|" * len(variants)]
        for label in table[variants[0]]:
            lines.append(f"| {label} | " + " | ".join(
                "—" if table[v].get(label) is None else f"{table[v][label]:.2f}" for v in variants) + " |")
        lines.append("")
    whole = report["whole_space"]
    known = [r for r in whole if r["corrected"] is not None]
    lines += ["## The first choice in the whole space (fitted on the training points)", "",
              "The tables above choose among each point's measured plans. In the whole space (as"
              " `fusec.compile` ranks it, before its spill check) the corrected predictor's first choice was"
              f" measured by the draw at {len(known)} of {len(whole)} points; '—': not measured, its time unknown"
              " until a GPU measures it.", "", "| point | database | corrected |", "|---|---:|---:|"]
    for r in whole:
        lines.append(f"| {r['point']} | " + " | ".join("—" if r[n] is None else f"{r[n]:.2f}"
                                                      for n in ("database", "corrected")) + " |")
    lines += ["", "## The database's bias by class (plans within 1.5x of their point's fastest)", "",
              "log(price / time), each point's weighted mean taken out: positive is priced slow.", "",
              "| class of the dearest kernel | plans | mean | spread |", "|---|---:|---:|---:|"]
    for kind, b in report["bias"].items():
        lines.append(f"| {kind} | {b['plans']} | {b['mean']:+.3f} | {b['spread']:.3f} |")
    return "\n".join(lines) + "\n"


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
    from fusec.tune.plans import refeature_all, script_folders
    trained = training.read(Path(args.training) if args.training else training.path_for(database.slug))
    trained = refeature_all(trained, library, base.target, script_folders(ROOT / "scripts"), log=print)
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

    report = study(everything, {m.point.key for m in matched}, database)
    stem = out / f"{database.slug.split('-')[0]}-prediction-offline"
    given = sys.argv[1:] if argv is None else list(argv)
    report["command"] = " ".join(["python -m experiments.prediction_offline", *given])
    report["gpu"] = database.slug
    report["matched"] = {"rows": rows, "matched": kept,
                         "left_out": [s for m in matched for s in (*m.unmatched, *m.ambiguous, *m.mispriced)]}
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
