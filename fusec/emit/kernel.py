"""Printing a tile or vector kernel (and the shared pieces band, horizontal,
striped and held kernels print with): the body of Algorithm 1, each routine
call per Algorithm 2, the cross-block finish of reductions, and the probe
kernels the performance database times."""

from __future__ import annotations

import dataclasses
import re

from ..ir.barriers import LOOP, POST, PRE
from ..ir.dag import Dag
from ..ir.kernel import ALONE, TURNING, Arg, Kernel, Reduction, Threads
from ..ir.plan import COLS, ROWS, Step
from ..ir.steps import function_of
from ..library.model import Geometry, Library, RoutineKind, Storage
from ..lower.kernel import routine_of
from .band import emit_band_body
from .lines import library_text
from .ops import emit_loop_ops, emit_op, finish_expression
from .scalars import emit_scalars
from .writer import CudaWriter, call_text


def emit_kernel(kernel: Kernel, dag: Dag, library: Library, probe: bool = False) -> str:
    plan, macros = kernel.plan, kernel.macros()
    tile = plan.geometry is Geometry.TILE
    w = CudaWriter()
    namespace = f"{kernel.name}_routines"
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    for call in plan.calls:
        impl = plan.implementation_of(call)
        w(f"//   {call_text(dag, call)}" + (f"   [implementation {impl}]" if impl != "default" else ""))
    w(f"//   {plan.shape.describe(kernel.dtype)}"
      + (f" along {'rows' if plan.serial == ROWS else 'columns'} ({kernel.dims[0 if plan.serial == ROWS else 1]})"
         if tile else ""))
    w(f"namespace {namespace} {{")
    for macro, value in macros.items():
        if macro != "VEC":  # VEC belongs to the precision, defined once at the top
            w(f"#define {macro} {value}")
    if kernel.keep_blocks:
        _emit_keeping_load(w, kernel.keep_blocks)
    for path, text in library_sources(kernel, dag, library):
        for line in library_text(path, text):
            w(line)
    w(f"}}  // namespace {namespace}")
    w()

    params = ",\n    ".join(a.decl for a in kernel.args)
    w.open_kernel("__launch_bounds__(BLOCK)", kernel.name, params, release=not kernel.sums_apart)
    w(f"using namespace {namespace};")
    if kernel.turns:
        w("// the block's work item: launches alternate the direction (Kernel.turns), so each")
        w("// starts on the tiles the one before ended on, while L2 still holds their lines")
        w("const int fusec_item = backwards ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;")
    emit_body(w, kernel, dag, library, probe, TURNING if kernel.turns else ALONE)
    w.close()
    if kernel.sums_apart:
        _emit_sums_kernel(w, kernel, dag, library, params)
    for macro in macros:
        if macro != "VEC":
            w(f"#undef {macro}")
    return "\n".join(w.lines) + "\n"


def _emit_keeping_load(w: CudaWriter, blocks: int) -> None:
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


def library_sources(kernel: Kernel, dag: Dag, library: Library) -> list[tuple[str, str]]:
    """Function files of the kernel's calls, and the shared routine files that
    define a routine (or macro) that anything included names."""
    plan = kernel.plan
    names = {routine_of(library, dag, plan, op.step).name for op in kernel.ops if op.step}
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


