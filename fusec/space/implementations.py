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

from ..codegen.kernel import Kernel, build_kernel
from ..dag import Dag
from ..errors import PlanError
from ..geometry import Shape
from ..library.model import Geometry, Library, RoutineKind
from .fusions import Fusion
from .points import COLS, L2_NAMES, L2_PLAIN, ROWS, KernelPlan, Step
from .steps import array_args, function_of, leaves_kernel

# The block shapes searched: threads per block, and for tiles the rows of a tile
# (rows per thread = TILE_ROWS / BLOCK_Y), with a few serial iteration counts.
# On the H100 (scratch measurements of y = A x and C = A + B, n = 16384): a gemv
# streams fastest with 1-2 rows per thread and 4 tiles per block along a row
# (~2% over 4 rows and 2 tiles); an elementwise map with one 16-byte access per
# thread and operand, and 1024-thread blocks for vectors.
VECTOR_SHAPES = tuple(Shape(Geometry.VECTOR, block, iters)
                      for block in (128, 256, 512, 1024) for iters in (1, 4, 16))
TILE_SHAPES = tuple(Shape(Geometry.TILE, 32 * block_y, iters, tile_rows)
                    for block_y, tile_rows in ((4, 16), (8, 8), (8, 16), (8, 32), (8, 64))
                    for iters in (1, 2, 4, 8, 32))


def call_orders(dag: Dag, fusion: Fusion) -> list[tuple[int, ...]]:
    """Topological orders of the fusion's calls."""
    members = set(fusion.calls)
    out = []

    def extend(order: tuple[int, ...], left: frozenset[int]) -> None:
        if not left:
            out.append(order)
            return
        for call in sorted(left):
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


def implementations(dag: Dag, library: Library, fusion: Fusion, dtype: str,
                    shapes: tuple[Shape, ...] | None = None) -> list[tuple[KernelPlan, Kernel]]:
    """Every valid, undominated implementation of a fusion, with its analysed kernel.
    ``shapes`` replaces the block shapes searched (those of the fusion's geometry are used)."""
    geometry = function_of(dag, library, fusion.calls[0]).hof.geometry
    shapes = tuple(s for s in shapes if s.geometry is geometry) if shapes else (
        TILE_SHAPES if geometry is Geometry.TILE else VECTOR_SHAPES)
    axes = (ROWS, COLS) if geometry is Geometry.TILE else (None,)
    policies = (L2_PLAIN,) if geometry is Geometry.TILE else tuple(L2_NAMES)  # plain first: ties rank it first
    choices = [tuple(i.name for i in function_of(dag, library, c).implementations) for c in fusion.calls]
    orders = list(dict.fromkeys(steps_in_order(dag, library, fusion, o, first)
                                for o in call_orders(dag, fusion) for first in (False, True)))
    best: dict[tuple, list[tuple[KernelPlan, Kernel]]] = {}
    for impls in itertools.product(*choices):
        for shape, serial, l2 in itertools.product(shapes, axes, policies):
            group = best.setdefault((impls, shape, serial, l2), [])
            for steps in orders:
                plan = KernelPlan(fusion.calls, impls, steps, shape, serial, l2)
                try:
                    kernel = build_kernel(dag, library, plan, dtype, 0, emit=False)
                except PlanError:
                    continue
                group.append((plan, kernel))
    out = []
    for group in best.values():
        if group:
            least = min(k.onchip_bytes for _, k in group)
            out.extend(item for item in group if item[1].onchip_bytes == least)
    return out
