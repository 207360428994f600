"""Fusions: the fusible subgraphs of the DAG (paper §3.2, §4.2).

A set of calls may share one kernel when

- they have the same nesting depth and cover the same index space (a map's
  consumer instance then runs in its producer's block: same element shapes,
  same tile, same chunk);
- no call reads the *final* result of a reduction made in the set (that needs
  a global barrier; partial reductions may still share on-chip data), directly
  or through a scalar expression of its arguments (``alpha = rho / pq``), nor
  reads in its finish epilogue a value made in the set; except, in the band
  geometry (a block owns whole rows), a sum along the rows, which is whole
  inside the block (ATAX's ``t = A x`` feeding ``y = A^T t``): such a set
  fuses in the band geometry only, and every call needs a band implementation;
- the set is convex: no path leaves it and comes back (that call outside
  would have to run both before and after the kernel);
- it spares a memory transfer: its calls are connected by a value one makes
  and another reads, or by an input they share. Sets that only sit side by
  side spare nothing (that is horizontal fusion, a different thing).
"""

from __future__ import annotations

import dataclasses
import itertools

from ..ir.dag import Dag
from ..ir.steps import array_args, call_dims, function_of
from ..library.model import Geometry, Library


@dataclasses.dataclass(frozen=True, order=True)
class Fusion:
    calls: tuple[int, ...]  # in DAG order

    def __len__(self) -> int:
        return len(self.calls)


def index_space(dag: Dag, library: Library, call: int) -> tuple:
    """Geometry and index space (size symbols) a call runs over."""
    function = function_of(dag, library, call)
    bound = call_dims(dag, library, call)
    if function.hof.nested:
        return Geometry.TILE, bound[function.rows_dim], bound[function.cols_dim]
    vector = (function.array_params or (function.result,))[0]
    return Geometry.VECTOR, bound[vector.dims[0]]


def _shares(dag: Dag, library: Library, a: int, b: int) -> bool:
    """Fusing a and b spares a transfer: an edge between them or a common input."""
    if a in dag.predecessors(b) or b in dag.predecessors(a):
        return True
    inputs_a = {v for _, v in array_args(dag, library, a)}
    return any(v in inputs_a for _, v in array_args(dag, library, b))


def _connected(dag: Dag, library: Library, calls: tuple[int, ...]) -> bool:
    seen, frontier = {calls[0]}, [calls[0]]
    while frontier:
        a = frontier.pop()
        for b in calls:
            if b not in seen and _shares(dag, library, a, b):
                seen.add(b)
                frontier.append(b)
    return len(seen) == len(calls)


def has_band(dag: Dag, library: Library, call: int) -> bool:
    """Whether the call's function has a band implementation."""
    return any(i.geometry is Geometry.BAND for i in function_of(dag, library, call).implementations)


def _whole_in_band(dag: Dag, library: Library, call: int) -> bool:
    """A nested sum along the rows (a result indexed by rows): whole inside a band's block."""
    function = function_of(dag, library, call)
    return function.hof.nested and function.hof.reduce and function.hof.axis == function.cols_dim


def adds_with_atomics(dag: Dag, library: Library, plan) -> bool:
    """Whether a kernel plan is a band kernel with a sum down its columns (a result
    indexed by columns), which its blocks add with atomics in the order they arrive,
    so that two runs may differ in the last bits (:attr:`Kernel.reproducible`)."""
    if plan.composite:  # a held fusion's band parts
        return any(adds_with_atomics(dag, library, part) for part in plan.parts)
    if plan.geometry is not Geometry.BAND:
        return False
    for call in plan.calls:
        hof = function_of(dag, library, call).hof
        if hof.reduce and not _whole_in_band(dag, library, call):
            return True
    return False


def why_not_fusible(dag: Dag, library: Library, calls: tuple[int, ...],
                    geometry: Geometry | None = None) -> str | None:
    """None when the calls may share a kernel (in ``geometry``: BAND for the band
    implementations, else the functions' own); otherwise the rule they break."""
    members = frozenset(calls)
    if geometry is Geometry.BAND:
        lacking = [c for c in calls if not has_band(dag, library, c)]
        if lacking:
            return f"call {lacking[0]} ({dag.call(lacking[0]).function}) has no band implementation"
    spaces = {index_space(dag, library, c) for c in calls}
    if len(spaces) != 1:
        return "different nesting depths or index spaces"
    for call in calls:
        function = function_of(dag, library, call)
        record = dag.call(call)
        for param, arg in zip(function.params, record.args):
            if not isinstance(arg, int):
                continue
            for leaf in dag.leaves(arg):  # a scalar expression's operands, as if read directly
                producer = dag.producer(leaf)
                if producer not in members:
                    continue
                read = dag.value(leaf).label + (f" (in {dag.value(arg).label})" if leaf != arg else "")
                if function_of(dag, library, producer).hof.reduce and not (
                        geometry is Geometry.BAND and _whole_in_band(dag, library, producer)):
                    return (f"call {call} reads {read}, the final result of a reduction"
                            " in the same kernel (a global barrier)")
                if param.name in function.finish_only:
                    return f"call {call} finishes with {read}, made in the same kernel"
    for a in calls:
        for b in calls:
            if a == b or not dag.reaches(a, b):
                continue
            for middle in range(len(dag.calls)):
                if middle not in members and dag.reaches(a, middle) and dag.reaches(middle, b):
                    return f"not convex: call {middle} lies between calls {a} and {b}"
    if len(calls) > 1 and not _connected(dag, library, calls):
        return "spares no memory transfer (no value or input shared)"
    return None


def fusions(dag: Dag, library: Library) -> list[Fusion]:
    """Every fusion of the DAG, singletons (unfused kernels) included."""
    out = []
    ids = [c.id for c in dag.calls]
    by_space: dict[tuple, list[int]] = {}
    for call in ids:
        by_space.setdefault(index_space(dag, library, call), []).append(call)
    for calls in by_space.values():
        for size in range(1, len(calls) + 1):
            for subset in itertools.combinations(calls, size):
                if why_not_fusible(dag, library, subset) is None or (
                        why_not_fusible(dag, library, subset, Geometry.BAND) is None):
                    out.append(Fusion(subset))
    return sorted(out, key=lambda f: (len(f), f.calls))
