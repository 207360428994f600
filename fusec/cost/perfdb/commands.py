"""``fusec perfdb build`` and ``fusec perfdb show`` (wired in :mod:`fusec.cli`)."""

from __future__ import annotations

import collections
import os
from pathlib import Path

from ...errors import FusecError, GPUUnavailableError
from ...validate import file_in_the_way, regular_file
from . import store


def build_command(args) -> int:
    from ...api import resolve_library
    from .build import build
    library = resolve_library(args.library)
    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    missing = args.missing
    database, path = build(library, dtypes, Path(args.output) if args.output else None,
                           progress=not args.quiet, missing=missing)
    what = "holds" if missing else "timed"
    print(f"{what} {len(database.timings)} routine keys of library {library.name!r} on"
          f" {database.device['name']} ({', '.join(dtypes)}); launch {database.launch * 1e6:.1f} us")
    print(f"wrote {path}")
    return 0


def _named(given: str | None, wanted: str) -> str:
    """The GPU a command looked for, as the user wrote it (--gpu or $FUSEC_GPU) beside its slug."""
    given = given or os.environ.get("FUSEC_GPU")
    return f"{wanted!r}" if not given or given.strip().lower() == wanted else f"{given!r} (slug {wanted!r})"


def show_command(args) -> int:
    from ...target import chosen_slug
    folder = Path(args.dir) if args.dir else None
    wanted = chosen_slug(args.gpu)
    if wanted is None:
        raise GPUUnavailableError("no GPU here: name one with --gpu (e.g. --gpu h100)")
    path = store.find(wanted, folder)
    if path is None:
        raise FusecError(f"no performance database for {_named(args.gpu, wanted)} in {folder or store.directory()}")
    database = store.load(path)
    if database is None:
        raise FusecError(f"the performance database {path} cannot be used (see the warning above)")
    device = database.device
    print(f"{path}")
    print(f"device   {device['name']}, {device['sms']} SMs, compute capability"
          f" {device.get('compute_capability', '?')}, driver {device.get('cuda_driver', '?')},"
          f" {device.get('nvcc', '?')}")
    print(f"library  {database.library.get('name')} (hash {database.library.get('hash')})")
    print(f"built    {database.built} by fusec {database.fusec}; launch {database.launch * 1e6:.2f} us")
    counts = collections.Counter((t.key.dtype, t.key.geometry) for t in database.timings.values())
    print("routine keys  " + ", ".join(f"{d} {g}: {n}" for (d, g), n in sorted(counts.items())))
    if args.routine:
        names = sorted({t.key.routine for t in database.timings.values()})
        if args.routine not in names:
            raise FusecError(f"--routine {args.routine!r}: {path.name} timed no such routine"
                             f" (it has: {', '.join(names)})")
        print()
        print(f"{'routine':<20} {'section':<5} {'dtype':<8} {'shape':<22} {'blocks/SM: us per block-iteration'}")
        for timing in sorted(database.timings.values(), key=lambda t: t.key):
            key = timing.key
            if key.routine != args.routine:
                continue
            shape = f"{key.block}t,{key.iters}it" + (f",{key.tile_rows}r,{key.serial}" if key.serial else "")
            levels = "  ".join(f"{b}:{s * 1e6:.3f}" for b, s in sorted(timing.seconds.items()))
            print(f"{key.routine:<20} {key.section:<5} {key.dtype:<8} {shape:<22} {levels}")
    return 0


