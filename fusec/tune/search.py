"""``fusec tune``: measure the K best-predicted combinations, remember the fastest.

Predict, then measure a few (Triton's autotuner): the K combinations the
predictor ranks first are generated and compiled together (nvcc in parallel);
each is run once on random inputs with its outputs poisoned and judged by the
float64 oracle *before* it is timed, so a wrong candidate is reported and
never chosen; then it is timed with CUDA events (warm-up, median), starting
from an empty L2, so that no candidate inherits what the one before left
there (:meth:`fusec.runtime.cuda.GpuClock.empty_l2`). A candidate
that fails to compile, to launch or to check scores infinitely slow, with the
reason kept; it never stops the tune. The plan the tuning cache already holds
for the same key is measured again beside them (the incumbent), so tuning anew
never replaces a plan with a slower one. The fastest correct one goes into the
tuning cache (:mod:`fusec.tune.store`), where :func:`fusec.compile` finds it.

The GPU work is behind :class:`Measurer`; ranking, choosing, the table and the
cache write do not touch the GPU, so tests drive them with a fake measurer.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
import warnings
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .. import oracle
from ..cache import cache_dir
from ..errors import CompileError, FusecError, FusecWarning
from ..ir import geometry as geo
from ..ir.plan import ProgramPlan
from ..progress import Progress
from ..runtime.program import Program
from ..space.combinations import LAYOUTS, Combination, build_space
from ..target import slug
from ..validate import default_sizes
from . import quick as quick_rounds
from . import store as tuning
from . import untuned

OK = "ok"
WRONG = "wrong"
COMPILE_FAILED = "compile failed"
LAUNCH_FAILED = "launch failed"
NOT_GENERATED = "not generated"


@dataclasses.dataclass(frozen=True)
class Measurement:
    verdict: str
    seconds: float = math.inf  # median; inf unless the candidate ran and passed
    reason: str = ""  # why it failed
    fastest: float = math.inf  # seconds, of the timed runs
    slowest: float = math.inf
    late: int = 0  # timed runs the host queued after the timing spin, even when taken again

    @property
    def passed(self) -> bool:
        return self.verdict == OK and math.isfinite(self.seconds)


@dataclasses.dataclass(frozen=True)
class Row:
    """One candidate: where the predictor put it and what it measured."""

    rank: int  # the candidate's place: predicted order within the top K, then within the layouts
    plan: ProgramPlan
    predicted: float  # seconds
    measurement: Measurement
    nbytes: int  # minimum bytes the program must move

    @property
    def passed(self) -> bool:
        return self.measurement.passed

    @property
    def measured(self) -> float:
        return self.measurement.seconds

    @property
    def gbps(self) -> float:
        return self.nbytes / self.measured / 1e9 if self.passed and self.measured > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class TuneResult:
    dag: object = dataclasses.field(repr=False)
    dtype: str
    sizes: dict[str, int]
    gpu_name: str
    predictor: str
    rows: tuple[Row, ...]
    winner: Row | None
    entry: tuning.TuningEntry | None  # what went into the cache
    cache_path: Path | None  # where, or None when it was not written
    cache_error: str  # why it was not written ("" when it was, or when there was no winner)
    seconds: float  # the whole tune
    ranked: int = 0  # rows 1..ranked: the top K (and twins); then the best of each further layout
    by_layout: int = 0  # how many rows those are (the cached plan, if measured again, comes last)
    # the winner measured again with its kernels alone alternating their direction
    # and always forwards (Program.turning): {True: ..., False: ...}; empty when none turns
    directions: dict = dataclasses.field(default_factory=dict)
    # the row of the plan fusec.compile takes untuned: the best-predicted whose kernels
    # do not spill (fusec.api), rank 1 unless a better-ranked one spills; None if unmeasured
    first: Row | None = None
    quick: bool = False  # the two rounds of fusec.tune.quick: ranked = the first round, by_layout = the second


def untuned_choice(dag, library, dtype: str, sizes: Mapping[str, int], predictor, rows, space=None) -> Row | None:
    """The row of the plan :func:`fusec.compile` takes without a tuned plan (the best-predicted
    whose kernels do not spill: :func:`fusec.tune.untuned.without_spills`), if measured.
    ``space``: the space of these arguments where the caller built it already."""
    from ..nvcc import DEFAULT_ARCH
    try:
        space = space or build_space(dag, library, dtype, sizes, predictor)
        generated, _ = untuned.without_spills(dag, library, dtype, space.ranked(), lambda p: True,
                                              space.best_where(lambda p: True), DEFAULT_ARCH, predictor.target)
    except FusecError:
        return None
    return next((r for r in rows if r.plan == generated.plan), None)


# ---------------------------------------------------------------------------- GPU-free parts


def candidates(dag, library, dtype: str, sizes: Mapping[str, int], top: int, predictor,
               layouts: int = LAYOUTS) -> list[Combination]:
    """The candidates of a tune, in the order they are measured: see :func:`candidate_groups`."""
    ranked, by_layout = candidate_groups(dag, library, dtype, sizes, top, predictor, layouts)
    return ranked + by_layout


def candidate_groups(dag, library, dtype: str, sizes: Mapping[str, int], top: int, predictor,
                     layouts: int = LAYOUTS) -> tuple[list[Combination], list[Combination]]:
    """The ``top`` best-predicted combinations, best first; each one with a
    horizontal fusion followed by its twin (the same kernels launched one
    after another), so a horizontal fusion wins only where it measured faster
    than its parts apart. Then, not among those, the best-predicted
    combination of each of the ``layouts`` best-predicted layouts of the
    heaviest kernel (:meth:`~fusec.space.combinations.Space.layouts`): the top
    K differ mostly in routine order, and a shape the predictor misprices by
    10 % can sit thousands of ranks down."""
    if top < 1:
        raise FusecError(f"--top must be at least 1, not {top}")
    if layouts < 0:
        raise FusecError(f"--layouts must be at least 0, not {layouts}")
    space = build_space(dag, library, dtype, sizes, predictor)
    ranked = space.top(top, twins=True)
    seen = {c.plan for c in ranked}
    by_layout = []
    for combination in space.layouts(layouts, twins=True):
        if combination.plan not in seen:
            seen.add(combination.plan)
            by_layout.append(combination)
    return ranked, by_layout


def _incumbent(dag, library, dtype: str, sizes, gpu_slug: str, predictor, chosen) -> Combination | None:
    """The tuning cache's plan for this key (else the one the library shipped for its
    previous version: tuning.previous; else the one it ships for a GPU of the same
    compute capability: tuning.sibling), with its predicted time, unless it is among
    the candidates already (or there is none, or it no longer builds)."""
    entry = (tuning.lookup(dag, library, dtype, sizes, gpu_slug)  # warns about a damaged entry
             or tuning.previous(dag, library, dtype, sizes, gpu_slug)
             or tuning.sibling(dag, library, dtype, sizes, gpu_slug))
    if entry is None or any(c.plan == entry.plan for c in chosen):
        return None
    return _priced(entry.plan, dag, library, dtype, sizes, predictor)


def _priced(plan: ProgramPlan, dag, library, dtype: str, sizes, predictor) -> Combination | None:
    """A tuned plan as a candidate, with its predicted time; None where it no longer builds."""
    from ..emit.program import generate
    try:
        kernels = generate(dag, library, plan, dtype).kernels
    except FusecError:
        return None
    times = tuple(predictor.kernel_seconds(k, dag, sizes) for k in kernels)
    return Combination(plan, sum(times), times)


def choose(rows: list[Row] | tuple[Row, ...]) -> Row | None:
    """The fastest row that passed (ties to the better predicted rank); None if none passed."""
    passed = [r for r in rows if r.passed]
    return min(passed, key=lambda r: (r.measured, r.rank)) if passed else None


def table(dag, rows, winner: Row | None) -> str:
    """The candidates in the order measured (predicted order within each group); the winner marked with ``*``."""
    lines = [f"  {'rank':>4}  {'predicted':>10}  {'measured':>10}  {'GB/s':>6}  {'verdict':<14}  kernels"]
    for row in rows:
        mark = "*" if row is winner else " "
        measured = f"{row.measured * 1e6:7.1f} us" if row.passed else f"{'inf':>10}"
        gbps = f"{row.gbps:6.0f}" if row.passed else f"{'-':>6}"
        lines.append(f"{mark} {row.rank:>4}  {row.predicted * 1e6:7.1f} us  {measured}  {gbps}"
                     f"  {row.measurement.verdict:<14}  {row.plan.summary(dag)}")
    return "\n".join(lines)


def report(result: TuneResult) -> str:
    """What ``fusec tune`` prints: a header, the table, failures, the winner, the cache."""
    dag = result.dag
    sizes = " ".join(f"{k}={v}" for k, v in result.sizes.items())
    lines = [f"{dag.name} ({dag.file}) {result.dtype}, {sizes}, on {result.gpu_name};"
             f" {len(result.rows)} candidate(s) ranked by predictor {result.predictor}"]
    if result.quick:
        second = (f"; {result.ranked + 1}-{result.ranked + result.by_layout}: further layouts and routine orders of the"
                  " first round's winner's cover and kernel classes, and of those timed within"
                  f" {(quick_rounds.TIE - 1) * 100:.0f} % of it" if result.by_layout else "")
        lines.append(f"(a quick tune: ranks 1-{result.ranked}: the first choice, the best of the"
                     f" {quick_rounds.FIRST} best-predicted layouts (its own and the next), the best-predicted of"
                     f" each structure of kernel families"
                     f" near it, and the plans tuned for the nearest size, before or for a sibling GPU where there"
                     f" are, with another routine order of each that fuses calls{second})")
    elif result.by_layout:
        last = result.ranked + result.by_layout
        lines.append(f"(ranks 1-{result.ranked}: the top K; {result.ranked + 1}-{last}: the best-ranked"
                     f" combination of each further layout of the heaviest kernel"
                     + (f"; {last + 1}: the cached plan, or one shipped before or for a sibling GPU, measured again)"
                        if len(result.rows) > last else ")"))
    lines += ["", table(dag, result.rows, result.winner)]
    failed = [r for r in result.rows if not r.passed]
    if failed:
        lines.append("")
        for row in failed:
            lines.append(f"rank {row.rank} {row.measurement.verdict}: {headline(row.measurement.reason)}")
    late = [r for r in result.rows if r.measurement.late]
    if late:
        lines += ["", "late: " + ", ".join(f"rank {r.rank} ({r.measurement.late} runs)" for r in late)
                  + " queued after the timing spin ended, even when taken again: the host was busy, and"
                  " those runs count some of its wait (tune again on a quieter machine to be sure)"]
    lines.append("")
    winner = result.winner
    if winner is None:
        lines.append("no candidate passed: nothing was chosen or cached")
    else:
        first = result.first
        spilled = f" (rank {first.rank}: better-ranked ones spill registers)" if first and first.rank > 1 else ""
        versus = (f"; the predictor's first choice{spilled} measured {first.measured * 1e6:.1f} us"
                  f" ({first.measured / winner.measured:.2f}x the winner's time)"
                  if first is not None and first.passed and first is not winner else "")
        lines.append(f"winner: rank {winner.rank}, {winner.measured * 1e6:.1f} us,"
                     f" {winner.gbps:.0f} GB/s on {winner.nbytes:,} minimum bytes{versus}")
        if result.directions:
            on, off = result.directions[True], result.directions[False]
            kept = "alternating" if result.entry is None or result.entry.turning else "forwards"
            lines.append(f"directions (the winner again): alternating {_us(on)}, always forwards {_us(off)}:"
                         f" {kept} kept")
        if result.cache_path is not None:
            lines.append(f"tuning cache: wrote {result.cache_path}")
        elif result.cache_error:
            lines.append(f"tuning cache: not written ({result.cache_error})")
    lines.append(f"tuned in {result.seconds:.1f} s")
    return "\n".join(lines)


def _us(measurement: Measurement) -> str:
    return f"{measurement.seconds * 1e6:.1f} us" if measurement.passed else measurement.verdict


def directions(measurer: "Measurer", program: Program) -> dict[bool, Measurement]:
    """``program`` measured with its kernels alone alternating their direction
    and always forwards (Program.turning), alternating first; empty when none
    of its kernels turns. Alternating reads first what the launch before left
    in L2, which is most of a call at some sizes and little at others, and
    loses to forwards for some (WAXPBY at fp32 n = 4096): measured, not assumed."""
    if not any(k.turns for k in program.kernels):
        return {}
    return {way: measurer.measure(Program(program.generated, turning=way)) for way in (True, False)}


def headline(reason: str) -> str:
    """The line of a failure's reason worth a table row: the first, or where
    that only introduces a log (nvcc's), the log's first error."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()] or [""]
    if lines[0].endswith(":"):
        errors = [line for line in lines[1:] if "error" in line.lower()]
        return f"{lines[0]} {(errors or lines[1:] or [''])[0]}".strip()
    return lines[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, FusecError) else f"{type(exc).__name__}: {text}"


# ---------------------------------------------------------------------------- measuring


class Measurer:
    """Compiles, runs and times candidates. The checking is here; the GPU work
    is in the hooks :meth:`compile`, :meth:`run`, :meth:`time`, :meth:`release`
    that :class:`GpuMeasurer` fills (and tests fake).

    Used as a context manager: entering makes the random inputs (once, from
    ``seed``); the oracle's reference for them is computed once, on first use.
    """

    gpu_name = "no GPU"

    def __init__(self, dag, library, dtype: str, sizes: Mapping[str, int], *, repeat: int = 20,
                 warmup: int = 3, seed: int = 0):
        self.dag, self.library, self.dtype, self.sizes = dag, library, dtype, dict(sizes)
        self.repeat, self.warmup, self.seed = repeat, warmup, seed
        self.host: dict = {}
        self._expected: oracle.Expected | None = None

    @property
    def gpu_slug(self) -> str:
        return slug(self.gpu_name)

    def __enter__(self) -> "Measurer":
        self.host = oracle.random_inputs(self.dag, self.sizes, self.dtype, np.random.default_rng(self.seed))
        return self

    def __exit__(self, *exc) -> None:
        self.host, self._expected = {}, None

    @property
    def expected(self) -> oracle.Expected:
        """The float64 reference and gauge of the inputs (seconds for a large matrix)."""
        if self._expected is None:
            self._expected = oracle.expect(self.dag, self.library, self.host)
        return self._expected

    # the hooks
    def compile(self, programs: list[Program], done: Callable[[int], None]) -> list[str]:
        """Compile every program; per program "" or why it failed."""
        raise NotImplementedError

    def run(self, program: Program) -> dict[str, np.ndarray]:
        """Run once on the inputs, outputs poisoned first; host outputs by name."""
        raise NotImplementedError

    def time(self, program: Program) -> list[float]:
        """Milliseconds of each timed run."""
        raise NotImplementedError

    def release(self, program: Program) -> None:
        """Free what the program holds on the device."""

    def late_samples(self) -> int:
        """A running count of timed runs kept late (``GpuClock``): 0 unless timed on a GPU."""
        return 0

    def measure(self, program: Program) -> Measurement:
        """Run, check against the oracle, then time; failures score inf."""
        try:
            try:
                outputs = self.run(program)
            except Exception as exc:  # resources, a fault: scored, reported, not raised
                return Measurement(LAUNCH_FAILED, reason=_first_line(exc))
            checks = oracle.check_outputs(self.dag, self.library, self.host, outputs, self.dtype,
                                          expected=self.expected)
            failed = [c for c in checks if not c.passed]
            if failed:
                return Measurement(WRONG, reason="; ".join(f"{c.name}: {c.reason}" for c in failed))
            late = self.late_samples()
            try:
                times = self.time(program)
            except Exception as exc:
                return Measurement(LAUNCH_FAILED, reason=_first_line(exc))
            late = self.late_samples() - late
            if not times or not all(math.isfinite(t) and t >= 0 for t in times):
                return Measurement(LAUNCH_FAILED, reason=f"no usable timings ({times[:3]})")
            return Measurement(OK, statistics.median(times) * 1e-3, fastest=min(times) * 1e-3,
                               slowest=max(times) * 1e-3, late=late)
        finally:
            self.release(program)


class GpuMeasurer(Measurer):
    """On the GPU present: nvcc for its architecture, PyCUDA arrays uploaded once."""

    def __enter__(self) -> "GpuMeasurer":
        import contextlib

        from ..runtime import cuda
        cuda.driver()  # a clear error when PyCUDA or the GPU is missing
        self._stack = contextlib.ExitStack()
        ctx = self._stack.enter_context(cuda.context())
        try:
            self.arch, self.gpu_name = cuda.arch_of(ctx), cuda.device_name(ctx)
            super().__enter__()
            import pycuda.gpuarray as gpuarray
            self.device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v)
                           for k, v in self.host.items()}
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.device = {}
        super().__exit__(*exc)
        self._stack.close()

    def compile(self, programs, done) -> list[str]:
        from .. import nvcc
        compiled = nvcc.compile_many([p.source for p in programs], self.arch, return_errors=True, done=done)
        return [str(c) if isinstance(c, CompileError) else "" for c in compiled]

    def run(self, program):
        results = program.run(self.device, poison=True)
        results = results if isinstance(results, tuple) else (results,)
        return {name: (r.get() if hasattr(r, "get") else r) for name, r in zip(program.outputs, results)}

    def time(self, program):
        # from an empty L2: no candidate inherits the lines the one before left (GpuClock.empty_l2)
        from ..runtime import cuda
        with cuda.context() as ctx:
            cuda.gpu_clock(ctx).empty_l2()
        return program.time(self.device, warmup=self.warmup, repeat=self.repeat, host=False)

    def release(self, program):
        program.release()

    def late_samples(self) -> int:
        from ..runtime import cuda
        return cuda.late_samples()