def emit_body(w: CudaWriter, kernel: Kernel, dag: Dag, library: Library, probe: bool = False,
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
    if kernel.reductions and not kernel.sums_apart:
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
    emit_scalars(w, kernel, dag)
    if probe:
        _emit_probe_seed(w, kernel)

    # 3: indices
    w()
    if plan.geometry is Geometry.BAND:
        emit_band_body(w, kernel, dag, library, threads, by_value, hold)
        return
    if tile:
        serial_rows = plan.serial == ROWS
        w("// indices: a 1D grid of tiles; each block walks ITERS tiles along the "
          + ("rows" if serial_rows else "columns"))
        _emit_tile_grid(w, serial_rows)
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
            emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
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
            emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
    if probe:
        _emit_probe_sink(w, kernel)
    if kernel.sums_apart:
        w()
        w("// the partials are stored: the sums may be launched (they wait for this kernel's end)")
        w("fusec_release_next();")
    elif kernel.reductions:
        _emit_finishes(w, kernel, dag, library, threads)


def _emit_tile_grid(w: CudaWriter, serial_rows: bool, grid_cols_used: bool = True) -> None:
    """The tile geometry's counts of tiles and of blocks along each axis."""
    w("[[maybe_unused]] const int row_tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;")
    w("[[maybe_unused]] const int col_tiles = (cols + TILE_COLS - 1) / TILE_COLS;")
    w("[[maybe_unused]] const int grid_rows = "
      + ("(row_tiles + ITERS - 1) / ITERS;" if serial_rows else "row_tiles;"))
    w(("" if grid_cols_used else "[[maybe_unused]] ") + "const int grid_cols = "
      + ("col_tiles;" if serial_rows else "(col_tiles + ITERS - 1) / ITERS;"))


def _emit_sums_kernel(w: CudaWriter, kernel: Kernel, dag: Dag, library: Library, params: str) -> None:
    """The second function of a kernel whose sums run apart (Kernel.sums_apart), launched after
    it with its arguments: block b sums one L2 line of one output tile's values
    (Kernel.sums_chunk) over every block's partials, in a fixed order, for each reduction in
    turn; all at once, across the GPU, where the tile's last block to arrive summed the whole
    tile in the grid's tail."""
    w()
    w(f"// ---- the sums of {kernel.name}'s reductions, launched after it")
    w.open_kernel("__launch_bounds__(BLOCK)", kernel.sums_name, params)  # waits for the kernel's partials
    w(f"using namespace {kernel.name}_routines;")
    w("__shared__ real smem[BLOCK];  // fusec_sum_partials's scratch")
    emit_scalars(w, kernel, dag)  # what the finishes' expressions read
    _emit_tile_grid(w, kernel.plan.serial == ROWS, grid_cols_used=False)
    w("int block = blockIdx.x;  // a line of one reduction's outputs, counted over the reductions in turn")
    for number, reduction in enumerate(kernel.reductions, 1):
        tickets = _tickets_of(reduction, kernel, dag, ALONE)
        call, partials, emit = _finish_lines(tickets, dag, library, ALONE)
        c = dag.value(reduction.value).c_name
        width, chunk = kernel.sums_chunk(reduction)
        tiles = "row_tiles" if tickets.width == "TILE_ROWS" else "col_tiles"
        lines = width // chunk
        w()
        w(f"// finish {call}: every block's partials of the line, in a fixed order")
        w.open(f"if (block < {tiles} * {lines})")
        w(f"const int tile = block / {lines}, first = block % {lines} * {chunk};")
        _emit_tile_sum(w, tickets, c, partials, emit, "threadIdx.x", " + first", chunk)
        if lines == 1:
            w("fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);  // summed: never written back")
        else:
            w(f"fusec_discard_line_each<BLOCK>(tile_partials + first, {tickets.arrivals}, {tickets.width},"
              " threadIdx.x);  // summed: never written back")
        w("return;")
        w.close()
        if number < len(kernel.reductions):
            w(f"block -= {tiles} * {lines};")
    w.close()


def probe_kernel(kernel: Kernel, step: Step, name: str, dag: Dag) -> Kernel:
    """The kernel with one routine call left (printed by ``emit_kernel(..., probe=True)``):
    what the performance database times
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
    return dataclasses.replace(kernel, name=name, ops=ops, reductions=(), sums_apart=False)


def _emit_probe_seed(w: CudaWriter, kernel: Kernel) -> None:
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


def _emit_probe_sink(w: CudaWriter, kernel: Kernel) -> None:
    out = next(a for a in kernel.args if a.role == "out")
    w()
    w("// probe: the sink is used (the kernel never sees this value)")
    w(f"if (fusec_sink == real(1.2345e-37)) g_{kernel_value_name(out)}[0] = fusec_sink;")


def kernel_value_name(arg: Arg) -> str:
    return arg.decl.split("g_", 1)[1]


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


def _emit_finishes(w: CudaWriter, kernel: Kernel, dag: Dag, library: Library, threads: Threads) -> None:
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
    if not threads.tickets_at_once:
        w(f"if ({tid} == 0) __threadfence();")
        for t in all_tickets:
            _emit_finish_in_turn(w, t, kernel, dag, library, threads)
        return
    alone = kernel.sums_whole_vectors
    if alone:  # where the grid is one block (its size fits one), its partials are the sums
        _emit_one_block_finish(w, all_tickets, dag, library, threads)
    w(f"if ({tid} == 0) __threadfence();")
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
    if alone:
        w.close()


def _emit_one_block_finish(w: CudaWriter, all_tickets: list[_Tickets], dag: Dag, library: Library,
                           threads: Threads) -> None:
    """Where the grid is one block, the partial each whole-vector reduction stored is its sum:
    after the block's barrier one thread writes the result (the finish's expression applied),
    and the block takes no ticket, fences nothing and sums nothing (a solver's vector kernels
    at n = 1024 are one block each). Opens the ``else`` that a larger grid's tickets and sums
    go in."""
    tid = threads.tid
    w("// one block: no other block stores a partial, so this block's are the sums")
    w.open(f"if ({threads.grid} == 1)")
    w.open(f"if ({tid} == 0)")
    for t in all_tickets:
        c = dag.value(t.reduction.value).c_name
        _, _, emit = _finish_lines(t, dag, library, threads)
        w(f"{emit}(0, ws_{c}[0]);  // stored before the barrier above")
    w.close()
    w.otherwise()


def _at(slot: str, index: str) -> str:
    """The C index of a block's ticket: ``index`` past ``slot``."""
    return index if slot == "0" else f"{slot} + {index}"


