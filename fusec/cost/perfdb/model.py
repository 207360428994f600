"""Prediction from the performance database (paper §4.2).

A kernel's time is its launch cost plus its blocks' time: each block spends,
per serial iteration, max(transfers, Σ compute) over the routines the kernel
calls in its loop (transfers and computation overlap), plus the routines it
calls once before or after the loop. Every routine's time is the one
measured in the same environment (block shape, serial iterations and axis,
section, precision) at the kernel's blocks per SM.

Transfers are not simply summed: loads issued back to back overlap, so a
block waits for the slowest one, unless together they need more of the
memory system than that: transfers = max(max_i t_i, blocks x Σ_i share_i),
where share_i is routine i's memory time per block when it saturates memory
(:attr:`Timing.memory_share`). On the H100 summing overpredicted a lone gemv
by its vector load, which hides entirely behind the matrix's.

Blocks per SM: what the kernel's registers (at least those of its routines'
probes, which nvcc measured) and shared memory allow. Blocks run in waves of
(SMs x blocks per SM); the last, partial wave at its own, lower blocks per SM,
where each block runs faster. Reductions add the analytic model's counter and
finish terms, which no routine measures.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Mapping

from ...ir import geometry as geo
from ...lower.barriers import LOOP
from ...lower.kernel import Kernel, _routine
from ...ir.dag import Dag
from ...errors import FusecWarning
from ...library.model import Geometry, Library, RoutineKind
from ..analytic import (AnalyticPredictor, band_seconds, held_seconds, is_held, is_horizontal, is_striped, natural_blocks,
                       striped_seconds, traffic)
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

    @property
    def sms(self) -> int:
        """The GPU's multiprocessors, as the database measured them."""
        return self.database.sms

    def routine_seconds(self, kernel: Kernel, dag: Dag, blocks: float):
        """(per-iteration transfers, per-iteration compute, once per block) seconds,
        or None when a routine was not measured in this environment. Sums are
        exact (math.fsum), so routine orders the model cannot tell apart tie
        exactly and the space's tie-break decides between them."""
        timings = self.timings(kernel, dag)
        if timings is None:
            return None
        transfers = [t for op, t in timings if op.section == LOOP and op.step.kind is not RoutineKind.COMPUTE]
        computes = [t for op, t in timings if op.section == LOOP and op.step.kind is RoutineKind.COMPUTE]
        transfer = max([t.at(blocks) for t in transfers] + [blocks * math.fsum(t.memory_share for t in transfers)])
        compute = math.fsum(t.at(blocks) for t in computes)
        once = math.fsum(t.at(blocks) for op, t in timings if op.section != LOOP)
        return transfer, compute, once

    def timings(self, kernel: Kernel, dag: Dag):
        """(op, Timing) of every routine call of the kernel, or None when one was
        not measured in this environment."""
        out = []
        for op in kernel.ops:
            if op.step is None:
                continue
            routine = _routine(self.library, dag, kernel.plan, op.step).name
            timing = self.database.timings.get(RoutineKey.of(routine, op.section, kernel.plan, kernel.dtype))
            if timing is None:
                return None
            out.append((op, timing))
        return out

    def blocks_per_sm(self, kernel: Kernel, dag: Dag) -> int:
        """What registers and shared memory allow; the kernel has at least the
        registers of its routines' probes."""
        timings = self.timings(kernel, dag) or []
        registers = max([kernel.estimated_registers] + [t.registers for _, t in timings])
        shared = kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize
        return natural_blocks(registers, shared, kernel.plan.shape.block)

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        if is_striped(kernel):
            return striped_seconds(self, kernel, dag, sizes, self.database.launch, self.analytic.bandwidth,
                                   self.database.sms)
        if is_held(kernel):
            return held_seconds(self, kernel, dag, sizes, self.database.launch, self.analytic.bandwidth)
        if is_horizontal(kernel):  # issue 6: see horizontal_seconds at the end of the module
            return horizontal_seconds(self, kernel, dag, sizes)
        if kernel.plan.geometry is Geometry.BAND:  # no band routines are timed yet
            return band_seconds(self.analytic, kernel, dag, sizes, self.database.launch, self.analytic.bandwidth,
                                self.database.sms)
        sizes = dict(sizes)
        sms = self.database.sms
        grid = kernel.grid(sizes)
        blocks = self.blocks_per_sm(kernel, dag)
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


# --------------------------------------------------------------------------- horizontal fusion
# (issue 6) Kept apart from the model above, which it only calls.


def horizontal_seconds(predictor: PerfdbPredictor, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
    """A horizontal fusion (HFuse): its parts run side by side in every block.

    The combined block (the parts' threads together, the most registers any
    part needs or its probes used, the parts' shared memory together) sets
    the blocks per SM. Each part's blocks run in waves at that many blocks per
    SM, each routine at its measured time for that level, as in
    :meth:`PerfdbPredictor.kernel_seconds`; the slowest part bounds the kernel.
    The parts share DRAM, so the kernel also takes at least all their bytes
    over the copy bandwidth (the analytic model's traffic). One launch; the
    reductions' terms of the part that finishes last. The register bound is
    not modelled (see :meth:`fusec.cost.analytic.AnalyticPredictor.horizontal_seconds`).
    """
    sizes = dict(sizes)
    sms = predictor.database.sms
    registers = max(max([p.estimated_registers] + [t.registers for _, t in predictor.timings(p, dag) or []])
                    for p in kernel.parts)
    blocks = natural_blocks(registers, kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize, kernel.block)
    slowest, moved, counters, finish = 0.0, 0.0, 0.0, 0.0
    for part in kernel.parts:
        grid = part.grid(sizes)
        iters = iterations(part, sizes, grid)
        full, rest = divmod(grid, sms * blocks)
        streaming = 0.0
        for count, level in ((full, blocks), (1 if rest else 0, rest / sms)):
            if count:
                times = predictor.routine_seconds(part, dag, max(level, 1.0))
                if times is None:
                    _warn_unmeasured(predictor.database, part)
                    return predictor.analytic.kernel_seconds(kernel, dag, sizes)
                transfer, compute, once = times
                streaming += count * (max(transfer, compute) * iters + once)
        slowest = max(slowest, streaming)
        moved += traffic(part, dag, sizes)
        part_counters, part_finish = predictor.analytic.reduction_seconds(part, sizes)
        counters, finish = max(counters, part_counters), max(finish, part_finish)
    streaming = max(slowest, moved / predictor.analytic.bandwidth)
    return predictor.database.launch + max(streaming, counters) + finish
