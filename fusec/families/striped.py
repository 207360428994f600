"""Striped fusion: a kernel and one that needs its reductions' results, in one
launch across the global barrier between them (cuSync's tile semaphores and
KTILER's L2 reuse, over fusec's tile kernels).

A reduction's result cannot be used in the kernel that computes it: GEMVER's
``w = alpha B x`` needs all of ``x = beta B^T y + z``, so B is read twice, and
the second read comes from DRAM when the two run as two launches. But ``x``
is finished one tile of columns at a time (the last block to arrive at the
tile sums it), and ``w``'s blocks of one column tile need only that tile of
``x``. So the :class:`~fusec.ir.plan.StripedPlan` runs both kernels'
blocks in one launch, a *stripe* at a time, a stripe being one tile of the
*stripe axis* (the axis the crossing vectors run along) and every tile along
the other:

- each part is analysed exactly as if it ran alone
  (:func:`~fusec.lower.kernel.build_kernel`); its serial loop must walk
  across the stripe axis, so that each of its blocks lies in one stripe;
- a block takes a ticket (``fusec_stripe_ticket``) and runs the work it names:
  the producer's first ``lag`` stripes, then for every stripe J the
  producer's stripe J + lag and the consumer's stripe J;
- a producer block counts itself in on its stripe when it is done, its
  reductions' finishes included (``fusec_stripe_done``); a consumer block
  waits for its stripe's count first (``fusec_stripe_wait``), then reads the
  tiles the producer's blocks just read or wrote, which L2 still holds;
- a consumer block waits only on blocks with earlier tickets, which have
  started and never wait themselves: there is no deadlock, whatever the
  number of blocks resident;
- the last block to leave clears the schedule (``fusec_stripe_leave``).

Each part's body is a device function in its own namespace with its own
macros, as in a horizontal fusion (:mod:`fusec.families.horizontal`), but on
whole blocks: the block size is both parts'. Values that cross from the
producer to the consumer lose ``__restrict__``, since one launch now writes
and reads them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from ..cost.model import natural_blocks, traffic
from ..cost.registers import estimate
from ..emit.plan_text import kernel_lines, nvcc_line
from ..emit.writer import CudaWriter, call_text
from ..errors import PlanError
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import MAX_STATIC_SHARED, Arg, Kernel, PartsKernel, Threads
from ..ir.plan import COLS, ROWS, StripedPlan
from ..library.model import Geometry, Kind, Library
from ..lower.kernel import build_kernel
from ..target import GpuTarget
from .base import register
from .horizontal import emit_part, union_args

# A striped consumer's read of a tile its producer read or wrote a stripe or two
# before costs about half a DRAM byte: the consumer sits in the same launch behind
# the producer's stream (docs/design/striped-fusion.md, "Prediction").
STRIPE_REREAD_COST = 0.5
# A consumer block waits for the producer's blocks of its stripe, holding its slot;
# they finish about one block's time (its bytes at its share of DRAM) after their
# tickets, which a lag of L stripes covers for L stripes' time. What the rest costs
# grows with its square: fitted on the H100 to `fusec tune` of GEMVER, SGEMVT and ATAX.
STRIPE_WAIT_SCALE = 33e-6  # seconds
# The consumer finds a stripe's tiles in L2 only while the stripes in flight (the lag's
# and its own) fit in about half of it (experiments/results/h100-striped-variants.md).
STRIPE_L2_SHARE = 0.5

SCHEDULE_COUNTERS = 2  # the ticket counter and the blocks-done counter, before the stripes' counters


@dataclasses.dataclass(frozen=True)
class StripedKernel(PartsKernel):
    """A striped fusion's kernel: the interface of :class:`Kernel` that the
    runtime and the predictors use, with the parts (producer, consumer) as
    analysed kernels."""

    index: int
    name: str
    plan: StripedPlan
    dtype: str
    parts: tuple[Kernel, Kernel]  # producer, consumer
    axis: str  # the stripe axis: ROWS or COLS
    args: tuple[Arg, ...]

    @property
    def block(self) -> int:
        return self.plan.block

    @property
    def estimated_registers(self) -> int:
        return max(estimate(p) for p in self.parts)

    def stripes(self, sizes: dict[str, int]) -> int:
        """Tiles of the stripe axis."""
        rows, cols = self.parts[0].dims
        if self.axis == COLS:
            return -(-sizes[cols] // self.parts[0].macros()["TILE_COLS"])
        return -(-sizes[rows] // self.parts[0].macros()["TILE_ROWS"])

    def across(self, part: Kernel, sizes: dict[str, int]) -> int:
        """The part's blocks in one stripe: its grid along the other axis."""
        grid_rows, grid_cols = part.grid_extent(sizes)
        return grid_rows if self.axis == COLS else grid_cols

    def grid(self, sizes: dict[str, int]) -> int:
        return self.stripes(sizes) * sum(self.across(p, sizes) for p in self.parts)

    def schedule_counters(self, sizes: dict[str, int]) -> int:
        """Counters of the ``fusec_schedule`` argument, zero before the first launch."""
        return SCHEDULE_COUNTERS + self.stripes(sizes)


