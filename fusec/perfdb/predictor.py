"""Prediction from the performance database (paper §4.2).

A kernel's time is its launch cost plus its blocks' time: each block spends,
per serial iteration, max(Σ load/store, Σ compute) over the routines the
kernel calls in its loop (transfers and computation overlap), plus the
routines it calls once before or after the loop; every routine's time is the
one measured in the same environment (block shape, serial iterations and
axis, section, precision) at the kernel's blocks per SM. Blocks run in waves
of (SMs x blocks per SM); the last, partial wave at its own, lower blocks per
SM, where each block runs faster.
Reductions add the analytic model's counter and finish terms, which no
routine measures.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Mapping

from ..codegen.barriers import LOOP
from ..codegen.kernel import Kernel, _routine
from ..dag import Dag
from ..errors import FusecWarning
from ..library.model import Geometry, Library, RoutineKind
from ..predict import AnalyticPredictor
from .probes import RoutineKey
from .store import Database


@dataclasses.dataclass(frozen=True)
class PerfdbPredictor:
    database: Database
    library: Library
    analytic: AnalyticPredictor = AnalyticPredictor()

    @property
    def name(self) -> str:
        return f"perfdb {self.database.slug}"

    def routine_seconds(self, kernel: Kernel, dag: Dag, blocks: float):
        """(per-iteration transfers, per-iteration compute, once per block) seconds,
        or None when a routine was not measured in this environment."""
        transfer = compute = once = 0.0
        for op in kernel.ops:
            if op.step is None:
                continue
            routine = _routine(self.library, dag, kernel.plan, op.step).name
            timing = self.database.timings.get(RoutineKey.of(routine, op.section, kernel.plan, kernel.dtype))
            if timing is None:
                return None
            seconds = timing.at(min(blocks, timing.max_blocks))
            if op.section != LOOP:
                once += seconds
            elif op.step.kind is RoutineKind.COMPUTE:
                compute += seconds
            else:
                transfer += seconds
        return transfer, compute, once

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        sizes = dict(sizes)
        sms = self.database.sms
        grid = kernel.grid(sizes)
        blocks = self.analytic.blocks_per_sm(kernel)  # what registers and shared memory allow
        iters = iterations(kernel, sizes, grid)
        # Blocks run in waves of sms x blocks; the last, partial wave has fewer
        # blocks per SM, each of which then runs faster (less contention).
        full, rest = divmod(grid, sms * blocks)
        streaming = 0.0
        for count, level in ((full, blocks), (1 if rest else 0, rest / sms)):
            if count:
                times = self.routine_seconds(kernel, dag, max(level, 1.0))
                if times is None:
                    _warn_unmeasured(self.database, kernel)
                    return self.analytic.kernel_seconds(kernel, dag, sizes)
                transfer, compute, once = times
                streaming += count * (max(transfer, compute) * iters + once)
        counters, finish = self.analytic.reduction_seconds(kernel, sizes)
        return self.database.launch + max(streaming, counters) + finish


def iterations(kernel: Kernel, sizes: dict[str, int], grid: int) -> float:
    """Serial iterations a block runs, on average (the last blocks may run fewer)."""
    m = kernel.macros()
    if kernel.plan.geometry is Geometry.VECTOR:
        return -(-sizes[kernel.dims[0]] // (m["BLOCK"] * m["VEC"])) / grid
    rows, cols = kernel.grid_extent(sizes)
    if kernel.plan.serial == "rows":
        return -(-sizes[kernel.dims[0]] // m["TILE_ROWS"]) / rows
    return -(-sizes[kernel.dims[1]] // m["TILE_COLS"]) / cols


_warned: set[tuple[str, str]] = set()


def _warn_unmeasured(database: Database, kernel: Kernel) -> None:
    shape = kernel.plan.shape.describe(kernel.dtype)
    if (database.path, shape) not in _warned:
        _warned.add((database.path, shape))
        warnings.warn(FusecWarning(f"performance database {database.path} has no timings for"
                                   f" {shape}; such kernels are predicted by the analytic model"))