def measure_plans_command(args) -> int:
    """``fusec perfdb measure-plans``: the arguments checked first (no GPU needed for that)."""
    from ...api import resolve_library
    from ...target import present
    from ...tune import plans
    from ...tune.search import GpuMeasurer
    from .. import training
    from . import predictor_for
    for flag, value, low in (("--draws", args.draws, 1), ("--top", args.top, 1), ("--layouts", args.layouts, 0),
                             ("--repeat", args.repeat, 1), ("--warmup", args.warmup, 0), ("--seed", args.seed, 0)):
        if value < low:
            raise FusecError(f"{flag} {value}: it must be at least {low}")
    if args.budget is not None and not args.budget >= 0:
        raise FusecError(f"--budget {args.budget:g}: seconds, 0 or more")
    for script in args.scripts:
        regular_file(script, "script")  # a folder or a FIFO says what it is
    missing = [s for s in args.scripts if not Path(s).is_file()]
    if missing:
        raise FusecError(f"no script {missing[0]!r}")
    if args.again and args.output and not Path(args.output).is_file():  # named before the GPU is looked for
        raise FusecError(f"--again: no training file {args.output} to measure again")
    library = resolve_library(args.library)
    info = present()
    if info is None:
        raise GPUUnavailableError("'fusec perfdb measure-plans' times plans on the GPU: none found"
                                  " (PyCUDA and an NVIDIA GPU are needed)")
    base = predictor_for(library, info.slug, corrected=False)
    if getattr(base, "database", None) is None:
        raise FusecError(f"no usable performance database for {info.name} in {store.directory()}: run"
                         " 'fusec perfdb build' first (the training data records its prices)")
    corrected = predictor_for(library, info.slug)
    out = Path(args.output) if args.output else training.path_for(info.slug)
    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)

    def measurer_for(dag, library, dtype, sizes):
        return GpuMeasurer(dag, library, dtype, sizes, repeat=args.repeat, warmup=args.warmup, seed=args.seed)

    if args.again:
        if not out.is_file():
            raise FusecError(f"--again: no training file {out} to measure again (-o names another)")
        print(f"measuring again the plans {base.name} no longer prices as {out} records, of"
              f" {', '.join(Path(s).stem for s in args.scripts)}, on {info.name}", flush=True)
        again = plans.remeasure([Path(s) for s in args.scripts], library, out=out, base=base,
                                measurer_for=measurer_for, budget=args.budget,
                                log=lambda line: print(line, flush=True), progress=not args.quiet)
        print(f"{len(again.measured)} point(s) measured again; {again.path} holds {len(again.data.points)} points")
        if again.left:
            print(f"the budget ran out: {len(again.left)} point(s) left for the next run: " + "; ".join(again.left))
        return 0
    print(f"seed {args.seed}: measuring {', '.join(Path(s).stem for s in args.scripts)} ({', '.join(dtypes)}) on"
          f" {info.name}, predicted by {base.name}" + (f" and {corrected.name}" if corrected is not base else ""),
          flush=True)
    result = plans.collect([Path(s) for s in args.scripts], library, out=out, gpu_name=info.name, base=base,
                           others=() if corrected is base else (corrected,), seed=args.seed, draws=args.draws,
                           budget=args.budget, dtypes=dtypes, top=args.top, layouts=args.layouts,
                           measurer_for=measurer_for, log=lambda line: print(line, flush=True),
                           progress=not args.quiet)
    measured = sum(1 for p in result.data.points for q in p.plans if q.measured is not None)
    print(f"{len(result.measured)} point(s) measured in this run; {result.path} holds {len(result.data.points)}"
          f" points, {measured} plans measured")
    if result.left:
        print(f"the budget ran out: {len(result.left)} point(s) of this draw left for the next run (the same"
              f" --seed {args.seed} goes on): " + "; ".join(result.left))
    return 0


def fit_command(args) -> int:
    """``fusec perfdb fit``: fit, report, and write the correction unless it scores worse than none."""
    import datetime
    import math

    from ...api import resolve_library
    from ...target import chosen_slug
    from ...version import __version__
    from .. import correction, fit, training
    from ..features import FEATURES_VERSION
    if args.ridge is not None and not (math.isfinite(args.ridge) and args.ridge >= 0):
        raise FusecError(f"--ridge {args.ridge:g}: a weight, finite, 0 or more")
    if args.folds is not None and args.folds < 2:
        raise FusecError(f"--folds {args.folds}: at least 2")
    if args.output:
        _check_output_file(Path(args.output))  # before the fit's seconds, not after
    wanted = chosen_slug(args.gpu)
    if wanted is None:
        raise GPUUnavailableError("no GPU here: name the one whose database to correct with --gpu (e.g. --gpu h100)")
    library = resolve_library(args.library)
    path = store.find(wanted)
    if path is None:
        raise FusecError(f"no performance database for {_named(args.gpu, wanted)} in {store.directory()}")
    database = store.load(path, library)
    if database is None:
        raise FusecError(f"the performance database {path} cannot be used (see the warning above)")
    source = Path(args.training) if args.training else training.path_for(database.slug)
    if not source.is_file():
        raise FusecError(f"no training data {source}: run 'fusec perfdb measure-plans' on the GPU first")
    data = training.read(source)
    if any(p.features_version != FEATURES_VERSION for p in data.points):
        # features of another version are recomputed from each plan's JSON, the scripts read from
        # ./scripts (where `fusec perfdb measure-plans` took them from, in a checkout), else from
        # the solvers' bundled iterations
        from ...tune.plans import refeature_all, script_folders
        from . import predictor_for
        target = predictor_for(library, database.slug, corrected=False).target
        data = refeature_all(data, library, target, script_folders(Path("scripts")), log=print)
    samples, notes = fit.samples(data, database)
    for note in notes:
        print(f"left out: {note}")
    if not samples.plans:
        raise FusecError(f"{source} holds no measured plan priced by {path} as it is now")
    ridge = fit.RIDGE if args.ridge is None else args.ridge
    relative, folds = not args.absolute, args.folds or fit.FOLDS
    if args.folds is not None and folds > len(samples.labels):
        raise FusecError(f"--folds {folds}: more than the {len(samples.labels)} points of {source}")
    used, tried = fit.choose(samples, ridge=ridge, relative=relative, folds=folds)
    fitted = fit.fit(samples, ridge=ridge, relative=relative, used=used)
    results = {"database": fit.scores(samples, fit.log_predictions(samples, None)).summary(),
               "fit, in sample": fit.scores(samples, fit.log_predictions(samples, fitted)).summary(),
               "fit, cross-validated": tried[fit.FEATURE_SETS.index(used)]}
    print(fit_report(samples, fitted, results, source))
    print(choice_report(tried, used, folds))
    database_alone, validated = results["database"], results["fit, cross-validated"]
    if not fitted.fitted:
        print("no class has enough measured plans to fit: nothing written")
        return 1
    if validated["first_gmean"] > database_alone["first_gmean"] and not args.force:
        print("not written: cross-validated, the fit's first choices are worse than the database's alone"
              " (--force writes it anyway)")
        return 1
    fitted_file = correction.Correction(
        database.slug, str(database.library.get("hash")), database.built, fitted.classes(),
        {"fusec": __version__, "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "training": source.name, "points": len(samples.labels), "plans": samples.plans, "ridge": ridge,
         "relative": relative, "folds": folds,
         "scores": {name: {k: (v if math.isfinite(v) else None) for k, v in r.items()} for name, r in results.items()},
         "features chosen": {"from": [list(s) for s in fit.FEATURE_SETS],
                             "first_gmean": [tried[i]["first_gmean"] for i in range(len(fit.FEATURE_SETS))]}},
        used=fitted.used)
    out = Path(args.output) if args.output else correction.path_for(database.slug, path.parent)
    correction.save(fitted_file, out)
    print(f"wrote {out}")
    return 0