def crossing(dag: Dag, producer_calls: tuple[int, ...], consumer_calls: tuple[int, ...]) -> list[int]:
    """Values a producer call computes and a consumer call reads (through a scalar
    expression of its arguments too)."""
    produced = {dag.call(c).result for c in producer_calls}
    return sorted({a for c in consumer_calls for a in dag.reads(c) if a in produced})


def why_scalar_crosses(dag: Dag, producer_calls: tuple[int, ...], consumer_calls: tuple[int, ...]) -> str | None:
    """Why the consumer may not share a launch with its producer because it reads a
    scalar the producer makes (None: it reads none). A part reads its scalars once,
    as it starts, through the read-only path (``const real* __restrict__``), and a
    scalar is whole only when every producer block has added its share: scalars pass
    between launches. (No nested function makes a scalar today; this keeps a
    library's that would out of striped and held fusions.)"""
    for value in crossing(dag, producer_calls, consumer_calls):
        if dag.value(value).kind is Kind.SCALAR:
            return (f"the consumer reads {dag.value(value).label}, a scalar the producer makes:"
                    " scalars pass from one launch to the next")
    return None


def matrices_reread(dag: Dag, plan: StripedPlan) -> list[int]:
    """Matrices the consumer reads that the producer reads or writes: the tiles a
    consumer block finds in L2."""
    touched = {a for c in plan.producer.calls for a in dag.call(c).args if isinstance(a, int)}
    touched |= {dag.call(c).result for c in plan.producer.calls}
    return sorted({a for c in plan.consumer.calls for a in dag.call(c).args
                   if isinstance(a, int) and a in touched and dag.value(a).kind is Kind.MATRIX})


