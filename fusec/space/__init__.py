"""The optimization space: fusions, their implementations, combinations."""

from __future__ import annotations

from ..ir.dag import Dag
from ..ir.geometry import Shape
from ..ir.plan import COLS, ROWS, HorizontalPlan, KernelPlan, ProgramPlan, Step
from ..ir.steps import canonical_steps, function_of
from ..library.model import Geometry, Library

DEFAULT_VECTOR_SHAPE = Shape(Geometry.VECTOR, block=256, iters=4)
DEFAULT_TILE_SHAPE = Shape(Geometry.TILE, block=256, iters=8, tile_rows=32)


def unfused_plan(dag: Dag, library: Library) -> ProgramPlan:
    """One kernel per call, with default shapes; a reduction walks its own axis
    serially so its partials accumulate in registers."""
    kernels = []
    for call in dag.calls:
        function = function_of(dag, library, call.id)
        if function.hof.nested:
            shape, serial = DEFAULT_TILE_SHAPE, ROWS
            if function.hof.reduce and function.hof.axis == function.cols_dim:
                serial = COLS
        else:
            shape, serial = DEFAULT_VECTOR_SHAPE, None
        kernels.append(KernelPlan((call.id,), (function.implementations[0].name,),
                                  canonical_steps(dag, library, (call.id,)), shape, serial))
    return ProgramPlan(tuple(kernels))


__all__ = ["KernelPlan", "HorizontalPlan", "ProgramPlan", "Step", "ROWS", "COLS", "unfused_plan"]
