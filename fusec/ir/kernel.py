"""The kernel IR: what the analysis of one fusion implementation decides.

A :class:`Kernel` is frozen: the elements and where they live, the schedule of
routine calls with their barriers, the arguments, the reductions finished
across blocks. ``fusec.lower`` builds it; ``fusec.emit`` prints it; the cost
models and the runtime read it. Nothing fills a field in later.
"""

from __future__ import annotations

import dataclasses
import functools

from ..library.model import Geometry, RoutineKind, Storage
from . import geometry as geo
from .barriers import LOOP, Region
from .plan import COLS, L2_EVICT_LOADS, L2_STREAM_STORES, ROWS, KernelPlan, Step

MAX_STATIC_SHARED = 48 * 1024  # bytes of static shared memory a block may declare
L2_LINE_BYTES = 128  # support.cuh's FUSEC_LINE
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
    # a square matrix of which the kernel touches one triangle alone, "triu" or "tril": an
    # "in" every call of the kernel reads so (``stored A triu``: all the same triangle), an
    # "out" its function stores so (``stored B triu``); None for a matrix touched whole
    triangle: str | None = None

    @property
    def name(self) -> str:
        """The parameter's C name."""
        return self.decl.split()[-1]


def scalar_arg(value) -> Arg:
    """How a kernel takes a scalar it reads (a :class:`~fusec.ir.dag.Value`, an input or
    a call's result): by value where the caller passes a host number, through a pointer
    where it lives in device memory (an earlier kernel made it, or the caller passes a
    one-element device array: ``Value.on_device``), so that no call waits on the host for it."""
    if value.producer is None and not value.on_device:
        return Arg("scalar", f"const real {value.c_name}", value.id)
    return Arg("scalar_ptr", f"const real* __restrict__ g_{value.c_name}", value.id)


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
    it sums any tile (one round trip to L2), or each tile's ticket just before
    that tile's sum, the order striped parts keep, where it measured faster
    (docs/design/kernel-families.md)."""

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


class LaunchNeeds:
    """What the runtime asks of every kernel, whatever its family: a family's
    kernel class overrides what it needs beyond a plain launch."""

    all_resident = False  # its blocks meet at a grid barrier: all must be resident at once
    dynamic_shared_bytes = 0  # bytes of ``extern __shared__`` each launch passes
    zeroed_workspace = False  # its reductions' workspaces must start at zero
    reproducible = True  # every run gives the same bits
    # blocks each SM holds where the kernel sets that itself (a held fusion); None: what its
    # registers and shared memory allow
    resident_per_sm: int | None = None

    def schedule_counters(self, sizes: dict[str, int]) -> int:
        """32-bit words of zeroed schedule (tickets, stripes, arrivals) a launch needs."""
        return 0

    @property
    def function_names(self) -> tuple[str, ...]:
        """The ``__global__`` functions a call of the kernel launches, in order."""
        return (self.name,)

    def launches(self, sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
        """(function, grid) of each launch a call makes, in order; every launch takes the
        kernel's arguments."""
        return ((self.name, self.grid(sizes)),)

    def leaves(self) -> tuple["Kernel", ...]:
        """The analysed kernels it is made of: itself, or a fusion's parts."""
        return (self,)


