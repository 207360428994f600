"""Measuring plans at sizes drawn at random: the data a correction is fitted to
(``fusec perfdb measure-plans``) and the draws ``bench.prediction --draw`` scores.

A *point* is a script, a precision and sizes drawn at random (:func:`draw_sizes`:
seeded; sides log-uniform in 500..20000, a third of them square; the sequences
without a matrix get vectors of as many elements as the drawn matrix). Its
candidates (:func:`wide_candidates`) are the top K of the ranking with their twins
(as ``fusec tune`` takes them), the best-predicted combinations of the L best
layouts, and the best-predicted combination of every *layout class* the space
offers: each cover's heaviest kernel's class (vector, tile, band, horizontal,
striped, held), threads per block and serial axis. The classes are where the
database's errors lie (issue 49: few-iteration tiles priced slow, 1024-thread bands
fast), and there are 4 to 60 of them per script where there are up to 2000 layouts.

Each candidate is generated, compiled (nvcc in parallel), checked against the
float64 oracle and timed by the tuner's measurer (:mod:`fusec.tune.search`: from an
empty L2, median of ``repeat``, the GPU's time). Before measuring, each kernel's
class, features and database price are recorded: that is what the fit reads.

The collection runs point after point, draw after draw (every script and precision
at draw 0, then draw 1, ...), writing the training file after each point; a point
already in the file is skipped, so a run cut short resumes with the same seed. It
stops starting points once ``budget`` seconds have gone (a point not expected to
fit is not started), and a point still running ``GRACE`` seconds past the budget
keeps what it measured, marked incomplete.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
import zlib
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..cost import training
from ..cost.features import FEATURES_VERSION, features, plan_class
from ..data import SOLVERS
from ..emit.program import generate
from ..errors import FusecError
from ..ir.plan import ProgramPlan
from ..progress import Progress
from ..runtime.program import Program
from ..space.combinations import ALL_LAYOUTS, Combination, Space
from .search import NOT_GENERATED, Measurement, headline
from .store import UNREADABLE

SIZE_RANGE = (500, 20000)  # the sides drawn
SQUARE = 1 / 3  # the share of square draws
TOP = 4  # the top K measured (with twins)
LAYOUTS = 8  # the best L layouts measured
DRAWS = 100  # draws a collection goes through at most (the budget ends it first)
GRACE = 60.0  # seconds past the budget a point may run before it stops measuring
NOT_MEASURED = "not measured (the budget ran out)"


def draw_sizes(dag, seed: int, draw: int, dtype: str) -> dict[str, int]:
    """The sizes of draw ``draw`` of ``seed`` for ``dag`` in ``dtype``: the same on every
    machine and run (the script's name and the precision seed the generator, not
    Python's hash). Matrices get sides log-uniform in SIZE_RANGE, a third of them
    square; a script whose matrices have one size is square; a script without
    matrices gets vectors of rows x columns elements."""
    rng = np.random.default_rng([int(seed), int(draw), zlib.crc32(dag.name.encode()), zlib.crc32(dtype.encode())])
    low, high = (math.log(v) for v in SIZE_RANGE)

    def side() -> int:
        return int(round(math.exp(rng.uniform(low, high))))

    rows = side()
    cols = rows if rng.random() < SQUARE else side()
    if not any(len(v.dims) == 2 for v in dag.values):
        return {s: rows * cols for s in dag.sizes}
    if len(dag.sizes) == 1:
        return {dag.sizes[0]: rows}
    return {s: (rows if i == 0 else cols) for i, s in enumerate(dag.sizes)}


@dataclasses.dataclass(frozen=True)
class Candidate:
    plan: ProgramPlan
    groups: tuple[str, ...]  # why it is measured: "top", "layout", "class", and callers' own


def layout_class(combination: Combination) -> tuple:
    """The cover (calls of each kernel) and its heaviest kernel's class, threads per block
    and serial axis: what the best of each is measured for."""
    kernels = combination.plan.kernels
    heaviest = kernels[max(range(len(kernels)), key=lambda i: (combination.kernel_times[i], -i))]
    return (tuple(k.calls for k in kernels), plan_class(heaviest), heaviest.block, heaviest.serial)


def wide_candidates(space: Space, top: int = TOP, layouts: int = LAYOUTS) -> list[Candidate]:
    """The top ``top`` (with twins, as ``fusec tune``), the best of the ``layouts`` best
    layouts, and the best of every layout class, each once, in that order."""
    found: dict[ProgramPlan, list[str]] = {}

    def add(combinations: Iterable[Combination], group: str) -> None:
        for c in combinations:
            found.setdefault(c.plan, [])
            if group not in found[c.plan]:
                found[c.plan].append(group)

    add(space.top(top, twins=True), "top")
    add(space.layouts(layouts, twins=True), "layout")
    best: dict[tuple, Combination] = {}
    for combination in space.layouts(ALL_LAYOUTS):  # best first
        best.setdefault(layout_class(combination), combination)
    add(best.values(), "class")
    return [Candidate(plan, tuple(groups)) for plan, groups in found.items()]


def merge(*lists: Sequence[Candidate]) -> list[Candidate]:
    """The candidates of every list, each plan once, its groups joined, in first-seen order."""
    found: dict[ProgramPlan, list[str]] = {}
    for candidates in lists:
        for c in candidates:
            groups = found.setdefault(c.plan, [])
            groups += [g for g in c.groups if g not in groups]
    return [Candidate(plan, tuple(groups)) for plan, groups in found.items()]


def generate_all(dag, library, dtype: str, plans: Sequence[ProgramPlan], target) -> list:
    """Each plan's generated program for ``target``, or why it could not be generated (a str)."""
    out = []
    for plan in plans:
        try:
            out.append(generate(dag, library, plan, dtype, target))
        except FusecError as exc:  # a point the space should not have offered
            out.append(str(exc).strip() or type(exc).__name__)
    return out


def kernel_records(predictor, dag, sizes: Mapping[str, int], generated) -> tuple[training.KernelRecord, ...]:
    """Each kernel's class, features and price by ``predictor`` (the database's, uncorrected);
    none for a plan not generated."""
    if isinstance(generated, str):
        return ()
    out = []
    for kernel in generated.kernels:
        f = features(kernel, dag, sizes, predictor.target)
        out.append(training.KernelRecord(f.kind, predictor.kernel_seconds(kernel, dag, sizes), f.values))
    return tuple(out)


def plan_seconds(predictor, dag, sizes: Mapping[str, int], generated) -> float | None:
    """A generated plan's predicted time by ``predictor``: its kernels' summed (as the space
    sums them); None for a plan not generated."""
    if isinstance(generated, str):
        return None
    return sum(predictor.kernel_seconds(k, dag, sizes) for k in generated.kernels)


def measure(measurer, generated: Sequence, *, deadline: float | None = None,
            clock: Callable[[], float] = time.monotonic, progress: bool = False) -> list[Measurement]:
    """Each generated program (:func:`generate_all`) compiled together, then checked and timed
    by ``measurer`` (entered); a plan not generated is NOT_GENERATED, one not reached by
    ``deadline`` (of ``clock``) NOT_MEASURED."""
    programs = [None if isinstance(g, str) else Program(g) for g in generated]
    out: list[Measurement | None] = [Measurement(NOT_GENERATED, reason=g) if isinstance(g, str) else None
                                     for g in generated]
    built = [i for i, p in enumerate(programs) if p is not None]
    with Progress(len(built), "compiling", enabled=progress) as bar:
        errors = measurer.compile([programs[i] for i in built], lambda _: bar.advance())
    for i, error in zip(built, errors):
        if error:
            out[i] = Measurement("compile failed", reason=error)
    measurer.expected  # the oracle's reference, once for every plan
    with Progress(len(programs), "measuring", enabled=progress) as bar:
        for i, program in enumerate(programs):
            if out[i] is None:
                if deadline is not None and clock() > deadline:
                    out[i] = Measurement(NOT_MEASURED)
                else:
                    out[i] = measurer.measure(program)
            bar.advance()
    return out


def plan_record(candidate: Candidate, kernels, measurement: Measurement, dag) -> training.PlanRecord:
    passed = measurement.passed
    return training.PlanRecord(
        candidate.plan.to_json(), candidate.plan.summary(dag), candidate.groups, kernels,
        measurement.verdict if passed or not measurement.reason else
        f"{measurement.verdict}: {headline(measurement.reason)}"[:300],
        measurement.seconds if passed else None, measurement.fastest if passed else None,
        measurement.slowest if passed else None)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@dataclasses.dataclass
class Budget:
    """Seconds a run may start points for; a point expected to run past them waits for
    the next run (the first point of a run always starts)."""

    seconds: float | None
    clock: Callable[[], float] = time.monotonic
    start: float = dataclasses.field(default=0.0)
    took: dict = dataclasses.field(default_factory=dict)  # (script, dtype) -> seconds of its last point

    def __post_init__(self):
        self.start = self.clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.start

    def allows(self, kind: tuple) -> bool:
        if self.seconds is None or not self.took:
            return True
        expected = self.took.get(kind, sum(self.took.values()) / len(self.took))
        return self.elapsed + expected <= self.seconds

    @property
    def deadline(self) -> float | None:
        return None if self.seconds is None else self.start + self.seconds + GRACE

    def record(self, kind: tuple, seconds: float) -> None:
        self.took[kind] = seconds


@dataclasses.dataclass(frozen=True)
class Collected:
    data: training.TrainingData
    path: Path
    measured: tuple[str, ...]  # labels of the points measured in this run
    left: tuple[str, ...]  # labels of the points of the last draw the budget left for the next run


def collect(scripts: Sequence[Path], library, *, out: Path, gpu_name: str, base, others: Sequence = (),
            seed: int = 0, draws: int = DRAWS, budget: float | None = None,
            dtypes: Sequence[str] = ("float32", "float64"), top: int = TOP, layouts: int = LAYOUTS,
            measurer_for: Callable, clock: Callable[[], float] = time.monotonic,
            log: Callable[[str], None] = lambda text: None, progress: bool = False) -> Collected:
    """Measure the wide candidates of draw after draw of every script in every precision
    (see the module's docstring) and write them to the training file ``out`` after each
    point. ``base`` is the database's predictor (its prices are recorded); the
    candidates are those of ``base`` and of each of ``others`` (say, a corrected one).
    ``measurer_for(dag, library, dtype, sizes)`` makes the measurer of a point."""
    from ..frontend import load_script
    from ..target import slug
    if draws < 1 or top < 1 or layouts < 0 or (budget is not None and budget < 0):
        raise FusecError(f"--draws and --top must be at least 1, --layouts and --budget at least 0"
                         f" (got {draws}, {top}, {layouts}, {budget})")
    out = Path(out)
    data = (training.read(out) if out.is_file()
            else training.TrainingData({"name": gpu_name, "slug": slug(gpu_name)}, (), str(out)))
    if data.gpu.get("slug") != slug(gpu_name):
        raise FusecError(f"training data {out} holds plan times of {data.gpu.get('slug')}, not {slug(gpu_name)}:"
                         " name another file (-o)")
    dags = [load_script(path, library) for path in scripts]
    done = {p.key for p in data.points if p.complete}  # an incomplete point is measured again
    database = base.database
    plan = Budget(budget, clock)
    measured, left = [], []
    for draw in range(draws):
        for dag in dags:
            for dtype in dtypes:
                sizes = draw_sizes(dag, seed, draw, dtype)
                key = (dag.name, dtype, tuple(sorted(sizes.items())))
                label = f"{dag.name} {dtype} " + ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
                if key in done:
                    continue
                if left or not plan.allows((dag.name, dtype)):
                    left.append(label)
                    continue
                start = clock()
                point = measure_point(dag, library, dtype, sizes, base, others, seed=seed, draw=draw, top=top,
                                      layouts=layouts, measurer=measurer_for(dag, library, dtype, sizes),
                                      deadline=plan.deadline, clock=clock, progress=progress)
                point = dataclasses.replace(point, seconds=clock() - start)
                plan.record((dag.name, dtype), point.seconds)
                data = training.add_point(out, point, data.gpu)  # with what another run wrote meanwhile
                measured.append(label)
                log(point_line(point, database))
        if left:
            break
    return Collected(data, out, tuple(measured), tuple(left))


def measure_point(dag, library, dtype: str, sizes: Mapping[str, int], base, others: Sequence = (), *,
                  seed: int, draw: int, top: int, layouts: int, measurer, deadline: float | None = None,
                  clock: Callable[[], float] = time.monotonic, progress: bool = False) -> training.PointRecord:
    """One point of the training data (its ``seconds`` left 0 for the caller to set)."""
    from ..space.combinations import build_space
    candidates = merge(*(wide_candidates(build_space(dag, library, dtype, sizes, p), top, layouts)
                         for p in (base, *others)))
    generated = generate_all(dag, library, dtype, [c.plan for c in candidates], base.target)
    kernels = [kernel_records(base, dag, sizes, g) for g in generated]
    with measurer:
        measurements = measure(measurer, generated, deadline=deadline, clock=clock, progress=progress)
    plans = tuple(plan_record(c, k, m, dag) for c, k, m in zip(candidates, kernels, measurements))
    database = base.database
    return training.PointRecord(
        dag.name, dtype, tuple(sorted(sizes.items())), str(database.library.get("hash")), database.built,
        FEATURES_VERSION, seed, draw, now(), 0.0, all(m.verdict != NOT_MEASURED for m in measurements), plans)


# ------------------------------------------------------------- measured again


def stale_plans(point: training.PointRecord, dag, library, base) -> dict[int, tuple]:
    """The plans of ``point`` that the database's predictor ``base`` no longer prices as
    recorded (beyond PRICE_TOLERANCE): a change of the cost model or of the code generated
    since they were measured. By index: (the program generated now, its kernels' records
    now). A plan that no longer generates, or was not generated when measured, is left."""
    sizes = dict(point.sizes)
    out = {}
    for index, record in enumerate(point.plans):
        if not record.kernels:
            continue
        try:
            plan = ProgramPlan.from_json(record.plan)
        except UNREADABLE:
            continue
        program = generate_all(dag, library, point.dtype, [plan], base.target)[0]
        if isinstance(program, str):
            continue
        kernels = kernel_records(base, dag, sizes, program)
        price = math.fsum(k.predicted for k in kernels)
        if len(kernels) != len(record.kernels) or abs(price - record.predicted) > PRICE_TOLERANCE * record.predicted:
            out[index] = (program, kernels)
    return out


@dataclasses.dataclass(frozen=True)
class Remeasured:
    data: training.TrainingData
    path: Path
    measured: tuple[str, ...]  # a line per point measured again: its label and how many plans
    left: tuple[str, ...]  # labels of the points with stale plans the budget left for the next run


def remeasure(scripts: Sequence[Path], library, *, out: Path, base, measurer_for: Callable,
              budget: float | None = None, clock: Callable[[], float] = time.monotonic,
              log: Callable[[str], None] = lambda text: None, progress: bool = False) -> Remeasured:
    """Measure again, at every point of the training file ``out`` of the scripts ``scripts``
    priced by ``base``'s database (its library hash and ``built`` stamp), the plans the
    database no longer prices as recorded (:func:`stale_plans`), and record their times, prices
    and features anew; a point's other plans, sizes and draw are kept. The file is written after
    each point, so a run cut short by ``budget`` goes on where it stopped."""
    from ..frontend import load_script
    out = Path(out)
    data = training.read(out)
    database = base.database
    dags = {}
    for path in scripts:
        dag = load_script(path, library)
        dags[dag.name] = dag
    plan = Budget(budget, clock)
    measured, left = [], []
    for point in data.points:
        dag = dags.get(point.script)
        if dag is None or (point.library, point.perfdb_built) != (str(database.library.get("hash")), database.built):
            continue
        if point.features_version != FEATURES_VERSION:  # its kept plans' features, as the new ones'
            try:
                point = refeatured(point, dag, library, base.target)
            except FusecError as exc:
                log(f"{point.label}: left as it is ({exc})")
                continue
        stale = stale_plans(point, dag, library, base)
        if not stale:
            continue
        if left or not plan.allows((point.script, point.dtype)):
            left.append(point.label)
            continue
        start = clock()
        indices = sorted(stale)
        with measurer_for(dag, library, point.dtype, dict(point.sizes)) as measurer:
            found = measure(measurer, [stale[i][0] for i in indices], deadline=plan.deadline, clock=clock,
                            progress=progress)
        plans = list(point.plans)
        for i, measurement in zip(indices, found):
            if measurement.verdict == NOT_MEASURED:
                continue
            program, kernels = stale[i]
            old = point.plans[i]
            plans[i] = dataclasses.replace(plan_record(Candidate(program.plan, old.groups), kernels, measurement, dag),
                                           summary=old.summary)
        took = clock() - start
        plan.record((point.script, point.dtype), took)
        again = dataclasses.replace(point, when=f"{point.when}; again {now()}", plans=tuple(plans))
        data = training.add_point(out, again, data.gpu)
        done = sum(1 for m in found if m.verdict != NOT_MEASURED)
        measured.append(f"{point.label}: {done} of {len(point.plans)} plans measured again ({took:.0f} s)")
        log(measured[-1])
    return Remeasured(data, out, tuple(measured), tuple(left))


def point_line(point: training.PointRecord, database=None) -> str:
    """A line saying what a point measured: its plans, the fastest, where the database's
    first choice among them stood."""
    ok = [p for p in point.plans if p.measured is not None]
    if not ok:
        return f"{point.label}: {len(point.plans)} plans, none passed ({point.seconds:.0f} s)"
    best = min(p.measured for p in ok)
    first = min(ok, key=lambda p: p.predicted)
    partial = "" if point.complete else ", cut short by the budget"
    return (f"{point.label}: {len(ok)}/{len(point.plans)} plans measured, best {best * 1e6:.1f} us, the"
            f" database's first of them {first.measured / best:.2f}x ({point.seconds:.0f} s{partial})")


# ------------------------------------------------------------- measured elsewhere


@dataclasses.dataclass(frozen=True)
class Matched:
    """A point of the training data rebuilt from rows measured elsewhere (a draw of
    ``bench.prediction --draw``), and the rows that could not be given their kernels:
    ``unmatched`` (no candidate of the rebuilt space has the row's summary),
    ``ambiguous`` (several, priced differently) and ``mispriced`` (the one found is not
    priced as the row says: another database, or another plan)."""

    point: training.PointRecord
    unmatched: tuple[str, ...]
    ambiguous: tuple[str, ...]
    mispriced: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not (self.unmatched or self.ambiguous or self.mispriced)


PRICE_TOLERANCE = 1e-6  # relative: the rows' prices are the same database's sums, printed to 1e-16


def point_from_rows(dag, library, dtype: str, sizes: Mapping[str, int], base, rows: Sequence[Mapping], *,
                    extra: Sequence[ProgramPlan] = (), seed: int, draw: int, when: str, seconds: float,
                    complete: bool, top: int = TOP, layouts: int = LAYOUTS) -> Matched:
    """The training point of rows measured by ``bench.prediction --draw`` (each a summary,
    groups, the database's ``predicted_us``, ``measured_us`` and verdict), which record
    no plan: the space of ``base`` (the database's predictor, uncorrected) is rebuilt
    at ``sizes``, its wide candidates (and ``extra``: the plans borrowed from nearby
    tunings) generated, and each row given the candidate of the same
    ``ProgramPlan.summary``, its kernels' classes, features and prices. A row is
    matched only when that candidate is the only one of its summary (or all of them
    are priced alike) and its price is the row's: nothing is guessed, and the rows
    left out are named."""
    from ..space.combinations import build_space
    candidates = merge(wide_candidates(build_space(dag, library, dtype, sizes, base), top, layouts),
                       [Candidate(p, ("nearby",)) for p in extra])
    generated = generate_all(dag, library, dtype, [c.plan for c in candidates], base.target)
    by_summary: dict[str, list[tuple[ProgramPlan, tuple]]] = {}
    for candidate, program in zip(candidates, generated):
        if not isinstance(program, str):
            by_summary.setdefault(candidate.plan.summary(dag), []).append(
                (candidate.plan, kernel_records(base, dag, sizes, program)))
    plans, unmatched, ambiguous, mispriced = [], [], [], []
    for row in rows:
        found = by_summary.get(row["summary"], [])
        if not found:
            unmatched.append(row["summary"])
            continue
        if len({tuple(k.predicted for k in kernels) for _, kernels in found}) > 1:
            ambiguous.append(row["summary"])
            continue
        plan, kernels = found[0]
        price = math.fsum(k.predicted for k in kernels) * 1e6
        wanted = row["predicted_us"]["database"] if isinstance(row["predicted_us"], Mapping) else row["predicted_us"]
        if wanted is None or abs(price - wanted) > PRICE_TOLERANCE * wanted:
            mispriced.append(f"{row['summary']} (priced {price:.4f} us here, {wanted} us in the rows)")
            continue
        measured = row.get("measured_us")
        plans.append(training.PlanRecord(plan.to_json(), row["summary"], tuple(row.get("groups", ())), kernels,
                                         row.get("verdict", "ok"), None if measured is None else measured * 1e-6))
    database = base.database
    point = training.PointRecord(
        dag.name, dtype, tuple(sorted(sizes.items())), str(database.library.get("hash")), database.built,
        FEATURES_VERSION, seed, draw, when, seconds, complete, tuple(plans))
    return Matched(point, tuple(unmatched), tuple(ambiguous), tuple(mispriced))


def refeatured(point: training.PointRecord, dag, library, target) -> training.PointRecord:
    """``point`` with its kernels' features computed by this fusec (FEATURES_VERSION) from
    each plan's JSON, regenerated at the point's sizes on ``target`` (rounded as a training
    file keeps them, so a fit of a point recomputed is the fit of it written and read); the database's
    prices and the measured times are kept (they do not depend on the features). A
    FusecError naming the point and plan when a plan no longer generates or has
    another number of kernels: its features cannot be told."""
    sizes = dict(point.sizes)
    plans = []
    for number, record in enumerate(point.plans, 1):
        if not record.kernels:  # not generated when measured: nothing to recompute
            plans.append(record)
            continue
        where = f"{point.label} plan {number} ({record.summary})"
        try:
            plan = ProgramPlan.from_json(record.plan)
        except UNREADABLE as exc:
            raise FusecError(f"{where}: its plan does not parse ({type(exc).__name__}: {str(exc)[:200]}):"
                             " measure the point again") from None
        generated = generate_all(dag, library, point.dtype, [plan], target)[0]
        if isinstance(generated, str):
            raise FusecError(f"{where} does not generate any more ({generated}): its features cannot be"
                             " recomputed; measure the point again")
        if len(generated.kernels) != len(record.kernels):
            raise FusecError(f"{where} generates {len(generated.kernels)} kernels, not the"
                             f" {len(record.kernels)} measured: measure the point again")
        kernels = tuple(dataclasses.replace(k, kind=f.kind, values=training.stored(f.values)) for k, f in
                        zip(record.kernels, (features(kernel, dag, sizes, target) for kernel in generated.kernels)))
        plans.append(dataclasses.replace(record, kernels=kernels))
    return dataclasses.replace(point, features_version=FEATURES_VERSION, plans=tuple(plans))


def script_folders(scripts: Path) -> tuple[Path, ...]:
    """Where a training point's script is looked for: the folder ``scripts`` (the sequences,
    a user's own), then the solvers' bundled iterations."""
    return (Path(scripts), SOLVERS)


def script_path(name: str, folders: Sequence[Path]) -> Path | None:
    """``<folder>/<name>.script`` in the first of ``folders`` that holds it; None when none does.
    A training point keeps its script's name only, so the folders say where to look."""
    for folder in folders:
        path = Path(folder) / f"{name}.script"
        if path.is_file():
            return path
    return None


def refeature_all(data: training.TrainingData, library, target, folders: Sequence[Path],
                  log: Callable[[str], None] = lambda text: None) -> training.TrainingData:
    """``data`` with the points of other features' versions recomputed (:func:`refeatured`),
    each script read from ``<folder>/<name>.script`` in the first of ``folders`` that holds it
    (:func:`script_path`); a point whose script is in none or whose plans do not regenerate
    is kept as it was (a fit leaves it out) and logged."""
    from ..frontend import load_script
    out = []
    for point in data.points:
        if point.features_version == FEATURES_VERSION:
            out.append(point)
            continue
        path = script_path(point.script, folders)
        try:
            if path is None:
                raise FusecError(f"no script {point.script}.script in {', '.join(str(f) for f in folders)}")
            out.append(refeatured(point, load_script(path, library), library, target))
        except FusecError as exc:
            log(f"{point.label}: its features of version {point.features_version} not recomputed ({exc})")
            out.append(point)
    return dataclasses.replace(data, points=tuple(out))
