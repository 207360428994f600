"""Printing the scalars a kernel body starts with: those in device memory (left
there by earlier kernels, or passed there by the caller), and the script's scalar expressions (:mod:`fusec.ir.expr`)
evaluated from them.

An expression is printed in ``real`` (float or double, the program's
precision), with ``sqrt`` and ``fabs`` of CUDA's math library, which round as
IEEE-754 does (nvcc's defaults: ``-prec-div``, ``-prec-sqrt``); every kernel
that reads an expression prints the same C from the same operands.
"""

from __future__ import annotations

from ..ir import expr
from ..ir.dag import Dag
from .writer import CudaWriter

_C_FUNCTIONS = {"sqrt": "sqrt", "abs": "fabs"}  # overloaded for float and double in device code


def c_expression(tree: expr.Expr, dag: Dag) -> str:
    """The tree as a C expression over the values' C names (``v4_rr / v6_pq``)."""
    def leaf(node: expr.Expr) -> str:
        return dag.value(node.value).c_name if isinstance(node, expr.Ref) else f"real({node.literal})"
    return expr.printed(tree, leaf, lambda f, arg: f"{_C_FUNCTIONS[f]}({arg})")


def expression_line(dag: Dag, value: int) -> str:
    """``const real v7_alpha = v4_rr / v6_pq;  // alpha = rr / pq (line 4)``"""
    e = dag.expression(value)
    v = dag.value(value)
    return (f"const real {v.c_name} = {c_expression(e.tree, dag)};"
            f"  // {v.label} = {dag.expression_text(value)} (line {e.coord.line})")


def emit_scalars(w: CudaWriter, kernel, dag: Dag) -> None:
    """The kernel's scalars in device memory (its ``scalar_ptr`` arguments: made by earlier
    kernels, or passed by the caller as device arrays), read once, then its expressions
    (``kernel.expressions``), each after those it reads."""
    for arg in kernel.args:
        if arg.role == "scalar_ptr":
            value = dag.value(arg.value)
            why = "the caller's device array (device_scalars)" if value.on_device else "computed by an earlier kernel"
            w(f"const real {value.c_name} = *g_{value.c_name};  // {why}")
    for value in kernel.expressions:
        w(expression_line(dag, value))
