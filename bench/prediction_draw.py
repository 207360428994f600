"""The random-draw mode of bench.prediction: is the first choice good at sizes nobody tuned?

    python -m bench.prediction --draw [--seed N] [--budget SECONDS] [--scripts atax,...]
                               [--dtype float32|float64|both] [--top 4] [--layouts 8]
                               [--repeat 20] [--gpu NAME] [--previous FILE] [--out bench/results]

A run draws one size per sequence and precision (fusec.tune.plans.draw_sizes: a
new seed per run unless --seed; sides 500..20000, square and rectangular, vectors
of as many elements for the sequences without a matrix), and at each point
measures on the GPU, as ``fusec tune`` does (checked against the oracle, median
of --repeat, from an empty L2), a wide tune: the top K, the best of the L best
layouts and the best of every layout class (fusec.tune.plans.wide_candidates) of
the database's ranking and of the corrected one, and the plan ``fusec.compile``
takes with each predictor, without the nearby-plan borrowing (``tuned=False``:
the best-predicted plan whose kernels do not spill) and with it (as an untuned
compile does: the plan tuned for the nearest sizes where the space offers it), and the
plan a quick tune keeps (``fusec.compile(measure=True)``, fusec.tune.quick: its two rounds'
plans are measured too, and its choice is the fastest of them; the run records the rule).
--previous FILE adds another correction of the same database (the one a refit
replaced): its ranking joins the wide tune and its first choice is scored as
'previous'.

Reported per point: each first choice's time over the best measured, and
Spearman's rho of each predictor's times against the measured ones over the
measured plans. Targets (issue 49, H100): every first choice within 1.05x of the
best, geometric mean <= 1.02x, rho >= 0.8.

Writes <out>/<gpu>-prediction-draw.json (every run, by seed: a run of the same
--seed goes on where it stopped, --budget ends a run cleanly) and .md (the
latest run's table, and a line per earlier run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import time
from pathlib import Path

from bench.prediction import ROOT, SCRIPTS

TARGET_EACH, TARGET_GMEAN, TARGET_RHO = 1.05, 1.02, 0.8
CHOICES = (("database", False), ("database + nearby", True), ("corrected", False), ("corrected + nearby", True))
PREVIOUS = ("previous", False)  # --previous: another correction file, its first choice beside the others


def choices_of(predictors) -> tuple[tuple[str, bool], ...]:
    """The choices a run scores, ``(name, borrows)``: CHOICES of the predictors it has, then
    the previous correction's where given."""
    return tuple(c for c in CHOICES + (PREVIOUS,) if c[0].split(" ")[0] in predictors)


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def draw_points(scripts, dtypes, seed: int, library) -> list[tuple[str, str, object, dict]]:
    """(script, dtype, dag, sizes) of a run's draw: the same for the same seed."""
    from fusec.frontend import load_script
    from fusec.tune.plans import draw_sizes
    out = []
    for script in scripts:
        dag = load_script(ROOT / "scripts" / f"{script}.script", library)
        for dtype in dtypes:
            out.append((script, dtype, dag, draw_sizes(dag, seed, 0, dtype)))
    return out


def score(rows: list[dict], choices: dict[str, dict], predictors: list[str]) -> dict:
    """The best measured time, each choice's time over it, and each predictor's
    Spearman's rho over the measured rows (GPU-free: rows as evaluate_point makes them)."""
    from fusec.cost.fit import spearman
    ok = [r for r in rows if r["measured_us"] is not None]
    best = min((r["measured_us"] for r in ok), default=None)
    scored = {}
    for name, choice in choices.items():
        measured = rows[choice["row"]]["measured_us"] if choice.get("row") is not None else None
        scored[name] = {**choice, "measured_us": measured,
                        "ratio": measured / best if measured is not None and best else None}
    rho = {p: (spearman([r["predicted_us"][p] for r in ok], [r["measured_us"] for r in ok]) if len(ok) >= 3
               else None) for p in predictors}
    return {"best_us": best, "measured": len(ok), "candidates": len(rows), "choices": scored,
            "rho": {p: (None if v is None or math.isnan(v) else v) for p, v in rho.items()},
            "best": next((r["summary"] + " (" + ", ".join(r["groups"]) + ")" for r in ok if r["measured_us"] == best),
                         None)}


