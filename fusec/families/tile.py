"""The tile/vector family (paper Algorithm 1): one kernel plan in the vector
geometry (unnested functions, chunks of consecutive values) or the tile
geometry (nested functions, tiles of the matrix), its serial loop along one
axis, reductions finished across blocks by the last block to arrive, or, for a tile kernel
alone on a GPU with dependent launches, by a second function (Kernel.sums_apart; priced by
AnalyticPredictor.sums_seconds)."""

from __future__ import annotations

from typing import Mapping

from ..cost.model import traffic, warn_unmeasured
from ..emit.kernel import emit_kernel
from ..emit.plan_text import kernel_lines
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import KernelPlan
from ..library.model import Geometry, Library
from ..lower.kernel import build_kernel
from ..target import GpuTarget
from .base import register


class TileFamily:
    name = "tile"
    joint = ""
    note = ""

    def build(self, dag: Dag, library: Library, plan: KernelPlan, dtype: str, index: int, *,
              alone: bool = False, target: GpuTarget | None = None) -> Kernel:
        # a kernel alone turns (Kernel.turns); the parts of fusions take their items otherwise
        return build_kernel(dag, library, plan, dtype, index, turns=alone, target=target)

    def emit(self, kernel: Kernel, dag: Dag, library: Library) -> str:
        return emit_kernel(kernel, dag, library)

    def analytic_seconds(self, model, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        block = kernel.plan.shape.block
        blocks_per_sm = model.blocks_per_sm(kernel)
        grid = kernel.grid(dict(sizes))
        slots = model.sms * blocks_per_sm
        resident = min(grid, slots) * block / model.sms  # threads per SM
        # DRAM stays busy when enough bytes are requested at once (loads and stores
        # per thread per iteration, times resident threads): below the analytic model's
        # thresholds fewer bytes are in flight than DRAM's latency needs
        # (docs/design/optimization-space.md).
        in_flight = resident * max(kernel.loop_bytes, geo.VEC_BYTES)
        target = model.tile_in_flight if kernel.plan.geometry is not Geometry.VECTOR else model.vector_in_flight
        occupancy = max(min(1.0, in_flight / target), 1e-3)
        moved = traffic(kernel, dag, sizes, model.target.l2_bytes)
        streaming = moved / (model.bandwidth * occupancy)
        # Blocks do not finish together: at the end, SMs idle for about half the
        # time one block takes (its bytes, shared with the blocks beside it).
        block_seconds = moved / grid * min(grid, slots) / model.bandwidth
        counters, finish = model.reduction_seconds(kernel, sizes)
        return model.launch + max(streaming, counters) + 0.5 * block_seconds + finish

    def perfdb_seconds(self, model, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        sizes = dict(sizes)
        streaming = model.streaming_seconds(kernel, dag, sizes, model.blocks_per_sm(kernel, dag))
        if streaming is None:
            warn_unmeasured(model.database, kernel)
            return model.analytic.kernel_seconds(kernel, dag, sizes)
        counters, finish = model.analytic.reduction_seconds(kernel, sizes)
        return model.database.launch + max(streaming, counters) + finish

    def plan_text(self, generated, kernel: Kernel, sizes, resources, turning: bool) -> list[str]:
        return kernel_lines(generated, kernel, sizes, resources, "  ", turning)


FAMILY = register(TileFamily())
