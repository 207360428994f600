"""Striped fusions: a kernel of a cover and the next one, which needs its
reductions' results, in one launch (:mod:`fusec.families.striped`).

In a cover's launch order, two adjacent kernels, both fusions of tile
calls, where the second reads a vector the first finishes by a reduction,
may run as one striped kernel: the second then re-reads the matrix tiles
the first touched from L2 (GEMVER's B, SGEMVT's and ATAX's A). Only adjacent
pairs, one per cover: the three sequences that need it have one barrier each.

The options of a pair: each part's best-predicted implementations whose
serial loop walks across the stripe axis, a few per block size (and, for
stripes of rows, per tile height, which the parts must share), paired at equal
blocks, each with every lag of :data:`~fusec.ir.plan.LAGS`.
"""

from __future__ import annotations

import dataclasses
import itertools

from ..errors import PlanError
from ..families.striped import StripedKernel, assemble, crossing, stripe_axis
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import COLS, LAGS, ROWS, KernelPlan, StripedPlan
from ..ir.steps import function_of
from ..library.model import Kind, Library
from .fusions import Fusion
from .implementations import by_time

PER_PART = 6  # implementations of each part per block size that are paired


@dataclasses.dataclass(frozen=True, order=True)
class StripedFusion:
    """A fusion (the producer) and the next kernel (the consumer) in one launch."""

    producer: Fusion
    consumer: Fusion

    @property
    def parts(self) -> tuple[Fusion, Fusion]:
        return (self.producer, self.consumer)

    @property
    def calls(self) -> tuple[int, ...]:
        return tuple(sorted(self.producer.calls + self.consumer.calls))

    def __len__(self) -> int:
        return len(self.calls)


def striped_covers(dag: Dag, library: Library, covers: list[tuple]) -> list[tuple]:
    """Every cover with one adjacent pair of its kernels merged into a
    :class:`StripedFusion`, where the second reads what the first computes and
    both are tile kernels."""
    out = []
    for cover in covers:
        for i in range(len(cover) - 1):
            producer, consumer = cover[i], cover[i + 1]
            if not (isinstance(producer, Fusion) and isinstance(consumer, Fusion)):
                continue
            if not all(function_of(dag, library, c).hof.nested for c in producer.calls + consumer.calls):
                continue
            if crosses_reduction(dag, library, producer, consumer):
                out.append(cover[:i] + (StripedFusion(producer, consumer),) + cover[i + 2:])
    return out


def crosses_reduction(dag: Dag, library: Library, producer: Fusion, consumer: Fusion) -> bool:
    """The consumer reads a vector the producer finishes by a reduction (else
    nothing needs a barrier between them, or something needs a whole scalar)."""
    values = crossing(dag, producer.calls, consumer.calls)
    kinds = {dag.value(v).kind for v in values}
    reduced = any(function_of(dag, library, dag.value(v).producer).hof.reduce for v in values
                  if dag.value(v).kind is Kind.VECTOR)
    return reduced and Kind.SCALAR not in kinds


def striped_options(dag: Dag, library: Library, fusion: StripedFusion,
                    part_options: list[list[tuple[KernelPlan, Kernel, float]]],
                    predictor, sizes) -> list[tuple[StripedPlan, StripedKernel, float]]:
    """The striped fusion's implementations with their predicted seconds, best first."""
    producers, consumers = part_options
    if not producers or not consumers:
        return []
    first = producers[0]
    axis = stripe_axis(dag, StripedPlan(first[0], consumers[0][0]), first[1])
    if axis not in (ROWS, COLS):
        return []  # a scalar or a vector needed whole crosses: no stripes

    def grouped(options):
        groups: dict[tuple, list] = {}
        for option in options:  # sorted: the first PER_PART of a group are its best
            plan = option[0]
            if plan.serial == axis:
                continue  # its blocks would span stripes
            key = (plan.shape.block, plan.shape.tile_rows if axis == ROWS else None)
            group = groups.setdefault(key, [])
            if len(group) < PER_PART:
                group.append(option)
        return groups

    mine, theirs = grouped(producers), grouped(consumers)
    out = []
    for key in sorted(set(mine) & set(theirs)):
        for (p, pk, _), (c, ck, _), lag in itertools.product(mine[key], theirs[key], LAGS):
            plan = StripedPlan(p, c, lag)
            try:
                kernel = assemble(dag, library, plan, (pk, ck), 0)
            except PlanError:
                continue
            out.append((plan, kernel, predictor.kernel_seconds(kernel, dag, sizes)))
    return sorted(out, key=by_time)
