"""Readable text about a kernel: its calls, shape, launch and on-chip elements (the plan text's pieces)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.dag import Dag
from ..ir.plan import ROWS
from ..library.model import Geometry, Kind
from .writer import call_text


def minimum_bytes(dag: Dag, dtype: np.dtype, sizes: Mapping[str, int]) -> int:
    """Each input array read once and each output written once (scalars count too)."""
    def nbytes(value: int) -> int:
        v = dag.value(value)
        return int(np.prod([sizes[d] for d in v.dims], dtype=np.int64)) * dtype.itemsize
    inputs = sum(nbytes(v) for v in dag.inputs if dag.value(v).kind is not Kind.SCALAR)
    return inputs + sum(nbytes(v) for v in dict.fromkeys(dag.outputs))


def nvcc_line(r) -> str:
    return (f"nvcc     {r.registers} registers, {r.shared_bytes} bytes shared,"
            f" {r.spill_stores + r.spill_loads} bytes spilled")


def kernel_lines(generated, kernel, sizes, resources, indent: str, turning: bool = False) -> list[str]:
    dag, plan, lines = generated.dag, kernel.plan, []
    for call in plan.calls:
        lines.append(f"call     {call_text(dag, call)}")
    shape = plan.shape.describe(generated.dtype)
    if plan.geometry is Geometry.TILE:
        walk = "rows" if plan.serial == ROWS else "columns"
        shape += f" along the {walk}"
        grid = (f"ceil({kernel.dims[0]}/{plan.shape.macros(generated.dtype)['TILE_ROWS']})"
                f" x ceil({kernel.dims[1]}/{plan.shape.macros(generated.dtype)['TILE_COLS']})"
                f" tiles, ITERS per block")
    elif plan.geometry is Geometry.BAND:
        band_rows = plan.shape.macros(generated.dtype)["BAND_ROWS"]
        grid = f"ceil({kernel.dims[0]}/{band_rows}) instances of whole rows, ITERS per block"
    else:
        grid = f"ceil({kernel.dims[0]}/(BLOCK*VEC)) chunks, ITERS per block"
    lines.append(f"shape    {shape}")
    lines.append(f"launch   {plan.shape.block} threads per block; grid: {grid}"
                 + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else ""))
    if kernel.turns:
        lines.append("order    " + ("forwards and backwards through the grid on alternate launches"
                     " (each starts where L2 holds the last one's tiles)" if turning else "forwards through the grid"))
    on_chip = ", ".join(f"{dag.value(e.value).label} ({e.storage}, {e.mapping})" for e in kernel.elements)
    lines.append(f"on chip  {on_chip}")
    lines.append(f"shared   {kernel.shared_reals} reals, {sum(op.barrier for op in kernel.ops)} barrier(s)"
                 " placed by the compiler")
    for reduction in kernel.reductions:
        how = "a whole vector" if reduction.axis is None else f"the {reduction.axis}"
        if plan.geometry is Geometry.BAND:
            lines.append(f"reduce   {dag.value(reduction.value).label} sums over the rows; every block adds its"
                         " sums with atomics, the last block to arrive finishes them")
            continue
        finisher = (f"summed after the kernel by {kernel.sums_name}, a block per line of outputs"
                    if kernel.sums_apart else "finished by the last block to arrive")
        lines.append(f"reduce   {dag.value(reduction.value).label} sums over {how}; partials of every block,"
                     f" {finisher}")
    if kernel.sums_apart:
        lines.append(f"sums     {kernel.sums_name}: launched after the kernel, with its arguments"
                     + (f"; {kernel.launches(dict(sizes))[1][1]} blocks" if sizes else ""))
    for name in kernel.function_names:
        if resources and name in resources:
            lines.append(nvcc_line(resources[name]) + (f" ({name})" if kernel.sums_apart else ""))
    return [indent + line for line in lines]