def _finish_lines(tickets: _Tickets, dag: Dag, library: Library, threads: Threads) -> tuple[str, str, str]:
    """(the comment's call, the sum's function, the lambda that writes a finished output)."""
    value = dag.value(tickets.reduction.value)
    call = value.producer
    expr = finish_expression(dag, library, call)
    # a part of a horizontal fusion syncs on its own barrier, and its threads only; a
    # scalar's partials are split over every thread, a few each: 8 loads in flight, not a
    # tile's 64 bytes (support.cuh's default: 16 fp32)
    if tickets.reduction.axis is None:
        partials = f"fusec_sum_partials<BLOCK, {threads.barrier}, 8>"
    elif threads.part:
        partials = f"fusec_sum_partials<BLOCK, {threads.barrier}>"
    else:
        partials = "fusec_sum_partials<BLOCK>"
    return call_text(dag, call), partials, f"[&](long long i, real acc) {{ g_{value.c_name}[i] = {expr}; }}"


def _emit_finish(w: CudaWriter, tickets: _Tickets, slot: str, dag: Dag, library: Library, threads: Threads) -> None:
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
    w.open(f"for (int tile = first_{c}; tile < end_{c}; ++tile)")
    w(f"if (!fusec_last[{_at(slot, f'tile - first_{c}')}]) continue;  // the same for every thread of the block")
    _emit_tile_sum(w, tickets, c, partials, emit, tid)
    w(f"fusec_discard<BLOCK>(tile_partials, region, {tid});  // summed: never written back")
    w.close()


def _emit_tile_sum(w: CudaWriter, tickets: _Tickets, c: str, partials: str, emit: str, tid: str,
                   first: str = "", outputs: int | None = None) -> None:
    """Tile ``tile``'s region of partials, and their sum over the blocks: of its outputs from
    ``first`` past its start (a C term, " + first"), ``outputs`` of them (default its width)."""
    arrivals, width = tickets.arrivals, tickets.width
    w(f"const long long region = fusec_region((long long){arrivals} * {width});")
    w(f"real* const tile_partials = ws_{c} + tile * region;  // block p's at [p * {width}, (p + 1) * {width})")
    w(f"{partials}(tile_partials - (long long)tile * {width}, {arrivals}, {width}, (long long)tile * {width}{first},"
      f" {outputs or width}, {tickets.length}, smem, {tid},")
    w(f"                         {emit});")


def _emit_finish_in_turn(w: CudaWriter, tickets: _Tickets, kernel: Kernel, dag: Dag, library: Library,
                         threads: Threads) -> None:
    """One reduction's tickets and sums, tile by tile: each ticket (fusec_arrive: thread 0,
    then the barrier) just before that tile's sum, and a barrier after. Striped parts keep
    this, fusec's earlier order, to the letter: every rewrite of it measured, even one
    that moves only declarations, compiled to other register assignments and ran slower
    (docs/design/kernel-families.md)."""
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
