"""A bounded search of the combinations, for scripts whose space is too large
to enumerate (paper §4.2 enumerates every fusion and every cover; both grow
exponentially with independent calls, and a chain of k calls has 2^(k-1) covers).

The exhaustive space (:func:`~fusec.space.combinations.build_space`) is kept
wherever it is small (:func:`exhaustive_is_small`): every script of Table 1.
Past that, the calls are taken in a topological order (the script's, or one that
keeps calls of the same index space together) and cut into consecutive runs by
dynamic programming over the cut points: the best first choice of the calls
before position j is the best, over the last run ``[i, j)`` of at most
:data:`LONGEST` calls, of the best before i plus that run as one kernel (a
vertical fusion), two kernels side by side (a horizontal fusion of its two
halves) or two kernels across one barrier (striped or held). A run of
consecutive calls of a topological order is convex and its kernels run after
those of the runs before it, so every cut is a valid cover; the search is exact
over such covers. It misses fusions of calls that no such order puts within
:data:`LONGEST` of each other, and horizontal pairs of non-adjacent kernels.

Fusions whose calls, arguments and results are alike up to renaming (the
``xi = svadd(w, y)`` of a script side by side, the steps of an iteration) have
the same implementations and predicted times up to their call ids, so each is
implemented once and relabelled (:func:`likeness`); fusions of many independent
calls are implemented in their first :data:`MOST_ORDERS` routine orders only.
Relabelled options carry the kernel of the fusion that was built, which is
alike in everything the predictor reads (shapes, grid, bytes), not in call ids.
"""

from __future__ import annotations

import math
import warnings

from ..errors import FusecWarning, PlanError
from ..families import build_kernel
from ..ir import expr
from ..ir.dag import Dag
from ..ir.plan import KernelPlan
from ..ir.steps import function_of
from ..library.model import Geometry, Kind, Library
from .covers import covers
from .fusions import Fusion, fusions, index_space, why_not_fusible
from .held import HELD_SHAPES, MAX_PER_SM, held_options
from .held import PER_PART as HELD_PER_PART
from .horizontal import HorizontalFusion, best_per_block, horizontal_options, independent
from .implementations import as_parts, by_time, call_orders, implementations
from .striped import PER_PART, StripedFusion, crosses_reduction, striped_options

LONGEST = 6  # calls of one run (one kernel, or two side by side or across a barrier)
MOST_ORDERS = 6  # call orders of a chosen fusion implemented (3!: every order of three calls)
CUT_ORDERS = 1  # call orders of a fusion implemented while choosing the cut (the predictor tells
# orders apart only by their on-chip bytes; each still comes with its loads first or interleaved)
EXACT_CALLS = 8  # the exhaustive space is considered up to so many calls...
EXACT_ORDERS = 20  # ...when its fusions have at most so many call orders in all...
EXACT_COVERS = 16  # ...and at most so many covers


class SpaceCutWarning(FusecWarning):
    """The optimization space was too large to enumerate, and a bounded search
    chose the first combination."""


def exhaustive_is_small(dag: Dag, library: Library) -> tuple[bool, list[Fusion] | None]:
    """Whether the exhaustive space is cheap to build, and its fusions when they
    were counted: at most EXACT_CALLS calls, EXACT_ORDERS call orders summed over
    the fusions (each is implemented in every shape) and EXACT_COVERS covers."""
    if len(dag.calls) > EXACT_CALLS:
        return False, None
    found = fusions(dag, library)
    if sum(len(call_orders(dag, f, EXACT_ORDERS + 1)) for f in found) > EXACT_ORDERS:
        return False, found
    return len(covers(dag, found)) <= EXACT_COVERS, found