@dataclasses.dataclass(frozen=True)
class Kernel(LaunchNeeds):
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
    # Tile kernels that store no matrix read their matrices once and re-read only
    # vectors and partials: their matrix loads are marked evict-first (STREAM_MATRIX),
    # so the stream leaves those in L2; a kernel that stores a matrix (GEMVER's sger,
    # MADD) is slower with it (docs/design/kernel-families.md).
    stream_matrices: bool = False
    # Of a kernel that turns and streams its matrices: the blocks at the end of the grid (the
    # last to run) whose matrix loads are plain, not evict-first, about keep_l2_bytes(target) of them.
    # The next launch walks the other way and starts on those tiles, so it finds them in L2.
    # Evict-first alone never displaces what L2 already holds, so after other work had filled
    # L2 the streamed kernels ran slower than from an empty one; with their last blocks plain
    # they run alike either way (docs/design/kernel-families.md).
    keep_blocks: int = 0
    # A held fusion's band parts with HeldPlan.finish_after (fusec/families/held.py). The
    # producer adds its column sums into the half of a doubled accumulator that its launch's
    # round picks, and leaves the finish to every block after the grid barrier; the consumer
    # takes those finished values (`given`, value ids) as arguments instead of loading them.
    sums_after_barrier: bool = False
    given: tuple[int, ...] = ()
    # Band kernels: the most register slots of whole-row matrix elements live at once in
    # the loop (:func:`_live_band_slots`), which the register estimate counts.
    live_band_slots: int = 0
    # The scalar expressions (value ids) the kernel evaluates before its work, each after
    # those it reads, from its scalar and scalar_ptr arguments (fusec.ir.expr): their
    # values feed its calls' scalar parameters and finishes.
    expressions: tuple[int, ...] = ()
    # A tile kernel alone whose reductions are all tiles' (none a whole vector's), on a GPU with
    # dependent launches: its blocks store their partials and end, and a second function,
    # ``NAME_sums``, launched after it, sums every output tile at once across the GPU, instead
    # of each tile's last block to arrive in the grid's tail (docs/design/kernel-families.md).
    sums_apart: bool = False

    @property
    def shape(self) -> geo.Shape:
        return self.plan.shape

    @property
    def reproducible(self) -> bool:
        """Whether every run gives the same bits: all but a band kernel with a column
        sum, whose blocks add their sums with atomics in the order they arrive."""
        return not (self.plan.geometry is Geometry.BAND and self.reductions)

    @property
    def sums_whole_vectors(self) -> bool:
        """Whether every reduction of the kernel sums a whole vector to a scalar: where
        its grid is one block, that block's partials are the sums and it takes no ticket
        (fusec.emit.kernel writes them back; the cost model prices that)."""
        return bool(self.reductions) and all(r.axis is None for r in self.reductions)

    @property
    def turns(self) -> bool:
        """Whether a launch says which way its blocks walk the grid (``backwards``):
        the runtime alternates it, so a launch starts on the tiles the launch
        before ended on, whose lines L2 still holds. Block i takes item i or the last but i; the
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
        return dict(self._macros)  # a copy: callers may add to it

    @functools.cached_property
    def _macros(self) -> dict[str, int]:
        # read for the grid of every kernel priced, many times per space
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
        m = self._macros
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
    def sums_name(self) -> str:
        """The function that sums the partials where the sums run apart (:attr:`sums_apart`)."""
        return f"{self.name}_sums"

    def sums_chunk(self, reduction: Reduction) -> tuple[int, int]:
        """Of a reduction summed apart: (outputs of a tile, outputs one block of the sums
        sums): an L2 line of them, or the whole tile where it is no wider or not whole lines."""
        width = self._macros["TILE_ROWS" if reduction.axis == COLS else "TILE_COLS"]
        line = L2_LINE_BYTES // geo.DTYPES[self.dtype].itemsize
        return width, line if width > line and width % line == 0 else width

    @property
    def function_names(self) -> tuple[str, ...]:
        return (self.name, self.sums_name) if self.sums_apart else (self.name,)

    def launches(self, sizes: dict[str, int]) -> tuple[tuple[str, int], ...]:
        own = ((self.name, self.grid(sizes)),)
        if not self.sums_apart:
            return own
        blocks = 0
        for reduction in self.reductions:
            width, chunk = self.sums_chunk(reduction)
            outputs = sizes[self.dims[0 if reduction.axis == COLS else 1]]
            blocks += -(-outputs // width) * (width // chunk)
        return own + ((self.sums_name, blocks),)

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
        m = self._macros
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


class PartsKernel(LaunchNeeds):
    """What a kernel made of analysed parts (a horizontal or a striped fusion)
    answers from its parts: their schedules, reductions and shared memory, and
    the part an argument or a reduction belongs to."""

    parts: tuple[Kernel, ...]

    def leaves(self) -> tuple[Kernel, ...]:
        return self.parts

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every part's schedule, part after part."""
        return tuple(op for p in self.parts for op in p.ops)

    @property
    def reductions(self) -> tuple[Reduction, ...]:
        return tuple(r for p in self.parts for r in p.reductions)

    @property
    def shared_reals(self) -> int:
        return sum(p.shared_reals for p in self.parts)

    @property
    def sums_whole_vectors(self) -> bool:
        """Whether every reduction of the kernel sums a whole vector to a scalar: where
        its grid is one block, that block's partials are the sums and it takes no ticket
        (fusec.emit.kernel writes them back; the cost model prices that)."""
        return bool(self.reductions) and all(r.axis is None for r in self.reductions)

    @property
    def turns(self) -> bool:
        """Never (Kernel.turns): the parts split the blocks, or take them by ticket."""
        return False

    def owner(self, arg: Arg):
        """The part a size or aligned argument is for; the kernel for shared ones."""
        return self.parts[arg.part] if arg.part is not None else self

    def part_of(self, reduction: Reduction) -> Kernel:
        return next(p for p in self.parts if reduction in p.reductions)

    def reduction_buffers(self, reduction: Reduction, sizes: dict[str, int]) -> tuple[int, int]:
        return self.part_of(reduction).reduction_buffers(reduction, sizes)

    def reduction_tiles(self, reduction: Reduction, sizes: dict[str, int]) -> tuple[int, int, int]:
        return self.part_of(reduction).reduction_tiles(reduction, sizes)
