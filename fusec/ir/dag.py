"""The dependency DAG of a checked script (paper §4.2).

Vertices are calls of elementary functions; edges are the values one call
produces and another reads. Names are single-assignment here: a script that
reassigns ``x`` gets a second :class:`Value` for it. Every record keeps the
source coordinate it came from, so later stages can point back at the script.
"""

from __future__ import annotations

import dataclasses
import functools

from ..errors import Coord
from ..library.model import Kind


@dataclasses.dataclass(frozen=True)
class Value:
    """A single-assignment value: a script input or the result of one call."""

    id: int
    name: str  # the name in the script
    version: int  # 1 for the first assignment (or the input), 2 for the next...
    kind: Kind
    dims: tuple[str, ...]  # size symbols, e.g. ("m", "n")
    coord: Coord = dataclasses.field(compare=False)  # declaration or assignment
    producer: int | None = None  # id of the call that assigns it; None for inputs

    @property
    def label(self) -> str:
        """How messages and generated comments name it: ``x`` or ``x#2``."""
        return self.name if self.version == 1 else f"{self.name}#{self.version}"

    @property
    def c_name(self) -> str:
        """A C identifier that no other value and no C keyword can take."""
        return f"v{self.id}_{self.name}"


@dataclasses.dataclass(frozen=True)
class Constant:
    """A number written in the script as a scalar argument."""

    value: float
    text: str
    coord: Coord = dataclasses.field(compare=False)

    @property
    def literal(self) -> str:
        """The value as a C double literal: Python's shortest round-trip form
        (``10.0``, ``0.5``, ``1e-05``), never the script's text, which C may read
        otherwise (``010`` is octal there)."""
        return repr(float(self.value))


Argument = int | Constant  # a value id, or a literal


@dataclasses.dataclass(frozen=True)
class Call:
    id: int
    function: str
    args: tuple[Argument, ...]  # in the function's parameter order
    result: int  # value id
    coord: Coord = dataclasses.field(compare=False)
    source_line: str = dataclasses.field(default="", compare=False)

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

    def value(self, value_id: int) -> Value:
        return self.values[value_id]

    def call(self, call_id: int) -> Call:
        return self.calls[call_id]

    @functools.cached_property
    def _consumers(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {v.id: [] for v in self.values}
        for call in self.calls:
            for arg in dict.fromkeys(call.value_args()):
                out[arg].append(call.id)
        return {k: tuple(v) for k, v in out.items()}

    def consumers(self, value_id: int) -> tuple[int, ...]:
        """Calls that read the value, in script order."""
        return self._consumers[value_id]

    def producer(self, value_id: int) -> int | None:
        return self.values[value_id].producer

    def predecessors(self, call_id: int) -> tuple[int, ...]:
        """Calls whose results this call reads."""
        preds = (self.values[a].producer for a in self.calls[call_id].value_args())
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

    def describe(self) -> str:
        """A readable listing, one call per line, for plans and debugging."""
        lines = []
        for call in self.calls:
            args = ", ".join(
                a.text if isinstance(a, Constant) else self.values[a].label
                for a in call.args)
            lines.append(f"{self.file}:{call.coord.line}: "
                         f"{self.values[call.result].label} = {call.function}({args})")
        return "\n".join(lines)


def without_dead_calls(dag: Dag) -> tuple[Dag, tuple[Call, ...]]:
    """The DAG without the calls no returned value depends on (dead code: their
    results would be computed and thrown away), and those calls. Calls and the
    values they make are renumbered in order; inputs are all kept (the caller
    still passes them)."""
    live: set[int] = set()
    stack = [dag.producer(v) for v in dag.outputs if dag.producer(v) is not None]
    while stack:
        call = stack.pop()
        if call not in live:
            live.add(call)
            stack.extend(dag.predecessors(call))
    dead = tuple(c for c in dag.calls if c.id not in live)
    if not dead:
        return dag, ()
    kept = [v for v in dag.values if v.producer is None or v.producer in live]
    value_ids = {v.id: i for i, v in enumerate(kept)}
    call_ids = {c.id: i for i, c in enumerate(c for c in dag.calls if c.id in live)}
    values = tuple(dataclasses.replace(v, id=value_ids[v.id],
                                       producer=None if v.producer is None else call_ids[v.producer])
                   for v in kept)
    calls = tuple(dataclasses.replace(c, id=call_ids[c.id], result=value_ids[c.result],
                                      args=tuple(value_ids[a] if isinstance(a, int) else a for a in c.args))
                  for c in dag.calls if c.id in live)
    used = {s for v in values for s in v.dims}
    return dataclasses.replace(dag, values=values, calls=calls,
                               inputs=tuple(value_ids[v] for v in dag.inputs),
                               outputs=tuple(value_ids[v] for v in dag.outputs),
                               sizes=tuple(s for s in dag.sizes if s in used)), dead