def likeness(dag: Dag, calls: tuple[int, ...], parts: tuple[tuple[int, ...], ...]) -> tuple:
    """A key equal for two sets of calls (in DAG order, split into ``parts``)
    exactly when the i-th calls of each run the same function on arguments alike:
    the same constants, results of the same earlier call of the set, or values
    from outside (the same one where the other reads the same one) of the same
    kind and size symbols (and, for a scalar, producing function: a reduction's
    result is finished elsewhere; for a scalar expression, trees alike over
    operands alike); and results of the same kind and
    sizes, returned or read outside alike."""
    index = {c: i for i, c in enumerate(calls)}
    outside: dict[int, int] = {}

    def value_key(arg: int) -> tuple:
        expression = dag.expression(arg)
        if expression is not None:  # alike when the trees are, over operands alike
            return ("expression", tree_key(expression.tree))
        producer = dag.producer(arg)
        if producer in index:
            return ("call", index[producer])
        value = dag.value(arg)
        made_by = None if producer is None or value.kind is not Kind.SCALAR else dag.call(producer).function
        return ("value", outside.setdefault(arg, len(outside)), value.kind, value.dims, made_by)

    def tree_key(tree: expr.Expr) -> tuple:
        if isinstance(tree, expr.Ref):
            return value_key(tree.value)
        if isinstance(tree, expr.Constant):
            return ("constant", tree.text)
        head = tree.op if isinstance(tree, expr.Binary) else tree.function if isinstance(tree, expr.Apply) else "neg"
        return (head, *(tree_key(child) for child in expr.children(tree)))

    items = []
    for call in calls:
        record = dag.call(call)
        args = tuple(value_key(arg) if isinstance(arg, int) else ("constant", arg.text) for arg in record.args)
        result = dag.value(record.result)
        leaves = any(c not in index for c in dag.consumers(record.result))
        items.append((record.function, args, result.kind, result.dims, dag.is_output(record.result), leaves))
    return tuple(items), tuple(tuple(index[c] for c in part) for part in parts)


def relabel(plan, mapping: dict[int, int]):
    """A plan of alike calls (:func:`likeness`) with its call ids mapped."""
    return plan.relabelled(mapping)


