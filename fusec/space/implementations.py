"""Fusion implementations (paper §4.2): the ways to build one fusion's kernel.

An implementation fixes (i) the calling order of the routines, (ii) which
library implementation of each function, (iii) the block shape and (iv) the
serial iterations, and, for tiles, the axis the serial loop walks (for vectors,
the L2 policy of their 16-byte accesses). Orders are
the topological orders of the fusion's calls, each call's loads placed right
before its compute (an element several calls read is loaded by the first).
Implementations that need more on-chip memory per block than another one
differing only in the order are dominated and pruned.
"""

from __future__ import annotations

import itertools

from ..cache import Recent
from ..errors import PlanError
from ..families import build_kernel
from ..families.held import BAND_REGISTER_MARGIN
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.geometry import Shape
from ..ir.kernel import Kernel
from ..ir.plan import COLS, L2_NAMES, L2_PLAIN, ROWS, HeldPlan, KernelPlan, Step
from ..ir.steps import array_args, call_dims, function_of, leaves_kernel
from ..library.model import Geometry, Library, RoutineKind
from ..lower.kernel import part_of
from ..target import GpuTarget, reference
from .fusions import Fusion, why_not_fusible

# The block shapes searched: threads per block, and for tiles the rows of a tile
# (rows per thread = TILE_ROWS / BLOCK_Y), with a few serial iteration counts: the shapes
# a gemv and an elementwise map streamed fastest with on the H100, and their neighbours.
VECTOR_SHAPES = tuple(Shape(Geometry.VECTOR, block, iters)
                      for block in (128, 256, 512, 1024) for iters in (1, 4, 16))
TILE_SHAPES = tuple(Shape(Geometry.TILE, 32 * block_y, iters, tile_rows)
                    for block_y, tile_rows in ((4, 16), (8, 8), (8, 16), (8, 32), (8, 64))
                    for iters in (1, 2, 4, 8, 32))
# Band kernels (whole rows per block): threads per block and rows per instance; PIECES
# follows from the row length and ITERS from the rows, for one or two blocks per SM
# (a block's column sums leave once, with atomics, so few long blocks are best).
BAND_BLOCKS = (128, 256, 512, 1024)
BAND_ROWS = (1, 2)
BAND_WAVES = (1, 2)
MAX_BAND_WORDS = 32  # 32-bit registers a thread's share of one instance's matrix may take (64 spilled: ptxas)