def why_not_striped(dag: Dag, plan: StripedPlan, parts: tuple[Kernel, Kernel] | None = None) -> str | None:
    """None when the plan's consumer may run stripe by stripe behind its
    producer in one launch; else why not. ``parts``: the analysed plans, for
    the checks that need them."""
    producer, consumer = plan.parts
    if set(producer.calls) & set(consumer.calls):
        return "a call is in both parts"
    if any(dag.reaches(c, p) for c in consumer.calls for p in producer.calls):
        return "the consumer's calls come before the producer's"
    if producer.geometry is not Geometry.TILE or consumer.geometry is not Geometry.TILE:
        return "both parts must be tile kernels (matrices in stripes)"
    if producer.shape.block != consumer.shape.block:
        return f"blocks of {producer.shape.block} and {consumer.shape.block} threads: the parts share blocks"
    if plan.lag < 1:
        return f"a lag of {plan.lag}: the producer runs at least one stripe ahead"
    if not crossing(dag, plan.producer.calls, plan.consumer.calls):
        return "the consumer reads nothing the producer computes"
    scalar = why_scalar_crosses(dag, plan.producer.calls, plan.consumer.calls)
    if scalar:
        return scalar
    if parts is None:
        return None
    first, second = parts
    if first.dims != second.dims:
        return f"the parts' matrices are {first.dims} and {second.dims}: stripes need the same tiles"
    axis = stripe_axis(dag, plan, first)
    if axis not in (ROWS, COLS):
        return axis  # why there is none
    if axis == ROWS and first.macros()["TILE_ROWS"] != second.macros()["TILE_ROWS"]:
        return "the parts' tiles have different rows: stripes of rows need the same"
    for kernel in parts:
        if kernel.plan.serial == axis:
            return (f"a part's serial loop walks the {axis} (the stripe axis):"
                    " each of its blocks must lie in one stripe")
    crossing_vectors = {v for v in crossing(dag, plan.producer.calls, plan.consumer.calls)
                        if dag.value(v).kind is Kind.VECTOR}
    for arg in second.args:
        if arg.role == "in" and arg.value in crossing_vectors and arg.axis != axis:
            return (f"the consumer reads {dag.value(arg.value).label} along the other axis:"
                    " it would need all of it")
    shared = sum(p.shared_reals for p in parts) * geo.DTYPES[first.dtype].itemsize
    if shared > MAX_STATIC_SHARED:
        return f"{shared} bytes of shared memory, more than a block may declare ({MAX_STATIC_SHARED})"
    return None


def stripe_axis(dag: Dag, plan: StripedPlan, producer: Kernel) -> str:
    """The axis the crossing reductions' results run along (ROWS or COLS), or
    why there is none (a text that is neither)."""
    reductions = {r.value: r for r in producer.reductions}
    axes = set()
    for value in crossing(dag, plan.producer.calls, plan.consumer.calls):
        if dag.value(value).kind is Kind.MATRIX:
            continue  # tile (i, j) is written by the producer's block of stripe j (or i)
        reduction = reductions.get(value)
        if reduction is None or reduction.axis is None:
            return (f"the consumer needs {dag.value(value).label} whole:"
                    " only vectors finished a tile at a time cross in stripes")
        axes.add(COLS if reduction.axis == ROWS else ROWS)  # a sum along the rows runs along the columns
    if len(axes) != 1:
        return ("no reduction's result crosses: nothing needs a barrier" if not axes
                else "the crossing vectors run along both axes")
    return axes.pop()


def build_striped(dag: Dag, library: Library, plan: StripedPlan, dtype: str, index: int,
                  target: GpuTarget | None = None) -> StripedKernel:
    """Analyse a striped fusion into a kernel. Raises PlanError when the parts cannot be striped."""
    why = why_not_striped(dag, plan)
    if why:
        raise PlanError(f"striped fusion of calls {plan.calls}: {why}")
    parts = tuple(build_kernel(dag, library, p, dtype, index, target=target) for p in plan.parts)
    return assemble(dag, library, plan, parts, index)


def assemble(dag: Dag, library: Library, plan: StripedPlan, parts: tuple[Kernel, Kernel], index: int) -> StripedKernel:
    """The striped kernel of parts already analysed (any index)."""
    why = why_not_striped(dag, plan, parts)
    if why:
        raise PlanError(f"striped fusion of calls {plan.calls}: {why}")
    axis = stripe_axis(dag, plan, parts[0])
    shared_values = set(crossing(dag, plan.producer.calls, plan.consumer.calls))

    def unrestricted(arg: Arg) -> Arg:  # one launch writes and reads it now
        if arg.value in shared_values and arg.role in ("in", "out"):
            return dataclasses.replace(arg, decl=arg.decl.replace(" __restrict__", ""))
        return arg

    parts = tuple(dataclasses.replace(k, index=index, name=f"k{index}p{p}_" + k.name.split("_", 1)[1],
                                      args=tuple(unrestricted(a) for a in k.args))
                  for p, k in enumerate(parts))
    # L2 should keep what the consumer reads again: the producer's loads of a matrix the
    # consumer reads stay plain, its other matrix loads are evict-first even where it
    # stores a matrix (GEMVER's B then stays for the consumer; docs/design/striped-fusion.md).
    reread = set(matrices_reread(dag, plan))
    loaded = {a.value for a in parts[0].args if a.role == "in" and dag.value(a.value).kind is Kind.MATRIX}
    parts = (dataclasses.replace(parts[0], stream_matrices=not loaded & reread), parts[1])
    written = {a.value for a in parts[0].args if a.role == "out"}
    args = tuple(a for a in union_args(parts) if not (a.role == "in" and a.value in written))
    args += (Arg("schedule", "unsigned* __restrict__ fusec_schedule"),)
    name = f"k{index}_s_" + "_".join(dag.call(c).function for p in plan.parts for c in p.calls)
    kernel = StripedKernel(index, name, plan, parts[0].dtype, parts, axis, args)
    return kernel


