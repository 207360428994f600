"""Where does the band family's price go wrong, and does a property of band kernels explain it? (CPU)

    python -m experiments.band_pricing [--gpu h200] [--before 90a419f] [--out experiments/results]

Issue 49: in the H200's later training points, where the corrected predictor chose a plan 1.08x
or more the best, most chosen plans held band kernels predicted faster than they ran. This
reads the GPU's training file (``fusec/data/training/<gpu>.json``), regenerates every measured
plan from its JSON at its point's sizes (as ``fusec.tune.plans.refeatured`` does) and, for each
band kernel (and each band part of a held fusion), records what the plan records cannot say
alone: threads per block, the blocks an SM holds (its registers' estimate) and the blocks it
runs at once (the fewer of those and grid / SMs), waves, loads ahead, the share of a block's
columns the matrix fills (``cols / BAND_COLS``), whether rows start on 16 bytes, row sums (a
barrier per instance), and the pieces of the database's price (``band_seconds``: streaming
over the copy bandwidth slowed by bytes in flight and by a partial wave, atomics, finish).

Then:

1. single-band-kernel plans: measured time over the database's price, grouped by property,
   with the price's partial-wave factor (``ceil(waves) / waves``, 1/waves under one wave) and
   without it;
2. the same ratio with each point's mean taken out (how the point's band plans compare with
   each other, which is what choosing needs): correlation with each property, and what a
   least-squares fit on a few of them leaves;
3. the shipped model's residuals, fitted in sample to every point: their spread per family
   (plans a kernel of the family carries > 60 % of the corrected price of) and, for band,
   by property;
4. twins: band plans alike but for ITERS (one or two blocks' worth of rows per SM) or loads
   ahead, measured against each other and priced against each other;
5. candidates: the correction with one more band feature each (FEATURES below), and the
   database with the partial-wave factor left out under one wave, scored as ``fusec perfdb
   fit`` scores (10 folds by point), in sample, and fitted to the points at ``--before`` and
   scored on those measured since (``experiments.prediction_holdout``).

Writes ``<out>/<gpu>-band-pricing.md``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARE = 0.6  # a plan is "dominated" by a kernel carrying more than this share of its corrected price

# candidate correction features, per band leaf (a kernel's value: the mean over its band leaves;
# 0 for a kernel without): name -> (what it is, function of the leaf's properties)
FEATURES = {
    "under_wave": ("log2(slots / grid) where the grid is under one wave (the price's partial-wave "
                   "factor; 0 in a held fusion)", lambda p: 0.0 if p.held else max(0.0, -math.log2(p.waves))),
    "single_block": ("1 where an SM runs one block of the kernel at once", lambda p: float(p.resident == 1)),
    "column_use": ("log2(cols / BAND_COLS): the share of the threads' pieces a row fills",
                   lambda p: math.log2(p.column_use)),
    "misaligned": ("1 where rows do not start on 16 bytes (one load per value)", lambda p: float(p.misaligned)),
    "row_sums": ("log2(1 + barriers per instance x BAND_ROWS x warps / 16-byte pieces a thread moves)",
                 lambda p: math.log2(1 + p.syncs * p.band_rows * p.block / 32 / max(p.loop_bytes / 16, 1))),
    "useful_in_flight": ("log2(the bytes of real columns in flight per SM / band_in_flight), at most 2",
                         lambda p: min(2.0, math.log2(p.resident * p.block * max(p.loop_bytes, 16) * p.column_use
                                                      * (2 if p.ahead else 1) / p.in_flight))),
}


@dataclasses.dataclass(frozen=True)
class Leaf:
    """A band kernel, or a band part of a held fusion, at its point."""

    block: int
    pieces: int
    band_rows: int
    iters: int
    per_sm: int  # blocks an SM may hold (a held fusion's own)
    resident: int  # blocks an SM runs at once: the fewer of per_sm and grid / SMs
    waves: float  # grid / (SMs x per_sm)
    ahead: bool
    column_use: float
    misaligned: bool
    fp64: bool
    syncs: int  # barriers in the loop: row sums meeting through scratch
    loop_bytes: int
    in_flight: int  # the analytic model's band_in_flight
    held: bool
    streaming: float = 0.0  # seconds of the price's streaming term, partial-wave factor included
    price: float = 0.0  # seconds, the database's price of the kernel (band kernels only)


def leaves_of(kernel, dag, sizes, base) -> list[Leaf]:
    from fusec.cost.model import natural_blocks
    from fusec.cost.registers import estimate
    from fusec.families.band import band_finish_seconds, band_seconds
    from fusec.ir import geometry as geo
    from fusec.ir.barriers import LOOP
    from fusec.library.model import Geometry
    target, analytic = base.target, base.analytic
    fixed = getattr(kernel.plan, "per_sm", None)
    out = []
    for leaf in kernel.leaves():
        if leaf.plan.geometry is not Geometry.BAND:
            continue
        m, itemsize = leaf.macros(), geo.DTYPES[leaf.dtype].itemsize
        per_sm = fixed or natural_blocks(estimate(leaf), leaf.shared_reals * itemsize, leaf.block, target)
        grid, cols = leaf.grid(sizes), sizes[leaf.dims[1]]
        streaming = 0.0
        if fixed is None:  # the price's streaming term: band_seconds without atomics, launch and finish
            streaming = (band_seconds(analytic, leaf, dag, sizes, 0.0, analytic.bandwidth, base.database.sms,
                                      atomics=False) - band_finish_seconds(analytic, leaf, sizes))
        out.append(Leaf(leaf.block, m["PIECES"], m["BAND_ROWS"], m["ITERS"], per_sm,
                        min(per_sm, math.ceil(grid / target.sms)), grid / (target.sms * per_sm), leaf.plan.ahead,
                        cols / m["BAND_COLS"], (cols * itemsize) % geo.VEC_BYTES != 0, itemsize == 8,
                        sum(1 for op in leaf.ops if op.section == LOOP and op.barrier), leaf.loop_bytes,
                        analytic.band_in_flight, fixed is not None, streaming))
    return out


def collect(gpu: str):
    """The GPU's samples (fit.Samples, features of this fusec) and, per kernel in their order,
    its class, its band leaves, its plan's summary and point."""
    from fusec import data as bundled
    from fusec.cost import fit as F
    from fusec.cost import training
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    from fusec.ir.plan import ProgramPlan
    from fusec.library.loader import load_library
    from fusec.tune.plans import generate_all, refeature_all, script_folders, script_path
    library = load_library(bundled.LIBRARY)
    base = predictor_for(library, gpu, corrected=False)
    data = refeature_all(training.read(training.path_for(gpu)), library, base.target, script_folders(ROOT / "scripts"))
    samples, notes = F.samples(data, base.database)
    if notes:
        raise SystemExit("points left out, which this study does not handle: " + "; ".join(notes))
    kernels, plans = [], []
    for point in data.points:
        dag = load_script(script_path(point.script, script_folders(ROOT / "scripts")), library)
        sizes = dict(point.sizes)
        for record in point.plans:
            if record.measured is None:
                continue
            program = generate_all(dag, library, point.dtype, [ProgramPlan.from_json(record.plan)], base.target)[0]
            plans.append((point.label, record.summary))
            for kernel, kept in zip(program.kernels, record.kernels):
                leaves = leaves_of(kernel, dag, sizes, base)
                if kept.kind == "band":
                    leaves = [dataclasses.replace(leaves[0], price=kept.predicted)]
                kernels.append((kept.kind, leaves))
    if len(kernels) != len(samples.log_price):
        raise SystemExit(f"{len(kernels)} kernels regenerated, {len(samples.log_price)} in the samples")
    return samples, kernels, plans


