"""The dependency DAG of a checked script (paper §4.2).

Vertices are calls of elementary functions; edges are the values one call
produces and another reads. Names are single-assignment here: a script that
reassigns ``x`` gets a second :class:`Value` for it. Every record keeps the
source coordinate it came from, so later stages can point back at the script.

A scalar may also be made by an :class:`~fusec.ir.expr.Expression` over other
scalars (``alpha = rho / pq``). An expression is no vertex: the calls that read
its value depend on the values it reads (:meth:`Dag.leaves`), so a call reading
``alpha`` comes after the calls making ``rho`` and ``pq``, and may share no kernel
with a reduction making either (its final result needs a global barrier).
"""

from __future__ import annotations

import dataclasses
import functools

from ..errors import Coord
from ..library.model import Kind
from . import expr
from .expr import Constant, Expression

__all__ = ["Value", "Constant", "Argument", "Call", "Dag", "Expression", "without_dead_calls"]


@dataclasses.dataclass(frozen=True)
class Value:
    """A single-assignment value: a script input, the result of one call, or the
    scalar an expression makes (``producer`` None, :meth:`Dag.expression` not None)."""

    id: int
    name: str  # the name in the script
    version: int  # 1 for the first assignment (or the input), 2 for the next...
    kind: Kind
    dims: tuple[str, ...]  # size symbols, e.g. ("m", "n")
    coord: Coord = dataclasses.field(compare=False)  # declaration or assignment
    producer: int | None = None  # id of the call that assigns it; None for inputs and expressions
    # a scalar input the caller passes as a one-element device array (Dag.with_device_scalars):
    # kernels read it through a pointer, as they read a scalar an earlier kernel made
    on_device: bool = False

    @property
    def label(self) -> str:
        """How messages and generated comments name it: ``x`` or ``x#2``."""
        return self.name if self.version == 1 else f"{self.name}#{self.version}"

    @property
    def c_name(self) -> str:
        """A C identifier that no other value and no C keyword can take."""
        return f"v{self.id}_{self.name}"


Argument = int | Constant  # a value id, or a literal


@dataclasses.dataclass(frozen=True)
class Call:
    id: int
    function: str
    args: tuple[Argument, ...]  # in the function's parameter order
    result: int  # value id
    coord: Coord = dataclasses.field(compare=False)
    source_line: str = dataclasses.field(default="", compare=False)
    # the composites the script's call was expanded through, outermost first (``("ssymv",)``);
    # () for a call the script writes itself. ``coord`` is then the script's call.
    via: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        """What messages and comments add to a call's text: `` (in ssymv)``, or ""."""
        return f"  (in {' in '.join(reversed(self.via))})" if self.via else ""

    def value_args(self) -> tuple[int, ...]:
        return tuple(a for a in self.args if isinstance(a, int))