def emit_kernel(kernel: StripedKernel, dag: Dag, library: Library) -> str:
    w = CudaWriter()
    plan, axis = kernel.plan, kernel.axis
    other = ROWS if axis == COLS else COLS
    words = {ROWS: "rows", COLS: "columns"}
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    w(f"//   striped fusion across a global barrier: a stripe is one tile of the {words[axis]},"
      f" every tile of the {words[other]};")
    w(f"//   the producer runs {plan.lag} stripe{'s' if plan.lag > 1 else ''} ahead, and the consumer's"
      " blocks of a stripe wait for the producer's")
    for role, part in zip(("producer", "consumer"), kernel.parts):
        w(f"//   {role}:")
        for call in part.plan.calls:
            impl = part.plan.implementation_of(call)
            w(f"//     {call_text(dag, call)}" + (f"   [implementation {impl}]" if impl != "default" else ""))
        w(f"//     {part.plan.shape.describe(part.dtype)} along the {words[part.plan.serial]}")
    tile = "TILE_COLS" if axis == COLS else "TILE_ROWS"
    across = ("((rows + TILE_ROWS - 1) / TILE_ROWS + ITERS - 1) / ITERS" if axis == COLS
              else "((cols + TILE_COLS - 1) / TILE_COLS + ITERS - 1) / ITERS")
    sizes = "[[maybe_unused]] int rows, [[maybe_unused]] int cols"
    helpers = (f"// the stripes (tiles of the {words[axis]}), and this part's blocks in one (its grid along"
               f" the {words[other]})",
               f"__device__ __forceinline__ int stripes({sizes}) {{ return ({axis} + {tile} - 1) / {tile}; }}",
               f"__device__ __forceinline__ int across({sizes}) {{ return {across}; }}")
    for p, part in enumerate(kernel.parts):
        role = "producer" if p == 0 else "consumer"
        emit_part(w, part, dag, library, Threads(grid="part_grid", item="item", tickets_at_once=False),
                  f"// the {role}, as it runs alone, on the block of its grid that `item` names",
                  helpers)
    params = ",\n    ".join(a.decl for a in kernel.args)
    w(f"#define BLOCK {kernel.block}")
    w.open_kernel("__launch_bounds__(BLOCK)", kernel.name, params)
    first, second = (part.name for part in kernel.parts)
    w(f"const int stripes = {first}::stripes(rows_0, cols_0);")
    w(f"const int n0 = {first}::across(rows_0, cols_0), n1 = {second}::across(rows_1, cols_1);")
    w(f"const fusec_stripe_item work = fusec_stripe_ticket(fusec_schedule, stripes, n0, n1, {plan.lag});")
    w("unsigned* const stripe_done = fusec_schedule + 2 + work.stripe;  // producer blocks done")
    for p, part in enumerate(kernel.parts):
        names = [f"{a.name}_{p}" if a.role in ("size", "aligned") else a.name for a in part.args]
        blocks = "n0" if p == 0 else "n1"
        item = ("work.across * stripes + work.stripe" if axis == COLS
                else f"work.stripe * {blocks} + work.across")  # as block_row, block_col of its own grid
        if p == 0:
            w.open("if (work.part == 0)")
            w(f"{part.name}::run({', '.join(names + [item])});")
            w("fusec_stripe_done(stripe_done);")
        else:
            w.lines[-1] += " else {"
            w.depth += 1
            w("fusec_stripe_wait(stripe_done, n0);")
            w(f"{part.name}::run({', '.join(names + [item])});")
        w.close()
    w("fusec_stripe_leave(fusec_schedule, stripes, stripes * (n0 + n1));")
    w.close()
    w("#undef BLOCK")
    return "\n".join(w.lines) + "\n"