def gmean(values) -> float:
    return math.exp(float(np.mean(np.log(values)))) if len(values) else float("nan")


def without_wave_factor(leaf: Leaf) -> float:
    """The kernel's price with its streaming's partial-wave factor left out under one wave."""
    if leaf.waves >= 1:
        return leaf.price
    return leaf.price - leaf.streaming * (1 - leaf.waves)  # the factor is 1/waves there


def single_band(samples, kernels):
    """(plan index, leaf) of every plan whose one kernel is a band kernel."""
    count = np.bincount(samples.plan_of, minlength=samples.plans)
    out = []
    for k, (kind, leaves) in enumerate(kernels):
        plan = int(samples.plan_of[k])
        if kind == "band" and count[plan] == 1:
            out.append((plan, leaves[0]))
    return out


GROUPS = {
    "threads per block": lambda p: p.block,
    "threads, blocks an SM runs at once": lambda p: (p.block, p.resident),
    "under one wave": lambda p: p.waves < 1,
    "loads ahead": lambda p: p.ahead,
    "row sums (barrier per instance)": lambda p: p.syncs > 0,
    "column use (cols / BAND_COLS, tenths)": lambda p: math.floor(p.column_use * 10) / 10,
    "rows off 16 bytes": lambda p: p.misaligned,
    "fp64": lambda p: p.fp64,
}


