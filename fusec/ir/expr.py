"""Scalar expressions of a script (``alpha = rho / pq;``): frozen trees in the DAG.

An :class:`Expression` makes one scalar value of the DAG from scalars and
numbers with ``+ - * /``, unary minus, parentheses, ``sqrt`` and ``abs``. It is
no call: no kernel of its own computes it. Every kernel whose calls read the
value evaluates the tree itself (a few flops), from its operands: inputs passed
by value, results of other kernels read from device memory, other expressions
evaluated first. So scalars stay on the GPU between kernels, and the space
fuses calls as if they read the expression's operands directly
(:meth:`fusec.ir.dag.Dag.leaves`). A returned expression is also computed and
stored by the program's last kernel (:mod:`fusec.families.scalar`).

The trees are data only: C is printed by :mod:`fusec.emit.scalars`, float64
values and gauges by :mod:`fusec.oracle`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from ..errors import Coord

FUNCTIONS = ("sqrt", "abs")  # the functions of scalar expressions, one argument each
KEYWORDS = ("matrix", "vector", "scalar", "input", "return")  # the script language's reserved words


def reserved_as(name: str) -> str | None:
    """What a script reads ``name`` as, where a library function or composite would take it
    (no script could call it), or None: a name free for the library."""
    if name in FUNCTIONS:
        return "a function of scalar expressions"
    if name in KEYWORDS:
        return "a word of the script language"
    return None
OPERATORS = ("+", "-", "*", "/")


@dataclasses.dataclass(frozen=True)
class Constant:
    """A number written in the script (a scalar argument or in an expression)."""

    value: float
    text: str
    coord: Coord = dataclasses.field(compare=False)

    @property
    def literal(self) -> str:
        """The value as a C double literal: Python's shortest round-trip form
        (``10.0``, ``0.5``, ``1e-05``), never the script's text, which C may read
        otherwise (``010`` is octal there)."""
        return repr(float(self.value))


@dataclasses.dataclass(frozen=True)
class Ref:
    """A scalar value of the DAG, by id: an input, a call's result or another expression."""

    value: int
    coord: Coord = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class Negate:
    operand: "Expr"
    coord: Coord = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class Binary:
    op: str  # one of OPERATORS
    left: "Expr"
    right: "Expr"
    coord: Coord = dataclasses.field(compare=False)  # the operator's


@dataclasses.dataclass(frozen=True)
class Apply:
    function: str  # one of FUNCTIONS
    operand: "Expr"
    coord: Coord = dataclasses.field(compare=False)  # the function name's


Expr = Constant | Ref | Negate | Binary | Apply


@dataclasses.dataclass(frozen=True)
class Expression:
    """``value = tree``: the assignment of an expression to a scalar of the script."""

    value: int  # the value id it makes
    tree: Expr
    coord: Coord = dataclasses.field(compare=False)  # the target's
    source_line: str = dataclasses.field(default="", compare=False)


def children(tree: Expr) -> tuple[Expr, ...]:
    if isinstance(tree, (Negate, Apply)):
        return (tree.operand,)
    if isinstance(tree, Binary):
        return (tree.left, tree.right)
    return ()


def refs(tree: Expr) -> tuple[int, ...]:
    """The value ids the tree reads, in the order written, each once."""
    out: dict[int, None] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, Ref):
            out[node.value] = None
        stack.extend(reversed(children(node)))
    return tuple(out)


def constants(tree: Expr) -> tuple[Constant, ...]:
    """The numbers written in the tree, in the order written."""
    if isinstance(tree, Constant):
        return (tree,)
    return tuple(c for child in children(tree) for c in constants(child))


def relabelled(tree: Expr, mapping: Callable[[int], int]) -> Expr:
    """The tree with every value id mapped (dead code left out renumbers values)."""
    if isinstance(tree, Ref):
        return dataclasses.replace(tree, value=mapping(tree.value))
    if isinstance(tree, (Negate, Apply)):
        return dataclasses.replace(tree, operand=relabelled(tree.operand, mapping))
    if isinstance(tree, Binary):
        return dataclasses.replace(tree, left=relabelled(tree.left, mapping), right=relabelled(tree.right, mapping))
    return tree


def folded(tree: Expr) -> float | None:
    """The tree's value when it reads no value (numbers only), else None; NaN where
    it has none (``sqrt(-1)``), inf where it divides by zero."""
    if isinstance(tree, Constant):
        return tree.value
    if isinstance(tree, Ref):
        return None
    parts = [folded(child) for child in children(tree)]
    if any(p is None for p in parts):
        return None
    if isinstance(tree, Negate):
        return -parts[0]
    if isinstance(tree, Apply):
        if tree.function == "abs":
            return abs(parts[0])
        return math.sqrt(parts[0]) if parts[0] >= 0 else math.nan
    a, b = parts
    if tree.op == "/":
        return a / b if b else math.copysign(math.inf, a) if a else math.nan
    return {"+": a + b, "-": a - b, "*": a * b}[tree.op]


# How tightly each node binds when printed: a child that binds less gets parentheses.
_BINDING = {"+": 1, "-": 1, "*": 2, "/": 2}


def _binding(tree: Expr) -> int:
    if isinstance(tree, Binary):
        return _BINDING[tree.op]
    if isinstance(tree, Negate):
        return 3
    return 4  # names, numbers, function applications


def printed(tree: Expr, leaf: Callable[[Expr], str], apply: Callable[[str, str], str],
            negate: str = "-") -> str:
    """The tree as infix text, with the parentheses its structure needs (``a - (b - c)``,
    ``a + (b + c)``, ``(a + b) * c``, ``-(a * b)``): it parses back to the same tree, so
    C evaluates in the order written; ``leaf`` prints a Ref or a Constant, ``apply`` a
    function of its printed argument. The script's own text and C share this."""
    def show(node: Expr) -> str:
        if isinstance(node, (Ref, Constant)):
            return leaf(node)
        if isinstance(node, Apply):
            return apply(node.function, show(node.operand))
        if isinstance(node, Negate):
            inner = show(node.operand)
            # -(-a) must not print as --a (C's decrement)
            wrap = _binding(node.operand) < 3 or isinstance(node.operand, Negate) or inner.startswith("-")
            return f"{negate}({inner})" if wrap else f"{negate}{inner}"
        left, right = show(node.left), show(node.right)
        if _binding(node.left) < _BINDING[node.op]:
            left = f"({left})"
        # operators group to the left, so a right operand of the same level keeps its
        # parentheses: a - (b - c), and a + (b + c) too (floating-point + is not associative)
        if _binding(node.right) <= _BINDING[node.op]:
            right = f"({right})"
        return f"{left} {node.op} {right}"
    return show(tree)


def text(tree: Expr, label: Callable[[int], str]) -> str:
    """The tree as a script writes it, values by ``label`` (``rho / pq``)."""
    def leaf(node: Expr) -> str:
        return label(node.value) if isinstance(node, Ref) else node.text
    return printed(tree, leaf, lambda f, arg: f"{f}({arg})")
