"""Held fusion: a kernel and one that needs its reductions' results, in one
launch of resident blocks with one grid barrier between them, the matrix
tiles the second reads again held on chip across it.

GEMVER's ``w = alpha B x`` needs all of ``x = beta B^T y + z``, so B is read
twice. Where the matrix is about the chip's size (fp32 n = 4096: 64 MB, past
L2's 50 MB, but the H100 also has 33 MB of registers and 30 MB of shared
memory), the second read need not leave the chip. A
:class:`~fusec.ir.plan.HeldPlan` runs both parts on the same tiles:

- each part is analysed exactly as if it ran alone
  (:func:`~fusec.lower.kernel.build_kernel`), with the same shape and
  serial axis, so the grid is the same and a block's n-th tile is the same
  tile in both;
- the launch is the parts' grid, every block resident at once (the runtime
  checks the occupancy before the first launch: a block waits for all the
  others, which must be running);
- a block runs the producer on its tiles, its reductions' finishes
  included; keeps the element it computed or loaded of the first
  ``registers`` whole tiles in registers (the serial loop is unrolled, so the
  iteration number that indexes them is a constant; a band part unrolls only
  those iterations) and of the next
  ``shared`` in dynamic shared memory, each thread its own slots (no bank
  conflicts); and arrives at the grid barrier (``fusec_grid_sync``);
- after it, every reduction is finished, and the block runs the consumer on
  the same tiles, taking the held ones from chip and loading the others
  (written or read last by the producer, so L2 may still hold them).

``experiments.one_barrier`` measured the idea by hand first (GEMVER fp32 n = 4096:
0.82x the two launches' GPU time with 61 % of the matrix held).

Both parts may also be band kernels (:mod:`.band`; a block's n-th instance of
whole rows the same in both), as ``experiments.one_barrier`` was written: GEMVER's
producer then adds its partials of x with vector atomics, the last block to
arrive finishes x before it arrives at the barrier, and the units held are
instances of rows.

Two options of band parts (``HeldPlan``): ``stores_after``, where the
consumer, not the producer, stores the held instances of the matrix the
producer computes (from chip, evict-first); ``finish_after``, where the
producer's column sums go into the half of a doubled accumulator its launch's
round picks and every block finishes its own columns after the barrier
(:func:`.band.finish_after_barrier`), no tickets, the consumer taking them as
arguments.

Values that cross from the producer to the consumer lose ``__restrict__``,
since one launch now writes and reads them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from ..cost.model import traffic
from ..cost.registers import MAX_REGISTERS, ahead, estimate
from ..emit.band import finish_after_barrier
from ..emit.plan_text import kernel_lines, nvcc_line
from ..emit.writer import CudaWriter, call_text
from ..errors import PlanError
from ..ir import geometry as geo
from ..ir.barriers import LOOP, PRE
from ..ir.dag import Dag
from ..ir.kernel import MAX_STATIC_SHARED, Arg, Kernel, PartsKernel, Threads
from ..ir.plan import HeldPlan
from ..library.model import Geometry, Kind, Library, RoutineKind, Storage
from ..lower.kernel import build_kernel
from ..target import GpuTarget, reference
from .band import band_atomic_seconds, band_finish_seconds, band_seconds
from .base import register
from .horizontal import emit_part, union_args
from .striped import STRIPE_L2_SHARE, STRIPE_REREAD_COST, crossing, matrices_reread, why_scalar_crosses

# A held fusion whose producer leaves its held tiles unstored (HeldPlan.stores_after) writes
# in its pass only what the consumer re-reads, past evict-first loads, so L2 keeps more of
# it: faster in every pair measured (experiments/results/h100-held-after.md).
STORES_AFTER_L2_SHARE = 0.75
# A held fusion whose producer leaves its held tiles unstored (HeldPlan.stores_after)
# moves their stores out of its pass into the consumer's, where they go to DRAM beside
# the consumer's stream from chip and L2 and slow it by this share of their own time
# (never finishing sooner than DRAM takes them). Fitted to 36 held GEMVER plans
# measured with and without the option (experiments/results/h100-held-grid.md), whose gains
# the L2 share alone had priced the wrong way round.
STORES_AFTER_EXPOSED = 0.6
# A held fusion's blocks meet once: bench/one_barrier.cu's blocks (GEMVER fp32 n = 4096,
# one per SM) left its grid barrier 2.8 us after the last one arrived (a scratch copy
# that stamped %globaltimer at each phase; docs/notes/striped-fusion-measurements.md).
GRID_BARRIER_SECONDS = 2.8e-6

SHARED_RESERVED = 1024  # per block, kept by the driver
# The register estimate (cost.registers) is off by 6.6 registers on average; past what a thread may have,
# held tiles and the parts' own values spill to local memory (ptxas: SGEMVT fp64 with 10 tiles
# held, estimated 245 of 255, spilled 256 bytes; GEMVER fp64 in 512-thread blocks, two per SM,
# nothing held in registers, 912), so the estimate must leave this much room.
REGISTER_MARGIN = 16
# A held kernel of band parts: the room its estimate must leave, and the most registers of
# held instances a thread may keep. ptxas on the 877 held band options of GEMVER, SGEMVT and
# ATAX at n = 4096 (fp32 and fp64, every count in registers the looser rule offered) spilled
# or kept on the stack 2 of the 478 that leave 8 registers and hold at most 48 (1 row of 4
# pieces, 2 blocks per SM, 3 instances: estimated 105 of 128, ptxas used all), against 14 of
# 772 with no bound on the held registers (arrays of 64 to 192 words).
BAND_REGISTER_MARGIN = 8
BAND_HELD_WORDS = 48


def register_margin(geometry: Geometry) -> int:
    """Registers a held kernel's estimate must leave free (its parts' geometry)."""
    return BAND_REGISTER_MARGIN if geometry is Geometry.BAND else REGISTER_MARGIN


# The register mapping both parts must hold the matrix in, per geometry: a tile kernel's
# tiles, a band kernel's instances of whole rows.
HELD_MAPPINGS = {Geometry.TILE: "tile", Geometry.BAND: "band"}
# A held unit (a tile, an instance of rows) is kept only where it is whole: the edges'
# values are the guarded routines' own.
WHOLE = {Geometry.TILE: "c.row0 + TILE_ROWS <= c.rows && c.col0 + TILE_COLS <= c.cols",
         Geometry.BAND: "c.full"}
UNIT = {Geometry.TILE: "tiles", Geometry.BAND: "instances of rows"}
ARRIVALS = 2  # 32-bit words of the schedule: one 64-bit count of arrivals at the barrier


@dataclasses.dataclass(frozen=True)
class Hold:
    """What a part's body does with the held tiles (``emit_body``'s ``hold``):
    the producer keeps its element of ``value`` after the op that writes it,
    the consumer takes it instead of loading it."""

    value: int  # the matrix held
    keep: bool  # producer (True) or consumer
    registers: int
    shared: int
    slots: int  # the element's slots per thread
    whole: str = WHOLE[Geometry.TILE]  # the condition that a unit is whole
    # HeldPlan.stores_after: the matrix's output (its ``g_`` pointer), whose held units the
    # producer does not store and the consumer stores as it takes them (band units only)
    stored_after: str | None = None
    # False in the rolled loop after a band part's first ``registers`` iterations
    # (:func:`.band.emit_band_body`): no unit there is in registers
    registers_here: bool = True

    @property
    def held_units(self) -> str:
        """The condition that this iteration's unit is held on chip."""
        return f"{self.whole} && it < {self.registers + self.shared}"

    @property
    def unrolled(self) -> bool:
        """Whether the part's loop is unrolled: held registers need constant indices.
        Units held only in shared memory are found at run time, and the loop stays
        rolled: unrolled, a held band kernel's warps stalled on instruction fetch, and
        rolled it took the same time in a fraction of the code (docs/notes/striped-fusion-measurements.md).
        A band part unrolls only its first ``registers`` iterations
        (:func:`.band.emit_band_body`); a tile part its whole loop."""
        return self.registers > 0

    def _where(self, w: CudaWriter, copy_registers: str, copy_shared: str, after: tuple[str, ...] = ()) -> bool:
        """The branches that copy a held unit (then ``after``); False when there are none."""
        whole = self.whole
        branches = []
        if self.registers and self.registers_here:
            branches.append((f"it < {self.registers}",
                             [f"for (int s = 0; s < {self.slots}; ++s) {copy_registers};", *after]))
        if self.shared:
            branches.append((f"it < {self.registers + self.shared}",
                             [f"real* const h = held_shared + (long long)(it - {self.registers})"
                              f" * {self.slots} * BLOCK;",
                              f"for (int s = 0; s < {self.slots}; ++s) {copy_shared};", *after]))
        if not branches:
            return False
        w("// held: whole units only (the edges' values are the guarded routines' own)")
        for i, (condition, lines) in enumerate(branches):
            head = f"if ({whole} && {condition}) {{"
            if i == 0:
                w(head)
            else:
                w.lines[-1] += " else " + head
            w.depth += 1
            for line in lines:
                if line.startswith("for"):
                    w("#pragma unroll")
                w(line)
            w.depth -= 1
            w("}")
        return True

    def emit_keep(self, w: CudaWriter, var: str) -> None:
        self._where(w, f"held_registers[it][s] = {var}[s]",
                    f"h[s * BLOCK + threadIdx.x] = {var}[s]")

    def emit_take(self, w: CudaWriter, var: str, emit_load) -> None:
        after = () if self.stored_after is None else _store_band_instance(var, self.stored_after)
        if not self._where(w, f"{var}[s] = held_registers[it][s]", f"{var}[s] = h[s * BLOCK + threadIdx.x]",
                           after):
            emit_load()
            return
        w.lines[-1] += " else {"
        w.depth += 1
        emit_load()
        w.close()