def section_prices(samples, singles) -> list[str]:
    lines = ["## 1. Single-band-kernel plans: measured over the database's price", "",
             f"{len(singles)} plans whose one kernel is a band kernel. *price*: the database's; *no wave factor*: "
             "the same with the streaming's partial-wave factor (1/waves under one wave) left out.", ""]
    for title, key in GROUPS.items():
        groups = collections.defaultdict(list)
        for plan, leaf in singles:
            groups[key(leaf)].append((math.exp(samples.log_time[plan]), leaf))
        lines += [f"**{title}**", "", "| value | plans | measured / price | measured / no wave factor |",
                  "|---|---:|---:|---:|"]
        for value in sorted(groups):
            rows = groups[value]
            lines.append(f"| {value} | {len(rows)} | {gmean([t / p.price for t, p in rows]):.2f} | "
                         f"{gmean([t / without_wave_factor(p) for t, p in rows]):.2f} |")
        lines.append("")
    return lines


WITHIN = {  # properties correlated with the within-point ratio
    "log2 threads": lambda p: math.log2(p.block / 256), "1024 threads": lambda p: float(p.block == 1024),
    "512 threads": lambda p: float(p.block == 512), "one block at once": lambda p: float(p.resident == 1),
    "loads ahead": lambda p: float(p.ahead), "log2 ITERS": lambda p: math.log2(p.iters),
    "log2 column use": lambda p: math.log2(p.column_use), "rows off 16 bytes": lambda p: float(p.misaligned),
    "two waves or more": lambda p: float(p.waves > 1), "under one wave": FEATURES["under_wave"][1],
    "useful in flight": FEATURES["useful_in_flight"][1],
}
SUBSETS = (("1024 threads",), ("1024 threads", "512 threads"), ("1024 threads", "512 threads", "loads ahead"),
           ("1024 threads", "512 threads", "log2 column use"),
           ("1024 threads", "512 threads", "loads ahead", "one block at once", "log2 column use", "log2 ITERS",
            "rows off 16 bytes", "useful in flight"))


