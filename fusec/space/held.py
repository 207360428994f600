"""Held fusions: the pairs a striped fusion would run in stripes
(:mod:`fusec.space.striped`), run instead as one launch of resident blocks
with one grid barrier, the tiles the consumer reads again held on chip
(:mod:`fusec.families.held`).

The options of a pair: each part's best-predicted implementations of one
shape and serial axis (a few of each), paired where the grid fits on the GPU
at one or two blocks per SM (a block waits for every other, so all must be
resident; the SM's registers and shared memory are split between them), each
with several counts of tiles held in registers (0, 2, 4, ... up to what a
thread's registers allow) and as many in shared memory as fit; band parts
whose producer stores the held matrix (GEMVER's B) also with its held
instances stored after the barrier (``HeldPlan.stores_after``), and those
whose producer has column sums (GEMVER's x, SGEMVT's) also with them finished
after the barrier (``HeldPlan.finish_after``).
"""

from __future__ import annotations

import itertools

from ..cost.registers import ahead, estimate
from ..errors import PlanError
from ..families.held import (
    BAND_HELD_WORDS,
    HeldKernel,
    assemble,
    held_matrix,
    register_margin,
    registers_allowed,
    shared_allowed,
)
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.geometry import Shape
from ..ir.kernel import Kernel
from ..ir.plan import HeldPlan, KernelPlan
from ..library.model import Geometry, Library
from ..target import GpuTarget, reference
from .implementations import by_time
from .striped import StripedFusion

PER_PART = 3  # implementations of each part per shape and serial axis that are paired
# Shapes offered to held fusions besides the space's: at a resident grid a block must
# keep more bytes in flight than the space's 256-thread blocks do
# (experiments/results/h100-held-shapes.md).
HELD_SHAPES = (Shape(Geometry.TILE, 512, 8, 128), Shape(Geometry.TILE, 512, 16, 64),
               Shape(Geometry.TILE, 1024, 16, 64))
# The counts of units held in registers the space offers: tiles 0, 2, 4, ...; instances of
# rows (at most 16 a block) every count, since one more or less measured apart
# (docs/notes/striped-fusion-measurements.md).
REGISTER_STEP = {Geometry.TILE: 2, Geometry.BAND: 1}
MAX_PER_SM = 2  # blocks resident on each SM at most: more would hold little each


def held_options(dag: Dag, library: Library, fusion: StripedFusion,
                 part_options: list[list[tuple[KernelPlan, Kernel, float]]],
                 predictor, sizes) -> list[tuple[HeldPlan, HeldKernel, float]]:
    """The pair's held implementations with their predicted seconds, best first."""
    producers, consumers = part_options
    sizes = dict(sizes)

    def grouped(options):
        groups: dict[tuple, list] = {}
        for option in options:  # sorted: the first PER_PART of a group are its best
            plan, kernel = option[0], option[1]
            if kernel.grid(sizes) > MAX_PER_SM * predictor.sms:
                continue  # the blocks would not all be resident, or hold little each
            group = groups.setdefault((plan.shape, plan.serial), [])
            if len(group) < PER_PART:
                group.append(option)
        return groups

    mine, theirs = grouped(producers), grouped(consumers)
    out = []
    for key in sorted(set(mine) & set(theirs)):
        for (p, pk, _), (c, ck, _) in itertools.product(mine[key], theirs[key]):
            per_sm = -(-pk.grid(sizes) // predictor.sms)
            for (registers, shared), stores_after, finish_after in itertools.product(
                    held_counts(dag, p, (pk, ck), per_sm, predictor.target), (False, True), (False, True)):
                plan = HeldPlan(p, c, registers, shared, per_sm, stores_after, finish_after)
                try:  # either option: band parts only, where there is something to store or finish
                    kernel = assemble(dag, library, plan, (pk, ck), 0, predictor.target)
                except PlanError:
                    continue
                out.append((plan, kernel, predictor.kernel_seconds(kernel, dag, sizes)))
    return sorted(out, key=by_time)


def held_counts(dag: Dag, producer: KernelPlan, parts: tuple[Kernel, Kernel], per_sm: int,
                target: GpuTarget | None = None) -> list[tuple[int, int]]:
    """(tiles in registers, tiles in shared memory) to offer: every REGISTER_STEP
    up to what a thread's registers allow, each with as many tiles in shared
    memory as fit beside the parts' own (at most the block's tiles in all), with
    ``per_sm`` blocks on each SM; only (0, 0) when no matrix can be held."""
    held = held_matrix(dag, parts)
    if held is None:
        return [(0, 0)]
    itemsize = geo.DTYPES[parts[0].dtype].itemsize
    slots = next(e.size for e in parts[0].elements if e.value == held)
    block, tiles = producer.shape.block, producer.shape.iters
    first, second = parts  # as HeldKernel.estimated_registers counts them, less the held
    own = max(estimate(first), estimate(second) + ahead(second))
    target = target or reference()
    spare = registers_allowed(block, per_sm, target) - own - register_margin(producer.geometry)
    if producer.geometry is Geometry.BAND:
        spare = min(spare, BAND_HELD_WORDS)
    most_registers = max(0, min(tiles, spare // (slots * itemsize // 4)))
    static = sum(k.shared_reals for k in parts) * itemsize
    fit_shared = max(0, (shared_allowed(per_sm, target) - static) // (slots * block * itemsize))
    return [(registers, min(fit_shared, tiles - registers))
            for registers in range(0, most_registers + 1, REGISTER_STEP[producer.geometry])]
