"""How a value lies over the ranks, and which rows each rank holds.

A matrix is split by rows: rank r holds a block of whole rows. A vector or a
scalar is *split* (rank r holds the block of elements matching its rows),
*whole* (every rank holds all of it, the same) or *partial* (every rank holds
a whole-sized term, and the value is the sum of the terms over the ranks: a
gemv-T's column sums over the rank's rows, a dot over its elements).

Blocks are contiguous and differ by at most one row: the first ``L % a``
active ranks hold one row more. Only the first ``active`` ranks hold rows
(:func:`fusec.distributed.scaling.active_ranks` decides how many); the others
hold empty blocks and take part in the collectives only.
"""

from __future__ import annotations

import enum


class Layout(str, enum.Enum):
    SPLIT = "split"
    WHOLE = "whole"
    PARTIAL = "partial"

    def __str__(self) -> str:
        return self.value


class Op(str, enum.Enum):
    """A change of layout between stages: a collective, or a rank's own step."""

    ALL_REDUCE = "all-reduce"  # partial -> whole
    REDUCE_SCATTER = "reduce-scatter"  # partial -> split
    ALL_GATHER = "all-gather"  # split -> whole
    BROADCAST = "broadcast"  # whole on rank 0 -> whole on every rank (to ranks that hold no rows)
    SLICE = "slice"  # whole -> split: a view of the rank's rows
    KEEP_ON_ROOT = "keep-on-root"  # whole -> partial: rank 0 keeps it, the others pass zeros
    EMBED = "embed"  # split -> partial: the rank's block in place, zeros elsewhere

    def __str__(self) -> str:
        return self.value

    @property
    def collective(self) -> bool:
        return self in COLLECTIVES


COLLECTIVES = frozenset({Op.ALL_REDUCE, Op.REDUCE_SCATTER, Op.ALL_GATHER, Op.BROADCAST})

# the step that turns a value held one way into another
CONVERSIONS: dict[tuple[Layout, Layout], Op] = {
    (Layout.PARTIAL, Layout.WHOLE): Op.ALL_REDUCE,
    (Layout.PARTIAL, Layout.SPLIT): Op.REDUCE_SCATTER,
    (Layout.SPLIT, Layout.WHOLE): Op.ALL_GATHER,
    (Layout.WHOLE, Layout.SPLIT): Op.SLICE,
    (Layout.WHOLE, Layout.PARTIAL): Op.KEEP_ON_ROOT,
    (Layout.SPLIT, Layout.PARTIAL): Op.EMBED,
}


def conversion(have: Layout, need: Layout) -> Op | None:
    """The step from ``have`` to ``need``; None when they are the same."""
    return None if have is need else CONVERSIONS[have, need]


def block(length: int, rank: int, active: int) -> tuple[int, int]:
    """[lo, hi) of the rows of ``length`` that ``rank`` holds when the first
    ``active`` ranks share them; (length, length) for a rank past those."""
    if rank >= active:
        return length, length
    base, extra = divmod(length, active)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def blocks(length: int, ranks: int, active: int) -> tuple[tuple[int, int], ...]:
    """Every rank's [lo, hi) of ``length`` rows, in rank order."""
    return tuple(block(length, r, active) for r in range(ranks))


def largest_block(length: int, active: int) -> int:
    """The rows rank 0 holds, the most any rank holds (stages are compiled for it)."""
    return -(-length // active)