def section_within(samples, singles) -> list[str]:
    points = np.array([samples.point_of[plan] for plan, _ in singles])
    keep = np.array([np.sum(points == p) >= 2 for p in points])
    singles = [s for s, k in zip(singles, keep) if k]
    points = points[keep]

    def demeaned(values):
        values = np.asarray(values, float)
        means = {p: values[points == p].mean() for p in set(points.tolist())}
        return values - np.array([means[p] for p in points])

    y = {"price": demeaned([samples.log_time[plan] - math.log(leaf.price) for plan, leaf in singles]),
         "no wave factor": demeaned([samples.log_time[plan] - math.log(without_wave_factor(leaf))
                                     for plan, leaf in singles])}
    lines = ["## 2. Within a point: how its band plans compare", "",
             f"{len(singles)} single-band plans at {len(set(points.tolist()))} points with two or more; "
             "log(measured / price), each point's mean taken out. Positive: the property goes with running "
             "slower than priced.", "",
             "| property | corr. (price) | corr. (no wave factor) | slope (no wave factor) |", "|---|---:|---:|---:|"]
    columns = {}
    for name, f in WITHIN.items():
        x = demeaned([f(leaf) for _, leaf in singles])
        columns[name] = x
        if x.std() == 0:
            continue
        plain = y["no wave factor"]
        lines.append(f"| {name} | {np.corrcoef(x, y['price'])[0, 1]:+.2f} | "
                     f"{np.corrcoef(x, plain)[0, 1]:+.2f} | {np.polyfit(x, plain, 1)[0]:+.3f} |")
    target = y["no wave factor"]
    lines += ["", f"Least squares on the within-point log ratio without the wave factor (rms {target.std():.3f} "
              "before):", "", "| properties | coefficients | rms left |", "|---|---|---:|"]
    for subset in SUBSETS:
        a = np.column_stack([columns[n] for n in subset])
        coef, *_ = np.linalg.lstsq(a, target, rcond=None)
        lines.append(f"| {', '.join(subset)} | {', '.join(f'{c:+.3f}' for c in coef)} | "
                     f"{(target - a @ coef).std():.3f} |")
    return lines + [""]


def residuals(samples, fitted):
    """Per plan: the fitted model's log prediction plus its point's best offset, less the log
    of the measured time (positive: priced slower than it ran), and per kernel its share of its
    plan's corrected price."""
    from fusec.cost import fit as F
    predicted = F.log_predictions(samples, fitted)
    weights = F.plan_weights(samples)
    points = len(samples.labels)
    offset = np.zeros(points)
    for p in range(points):
        mine = samples.point_of == p
        offset[p] = np.sum(weights[mine] * (samples.log_time[mine] - predicted[mine])) / np.sum(weights[mine])
    residual = predicted + offset[samples.point_of] - samples.log_time
    cols = [F.FEATURES.index(f) for f in fitted.used]
    x = np.clip(samples.x[:, cols], fitted.low[samples.kind_of][:, cols], fitted.high[samples.kind_of][:, cols])
    u = np.exp(samples.log_price + np.einsum("kf,kf->k", x, fitted.weights[samples.kind_of][:, cols]))
    total = np.zeros(samples.plans)
    np.add.at(total, samples.plan_of, u)
    return residual, weights, u / total[samples.plan_of]


def section_residuals(samples, kernels, fitted) -> list[str]:
    residual, weights, share = residuals(samples, fitted)
    by_family = collections.defaultdict(list)
    band = []
    for k, (kind, leaves) in enumerate(kernels):
        if share[k] > SHARE:
            plan = int(samples.plan_of[k])
            by_family[kind].append(plan)
            if kind == "band":
                band.append((plan, leaves[0]))
    lines = ["## 3. The shipped model's residuals, fitted to every point", "",
             "log(prediction) + the point's best offset - log(measured), plans a kernel of the family carries "
             f"more than {SHARE:.0%} of; weighted as the fit weighs them. Positive: priced slower than it ran.", "",
             "| family | plans | weighted rms |", "|---|---:|---:|"]
    for kind, plans in sorted(by_family.items()):
        r, w = residual[plans], weights[plans]
        lines.append(f"| {kind} | {len(plans)} | {math.sqrt(np.sum(w * r * r) / np.sum(w)):.3f} |")
    lines += ["", "Band-dominated plans, weighted mean residual by property (the fit has these in its features, "
              "or near them, so the means are near 0):", ""]
    for title in ("threads, blocks an SM runs at once", "loads ahead", "column use (cols / BAND_COLS, tenths)",
                  "rows off 16 bytes", "row sums (barrier per instance)"):
        groups = collections.defaultdict(list)
        for plan, leaf in band:
            groups[GROUPS[title](leaf)].append(plan)
        cells = ", ".join(f"{value}: {np.sum(weights[p] * residual[p]) / np.sum(weights[p]):+.3f} ({len(p)})"
                          for value, p in sorted(groups.items()))
        lines.append(f"- {title}: {cells}")
    return lines + [""]