# ---------------------------------------------------------------------------- the tune


def tune(dag, library, dtype, sizes: Mapping[str, int], *, top: int = 10, layouts: int = LAYOUTS,
         predictor=None, repeat: int = 20, warmup: int = 3, seed: int = 0, progress: bool = True,
         measurer: Measurer | None = None, store: bool = True, quick: bool = False, space=None) -> TuneResult:
    """Measure the ``top`` best-predicted combinations of ``dag`` at ``sizes``,
    and the best of each of the ``layouts`` best-predicted layouts of the
    heaviest kernel not among them (:func:`candidate_groups`), on the GPU present and cache the
    fastest correct one (unless ``store`` is
    false). With ``quick``, instead, the two rounds of :mod:`fusec.tune.quick` (about
    ten plans; ``top`` and ``layouts`` unused), drawn from ``space`` where the caller built it
    (its predictor then ranks them). ``predictor`` defaults to
    :func:`fusec.cost.perfdb.predictor_for` of this GPU. Progress goes to stderr when ``progress``."""
    from ..cost.perfdb import predictor_for
    dtype = geo.dtype_name(dtype)
    sizes = default_sizes(dag, sizes)
    if repeat < 1 or warmup < 0:
        raise FusecError(f"--repeat must be at least 1 and --warmup at least 0 (got {repeat}, {warmup})")
    start = time.perf_counter()
    measurer = measurer or GpuMeasurer(dag, library, dtype, sizes, repeat=repeat, warmup=warmup, seed=seed)
    with measurer:
        predictor = (space.predictor if space is not None and quick
                     else predictor or predictor_for(library, measurer.gpu_slug))
        if quick:
            space = space or build_space(dag, library, dtype, sizes, predictor)
            chosen = ranked = quick_first_round(space, measurer.gpu_slug)
        else:
            ranked, by_layout = candidate_groups(dag, library, dtype, sizes, top, predictor, layouts)
            chosen = ranked + by_layout
            incumbent = _incumbent(dag, library, dtype, sizes, measurer.gpu_slug, predictor, chosen)
            if incumbent is not None:
                chosen.append(incumbent)
        rows, programs = _measure_all(measurer, dag, library, dtype, sizes, chosen, progress)
        if quick:
            timed = [(r.measured, r.plan) for r in rows if r.passed]
            by_layout = quick_rounds.second_round(space, timed, [r.plan for r in rows]) if timed else []
            more, more_programs = _measure_all(measurer, dag, library, dtype, sizes, by_layout, progress,
                                               first_rank=len(rows) + 1)
            rows, programs = rows + more, programs + more_programs
        winner = choose(rows)
        ways = directions(measurer, programs[rows.index(winner)]) if winner is not None else {}
        gpu_name, gpu_slug = measurer.gpu_name, measurer.gpu_slug
    # forwards only where it measured faster (a way that failed counts as inf)
    turning = not ways or ways[True].seconds <= ways[False].seconds
    entry = path = None
    error = ""
    if winner is not None:
        entry = tuning.TuningEntry(
            tuning.key(dag, library, dtype, sizes, gpu_slug), winner.plan, winner.measured * 1e6,
            winner.predicted * 1e6, winner.rank, len(rows), gpu_name, tuning.now(), f"{dag.name} ({dag.file})",
            turning=turning)
        if store:
            try:
                path = tuning.store(entry)
            except OSError as exc:
                error = f"{exc.strerror or exc}: {exc.filename or cache_dir('tuning', create=False)}"
                warnings.warn(FusecWarning(f"could not write the tuning cache ({error})"))
        else:
            error = "not asked to"
    return TuneResult(dag, dtype, sizes, gpu_name, getattr(predictor, "name", type(predictor).__name__),
                      tuple(rows), winner, entry, path, error, time.perf_counter() - start,
                      len(ranked), len(by_layout), ways,
                      untuned_choice(dag, library, dtype, sizes, predictor, rows, space if quick else None),
                      quick=quick)


