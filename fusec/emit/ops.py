"""Printing one routine call of a schedule (paper Algorithm 2) and the finish
expression of a reduction: the pieces every geometry's body prints with."""

from __future__ import annotations

from ..ir.dag import Constant, Dag
from ..ir.kernel import ALONE, Kernel, Op, Threads
from ..ir.plan import COLS
from ..ir.steps import array_args, function_of
from ..library.model import Access, Geometry, Kind, Library, RoutineKind, Storage
from ..lower.kernel import axis_of, routine_of, whole_in_block
from .writer import CudaWriter, call_text


def emit_loop_ops(w: CudaWriter, loop: list[Op], kernel: Kernel, dag: Dag, library: Library, by_value,
                  threads: Threads, hold=None, probe: bool = False, after=None) -> None:
    """The serial loop's ops; with ``hold`` (a held kernel's part) the held element
    is kept after the op that loads or computes it, or taken instead of loaded.
    ``after(op)``: lines to add after each op (a band kernel's row finishes)."""
    for op in loop:
        held = hold is not None and op.value == hold.value and op.step is not None
        if held and not hold.keep and op.step.kind is RoutineKind.LOAD:
            hold.emit_take(w, by_value[op.value].var,
                           lambda: emit_op(w, op, kernel, dag, library, by_value, threads=threads))
            continue
        if held and hold.keep and hold.stored_after and op.step.kind is RoutineKind.STORE:
            w("// held units are stored after the barrier, by the consumer (stores_after)")
            w.open(f"if (!({hold.held_units}))")
            emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
            w.close()
            continue
        emit_op(w, op, kernel, dag, library, by_value, probe=probe, threads=threads)
        if held and hold.keep and op.step.kind in (RoutineKind.LOAD, RoutineKind.COMPUTE):
            hold.emit_keep(w, by_value[op.value].var)
        if after is not None:
            after(op)


def _element_arg(access, params, by_value, scalars) -> str:
    if isinstance(access, Access):
        return by_value[params[access.param]].var
    return scalars[access]


def emit_op(w: CudaWriter, op: Op, kernel: Kernel, dag: Dag, library: Library, by_value,
             ctx: str = "c", probe: bool = False, threads: Threads = ALONE) -> None:
    if probe and op.step is not None:
        emit_probed_op(w, op, kernel, dag, library, by_value, ctx)
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
    routine = routine_of(library, dag, plan, step)
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
    w(f"// {call_text(dag, step.call)}: {what} [{routine.name}]")
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
                target = f"ws_{result.c_name} + " + partials_offset(axis_of(function, function.hof.axis), ctx)
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


def emit_probed_op(w: CudaWriter, op: Op, kernel: Kernel, dag: Dag, library: Library, by_value,
                    ctx: str) -> None:
    """The routine call, with its inputs made to vary (compute) and its output sunk."""
    step = op.step
    params = dict(array_args(dag, library, step.call))
    if step.kind is RoutineKind.COMPUTE:
        w("// probe: inputs change every iteration")
        for read in routine_of(library, dag, kernel.plan, step).reads:
            e = by_value.get(params.get(read.param)) if isinstance(read, Access) else None
            if e is not None:
                index = "0" if e.storage is Storage.REGISTERS else f"threadIdx.x % {e.size}"
                w(f"{e.var}[{index}] += fusec_sink;")
    emit_op(w, op, kernel, dag, library, by_value, ctx)
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


def partials_offset(axis: str, ctx: str = "c") -> str:
    """Where a block's partials of the output tile it is at lie in the workspace,
    less that tile's first output (the store adds it back): tile t owns region t,
    of fusec_region(blocks x width) reals, and block p its slice p."""
    if axis == COLS:  # a sum along the columns: outputs are rows
        return (f"(long long)({ctx}.row0 / TILE_ROWS) * fusec_region((long long)grid_cols * TILE_ROWS)"
                f" + (long long)block_col * TILE_ROWS - {ctx}.row0")
    return (f"(long long)({ctx}.col0 / TILE_COLS) * fusec_region((long long)grid_rows * TILE_COLS)"
            f" + (long long)block_row * TILE_COLS - {ctx}.col0")


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
