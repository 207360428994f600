"""From a script's DAG to a distributed plan: each value's layout, the stages,
and the collectives between them.

1. Matrices are split by rows. A vector input is whole where some call reads
   it whole (a gemv's x, a ger's v), else split; a scalar input is whole.
2. In script order, each call takes the choice of :mod:`.rules` that costs
   least: a collective (10) more than a rank's own step (1) more than none,
   counting what its arguments need and what its result will need (a result
   some later call reads whole costs a collective unless it is made whole);
   between choices of equal cost, the one whose collectives move fewer
   elements, then the one with fewer slices (views, which move nothing).
3. A call runs in the first stage after everything it reads is there: a value
   in the layout it was made in is there in its own stage; one converted is
   there in the next. So the stages break exactly where a collective must
   finish before a call (a fusion boundary no kernel can cross), and a call
   needing none stays in its producer's stage, fused with it where fusec can.
4. A partial result returned is all-reduced; with ranks that hold no rows, a
   whole result made by a stage is broadcast from rank 0 to them.
5. A scalar expression (``alpha = rho / pq``) is whole: every rank evaluates it
   from whole operands, in each stage whose calls read it (a single GPU's kernels
   do the same). A call reading it reads the inputs and call results it is made
   of (:meth:`Dag.leaves`) whole, so a dot's partial sums are all-reduced first.

With one rank holding rows (P = 1, or the rule of :mod:`.scaling` said so) the
plan is the script itself as one stage, unchanged. With one rank in all,
nothing is split (every value is whole) and any script plans.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import numpy as np

from .. import validate
from ..errors import ArgumentError
from ..ir.dag import Constant, Dag
from ..library.model import Kind
from . import rules
from .errors import DistributionError
from .layout import Layout, Op, conversion, largest_block
from .plan import Conversion, DistributedPlan, Stage, StageArg, Step
from .stages import Names, dims_of, local_sizes, stage_text

COLLECTIVE_COST, LOCAL_COST = 10, 1


def _cost(have: Layout, need: Layout, elements: int = 0) -> tuple[float, int, int]:
    """(steps, elements a collective moves, slices) of turning ``have`` into ``need``. Choices
    compare on steps, then on elements (a collective of a scalar before one of a vector), then
    on slices: a slice is a view of the rank's rows, which moves nothing, so it decides only
    between choices otherwise equal (whole results of whole arguments stay whole)."""
    op = conversion(have, need)
    if op is None:
        return 0, 0, 0
    if op is Op.SLICE:
        return 0, 0, 1
    return (COLLECTIVE_COST, elements, 0) if op.collective else (LOCAL_COST, 0, 0)


def _plus(a: tuple, b: tuple) -> tuple:
    return tuple(x + y for x, y in zip(a, b))


def check_sizes(dag: Dag, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """Every size of the script, given: a distributed program is planned for its sizes."""
    if not isinstance(sizes, Mapping):
        raise ArgumentError("sizes", f"is {type(sizes).__name__}: a distributed program needs its sizes,"
                                     f" e.g. {{{', '.join(repr(s) + ': 8192' for s in dag.sizes)}}}")
    fill = sizes.get("n")
    out = {}
    for symbol in dag.sizes:
        value = sizes.get(symbol, fill)
        if value is None:
            raise ArgumentError("sizes", f"has no {symbol!r} (the sizes of {dag.file}: {', '.join(dag.sizes)})")
        out[symbol] = validate.size(symbol, value)
    unknown = set(sizes) - set(dag.sizes) - {"n"}
    if unknown:
        raise ArgumentError("sizes", f"{dag.file} has no size {', '.join(sorted(map(str, unknown)))}")
    return out


def _wanted(dag: Dag, library, requested: Mapping[int, Layout] | None = None) -> dict[int, set[Layout]]:
    """The layouts later calls read each value in, where they allow only one:
    a nested call's matrix and row vectors split, its column vectors and
    scalars whole; an unnested map's arguments as its result is wanted; what
    a scalar expression is made of, whole."""
    wants: dict[int, set[Layout]] = {v.id: set() for v in dag.values}
    for value, layout in (requested or {}).items():
        wants[value].add(layout)
    for call in reversed(dag.calls):
        function = library.function(call.function)
        shape = rules.shape_of(function)
        for param, arg in zip(function.params, call.args):
            if isinstance(arg, Constant):
                continue
            if dag.expression(arg) is not None:
                for leaf in dag.leaves(arg):
                    wants[leaf].add(Layout.WHOLE)
            elif shape.nested:
                split = param.kind is Kind.MATRIX or (param.kind is Kind.VECTOR and param.dims[0] == shape.rows)
                wants[arg].add(Layout.SPLIT if split else Layout.WHOLE)
            elif not function.hof.reduce and param.kind is Kind.VECTOR:
                wants[arg] |= wants[call.result]
    return wants


def _input_layout(dag: Dag, value: int, wants: dict[int, set[Layout]]) -> Layout:
    kind = dag.value(value).kind
    if kind is Kind.MATRIX:
        return Layout.SPLIT
    if kind is Kind.SCALAR or Layout.WHOLE in wants[value]:
        return Layout.WHOLE
    return Layout.SPLIT


def _choose(dag: Dag, library, call, layout: dict[int, Layout], wants, outputs, sizes) -> rules.Choice:
    function = library.function(call.function)
    best, best_cost = None, (math.inf, 0, 0)
    for choice in rules.valid_choices(function, library):
        cost = (0, 0, 0)
        for arg, need in zip(call.args, choice.args):
            if isinstance(arg, Constant):
                if need is not Layout.WHOLE:  # a literal is the same on every rank
                    cost = (math.inf, 0, 0)
            elif dag.expression(arg) is not None:  # evaluated on every rank from whole operands
                if need is not Layout.WHOLE:
                    cost = (math.inf, 0, 0)
                for leaf in dag.leaves(arg):
                    cost = _plus(cost, _cost(layout[leaf], Layout.WHOLE, _count(dag, leaf, sizes)))
            else:
                cost = _plus(cost, _cost(layout[arg], need, _count(dag, arg, sizes)))
        made = _count(dag, call.result, sizes)
        for w in wants[call.result]:
            cost = _plus(cost, _cost(choice.result, w, made))
        if call.result in outputs and choice.result is Layout.PARTIAL:
            cost = _plus(cost, (COLLECTIVE_COST, made, 0))
        if cost < best_cost:
            best, best_cost = choice, cost
    if best is None:
        raise DistributionError(
            f"{call.function} cannot be split over ranks: no layout of its arguments gives a result"
            " that the ranks' results concatenate or add up to (checked against its reference)",
            call.coord, call.source_line or None)
    return best


def plan(dag: Dag, library, ranks: int, sizes: Mapping[str, int], dtype: str, *,
         active: int | None = None, results: Mapping[str, Layout | str] | None = None,
         inputs: Mapping[str, Layout | str] | None = None) -> DistributedPlan:
    """The plan of ``dag`` over ``ranks`` processes, of which the first
    ``active`` hold rows (default: all that can hold at least one row each).
    ``results``: the layout a result is returned in, by name, where not the one
    it is made in (a partial one: whole); a collective must make it (an
    iteration's results in the layouts its next call reads them in). ``inputs``:
    the layout a vector input is passed in, by name, where not the one 1. gives (an
    iteration's state passed as its last call returned it); with it, the choices
    count the collective a result asked for takes."""
    requested = _requested(dag, results)
    given = _given_inputs(dag, inputs)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ArgumentError("ranks", f"is {ranks!r}: the number of processes, a whole number >= 1")
    if active is not None and validate.count("active", active, 1) > ranks:
        raise ArgumentError("active", f"is {active}: at most the {ranks} ranks can hold rows")
    sizes = check_sizes(dag, sizes)
    itemsize = np.dtype(dtype).itemsize
    if ranks == 1:  # the plain program: nothing is split, and any script runs
        whole = {v.id: Layout.WHOLE for v in dag.values}
        return _whole_plan(dag, library, ranks, sizes, dtype, whole, tuple((v, Layout.WHOLE) for v in dag.outputs),
                           itemsize)
    returned = [e for e in dict.fromkeys(dag.outputs) if dag.expression(e) is not None]
    if returned:
        raise DistributionError(
            f"the script returns the scalar expression {dag.value(returned[0]).label}: a distributed program"
            " returns what its calls make; return the values it is made of and evaluate it on the host",
            dag.expression(returned[0]).coord, None)
    # the collective a requested result takes is counted where the inputs' layouts are given too
    # (an iteration passed its state as it returned it); elsewhere the plans are those timed on GPUs
    passed = _wanted(dag, library)  # the inputs' layouts as the calls alone want them (1.)
    wants = _wanted(dag, library, requested) if given else passed
    outputs = set(dag.outputs)
    layout: dict[int, Layout] = {v: given.get(v) or _input_layout(dag, v, passed) for v in dag.inputs}
    layout.update({e.value: Layout.WHOLE for e in dag.expressions})  # each rank evaluates it (5. above)
    stage_of: dict[int, int] = {v: -1 for v in dag.inputs}
    call_stage: dict[int, int] = {}
    needs: dict[int, tuple[Layout | None, ...]] = {}
    reads: dict[tuple[int, Layout], list[int]] = {}  # (value, layout) -> stages reading it
    for call in dag.calls:
        choice = _choose(dag, library, call, layout, wants, outputs, sizes)
        read = _read(dag, call, choice.args)
        stage = 0
        for arg, need in read:
            converted = need is not layout[arg]
            stage = max(stage, stage_of[arg] + 1 if converted else stage_of[arg])
        for arg, need in read:
            reads.setdefault((arg, need), []).append(stage)
        call_stage[call.id] = stage
        needs[call.id] = tuple(None if isinstance(a, Constant) else n for a, n in zip(call.args, choice.args))
        layout[call.result] = choice.result
        stage_of[call.result] = stage
    finals = tuple((v, requested.get(v, Layout.WHOLE if layout[v] is Layout.PARTIAL else layout[v]))
                   for v in dag.outputs)
    for v, final in finals:
        op = conversion(layout[v], final)
        if op is not None and not op.collective:
            raise ArgumentError("results", f"{dag.value(v).name} is made {layout[v]} here, so no collective returns"
                                           f" it {final}: ask for {layout[v]}, or leave it out")

    lengths = [_length(dag, v, sizes) for v, lay in layout.items() if lay is Layout.SPLIT]
    most = min([ranks] + lengths)
    active = most if active is None else max(1, min(int(active), most))
    if active == 1:
        return _whole_plan(dag, library, ranks, sizes, dtype, layout, finals, itemsize)

    local = local_sizes(dag)
    conversions = _conversions(dag, layout, stage_of, reads, finals, ranks, active, sizes, itemsize)
    stages = _stages(dag, library, call_stage, needs, layout, stage_of, conversions, local, sizes,
                     ranks, active)
    split = tuple((s, local[s]) for s in dag.sizes
                  if any(lay is Layout.SPLIT and dag.value(v).dims and dag.value(v).dims[0] == s
                         for v, lay in layout.items()))
    return DistributedPlan(dag.file, dag.name, str(np.dtype(dtype)), ranks, active, tuple(sizes.items()), split,
                           tuple(sorted(layout.items())), finals, stages, conversions,
                           _steps(len(stages), conversions), itemsize)


def _requested(dag: Dag, results: Mapping[str, Layout | str] | None) -> dict[int, Layout]:
    """``results`` by value id, checked: names of results, layouts split or whole, a scalar whole."""
    out = _named_layouts(dag, results, "results", dag.outputs, "result", "return")
    for value, layout in out.items():
        if layout is Layout.SPLIT and dag.value(value).kind is Kind.SCALAR:
            raise ArgumentError("results", f"{dag.value(value).name} is a scalar: it is returned whole")
    return out


def _given_inputs(dag: Dag, inputs: Mapping[str, Layout | str] | None) -> dict[int, Layout]:
    """``inputs`` by value id, checked: names of inputs; a matrix split, a scalar whole, a vector either."""
    out = _named_layouts(dag, inputs, "inputs", dag.inputs, "input", "pass")
    for value, layout in out.items():
        name, kind = dag.value(value).name, dag.value(value).kind
        if kind is Kind.MATRIX and layout is not Layout.SPLIT:
            raise ArgumentError("inputs", f"{name} is a matrix: each rank passes its rows ('split')")
        if kind is Kind.SCALAR and layout is not Layout.WHOLE:
            raise ArgumentError("inputs", f"{name} is a scalar: it is passed whole")
    return out


def _named_layouts(dag: Dag, given, argument: str, values, noun: str, verb: str) -> dict[int, Layout]:
    """``given`` (names of ``values``, each a ``noun``, to 'split' or 'whole') by value id,
    checked: a mapping, names of those values, layouts split or whole."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ArgumentError(argument, f"is a {type(given).__name__}: pass a mapping of {noun} names to"
                                      " 'split' or 'whole'")
    by_name = {dag.value(v).name: v for v in values}
    article = "an" if noun[0] in "aeiou" else "a"
    out = {}
    for name, layout in given.items():
        if name not in by_name:
            raise ArgumentError(argument, f"{name!r} is not {article} {noun} of {dag.file} (its {noun}s:"
                                          f" {', '.join(by_name)})")
        if str(layout) not in (Layout.SPLIT.value, Layout.WHOLE.value):
            raise ArgumentError(argument, f"{name}: {layout!r} is no layout to {verb}; pass 'split' or 'whole'")
        out[by_name[name]] = Layout(str(layout))
    return out


def _read(dag: Dag, call, needs: tuple[Layout | None, ...]) -> list[tuple[int, Layout]]:
    """What ``call`` reads and in which layout: each argument as ``needs`` says, in place of an
    expression the inputs and results it is made of (Dag.leaves), whole (5. above); no literal."""
    return [(leaf, Layout.WHOLE if dag.expression(arg) is not None else need)
            for arg, need in zip(call.args, needs) if not isinstance(arg, Constant) for leaf in dag.leaves(arg)]


def _length(dag: Dag, value: int, sizes: Mapping[str, int]) -> int:
    dims = dag.value(value).dims
    return sizes[dims[0]] if dims else 1


def _count(dag: Dag, value: int, sizes: Mapping[str, int]) -> int:
    return int(np.prod([sizes[d] for d in dag.value(value).dims], dtype=np.int64))


def _conversions(dag, layout, stage_of, reads, finals, ranks, active, sizes, itemsize) -> tuple[Conversion, ...]:
    out: list[Conversion] = []

    def add(op, value, source, target, after, first_use):
        count = _count(dag, value, sizes)
        out.append(Conversion(op, value, source, target, after, first_use, count, count * itemsize))

    targets: dict[int, dict[Layout, int | None]] = {}  # value -> layout -> first stage reading it
    for (value, need), stages in reads.items():
        if need is not layout[value]:
            targets.setdefault(value, {})[need] = min(stages)
    for value, final in finals:
        if final is not layout[value]:
            targets.setdefault(value, {}).setdefault(final, None)
    for value, wanted in sorted(targets.items()):
        have, made = layout[value], stage_of[value]
        if have is Layout.PARTIAL and Layout.WHOLE in wanted and Layout.SPLIT in wanted:
            # one all-reduce serves both: the split rows are a slice of the whole
            add(Op.ALL_REDUCE, value, have, Layout.WHOLE, made, wanted[Layout.WHOLE])
            add(Op.SLICE, value, Layout.WHOLE, Layout.SPLIT, wanted[Layout.SPLIT] - 1, wanted[Layout.SPLIT])
            wanted = {k: v for k, v in wanted.items() if k not in (Layout.WHOLE, Layout.SPLIT)}
        for need, first in wanted.items():
            op = conversion(have, need)
            after = made if op.collective else first - 1  # a rank's own step waits until it is needed
            add(op, value, have, need, after, first)
    if active < ranks:
        for value, final in finals:
            if final is Layout.WHOLE and layout[value] is Layout.WHOLE:  # made by a stage, not by a collective
                add(Op.BROADCAST, value, Layout.WHOLE, Layout.WHOLE, stage_of[value], None)
    # in the order they run: by the stage they follow; collectives first (a slice may read one's result)
    out.sort(key=lambda c: (c.after, not c.collective, c.value))
    return tuple(out)


def _steps(stages: int, conversions: tuple[Conversion, ...]) -> tuple[Step, ...]:
    steps = []
    for k in range(-1, stages):
        if k >= 0:
            steps.append(Step(stage=k))
        mine = [i for i, c in enumerate(conversions) if c.after == k]
        # the scalars' all-reduces after a stage go together, packed: one collective's latency
        packed = [i for i in mine if _packable(conversions[i])]
        for i in mine:
            if len(packed) > 1 and i == packed[0]:
                steps.append(Step(conversion=i, together=tuple(packed[1:])))
            elif len(packed) < 2 or i not in packed:
                steps.append(Step(conversion=i))
    return tuple(steps)


def _packable(c: Conversion) -> bool:
    """An all-reduce of a scalar that no stage overlaps (its sum read by the next stage, or
    only returned): it may share one collective with the others after its stage."""
    return c.op is Op.ALL_REDUCE and c.count == 1 and not c.overlaps


def _stages(dag, library, call_stage, needs, layout, stage_of, conversions, local, sizes, ranks, active):
    names = Names(dag, layout)
    count = max(call_stage.values()) + 1
    later_reads = {}  # value -> the last stage reading it as made
    for call in dag.calls:
        for arg in call.value_args():
            for read in dag.leaves(arg):  # through an expression, what it is made of
                later_reads[read] = max(later_reads.get(read, -1), call_stage[call.id])
    converted = {c.value for c in conversions if c.source is layout[c.value]}
    stages = []
    for k in range(count):
        calls = tuple(c.id for c in dag.calls if call_stage[c.id] == k)
        made = [dag.call(c).result for c in calls]
        inputs: dict[tuple[int, Layout], StageArg] = {}
        for c in calls:
            for leaf, how in _read(dag, dag.call(c), needs[c]):
                if not (leaf in made and how is layout[leaf]):
                    inputs.setdefault((leaf, how), StageArg(names(leaf, how), leaf, how))
        inputs = dict(sorted(inputs.items(), key=lambda item: (item[0][0], item[0][1] is not layout[item[0][0]])))
        internal = tuple(StageArg(names(v, layout[v]), v, layout[v]) for v in made)
        returned = tuple(a for a in internal if a.value in dag.outputs or a.value in converted
                         or later_reads.get(a.value, -1) > k)
        # the script's file name, not its path: a stage's tuned plan is found by its text, which
        # must not change with the directory a program is compiled from
        title = (f"stage {k} of {count} of {Path(dag.file).name} over {ranks} ranks ({active} holding rows);"
                 f" a size ending in _local is the rows of one rank")
        evaluated = tuple(StageArg(names(v, Layout.WHOLE), v, Layout.WHOLE)
                          for v in dag.needed_expressions(tuple(a for c in calls for a in dag.call(c).value_args())))
        text = stage_text(dag, title, calls, needs, tuple(inputs.values()), internal, returned, local, evaluated)
        used = {d for a in tuple(inputs.values()) + internal for d in dims_of(dag, a.value, a.layout, local)}
        stage_sizes = tuple((d, sizes[d]) for d in dag.sizes if d in used)
        stage_sizes += tuple((local[s], largest_block(sizes[s], active)) for s in dag.sizes if local[s] in used)
        on_device = tuple(a.name for a in inputs.values()  # a scalar the caller passes stays a host number
                          if dag.value(a.value).kind is Kind.SCALAR and not dag.is_input(a.value))
        stages.append(Stage(k, f"{dag.file}#{k}", calls, text, tuple(inputs.values()), returned, stage_sizes,
                            on_device))
    return tuple(stages)


def _whole_plan(dag, library, ranks, sizes, dtype, layout, finals, itemsize) -> DistributedPlan:
    """Rank 0 runs the script itself on all the rows; ranks past it get the
    whole results by broadcast and empty blocks of the split ones."""
    inputs = tuple(StageArg(dag.value(v).name, v, layout[v]) for v in dag.inputs)
    outputs = tuple(StageArg(dag.value(v).name, v, final) for v, final in finals)
    stage = Stage(0, dag.file, tuple(c.id for c in dag.calls), dag.text, inputs, outputs,
                  tuple((s, sizes[s]) for s in dag.sizes))
    conversions = []
    if ranks > 1:
        for value, final in finals:
            if final is Layout.WHOLE:
                count = _count(dag, value, sizes)
                conversions.append(Conversion(Op.BROADCAST, value, Layout.WHOLE, Layout.WHOLE, 0, None,
                                              count, count * itemsize))
    conversions = tuple(conversions)
    return DistributedPlan(dag.file, dag.name, str(np.dtype(dtype)), ranks, 1, tuple(sizes.items()), (),
                           tuple(sorted(layout.items())), finals, (stage,), conversions,
                           _steps(1, conversions), itemsize)


def summed_on_every_rank(plan: DistributedPlan, dag: Dag, library) -> tuple[int, ...]:
    """The values every rank holding rows sums for itself, whole: a reducing call's result made
    whole (CG's rr1 = r1 . r1 where r1 is passed whole), not all-reduced from partial sums.
    Their bits depend on each rank's kernels (the order of their sums), so ranks whose kernels
    differ could disagree on them, on when to stop for one."""
    return tuple(call.result for stage in plan.stages for call in map(dag.call, stage.calls)
                 if library.function(call.function).hof.reduce and plan.layout(call.result) is Layout.WHOLE)
