"""The scalar family: the one-thread kernel that stores the scalar expressions a
script returns (:class:`~fusec.ir.plan.ScalarPlan`).

An expression that calls read is evaluated inside each of their kernels
(:attr:`fusec.ir.kernel.Kernel.expressions`); one the script returns must also
land in the output's memory. The simplest correct place is a kernel of its
own, launched last: every result of a call it reads is final by then (the
kernel that makes one finishes it in whichever block arrives last, and two
expressions may read results of different kernels), and the program's stream
orders it after them. It reads call results from memory (``scalar_ptr``),
inputs by value (those the caller passes on the device from memory too),
evaluates the expressions as every other kernel does
(:mod:`fusec.emit.scalars`) and stores each returned one. It costs a launch
(its time not measured) and is the same in every plan of the script, so it is
not part of the space and prices at zero.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from ..emit.plan_text import nvcc_line
from ..emit.scalars import emit_scalars
from ..emit.writer import CudaWriter
from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.kernel import Arg, LaunchNeeds, scalar_arg
from ..ir.plan import ScalarPlan
from ..library.model import Library
from ..target import GpuTarget
from .base import register


@dataclasses.dataclass(frozen=True)
class ScalarKernel(LaunchNeeds):
    """The interface of :class:`~fusec.ir.kernel.Kernel` the runtime uses: one block of one thread."""

    index: int
    name: str
    plan: ScalarPlan
    dtype: str
    args: tuple[Arg, ...]
    expressions: tuple[int, ...]  # every expression evaluated, each after those it reads
    block = 1
    reductions = ()
    turns = False

    def grid(self, sizes: dict[str, int]) -> int:
        return 1

    def leaves(self) -> tuple:
        """No analysed kernel of the tile, band or vector geometry."""
        return ()

    def owner(self, arg: Arg) -> "ScalarKernel":
        return self


def build_scalar(dag: Dag, plan: ScalarPlan, dtype: str, index: int) -> ScalarKernel:
    expressions = dag.needed_expressions(plan.values)
    outs = [Arg("out", f"real* __restrict__ g_{dag.value(v).c_name}", v) for v in plan.values]
    operands = dict.fromkeys(leaf for v in plan.values for leaf in dag.leaves(v))
    scalars = [scalar_arg(dag.value(v)) for v in operands]
    return ScalarKernel(index, f"k{index}_scalars", plan, geo.dtype_name(dtype), tuple(outs + scalars), expressions)


def emit_kernel(kernel: ScalarKernel, dag: Dag) -> str:
    w = CudaWriter()
    w(f"// ==== kernel {kernel.index}: {kernel.name} " + "=" * max(0, 70 - len(kernel.name)))
    w("//   the scalar expressions the script returns, stored by one thread after every other kernel")
    params = ",\n    ".join(a.decl for a in kernel.args)
    w.open_kernel("__launch_bounds__(1)", kernel.name, params)
    emit_scalars(w, kernel, dag)
    for value in kernel.plan.values:
        c = dag.value(value).c_name
        w(f"*g_{c} = {c};")
    w.close()
    return "\n".join(w.lines) + "\n"


class ScalarFamily:
    name = "scalar"
    joint = ""
    note = "the returned scalar expressions, stored by one thread"

    def build(self, dag: Dag, library: Library, plan: ScalarPlan, dtype: str, index: int, *,
              alone: bool = False, target: GpuTarget | None = None) -> ScalarKernel:
        return build_scalar(dag, plan, dtype, index)

    def emit(self, kernel: ScalarKernel, dag: Dag, library: Library) -> str:
        return emit_kernel(kernel, dag)

    def analytic_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        """Zero: the same in every plan of the script, and no combination counts it
        (a tuned plan's programs are compared with combinations of the space)."""
        return 0.0

    def perfdb_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return 0.0

    def plan_text(self, generated, kernel: ScalarKernel, sizes, resources, turning: bool) -> list[str]:
        dag = generated.dag
        lines = [f"  store    {dag.value(v).label} = {dag.expression_text(v)}" for v in kernel.plan.values]
        lines.append("  launch   1 thread, after every other kernel (the results of calls it reads are final)")
        if resources and kernel.name in resources:
            lines.append("  " + nvcc_line(resources[kernel.name]))
        return lines


FAMILY = register(ScalarFamily())