def evaluate_point(script, dag, library, dtype: str, sizes: dict, predictors: dict, *, top: int, layouts: int,
                   measurer, deadline=None) -> dict:
    """Measure one point's wide tune and first choices (see the module's docstring). The wide
    tune is compiled first, all at once; the first choices' spill checks (nvcc) then find
    most of their compiles in the cache, and a first choice not among the wide tune's plans
    (where a better-ranked one spills) is measured after it."""
    from fusec.space.combinations import build_space
    from fusec.tune import plans

    target = next(iter(predictors.values())).target
    wide = [plans.wide_candidates(build_space(dag, library, dtype, sizes, p), top, layouts)
            for p in {id(p): p for p in predictors.values()}.values()]
    candidates = plans.merge(*wide)
    generated = plans.generate_all(dag, library, dtype, [c.plan for c in candidates], target)
    with measurer:
        measurements = plans.measure(measurer, generated, deadline=deadline)

        def add(chosen: list) -> list:
            """Merge ``chosen`` (Candidates) into the candidates, measure those not measured yet;
            the measured seconds of each chosen one (None where it did not pass)."""
            nonlocal candidates, measurements, generated
            candidates = plans.merge(candidates, chosen)  # a plan not among them comes last
            extra = plans.generate_all(dag, library, dtype, [c.plan for c in candidates[len(generated):]], target)
            if extra:
                measurements += plans.measure(measurer, extra, deadline=deadline)
                generated += extra
            index = {c.plan: i for i, c in enumerate(candidates)}
            return [measurements[index[c.plan]].seconds if measurements[index[c.plan]].passed else None
                    for c in chosen]

        firsts = first_choices(dag, library, dtype, sizes, predictors)
        add([plans.Candidate(f["plan"], (f"first: {name}",)) for name, f in firsts.items() if "plan" in f])
        quick_name = quick_predictor(predictors)
        if quick_name is not None:
            firsts[f"{quick_name} + quick"] = quick_choice(dag, library, dtype, sizes, predictors[quick_name], add)
    predicted = [{name: _us(plans.plan_seconds(p, dag, sizes, g)) for name, p in predictors.items()}
                 for g in generated]
    complete = all(m.verdict != plans.NOT_MEASURED for m in measurements)
    rows = [{"summary": c.plan.summary(dag), "groups": list(c.groups), "predicted_us": p,
             "measured_us": m.seconds * 1e6 if m.passed else None, "verdict": _verdict(m)}
            for c, p, m in zip(candidates, predicted, measurements)]
    index = {c.plan: i for i, c in enumerate(candidates)}
    choices = {name: {"summary": rows[index[f["plan"]]]["summary"], "origin": f["origin"], "row": index[f["plan"]]}
               if "plan" in f else {**f, "row": None} for name, f in firsts.items()}
    return {"script": script, "dtype": dtype, "sizes": dict(sizes), "complete": complete,
            **score(rows, choices, list(predictors)), "rows": rows}


def first_choices(dag, library, dtype: str, sizes: dict, predictors: dict) -> dict[str, dict]:
    """The plan ``fusec.compile`` takes with each predictor, without borrowing (``tuned=False``)
    and with it: {choice: {"plan", "origin"}} ({"origin": why} where it failed)."""
    from fusec.api import build_program
    from fusec.errors import FusecError
    firsts = {}
    for name, borrow in choices_of(predictors):
        predictor = predictors[name.split(" ")[0]]
        if borrow and not _may_borrow(dag, library, dtype, sizes):
            firsts[name] = firsts[name.split(" ")[0]]  # nothing tuned to borrow: compile predicts alike
            continue
        try:
            program, _ = build_program(dag, library, dtype, sizes=sizes, predictor=predictor, tuned=borrow)
        except FusecError as exc:
            firsts[name] = {"origin": f"failed: {exc}"}
            continue
        firsts[name] = {"plan": program.generated.plan, "origin": program.origin or "predicted"}
    return firsts


def quick_predictor(predictors: dict) -> str | None:
    """The predictor a quick tune ranks with (``fusec.compile(measure=True)`` takes the corrected one)."""
    return next((name for name in ("corrected", "database") if name in predictors), None)


