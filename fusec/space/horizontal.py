"""Horizontal fusions (HFuse): independent kernels of a cover in one launch.

Two kernels of a cover may run side by side in one kernel when no path of
the DAG joins a call of one to a call of the other, and merging them leaves
the cover's kernels an order to run in (they are adjacent in some launch
order). Either may be a single call or a vertical fusion. Only pairs are
fused (a cover may hold several disjoint pairs): the space stays small, and
two parts are what HFuse itself fuses.

The options of a pair are HFuse's search (its Fig. 6), over fusec's shapes:

- the split of the thread space: each part's block size, from the shapes its
  routines run in (128, 256 or 512 threads: whole warps, steps of 128 as in
  HFuse), at most 1024 together; each part at its best-predicted
  implementation for that many threads (HFuse keeps each kernel's code and
  searches the split only);
- the register bound: each split also with HFuse's bound
  (:func:`~fusec.families.horizontal.register_bound`), where it is below the
  registers the kernel is estimated to need (above, it changes nothing).

Splits whose shared memory exceeds what a block may declare are left out.
"""

from __future__ import annotations

import dataclasses
import itertools

from ..cost.registers import estimate
from ..errors import PlanError
from ..families.horizontal import HorizontalKernel, assemble, register_bound
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import HorizontalPlan, KernelPlan
from ..library.model import Library
from .fusions import Fusion


@dataclasses.dataclass(frozen=True, order=True)
class HorizontalFusion:
    """Fusions (each a kernel of a cover) that run side by side in one kernel."""

    parts: tuple[Fusion, ...]

    @property
    def calls(self) -> tuple[int, ...]:
        return tuple(sorted(c for p in self.parts for c in p.calls))

    def __len__(self) -> int:
        return len(self.calls)


def independent(dag: Dag, a: Fusion, b: Fusion) -> bool:
    """No path of the DAG between a call of ``a`` and a call of ``b``."""
    return not any(dag.reaches(x, y) or dag.reaches(y, x) for x in a.calls for y in b.calls)


def horizontal_covers(dag: Dag, covers: list[tuple[Fusion, ...]], order) -> list[tuple]:
    """Every cover with one or more disjoint pairs of its independent kernels
    merged into a :class:`HorizontalFusion`, in launch order (``order`` puts a
    cover's kernels in an order that respects the DAG, or returns None)."""
    out = []
    for cover in covers:
        pairs = [(a, b) for a, b in itertools.combinations(cover, 2) if independent(dag, a, b)]
        for chosen in _matchings(pairs):
            merged = {f for pair in chosen for f in pair}
            slots = tuple(f for f in cover if f not in merged) + tuple(
                HorizontalFusion(tuple(sorted(pair, key=lambda f: f.calls))) for pair in chosen)
            ordered = order(dag, slots)
            if ordered is not None:
                out.append(ordered)
    return out


def _matchings(pairs: list[tuple]) -> list[list[tuple]]:
    """Every non-empty set of pairwise disjoint pairs."""
    out: list[list[tuple]] = []

    def extend(start: int, chosen: list[tuple], used: set) -> None:
        for i in range(start, len(pairs)):
            a, b = pairs[i]
            if a in used or b in used:
                continue
            now = chosen + [pairs[i]]
            out.append(now)
            extend(i + 1, now, used | {a, b})

    extend(0, [], set())
    return out


def best_per_block(options: list[tuple[KernelPlan, Kernel, float]]) -> list[tuple[KernelPlan, Kernel, float]]:
    """A part's best-predicted implementation for each block size (``options`` sorted)."""
    best: dict[int, tuple[KernelPlan, Kernel, float]] = {}
    for option in options:
        best.setdefault(option[0].shape.block, option)
    return sorted(best.values(), key=lambda o: o[0].shape.block)


def horizontal_options(dag: Dag, library: Library, fusion: HorizontalFusion,
                       part_options: list[list[tuple[KernelPlan, Kernel, float]]],
                       predictor, sizes) -> list[tuple[HorizontalPlan, HorizontalKernel, float]]:
    """The horizontal fusion's implementations with their predicted seconds,
    best first (an unbounded kernel before its bounded twin on a tie)."""
    out = []
    for choice in itertools.product(*(best_per_block(o) for o in part_options)):
        plans = tuple(plan for plan, _, _ in choice)
        kernels = tuple(kernel for _, kernel, _ in choice)
        variants = [HorizontalPlan(plans)]
        bound = register_bound(kernels, target=predictor.target)
        if bound < max(estimate(k) for k in kernels):
            variants.append(HorizontalPlan(plans, bound))
        for plan in variants:
            try:
                kernel = assemble(dag, library, plan, kernels, 0, predictor.target)
            except PlanError:
                continue  # too many threads or too much shared memory for one block
            out.append((plan, kernel, predictor.kernel_seconds(kernel, dag, sizes)))
    return sorted(out, key=lambda o: (o[2], o[0].bound > 0, o[0]))
