"""Predicting how long a kernel runs, without running it.

:class:`Predictor` is the interface the space ranks combinations with. This
module's :class:`AnalyticPredictor` is the provisional model: the bytes a
kernel moves through DRAM over the copy bandwidth, slowed when the grid is
too small or too ragged to keep every SM busy, plus a fixed cost per launch
(leaving that out made the paper mispredict AXPYDOT). The performance
database (measured routine times) plugs in behind the same interface.

Each kernel family prices its own kernels with this model's parameters
(``analytic_seconds`` of the families in :mod:`fusec.families`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from .. import families
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import COLS
from ..target import GpuTarget, reference
from .model import natural_blocks
from .registers import estimate


@dataclasses.dataclass(frozen=True)
class AnalyticPredictor:
    """Bytes over bandwidth plus launch cost, for one GPU (``target``); the other
    parameters were fitted on an H100."""

    target: GpuTarget = dataclasses.field(default_factory=reference)
    launch: float = 3.0e-6  # seconds per kernel launch
    # Bytes requested per SM that keep DRAM busy (fitted, see kernel_seconds). Tile
    # kernels compute between their loads, so they need more requested at once.
    tile_in_flight: int = 120 * 1024
    vector_in_flight: int = 64 * 1024
    # A band kernel's loads leave together and it computes little between them, so fewer
    # bytes keep DRAM busy (fitted on the H100: docs/design/optimization-space.md)
    band_in_flight: int = 46 * 1024
    atomic: float = 5e-9  # seconds per atomic on one counter: they queue at its L2 slice
    # Seconds per atomic add into one 128-byte line of a band kernel's column-sum
    # accumulator: the adds of every block into a line queue at its L2 slice (see
    # band_atomic_seconds). 84 fp64 band plans of BiCGK and ATAX at n = 512-4096 (H100,
    # 2026-11-23) ran a median 1.3 ns per queued add over their price without it; any
    # value from 1 to 3 ns ranked those points' candidates alike.
    atomic_line_add: float = 1.5e-9
    finish_tile: float = 1.5e-6  # seconds per output tile a block finishes: atomic, fence, barriers
    finish_round: float = 0.45e-6  # seconds per round of 8 dependent partial loads of the last block
    # A kernel whose sums run apart (Kernel.sums_apart): its second function's time past the
    # first's end, a fixed part and the partials read back from L2 (see sums_seconds)
    sums_launch: float = 1.35e-6
    sums_rate: float = 7.8e12  # bytes of partials per second
    name: str = "analytic"

    @property
    def bandwidth(self) -> float:
        """Bytes/s of a device-to-device copy (read + write) on the target."""
        return self.target.copy_bandwidth

    @property
    def sms(self) -> int:
        return self.target.sms

    @property
    def analytic(self) -> "AnalyticPredictor":
        """The model whose parameters the families' analytic terms use: this one."""
        return self

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return families.analytic_seconds(self, kernel, dag, sizes)

    def blocks_per_sm(self, kernel: Kernel, registers: int | None = None) -> int:
        return natural_blocks(registers or estimate(kernel),
                              kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize, kernel.block, self.target)

    def reduction_seconds(self, kernel: Kernel, sizes: Mapping[str, int]) -> tuple[float, float]:
        """(counter atomics, finish) of the kernel's reductions: every block counts
        itself in on one counter per output tile (those atomics queue, overlapping
        the streaming), and the last one to arrive sums all partials in the tail.
        A block finishes, one after another, every output tile it stored a partial
        of: ITERS of them when the serial loop walks across the outputs. Each
        costs a fixed part (atomic, fence, barriers) and rounds of dependent
        partial loads; fitted on the H100 from per-kernel times (bench.prediction).
        A grid of one block summing whole vectors has no counter and no sum: its thread 0
        reads its own partial back after the barrier (``fusec.emit.kernel``), one round.
        A kernel whose sums run apart has no counters either: :meth:`sums_seconds`."""
        if kernel.sums_apart:
            return 0.0, self.sums_seconds(kernel, sizes)
        counters, finish = 0.0, 0.0
        for reduction in kernel.reductions:
            arrivals, width = self._arrivals(kernel, reduction, sizes)
            if arrivals == 1 and kernel.sums_whole_vectors:
                finish += self.finish_round
                continue
            counters = max(counters, arrivals * self.atomic)
            tiles = 1
            if reduction.axis is not None and reduction.axis != kernel.plan.serial:
                tiles = kernel.macros()["ITERS"]
            # 8 partials a thread a round, as the sums loaded when the terms were fitted; they load
            # 64 bytes (16 fp32) since, which shortened the tail to 0.64-0.88x (experiments/results/h200-finish-tail.md)
            rounds = math.ceil(arrivals * width / (kernel.plan.shape.block * 8))
            finish += tiles * (self.finish_tile + rounds * self.finish_round)
        return counters, finish

    def sums_seconds(self, kernel: Kernel, sizes: Mapping[str, int]) -> float:
        """The time a kernel whose sums run apart (Kernel.sums_apart) takes past its own end:
        its second function, launched ahead and waiting, sums every output line at once
        across the GPU, so a fixed part (the dependent launch's gap, a round trip of loads)
        and the partials read back from L2. Both fitted to tile plans timed with their sums
        apart and with no finish at all (``python -m experiments.sums_apart_price``; its
        figures in experiments/results/h200-sums-apart-price.md)."""
        partials = 0
        for reduction in kernel.reductions:
            arrivals, width = self._arrivals(kernel, reduction, sizes)
            outputs = sizes[kernel.dims[0 if reduction.axis == COLS else 1]]
            partials += arrivals * -(-outputs // width) * width
        return self.sums_launch + partials * geo.DTYPES[kernel.dtype].itemsize / self.sums_rate

    @staticmethod
    def _arrivals(kernel: Kernel, reduction, sizes) -> tuple[int, int]:
        """Blocks per output tile, and outputs per tile, of a reduction."""
        grid_rows, grid_cols = kernel.grid_extent(dict(sizes))
        if reduction.axis is None:
            return kernel.grid(dict(sizes)), 1
        macros = kernel.macros()
        if reduction.axis == COLS:
            return grid_cols, macros["TILE_ROWS"]
        return grid_rows, macros["TILE_COLS"]


DEFAULT = AnalyticPredictor()