class StripedFamily:
    name = "striped"
    joint = " -> "
    note = "  (striped)"

    def build(self, dag: Dag, library: Library, plan: StripedPlan, dtype: str, index: int, *,
              alone: bool = False, target: GpuTarget | None = None) -> StripedKernel:
        return build_striped(dag, library, plan, dtype, index, target)

    def emit(self, kernel: StripedKernel, dag: Dag, library: Library) -> str:
        return emit_kernel(kernel, dag, library)

    def analytic_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return striped_seconds(model, kernel, dag, sizes, model.launch, model.bandwidth, model.sms)

    def perfdb_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return striped_seconds(model, kernel, dag, sizes, model.database.launch, model.analytic.bandwidth,
                               model.database.sms)

    def plan_text(self, generated, kernel, sizes, resources, turning: bool) -> list[str]:
        return striped_lines(generated, kernel, sizes, resources)


def striped_lines(generated, kernel, sizes, resources) -> list[str]:
    axis = "rows" if kernel.axis == ROWS else "columns"
    lines = [f"  striped fusion across a global barrier: stripes of the {axis}, the producer"
             f" {kernel.plan.lag} ahead; a consumer block waits for its stripe's producer blocks",
             f"  launch   {kernel.block} threads per block; grid: both parts' blocks, in tickets of stripe order"
             + (f" = {kernel.grid(dict(sizes))} blocks" if sizes else "")]
    for role, part in zip(("producer", "consumer"), kernel.parts):
        lines.append(f"  {role}:")
        lines += kernel_lines(generated, part, sizes, None, "    ")
    if resources and kernel.name in resources:
        lines.append("  " + nvcc_line(resources[kernel.name]))
    return lines


def striped_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float,
                    bandwidth: float, sms: int) -> float:
    """A striped fusion: its parts' times as they would run alone, one launch
    fewer, the consumer's reads of matrices the producer touched at
    STRIPE_REREAD_COST of a DRAM byte, and the consumer's waits: a producer
    block takes its bytes over its share of DRAM (every resident block has
    one), of which a lag of L stripes hides L stripes' time; the rest costs
    its square over STRIPE_WAIT_SCALE. Where the L + 1 stripes in flight do
    not fit in STRIPE_L2_SHARE of L2, the re-read is a DRAM read. Occupancy
    (the combined kernel has the registers of the hungrier part) is left to
    the tuner."""
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    reread = sum(math.prod(sizes[d] for d in dag.value(v).dims)
                 for v in matrices_reread(dag, kernel.plan)) * itemsize
    streaming = sum(predictor.kernel_seconds(part, dag, sizes) - launch for part in kernel.parts)
    stripes = kernel.stripes(sizes)
    if (kernel.plan.lag + 1) * reread / stripes <= STRIPE_L2_SHARE * predictor.target.l2_bytes:
        streaming -= (1 - STRIPE_REREAD_COST) * reread / bandwidth
    producer = kernel.parts[0]
    slots = sms * natural_blocks(kernel.estimated_registers, kernel.shared_reals * itemsize, kernel.block,
                                 predictor.target)
    block_seconds = traffic(producer, dag, sizes, predictor.target.l2_bytes) / producer.grid(sizes) * slots / bandwidth
    wait = max(0.0, block_seconds - kernel.plan.lag * streaming / stripes)
    return launch + streaming + wait * wait / STRIPE_WAIT_SCALE


FAMILY = register(StripedFamily())