def section_twins(samples, singles, plans) -> list[str]:
    import re
    lines = ["## 4. Twins", ""]
    for title, strip in (("ITERS (one against two blocks' worth of rows per SM): the longer blocks over the "
                          "shorter", lambda s: re.sub(r",\d+it", "", s)),
                         ("loads ahead: ahead over not", lambda s: s.replace(",ahead", ""))):
        groups = collections.defaultdict(list)
        for plan, leaf in singles:
            groups[(int(samples.point_of[plan]), strip(plans[plan][1]))].append((plan, leaf))
        measured, priced = [], []
        for members in groups.values():
            if title.startswith("ITERS"):
                members = sorted(members, key=lambda m: -m[1].iters)
                longest, shortest = members[0], members[-1]
                pairs = [(longest, shortest)] if longest[1].iters != shortest[1].iters else []
            else:
                on = [m for m in members if m[1].ahead]
                off = [m for m in members if not m[1].ahead]
                pairs = [(on[0], off[0])] if on and off else []
            for (a, la), (b, lb) in pairs:
                measured.append(math.exp(samples.log_time[a] - samples.log_time[b]))
                priced.append(la.price / lb.price)
        measured, priced = np.array(measured), np.array(priced)
        agree = np.mean(np.sign(np.log(measured)) == np.sign(np.log(priced))) if len(measured) else float("nan")
        alike = int(np.sum(priced == 1.0))
        lines += [f"**{title}**: {len(measured)} pairs; measured ratio gmean {gmean(measured):.3f}, "
                  f"quartiles {np.percentile(measured, 25):.2f} / {np.median(measured):.2f} / "
                  f"{np.percentile(measured, 75):.2f}, range {measured.min():.2f}-{measured.max():.2f}; "
                  f"priced ratio gmean {gmean(priced):.3f}, {alike} pairs priced alike; the price orders the "
                  f"pair as measured in {agree:.0%}.", ""]
    return lines


def extended(samples, kernels, names):
    extra = np.array([[float(np.mean([FEATURES[n][1](leaf) for leaf in leaves])) if leaves else 0.0
                       for n in names] for _, leaves in kernels]).reshape(len(kernels), len(names))
    return dataclasses.replace(samples, x=np.hstack([samples.x, extra]))


