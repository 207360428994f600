"""The script text of a stage: the calls of one stage over the values it reads
and returns, each declared in the layout the stage sees it in. A split value's
rows take a size of their own (``m_local``), so a square matrix split by rows
(GESUMMV's ``A[n, n]``) becomes ``A[n_local, n]`` and still checks."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..ir import expr
from ..ir.dag import Constant, Dag
from ..library.model import Kind
from .layout import Layout
from .plan import StageArg

KEYWORDS = frozenset({"matrix", "vector", "scalar", "input", "return"})


class Names:
    """Fresh script names for values in a layout: the script's own name where it
    can be kept, else one no other value, size or keyword takes."""

    def __init__(self, dag: Dag, produced: dict[int, Layout]):
        self._taken = {v.name for v in dag.values} | KEYWORDS
        self._produced = produced
        self._names: dict[tuple[int, Layout], str] = {}
        for v in dag.values:  # the names of the values as made, first: they read as the script does
            base = v.name if v.version == 1 else self._fresh(f"{v.name}_{v.version}")
            self._taken.add(base)
            self._names[v.id, produced[v.id]] = base
        self._dag = dag

    def _fresh(self, name: str) -> str:
        while name in self._taken:
            name += "_"
        return name

    def __call__(self, value: int, layout: Layout) -> str:
        key = (value, layout)
        if key not in self._names:
            base = self._names[value, self._produced[value]]
            self._names[key] = self._fresh(f"{base}_{layout}")
            self._taken.add(self._names[key])
        return self._names[key]


def local_sizes(dag: Dag) -> dict[str, str]:
    """Each size's name for one rank's rows of it: ``m`` -> ``m_local``."""
    taken = set(dag.sizes)
    out = {}
    for symbol in dag.sizes:
        name = f"{symbol}_local"
        while name in taken:
            name += "_"
        taken.add(name)
        out[symbol] = name
    return out


def dims_of(dag: Dag, value: int, layout: Layout, local: dict[str, str]) -> tuple[str, ...]:
    dims = dag.value(value).dims
    if layout is Layout.SPLIT and dims:
        return (local[dims[0]],) + tuple(dims[1:])
    return tuple(dims)


def evaluated_before(dag: Dag, calls: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """For each of ``calls``, the scalar expressions evaluated just before it: those it reads
    (through one another too) that no call before it in ``calls`` read, in script order."""
    out, seen = {}, set()
    for call in calls:
        out[call] = tuple(v for v in dag.needed_expressions(dag.call(call).value_args()) if v not in seen)
        seen.update(out[call])
    return out


def stage_text(dag: Dag, title: str, calls: tuple[int, ...], needs: Mapping[int, tuple[Layout | None, ...]],
               inputs: tuple[StageArg, ...], internal: tuple[StageArg, ...], outputs: tuple[StageArg, ...],
               local: dict[str, str], evaluated: tuple[StageArg, ...] = ()) -> str:
    """The script of a stage. ``internal`` are the values its calls make (in
    the layout they make them), ``inputs`` what it reads from outside;
    ``needs[call]`` the layout each argument of a call is read in; ``evaluated``
    the scalar expressions its calls read, each evaluated here from whole
    operands (planner, 5.), in script order."""
    lines = [f"# {title}"]
    named = {(a.value, a.layout): a.name for a in inputs + internal + evaluated}
    declared: dict[Kind, list[str]] = {Kind.MATRIX: [], Kind.VECTOR: [], Kind.SCALAR: []}
    for arg in inputs + internal + evaluated:
        value = dag.value(arg.value)
        dims = dims_of(dag, arg.value, arg.layout, local)
        declared[value.kind].append(arg.name + (f"[{', '.join(dims)}]" if dims else ""))
    for kind in (Kind.MATRIX, Kind.VECTOR, Kind.SCALAR):
        if declared[kind]:
            lines.append(f"{kind} {', '.join(declared[kind])};")
    lines.append(f"input {', '.join(a.name for a in inputs)};")
    made = {a.value: a.name for a in internal}
    for call_id, before in evaluated_before(dag, calls).items():
        call = dag.call(call_id)
        for v in before:
            text = expr.text(dag.expression(v).tree, lambda ref: named[ref, Layout.WHOLE])
            lines.append(f"{named[v, Layout.WHOLE]} = {text};"
                         f"  # {Path(dag.expression(v).coord.file).name}:{dag.expression(v).coord.line}")
        args = []
        for index, arg in enumerate(call.args):
            if isinstance(arg, Constant):
                args.append(arg.text)
            else:
                args.append(named[arg, needs[call_id][index]])
        # the file's name, not its path: a stage's tuned plan is found by its text (planner._stages)
        lines.append(f"{made[call.result]} = {call.function}({', '.join(args)});"
                     f"  # {Path(call.coord.file).name}:{call.coord.line}")
    lines.append(f"return {', '.join(a.name for a in outputs)};")
    return "\n".join(lines) + "\n"
