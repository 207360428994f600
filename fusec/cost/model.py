"""What every cost model shares: the interface the space ranks plans with, the
bytes a kernel moves through DRAM, the blocks an SM holds, and the serial
iterations a block runs. The models themselves: :mod:`.analytic` (bytes over
bandwidth) and :mod:`.perfdb.model` (measured routine times); each family
prices its own kernels with them (:mod:`fusec.families`)."""

from __future__ import annotations

import math
import warnings
from typing import Mapping, Protocol

from ..errors import FusecWarning
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import Kernel
from ..ir.plan import COLS, ROWS
from ..library.model import Geometry
from ..target import GpuTarget

L2_REREAD_COST = 0.25  # a re-read from L2 costs about a quarter of a DRAM byte


SHARED_RESERVED = 1024  # per block, kept by the driver


def natural_blocks(registers: int, static_shared: int, block: int, target: GpuTarget) -> int:
    """Blocks per SM a kernel can have: threads, registers (allocated per warp in
    units of 256), shared memory (plus what the driver keeps per block), and the
    hardware's 32."""
    warps = block // 32
    per_warp = math.ceil(registers * 32 / 256) * 256
    by_registers = target.registers_per_sm // (per_warp * warps) if registers else 32
    by_shared = target.shared_per_sm // (static_shared + SHARED_RESERVED)
    return max(1, min(target.threads_per_sm // block, by_registers, by_shared, 32))


class Predictor(Protocol):
    name: str
    target: GpuTarget  # the GPU it predicts for

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        ...


def traffic(kernel: Kernel, dag: Dag, sizes: Mapping[str, int], l2_bytes: int) -> int:
    """Bytes the kernel moves through DRAM.

    Matrices and the vectors of the vector geometry move once; a square matrix
    the kernel reads or writes one triangle of (``Arg.triangle``) n(n+1)/2 of its
    values. In the tile
    geometry a vector indexed by rows is read by every block along the
    columns (and vice versa); while it fits in L2 (``l2_bytes``) those re-reads cost L2
    bandwidth, counted as a quarter of a DRAM byte each. Reductions write and
    read their partials once.
    """
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    grid_rows, grid_cols = kernel.grid_extent(dict(sizes))

    def elements(value: int, triangle: str | None = None) -> int:
        count = math.prod(sizes[d] for d in dag.value(value).dims)
        if triangle:  # n(n+1)/2 of the n*n
            n = sizes[dag.value(value).dims[0]]
            count = count * (n + 1) // (2 * n) if n else 0
        return count

    total = 0
    for arg in kernel.args:
        if arg.role == "in":
            count = elements(arg.value, arg.triangle)
            rereads = 0
            if arg.axis == ROWS:  # every block along the columns reads its rows
                rereads = count * (grid_cols - 1)
            elif arg.axis == COLS:
                rereads = count * (grid_rows - 1)
            if count * itemsize > l2_bytes // 4:  # too big to stay in L2 between reads
                count, rereads = count + rereads, 0
            total += count * itemsize + rereads * itemsize * L2_REREAD_COST
        elif arg.role == "out":
            total += max(elements(arg.value, arg.triangle), 1) * itemsize
    for reduction in kernel.reductions:
        tiles, arrivals, width = kernel.reduction_tiles(reduction, dict(sizes))
        if kernel.plan.geometry is Geometry.BAND:  # atomics in L2, then one pass over the accumulator
            total += arrivals * width * itemsize * L2_REREAD_COST + 2 * width * itemsize
        else:
            total += 2 * tiles * arrivals * width * itemsize
    return total


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


def warn_unmeasured(database, kernel: Kernel) -> None:
    """Warn once per database and shape that a kernel falls back to the analytic model."""
    shape = kernel.plan.shape.describe(kernel.dtype)
    if (database.path, shape) not in _warned:
        _warned.add((database.path, shape))
        warnings.warn(FusecWarning(f"performance database {database.path} has no timings for"
                                   f" {shape}; such kernels are predicted by the analytic model"))
