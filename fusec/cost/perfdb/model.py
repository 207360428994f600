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
from typing import Mapping

from ... import families
from ...ir import geometry as geo
from ...ir.barriers import LOOP
from ...ir.dag import Dag
from ...ir.kernel import Kernel
from ...library.model import Library, RoutineKind
from ...lower.kernel import routine_of
from ...target import GpuTarget, from_record
from ..analytic import AnalyticPredictor
from ..model import iterations, natural_blocks
from ..registers import estimate
from .probes import RoutineKey
from .store import Database


@dataclasses.dataclass(frozen=True)
class PerfdbPredictor:
    database: Database
    library: Library
    analytic: AnalyticPredictor | None = None  # the model of the database's GPU where none is given
    target: GpuTarget | None = None  # the GPU the database was built on, from its record where none is given

    def __post_init__(self):
        if self.target is None:
            object.__setattr__(self, "target", from_record(dict(self.database.device)))
        if self.analytic is None:
            object.__setattr__(self, "analytic", AnalyticPredictor(target=self.target))

    @property
    def name(self) -> str:
        return f"perfdb {self.database.slug}"

    @property
    def sms(self) -> int:
        """The GPU's multiprocessors, as the database measured them."""
        return self.database.sms

    def routine_seconds(self, kernel: Kernel, dag: Dag, blocks: float, timings=None):
        """(per-iteration transfers, per-iteration compute, once per block) seconds,
        or None when a routine was not measured in this environment. Sums are
        exact (math.fsum), so routine orders the model cannot tell apart tie
        exactly and the space's tie-break decides between them. ``timings``: the
        kernel's :meth:`timings`, where the caller has them."""
        timings = self.timings(kernel, dag) if timings is None else timings
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
            routine = routine_of(self.library, dag, kernel.plan, op.step).name
            timing = self.database.timings.get(RoutineKey.of(routine, op.section, kernel.plan, kernel.dtype))
            if timing is None:
                return None
            out.append((op, timing))
        return out

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return families.perfdb_seconds(self, kernel, dag, sizes)

    def streaming_seconds(self, kernel: Kernel, dag: Dag, sizes: dict[str, int], blocks: int) -> float | None:
        """The kernel's blocks' time at ``blocks`` per SM from its routines' timings, or None
        when one was not measured. Blocks run in waves of sms x blocks; the last, partial
        wave has fewer blocks per SM, each of which then runs faster (less contention)."""
        sms = self.database.sms
        grid = kernel.grid(sizes)
        iters = iterations(kernel, sizes, grid)
        full, rest = divmod(grid, sms * blocks)
        timings = self.timings(kernel, dag)  # once for both waves
        if timings is None:
            return None
        streaming = 0.0
        for count, level in ((full, blocks), (1 if rest else 0, rest / sms)):
            if count:
                times = self.routine_seconds(kernel, dag, max(level, 1.0), timings)
                if times is None:
                    return None
                transfer, compute, once = times
                streaming += count * (max(transfer, compute) * iters + once)
        return streaming

    def blocks_per_sm(self, kernel: Kernel, dag: Dag) -> int:
        """What registers and shared memory allow; the kernel has at least the
        registers of its routines' probes."""
        timings = self.timings(kernel, dag) or []
        registers = max([estimate(kernel)] + [t.registers for _, t in timings])
        shared = kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize
        return natural_blocks(registers, shared, kernel.plan.shape.block, self.target)