def quick_choice(dag, library, dtype: str, sizes: dict, predictor, add) -> dict:
    """The plan a quick tune (fusec.tune.quick) keeps here, from the draw's own measurements:
    its first round measured by ``add`` (those of the wide tune are not timed again), then the
    second round around the first's leaders (its fastest, and another structure timed within
    a tie of it). {"plan", "origin"}, or {"origin": why} where none passed."""
    from fusec.space.combinations import build_space
    from fusec.target import chosen_slug
    from fusec.tune import plans, quick
    from fusec.tune.search import quick_first_round
    space = build_space(dag, library, dtype, sizes, predictor)
    first = quick_first_round(space, chosen_slug(None))
    times = add([plans.Candidate(c.plan, ("quick: first round",)) for c in first])
    timed = [(t, c.plan) for t, c in zip(times, first) if t is not None]
    if not timed:
        return {"origin": "failed: no plan of the quick tune's first round passed"}
    second = quick.second_round(space, timed, [c.plan for c in first])
    times = add([plans.Candidate(c.plan, ("quick: second round",)) for c in second])
    timed += [(t, c.plan) for t, c in zip(times, second) if t is not None]
    plan = min(timed, key=lambda tc: tc[0])[1]
    return {"plan": plan, "origin": f"quick tune: the fastest of {len(first)} + {len(second)} plans"}


def _may_borrow(dag, library, dtype: str, sizes: dict) -> bool:
    """Whether an untuned compile could take a tuned plan here: one of these sizes, or of
    nearby ones (fusec.tune.store.nearby); where not, it predicts as tuned=False does."""
    from fusec.target import chosen_slug
    from fusec.tune import store
    gpu = chosen_slug(None)
    return (store.lookup(dag, library, dtype, sizes, gpu) is not None
            or bool(store.nearby(dag, library, dtype, sizes, gpu)))


def _us(seconds):
    return None if seconds is None else seconds * 1e6


def _verdict(measurement) -> str:
    from fusec.tune.search import headline
    if measurement.passed or not measurement.reason:
        return measurement.verdict
    return f"{measurement.verdict}: {headline(measurement.reason)}"[:300]


def _rule(run: dict) -> str:
    """', first 2, within 1.6x, ...': the quick tune's rule a run measured ('' if it says none)."""
    rule = run.get("quick")
    if not rule:
        return ""
    cap = f" (at most {rule['families']} family structures)" if "families" in rule else ""
    cap += f", fusions {rule['fusions']}" if "fusions" in rule else ""
    first_orders = f", {rule['first_orders']} other routine order each" if "first_orders" in rule else ""
    tie = f", structures within {rule['tie']}x of the fastest" if "tie" in rule else ""
    return (f": first {rule['first']}, within {rule['within']}x{cap}{first_orders}; refine {rule['refine']},"
            f" orders {rule['orders']}{tie}, register-bound twins {rule.get('twins', 'apart')}")


def _cell(value, digits=2, suffix="") -> str:
    return "—" if value is None else f"{value:.{digits}f}{suffix}"


def summary(points: list[dict], names=None) -> list[dict]:
    """Per choice (``names``, default CHOICES'): points scored, geometric mean and worst of
    its time over the best, the share within TARGET_EACH; per predictor: rho's mean and worst."""
    out = []
    names = names or [name for name, _ in CHOICES]
    for name in names:
        ratios = [p["choices"][name]["ratio"] for p in points
                  if name in p["choices"] and p["choices"][name]["ratio"] is not None]
        if not ratios:
            continue
        rhos = [p["rho"].get(name.split(" ")[0]) for p in points]
        rhos = [r for r in rhos if r is not None]
        out.append({"choice": name, "points": len(ratios),
                    "gmean": math.exp(sum(math.log(r) for r in ratios) / len(ratios)), "worst": max(ratios),
                    "within": sum(r <= TARGET_EACH for r in ratios) / len(ratios),
                    "rho_mean": sum(rhos) / len(rhos) if rhos else None, "rho_worst": min(rhos) if rhos else None})
    return out