@dataclasses.dataclass(frozen=True)
class Dag:
    name: str  # script stem, e.g. "bicgk"
    file: str
    text: str = dataclasses.field(repr=False)
    values: tuple[Value, ...] = ()
    calls: tuple[Call, ...] = ()  # in script order, which is a topological order
    inputs: tuple[int, ...] = ()  # value ids, in the order of the input statement
    outputs: tuple[int, ...] = ()  # value ids, in the order of the return statement
    sizes: tuple[str, ...] = ()  # size symbols in order of first appearance
    expressions: tuple[Expression, ...] = ()  # in script order; each makes a value after those it reads

    def value(self, value_id: int) -> Value:
        return self.values[value_id]

    @functools.cached_property
    def _expressions(self) -> dict[int, Expression]:
        return {e.value: e for e in self.expressions}

    def expression(self, value_id: int) -> Expression | None:
        """The expression that makes the value; None for inputs and call results."""
        return self._expressions.get(value_id)

    def with_device_scalars(self, names) -> Dag:
        """This DAG with the scalar inputs ``names`` read from device memory
        (:attr:`Value.on_device`); those it marks already stay marked. The names
        must be scalar inputs (``fusec.api`` checks what a caller passes)."""
        wanted = frozenset(names)
        marked = tuple(dataclasses.replace(v, on_device=True)
                       if v.name in wanted and self.is_input(v.id) and v.kind is Kind.SCALAR else v
                       for v in self.values)
        return self if marked == self.values else dataclasses.replace(self, values=marked)

    @property
    def device_scalars(self) -> tuple[int, ...]:
        """The scalar inputs read from device memory, in input order."""
        return tuple(v for v in self.inputs if self.values[v].on_device)

    def is_input(self, value_id: int) -> bool:
        value = self.values[value_id]
        return value.producer is None and value_id not in self._expressions

    @functools.cached_property
    def _leaves(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, tuple[int, ...]] = {}
        for e in self.expressions:  # script order: what an expression reads is done before it
            out[e.value] = tuple(dict.fromkeys(leaf for ref in expr.refs(e.tree) for leaf in out.get(ref, (ref,))))
        return out

    def leaves(self, value_id: int) -> tuple[int, ...]:
        """The inputs and call results a value is made from through expressions,
        in the order written: the value itself unless an expression makes it."""
        return self._leaves.get(value_id, (value_id,))

    def needed_expressions(self, value_ids) -> tuple[int, ...]:
        """The expression values that must be evaluated to have ``value_ids``
        (those of them that are expressions, and every expression they read), in
        an order where each comes after those it reads (value ids ascend so)."""
        out: set[int] = set()
        stack = [v for v in value_ids if v in self._expressions]
        while stack:
            value = stack.pop()
            if value not in out:
                out.add(value)
                stack.extend(r for r in expr.refs(self._expressions[value].tree) if r in self._expressions)
        return tuple(sorted(out))

    @functools.cached_property
    def _reads(self) -> dict[int, tuple[int, ...]]:
        return {call.id: tuple(dict.fromkeys(leaf for arg in call.value_args() for leaf in self.leaves(arg)))
                for call in self.calls}

    def reads(self, call_id: int) -> tuple[int, ...]:
        """The inputs and call results a call reads, directly or through the
        expressions of its scalar arguments, each once."""
        return self._reads[call_id]

    def call(self, call_id: int) -> Call:
        return self.calls[call_id]

    @functools.cached_property
    def _consumers(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {v.id: [] for v in self.values}
        for call in self.calls:
            for arg in self.reads(call.id):
                out[arg].append(call.id)
        return {k: tuple(v) for k, v in out.items()}

    def consumers(self, value_id: int) -> tuple[int, ...]:
        """Calls that read the value, in script order; through an expression too
        (an expression's own value has none: the calls read what it is made of)."""
        return self._consumers[value_id]

    def producer(self, value_id: int) -> int | None:
        return self.values[value_id].producer

    def predecessors(self, call_id: int) -> tuple[int, ...]:
        """Calls whose results this call reads."""
        preds = (self.values[a].producer for a in self.reads(call_id))
        return tuple(dict.fromkeys(p for p in preds if p is not None))

    def successors(self, call_id: int) -> tuple[int, ...]:
        return self.consumers(self.calls[call_id].result)

    @functools.cached_property
    def _reachable(self) -> dict[int, frozenset[int]]:
        reach: dict[int, frozenset[int]] = {}
        for call in reversed(self.calls):
            out: set[int] = set()
            for succ in self.successors(call.id):
                out.add(succ)
                out |= reach[succ]
            reach[call.id] = frozenset(out)
        return reach

    def reaches(self, a: int, b: int) -> bool:
        """True when call ``b`` depends (transitively) on call ``a``."""
        return b in self._reachable[a]

    def independent(self, a: int, b: int) -> bool:
        return a != b and not self.reaches(a, b) and not self.reaches(b, a)

    def is_output(self, value_id: int) -> bool:
        return value_id in self.outputs

    def expression_text(self, value_id: int) -> str:
        """The expression making the value, as a script writes it (``rho / pq``)."""
        return expr.text(self._expressions[value_id].tree, lambda v: self.values[v].label)

    def describe(self) -> str:
        """A readable listing, one call or expression per line in script order, for
        plans and debugging."""
        lines = []
        for call in self.calls:
            args = ", ".join(
                a.text if isinstance(a, Constant) else self.values[a].label
                for a in call.args)
            lines.append((call.result, f"{self.file}:{call.coord.line}: "
                          f"{self.values[call.result].label} = {call.function}({args}){call.origin}"))
        for e in self.expressions:
            lines.append((e.value, f"{self.file}:{e.coord.line}: "
                          f"{self.values[e.value].label} = {self.expression_text(e.value)}"))
        return "\n".join(line for _, line in sorted(lines))


def without_dead_calls(dag: Dag) -> tuple[Dag, tuple[Call | Expression, ...]]:
    """The DAG without the calls and expressions no returned value depends on
    (dead code: their results would be computed and thrown away), and those, in
    script order. Values, calls and expressions are renumbered in order; inputs
    are all kept (the caller still passes them)."""
    live: set[int] = set()
    stack = [dag.producer(leaf) for v in dag.outputs for leaf in dag.leaves(v) if dag.producer(leaf) is not None]
    while stack:
        call = stack.pop()
        if call not in live:
            live.add(call)
            stack.extend(dag.predecessors(call))
    wanted = set(dag.outputs) | {a for c in dag.calls if c.id in live for a in c.value_args()}
    live_expressions = set(dag.needed_expressions(wanted))
    dead = tuple(sorted((*(c for c in dag.calls if c.id not in live),
                         *(e for e in dag.expressions if e.value not in live_expressions)),
                        key=lambda s: s.coord))
    if not dead:
        return dag, ()
    kept = [v for v in dag.values if dag.is_input(v.id) or v.producer in live or v.id in live_expressions]
    value_ids = {v.id: i for i, v in enumerate(kept)}
    call_ids = {c.id: i for i, c in enumerate(c for c in dag.calls if c.id in live)}
    values = tuple(dataclasses.replace(v, id=value_ids[v.id],
                                       producer=None if v.producer is None else call_ids[v.producer])
                   for v in kept)
    calls = tuple(dataclasses.replace(c, id=call_ids[c.id], result=value_ids[c.result],
                                      args=tuple(value_ids[a] if isinstance(a, int) else a for a in c.args))
                  for c in dag.calls if c.id in live)
    expressions = tuple(dataclasses.replace(e, value=value_ids[e.value],
                                            tree=expr.relabelled(e.tree, value_ids.__getitem__))
                        for e in dag.expressions if e.value in live_expressions)
    used = {s for v in values for s in v.dims}
    return dataclasses.replace(dag, values=values, calls=calls, expressions=expressions,
                               inputs=tuple(value_ids[v] for v in dag.inputs),
                               outputs=tuple(value_ids[v] for v in dag.outputs),
                               sizes=tuple(s for s in dag.sizes if s in used)), dead