def band_shapes(rows: int, cols: int, dtype: str, sms: int) -> tuple[Shape, ...]:
    """The band shapes for a matrix of ``rows x cols``: each block size whose
    threads' pieces cover a row without leaving half of them idle and fit
    MAX_BAND_WORDS, with BAND_ROWS rows at a time and ITERS instances for one or
    two blocks per SM."""
    vec = geo.vec(dtype)
    words = geo.VEC_BYTES // 4
    out = []
    for block in BAND_BLOCKS:
        pieces = -(-cols // (block * vec))
        if block > BAND_BLOCKS[0] and pieces * block * vec >= 2 * cols:
            continue  # half the threads or more would hold nothing
        for band_rows in BAND_ROWS:
            if band_rows * pieces * words > MAX_BAND_WORDS:
                continue
            for waves in BAND_WAVES:
                iters = max(1, -(-rows // (band_rows * waves * sms)))
                out.append(Shape(Geometry.BAND, block, iters, band_rows, pieces))
    return tuple(dict.fromkeys(out))


def call_orders(dag: Dag, fusion: Fusion, most: int | None = None) -> list[tuple[int, ...]]:
    """Topological orders of the fusion's calls, in lexicographic order (the DAG
    order first); only the first ``most`` where given (independent calls have
    factorially many)."""
    members = set(fusion.calls)
    out = []

    def extend(order: tuple[int, ...], left: frozenset[int]) -> None:
        if not left:
            out.append(order)
            return
        for call in sorted(left):
            if most is not None and len(out) >= most:
                return
            if all(p not in left for p in dag.predecessors(call) if p in members):
                extend(order + (call,), left - {call})

    extend((), frozenset(members))
    return out


def steps_in_order(dag: Dag, library: Library, fusion: Fusion, order: tuple[int, ...],
                   loads_first: bool = False) -> tuple[Step, ...]:
    """Routine steps for a call order. Each call's loads go right before its
    compute (elements live shortest), or, with ``loads_first``, every load of
    the kernel comes first (one memory latency per iteration, not one per call)."""
    kernel = frozenset(fusion.calls)
    loaded: set[int] = set()
    loads: list[Step] = []
    steps: list[Step] = []
    for call in order:
        for param, value in array_args(dag, library, call):
            if dag.producer(value) in kernel or value in loaded:
                continue
            loaded.add(value)
            (loads if loads_first else steps).append(Step(call, RoutineKind.LOAD, param))
        steps.append(Step(call, RoutineKind.COMPUTE))
        if leaves_kernel(dag, library, call, kernel):
            steps.append(Step(call, RoutineKind.STORE, function_of(dag, library, call).result.name))
    return tuple(loads + steps)


def load_phases(plan: KernelPlan) -> int:
    """Groups of consecutive loads in the steps: each waits for memory anew."""
    phases, previous = 0, None
    for step in plan.steps:
        if step.kind is RoutineKind.LOAD and previous is not RoutineKind.LOAD:
            phases += 1
        previous = step.kind
    return phases


def by_time(option) -> tuple:
    """The order of a slot's (plan, kernel, seconds) options: predicted time, ties
    to the plan whose kernels wait for memory fewest times per iteration (the
    predictor cannot tell routine orders apart, and fewer phases measured faster:
    docs/design/optimization-space.md), then the plan.
    A held plan's registers also hold tiles, and loading everything at once needs
    more of them: its ties go by load phases only where :func:`_loads_at_once_fit`."""
    plan, kernel, seconds = option
    if plan.family == "held" and not _loads_at_once_fit(plan, kernel):
        return seconds, 0, plan
    return seconds, sum(load_phases(part) for part in plan.parts), plan


def _loads_at_once_fit(plan: HeldPlan, kernel) -> bool:
    """Whether a held plan may load all its calls' operands in one phase without
    spilling: band parts whose estimate leaves more than BAND_REGISTER_MARGIN. One phase
    measured a little faster than three where it fits, and spilled where the estimate left
    only the margin (docs/notes/striped-fusion-measurements.md)."""
    return (plan.producer.geometry is Geometry.BAND
            and kernel.most_registers - kernel.estimated_registers > BAND_REGISTER_MARGIN)


def as_parts(options, predictor, dag: Dag, sizes) -> list[tuple[KernelPlan, Kernel, float]]:
    """A fusion's options (kernels built and priced as a program launches them alone) as the
    parts of a horizontal, striped or held fusion, each priced as such a part, best first: a
    part does not turn, and a tile kernel's sums stay with its last block (lower.part_of), so
    a kernel whose sums run apart alone is priced again."""
    out = []
    for plan, kernel, seconds in options:
        part = part_of(kernel)
        out.append((plan, part, seconds if part.sums_apart == kernel.sums_apart
                    else predictor.kernel_seconds(part, dag, sizes)))
    return sorted(out, key=by_time)


def implementations(dag: Dag, library: Library, fusion: Fusion, dtype: str,
                    shapes: tuple[Shape, ...] | None = None, sizes=None,
                    target: GpuTarget | None = None, most_orders: int | None = None) -> list[tuple[KernelPlan, Kernel]]:
    """Every valid, undominated implementation of a fusion, with its analysed kernel as a
    program launches it alone (:func:`as_parts`: as a fusion's part).
    ``shapes`` replaces the block shapes searched (those of the fusion's geometry are used).
    Given ``sizes``, a fusion of nested calls also gets band implementations
    (:func:`band_shapes`), and a fusion that only the band geometry allows gets only those.
    ``most_orders``: only the first so many call orders (:func:`call_orders`). ``target``: the GPU
    (default: the reference GPU)."""
    target = target or reference()
    geometry = function_of(dag, library, fusion.calls[0]).hof.geometry
    geometries = [geometry] if why_not_fusible(dag, library, fusion.calls) is None else []
    if geometry is Geometry.TILE and why_not_fusible(dag, library, fusion.calls, Geometry.BAND) is None:
        geometries.append(Geometry.BAND)
    orders = tuple(dict.fromkeys(steps_in_order(dag, library, fusion, o, first)
                                 for o in call_orders(dag, fusion, most_orders) for first in (False, True)))
    out = []
    for geometry in geometries:
        searched = _shapes_of(dag, library, fusion, dtype, geometry, shapes, sizes, target.sms)
        built = {shape: _built(dag, library, fusion, dtype, shape, orders, target) for shape in searched}
        impls_choices, settings = _layouts(dag, library, fusion, geometry)
        for impls in impls_choices:  # the order of the space's lists (ties keep it)
            for shape in searched:
                for setting in settings:
                    out.extend(built[shape].get((impls, *setting), ()))
    return out


def _layouts(dag: Dag, library: Library, fusion: Fusion, geometry: Geometry) -> tuple[list, list]:
    """The plans of one shape: each choice of the calls' implementations, and each
    (serial axis, L2 policy, ahead)."""
    axes = {Geometry.TILE: (ROWS, COLS), Geometry.BAND: (ROWS,)}.get(geometry, (None,))
    policies = (L2_PLAIN,) if geometry is not Geometry.VECTOR else tuple(L2_NAMES)  # plain first: ties rank it first
    choices = [tuple(i.name for i in function_of(dag, library, c).implementations
                     if function_of(dag, library, c).geometry_of(i.name) is geometry) for c in fusion.calls]
    aheads = (False, True) if geometry is Geometry.BAND else (False,)
    return list(itertools.product(*choices)), list(itertools.product(axes, policies, aheads))


# The plans of one fusion and block shape, with their kernels, by everything that decides
# them: the DAG, the library (by identity, as its functions do not take part in its
# equality; the entry holds it, so that identity stays its own), the fusion, the precision,
# the shape, the routine orders and the GPU. Kernels are frozen, so a space for another
# size or predictor of the same script, or a held fusion's few shapes, takes them as they
# are instead of lowering every plan again. The least recently used go first.
_BUILT = Recent(8192)  # key -> (the library, {layout: plans with their kernels})


def _built(dag: Dag, library: Library, fusion: Fusion, dtype: str, shape: Shape, orders: tuple,
           target: GpuTarget) -> dict[tuple, tuple[tuple[KernelPlan, Kernel], ...]]:
    """(implementations, serial, l2, ahead) -> the plans of the fusion in ``shape`` that
    build, in ``orders``, keeping those of least on-chip memory (orders that need more
    are dominated)."""
    key = (dag, id(library), fusion, geo.dtype_name(dtype), shape, orders, target)
    entry = _BUILT.get(key)
    if entry is None or entry[0] is not library:
        groups = {}
        impls_choices, settings = _layouts(dag, library, fusion, shape.geometry)
        for impls, (serial, l2, ahead) in itertools.product(impls_choices, settings):
            group = []
            for steps in orders:
                plan = KernelPlan(fusion.calls, impls, steps, shape, serial, l2, ahead)
                try:
                    group.append((plan, build_kernel(dag, library, plan, dtype, 0, alone=True, target=target)))
                except PlanError:
                    continue
            if group:
                least = min(k.onchip_bytes for _, k in group)
                groups[(impls, serial, l2, ahead)] = tuple(item for item in group if item[1].onchip_bytes == least)
        entry = (library, groups)
        _BUILT.keep(key, entry)
    return entry[1]


def _shapes_of(dag: Dag, library: Library, fusion: Fusion, dtype: str, geometry: Geometry, shapes, sizes,
               sms: int) -> tuple[Shape, ...]:
    if shapes:
        return tuple(s for s in shapes if s.geometry is geometry)
    if geometry is Geometry.BAND:
        if sizes is None:
            return ()
        function = function_of(dag, library, fusion.calls[0])
        bound = call_dims(dag, library, fusion.calls[0])
        return band_shapes(sizes[bound[function.rows_dim]], sizes[bound[function.cols_dim]], dtype, sms)
    return TILE_SHAPES if geometry is Geometry.TILE else VECTOR_SHAPES