def markdown(report: dict) -> str:
    run = report["runs"][-1]
    points = [p for p in run["points"] if p["complete"]]
    lines = [f"# First choices at sizes drawn at random on {report['device']}", "",
             f"`{run['command']}`, seed {run['seed']}, {run['date']}; predictors: {', '.join(run['predictors'])}."
             " Each point's plans measured as `fusec tune` measures them (oracle-checked, median of"
             f" {run['repeat']}, GPU time from an empty L2): the top {run['top']} of each predictor's ranking"
             f" with their twins, the best of its {run['layouts']} best layouts, the best of every layout class,"
             " and each first choice. A choice's column is its measured time over the best measured;"
             " '+ nearby': as an untuned `fusec.compile` chooses, borrowing the plan tuned at the nearest sizes"
             " where there is one; '+ quick': the plan `fusec.compile(measure=True)` keeps, the fastest of its"
             " quick tune's two rounds (fusec.tune.quick" + _rule(run) + "), from these same measurements."
             " ρ: Spearman's rho of the predictor's times against the measured ones.", "",
             f"Targets (issue 49): every first choice ≤ {TARGET_EACH}x, geometric mean ≤ {TARGET_GMEAN}x,"
             f" ρ ≥ {TARGET_RHO}.", "",
             "| choice | points | geometric mean | worst | ≤ 1.05x | ρ mean | ρ worst |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    names = run.get("choices") or [name for name, _ in CHOICES]
    keys = list(dict.fromkeys(name.split(" ")[0] for name in names))  # the predictors, in order
    for s in summary(points, names):
        lines.append(f"| {s['choice']} | {s['points']} | {s['gmean']:.3f} | {s['worst']:.3f}"
                     f" | {s['within'] * 100:.0f} % | {_cell(s['rho_mean'])} | {_cell(s['rho_worst'])} |")
    lines += ["", "| sequence | dtype | sizes | plans | best µs | " + " | ".join(names)
              + "".join(f" | ρ {key}" for key in keys) + " | best plan |",
              "|---|---|---|---:|---:|" + "---:|" * (len(names) + len(keys)) + "---|"]
    for p in points:
        sizes = ",".join(f"{k}={v}" for k, v in sorted(p["sizes"].items()))
        cells = [_cell(p["choices"].get(n, {}).get("ratio")) for n in names]
        cells += [_cell(p["rho"].get(key)) for key in keys]
        lines.append(f"| {p['script']} | {p['dtype']} | {sizes} | {p['measured']}/{p['candidates']}"
                     f" | {_cell(p['best_us'], 1)} | " + " | ".join(cells) + f" | {p['best']} |")
    borrowed = [(p, n) for p in points for n in names
                if "nearby" in n and "nearest" in str(p["choices"].get(n, {}).get("origin"))]
    if borrowed:
        lines += ["", "Borrowed plans: " + "; ".join(f"{p['script']} {p['dtype']} ({n}): {p['choices'][n]['origin']}"
                                                      for p, n in borrowed)]
    if len(report["runs"]) > 1:
        lines += ["", "## Earlier runs", ""]
        for earlier in report["runs"][:-1]:
            done = [p for p in earlier["points"] if p["complete"]]
            parts = [f"{s['choice']} gmean {s['gmean']:.3f}, worst {s['worst']:.3f}"
                     for s in summary(done, earlier.get("choices"))]
            lines.append(f"- seed {earlier['seed']} ({earlier['date']}, {len(done)} points): " + "; ".join(parts)
                         + (f" (quick tune{_rule(earlier)})" if earlier.get("quick") else ""))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.prediction --draw", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draw", action="store_true", help="this mode (sizes drawn at random)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the draw (default: a new one, printed)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="start no point expected to end after this many seconds (default: no limit)")
    parser.add_argument("--scripts", default=",".join(SCRIPTS), help="comma-separated (default: all eleven)")
    parser.add_argument("--dtype", default="both", choices=("float32", "float64", "both"))
    parser.add_argument("--top", type=int, default=None, metavar="K", help="top K of each ranking (default: 4)")
    parser.add_argument("--layouts", type=int, default=None, metavar="L", help="best L layouts (default: 8)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--gpu", default=None, help="database to predict with (default: the GPU present)")
    parser.add_argument("--previous", default=None, metavar="FILE",
                        help="another fitted correction of the same database (e.g. the one a refit replaced):"
                             " its first choice is measured and scored beside the others, as 'previous'")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    from fusec.tune import plans, quick
    scripts = [s for s in args.scripts.split(",") if s]
    unknown = [s for s in scripts if s not in SCRIPTS]
    if unknown:
        parser.error(f"--scripts: no sequence {unknown[0]!r} (known: {', '.join(SCRIPTS)})")
    top = plans.TOP if args.top is None else args.top
    layouts = plans.LAYOUTS if args.layouts is None else args.layouts
    if top < 1 or layouts < 0 or args.repeat < 1:
        parser.error("--top and --repeat must be at least 1, --layouts at least 0")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed {args.seed}: 0 or more")
    if args.budget is not None and not args.budget >= 0:
        parser.error(f"--budget {args.budget:g}: seconds, 0 or more")
    if args.previous:  # a file that is no correction is named before the GPU is looked for
        from fusec.cost import correction
        try:
            correction.Correction.from_json(Path(args.previous).read_text(encoding="utf-8"), args.previous)
        except OSError as exc:
            parser.error(f"--previous {args.previous}: cannot be read ({exc.strerror})")
        except (ValueError, KeyError, TypeError) as exc:
            parser.error(f"--previous {args.previous}: not a fitted correction ({exc})")

    from fusec import data
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    from fusec.target import present
    from fusec.tune.search import GpuMeasurer
    info = present()
    if info is None:
        parser.error("the draw measures plans on the GPU, and PyCUDA to reach it: none is here")
    seed = new_seed() if args.seed is None else args.seed
    print(f"seed {seed} (run again with --seed {seed} to go on where this run stops)", flush=True)
    library = load_library(data.LIBRARY)
    base = predictor_for(library, args.gpu or info.slug, corrected=False)
    corrected = predictor_for(library, args.gpu or info.slug)
    predictors = {"database": base, **({"corrected": corrected} if corrected is not base else {})}
    if args.previous:  # fitted to the database in use?
        import warnings

        from fusec.cost import correction
        with warnings.catch_warnings():
            warnings.simplefilter("error", correction.CorrectionWarning)
            try:
                previous = correction.load(Path(args.previous), base.database)
            except correction.CorrectionWarning as exc:
                parser.error(f"--previous {args.previous}: {exc}")
        predictors["previous"] = correction.CorrectedPredictor(base, previous)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from bench import peers as P
    stem = out / f"{P.default_name(info.name, 'prediction-draw')}"
    report = (json.loads(stem.with_suffix(".json").read_text(encoding="utf-8")) if stem.with_suffix(".json").is_file()
              else {"device": info.name, "runs": []})
    run = next((r for r in report["runs"] if r["seed"] == seed), None)
    if run is None:
        run = {"seed": seed, "points": []}
        report["runs"].append(run)
    else:  # the run goes on, last in the file
        report["runs"].remove(run)
        report["runs"].append(run)
    run.update(command=P.command_line("bench.prediction", argv), date=str(datetime.date.today()),
               predictors=[f"{p.name} from {args.previous}" if key == "previous" else p.name
                           for key, p in predictors.items()], top=top, layouts=layouts, repeat=args.repeat,
               choices=[name for name, _ in choices_of(predictors)]
               + ([f"{quick_predictor(predictors)} + quick"] if quick_predictor(predictors) else []),
               quick=quick.rule(),
               library=library.content_hash)
    done = {(p["script"], p["dtype"]) for p in run["points"] if p["complete"]}
    budget = plans.Budget(args.budget)
    left = []
    for script, dtype, dag, sizes in draw_points(scripts, P.dtypes_of(args.dtype), seed, library):
        label = f"{script} {dtype} " + ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
        if (script, dtype) in done:
            continue
        if left or not budget.allows((script, dtype)):
            left.append(label)
            continue
        start = time.monotonic()
        measurer = GpuMeasurer(dag, library, dtype, sizes, repeat=args.repeat, warmup=3, seed=seed)
        point = evaluate_point(script, dag, library, dtype, sizes, predictors, top=top, layouts=layouts,
                               measurer=measurer, deadline=budget.deadline)
        point["seconds"] = time.monotonic() - start
        budget.record((script, dtype), point["seconds"])
        run["points"] = [p for p in run["points"] if (p["script"], p["dtype"]) != (script, dtype)] + [point]
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        stem.with_suffix(".md").write_text(markdown(report), encoding="utf-8")
        ratios = ", ".join(f"{n} {_cell(c['ratio'])}" for n, c in point["choices"].items())
        rhos = ", ".join(f"{n} {_cell(v)}" for n, v in point["rho"].items())
        print(f"{label}: {point['measured']}/{point['candidates']} plans, best {_cell(point['best_us'], 1)} us;"
              f" {ratios}; rho {rhos} ({point['seconds']:.0f} s)"
              + ("" if point["complete"] else ", cut short by the budget"), flush=True)
    if run["points"]:
        print(markdown(report))
        print(f"wrote {stem}.md and .json")
    if left:
        print(f"the budget ran out: {len(left)} point(s) left; run again with --seed {seed} to measure them: "
              + "; ".join(left))
    return 0