class Search:
    """The options of fusions and pairs of the bounded search, each implemented
    once per class of alike calls and relabelled for the others."""

    def __init__(self, dag: Dag, library: Library, dtype: str, sizes, predictor, *, horizontal: bool = True,
                 striped: bool = True, held: bool = True):
        self.dag, self.library, self.dtype, self.sizes, self.predictor = dag, library, dtype, dict(sizes), predictor
        self.horizontal, self.striped, self.held = horizontal, striped, held
        self.target = predictor.target
        self.sms = self.target.sms
        self.built: dict[tuple, tuple[tuple[int, ...], list]] = {}  # (kind, likeness) -> (calls, options)
        self.legal: dict[tuple[int, ...], bool] = {}

    def fusible(self, calls: tuple[int, ...]) -> bool:
        if calls not in self.legal:
            self.legal[calls] = (why_not_fusible(self.dag, self.library, calls) is None
                                 or why_not_fusible(self.dag, self.library, calls, Geometry.BAND) is None)
        return self.legal[calls]

    def _cached(self, kind: str, parts: tuple[tuple[int, ...], ...], compute) -> "_Options":
        calls = tuple(sorted(c for part in parts for c in part))
        key = (kind, likeness(self.dag, calls, parts))
        if key not in self.built:
            self.built[key] = (calls, compute())
        built, options = self.built[key]
        return _Options(options, None if built == calls else dict(zip(built, calls)))

    def _timed(self, found) -> list:
        return [(plan, kernel, self.predictor.kernel_seconds(kernel, self.dag, self.sizes)) for plan, kernel in found]

    def fusion(self, fusion: Fusion, orders: int = CUT_ORDERS) -> "_Options":
        """A fusion's options, best first, in its first ``orders`` call orders."""
        orders = len(call_orders(self.dag, fusion, orders))  # a chain has one, whatever is allowed
        return self._cached(f"fusion {orders}", (fusion.calls,), lambda: sorted(self._timed(implementations(
            self.dag, self.library, fusion, self.dtype, None, self.sizes, self.target, orders)), key=by_time))

    def _own(self, options: list) -> list:
        """The options with kernels of these very calls (pairs assemble them)."""
        out = []
        for plan, kernel, seconds in options:
            if kernel.plan != plan:
                kernel = build_kernel(self.dag, self.library, plan, self.dtype, 0, target=self.target)
            out.append((plan, kernel, seconds))
        return out

    def pair_of(self, a: Fusion, b: Fusion, only: dict | None = None) -> list:
        """Pairs of the two fusions (``a`` runs first) as one kernel: side by side
        where independent, striped or held where ``b`` needs ``a``'s reductions.
        ``only`` (each fusion's part plan): the pairs of these very parts, whatever the
        predictor now ranks first among each part's options (:func:`offered_for`)."""
        dag, library = self.dag, self.library
        if self.horizontal and independent(dag, a, b):
            pair = HorizontalFusion(tuple(sorted((a, b), key=lambda f: f.calls)))
            compute = lambda: horizontal_options(  # noqa: E731
                dag, library, pair, [self._own(best_per_block(_tiles(self._part(p, only)))) for p in pair.parts],
                self.predictor, self.sizes)
            return [(pair, _Options(compute(), None) if only else
                     self._cached("horizontal", tuple(p.calls for p in pair.parts), compute))]
        if (self.striped and all(function_of(dag, library, c).hof.nested for c in a.calls + b.calls)
                and crosses_reduction(dag, library, a, b)):
            pair = StripedFusion(a, b)
            if only:
                return [(pair, _Options(self._across(pair, only), None))]
            return [(pair, self._cached("striped", (a.calls, b.calls), lambda: self._across(pair)))]
        return []

    def _part(self, fusion: Fusion, only: dict | None) -> list:
        """A pair's part's options, as parts (:func:`as_parts`): the fusion's own (its first call
        order), or with ``only`` the one option of any of its orders that is ``only[fusion]``."""
        if not only:
            return self._as_parts(self.fusion(fusion)())
        return self._as_parts(o for o in self.fusion(fusion, MOST_ORDERS)() if o[0] == only[fusion])

    def _as_parts(self, options) -> list:
        return as_parts(options, self.predictor, self.dag, self.sizes)

    def _across(self, pair: StripedFusion, only: dict | None = None) -> list:
        parts = [_tiles(self._part(p, only)) for p in pair.parts]
        both = striped_options(self.dag, self.library, pair, [self._own(_first(o, PER_PART, _striped_group))
                                                              for o in parts], self.predictor, self.sizes)
        if self.held:
            wider = []
            for part, found in zip(pair.parts, parts):
                extra = self._as_parts(self._timed((plan, kernel) for plan, kernel in implementations(
                    self.dag, self.library, part, self.dtype, HELD_SHAPES, None, self.target, CUT_ORDERS)
                    if kernel.grid(self.sizes) <= MAX_PER_SM * self.sms))
                options = sorted(found + extra + self._as_parts(_bands(self.fusion(part)())), key=by_time)
                if only:
                    options = [o for o in options if o[0] == only[part]]
                resident = [o for o in options if o[1].grid(self.sizes) <= MAX_PER_SM * self.sms]
                wider.append(self._own(_first(resident, HELD_PER_PART, lambda plan: (plan.shape, plan.serial))))
            both += held_options(self.dag, self.library, pair, wider, self.predictor, self.sizes)
        return sorted(both, key=lambda o: (*by_time(o)[:2], type(o[0]).__name__, o[0]))

    def run(self, order: tuple[int, ...]) -> tuple[float, tuple] | None:
        """The best cut of ``order`` (a topological order of every call) into runs:
        (predicted seconds, the slots in launch order), None if no cut is valid."""
        best: list[tuple[float, tuple] | None] = [(0.0, ())] + [None] * len(order)
        for j in range(1, len(order) + 1):
            for i in range(max(0, j - LONGEST), j):
                if best[i] is None:
                    continue
                for slot, options in self.runs(order[i:j]):
                    seconds = options.best_seconds()
                    if seconds is None:
                        continue
                    total = best[i][0] + seconds
                    if best[j] is None or total < best[j][0]:
                        best[j] = (total, best[i][1] + (slot,))
        return best[-1]

    def runs(self, run: tuple[int, ...]) -> list:
        """(slot, options) of one run of consecutive calls: the run as one fusion,
        and each split of it into two fusions that pair."""
        out = []
        whole = tuple(sorted(run))
        if self.fusible(whole):
            fusion = Fusion(whole)
            out.append((fusion, self.fusion(fusion)))
        for m in range(1, len(run)):
            first, second = tuple(sorted(run[:m])), tuple(sorted(run[m:]))
            if self.fusible(first) and self.fusible(second):
                out.extend(self.pair_of(Fusion(first), Fusion(second)))
        return out


class _Options:
    """A class's options for alike calls: the best time without relabelling
    (all the cut needs), the options themselves relabelled when asked for."""

    def __init__(self, options: list, mapping: dict[int, int] | None):
        self.options, self.mapping = options, mapping

    def best_seconds(self) -> float | None:
        return self.options[0][2] if self.options else None

    def __call__(self) -> list:
        if self.mapping is None:
            return self.options
        return [(relabel(plan, self.mapping), kernel, seconds) for plan, kernel, seconds in self.options]