def _check_output_file(path: Path) -> None:
    """-o FILE names a file that can be written: not a folder, and under no file."""
    if path.is_dir():
        raise FusecError(f"-o {path}: a folder; name the file to write")
    blocker = file_in_the_way(path.parent)
    if blocker is not None:
        raise FusecError(f"-o {path}: {blocker} is a file, not a folder")


def choice_report(tried: dict, used: tuple, folds: int) -> str:
    """The cross-validated first choices of each feature set ``fusec perfdb fit`` chose from,
    and its choice."""
    from ..features import BASE, BLOCK_SIZE
    from ..fit import FEATURE_SETS
    lines = [f"features: cross-validated first choice ({folds} folds; the same points choose and score,"
             " so the score of the choice is optimistic by it):"]
    for i, names in enumerate(FEATURE_SETS):
        extra = [f for f in names if f not in BASE]
        label = "with " + ", ".join(extra) if extra else "without " + ", ".join(BLOCK_SIZE)
        mark = "  <- chosen" if names == used else ""
        lines.append(f"  {label:<36} gmean {tried[i]['first_gmean']:.3f}  worst {tried[i]['first_worst']:.3f}{mark}")
    return "\n".join(lines)


def fit_report(samples, fitted, results: dict, source: Path) -> str:
    """The coefficients per class and the scores, as ``fusec perfdb fit`` prints them."""
    from ..features import CLASSES, FEATURES
    from ..fit import WITHIN
    shown = [i for i, f in enumerate(FEATURES) if f in fitted.used]
    lines = [f"{source}: {len(samples.labels)} points, {samples.plans} measured plans", "",
             f"{'class':<11} {'kernels':>7}  " + " ".join(f"{FEATURES[i]:>10}" for i in shown)]
    for c, kind in enumerate(CLASSES):
        count = fitted.kernels.get(kind, 0)
        if kind in fitted.fitted:
            cells = " ".join(f"{fitted.weights[c][i]:>10.4f}" for i in shown)
        else:
            cells = "not fitted (too few plans): the database's prices stand" if count else "no kernels"
        lines.append(f"{kind:<11} {count:>7}  {cells}")
    lines += ["", "first choice among each point's measured plans (its time over the fastest's), Spearman's rho:",
              f"{'':<22} {'points':>6} {'gmean':>7} {'worst':>7} {f'<= {WITHIN:.2f}x':>9} {'rho mean':>9}"
              f" {'rho worst':>9}"]
    for name, r in results.items():
        lines.append(f"{name:<22} {r['points']:>6} {r['first_gmean']:>7.3f} {r['first_worst']:>7.3f}"
                     f" {r['within'] * 100:>8.0f}% {r['rho_mean']:>9.2f} {r['rho_worst']:>9.2f}")
    return "\n".join(lines)
