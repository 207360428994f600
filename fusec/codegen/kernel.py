"""One kernel from one fusion implementation: paper Algorithms 1 and 2.

``build_kernel`` first decides everything (elements and where they live,
which loads are invariant and which reductions accumulate, shared offsets,
barriers, kernel arguments) into a frozen :class:`Kernel`; ``Kernel.source``
then only prints it.

Kernel schema (Algorithm 1)::

    allocate shared memory; declare register arrays; compute indices
    load invariant elements; clear accumulated reductions
    for each serial iteration: loads, computes, stores (each call per Algorithm 2:
        barrier if needed, clear a non-accumulated reduction, reduce parallelism
        and recompute indices if the routine wants fewer threads, call it)
    store accumulated reductions
    finish reductions across blocks (the last block to arrive sums the partials)
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..dag import Constant, Dag
from .lines import library_text
from ..errors import PlanError
from .. import geometry as geo
from ..library.model import (Access, Function, Geometry, Kind, Library, Routine, RoutineKind,
                             Storage)
from ..space.points import (COLS, L2_EVICT_LOADS, L2_STREAM_STORES, ROWS, HeldPlan, HorizontalPlan, KernelPlan,
                            Step, StripedPlan)
from ..space.steps import array_args, call_dims, function_of, leaves_kernel
from .barriers import LOOP, POST, PRE, Event, Mode, Region, Touch, allocate, place_barriers

MAX_STATIC_SHARED = 48 * 1024  # bytes of static shared memory a block may declare
# A kernel that turns and streams its matrices loads the last of them plainly, about this many
# bytes (0.4 of the H100's 50 MB L2), so the next launch, which starts there, finds them in L2
# whatever else L2 held before (Kernel.keep_blocks; bench/results/h100-l2-keep-states.md).
KEEP_L2_BYTES = 20 * 2 ** 20
REGISTERS_PER_SM = 65536  # 32-bit registers of an SM (sm_90), shared by a block's threads
CLEAR_MAPPING = "<clear>"  # the compiler's own clearing loop: thread t clears words t, t+BLOCK, ...


@dataclasses.dataclass(frozen=True)
class Element:
    """A value that lives on chip in this kernel."""

    value: int
    var: str  # C name of the register array or shared pointer
    storage: Storage
    mapping: str
    size_expr: str  # C expression (registers: slots per thread; shared: reals)
    size: int
    region: Region | None  # shared only
    reduction: bool
    accumulated: bool


@dataclasses.dataclass(frozen=True)
class Arg:
    """A kernel parameter and what the host passes for it."""

    role: str  # "in" | "out" | "workspace" | "counters" | "schedule" | "scalar" | "scalar_ptr" | "size" | "aligned"
    #            | "direction"
    decl: str
    value: int | None = None
    size: str | None = None  # size symbol, for role "size"
    axis: str | None = None  # tile geometry: ROWS or COLS for a vector
    part: int | None = None  # a horizontal fusion's size or aligned flag: the part it is for

    @property
    def name(self) -> str:
        """The parameter's C name."""
        return self.decl.split()[-1]


@dataclasses.dataclass(frozen=True)
class Reduction:
    """Buffers of a reduction finished across blocks."""

    value: int
    axis: str | None  # ROWS/COLS: the axis it sums along; None: a whole vector


@dataclasses.dataclass(frozen=True)
class Op:
    """One line of the schedule: a routine call, a clear, with a barrier before it or not."""

    section: str
    step: Step | None  # None: clear of `clear`
    clear: int | None
    barrier: bool
    scratch: Region | None
    value: int | None = None  # the element a load writes, a compute or store handles


@dataclasses.dataclass(frozen=True)
class Threads:
    """How a kernel body names its thread index, its work item and grid size,
    and which barrier BARRIER() is: the whole block's when the kernel runs
    alone, one part's when it is a part of a horizontal fusion (HFuse: the part
    sees its own thread index and grid, and syncs on its own named barrier). A
    part of a striped kernel runs on whole blocks, but its work item is the one
    the block's ticket names, not the block's index, and its grid is its own.

    ``tickets_at_once``: a block with reductions takes all its tickets before
    it sums any tile (one round trip to L2; BiCGK fp32 n = 4096 2.3 % faster),
    or each tile's ticket just before that tile's sum, fusec's earlier order,
    which striped parts keep: at once took ATAX fp32 n = 16384 3.4 % and
    SGEMVT 1.6 % longer there, and so did the earlier order written any other
    way (see _emit_finish_in_turn)."""

    tid: str = "threadIdx.x"
    grid: str = "gridDim.x"
    barrier: int = 0  # 0: __syncthreads(); 1-15: bar.sync of the part's threads
    item: str = "blockIdx.x"
    tickets_at_once: bool = True

    @property
    def part(self) -> bool:
        return self.barrier != 0

    @property
    def own_grid(self) -> bool:
        """The body works out its grid from the sizes (gridDim is not its)."""
        return self.part or self.grid != "gridDim.x"


ALONE = Threads()
# A kernel alone whose launches alternate the way its blocks walk the grid (Kernel.turns).
TURNING = Threads(item="fusec_item")
TURN_ARG = Arg("direction", "const int backwards")