def clustered_order(dag: Dag, library: Library) -> tuple[int, ...]:
    """A topological order that takes next, among the calls ready, one of the same
    geometry and index space as the last when there is one (else the first in
    script order): calls that may fuse come together."""
    done: list[int] = []
    left = [c.id for c in dag.calls]
    while left:
        ready = [c for c in left if all(p in done for p in dag.predecessors(c))]
        last = index_space(dag, library, done[-1]) if done else None
        pick = next((c for c in ready if index_space(dag, library, c) == last), ready[0])
        done.append(pick)
        left.remove(pick)
    return tuple(done)


def bounded_cover(dag: Dag, library: Library, dtype: str, sizes, predictor, **kinds):
    """(the best cover the bounded search finds, its options by slot and part,
    a one-line account of the cut)."""
    search = Search(dag, library, dtype, sizes, predictor, **kinds)
    tried = dict.fromkeys([tuple(c.id for c in dag.calls), clustered_order(dag, library)])
    found = [r for r in (search.run(order) for order in tried) if r is not None]
    if not found:
        raise PlanError(f"{dag.file}: no cover of its calls by kernels of at most {LONGEST} calls")
    seconds, cover = min(found, key=lambda r: r[0])
    options = {}
    for slot in cover:
        if isinstance(slot, Fusion):
            options[slot] = search.fusion(slot, MOST_ORDERS)()
            continue
        for part in slot.parts:  # a pair's parts are slots of the space too
            options[part] = search.fusion(part)()
        options[slot] = dict(search.pair_of(*slot.parts))[slot]()
    unfused = sum(math.log10(max(1, len(search.fusion(Fusion((c.id,))).options))) for c in dag.calls)
    note = (f"{dag.file}: the optimization space of its {len(dag.calls)} calls is too large to enumerate"
            f" (more than 10^{int(unfused)} combinations); searched covers by runs of at most {LONGEST}"
            f" consecutive calls ({len(search.built)} classes of alike kernels implemented)")
    return cover, options, note


def offered_for(dag: Dag, library: Library, dtype: str, sizes, predictor, kernels) -> set:
    """Every kernel plan the bounded search offers for the slots of these kernel plans (a
    tuned plan's own cover, which the cover the search finds best under this predictor may
    not share): a kernel of one fusion, its fusion's options; a pair (side by side, striped
    or held), the options of its two fusions paired."""
    search = Search(dag, library, dtype, sizes, predictor)
    offered = set()
    for kernel in kernels:
        if kernel.composite:
            if len(kernel.parts) != 2:  # the search pairs two fusions, no more
                continue
            first, second = (Fusion(tuple(sorted(part.calls))) for part in kernel.parts)
            if not (search.fusible(first.calls) and search.fusible(second.calls)):
                continue
            # the pairs of its very parts: the builders pair each part's best-predicted options
            # only, which a predictor refitted since the tuning may rank otherwise
            only = {first: kernel.parts[0], second: kernel.parts[1]}
            pairs = search.pair_of(first, second, only) + search.pair_of(second, first, only)
            offered |= {plan for _, options in pairs for plan, _, _ in options()}
        elif search.fusible(calls := tuple(sorted(kernel.calls))):
            offered |= {plan for plan, _, _ in search.fusion(Fusion(calls), MOST_ORDERS)()}
    return offered


def warn_cut(note: str) -> None:
    warnings.warn(SpaceCutWarning(note), stacklevel=3)


def _tiles(options: list) -> list:
    return [o for o in options if o[0].geometry is not Geometry.BAND]


def _bands(options: list) -> list:
    return [o for o in options if o[0].geometry is Geometry.BAND]


def _striped_group(plan: KernelPlan) -> tuple:
    return plan.shape.block, plan.shape.tile_rows, plan.serial


def _first(options: list, count: int, group) -> list:
    """The first ``count`` options (sorted) of each group: a superset of what the
    pair builders take from a part (striped: per block and tile height, by axis)."""
    seen: dict[tuple, int] = {}
    out = []
    for option in options:
        key = group(option[0])
        if seen.get(key, 0) < count:
            seen[key] = seen.get(key, 0) + 1
            out.append(option)
    return out


__all__ = ["LONGEST", "SpaceCutWarning", "bounded_cover", "exhaustive_is_small", "likeness", "relabel"]