def section_candidates(samples, kernels, before_keys) -> list[str]:
    from experiments.prediction_holdout import subset
    from experiments.prediction_models import feature_names
    from fusec.cost import fit as F
    from fusec.cost.features import FEATURES as OURS
    old = np.array([label in before_keys for label in samples.labels]) if before_keys else None

    def score(s, used=None, names=()):
        with feature_names(OURS + tuple(names)):
            used = tuple(used or OURS) + tuple(names)
            cv = F.scores(s, F.cross_validated(s, used=used)).summary()
            inside = F.scores(s, F.log_predictions(s, F.fit(s, used=used))).summary()
            held = None
            if old is not None:
                train, test = subset(s, old), subset(s, ~old)
                held = F.scores(test, F.log_predictions(test, F.fit(train, used=used))).summary()
        return cv, inside, held

    def cells(r):
        return (f"{r['first_gmean']:.3f} | {r['first_worst']:.3f} | {100 * r['within']:.0f} % | {r['rho_mean']:.2f}"
                if r else "- | - | - | -")

    lines = ["## 5. Candidates", "",
             "Each candidate feature added to the thirteen of features version 3, for the band and held classes "
             "(a kernel's value: the mean over its band leaves; 0 for others):", ""]
    lines += [f"- `{name}`: {text}" for name, (text, _) in FEATURES.items()]
    lines += ["", "First choice among each point's measured plans: geometric mean | worst | within 1.05x | mean ρ. "
              "*10 folds*: cross-validated by point as `fusec perfdb fit` scores; *hold-out*: fitted to the points "
              "of the training file at the revision given, scored on those measured since.", "",
              "| model | 10 folds: gmean | worst | ≤ 1.05x | ρ | in sample: gmean | worst | ≤ 1.05x | ρ | "
              "hold-out: gmean | worst | ≤ 1.05x | ρ |", "|---|" + "---:|" * 12]
    database = F.scores(samples, F.log_predictions(samples, None)).summary()
    held_db = None
    if old is not None:
        test = subset(samples, ~old)
        held_db = F.scores(test, F.log_predictions(test, None)).summary()
    lines.append(f"| database alone | {cells(database)} | {cells(database)} | {cells(held_db)} |")
    rows = [("shipped form (13 features)", samples, OURS, ()), ("11 features (no block-size indicators)",
                                                                 samples, F.FEATURE_SETS[0], ())]
    rows += [(f"+ {name}", extended(samples, kernels, [name]), OURS, (name,)) for name in FEATURES]
    rows.append(("+ all six", extended(samples, kernels, list(FEATURES)), OURS, tuple(FEATURES)))
    for title, s, used, names in rows:
        lines.append(f"| {title} | " + " | ".join(cells(r) for r in score(s, used, names)) + " |")
        print(lines[-1], flush=True)
    # the database's band price without the partial-wave factor under one wave
    prices = np.array([math.log(without_wave_factor(leaves[0])) if kind == "band" else math.nan
                       for kind, leaves in kernels])
    s = dataclasses.replace(samples, log_price=np.where(np.isnan(prices), samples.log_price, prices))
    database = F.scores(s, F.log_predictions(s, None)).summary()
    if old is not None:
        test = subset(s, ~old)
        held_db = F.scores(test, F.log_predictions(test, None)).summary()
    lines.append(f"| band price without the wave factor: database alone | {cells(database)} | {cells(database)} | "
                 f"{cells(held_db)} |")
    lines.append("| band price without the wave factor: shipped form | "
                 + " | ".join(cells(r) for r in score(s, OURS)) + " |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", default="h200", help="the GPU's slug (default: h200)")
    parser.add_argument("--before", default="90a419f", metavar="REV",
                        help="revision whose training points the hold-out fits to ('' for none)")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    args = parser.parse_args(argv)
    from experiments.prediction_holdout import earlier_keys
    from fusec.cost import fit as F

    samples, kernels, plans = collect(args.gpu)
    singles = single_band(samples, kernels)
    command = "python -m experiments.band_pricing" + ("" if args.gpu == "h200" else f" --gpu {args.gpu}") \
        + ("" if args.before == "90a419f" else f" --before '{args.before}'")
    lines = [f"# The band family's prices ({args.gpu}, CPU)", "", f"`{command}`: "
             f"{len(samples.labels)} points, {samples.plans} measured plans, "
             f"{sum(1 for kind, _ in kernels if kind == 'band')} band kernels "
             f"({sum(1 for kind, _ in kernels if kind == 'held')} held fusions).", ""]
    lines += section_prices(samples, singles)
    lines += section_within(samples, singles)
    lines += section_residuals(samples, kernels, F.fit(samples))
    lines += section_twins(samples, singles, plans)
    lines += section_candidates(samples, kernels, earlier_keys(args.gpu, args.before) if args.before else None)
    path = Path(args.out) / f"{args.gpu}-band-pricing.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
