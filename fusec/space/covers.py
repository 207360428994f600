"""Covers of a script's calls by fusions: which kernels together compute every call once."""

from __future__ import annotations

from ..ir.dag import Dag
from .fusions import Fusion


def kernel_order(dag: Dag, cover: tuple) -> tuple | None:
    """The fusions in an order that respects the DAG, or None if they form a cycle."""
    owner = {c: i for i, f in enumerate(cover) for c in f.calls}
    needs = {i: {owner[p] for c in f.calls for p in dag.predecessors(c)} - {i} for i, f in enumerate(cover)}
    order: list[int] = []
    while len(order) < len(cover):
        ready = [i for i in range(len(cover)) if i not in order and needs[i] <= set(order)]
        if not ready:
            return None
        order.append(min(ready, key=lambda i: cover[i].calls[0]))
    return tuple(cover[i] for i in order)


def covers(dag: Dag, candidates: list[Fusion]) -> list[tuple[Fusion, ...]]:
    """Every exact cover of the calls by fusions, each in launch order."""
    calls = [c.id for c in dag.calls]
    by_first: dict[int, list[Fusion]] = {}
    for fusion in candidates:
        by_first.setdefault(fusion.calls[0], []).append(fusion)
    out = []

    def extend(chosen: list[Fusion], covered: frozenset[int]) -> None:
        left = [c for c in calls if c not in covered]
        if not left:
            ordered = kernel_order(dag, tuple(chosen))
            if ordered is not None:
                out.append(ordered)
            return
        first = left[0]  # the smallest uncovered call starts the next fusion
        for fusion in by_first.get(first, ()):
            if not covered.intersection(fusion.calls):
                extend(chosen + [fusion], covered | frozenset(fusion.calls))

    extend([], frozenset())
    return out
