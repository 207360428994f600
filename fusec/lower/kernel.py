"""One kernel from one fusion implementation: the analysis of paper Algorithms 1 and 2.

``build_kernel`` decides everything (elements and where they live, which loads
are invariant and which reductions accumulate, shared offsets, barriers, kernel
arguments) into a frozen :class:`~fusec.ir.kernel.Kernel`; ``fusec.emit.kernel``
prints it.

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

from ..cost import registers
from ..cost.registers import MAX_REGISTERS
from ..errors import PlanError
from ..ir import geometry as geo
from ..ir.barriers import LOOP, POST, PRE, Event, Mode, Touch, allocate, place_barriers
from ..ir.dag import Dag
from ..ir.kernel import CLEAR_MAPPING, MAX_STATIC_SHARED, TURN_ARG, Arg, Element, Kernel, Op, Reduction, scalar_arg
from ..ir.plan import COLS, ROWS, KernelPlan, Step
from ..ir.steps import array_args, call_dims, function_of, leaves_kernel
from ..library.model import Access, Function, Geometry, Kind, Library, Routine, RoutineKind, Storage
from ..target import GpuTarget, reference

# A kernel that turns and streams its matrices loads the last of them plainly, about this
# share of L2 (20 MB of the H100's 50 MB), so the next launch, which starts there, finds them
# in L2 whatever else L2 held before (Kernel.keep_blocks; experiments/results/h100-l2-keep-states.md).
KEEP_L2_SHARE = 0.4


def axis_of(function: Function, dim: str) -> str:
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


def routine_of(library: Library, dag: Dag, plan: KernelPlan, step: Step) -> Routine:
    impl = function_of(dag, library, step.call).implementation(plan.implementation_of(step.call))
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
            and axis_of(function, function.hof.axis) == COLS)


def _accumulated(function: Function, plan: KernelPlan) -> bool:
    if not function.hof.reduce:
        return False
    if plan.geometry is Geometry.VECTOR:
        return True
    return axis_of(function, function.hof.axis) == plan.serial


def _invariant(dag: Dag, library: Library, plan: KernelPlan, value: int) -> bool:
    """A vector along the axis the loop does not walk is the same in every iteration.
    Every call of the kernel that reads it must read it so: a vector of a square matrix's
    size may be read along the rows by one call and along the columns by another (symv's
    two triangle products, in one shared element: triangle.fusec's ``tri_x``), and a
    function of a square matrix (``square A``) may read one vector along both (ssyr's x,
    declared along the columns), so it holds none before the loop."""
    if plan.geometry is Geometry.VECTOR:
        return False
    for call in plan.calls:
        function = function_of(dag, library, call)
        for name, arg in array_args(dag, library, call):
            p = function.param(name)
            if arg == value and (p.kind is not Kind.VECTOR or function.square
                                 or axis_of(function, p.dims[0]) == plan.serial):
                return False
    return True


def sums_run_apart(plan: KernelPlan, reductions, target: GpuTarget) -> bool:
    """Whether a kernel of ``plan`` with ``reductions``, launched alone, sums them in a second
    function (Kernel.sums_apart): a tile kernel whose reductions are all tiles' sums, on a GPU
    with dependent launches."""
    return (plan.geometry is Geometry.TILE and bool(reductions)
            and all(r.axis is not None for r in reductions) and target.dependent_launch)


def part_of(kernel: Kernel) -> Kernel:
    """The kernel :func:`build_kernel` makes of the same plan without ``turns``, from the one it
    made with: a part of a horizontal, striped or held fusion, as the space assembles them from
    the kernels it prices alone. It takes no direction and keeps no blocks' lines in L2, and a
    tile kernel's sums stay with its last block, which needs BLOCK reals of shared memory."""
    if not kernel.turns:
        return kernel
    shared = kernel.shared_reals
    if kernel.reductions and kernel.plan.geometry is not Geometry.BAND:
        shared = max(shared, kernel.plan.shape.macros(kernel.dtype)["BLOCK"])
    return dataclasses.replace(kernel, args=tuple(a for a in kernel.args if a != TURN_ARG), shared_reals=shared,
                               keep_blocks=0, sums_apart=False)


def build_kernel(dag: Dag, library: Library, plan: KernelPlan, dtype: str, index: int,
                 turns: bool = False, target: GpuTarget | None = None) -> Kernel:
    """Analyse a tile, vector or band fusion implementation into a kernel. ``turns``: the kernel
    runs alone and takes the direction of its walk as a parameter (Kernel.turns;
    not for the parts of horizontal or striped fusions, whose blocks take their
    items otherwise). A tile kernel alone whose reductions are all tiles' sums them in a
    second launch where ``target`` has dependent launches (Kernel.sums_apart: a whole
    vector's sum stays with the last block, which may be the grid's only one; as plain
    launches the second kernel measured slower on some plans). Raises PlanError when
    the plan cannot be built (e.g. routines disagree on where an element lives).
    Fusions of several kernel plans are built by their families (:mod:`fusec.families`). ``target``:
    the GPU it is for (default: the reference GPU, :func:`fusec.target.reference`)."""
    target = target or reference()
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
    routines = [routine_of(library, dag, plan, step) for step in plan.steps]
    for routine in routines:
        _check_threads(routine, macros)

    # Which value each step touches, with which mapping and how.
    touches: dict[int, list[tuple[Mode, str]]] = {}
    step_touches: list[list[tuple[int, Mode, str]]] = []
    for step, routine in zip(plan.steps, routines):
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
        if step.kind is RoutineKind.LOAD and _invariant(
                dag, library, plan, dict(array_args(dag, library, step.call))[step.param]):
            sections.append(PRE)
        elif step.kind is RoutineKind.STORE and _accumulated(function, plan):
            sections.append(POST)
        else:
            sections.append(LOOP)

    # The schedule: clears of reductions go before the loop when they accumulate,
    # right before their compute otherwise (Algorithm 2, line 2).
    schedule: list[tuple[str, Step | None, int | None, list[tuple[int, Mode, str]], Routine | None]] = []
    reductions = []
    for step, routine, section, mine in zip(plan.steps, routines, sections, step_touches):
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
                                            else axis_of(function, function.hof.axis)))
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
    sums_apart = turns and sums_run_apart(plan, reductions, target)
    if reductions and plan.geometry is not Geometry.BAND and not sums_apart:  # the finish needs BLOCK
        # reals; a barrier precedes it, so it may reuse anything (a band kernel's finish needs none)
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
    scalars = [a for c in plan.calls for p, a in zip(function_of(dag, library, c).params, dag.call(c).args)
               if p.kind is Kind.SCALAR and isinstance(a, int)]
    kernel = Kernel(index, name, plan, dtype, dims, tuple(elements), ops, args, tuple(reductions),
                    total, stream_matrices=stream, live_band_slots=_live_band_slots(dag, ops, elements),
                    expressions=dag.needed_expressions(scalars), sums_apart=sums_apart)
    most = min(MAX_REGISTERS, target.registers_per_sm // plan.shape.block)
    if plan.geometry is Geometry.BAND and registers.estimate(kernel) > most:
        # a band keeps whole rows in registers: where they do not fit, they would spill
        raise PlanError(f"about {registers.estimate(kernel)} registers per thread, more than a block of"
                        f" {plan.shape.block} threads may have")
    if stream and turns:
        kernel = dataclasses.replace(kernel, keep_blocks=keep_l2_bytes(target) // _matrix_bytes_per_block(kernel, dag))
    return kernel


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


def _one_triangle_read(dag: Dag, library: Library, plan: KernelPlan, value: int) -> str | None:
    """The one triangle of ``value`` every call of the kernel that reads it reads alone (the
    parameters it is passed to all say ``stored A triu``, or all ``stored A tril``); None
    where one call reads it whole, or two calls read different triangles."""
    reads = {function.triangle(param.name) for call in plan.calls
             for function in (function_of(dag, library, call),)
             for param, arg in zip(function.params, dag.call(call).args) if arg == value}
    return reads.pop() if len(reads) == 1 else None


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
                # an expression is evaluated in the kernel (Kernel.expressions): its operands are passed
                for leaf in dag.leaves(arg):
                    if leaf != arg and leaf in seen:  # an operand passed already (arg itself was not)
                        continue
                    seen.add(leaf)
                    scalars.append(scalar_arg(dag.value(leaf)))
            elif dag.producer(arg) not in kernel_calls:
                seen.add(arg)
                axis = (axis_of(function, param.dims[0])
                        if plan.geometry is not Geometry.VECTOR and param.kind is Kind.VECTOR else None)
                ins.append(Arg("in", f"const real* __restrict__ g_{value.c_name}", arg, axis=axis,
                               triangle=_one_triangle_read(dag, library, plan, arg)))
        if leaves_kernel(dag, library, call, kernel_calls):
            value = dag.value(record.result)
            outs.append(Arg("out", f"real* __restrict__ g_{value.c_name}", value.id,
                            triangle=function.triangle(function.result.name)))
            if function.hof.reduce and not whole_in_block(function, plan):
                outs.append(Arg("workspace", f"real* __restrict__ ws_{value.c_name}", value.id))
                outs.append(Arg("counters", f"unsigned* __restrict__ cnt_{value.c_name}", value.id))
    if plan.geometry is not Geometry.VECTOR:
        sizes = [Arg("size", "const int rows", size=dims[0]), Arg("size", "const int cols", size=dims[1])]
    else:
        sizes = [Arg("size", "const long long n", size=dims[0])]
    return tuple(ins + outs + scalars + sizes + [Arg("aligned", "const int aligned")])


# --------------------------------------------------------------------------- emission


def keep_l2_bytes(target: GpuTarget) -> int:
    """Bytes of matrix a turning kernel leaves to L2 for the next launch (Kernel.keep_blocks)."""
    return int(KEEP_L2_SHARE * target.l2_bytes)
