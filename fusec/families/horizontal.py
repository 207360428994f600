"""Horizontal fusion (HFuse, Li et al. 2020, §III): independent kernels in one launch.

A :class:`~fusec.ir.plan.HorizontalPlan` holds kernel plans whose calls
have no path between them in the DAG. Each part is analysed exactly as if it
ran alone (:func:`~fusec.lower.kernel.build_kernel`), then the horizontal
kernel runs them side by side in every block (the paper's Fig. 5):

- threads ``[offset_p, offset_p + BLOCK_p)`` of a block run part ``p``; the
  splits are the parts' block sizes, whole warps;
- each part's body is a device function in its own namespace, with its own
  macros (``BLOCK``, ``ITERS``, ...) and its own instance of the library
  routines; it is handed its own thread index, computes its own grid from the
  sizes, and a block past that grid leaves the part at once (the grid is the
  largest part's);
- in that namespace ``BARRIER()`` is ``bar.sync p+1, BLOCK_p``: a named
  barrier of the part's own warps (0 stays the block-wide barrier, which no
  part uses), so a part that left early, or runs a different number of
  barriers, never holds another up; the reductions' finish (its tickets' barrier,
  ``fusec_sum_partials``) syncs on the same barrier;
- shared memory and the reductions' flags are declared in each part's body:
  separate for every part;
- the kernel's parameters are the union of the parts', an array or scalar
  that feeds several parts passed once; sizes and ``aligned`` are per part.

With ``bound`` the kernel is compiled with ``__maxnreg__(bound)`` instead of
``__launch_bounds__`` (HFuse's register bound, Fig. 6).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..cost.model import natural_blocks, traffic, warn_unmeasured
from ..cost.registers import MAX_REGISTERS, estimate
from ..emit.kernel import emit_body, library_sources
from ..emit.lines import library_text
from ..emit.plan_text import kernel_lines, nvcc_line
from ..emit.writer import CudaWriter, call_text
from ..errors import PlanError
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import MAX_STATIC_SHARED, Arg, Kernel, PartsKernel, Threads
from ..ir.plan import HorizontalPlan
from ..library.model import Geometry, Library
from ..lower.kernel import build_kernel
from ..target import GpuTarget, reference
from .base import register

MAX_PARTS = 15  # named barriers 1-15; 0 is the block's



@dataclasses.dataclass(frozen=True)
class HorizontalKernel(PartsKernel):
    """A horizontal fusion's kernel: the interface of :class:`Kernel` that the
    runtime and the predictors use (name, args, grid, block, reductions and
    their buffers, source), with the parts as analysed kernels."""

    index: int
    name: str
    plan: HorizontalPlan
    dtype: str
    parts: tuple[Kernel, ...]
    args: tuple[Arg, ...]

    @property
    def block(self) -> int:
        return self.plan.block

    @property
    def offsets(self) -> tuple[int, ...]:
        return self.plan.offsets()

    @property
    def estimated_registers(self) -> int:
        """One thread runs one part, but registers are allocated for the kernel:
        the most any part needs, unless the bound is lower."""
        most = max(estimate(p) for p in self.parts)
        return min(most, self.plan.bound) if self.plan.bound else most

    def grid(self, sizes: dict[str, int]) -> int:
        """The largest part's grid: a smaller part skips the blocks past its own."""
        return max(p.grid(sizes) for p in self.parts)