def _measure_all(measurer: Measurer, dag, library, dtype: str, sizes, chosen: list[Combination],
                 progress: bool, first_rank: int = 1) -> tuple[list[Row], list[Program | None]]:
    """Generate, compile (all at once), check and time ``chosen``, ranked from ``first_rank``:
    a row each, and its program (None where it was not generated)."""
    from ..emit.program import generate
    if not chosen:
        return [], []
    programs: list[Program | None] = []
    failures: list[Measurement | None] = []
    for combination in chosen:
        try:
            programs.append(Program(generate(dag, library, combination.plan, dtype)))
            failures.append(None)
        except FusecError as exc:  # a point the space should not have offered
            programs.append(None)
            failures.append(Measurement(NOT_GENERATED, reason=_first_line(exc)))
    built = [i for i, p in enumerate(programs) if p is not None]
    with Progress(len(built), "compiling", enabled=progress) as bar:
        errors = measurer.compile([programs[i] for i in built], lambda _: bar.advance())
    for i, error in zip(built, errors):
        if error:
            failures[i] = Measurement(COMPILE_FAILED, reason=error)
    with Progress(1, "float64 oracle", enabled=progress) as bar:
        measurer.expected  # once, for every candidate
        bar.advance(label="reference results")
    rows = []
    with Progress(len(chosen), "measuring", enabled=progress) as bar:
        for rank, (combination, program, failure) in enumerate(zip(chosen, programs, failures), first_rank):
            measurement = failure or measurer.measure(program)
            if not measurement.passed:
                bar.note(f"rank {rank} {measurement.verdict}: {headline(measurement.reason)}")
            label = (f"rank {rank}: {measurement.seconds * 1e6:.1f} us" if measurement.passed
                     else f"rank {rank}: {measurement.verdict}")
            bar.advance(label=label)
            nbytes = program.minimum_bytes(sizes) if program else 0
            rows.append(Row(rank, combination.plan, combination.predicted, measurement, nbytes))
    return rows, programs


