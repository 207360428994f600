"""The band family: nested functions' band implementations, a block owns whole
rows (``fusec/data/blas/band.cuh``). Lowered like the tile geometry with the
serial loop along the rows (:func:`fusec.lower.kernel.build_kernel`), printed
by :mod:`fusec.emit.band`; priced from its bytes and its column sums' atomics
(the performance database has no band routines)."""

from __future__ import annotations

import math
from typing import Mapping

from ..cost.model import natural_blocks, traffic
from ..cost.registers import estimate
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import PARTIALS_LINE, Kernel
from .base import register
from .tile import TileFamily


class BandFamily(TileFamily):
    """A tile family's kernel, lowered and printed the same way, priced from its bytes."""

    name = "band"

    def analytic_seconds(self, model, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return band_seconds(model, kernel, dag, sizes, model.launch, model.bandwidth, model.sms)

    def perfdb_seconds(self, model, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return band_seconds(model.analytic, kernel, dag, sizes, model.database.launch, model.analytic.bandwidth,
                            model.database.sms)


def band_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float, bandwidth: float,
                 sms: int, *, blocks_per_sm: int | None = None, atomics: bool = True) -> float:
    """A band kernel: its bytes (:func:`traffic`: the column sums' atomics as L2
    traffic) over the copy bandwidth, slowed where too few bytes are requested
    at once (``band_in_flight``: a block's rows wait for all their loads before
    the block's sums, so only what is in flight streams) and by a partial last wave of
    blocks (each block has the same rows, so a wave ends together); one
    launch; and per column sum the last block's pass over its accumulator.
    ``blocks_per_sm``: the blocks an SM holds, where the kernel is part of one
    that sets it (a held fusion's ``per_sm``); else what its registers and
    shared memory allow. The column sums' atomics queue after the streaming
    (:func:`band_atomic_seconds`; ``atomics=False`` leaves them to a caller
    that adds them itself). Fitted to tuning runs of ATAX and BiCGK only:
    ``fusec tune`` decides."""
    analytic = predictor.analytic
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    block = kernel.plan.shape.block
    slots = sms * (blocks_per_sm or natural_blocks(estimate(kernel), kernel.shared_reals * itemsize, block,
                                                   analytic.target))
    grid = kernel.grid(sizes)
    resident = min(grid, slots) * block / sms
    # Loads issued one instance ahead (KernelPlan.ahead) are priced as without: they
    # helped one sequence and hurt another (docs/design/optimization-space.md), so
    # fusec tune decides.
    occupancy = max(min(1.0, resident * max(kernel.loop_bytes, geo.VEC_BYTES) / analytic.band_in_flight), 1e-3)
    waves = grid / slots
    moved = traffic(kernel, dag, sizes, analytic.target.l2_bytes)
    streaming = moved / (bandwidth * occupancy) * math.ceil(waves) / waves
    if atomics:
        streaming += band_atomic_seconds(analytic, kernel, sizes, slots)
    return launch + streaming + band_finish_seconds(analytic, kernel, sizes)


def band_atomic_seconds(analytic, kernel, sizes: Mapping[str, int], slots: int) -> float:
    """The column sums' atomics left queuing once the streaming is done. Every block
    adds into every 128-byte line of each accumulator as it ends, one add per 16-byte
    piece in fp32 (sm_90's vector atomics) and one per element in fp64, and a line
    takes them one at a time (``atomic_line_add``). The blocks of one wave end
    together, so the last wave's adds (``slots`` blocks at most) queue after the
    streaming; earlier waves' adds overlap the later waves' loads (priced without
    them, small band plans measured far slower: docs/design/performance-database.md)."""
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    adds_per_line = PARTIALS_LINE // (geo.VEC_BYTES if itemsize == 4 else itemsize)
    sizes = dict(sizes)
    return sum(min(kernel.reduction_tiles(r, sizes)[1], slots) * adds_per_line for r in kernel.reductions) \
        * analytic.atomic_line_add


def band_finish_seconds(analytic, kernel, sizes: Mapping[str, int], *, after_barrier: bool = False) -> float:
    """A band kernel's column sums' finish: per sum, the last block's ticket and pass
    over its accumulator; ``after_barrier`` (HeldPlan.finish_after): every block's
    pass over its own columns after a grid barrier it meets anyway, no ticket."""
    rounds = math.ceil(sizes[kernel.dims[1]] / (kernel.plan.shape.block * 8))
    tile = 0.0 if after_barrier else analytic.finish_tile
    return len(kernel.reductions) * (tile + rounds * analytic.finish_round)


FAMILY = register(BandFamily())