def register_bound(parts: tuple[Kernel, ...], registers: tuple[int, ...] | None = None,
                   target: GpuTarget | None = None) -> int:
    """HFuse's register bound (Fig. 6, lines 9-12): the registers per thread that
    let the fused kernel run as many blocks per SM as the parts would with
    their own registers, unless threads or shared memory allow fewer:

        b_p = regs per SM / (d_p x regs_p),  b_0 = min(b_p, shared per SM / shared, threads per SM / d_0)
        r_0 = regs per SM / (b_0 x d_0)

    ``registers`` are the parts' registers per thread (nvcc's, where known);
    by default the kernels' estimates. Rounded down to a multiple of 8 (the
    hardware allocates registers per warp in units of 256). ``target``: the GPU (default:
    the reference GPU)."""
    target = target or reference()
    registers = registers or tuple(estimate(p) for p in parts)
    itemsize = geo.DTYPES[parts[0].dtype].itemsize
    d0 = sum(p.block for p in parts)
    shared = sum(p.shared_reals for p in parts) * itemsize + 1024
    b0 = min(min(target.registers_per_sm // (p.block * r) for p, r in zip(parts, registers)),
             target.shared_per_sm // shared, target.threads_per_sm // d0)
    b0 = max(b0, 1)
    return max(16, min(MAX_REGISTERS, target.registers_per_sm // (b0 * d0)) // 8 * 8)


def why_not_horizontal(dag: Dag, plan: HorizontalPlan, parts: tuple[Kernel, ...] | None = None,
                       target: GpuTarget | None = None) -> str | None:
    """None when the parts may run side by side in one kernel; else why not."""
    if len(plan.parts) < 2:
        return "a horizontal fusion needs at least two parts"
    if len(plan.parts) > MAX_PARTS:
        return f"{len(plan.parts)} parts: there are {MAX_PARTS} named barriers for them"
    calls = [c for p in plan.parts for c in p.calls]
    if len(set(calls)) != len(calls):
        return "a call appears in two parts"
    for i, a in enumerate(plan.parts):
        for b in plan.parts[i + 1:]:
            for x in a.calls:
                for y in b.calls:
                    if dag.reaches(x, y) or dag.reaches(y, x):
                        return (f"calls {min(x, y)} and {max(x, y)} depend on each other:"
                                " only independent kernels run side by side")
    for part in plan.parts:
        if part.shape.block % geo.WARP:
            return f"a part of {part.shape.block} threads: parts are whole warps"
    most = (target or reference()).threads_per_block
    if plan.block > most:
        return f"{plan.block} threads per block, more than {most}"
    if plan.bound and not 16 <= plan.bound <= 255:
        return f"a register bound of {plan.bound}: it must lie in 16-255"
    if parts is not None:
        itemsize = geo.DTYPES[parts[0].dtype].itemsize
        shared = sum(p.shared_reals for p in parts) * itemsize
        if shared > MAX_STATIC_SHARED:
            return f"{shared} bytes of shared memory, more than a block may declare ({MAX_STATIC_SHARED})"
    return None


def build_horizontal(dag: Dag, library: Library, plan: HorizontalPlan, dtype: str, index: int,
                     target: GpuTarget | None = None) -> HorizontalKernel:
    """Analyse a horizontal fusion into a kernel. Raises PlanError when the parts cannot share a kernel."""
    dtype = geo.dtype_name(dtype)
    why = why_not_horizontal(dag, plan, target=target)
    if why:
        raise PlanError(f"horizontal fusion of calls {plan.calls}: {why}")
    parts = tuple(build_kernel(dag, library, p, dtype, index, target=target) for p in plan.parts)
    return assemble(dag, library, plan, parts, index, target)


def assemble(dag: Dag, library: Library, plan: HorizontalPlan, parts: tuple[Kernel, ...], index: int,
             target: GpuTarget | None = None) -> HorizontalKernel:
    """The horizontal kernel of parts already analysed (``parts[p]`` is
    ``plan.parts[p]``'s kernel, any index)."""
    why = why_not_horizontal(dag, plan, parts, target)
    if why:
        raise PlanError(f"horizontal fusion of calls {plan.calls}: {why}")
    parts = tuple(dataclasses.replace(k, index=index, name=f"k{index}p{p}_" + k.name.split("_", 1)[1])
                  for p, k in enumerate(parts))
    name = f"k{index}_h_" + "_".join(dag.call(c).function for p in plan.parts for c in p.calls)
    kernel = HorizontalKernel(index, name, plan, parts[0].dtype, parts, union_args(parts))
    return kernel


def union_args(parts: tuple[Kernel, ...]) -> tuple[Arg, ...]:
    """The parts' arguments (of a horizontal or a striped kernel): arrays and
    scalars once (their names are the values'), sizes and aligned once per part, renamed ``NAME_p``."""
    shared: dict[tuple, Arg] = {}
    own: list[Arg] = []
    for p, part in enumerate(parts):
        for arg in part.args:
            if arg.role in ("size", "aligned"):
                own.append(dataclasses.replace(arg, decl=f"{arg.decl}_{p}", part=p))
            else:
                first = shared.setdefault((arg.role, arg.value), arg)
                if first.triangle != arg.triangle:  # parts reading other triangles, or the whole: the whole
                    shared[(arg.role, arg.value)] = dataclasses.replace(first, triangle=None)
    order = {"in": 0, "out": 1, "workspace": 1, "counters": 1, "scalar": 2, "scalar_ptr": 2}
    return tuple(sorted(shared.values(), key=lambda a: order[a.role])) + tuple(own)


def emit_kernel(kernel: HorizontalKernel, dag: Dag, library: Library) -> str:
    w = CudaWriter()
    plan = kernel.plan
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    w(f"//   horizontal fusion (HFuse) of {len(plan.parts)} independent kernels, {plan.block} threads"
      " per block; the grid is the largest part's, and a part skips the blocks past its own")
    for p, (part, offset) in enumerate(zip(kernel.parts, kernel.offsets)):
        w(f"//   part {p}: threads {offset}-{offset + part.block - 1}, named barrier {p + 1}")
        for call in part.plan.calls:
            impl = part.plan.implementation_of(call)
            w(f"//     {call_text(dag, call)}" + (f"   [implementation {impl}]" if impl != "default" else ""))
        w(f"//     {_shape_text(part)}")
    if plan.bound:
        w(f"//   registers: at most {plan.bound} per thread (HFuse's register bound)")
    for p, part in enumerate(kernel.parts):
        _emit_part(w, part, p, dag, library)
    params = ",\n    ".join(a.decl for a in kernel.args)
    w(f"#define BLOCK {plan.block}  // the parts' threads together")
    if plan.bound:
        w("// HFuse's register bound: as many blocks per SM as the parts would have alone")
        bounds = f"__maxnreg__({plan.bound})"
    else:  # no register bound: one block per SM is enough, so ptxas gives the code what it needs
        bounds = "__launch_bounds__(BLOCK, 1)"
    w.open_kernel(bounds, kernel.name, params)
    for p, (part, offset) in enumerate(zip(kernel.parts, kernel.offsets)):
        end = offset + part.block
        condition = f"threadIdx.x < {end}"
        if p == 0:
            w.open(f"if ({condition})")
        elif p < len(kernel.parts) - 1:
            w.lines[-1] += f" else if ({condition}) {{"
            w.depth += 1
        else:
            w.lines[-1] += " else {"
            w.depth += 1
        names = [f"{a.name}_{p}" if a.role in ("size", "aligned") else a.name for a in part.args]
        tid = "threadIdx.x" if offset == 0 else f"threadIdx.x - {offset}"
        w(f"{part.name}::run({', '.join(names + [tid])});")
        w.close()
    w.close()
    w("#undef BLOCK")
    return "\n".join(w.lines) + "\n"


def _shape_text(part: Kernel) -> str:
    plan = part.plan
    text = plan.shape.describe(part.dtype)
    if plan.serial:
        text += f" along {'rows' if plan.serial == 'rows' else 'columns'}"
    return text


def _emit_part(w: CudaWriter, part: Kernel, p: int, dag: Dag, library: Library) -> None:
    emit_part(w, part, dag, library, Threads("tid", "part_grid", p + 1),
              f"// part {p}: the kernel as it runs alone, on the part's thread index `tid`")


def emit_part(w: CudaWriter, part: Kernel, dag: Dag, library: Library, threads: Threads, note: str,
              helpers: tuple[str, ...] = (), extra_params: tuple[str, ...] = (), hold=None) -> None:
    """A part's namespace: its macros, its instance of the library routines, any
    ``helpers`` (lines of C that need the macros), and its body as the device
    function ``run``, handed the part's thread index (a horizontal part, whose
    BARRIER() is its named barrier) or its work item (a striped or held part),
    then any ``extra_params`` (declarations); ``hold``: see ``emit_body``."""
    macros = part.macros()
    namespace = part.name
    w(f"namespace {namespace} {{")
    for macro, value in macros.items():
        if macro != "VEC":  # VEC belongs to the precision, defined once at the top
            w(f"#define {macro} {value}")
    if threads.part:
        w(f"// this part's barriers wait for its own {part.block} threads only:"
          f" bar.sync {threads.barrier}, {part.block}")
        w('#pragma push_macro("BARRIER")')
        w("#undef BARRIER")
        w(f"#define BARRIER() fusec_barrier<{threads.barrier}, BLOCK>()")
    for path, text in library_sources(part, dag, library):
        for line in library_text(path, text):
            w(line)
    for line in helpers:
        w(line)
    w()
    w(note)
    index = threads.tid if threads.part else threads.item
    params = ",\n    ".join([a.decl for a in part.args] + [f"const int {index}", *extra_params])
    w(f"__device__ __forceinline__ void run(\n    {params})")
    w("{")
    w.depth += 1
    emit_body(w, part, dag, library, threads=threads, hold=hold)
    w.close()
    if threads.part:
        w('#pragma pop_macro("BARRIER")')
    for macro in macros:
        if macro != "VEC":
            w(f"#undef {macro}")
    w(f"}}  // namespace {namespace}")
    w()


class HorizontalFamily:
    name = "horizontal"
    joint = " || "
    note = "  (side by side)"

    def build(self, dag: Dag, library: Library, plan: HorizontalPlan, dtype: str, index: int, *,
              alone: bool = False, target: GpuTarget | None = None) -> HorizontalKernel:
        return build_horizontal(dag, library, plan, dtype, index, target)

    def emit(self, kernel: HorizontalKernel, dag: Dag, library: Library) -> str:
        return emit_kernel(kernel, dag, library)

    def analytic_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return analytic_horizontal_seconds(model, kernel, dag, sizes)

    def perfdb_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return perfdb_horizontal_seconds(model, kernel, dag, sizes)

    def plan_text(self, generated, kernel, sizes, resources, turning: bool) -> list[str]:
        lines, parts = [], kernel.parts
        bound = (f"; at most {kernel.plan.bound} registers per thread" if kernel.plan.bound
                 else "")
        lines.append(f"  horizontal fusion of {len(parts)} independent kernels side by side{bound}")
        lines.append(f"  launch   {kernel.block} threads per block; grid: the largest part's (a part skips"
                     " the blocks past its own)" + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else ""))
        for p, (part, offset) in enumerate(zip(parts, kernel.offsets)):
            lines.append(f"  part {p}: threads {offset}-{offset + part.block - 1}, named barrier {p + 1}")
            lines += kernel_lines(generated, part, sizes, None, "    ")
        if resources and kernel.name in resources:
            lines.append("  " + nvcc_line(resources[kernel.name]))
        return lines


def analytic_horizontal_seconds(model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
    """A horizontal fusion: its parts run side by side in every block, sharing
    the SMs and DRAM, after one launch.

    The combined block (the parts' threads together, the most registers any
    part needs, their shared memory together) sets the blocks per SM, so
    each part keeps fewer of its own blocks resident than it would alone.
    Each part streams its bytes at the efficiency its own bytes in flight
    allow at that occupancy (the slowest part bounds the kernel), and all
    parts' bytes together at the efficiency of all bytes in flight (DRAM is
    shared): the kernel takes the longer of the two. Then the ragged end of
    the part with the longest blocks, and the reductions' terms of the part
    that finishes last (parts finish in parallel, on their own threads).

    The register bound is not modelled: what spills cost against the
    occupancy it buys cannot be told without running, so a bounded kernel is
    predicted as the unbounded one and the tuner decides (HFuse profiles both).
    """
    sizes = dict(sizes)
    registers = max(estimate(p) for p in kernel.parts)  # the bound left out
    slots = model.sms * model.blocks_per_sm(kernel, registers)
    moved_all, demand, slowest, tail, counters, finish = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for part in kernel.parts:
        grid = part.grid(sizes)
        resident = min(grid, slots) * part.block / model.sms
        target = model.tile_in_flight if part.plan.geometry is Geometry.TILE else model.vector_in_flight
        share = resident * max(part.loop_bytes, geo.VEC_BYTES) / target  # of DRAM's need, from this part
        moved = traffic(part, dag, sizes, model.target.l2_bytes)
        moved_all += moved
        demand += share
        slowest = max(slowest, moved / (model.bandwidth * max(min(1.0, share), 1e-3)))
        tail = max(tail, moved / grid * min(grid, slots) / model.bandwidth)
        part_counters, part_finish = model.reduction_seconds(part, sizes)
        counters, finish = max(counters, part_counters), max(finish, part_finish)
    streaming = max(slowest, moved_all / (model.bandwidth * max(min(1.0, demand), 1e-3)))
    return model.launch + max(streaming, counters) + 0.5 * tail + finish


def perfdb_horizontal_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
    """A horizontal fusion (HFuse): its parts run side by side in every block.

    The combined block (the parts' threads together, the most registers any
    part needs or its probes used, the parts' shared memory together) sets
    the blocks per SM. Each part's blocks run in waves at that many blocks per
    SM, each routine at its measured time for that level, as in
    the tile family's perfdb price; the slowest part bounds the kernel.
    The parts share DRAM, so the kernel also takes at least all their bytes
    over the copy bandwidth (the analytic model's traffic). One launch; the
    reductions' terms of the part that finishes last. The register bound is
    not modelled (see :func:`analytic_horizontal_seconds`).
    """
    sizes = dict(sizes)
    registers = max(max([estimate(p)] + [t.registers for _, t in predictor.timings(p, dag) or []])
                    for p in kernel.parts)
    blocks = natural_blocks(registers, kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize, kernel.block,
                            predictor.target)
    slowest, moved, counters, finish = 0.0, 0.0, 0.0, 0.0
    for part in kernel.parts:
        streaming = predictor.streaming_seconds(part, dag, sizes, blocks)
        if streaming is None:
            warn_unmeasured(predictor.database, part)
            return predictor.analytic.kernel_seconds(kernel, dag, sizes)
        slowest = max(slowest, streaming)
        moved += traffic(part, dag, sizes, predictor.target.l2_bytes)
        part_counters, part_finish = predictor.analytic.reduction_seconds(part, sizes)
        counters, finish = max(counters, part_counters), max(finish, part_finish)
    streaming = max(slowest, moved / predictor.analytic.bandwidth)
    return predictor.database.launch + max(streaming, counters) + finish


FAMILY = register(HorizontalFamily())
