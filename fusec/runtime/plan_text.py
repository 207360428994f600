"""Readable descriptions of a generated program: kernels, calls, launch shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..ir.dag import Constant, Dag
from ..library.model import Geometry, Kind
from ..ir.plan import ROWS, HeldPlan, StripedPlan


def minimum_bytes(dag: Dag, dtype: np.dtype, sizes: Mapping[str, int]) -> int:
    """Each input array read once and each output written once (scalars count too)."""
    def nbytes(value: int) -> int:
        v = dag.value(value)
        return int(np.prod([sizes[d] for d in v.dims], dtype=np.int64)) * dtype.itemsize
    inputs = sum(nbytes(v) for v in dag.inputs if dag.value(v).kind is not Kind.SCALAR)
    return inputs + sum(nbytes(v) for v in dict.fromkeys(dag.outputs))


def _call(dag: Dag, call: int) -> str:
    record = dag.call(call)
    args = ", ".join(a.text if isinstance(a, Constant) else dag.value(a).label for a in record.args)
    return (f"{Path(dag.file).name}:{record.coord.line}  "
            f"{dag.value(record.result).label} = {record.function}({args})")


def describe(generated, sizes: Mapping[str, int] | None = None, resources=None, origin: str | None = None,
             turning: bool = True) -> str:
    dag = generated.dag
    lines = [f"program {dag.name} ({dag.file}), {generated.dtype}, library {generated.library.name}"
             f" (hash {generated.library.content_hash})"]
    if origin:  # where the plan came from: tuned, or how the predictor chose it
        lines.append(f"plan: {origin}")
    if not generated.reproducible:
        lines.append("bits: two runs may differ in the last bits (a band kernel adds its column sums with"
                     " atomics; --reproducible / reproducible=True leaves such kernels out)")

    def show(value: int) -> str:
        v = dag.value(value)
        return f"{v.name}: {v.kind}" + (f"[{', '.join(v.dims)}]" if v.dims else "")
    lines.append("inputs:  " + ", ".join(show(v) for v in dag.inputs))
    lines.append("outputs: " + ", ".join(show(v) for v in dag.outputs))
    if sizes:
        lines.append("sizes:   " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    for kernel in generated.kernels:
        lines.append("")
        lines.append(f"kernel {kernel.index}: {kernel.name}")
        parts = getattr(kernel, "parts", None)
        if not parts:
            lines += _kernel_lines(generated, kernel, sizes, resources, "  ", turning)
            continue
        if isinstance(kernel.plan, StripedPlan):
            lines += _striped_lines(generated, kernel, sizes, resources)
            continue
        if isinstance(kernel.plan, HeldPlan):
            lines += _held_lines(generated, kernel, sizes, resources)
            continue
        bound = (f"; at most {kernel.plan.bound} registers per thread" if kernel.plan.bound
                 else "")
        lines.append(f"  horizontal fusion of {len(parts)} independent kernels side by side{bound}")
        lines.append(f"  launch   {kernel.block} threads per block; grid: the largest part's (a part skips"
                     " the blocks past its own)" + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else ""))
        for p, (part, offset) in enumerate(zip(parts, kernel.offsets)):
            lines.append(f"  part {p}: threads {offset}-{offset + part.block - 1}, named barrier {p + 1}")
            lines += _kernel_lines(generated, part, sizes, None, "    ")
        if resources and kernel.name in resources:
            lines.append("  " + _nvcc_line(resources[kernel.name]))
    return "\n".join(lines)


def _striped_lines(generated, kernel, sizes, resources) -> list[str]:
    axis = "rows" if kernel.axis == ROWS else "columns"
    lines = [f"  striped fusion across a global barrier: stripes of the {axis}, the producer"
             f" {kernel.plan.lag} ahead; a consumer block waits for its stripe's producer blocks",
             f"  launch   {kernel.block} threads per block; grid: both parts' blocks, in tickets of stripe order"
             + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else "")]
    for role, part in zip(("producer", "consumer"), kernel.parts):
        lines.append(f"  {role}:")
        lines += _kernel_lines(generated, part, sizes, None, "    ")
    if resources and kernel.name in resources:
        lines.append("  " + _nvcc_line(resources[kernel.name]))
    return lines


def _held_lines(generated, kernel, sizes, resources) -> list[str]:
    plan = kernel.plan
    lines = [f"  held fusion across one grid barrier: every block runs the producer on its tiles, waits for"
             " all the others, then the consumer on the same tiles",
             f"  launch   {kernel.block} threads per block; grid: the parts' grid, every block resident"
             f" ({plan.per_sm} per SM)" + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else "")]
    if kernel.held is not None:
        lines.append(f"  held     {generated.dag.value(kernel.held).label}: a block's first {plan.registers} whole"
                     f" tiles in registers, the next {plan.shared} in shared memory"
                     f" ({kernel.dynamic_shared_bytes} bytes), {kernel.held_fraction():.0%} of its"
                     f" {kernel.tiles_per_block()}; the rest re-read")
        if plan.stores_after:
            lines.append("           the held ones stored after the barrier, by the consumer, from chip (evict-first)")
    if plan.finish_after:
        lines.append("  finish   the producer's column sums: into this launch's half of their accumulators, finished"
                     " after the barrier by every block for its own columns")
    for role, part in zip(("producer", "consumer"), kernel.parts):
        lines.append(f"  {role}:")
        lines += _kernel_lines(generated, part, sizes, None, "    ")
    if resources and kernel.name in resources:
        lines.append("  " + _nvcc_line(resources[kernel.name]))
    return lines


def _nvcc_line(r) -> str:
    return (f"nvcc     {r.registers} registers, {r.shared_bytes} bytes shared,"
            f" {r.spill_stores + r.spill_loads} bytes spilled")


def _kernel_lines(generated, kernel, sizes, resources, indent: str, turning: bool = False) -> list[str]:
    dag, plan, lines = generated.dag, kernel.plan, []
    for call in plan.calls:
        lines.append(f"call     {_call(dag, call)}")
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
        lines.append(f"reduce   {dag.value(reduction.value).label} sums over {how}; partials of every block,"
                     " finished by the last block to arrive")
    if resources and kernel.name in resources:
        lines.append(_nvcc_line(resources[kernel.name]))
    return [indent + line for line in lines]