@dataclasses.dataclass(frozen=True)
class Kernel:
    index: int
    name: str
    plan: KernelPlan
    dtype: str
    dims: tuple[str, ...]  # size symbols: (rows, cols) or (n,)
    elements: tuple[Element, ...]
    ops: tuple[Op, ...]
    args: tuple[Arg, ...]
    reductions: tuple[Reduction, ...]
    shared_reals: int
    source: str = dataclasses.field(repr=False)
    # Tile kernels that store no matrix read their matrices once and re-read only
    # vectors and partials: their matrix loads are marked evict-first (STREAM_MATRIX),
    # so the stream leaves those in L2: 3.4% / 4.5% on BiCGK (fp32 / fp64); a kernel that
    # stores a matrix (GEMVER's sger, MADD) is slower with it (bench/results/h100-l2-policies.md).
    stream_matrices: bool = False
    # Of a kernel that turns and streams its matrices: the blocks at the end of the grid (the
    # last to run) whose matrix loads are plain, not evict-first, about KEEP_L2_BYTES of them.
    # The next launch walks the other way and starts on those tiles, so it finds them in L2.
    # Evict-first alone never displaces what L2 already holds: after other work had filled L2
    # with its lines (generating the inputs on the GPU is enough) fp32 n = 4096 SGEMV took
    # 25.8 us against 21.9 from an empty L2, BiCGK 27.9 against 24.7; with the last 30 % of the
    # blocks plain, 21.5 / 21.0 and 24.2 / 23.4 (bench.l2_keep --l2 polluted / clean).
    keep_blocks: int = 0
    # A held fusion's band parts with HeldPlan.finish_after (fusec/codegen/held.py). The
    # producer adds its column sums into the half of a doubled accumulator that its launch's
    # round picks, and leaves the finish to every block after the grid barrier; the consumer
    # takes those finished values (`given`, value ids) as arguments instead of loading them.
    sums_after_barrier: bool = False
    given: tuple[int, ...] = ()
    # Band kernels: the most register slots of whole-row matrix elements live at once in
    # the loop (:func:`_live_band_slots`), which the register estimate counts.
    live_band_slots: int = 0

    @property
    def shape(self) -> geo.Shape:
        return self.plan.shape

    @property
    def reproducible(self) -> bool:
        """Whether every run gives the same bits: all but a band kernel with a column
        sum, whose blocks add their sums with atomics in the order they arrive."""
        return not (self.plan.geometry is Geometry.BAND and self.reductions)

    @property
    def turns(self) -> bool:
        """Whether a launch says which way its blocks walk the grid (``backwards``):
        the runtime alternates it, so a launch starts on the tiles the launch
        before ended on, whose lines L2 still holds (BiCGK fp32 n = 4096: 29.8 ->
        27.2 us when calls repeat). Block i takes item i or the last but i; the
        work of an item, and so every result bit, is the same either way."""
        return TURN_ARG in self.args

    @property
    def block(self) -> int:
        """Threads per block of the launch."""
        return self.plan.shape.block

    def owner(self, arg: Arg) -> "Kernel":
        """The kernel an argument is for (a horizontal fusion answers with a part)."""
        return self

    def macros(self) -> dict[str, int]:
        macros = self.plan.shape.macros(self.dtype)
        if self.plan.geometry is not Geometry.VECTOR:
            macros["STREAM_MATRIX"] = int(self.stream_matrices)
        else:
            macros["STREAM_LOADS"] = int(self.plan.l2 == L2_EVICT_LOADS)
            macros["STREAM_STORES"] = int(self.plan.l2 == L2_STREAM_STORES)
        return macros

    # Host-side arithmetic: the same formulas the kernel uses for its indices.
    def grid_extent(self, sizes: dict[str, int]) -> tuple[int, int]:
        """Blocks along (rows, cols) in the tile geometry, (blocks, 1) for vectors."""
        m = self.macros()
        if self.plan.geometry is Geometry.VECTOR:
            chunks = -(-sizes[self.dims[0]] // (m["BLOCK"] * m["VEC"]))
            return -(-chunks // m["ITERS"]), 1
        if self.plan.geometry is Geometry.BAND:  # a block walks ITERS instances of BAND_ROWS rows
            return -(-sizes[self.dims[0]] // (m["BAND_ROWS"] * m["ITERS"])), 1
        rows = -(-sizes[self.dims[0]] // m["TILE_ROWS"])
        cols = -(-sizes[self.dims[1]] // m["TILE_COLS"])
        if self.plan.serial == ROWS:
            rows = -(-rows // m["ITERS"])
        else:
            cols = -(-cols // m["ITERS"])
        return rows, cols

    def grid(self, sizes: dict[str, int]) -> int:
        rows, cols = self.grid_extent(sizes)
        return rows * cols

    @property
    def estimated_registers(self) -> int:
        """Registers per thread, roughly: 22 for indices and addresses, about half
        a register per word of register elements (nvcc reuses a loop's
        temporaries), and a whole one per word the serial loop carries (invariant
        loads and accumulated reductions stay live throughout). Fitted to ptxas on
        312 kernels of the space (mean error 6.6 registers, from 9.2 without the
        carried term); nvcc tells the truth."""
        words = geo.DTYPES[self.dtype].itemsize // 4
        by_value = {e.value: e for e in self.elements if e.storage is Storage.REGISTERS}
        if self.plan.geometry is Geometry.BAND:
            return self._band_registers(by_value, words)
        carried = {op.value for op in self.ops if op.section != LOOP and op.value in by_value}
        carried |= {e.value for e in by_value.values() if e.accumulated}
        slots = sum(e.size for e in by_value.values())
        kept = sum(by_value[v].size for v in carried)
        return min(255, round(22 + 0.47 * slots * words + 1.0 * kept * words))

    def _band_registers(self, by_value: dict, words: int) -> int:
        """A band kernel's registers, roughly: 24 for indices and addresses, the
        matrix elements live at once (the rows in flight: a computed matrix
        replaces the one it came from, but two matrices loaded in one phase are
        both held; ``live_band_slots``) and every other register element whole
        (ptxas, fp32 n = 16384, 512 threads of 8 pieces: ATAX 126 registers against
        121 estimated, BiCGK 120 against 122; GEMVER's first kernel, 152 estimated,
        spilled at the 128 a block of 512 may have; GESUMMV at fp32 n = 6000, 512
        threads of 3 pieces and 2 rows, both matrices loaded at once: 84 against 88,
        and with loads ahead it spilled 224 bytes, estimated 136)."""
        matrices = [e.size for e in by_value.values() if e.mapping == "band"]
        live = max(self.live_band_slots, max(matrices, default=0))
        rest = sum(e.size for e in by_value.values() if e.mapping != "band")
        return min(255, round(24 + words * (live + rest) + self.ahead_registers))

    @property
    def ahead_registers(self) -> int:
        """Registers of the second copy a band kernel loading ahead holds (0 without)."""
        if not self.plan.ahead:
            return 0
        words = geo.DTYPES[self.dtype].itemsize // 4
        by_value = {e.value: e for e in self.elements}
        return words * sum(by_value[v].size for v in self.loaded_ahead())

    def loaded_ahead(self) -> tuple[int, ...]:
        """The values a band kernel's loop loads into registers: with ``ahead``, each
        has a second copy, the next instance's, loaded before this one's computes."""
        registers = {e.value for e in self.elements if e.storage is Storage.REGISTERS}
        return tuple(dict.fromkeys(op.value for op in self.ops
                                   if op.section == LOOP and op.step is not None
                                   and op.step.kind is RoutineKind.LOAD and op.value in registers))

    @property
    def loop_bytes(self) -> int:
        """Bytes one thread loads and stores in an iteration: what keeps DRAM busy."""
        itemsize = geo.DTYPES[self.dtype].itemsize
        by_value = {e.value: e for e in self.elements}
        total = 0.0
        for op in self.ops:
            if op.section == LOOP and op.step and op.step.kind in (RoutineKind.LOAD, RoutineKind.STORE):
                e = by_value[op.value]
                shared = e.storage is not Storage.REGISTERS or e.mapping == "band_rows"  # a band's row values:
                total += e.size / self.plan.shape.block if shared else e.size  # every thread the same
        return int(total * itemsize)

    @property
    def onchip_bytes(self) -> int:
        """On-chip memory of one block: shared memory plus every thread's register elements."""
        itemsize = geo.DTYPES[self.dtype].itemsize
        registers = sum(e.size for e in self.elements if e.storage is Storage.REGISTERS)
        return (self.shared_reals + registers * self.plan.shape.block) * itemsize

    @property
    def zeroed_workspace(self) -> bool:
        """Whether the reductions' workspaces must start at zero: a band kernel adds
        its column sums into one accumulator with atomics (the block that finishes
        clears it again for the next launch)."""
        return self.plan.geometry is Geometry.BAND

    def reduction_buffers(self, reduction: Reduction, sizes: dict[str, int]) -> tuple[int, int]:
        """(reals of the workspace, counters) the reduction needs: a region of whole
        128-byte lines per output tile (fusec_region in support.cuh); in the band
        geometry one accumulator of the outputs and one counter."""
        if self.plan.geometry is Geometry.BAND:  # two halves, one per launch in turn, when finished after a barrier
            return partials_region(sizes[self.dims[1]], self.dtype) * (2 if self.sums_after_barrier else 1), 1
        tiles, arrivals, width = self.reduction_tiles(reduction, sizes)
        return tiles * partials_region(arrivals * width, self.dtype), tiles

    def reduction_tiles(self, reduction: Reduction, sizes: dict[str, int]) -> tuple[int, int, int]:
        """(output tiles, blocks that store partials of each, outputs per tile)."""
        m = self.macros()
        if reduction.axis is None:
            return 1, self.grid(sizes), 1
        if self.plan.geometry is Geometry.BAND:  # column sums: every block adds into one accumulator
            return 1, self.grid(sizes), sizes[self.dims[1]]
        rows, cols = self.grid_extent(sizes)
        if reduction.axis == COLS:  # partials along the columns; outputs are rows
            return -(-sizes[self.dims[0]] // m["TILE_ROWS"]), cols, m["TILE_ROWS"]
        return -(-sizes[self.dims[1]] // m["TILE_COLS"]), rows, m["TILE_COLS"]


PARTIALS_LINE = 128  # bytes: FUSEC_LINE in support.cuh


def partials_region(reals: int, dtype: str) -> int:
    """fusec_region of support.cuh: reals rounded up to whole 128-byte lines."""
    itemsize = geo.DTYPES[dtype].itemsize
    return -(-reals * itemsize // PARTIALS_LINE) * (PARTIALS_LINE // itemsize)


# --------------------------------------------------------------------------- analysis

def _axis_of(function: Function, dim: str) -> str:
    return ROWS if dim == function.rows_dim else COLS


def _kernel_dims(dag: Dag, library: Library, plan: KernelPlan) -> tuple[str, ...]:
    dims = None
    for call in plan.calls:
        function = function_of(dag, library, call)
        bound = call_dims(dag, library, call)
        if plan.geometry is not Geometry.VECTOR:
            mine = (bound[function.rows_dim], bound[function.cols_dim])
        else:
            vector = function.array_params[0] if function.array_params else function.result
            mine = (bound[vector.dims[0]],)
        if dims is not None and mine != dims:
            raise PlanError(f"calls of one kernel must cover the same space: {dims} and {mine}")
        dims = mine
    return dims


def _routine(library: Library, dag: Dag, plan: KernelPlan, step: Step) -> Routine:
    function = function_of(dag, library, step.call)
    impl = next(i for i in function.implementations if i.name == plan.implementation_of(step.call))
    if step.kind is RoutineKind.LOAD:
        return impl.load_of(step.param)
    if step.kind is RoutineKind.COMPUTE:
        return impl.compute
    return impl.store


def _check_threads(routine: Routine, macros: dict[str, int]) -> None:
    """A routine may run on fewer threads than the block, never more."""
    if routine.threads is None:
        return
    wanted = [geo.evaluate(t, macros) for t in routine.threads]
    if len(wanted) == 2:
        x, y = wanted
        fits = x * y <= macros["BLOCK"] and (x != macros["BLOCK_X"] or y <= macros["BLOCK_Y"])
    else:
        fits = wanted[0] <= macros["BLOCK"]
    if not fits or min(wanted) < 1:
        raise PlanError(f"routine {routine.name} wants threads {' x '.join(map(str, wanted))},"
                        f" more than the block's {macros['BLOCK']}")


def whole_in_block(function: Function, plan: KernelPlan) -> bool:
    """A band kernel's sum along its rows (sgemv's) is whole inside the block: it
    needs no partials, and later calls of the kernel may read it."""
    return (plan.geometry is Geometry.BAND and function.hof.reduce
            and _axis_of(function, function.hof.axis) == COLS)


def _accumulated(function: Function, plan: KernelPlan) -> bool:
    if not function.hof.reduce:
        return False
    if plan.geometry is Geometry.VECTOR:
        return True
    return _axis_of(function, function.hof.axis) == plan.serial


def _invariant(function: Function, param: str, plan: KernelPlan) -> bool:
    """A vector along the axis the loop does not walk is the same in every iteration."""
    if plan.geometry is Geometry.VECTOR:
        return False
    p = function.param(param)
    return p.kind is Kind.VECTOR and _axis_of(function, p.dims[0]) != plan.serial


def build_kernel(dag: Dag, library: Library, plan: KernelPlan, dtype: str, index: int,
                 emit: bool = True, turns: bool = False) -> Kernel:
    """Analyse a fusion implementation into a kernel, and print its source (unless
    ``emit`` is false: the space only needs the analysis). ``turns``: the kernel
    runs alone and takes the direction of its walk as a parameter (Kernel.turns;
    not for the parts of horizontal or striped fusions, whose blocks take their
    items otherwise). Raises PlanError when
    the plan cannot be built (e.g. routines disagree on where an element lives).
    A horizontal fusion's plan gives its :class:`~fusec.codegen.horizontal.HorizontalKernel`,
    a striped fusion's its :class:`~fusec.codegen.striped.StripedKernel`, a held
    fusion's its :class:`~fusec.codegen.held.HeldKernel`."""
    if isinstance(plan, HorizontalPlan):
        from .horizontal import build_horizontal  # which builds each part with this function
        return build_horizontal(dag, library, plan, dtype, index, emit)
    if isinstance(plan, StripedPlan):
        from .striped import build_striped
        return build_striped(dag, library, plan, dtype, index, emit)
    if isinstance(plan, HeldPlan):
        from .held import build_held
        return build_held(dag, library, plan, dtype, index, emit)
    dtype = geo.dtype_name(dtype)
    macros = plan.shape.macros(dtype)
    kernel_calls = frozenset(plan.calls)
    for call in plan.calls:
        if function_of(dag, library, call).geometry_of(plan.implementation_of(call)) is not plan.geometry:
            raise PlanError(f"call {call} ({dag.call(call).function}, implementation"
                            f" {plan.implementation_of(call)}) does not run in the {plan.geometry} geometry")
    if plan.geometry is Geometry.BAND and plan.serial != ROWS:
        raise PlanError("a band kernel's serial loop walks its rows")
    if plan.ahead and plan.geometry is not Geometry.BAND:
        raise PlanError("only a band kernel loads its next instance ahead")
    dims = _kernel_dims(dag, library, plan)
    for step in plan.steps:
        _check_threads(_routine(library, dag, plan, step), macros)

    # Which value each step touches, with which mapping and how.
    touches: dict[int, list[tuple[Mode, str]]] = {}
    step_touches: list[list[tuple[int, Mode, str]]] = []
    for step in plan.steps:
        routine = _routine(library, dag, plan, step)
        record = dag.call(step.call)
        params = dict(array_args(dag, library, step.call))
        mine: list[tuple[int, Mode, str]] = []
        if step.kind is RoutineKind.LOAD:
            mine.append((params[step.param], Mode.WRITE, routine.writes.mapping))
        elif step.kind is RoutineKind.COMPUTE:
            for read in routine.reads:
                if isinstance(read, Access):
                    mine.append((params[read.param], Mode.READ, read.mapping))
            reduce = function_of(dag, library, step.call).hof.reduce
            mine.append((record.result, Mode.UPDATE if reduce else Mode.WRITE, routine.writes.mapping))
        else:
            mine.append((record.result, Mode.READ, routine.reads[0].mapping))
        for value, mode, mapping in mine:
            touches.setdefault(value, []).append((mode, mapping))
        step_touches.append(mine)

    # Where each element lives: registers when every access shares one register
    # mapping (compile-time indexing), shared memory when all are shared mappings.
    storage: dict[int, tuple[Storage, str, str, int]] = {}
    for value, accesses in touches.items():
        mappings = [library.mappings[m] for _, m in accesses]
        kinds = {m.storage for m in mappings}
        label = dag.value(value).label
        if kinds == {Storage.REGISTERS}:
            if len({m.name for m in mappings}) != 1:
                raise PlanError(f"{label} is held in registers with different mappings"
                                f" ({', '.join(sorted({m.name for m in mappings}))})")
            m = mappings[0]
            storage[value] = (Storage.REGISTERS, m.name, m.size, geo.evaluate(m.size, macros))
        elif kinds == {Storage.SHARED}:
            biggest = max(mappings, key=lambda m: geo.evaluate(m.size, macros))
            storage[value] = (Storage.SHARED, mappings[0].name, biggest.size,
                              geo.evaluate(biggest.size, macros))
        else:
            raise PlanError(f"{label} is accessed both from registers and from shared memory")

    # Sections (Algorithm 1): invariant loads before the loop, accumulated stores after.
    sections: list[str] = []
    for step in plan.steps:
        function = function_of(dag, library, step.call)
        if step.kind is RoutineKind.LOAD and _invariant(function, step.param, plan):
            sections.append(PRE)
        elif step.kind is RoutineKind.STORE and _accumulated(function, plan):
            sections.append(POST)
        else:
            sections.append(LOOP)

    # The schedule: clears of reductions go before the loop when they accumulate,
    # right before their compute otherwise (Algorithm 2, line 2).
    schedule: list[tuple[str, Step | None, int | None, list[tuple[int, Mode, str]], Routine | None]] = []
    reductions = []
    for step, section, mine in zip(plan.steps, sections, step_touches):
        routine = _routine(library, dag, plan, step)
        function = function_of(dag, library, step.call)
        if step.kind is RoutineKind.COMPUTE and function.hof.reduce:
            result = dag.call(step.call).result
            clear = (result, Mode.WRITE, CLEAR_MAPPING)
            if _accumulated(function, plan):
                schedule.insert(sum(1 for s in schedule if s[0] == PRE), (PRE, None, result, [clear], None))
            else:
                schedule.append((LOOP, None, result, [clear], None))
            if not whole_in_block(function, plan):
                reductions.append(Reduction(result, None if plan.geometry is Geometry.VECTOR
                                            else _axis_of(function, function.hof.axis)))
        schedule.append((section, step, None, mine, routine))
    order = {PRE: 0, LOOP: 1, POST: 2}
    schedule.sort(key=lambda s: order[s[0]])  # stable: keeps the plan's order inside sections

    # Shared memory: elements, and each routine's scratch for the duration of its call.
    def touch(value: int, mode: Mode, mapping: str) -> Touch:
        return Touch(f"v{value}", mode, mapping, storage[value][0] is Storage.SHARED)

    events, sizes = [], {}
    for position, (section, step, clear, mine, routine) in enumerate(schedule):
        touched = [touch(v, mode, m) for v, mode, m in mine]
        if routine is not None and routine.scratch:
            key = f"scratch{position}"
            sizes[key] = geo.evaluate(routine.scratch, macros)
            # each thread writes its own words, then reads words others wrote (after
            # the routine's own barrier): different mappings, so a later write there
            # (the next iteration, another routine's scratch) waits for a barrier
            touched.insert(0, Touch(key, Mode.WRITE, "<scratch: own words>", True))
            touched.append(Touch(key, Mode.READ, "<scratch: any words>", True))
        events.append(Event(section, tuple(touched), bool(routine and routine.sync)))
    for value, (kind, _, _, size) in storage.items():
        if kind is Storage.SHARED:
            sizes[f"v{value}"] = size
    regions, total = allocate(sizes, events, align=macros["VEC"])
    barriers = place_barriers(events, regions)
    if reductions and plan.geometry is not Geometry.BAND:  # the finish needs BLOCK reals; a barrier
        # precedes it, so it may reuse anything (a band kernel's finish needs none)
        total = max(total, macros["BLOCK"])

    elements = []
    for value, (kind, mapping, size_expr, size) in sorted(storage.items()):
        function = function_of(dag, library, dag.producer(value)) if dag.producer(value) in kernel_calls else None
        reduction = bool(function and function.hof.reduce)
        prefix = "r_" if kind is Storage.REGISTERS else "s_"
        elements.append(Element(value, prefix + dag.value(value).c_name, kind, mapping, size_expr, size,
                                regions.get(f"v{value}"), reduction,
                                reduction and _accumulated(function, plan)))
    ops = tuple(Op(section, step, clear, i in barriers, regions.get(f"scratch{i}"),
                   mine[0][0] if step and step.kind is RoutineKind.LOAD else (
                       dag.call(step.call).result if step else clear))
                for i, (section, step, clear, mine, _) in enumerate(schedule))

    if total * geo.DTYPES[dtype].itemsize > MAX_STATIC_SHARED:
        raise PlanError(f"{total} reals of shared memory, more than a block may declare"
                        f" ({MAX_STATIC_SHARED} bytes)")
    args = _kernel_args(dag, library, plan, storage, kernel_calls, dims) + ((TURN_ARG,) if turns else ())
    name = f"k{index}_" + "_".join(dag.call(c).function for c in plan.calls)
    stores_matrix = any(a.role == "out" and dag.value(a.value).kind is Kind.MATRIX for a in args)
    stream = plan.geometry is not Geometry.VECTOR and not stores_matrix
    kernel = Kernel(index, name, plan, dtype, dims, tuple(elements), ops, args, tuple(reductions),
                    total, "", stream_matrices=stream, live_band_slots=_live_band_slots(dag, ops, elements))
    if plan.geometry is Geometry.BAND and kernel.estimated_registers > min(255, REGISTERS_PER_SM // plan.shape.block):
        # a band keeps whole rows in registers: where they do not fit, they would spill
        raise PlanError(f"about {kernel.estimated_registers} registers per thread, more than a block of"
                        f" {plan.shape.block} threads may have")
    if stream and turns:
        kernel = dataclasses.replace(kernel, keep_blocks=KEEP_L2_BYTES // _matrix_bytes_per_block(kernel, dag))
    return dataclasses.replace(kernel, source=_emit(kernel, dag, library)) if emit else kernel


def _live_band_slots(dag: Dag, ops, elements) -> int:
    """The most register slots of whole-row matrix elements (mapping ``band``) live at
    once in the loop: a load makes its element live, a compute keeps its inputs live
    until it has read them and then its result (an elementwise map's result takes its
    dead input's registers), and an element dies after its last reader."""
    band = {e.value: e.size for e in elements if e.mapping == "band" and e.storage is Storage.REGISTERS}
    loop = [op for op in ops if op.section == LOOP and op.step is not None]
    last_use: dict[int, int] = {}
    for i, op in enumerate(loop):
        if op.step.kind is RoutineKind.COMPUTE:
            last_use.update((v, i) for v in dag.call(op.step.call).value_args())
        elif op.step.kind is RoutineKind.STORE:
            last_use[op.value] = i
    live: set[int] = set()
    peak = 0
    for i, op in enumerate(loop):
        if op.step.kind is RoutineKind.LOAD and op.value in band:
            live.add(op.value)
        peak = max(peak, sum(band[v] for v in live))
        live = {v for v in live if last_use.get(v, -1) > i}
        if op.step.kind is RoutineKind.COMPUTE and op.value in band:
            live.add(op.value)
        peak = max(peak, sum(band[v] for v in live))
    return peak


def _matrix_bytes_per_block(kernel: Kernel, dag: Dag) -> int:
    """Bytes of matrices one block of a tile kernel loads over its serial loop."""
    by_value = {e.value: e for e in kernel.elements}
    block, iters = kernel.plan.shape.block, kernel.plan.shape.iters
    reals = 0.0
    for op in kernel.ops:
        if (op.section == LOOP and op.step and op.step.kind is RoutineKind.LOAD
                and dag.value(op.value).kind is Kind.MATRIX):
            e = by_value[op.value]
            reals += e.size * block if e.storage is Storage.REGISTERS else e.size
    return max(1, int(reals * iters * geo.DTYPES[kernel.dtype].itemsize))


def _kernel_args(dag: Dag, library: Library, plan: KernelPlan, storage, kernel_calls, dims) -> tuple[Arg, ...]:
    ins, outs, scalars = [], [], []
    seen: set[int] = set()
    for call in plan.calls:
        function = function_of(dag, library, call)
        record = dag.call(call)
        for param, arg in zip(function.params, record.args):
            if not isinstance(arg, int) or arg in seen:
                continue
            value = dag.value(arg)
            if param.kind is Kind.SCALAR:
                seen.add(arg)
                if value.producer is None:
                    scalars.append(Arg("scalar", f"const real {value.c_name}", arg))
                else:  # computed by an earlier kernel: it stays on the device
                    scalars.append(Arg("scalar_ptr", f"const real* __restrict__ g_{value.c_name}", arg))
            elif dag.producer(arg) not in kernel_calls:
                seen.add(arg)
                axis = (_axis_of(function, param.dims[0])
                        if plan.geometry is not Geometry.VECTOR and param.kind is Kind.VECTOR else None)
                ins.append(Arg("in", f"const real* __restrict__ g_{value.c_name}", arg, axis=axis))
        if leaves_kernel(dag, library, call, kernel_calls):
            value = dag.value(record.result)
            outs.append(Arg("out", f"real* __restrict__ g_{value.c_name}", value.id))
            if function.hof.reduce and not whole_in_block(function, plan):
                outs.append(Arg("workspace", f"real* __restrict__ ws_{value.c_name}", value.id))
                outs.append(Arg("counters", f"unsigned* __restrict__ cnt_{value.c_name}", value.id))
    if plan.geometry is not Geometry.VECTOR:
        sizes = [Arg("size", "const int rows", size=dims[0]), Arg("size", "const int cols", size=dims[1])]
    else:
        sizes = [Arg("size", "const long long n", size=dims[0])]
    return tuple(ins + outs + scalars + sizes + [Arg("aligned", "const int aligned")])


# --------------------------------------------------------------------------- emission

class _Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = "") -> None:
        self.lines.append(("  " * self.depth + text) if text else "")

    def open(self, text: str) -> None:
        self(text + " {")
        self.depth += 1

    def close(self, text: str = "}") -> None:
        self.depth -= 1
        self(text)


def _call_text(dag: Dag, call: int) -> str:
    record = dag.call(call)
    args = ", ".join(a.text if isinstance(a, Constant) else dag.value(a).label for a in record.args)
    return (f"{Path(dag.file).name}:{record.coord.line}  "
            f"{dag.value(record.result).label} = {record.function}({args})")


def _emit(kernel: Kernel, dag: Dag, library: Library, probe: bool = False) -> str:
    plan, macros = kernel.plan, kernel.macros()
    tile = plan.geometry is Geometry.TILE
    w = _Writer()
    namespace = f"{kernel.name}_routines"
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    for call in plan.calls:
        impl = plan.implementation_of(call)
        w(f"//   {_call_text(dag, call)}" + (f"   [implementation {impl}]" if impl != "default" else ""))
    w(f"//   {plan.shape.describe(kernel.dtype)}"
      + (f" along {'rows' if plan.serial == ROWS else 'columns'} ({kernel.dims[0 if plan.serial == ROWS else 1]})"
         if tile else ""))
    w(f"namespace {namespace} {{")
    for macro, value in macros.items():
        if macro != "VEC":  # VEC belongs to the precision, defined once at the top
            w(f"#define {macro} {value}")
    if kernel.keep_blocks:
        _emit_keeping_load(w, kernel.keep_blocks)
    for path, text in _library_sources(kernel, dag, library):
        for line in library_text(path, text):
            w(line)
    w(f"}}  // namespace {namespace}")
    w()

    params = ",\n    ".join(a.decl for a in kernel.args)
    w(f'extern "C" __global__ void __launch_bounds__(BLOCK) {kernel.name}(\n    {params})')
    w.open("")
    w.lines[-1] = "{"
    w(f"using namespace {namespace};")
    if kernel.turns:
        w("// the block's work item: launches alternate the direction (Kernel.turns), so each")
        w("// starts on the tiles the one before ended on, while L2 still holds their lines")
        w("const int fusec_item = backwards ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;")
    _emit_body(w, kernel, dag, library, probe, TURNING if kernel.turns else ALONE)
    w.close()
    for macro in macros:
        if macro != "VEC":
            w(f"#undef {macro}")
    return "\n".join(w.lines) + "\n"


def _emit_keeping_load(w: _Writer, blocks: int) -> None:
    """The kernel's own fusec_load16 and fusec_load1, which the library's routines in its
    namespace call instead of support.cuh's: plain in the last ``blocks`` blocks (Kernel.keep_blocks)."""
    w(f"// The last {blocks} blocks to run load the matrix plainly, so that L2 keeps those tiles for the")
    w("// next launch, which starts on them (Kernel.keep_blocks); the others as the kernel's policy says.")
    for name, kind in (("fusec_load16", "fusec_vec"), ("fusec_load1", "real")):
        w("template <bool EVICT_FIRST>")
        w(f"__device__ __forceinline__ {kind} {name}(const real* p) {{")
        w(f"  if (EVICT_FIRST && blockIdx.x + {blocks}u >= gridDim.x) return ::{name}<false>(p);")
        w(f"  return ::{name}<EVICT_FIRST>(p);")
        w("}")


def _library_sources(kernel: Kernel, dag: Dag, library: Library) -> list[tuple[str, str]]:
    """Function files of the kernel's calls, and the shared routine files that
    define a routine (or macro) that anything included names."""
    plan = kernel.plan
    names = {_routine(library, dag, plan, op.step).name for op in kernel.ops if op.step}
    names |= {function_of(dag, library, c).finish.routine for c in plan.calls
              if function_of(dag, library, c).finish}
    functions = []
    for call in plan.calls:
        function = function_of(dag, library, call)
        # a function's own file, where the kernel calls a routine of it (a band kernel calls
        # none of the tile routines beside which its band.cuh routines are declared)
        needed = plan.geometry is not Geometry.BAND or any(
            library.routine_homes.get(n) == function.file for n in names)
        if needed and function.source.strip() and (function.file, function.source) not in functions:
            functions.append((function.file, function.source))
    defines = {}
    for source in library.routine_files:
        for name in re.findall(r"^\s*#\s*define\s+(\w+)", source.text, re.M):
            defines[name] = source.path
    homes = {**{k: v for k, v in library.routine_homes.items()}, **defines}
    wanted: set[str] = set()
    texts = [text for _, text in functions]
    while True:
        for text in texts:
            names |= {n for n in re.findall(r"\b\w+\b", text) if n in homes}
        new = {homes[n] for n in names if n in homes} - wanted
        if not new:
            break
        wanted |= new
        texts = [s.text for s in library.routine_files if s.path in new]
    shared = [(s.path, s.text) for s in library.routine_files if s.path in wanted]
    return shared + functions


def _emit_body(w: _Writer, kernel: Kernel, dag: Dag, library: Library, probe: bool = False,
               threads: Threads = ALONE, hold=None) -> None:
    """The kernel's body. ``hold`` (a held kernel's part, :mod:`.held`): the
    serial loop is unrolled, so that its iteration number is a constant, and
    the element ``hold.value`` is kept on chip after the op that writes it
    (``hold.keep``) or taken from there instead of loaded."""
    plan = kernel.plan
    tid = threads.tid
    tile = plan.geometry is Geometry.TILE
    by_value = {e.value: e for e in kernel.elements}

    # 1-2: memory
    if kernel.shared_reals:
        w("// shared memory: one allocation; elements whose lifetimes do not overlap share words")
        w(f"__shared__ __align__(16) real smem[{kernel.shared_reals}];")
    if kernel.reductions:
        if threads.tickets_at_once:
            w(f"__shared__ bool fusec_last[{_ticket_count(kernel)}];  // whether this block came last, per ticket")
        else:
            w("__shared__ int fusec_flag;  // set by the block that finishes a reduction")
    for e in kernel.elements:
        label = dag.value(e.value).label
        what = "partial " if e.reduction else ""
        if e.storage is Storage.REGISTERS:
            w(f"real {e.var}[{e.size_expr}];  // {what}{label}, mapping {e.mapping}")
        else:
            w(f"real* const {e.var} = smem + {e.region.offset};  // {what}{label}, mapping {e.mapping},"
              f" {e.size} reals")
    for arg in kernel.args:
        if arg.role == "scalar_ptr":
            c = dag.value(arg.value).c_name
            w(f"const real {c} = *g_{c};  // computed by an earlier kernel")
    if probe:
        _emit_probe_seed(w, kernel)

    # 3: indices
    w()
    if plan.geometry is Geometry.BAND:
        from .band import emit_band_body
        emit_band_body(w, kernel, dag, library, threads, by_value, hold)
        return
    if tile:
        serial_rows = plan.serial == ROWS
        w("// indices: a 1D grid of tiles; each block walks ITERS tiles along the "
          + ("rows" if serial_rows else "columns"))
        w("[[maybe_unused]] const int row_tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;")
        w("[[maybe_unused]] const int col_tiles = (cols + TILE_COLS - 1) / TILE_COLS;")
        w("[[maybe_unused]] const int grid_rows = "
          + ("(row_tiles + ITERS - 1) / ITERS;" if serial_rows else "row_tiles;"))
        w("const int grid_cols = " + ("col_tiles;" if serial_rows else "(col_tiles + ITERS - 1) / ITERS;"))
        if threads.own_grid:
            w(f"[[maybe_unused]] const int {threads.grid} = grid_rows * grid_cols;  // this part's own grid")
        if threads.part:
            w(f"if (blockIdx.x >= {threads.grid}) return;  // a block past it runs the other parts only")
        w(f"const int block_row = {threads.item} / grid_cols;")
        w(f"const int block_col = {threads.item} % grid_cols;")
        w("fusec_tile c;")
        w(f"c.tx = {tid} % BLOCK_X;")
        w(f"c.ty = {tid} / BLOCK_X;")
        w("c.rows = rows;")
        w("c.cols = cols;")
        w("c.aligned = aligned;")
        w("c.vec_ok = aligned && cols % VEC == 0;")
        w("c.row0 = block_row * " + ("ITERS * " if serial_rows else "") + "TILE_ROWS;")
        w("c.col0 = block_col * " + ("" if serial_rows else "ITERS * ") + "TILE_COLS;")
    else:
        w("// indices: each block walks ITERS chunks of BLOCK*VEC consecutive values")
        w("const long long chunk = (long long)BLOCK * VEC;")
        if threads.part:
            w(f"const int {threads.grid} = (int)(((n + chunk - 1) / chunk + ITERS - 1) / ITERS);"
              "  // this part's own grid")
            w(f"if (blockIdx.x >= {threads.grid}) return;  // a block past it runs the other parts only")
        w(f"long long base = (long long){threads.item} * ITERS * chunk;")
        w("fusec_chunk c;")
        w(f"c.t = {tid};")
        w("c.n = n;")
        w("c.vec_ok = aligned;")
        w("c.i = base + (long long)c.t * VEC;")

    full = ("c.full = c.vec_ok && c.row0 + TILE_ROWS <= rows && c.col0 + TILE_COLS <= cols;"
            if tile else "c.full = c.vec_ok && base + chunk <= n;")
    full_note = "  // no guards needed in this " + ("tile" if tile else "chunk")
    w(full + full_note)
    pre = [op for op in kernel.ops if op.section == PRE]
    loop = [op for op in kernel.ops if op.section == LOOP]
    post = [op for op in kernel.ops if op.section == POST]
    if pre:
        w()
        w("// before the loop: invariant loads, clears of accumulated reductions")
        for op in pre:
            _emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
    w()
    if tile:
        axis = "row" if plan.serial == ROWS else "col"
        limit = "rows" if plan.serial == ROWS else "cols"
        step = "TILE_ROWS" if plan.serial == ROWS else "TILE_COLS"
        w(f"const int first_{axis}0 = c.{axis}0;")
        if hold is not None and hold.unrolled:  # `it` a constant in each copy: it indexes the held registers
            w("#pragma unroll")
            w.open(f"for (int it = 0; it < ITERS; ++it, c.{axis}0 += {step})")
            w(f"if (c.{axis}0 >= {limit}) break;")
        else:
            w.open(f"for (int it = 0; it < ITERS && c.{axis}0 < {limit}; ++it, c.{axis}0 += {step})")
    else:
        w.open("for (int it = 0; it < ITERS && base < n; ++it, base += chunk, c.i += chunk)")
    w(full)
    emit_loop_ops(w, loop, kernel, dag, library, by_value, threads, hold, probe=probe)
    w.close()
    if tile:
        w(f"c.{axis}0 = first_{axis}0;")
        w(full)
    if post:
        w()
        w("// after the loop: stores of accumulated reductions")
        for op in post:
            _emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
    if probe:
        _emit_probe_sink(w, kernel)
    if kernel.reductions:
        _emit_finishes(w, kernel, dag, library, threads)


def emit_loop_ops(w: _Writer, loop: list[Op], kernel: Kernel, dag: Dag, library: Library, by_value,
                  threads: Threads, hold=None, probe: bool = False, after=None) -> None:
    """The serial loop's ops; with ``hold`` (a held kernel's part) the held element
    is kept after the op that loads or computes it, or taken instead of loaded.
    ``after(op)``: lines to add after each op (a band kernel's row finishes)."""
    for op in loop:
        held = hold is not None and op.value == hold.value and op.step is not None
        if held and not hold.keep and op.step.kind is RoutineKind.LOAD:
            hold.emit_take(w, by_value[op.value].var,
                           lambda: _emit_op(w, op, kernel, dag, library, by_value, threads=threads))
            continue
        if held and hold.keep and hold.stored_after and op.step.kind is RoutineKind.STORE:
            w("// held units are stored after the barrier, by the consumer (stores_after)")
            w.open(f"if (!({hold.held_units}))")
            _emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
            w.close()
            continue
        _emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
        if held and hold.keep and op.step.kind in (RoutineKind.LOAD, RoutineKind.COMPUTE):
            hold.emit_keep(w, by_value[op.value].var)
        if after is not None:
            after(op)


def _element_arg(access, params, by_value, scalars) -> str:
    if isinstance(access, Access):
        return by_value[params[access.param]].var
    return scalars[access]


def _emit_op(w: _Writer, op: Op, kernel: Kernel, dag: Dag, library: Library, by_value,
             ctx: str = "c", probe: bool = False, threads: Threads = ALONE) -> None:
    if probe and op.step is not None:
        _emit_probed_op(w, op, kernel, dag, library, by_value, ctx)
        return
    plan = kernel.plan
    tile = plan.geometry is Geometry.TILE
    if op.barrier:
        w("BARRIER();")
    if op.step is None:
        e = by_value[op.clear]
        label = dag.value(op.clear).label
        w(f"// clear the partial of {label} ({dag.call(dag.producer(op.clear)).function})")
        if e.storage is Storage.REGISTERS:
            w("#pragma unroll")
            w(f"for (int s = 0; s < {e.size_expr}; ++s) {e.var}[s] = real(0);")
        else:
            w(f"for (int s = {threads.tid}; s < {e.size}; s += BLOCK) {e.var}[s] = real(0);")
        return
    step = op.step
    routine = _routine(library, dag, plan, step)
    function = function_of(dag, library, step.call)
    record = dag.call(step.call)
    params = dict(array_args(dag, library, step.call))
    scalars = {}
    for p, a in zip(function.params, record.args):
        if p.kind is Kind.SCALAR:
            scalars[p.name] = (f"real({a.literal})" if isinstance(a, Constant) else dag.value(a).c_name)
    result = dag.value(record.result)
    partial = function.hof.reduce and not whole_in_block(function, plan)
    what = {RoutineKind.LOAD: f"load {dag.value(params[step.param]).label}" if step.param in params else "",
            RoutineKind.COMPUTE: "compute",
            RoutineKind.STORE: f"store {'the partial of ' if partial else ''}{result.label}"}[step.kind]
    w(f"// {_call_text(dag, step.call)}: {what} [{routine.name}]")
    if step.kind is RoutineKind.LOAD:
        value = params[step.param]
        args = [f"g_{dag.value(value).c_name}", by_value[value].var]
    elif step.kind is RoutineKind.COMPUTE:
        args = [_element_arg(a, params, by_value, scalars) for a in routine.reads]
        args.append(by_value[result.id].var)
    else:
        target = f"g_{result.c_name}"
        if plan.geometry is Geometry.BAND:
            if function.hof.reduce and not whole_in_block(function, plan):
                target = f"ws_{result.c_name}"  # the accumulator every block adds into
                if kernel.sums_after_barrier:
                    target += " + fusec_half"  # this launch's half of it
        elif function.hof.reduce:
            # partials go to the workspace: the region of this output tile, one slice of
            # it per block along the reduced axis (the store indexes it like the output)
            if not tile:
                target = f"ws_{result.c_name} + {threads.item}"  # where the item's chunks are
            else:
                target = f"ws_{result.c_name} + " + _partials_offset(_axis_of(function, function.hof.axis), ctx)
        args = [by_value[result.id].var, target]
    if op.scratch is not None:
        args.append(f"smem + {op.scratch.offset}")
    if routine.threads is None:
        w(f"{routine.name}({', '.join(args + [ctx])});")
        return
    # Algorithm 2, lines 3-4: fewer threads; keep warps full, recompute indices.
    if not tile:
        w.open(f"if ({ctx}.t < {routine.threads[0]})")
        w(f"{routine.name}({', '.join(args + [ctx])});")
        w.close()
        return
    x, y = routine.threads
    if x == "BLOCK_X":
        w.open(f"if ({ctx}.ty < {y})")
        w(f"{routine.name}({', '.join(args + [ctx])});")
        w.close()
    else:
        w.open("")
        w.lines[-1] = w.lines[-1][:-2] + "{"
        w(f"const int t = {ctx}.ty * BLOCK_X + {ctx}.tx;")
        w.open(f"if (t < ({x}) * ({y}))")
        w(f"fusec_tile r = {ctx};")
        w(f"r.tx = t % ({x});")
        w(f"r.ty = t / ({x});")
        w(f"{routine.name}({', '.join(args + ['r'])});")
        w.close()
        w.close()


def probe_kernel(kernel: Kernel, step: Step, name: str, dag: Dag, library: Library) -> Kernel:
    """The kernel with one routine call left: what the performance database times
    (paper §4.2, a routine in a simulated fusion environment).

    The kernel keeps its elements, indices, serial loop and launch shape; only
    ``step`` (and the clear of the reduction it computes) runs, and there is no
    finish. So that nvcc and ptxas can neither fold, hoist nor drop the routine,
    elements start from a value they cannot know, a compute's inputs change
    every iteration, and everything a routine writes is added into a sink that
    the kernel stores when it equals a value it never takes. That costs one
    add per value written, well under a memory-bound routine's time.
    """
    result = dag.call(step.call).result if step.kind is RoutineKind.COMPUTE else None
    ops = tuple(op for op in kernel.ops
                if op.step == step or (op.step is None and result is not None and op.clear == result))
    probe = dataclasses.replace(kernel, name=name, ops=ops, reductions=(), source="")
    return dataclasses.replace(probe, source=_emit(probe, dag, library, probe=True))


def _emit_probe_seed(w: _Writer, kernel: Kernel) -> None:
    w("// probe: elements start from a value nvcc cannot know; what routines write goes to a sink")
    w("const real fusec_seed = real(aligned) * real(0.001);")
    w("real fusec_sink = real(0);")
    for e in kernel.elements:
        if e.storage is Storage.REGISTERS:
            w("#pragma unroll")
            w(f"for (int s = 0; s < {e.size_expr}; ++s) {e.var}[s] = fusec_seed + real(s);")
    if kernel.shared_reals:
        w(f"for (int s = threadIdx.x; s < {kernel.shared_reals}; s += BLOCK) smem[s] = fusec_seed;")
        w("BARRIER();")


def _emit_probe_sink(w: _Writer, kernel: Kernel) -> None:
    out = next(a for a in kernel.args if a.role == "out")
    w()
    w("// probe: the sink is used (the kernel never sees this value)")
    w(f"if (fusec_sink == real(1.2345e-37)) g_{kernel_value_name(out)}[0] = fusec_sink;")


def kernel_value_name(arg: Arg) -> str:
    return arg.decl.split("g_", 1)[1]


def _emit_probed_op(w: _Writer, op: Op, kernel: Kernel, dag: Dag, library: Library, by_value,
                    ctx: str) -> None:
    """The routine call, with its inputs made to vary (compute) and its output sunk."""
    step = op.step
    params = dict(array_args(dag, library, step.call))
    if step.kind is RoutineKind.COMPUTE:
        w("// probe: inputs change every iteration")
        for read in _routine(library, dag, kernel.plan, step).reads:
            e = by_value.get(params.get(read.param)) if isinstance(read, Access) else None
            if e is not None:
                index = "0" if e.storage is Storage.REGISTERS else f"threadIdx.x % {e.size}"
                w(f"{e.var}[{index}] += fusec_sink;")
    _emit_op(w, op, kernel, dag, library, by_value, ctx)
    written = {RoutineKind.LOAD: op.value, RoutineKind.COMPUTE: dag.call(step.call).result}.get(step.kind)
    if written is None:
        return  # a store writes global memory: nothing to keep
    e = by_value[written]
    w("// probe: what the routine wrote is used")
    if e.storage is Storage.REGISTERS:
        w("#pragma unroll")
        w(f"for (int s = 0; s < {e.size_expr}; ++s) fusec_sink += {e.var}[s];")
    else:
        w(f"fusec_sink += {e.var}[threadIdx.x % {e.size}];")


def _partials_offset(axis: str, ctx: str = "c") -> str:
    """Where a block's partials of the output tile it is at lie in the workspace,
    less that tile's first output (the store adds it back): tile t owns region t,
    of fusec_region(blocks x width) reals, and block p its slice p."""
    if axis == COLS:  # a sum along the columns: outputs are rows
        return (f"(long long)({ctx}.row0 / TILE_ROWS) * fusec_region((long long)grid_cols * TILE_ROWS)"
                f" + (long long)block_col * TILE_ROWS - {ctx}.row0")
    return (f"(long long)({ctx}.col0 / TILE_COLS) * fusec_region((long long)grid_rows * TILE_COLS)"
            f" + (long long)block_row * TILE_COLS - {ctx}.col0")


@dataclasses.dataclass(frozen=True)
class _Tickets:
    """The output tiles of one reduction whose counters a block counts itself in on:
    one (a whole vector, or a tile the block accumulated over its serial loop) or
    one per serial iteration (a tile stored in every iteration)."""

    reduction: Reduction
    counter: str  # the first tile's counter
    arrivals: str  # blocks that count themselves in on each tile
    per_iteration: bool
    first: str = ""  # C declarations of the block's first tile and the end of its tiles
    width: str = ""  # outputs per tile, and the reduction's length (tile reductions)
    length: str = ""


def _tickets_of(reduction: Reduction, kernel: Kernel, dag: Dag, threads: Threads) -> _Tickets:
    c = dag.value(reduction.value).c_name
    if reduction.axis is None:
        return _Tickets(reduction, f"cnt_{c}", threads.grid, False)
    out_rows = reduction.axis == COLS  # summing along columns leaves one value per row
    block = "block_row" if out_rows else "block_col"
    tiles = "row_tiles" if out_rows else "col_tiles"
    per_iteration = reduction.axis != kernel.plan.serial  # stored in every iteration, not accumulated
    first = (f"const int first_{c} = {block} * ITERS, end_{c} = min(first_{c} + ITERS, {tiles});"
             if per_iteration else f"const int first_{c} = {block}, end_{c} = {block} + 1;")
    return _Tickets(reduction, f"cnt_{c} + first_{c}", "grid_cols" if out_rows else "grid_rows", per_iteration,
                    first, "TILE_ROWS" if out_rows else "TILE_COLS", "rows" if out_rows else "cols")


def _ticket_count(kernel: Kernel, before: int | None = None) -> str:
    """How many tickets the block takes (of its first ``before`` reductions), as C:
    "2", "1 + ITERS", "0"."""
    reductions = kernel.reductions[:before]
    per_iteration = sum(1 for r in reductions if r.axis is not None and r.axis != kernel.plan.serial)
    single = len(reductions) - per_iteration
    terms = ([str(single)] if single else []) + (["ITERS"] if per_iteration == 1 else
                                                  [f"{per_iteration} * ITERS"] if per_iteration else [])
    return " + ".join(terms) or "0"


def _emit_finishes(w: _Writer, kernel: Kernel, dag: Dag, library: Library, threads: Threads) -> None:
    """The end of a block with reductions across blocks: its tickets, and the sums of the
    tiles it came last at. One thread fences and takes the block's tickets: all of them
    back to back, so the block waits for one round trip to L2 rather than one per tile
    (BiCGK's blocks count themselves in on ITERS + 1 tiles), or, in a striped part,
    each just before its tile's sum (Threads.tickets_at_once)."""
    tid = threads.tid
    all_tickets = [_tickets_of(r, kernel, dag, threads) for r in kernel.reductions]
    w()
    w("// every partial of this block must be visible to the block that finishes it: the")
    w("// block's barrier, then one fence by the thread that takes the tickets (as cooperative")
    w("// groups' grid sync does), not one per warp")
    w("BARRIER();")
    w(f"if ({tid} == 0) __threadfence();")
    if not threads.tickets_at_once:
        for t in all_tickets:
            _emit_finish_in_turn(w, t, kernel, dag, library, threads)
        return
    for t in all_tickets:
        if t.first:
            w(t.first)
    slots = [_ticket_count(kernel, k) for k in range(len(all_tickets))]  # where each one's start
    w("// this block's tickets, all taken by that thread: every atomic goes out before the")
    w("// first answer is needed; fusec_last[j] says whether the block came last at ticket j")
    w.open(f"if ({tid} == 0)")
    w(f"unsigned got[{_ticket_count(kernel)}];")
    for t, slot in zip(all_tickets, slots):
        c = dag.value(t.reduction.value).c_name
        if t.per_iteration:
            w("#pragma unroll")
            w(f"for (int it = 0; it < ITERS; ++it) got[{_at(slot, 'it')}] = first_{c} + it < end_{c}"
              f" ? atomicAdd({t.counter} + it, 1u) : 0u;")
        else:
            w(f"got[{slot}] = atomicAdd({t.counter}, 1u);")
    for t, slot in zip(all_tickets, slots):
        c = dag.value(t.reduction.value).c_name
        if t.per_iteration:
            w("#pragma unroll")
            w(f"for (int it = 0; it < ITERS; ++it) fusec_last[{_at(slot, 'it')}] = first_{c} + it < end_{c}"
              f" && fusec_came_last({t.counter} + it, got[{_at(slot, 'it')}], {t.arrivals});")
        else:
            w(f"fusec_last[{slot}] = fusec_came_last({t.counter}, got[{slot}], {t.arrivals});")
    w.close()
    w("BARRIER();")
    for t, slot in zip(all_tickets, slots):
        _emit_finish(w, t, slot, dag, library, threads)


def _at(slot: str, index: str) -> str:
    """The C index of a block's ticket: ``index`` past ``slot``."""
    return index if slot == "0" else f"{slot} + {index}"


def _finish_lines(tickets: _Tickets, dag: Dag, library: Library, threads: Threads) -> tuple[str, str, str]:
    """(the comment's call, the sum's function, the lambda that writes a finished output)."""
    value = dag.value(tickets.reduction.value)
    call = value.producer
    expr = finish_expression(dag, library, call)
    # a part of a horizontal fusion syncs on its own barrier, and its threads only
    partials = f"fusec_sum_partials<BLOCK, {threads.barrier}>" if threads.part else "fusec_sum_partials<BLOCK>"
    return _call_text(dag, call), partials, f"[&](long long i, real acc) {{ g_{value.c_name}[i] = {expr}; }}"


def finish_expression(dag: Dag, library: Library, call: int) -> str:
    """The C expression of a reduction's finished output ``i`` from its sum ``acc``
    (the function's finish routine, or ``acc``)."""
    function = function_of(dag, library, call)
    if not function.finish:
        return "acc"
    argmap = {"acc": "acc"}
    for p, a in zip(function.params, dag.call(call).args):
        if isinstance(a, Constant):
            argmap[p.name] = f"real({a.literal})"
        elif p.kind is Kind.SCALAR:
            argmap[p.name] = dag.value(a).c_name
        else:
            argmap[p.name] = f"g_{dag.value(a).c_name}[i]"
    return f"{function.finish.routine}({', '.join(argmap[a] for a in function.finish.args)})"


def _emit_finish(w: _Writer, tickets: _Tickets, slot: str, dag: Dag, library: Library, threads: Threads) -> None:
    """One reduction's sums, of each tile whose ticket (taken at once) came last."""
    c = dag.value(tickets.reduction.value).c_name
    call, partials, emit = _finish_lines(tickets, dag, library, threads)
    tid = threads.tid
    w()
    w(f"// finish {call}: every block stored its partial; the last block to")
    w("// arrive at an output tile sums the partials of all blocks in a fixed order")
    if tickets.reduction.axis is None:
        w.open(f"if (fusec_last[{slot}])")
        w(f"{partials}(ws_{c}, {threads.grid}, 1, 0, 1, 1, smem, {tid}, {emit});")
        w(f"fusec_discard<BLOCK>(ws_{c}, fusec_region({threads.grid}), {tid});  // summed: never written back")
        w.close()
        return
    arrivals, width, length = tickets.arrivals, tickets.width, tickets.length
    w.open(f"for (int tile = first_{c}; tile < end_{c}; ++tile)")
    w(f"if (!fusec_last[{_at(slot, f'tile - first_{c}')}]) continue;  // the same for every thread of the block")
    w(f"const long long region = fusec_region((long long){arrivals} * {width});")
    w(f"real* const tile_partials = ws_{c} + tile * region;  // block p's at [p * {width}, (p + 1) * {width})")
    w(f"{partials}(tile_partials - (long long)tile * {width}, {arrivals}, {width}, (long long)tile * {width},"
      f" {width}, {length}, smem, {tid},")
    w(f"                         {emit});")
    w(f"fusec_discard<BLOCK>(tile_partials, region, {tid});  // summed: never written back")
    w.close()


def _emit_finish_in_turn(w: _Writer, tickets: _Tickets, kernel: Kernel, dag: Dag, library: Library,
                         threads: Threads) -> None:
    """One reduction's tickets and sums, tile by tile: each ticket (fusec_arrive: thread 0,
    then the barrier) just before that tile's sum, and a barrier after. Striped parts keep
    this, fusec's earlier order, to the letter: every rewrite of it measured, even one
    that changes only where declarations stand, compiled to a kernel with other register
    assignments throughout and took ATAX fp32 n = 16384 1.5-2 % longer."""
    c = dag.value(tickets.reduction.value).c_name
    call, partials, emit = _finish_lines(tickets, dag, library, threads)
    tid = threads.tid
    w()
    w(f"// finish {call}: every block stored its partial; the last block to")
    w("// arrive at an output tile sums the partials of all blocks in a fixed order")
    arrive = f"fusec_arrive<{threads.barrier}, BLOCK>" if threads.part else "fusec_arrive"
    if tickets.reduction.axis is None:
        w.open(f"if ({arrive}(cnt_{c}, {threads.grid}, &fusec_flag, {tid}))")
        w(f"{partials}(ws_{c}, {threads.grid}, 1, 0, 1, 1, smem, {tid}, {emit});")
        w(f"fusec_discard<BLOCK>(ws_{c}, fusec_region({threads.grid}), {tid});  // summed: never written back")
        w.close()
        return
    arrivals, width, length = tickets.arrivals, tickets.width, tickets.length
    w(tickets.first)
    w.open(f"for (int tile = first_{c}; tile < end_{c}; ++tile)")
    w(f"const long long region = fusec_region((long long){arrivals} * {width});")
    w(f"real* const tile_partials = ws_{c} + tile * region;  // block p's at [p * {width}, (p + 1) * {width})")
    w.open(f"if ({arrive}(cnt_{c} + tile, {arrivals}, &fusec_flag, {tid}))")
    w(f"{partials}(tile_partials - (long long)tile * {width}, {arrivals}, {width}, (long long)tile * {width},"
      f" {width}, {length}, smem, {tid},")
    w(f"                         {emit});")
    w(f"fusec_discard<BLOCK>(tile_partials, region, {tid});  // summed: never written back")
    w.close()
    w("BARRIER();  // fusec_flag is reused by the next tile")
    w.close()