def _store_band_instance(var: str, target: str) -> tuple[str, ...]:
    """Lines that store a whole instance of rows the producer left unstored, from the
    consumer's copy ``var`` (slot (u*PIECES + j)*VEC + k: row row0+u, column
    band_col(j) + k), evict-first: L2 should keep the rows the consumer re-reads."""
    return ("// the producer left this instance unstored (stores_after): stored from chip, evict-first",
            "for (int s = 0; s < BAND_ROWS * PIECES; ++s) {",
            "  fusec_vec v;",
            "  for (int k = 0; k < VEC; ++k) v.v[k] = " + f"{var}[s * VEC + k];",
            f"  fusec_store16<true>(const_cast<real*>({target}) + (long long)(c.row0 + s / PIECES) * c.cols"
            " + band_col(s % PIECES, c), v);",
            "}")


@dataclasses.dataclass(frozen=True)
class HeldKernel(PartsKernel):
    """A held fusion's kernel: the interface of :class:`Kernel` that the
    runtime and the predictors use, with the parts (producer, consumer) as
    analysed kernels."""

    index: int
    name: str
    plan: HeldPlan
    dtype: str
    parts: tuple[Kernel, Kernel]  # producer, consumer
    held: int | None  # the matrix whose tiles are held (None: nothing held)
    slots: int  # its slots per thread per tile
    args: tuple[Arg, ...]
    target: GpuTarget  # the GPU whose SMs hold its blocks

    all_resident = True  # a block waits for every other at the grid barrier

    @property
    def reproducible(self) -> bool:
        return all(p.reproducible for p in self.parts)

    @property
    def zeroed_workspace(self) -> bool:
        """Band parts add their column sums into accumulators that start at zero
        (both parts have one geometry, so all of the kernel's reductions do)."""
        return any(p.zeroed_workspace for p in self.parts)

    @property
    def block(self) -> int:
        return self.plan.block

    @property
    def resident_per_sm(self) -> int:
        return self.plan.per_sm

    @property
    def held_words(self) -> int:
        """32-bit registers a thread keeps its held units in."""
        return self.plan.registers * self.slots * (geo.DTYPES[self.dtype].itemsize // 4)

    @property
    def estimated_registers(self) -> int:
        held = self.held_words
        producer, consumer = self.parts
        # A consumer loading ahead beside the instances it takes from chip needs its next
        # instance's copy about twice over (ptxas, fp32 n = 4096, 256 threads of 4 pieces:
        # GEMVER's with 2 rows, estimated 106, spilled 56 and 160 bytes held at 128 and 255
        # registers; its 1-row one, 73, sits under the producer's 110, whole in 121).
        consumer_registers = estimate(consumer) + ahead(consumer)
        return max(estimate(producer), consumer_registers) + held  # past 255 it would spill

    @property
    def most_registers(self) -> int:
        """Registers a thread may have with ``per_sm`` blocks on each SM."""
        return registers_allowed(self.block, self.plan.per_sm, self.target)

    @property
    def most_shared(self) -> int:
        """Bytes of shared memory a block may have with ``per_sm`` blocks on each SM."""
        return shared_allowed(self.plan.per_sm, self.target)

    @property
    def dynamic_shared_bytes(self) -> int:
        """The tiles held in shared memory: every thread's slots of each."""
        return self.plan.shared * self.slots * self.block * geo.DTYPES[self.dtype].itemsize

    def grid(self, sizes: dict[str, int]) -> int:
        """The parts' grid (the same for both)."""
        return self.parts[0].grid(sizes)

    def tiles_per_block(self) -> int:
        return self.parts[0].macros()["ITERS"]

    def held_fraction(self) -> float:
        """Of the tiles the consumer reads again, the share held on chip (whole tiles)."""
        if self.held is None:
            return 0.0
        return min(1.0, (self.plan.registers + self.plan.shared) / self.tiles_per_block())

    def schedule_counters(self, sizes: dict[str, int]) -> int:
        """32-bit words of the ``fusec_schedule`` argument, zero before the first launch:
        the count of arrivals at the barrier, which only grows."""
        return ARRIVALS


def registers_allowed(block: int, per_sm: int, target: GpuTarget) -> int:
    """Registers per thread when each SM holds ``per_sm`` blocks of ``block`` threads
    (allocated per warp in units of 256: a multiple of 8)."""
    return min(MAX_REGISTERS, target.registers_per_sm // (block * per_sm) // 8 * 8)


def shared_allowed(per_sm: int, target: GpuTarget) -> int:
    """Bytes of shared memory a block may have when each SM holds ``per_sm`` blocks."""
    return min(target.shared_per_block, target.shared_per_sm // per_sm - SHARED_RESERVED)


def held_matrix(dag: Dag, parts: tuple[Kernel, Kernel]) -> int | None:
    """The matrix the consumer loads in its loop into registers, tile by tile,
    that the producer also has there in the same mapping (it loaded or
    computed it): the tiles a block can keep. None when there is none."""
    producer, consumer = parts
    mapping = HELD_MAPPINGS.get(producer.plan.geometry)
    written = {op.value for op in producer.ops
               if op.section == LOOP and op.step is not None
               and op.step.kind in (RoutineKind.LOAD, RoutineKind.COMPUTE)}

    def in_registers(kernel: Kernel, value: int) -> bool:
        return any(e.value == value and e.storage is Storage.REGISTERS and e.mapping == mapping
                   for e in kernel.elements)

    for op in consumer.ops:
        if (op.section == LOOP and op.step is not None and op.step.kind is RoutineKind.LOAD
                and dag.value(op.value).kind is Kind.MATRIX and op.value in written
                and in_registers(consumer, op.value) and in_registers(producer, op.value)):
            return op.value
    return None


def why_not_held(dag: Dag, plan: HeldPlan, parts: tuple[Kernel, Kernel] | None = None,
                 target: GpuTarget | None = None) -> str | None:
    """None when the plan's parts may run as one launch with one grid barrier
    and its tiles held as it says; else why not. ``parts``: the analysed
    plans, for the checks that need them."""
    producer, consumer = plan.parts
    if set(producer.calls) & set(consumer.calls):
        return "a call is in both parts"
    if any(dag.reaches(c, p) for c in consumer.calls for p in producer.calls):
        return "the consumer's calls come before the producer's"
    if producer.geometry is not consumer.geometry or producer.geometry not in HELD_MAPPINGS:
        return ("both parts must be tile kernels or both band kernels (a block's tiles or rows the"
                " same in both)")
    if (producer.shape, producer.serial) != (consumer.shape, consumer.serial):
        return "the parts' shapes or serial axes differ: a block's tiles must be the same in both"
    if plan.registers < 0 or plan.shared < 0:
        return "a negative count of held tiles"
    if plan.per_sm < 1:
        return f"{plan.per_sm} blocks per SM: at least one"
    if plan.registers + plan.shared > producer.shape.iters:
        return (f"{plan.registers + plan.shared} tiles held, more than the {producer.shape.iters}"
                " of a block")
    if not crossing(dag, producer.calls, consumer.calls):
        return "the consumer reads nothing the producer computes"
    scalar = why_scalar_crosses(dag, producer.calls, consumer.calls)
    if scalar:
        return scalar
    if (plan.stores_after or plan.finish_after) and producer.geometry is not Geometry.BAND:
        # tile plans measured slower with their held stores moved (experiments/results/h100-held-stores.md)
        return "stores or finishes after the barrier: band parts only"
    if plan.stores_after and not (plan.registers or plan.shared):
        return "held stores after the barrier, but nothing is held"
    if parts is None:
        return None
    first, second = parts
    if first.dims != second.dims:
        return f"the parts' matrices are {first.dims} and {second.dims}: they need the same tiles"
    if (plan.registers or plan.shared) and held_matrix(dag, parts) is None:
        return "no matrix both parts hold in registers, tile by tile: nothing to hold"
    if plan.stores_after:
        why = _why_not_stored_after(dag, plan, parts)
        if why:
            return why
    if plan.finish_after:
        why = _why_not_finished_after(dag, plan, parts)
        if why:
            return why
    itemsize = geo.DTYPES[first.dtype].itemsize
    static = sum(p.shared_reals for p in parts) * itemsize
    if static > MAX_STATIC_SHARED:
        return f"{static} bytes of shared memory, more than a block may declare ({MAX_STATIC_SHARED})"
    kernel = _kernel(dag, plan, parts, 0, target or reference())
    if static + kernel.dynamic_shared_bytes > kernel.most_shared:
        return (f"{plan.shared} tiles held in shared memory: {static + kernel.dynamic_shared_bytes}"
                f" bytes with the parts', more than a block may have ({kernel.most_shared},"
                f" {plan.per_sm} per SM)")
    if producer.geometry is Geometry.BAND and kernel.held_words > BAND_HELD_WORDS:
        return (f"{plan.registers} instances held in registers: {kernel.held_words} registers a thread,"
                f" more than {BAND_HELD_WORDS} (ptxas then spills, or keeps them on the stack)")
    if kernel.estimated_registers + register_margin(producer.geometry) > kernel.most_registers:
        return (f"{plan.registers} tiles held in registers: about {kernel.estimated_registers}"
                f" registers per thread, too near the {kernel.most_registers} of {plan.per_sm} blocks"
                f" of {plan.block} per SM (they would spill)")
    return None


def _why_not_stored_after(dag: Dag, plan: HeldPlan, parts: tuple[Kernel, Kernel]) -> str | None:
    """Why the held units' stores may not move after the barrier (None: they may)."""
    held = held_matrix(dag, parts)
    stores = [op for op in parts[0].ops if op.section == LOOP and op.step is not None
              and op.step.kind is RoutineKind.STORE and op.value == held]
    if not stores:
        return f"held stores after the barrier, but the producer stores no {dag.value(held).label}"
    if any(op.value == held and op.step is not None and op.step.kind is RoutineKind.STORE for op in parts[1].ops):
        return f"held stores after the barrier, but the consumer stores {dag.value(held).label} too"
    return None


def _why_not_finished_after(dag: Dag, plan: HeldPlan, parts: tuple[Kernel, Kernel]) -> str | None:
    """Why the producer's column sums may not be finished after the barrier (None: they may)."""
    producer, consumer = parts
    if not producer.reductions:
        return "column sums finished after the barrier, but the producer has none"
    sums = {r.value for r in producer.reductions}
    given = set(finished_sums_given(dag, parts))
    for op in consumer.ops:
        if op.step is not None and op.value in sums and op.value not in given:
            # block 0 stores the outputs after the barrier, too late for other blocks' loads
            return (f"column sums finished after the barrier, but the consumer reads"
                    f" {dag.value(op.value).label} other than once before its loop, in its own columns")
    return None


def finished_sums_given(dag: Dag, parts: tuple[Kernel, Kernel]) -> tuple[int, ...]:
    """The producer's column sums the consumer loads before its loop into its own
    columns (mapping band_cols, registers): with ``finish_after`` it takes them
    from the finish after the barrier instead."""
    producer, consumer = parts
    sums = {r.value for r in producer.reductions}
    elements = {e.value: e for e in consumer.elements}
    return tuple(sorted({op.value for op in consumer.ops
                         if op.section == PRE and op.step is not None and op.step.kind is RoutineKind.LOAD
                         and op.value in sums and elements[op.value].mapping == "band_cols"
                         and elements[op.value].storage is Storage.REGISTERS}))


def build_held(dag: Dag, library: Library, plan: HeldPlan, dtype: str, index: int,
               target: GpuTarget | None = None) -> HeldKernel:
    """Analyse a held fusion into a kernel. Raises PlanError when the parts cannot be held."""
    target = target or reference()
    why = why_not_held(dag, plan, target=target)
    if why:
        raise PlanError(f"held fusion of calls {plan.calls}: {why}")
    parts = tuple(build_kernel(dag, library, p, dtype, index, target=target) for p in plan.parts)
    return assemble(dag, library, plan, parts, index, target)


def _kernel(dag: Dag, plan: HeldPlan, parts: tuple[Kernel, Kernel], index: int, target: GpuTarget) -> HeldKernel:
    """The kernel of parts already analysed."""
    shared_values = set(crossing(dag, plan.producer.calls, plan.consumer.calls))

    def unrestricted(arg: Arg) -> Arg:  # one launch writes and reads it now
        if arg.value in shared_values and arg.role in ("in", "out"):
            return dataclasses.replace(arg, decl=arg.decl.replace(" __restrict__", ""))
        return arg

    parts = tuple(dataclasses.replace(k, index=index, name=f"k{index}p{p}_" + k.name.split("_", 1)[1],
                                      args=tuple(unrestricted(a) for a in k.args))
                  for p, k in enumerate(parts))
    # The producer's loads of a matrix the consumer reads again stay plain (its unheld
    # tiles should stay in L2), its other matrix loads are evict-first (GEMVER's A
    # streams past, B stays), as in a striped fusion.
    reread = set(matrices_reread(dag, plan))
    loaded = {a.value for a in parts[0].args if a.role == "in" and dag.value(a.value).kind is Kind.MATRIX}
    # The consumer's loads are the call's last of its matrices. Where those are all the
    # program's inputs (SGEMVT's A, not GEMVER's B), they stay plain too: L2 then keeps
    # what it can of them for the next call on the same matrix, a solver's (fp32 n = 4096,
    # SGEMVT's GPU us: experiments.l2_keep 45.3 -> 41.8, then 44.1 as generated; bench.peers
    # 46.0 -> 44.2). A striped consumer streams instead: at its sizes L2 must keep the
    # stripes ahead.
    consumed = {a.value for a in parts[1].args if a.role == "in" and dag.value(a.value).kind is Kind.MATRIX}
    inputs_only = all(dag.value(v).producer is None for v in consumed)
    given = finished_sums_given(dag, parts) if plan.finish_after else ()
    parts = (dataclasses.replace(parts[0], stream_matrices=not loaded & reread,
                                 sums_after_barrier=plan.finish_after),
             dataclasses.replace(parts[1], stream_matrices=parts[1].stream_matrices and not inputs_only,
                                 given=given))
    held = held_matrix(dag, parts) if plan.registers or plan.shared else None
    slots = next((e.size for e in parts[0].elements if e.value == held), 0) if held is not None else 0
    written = {a.value for a in parts[0].args if a.role == "out"}
    args = tuple(a for a in union_args(parts) if not (a.role == "in" and a.value in written))
    args += (Arg("schedule", "unsigned long long* __restrict__ fusec_arrivals"),)
    name = f"k{index}_b_" + "_".join(dag.call(c).function for p in plan.parts for c in p.calls)
    return HeldKernel(index, name, plan, parts[0].dtype, parts, held, slots, args, target)


def assemble(dag: Dag, library: Library, plan: HeldPlan, parts: tuple[Kernel, Kernel], index: int,
             target: GpuTarget | None = None) -> HeldKernel:
    """The held kernel of parts already analysed (any index)."""
    target = target or reference()
    why = why_not_held(dag, plan, parts, target)
    if why:
        raise PlanError(f"held fusion of calls {plan.calls}: {why}")
    kernel = _kernel(dag, plan, parts, index, target)
    return kernel


def emit_kernel(kernel: HeldKernel, dag: Dag, library: Library) -> str:
    w = CudaWriter()
    plan = kernel.plan
    words = {"rows": "rows", "cols": "columns"}
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    w("//   held fusion across one grid barrier: every block is resident, runs the producer on its")
    unit = UNIT[plan.producer.geometry]
    w(f"//   {unit}, waits for all the others, then runs the consumer on the same {unit}")
    if kernel.held is not None:
        w(f"//   {dag.value(kernel.held).label}: a block's first {plan.registers} whole {unit} held in registers,"
          f" the next {plan.shared} in shared memory, the rest re-read")
    for role, part in zip(("producer", "consumer"), kernel.parts):
        w(f"//   {role}:")
        for call in part.plan.calls:
            impl = part.plan.implementation_of(call)
            w(f"//     {call_text(dag, call)}" + (f"   [implementation {impl}]" if impl != "default" else ""))
        w(f"//     {part.plan.shape.describe(part.dtype)} along the {words[part.plan.serial]}")
    rows = max(plan.registers, 1)  # a C array has at least one row; none is used when 0 are held
    slots = max(kernel.slots, 1)
    extra = (f"real (&held_registers)[{rows}][{slots}]", "real* const held_shared")
    producer, consumer = kernel.parts
    sums = [dag.value(v).c_name for v in consumer.given]
    sizes = {e.value: e.size for e in producer.elements}
    finished = {r.value: sizes[r.value] for r in producer.reductions} if plan.finish_after else {}
    for p, part in enumerate(kernel.parts):
        role = "producer" if p == 0 else "consumer"
        helpers = ()
        part_extra = extra
        if plan.finish_after and p == 0:
            part_extra = extra + ("const unsigned long long launch_round",)
            helpers = finish_after_barrier(part, dag, library)
        elif plan.finish_after:
            part_extra = extra + tuple(f"const real (&given_{c})[PIECES * VEC]" for c in sums)
        hold = None
        if kernel.held is not None:
            stored_after = f"g_{dag.value(kernel.held).c_name}" if plan.stores_after else None
            hold = Hold(kernel.held, p == 0, plan.registers, plan.shared, kernel.slots,
                        WHOLE[plan.producer.geometry], stored_after)
        emit_part(w, part, dag, library, Threads(item="item"),
                  f"// the {role}, as it runs alone, on the block `item`"
                  + (f"; {'keeps' if p == 0 else 'takes'} the held {unit}" if hold else ""),
                  helpers=helpers, extra_params=part_extra, hold=hold)
    params = ",\n    ".join(a.decl for a in kernel.args)
    w(f"#define BLOCK {kernel.block}")
    w(f"// {plan.per_sm} block{'s' if plan.per_sm > 1 else ''} on each SM at once: every block is resident")
    w.open_kernel(f"__launch_bounds__(BLOCK, {plan.per_sm})", kernel.name, params)
    w(f"extern __shared__ __align__(16) unsigned char fusec_dynamic[];  // the {unit} held in shared memory")
    w(f"real held_registers[{rows}][{slots}];  // the {unit} held in registers: constant indices only")
    w("real* const held_shared = reinterpret_cast<real*>(fusec_dynamic);")
    if plan.finish_after:
        w("// this launch's round picks the halves of the column sums' accumulators it adds into")
        w("const unsigned long long launch_round = fusec_round(fusec_arrivals, gridDim.x);")
    for p, part in enumerate(kernel.parts):
        names = [f"{a.name}_{p}" if a.role in ("size", "aligned") else a.name for a in part.args]
        more = ["launch_round"] if plan.finish_after and p == 0 else [f"sums_{c}" for c in sums] if p else []
        w(f"{part.name}::run({', '.join(names + ['blockIdx.x', 'held_registers', 'held_shared'] + more)});")
        if p == 0 and plan.finish_after:
            w("fusec_grid_sync(fusec_arrivals, gridDim.x);  // every block's column sums added")
            for value, size in finished.items():
                w(f"real sums_{dag.value(value).c_name}[{size}];  // this thread's columns, finished")
            w(f"{part.name}::finish_sums({', '.join(names + ['blockIdx.x', 'launch_round'])}"
              + "".join(f", sums_{dag.value(v).c_name}" for v in finished) + ");")
        elif p == 0:
            w("fusec_grid_sync(fusec_arrivals, gridDim.x);  // every block's producer done, its finishes too")
    w.close()
    w("#undef BLOCK")
    return "\n".join(w.lines) + "\n"


class HeldFamily:
    name = "held"
    joint = " -> "
    note = "  (held across one grid barrier)"

    def build(self, dag: Dag, library: Library, plan: HeldPlan, dtype: str, index: int, *,
              alone: bool = False, target: GpuTarget | None = None) -> HeldKernel:
        return build_held(dag, library, plan, dtype, index, target)

    def emit(self, kernel: HeldKernel, dag: Dag, library: Library) -> str:
        return emit_kernel(kernel, dag, library)

    def analytic_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return held_seconds(model, kernel, dag, sizes, model.launch, model.bandwidth)

    def perfdb_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return held_seconds(model, kernel, dag, sizes, model.database.launch, model.analytic.bandwidth)

    def plan_text(self, generated, kernel, sizes, resources, turning: bool) -> list[str]:
        return held_lines(generated, kernel, sizes, resources)


def held_lines(generated, kernel, sizes, resources) -> list[str]:
    plan = kernel.plan
    lines = ["  held fusion across one grid barrier: every block runs the producer on its tiles, waits for"
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
        lines += kernel_lines(generated, part, sizes, None, "    ")
    if resources and kernel.name in resources:
        lines.append("  " + nvcc_line(resources[kernel.name]))
    return lines


def held_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float,
                 bandwidth: float) -> float:
    """A held fusion: its parts' times as they would run alone (the same grid,
    blocks resident as the fusion's are), one launch fewer, the grid barrier,
    and the consumer's reads of matrices the producer touched: nothing for the
    share held on chip, STRIPE_REREAD_COST of a DRAM byte for what L2 may
    still hold of the rest (the tiles the producer touched last), a DRAM byte
    beyond. With ``stores_after`` the held tiles' stores move from the
    producer's pass into the consumer's (STORES_AFTER_EXPOSED). The consumer's
    column-sum atomics queue at the end, whole (:func:`band_atomic_seconds`);
    the producer's count only where they outlast the producer's pass. (Priced
    whole, they ranked GEMVER's held band plans, whose column sums are the
    producer's, below tile plans that measured slower: fp32 n = 1024 and 2048,
    first choices 1.38 and 1.30 of the winner against 1.03 and 1.11. Left out,
    GEMVER's and SGEMVT's fp64 n = 512 first choices were held band plans at
    1.61 and 1.68 of the best measured; beyond the pass, 1.00 and 1.00.)"""
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    reread = sum(math.prod(sizes[d] for d in dag.value(v).dims)
                 for v in matrices_reread(dag, kernel.plan)) * itemsize
    seconds = [held_part_seconds(predictor, kernel, part, dag, sizes, launch, bandwidth) - launch
               for part in kernel.parts]
    unheld = (1.0 - kernel.held_fraction()) * reread
    # the consumer starts after the producer's whole pass: L2 keeps only the last of it
    share = STORES_AFTER_L2_SHARE if kernel.plan.stores_after else STRIPE_L2_SHARE
    in_l2 = min(unheld, share * predictor.target.l2_bytes)
    # Bytes the consumer takes from chip or L2 are bytes it no longer waits for: its time
    # shrinks by them at the rate it streams alone, below the bandwidth where too few loads
    # are in flight (priced at the bandwidth, held GEMVER plans came out far slower than
    # measured: docs/notes/striped-fusion-measurements.md).
    producer, consumer = seconds
    rate = min(bandwidth, traffic(kernel.parts[1], dag, sizes, predictor.target.l2_bytes) / max(consumer, 1e-12))
    consumer -= (reread - unheld + in_l2 * (1.0 - STRIPE_REREAD_COST)) / rate
    if kernel.plan.stores_after:  # the held tiles' stores leave the producer's pass for the consumer's
        matrix = math.prod(sizes[d] for d in dag.value(kernel.held).dims) * itemsize
        stores = kernel.held_fraction() * matrix / bandwidth
        producer -= stores
        consumer = max(consumer + STORES_AFTER_EXPOSED * stores, stores)
    streaming = producer + consumer
    analytic = predictor.analytic
    slots = predictor.sms * kernel.plan.per_sm
    producer_part, consumer_part = kernel.parts
    if consumer_part.plan.geometry is Geometry.BAND:  # at the end, whole: bytes from chip do not shorten them
        streaming += band_atomic_seconds(analytic, consumer_part, sizes, slots)
    if producer_part.plan.geometry is Geometry.BAND:  # only what outlasts the producer's pass
        streaming += max(0.0, band_atomic_seconds(analytic, producer_part, sizes, slots) - producer)
    if kernel.plan.finish_after:  # no ticket: the producer's finish is every block's, after the barrier
        streaming -= (band_finish_seconds(analytic, kernel.parts[0], sizes)
                      - band_finish_seconds(analytic, kernel.parts[0], sizes, after_barrier=True))
    return launch + streaming + GRID_BARRIER_SECONDS


def held_part_seconds(predictor, kernel, part, dag: Dag, sizes: Mapping[str, int], launch: float,
                       bandwidth: float) -> float:
    """A held fusion's part as it would run alone on the same grid, its blocks resident
    as the fusion's are: ``per_sm`` to an SM, all in one wave. (Priced with the blocks
    its own registers would allow, a part could leave a slot per SM empty and pay for a
    partial wave the fusion never runs: docs/notes/striped-fusion-measurements.md.)"""
    if part.plan.geometry is Geometry.BAND:  # held_seconds adds the atomics
        return band_seconds(predictor, part, dag, sizes, launch, bandwidth, predictor.sms,
                            blocks_per_sm=kernel.plan.per_sm, atomics=False)
    return predictor.kernel_seconds(part, dag, sizes)


FAMILY = register(HeldFamily())