def quick_first_round(space, gpu_slug: str | None) -> list[Combination]:
    """The first round of a quick tune (:func:`fusec.tune.quick.first_round`), with the plan
    tuned for the nearest size that ``space`` offers and the plan the tuning cache holds (or
    one shipped before or for a sibling GPU), each with its predicted time."""
    dag, library, dtype, sizes, predictor = space.dag, space.library, space.dtype, space.sizes, space.predictor
    nearby = _nearby(space, gpu_slug)
    first = quick_rounds.first_round(space, also=[nearby] if nearby is not None else [])
    incumbent = _incumbent(dag, library, dtype, sizes, gpu_slug, predictor, first)
    return quick_rounds.with_other_orders(space, first + ([incumbent] if incumbent is not None else []))


def _nearby(space, gpu_slug: str | None) -> Combination | None:
    """The plan tuned for the nearest size (tuning.nearby) that ``space`` offers as it is,
    with its predicted time: what an untuned compile borrows (fusec.api), timed beside the others."""
    offered = space.offered
    for entry in tuning.nearby(space.dag, space.library, space.dtype, space.sizes, gpu_slug):
        if all(k in offered for k in entry.plan.kernels):
            priced = _priced(entry.plan, space.dag, space.library, space.dtype, space.sizes, space.predictor)
            if priced is not None:
                return priced
    return None
