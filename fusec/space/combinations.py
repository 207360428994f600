"""Combinations (paper §4.2): fusion implementations that cover every call.

A cover is a set of fusions in which each call appears once and whose kernels
can run in some order (the graph between fusions has no cycle). A
combination picks one implementation per fusion of a cover; its predicted
time is the sum of its kernels' times, since they run one after another.

:func:`ranked` yields combinations best-predicted first and lazily: one heap
over all covers, where each cover's candidates are the sorted lists of its
fusions' implementations and a candidate's successors bump one of them. The
first combination costs one sort per fusion; the whole space is reachable by
iterating on, and each combination comes out exactly once.

Covers may also run independent kernels side by side in one kernel
(horizontal fusion, :mod:`fusec.space.horizontal`): such a cover holds a
:class:`~fusec.space.horizontal.HorizontalFusion` in place of the two
fusions, with implementations of its own. Likewise a kernel and the next one,
which needs its reductions' results, in stripes (:mod:`fusec.space.striped`)
or across one grid barrier with tiles held on chip (:mod:`fusec.space.held`):
the slot of such a pair has the implementations of both kinds.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from typing import Callable, Iterator, Mapping

from ..errors import PlanError
from ..families import build_kernel
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import HeldPlan, HorizontalPlan, KernelPlan, ProgramPlan, StripedPlan
from ..library.model import Geometry, Library
from .covers import covers, kernel_order
from .fusions import Fusion, fusions
from .held import HELD_SHAPES, MAX_PER_SM, held_options
from .horizontal import HorizontalFusion, horizontal_covers, horizontal_options
from .implementations import as_parts, by_time, implementations
from .search import bounded_cover, exhaustive_is_small, warn_cut
from .striped import StripedFusion, striped_covers, striped_options

Slot = Fusion | HorizontalFusion | StripedFusion  # one kernel of a cover
LAYOUTS = 60  # fusec tune --layouts: GESUMMV's fastest plans on the H100 are its 49th (fp32) and 44th (fp64)
ALL_LAYOUTS = 10 ** 6  # Space.layouts(ALL_LAYOUTS): every layout of the heaviest kernels


@dataclasses.dataclass(frozen=True)
class Combination:
    plan: ProgramPlan
    predicted: float  # seconds
    kernel_times: tuple[float, ...]

    @property
    def fused_calls(self) -> tuple[tuple[int, ...], ...]:
        return tuple(k.calls for k in self.plan.kernels)


@dataclasses.dataclass
class Space:
    """The optimization space of a script for one precision and problem size."""

    dag: Dag
    library: Library
    dtype: str
    sizes: dict[str, int]
    predictor: object
    fusions: list[Fusion]
    options: dict[Slot, list[tuple[KernelPlan | HorizontalPlan | StripedPlan | HeldPlan, Kernel, float]]]  # by time
    covers: list[tuple[Slot, ...]]
    horizontals: list[HorizontalFusion] = dataclasses.field(default_factory=list)
    cut: str = ""  # where the space was too large to enumerate: how it was bounded (SpaceCutWarning)

    @property
    def offered(self) -> frozenset:
        """Every kernel plan the space offers (a tuned plan is used only if made of these)."""
        return frozenset(plan for options in self.options.values() for plan, _, _ in options)

    @property
    def implementation_count(self) -> int:
        return sum(len(v) for v in self.options.values())

    @property
    def combination_count(self) -> int:
        return sum(math.prod(len(self.options[f]) for f in cover) for cover in self.covers)

    def _combination(self, cover: tuple[Fusion, ...], index: tuple[int, ...]) -> Combination:
        return self._picked([self.options[f] for f in cover], index)

    @staticmethod
    def _picked(columns, index: tuple[int, ...]) -> Combination:
        picked = [column[i] for column, i in zip(columns, index)]
        times = tuple(t for _, _, t in picked)
        return Combination(ProgramPlan(tuple(p for p, _, _ in picked)), sum(times), times)

    def ranked(self) -> Iterator[Combination]:
        """Combinations in increasing predicted time, lazily."""
        # each cover's option lists, looked up once: hashing its fusions per step
        # was most of the cost of a long ranking
        columns = [tuple(self.options[f] for f in cover) for cover in self.covers]
        heap = []
        for c, cover_columns in enumerate(columns):
            if all(cover_columns):
                index = (0,) * len(cover_columns)
                heap.append((_total(cover_columns, index), c, index, 0))
        heapq.heapify(heap)
        while heap:
            total, c, index, last = heapq.heappop(heap)
            cover_columns = columns[c]
            yield self._picked(cover_columns, index)
            for position in range(last, len(index)):  # bump at or after the last bumped: no repeats
                if index[position] + 1 < len(cover_columns[position]):
                    bumped = index[:position] + (index[position] + 1,) + index[position + 1:]
                    heapq.heappush(heap, (_total(cover_columns, bumped), c, bumped, position))

    def best(self) -> Combination:
        return next(self.ranked())

    def best_where(self, keep: Callable[[ProgramPlan], bool]) -> Combination:
        """The best-predicted combination whose plan ``keep`` accepts (say, one
        without band kernels, for a tool that rewrites tile kernels)."""
        found = next((c for c in self.ranked() if keep(c.plan)), None)
        if found is None:
            raise PlanError(f"{self.dag.file}: no combination of its space is accepted")
        return found

    def twin(self, combination: Combination) -> Combination:
        """The same kernels with every horizontal, striped or held fusion's parts
        launched one after another (what the fusion must beat), with its
        predicted time."""
        plans, times = [], []
        for plan, seconds in zip(combination.plan.kernels, combination.kernel_times):
            if not plan.composite:
                plans.append(plan)
                times.append(seconds)
                continue
            for part in plan.parts:
                options = self.options[Fusion(part.calls)]
                plans.append(part)
                found = next((t for p, _, t in options if p == part), None)
                if found is None:  # a held part of a shape the space offers only to held fusions
                    kernel = build_kernel(self.dag, self.library, part, self.dtype, 0, alone=True,
                                          target=self.predictor.target)
                    found = self.predictor.kernel_seconds(kernel, self.dag, self.sizes)
                times.append(found)
        return Combination(ProgramPlan(tuple(plans)), sum(times), tuple(times))

    def top(self, count: int, twins: bool = False) -> list[Combination]:
        """The ``count`` best-predicted combinations; with ``twins``, each one with
        a horizontal, striped or held fusion followed by its :meth:`twin` (unless
        already there), and then the ``count // 4`` (at least one) best without
        a striped or held fusion, so measuring them shows whether the fusion pays."""
        out: list[Combination] = []
        seen: set[ProgramPlan] = set()
        for combination in itertools.islice(self.ranked(), count):
            for c in (combination, self.twin(combination)) if twins else (combination,):
                if c.plan not in seen:
                    seen.add(c.plan)
                    out.append(c)
        if twins:  # and the best without a barrier inside: such a kernel must beat those at their best
            unstriped = (c for c in self.ranked()
                         if not any(k.across_barrier for k in c.plan.kernels))
            for c in itertools.islice(unstriped, max(1, count // 4)):
                if c.plan not in seen:
                    seen.add(c.plan)
                    out.append(c)
            # and the best held ones of tile kernels and of band kernels, whose predictions
            # are the least sure (the performance database has no timings of tile shapes at a
            # resident grid, and none of band routines)
            for geometry in (Geometry.TILE, Geometry.BAND):
                held = (c for c in self.with_held() if _held_geometry(c.plan) is geometry)
                for c in itertools.islice(held, max(1, count // 4)):
                    if c.plan not in seen:
                        seen.add(c.plan)
                        out.append(c)
        return out

    def with_held(self) -> Iterator[Combination]:
        """For each pair slot of a cover, in the order of its held options'
        predicted times, the combination with that option and every other slot
        at its best: the held fusions, best-predicted first."""
        found = []
        for cover in self.covers:
            if not all(self.options[f] for f in cover):
                continue
            for position, slot in enumerate(cover):
                for i, option in enumerate(self.options[slot]):
                    if option[0].family == "held":
                        index = tuple(i if p == position else 0 for p in range(len(cover)))
                        found.append(self._combination(cover, index))
        return iter(sorted(found, key=lambda c: c.predicted))

    def layouts(self, count: int, twins: bool = False) -> list[Combination]:
        """The best-predicted combination of each of the ``count`` best-predicted
        *layouts*, best first; with ``twins``, each one with a horizontal or
        striped fusion followed by its :meth:`twin`.

        A layout is what sets how a kernel moves its bytes: its calls,
        implementations, shape, serial axis and lag, the routine order left out.
        The first combinations of :meth:`ranked` differ mostly in routine orders
        and in the shapes of their light kernels, which the predictor prices
        alike and the GPU barely tells apart, so a layout of the heavy kernel
        the predictor misprices can sit thousands of ranks down. Here, in each
        cover, the slot predicted slowest varies its layout, each at its best
        option (the first of its sorted list); the others keep their best."""
        ranked = []
        for cover in self.covers:
            if not all(self.options[f] for f in cover):
                continue
            heaviest = max(cover, key=lambda f: self.options[f][0][2])
            options = {}
            for slot in cover:
                if slot != heaviest:
                    options[slot] = self.options[slot][:1]
                    continue
                seen, kept = set(), []
                for option in self.options[slot]:
                    layout = option[0].layout()
                    if layout not in seen:
                        seen.add(layout)
                        kept.append(option)
                options[slot] = kept
            ranked.append(dataclasses.replace(self, options=options, covers=[cover]).ranked())
        out: list[Combination] = []
        for combination in itertools.islice(heapq.merge(*ranked, key=lambda c: c.predicted), count):
            out.append(combination)
            if twins:
                twin = self.twin(combination)
                if twin.plan != combination.plan:
                    out.append(twin)
        return out

    def sample(self, count: int, rng, exclude: set[ProgramPlan] = frozenset()) -> list[Combination]:
        """Up to ``count`` distinct combinations drawn uniformly from the whole
        space (a cover in proportion to its size, then one implementation per
        fusion), without enumerating it."""
        weights = [math.prod(len(self.options[f]) for f in cover) for cover in self.covers]
        total = sum(weights)
        wanted = min(count, total - len(exclude))
        seen: dict[ProgramPlan, Combination] = {}
        while len(seen) < wanted:
            pick = int(rng.integers(total))
            for cover, weight in zip(self.covers, weights):
                if pick < weight:
                    break
                pick -= weight
            index = tuple(int(rng.integers(len(self.options[f]))) for f in cover)
            combination = self._combination(cover, index)
            if combination.plan not in exclude:
                seen.setdefault(combination.plan, combination)
        return list(seen.values())


def build_space(dag: Dag, library: Library, dtype: str, sizes: Mapping[str, int], predictor,
                shapes=None, horizontal: bool = True, striped: bool = True, held: bool = True) -> Space:
    """The space for one precision and size; ``shapes`` replaces the block shapes
    searched; ``horizontal=False`` leaves horizontal fusions out, ``striped=False``
    striped and held ones (the same pairs), ``held=False`` held ones only.

    Where the space is too large to enumerate (:func:`~fusec.space.search.exhaustive_is_small`),
    it holds the cover the bounded search finds, with its slots' options
    (:mod:`fusec.space.search`), and a :class:`~fusec.space.search.SpaceCutWarning` says so."""
    small, found = exhaustive_is_small(dag, library) if shapes is None else (True, None)
    if not small:
        cover, options, note = bounded_cover(dag, library, dtype, sizes, predictor, horizontal=horizontal,
                                             striped=striped, held=held)
        warn_cut(note)
        return Space(dag, library, dtype, dict(sizes), predictor,
                     sorted((f for f in options if isinstance(f, Fusion)), key=lambda f: (len(f), f.calls)),
                     options, [cover], [s for s in cover if isinstance(s, HorizontalFusion)], cut=note)
    found = found if found is not None else fusions(dag, library)
    options = {}
    for fusion in found:
        timed = [(plan, kernel, predictor.kernel_seconds(kernel, dag, sizes))
                 for plan, kernel in implementations(dag, library, fusion, dtype, shapes, sizes,
                                                     predictor.target)]
        options[fusion] = sorted(timed, key=by_time)
    plain = covers(dag, found)
    sideways = horizontal_covers(dag, plain, kernel_order) if horizontal else []
    fused = sorted({slot for cover in sideways for slot in cover if isinstance(slot, HorizontalFusion)})
    def parts_of(found) -> list:  # options (priced as launched alone) as a pair's parts
        return as_parts(found, predictor, dag, sizes)

    for slot in fused:
        options[slot] = horizontal_options(dag, library, slot, [parts_of(_tiles(options[p])) for p in slot.parts],
                                           predictor, sizes)
    stripes = striped_covers(dag, library, plain) if striped else []
    for slot in sorted({slot for cover in stripes for slot in cover if isinstance(slot, StripedFusion)}):
        parts = [parts_of(_tiles(options[p])) for p in slot.parts]
        both = striped_options(dag, library, slot, parts, predictor, sizes)
        if held:  # the same pair as one launch of resident blocks, tiles or rows held on chip
            wider = [sorted(found + parts_of([(plan, kernel, predictor.kernel_seconds(kernel, dag, sizes))
                                              for plan, kernel in implementations(dag, library, part, dtype,
                                                                                  HELD_SHAPES, None, predictor.target)
                                              if kernel.grid(sizes) <= MAX_PER_SM * predictor.sms])  # else never held
                            + parts_of(_bands(options[part])), key=by_time)
                     for part, found in zip(slot.parts, parts)] if shapes is None else parts
            both += held_options(dag, library, slot, wider, predictor, sizes)
        options[slot] = sorted(both, key=lambda o: (*by_time(o)[:2], type(o[0]).__name__, o[0]))
    return Space(dag, library, dtype, dict(sizes), predictor, found, options, plain + sideways + stripes, fused)


def _tiles(options: list) -> list:
    """The options that are not band kernels: horizontal, striped and held fusions
    are made of the other geometries' kernels."""
    return [o for o in options if o[0].geometry is not Geometry.BAND]


def _held_geometry(plan: ProgramPlan) -> Geometry | None:
    """The geometry of the parts of a plan's held fusion (None: it has none)."""
    return next((k.producer.geometry for k in plan.kernels if k.family == "held"), None)


def _bands(options: list) -> list:
    """The band kernels among a fusion's options: a held fusion may pair two."""
    return [o for o in options if o[0].geometry is Geometry.BAND]


def _total(columns, index: tuple[int, ...]) -> float:
    # summed in the order Combination.predicted is, so the ranking and the
    # reported totals agree to the last bit
    return sum(column[i][2] for column, i in zip(columns, index))
