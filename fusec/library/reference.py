"""The ``reference`` language of library functions: parsing, checking, evaluating.

Every library function carries a ``reference``: a NumPy-style expression over
its parameter names (``alpha * (A @ x) + beta * y``). It is parsed with
:mod:`ast` and evaluated by a small tree walker of its own, never ``eval``:
the language is numbers, parameter names, binary ``+ - * / @``, unary ``-``,
parentheses, ``.T``, the sums ``outer(a, b)``, ``dot(a, b)``, ``sum(a)``,
the element-wise ``abs(a)``, ``sqrt(a)``, ``exp(a)``, ``min(a, b)``,
``max(a, b)`` (NumPy's ``abs``, ``sqrt``, ``exp``, ``minimum``, ``maximum``),
and a matrix's triangles ``triu(a)``, ``tril(a)``, ``triu(a, k)``,
``tril(a, k)`` (NumPy's, ``k`` an integer literal).

The library's checks (:mod:`.checks`) reject a reference this module cannot
evaluate or whose shapes disagree with the function's declaration; the
oracle (:mod:`fusec.oracle`) evaluates it, with its gauge, for every call of a
script (:func:`evaluate`).
"""

from __future__ import annotations

import ast
import math
from typing import Mapping

import numpy as np

from ..errors import LibraryValidationError
from ..ir import geometry as geo
from .model import Function, Kind

__all__ = ["check_reference", "cut", "evaluate", "reads_one_triangle", "reads_pointwise", "reference_value"]

# name -> number of positional arguments
_FUNCTIONS = {"outer": 2, "dot": 2, "sum": 1, "abs": 1, "sqrt": 1, "exp": 1, "min": 2, "max": 2,
              "triu": 1, "tril": 1}  # triu and tril: a second argument, k, is optional
# element-wise: the shape of their operands (min and max broadcast a scalar as + does)
_ELEMENTWISE = ("abs", "sqrt", "exp", "min", "max")
# a matrix's triangle, on and above (triu) or on and below (tril) its diagonal k (NumPy's
# triu and tril); k, an optional second argument, is an integer literal (triu(A, 1): strictly above)
_TRIANGLES = ("triu", "tril")
MAX_DEPTH = 200  # levels of nesting a reference may have, as a script's expressions (the walks recurse)
MAX_DIAGONAL = 2**31 - 1  # the largest diagonal a matrix fusec runs has (and NumPy takes)

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@"}

# Friendly names for constructs that are rejected (the rest use the node type).
_CONSTRUCT_NAMES = {
    ast.Lambda: "lambda", ast.Subscript: "subscript", ast.Slice: "slice",
    ast.Compare: "comparison", ast.BoolOp: "boolean operator", ast.IfExp: "conditional expression",
    ast.List: "list", ast.Tuple: "tuple", ast.Dict: "dict", ast.Set: "set",
    ast.ListComp: "comprehension", ast.SetComp: "comprehension", ast.DictComp: "comprehension",
    ast.GeneratorExp: "generator expression", ast.Starred: "starred argument",
    ast.NamedExpr: "assignment expression", ast.JoinedStr: "f-string",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield",
}


# ---------------------------------------------------------------------------
# Reference expressions: parsing and validation
# ---------------------------------------------------------------------------

Shape = tuple[str, ...]  # symbolic: the function's dimension variables; () is a scalar


class _Checker:
    """Validates one reference tree: constructs, names and (optionally) shapes.

    Shapes are symbolic tuples of the function's dimension variables, so
    ``A @ x`` with ``A: matrix[m, n]`` and ``x: vector[m]`` is caught once, when
    the library loads, not as a NumPy error in the middle of a test. Of a
    ``square`` matrix the column variable is the row variable (``m`` for ``n``
    everywhere: ``Function.dims_of``), so ``A + outer(x, x)`` holds.
    """

    def __init__(self, function: Function, shapes: bool):
        self.function = function
        self.shapes = shapes
        self.params = {p.name: p for p in function.params}
        self.contracted: set[str] = set()  # dimension variables summed over
        self.reduces = False

    def fail(self, message: str) -> LibraryValidationError:
        return LibraryValidationError(
            f"reference of {self.function.name!r} ({self.function.reference!r}): {message}",
            self.function.coord)

    def shape(self, node: ast.AST) -> Shape:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.fail(f"constant {ast.unparse(node)} is not a real number")
            try:
                finite = math.isfinite(float(node.value))
            except OverflowError:  # an integer no float holds
                finite = False
            if not finite:  # 1e999 reads as infinity
                raise self.fail("a constant is out of range (past the largest float)")
            return ()
        if isinstance(node, ast.Name):
            param = self.params.get(node.id)
            if param is None:
                known = ", ".join(self.params) or "none"
                raise self.fail(f"unknown name {node.id!r} (parameters: {known})")
            return self.function.dims_of(param) if param.kind is not Kind.SCALAR else ()
        if isinstance(node, ast.BinOp):
            op = _BINARY.get(type(node.op))
            if op is None:
                raise self.fail(f"operator {_op_text(node.op)!r} is not allowed "
                                "(only + - * / @)")
            left, right = self.shape(node.left), self.shape(node.right)
            return self.matmul(left, right, node) if op == "@" else \
                self.elementwise(left, right, op, node)
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub):
                raise self.fail(f"unary operator {_op_text(node.op)!r} is not allowed "
                                "(only unary -)")
            return self.shape(node.operand)
        if isinstance(node, ast.Attribute):
            if node.attr != "T":
                raise self.fail(f"attribute '.{node.attr}' is not allowed (only '.T')")
            inner = self.shape(node.value)
            if self.shapes and len(inner) != 2:
                raise self.fail(f"'.T' of a {_kind_word(inner)} in "
                                f"`{ast.unparse(node)}` (only a matrix transposes)")
            return tuple(reversed(inner))
        if isinstance(node, ast.Call):
            return self.call(node)
        name = _CONSTRUCT_NAMES.get(type(node), f"{type(node).__name__} expression")
        raise self.fail(f"{name} `{ast.unparse(node)}` is not allowed")

    def call(self, node: ast.Call) -> Shape:
        if not isinstance(node.func, ast.Name):
            raise self.fail(f"call of `{ast.unparse(node.func)}` is not allowed "
                            f"(only {', '.join(_FUNCTIONS)})")
        name = node.func.id
        if name not in _FUNCTIONS:
            raise self.fail(f"call of {name!r} is not allowed (only {', '.join(_FUNCTIONS)})")
        if node.keywords:
            raise self.fail(f"keyword argument in `{ast.unparse(node)}` is not allowed")
        if name in _TRIANGLES:
            return self.triangle(node)
        if len(node.args) != _FUNCTIONS[name]:
            raise self.fail(f"{name} takes {_FUNCTIONS[name]} argument(s), "
                            f"got {len(node.args)} in `{ast.unparse(node)}`")
        args = [self.shape(a) for a in node.args]  # rejects Starred too
        if name in _ELEMENTWISE:
            return args[0] if len(args) == 1 else self.elementwise(args[0], args[1], name, node)
        self.reduces |= name in ("dot", "sum")
        if name == "sum":
            self.contracted.update(args[0])
            return ()
        if not self.shapes:
            return (args[0] + args[1]) if name == "outer" else ()
        for a in args:
            if len(a) != 1:
                raise self.fail(f"{name} of a {_kind_word(a)} in `{ast.unparse(node)}` "
                                "(it takes vectors)")
        if name == "outer":
            return args[0] + args[1]
        if args[0] != args[1]:
            raise self.fail(f"dot of vectors of lengths {args[0][0]} and {args[1][0]} "
                            f"in `{ast.unparse(node)}`")
        self.contracted.add(args[0][0])
        return ()

    def triangle(self, node: ast.Call) -> Shape:
        """``triu(a)``, ``triu(a, k)`` (and tril): a matrix, and a diagonal that is an integer literal."""
        name = node.func.id
        if len(node.args) not in (1, 2):
            raise self.fail(f"{name} takes 1 or 2 arguments (a matrix and a diagonal k), "
                            f"got {len(node.args)} in `{ast.unparse(node)}`")
        if len(node.args) == 2 and _diagonal(node.args[1]) is None:
            raise self.fail(f"the diagonal of {name} must be an integer literal (0, 1, -1, ...), "
                            f"not `{ast.unparse(node.args[1])}`")
        shape = self.shape(node.args[0])
        if self.shapes and len(shape) != 2:
            raise self.fail(f"{name} of a {_kind_word(shape)} in `{ast.unparse(node)}` (it takes a matrix)")
        return shape

    def matmul(self, left: Shape, right: Shape, node: ast.BinOp) -> Shape:
        self.reduces = True
        if not self.shapes:
            return left[:-1] + right[1:]
        if not left or not right or len(left) > 2 or len(right) > 2:
            raise self.fail(f"'@' of a {_kind_word(left)} and a {_kind_word(right)} "
                            f"in `{ast.unparse(node)}`")
        inner_left = left[-1]
        inner_right = right[0]
        if inner_left != inner_right:
            raise self.fail(f"'@' contracts {inner_left} with {inner_right} "
                            f"in `{ast.unparse(node)}`")
        self.contracted.add(inner_left)
        return left[:-1] + right[1:]

    def elementwise(self, left: Shape, right: Shape, op: str, node: ast.expr) -> Shape:
        if not left:
            return right
        if not right or left == right or not self.shapes:
            return left
        raise self.fail(f"'{op}' of shapes [{', '.join(left)}] and [{', '.join(right)}] "
                        f"in `{ast.unparse(node)}` (operands must have equal shapes, "
                        "or one must be a scalar)")

    def check_result(self, shape: Shape) -> None:
        result = self.function.result
        expected = self.function.dims_of(result) if result.kind is not Kind.SCALAR else ()
        if shape != expected:
            raise self.fail(f"gives a {_describe(shape)}, but the result "
                            f"{result.name!r} is a {_describe(expected)}")

    def check_hof(self) -> None:
        hof = self.function.hof
        if hof.reduce and not self.reduces:
            raise self.fail(f"the function is a {hof} but the reference sums nothing "
                            "(no '@', dot or sum)")
        if not hof.reduce and self.reduces:
            raise self.fail(f"the function is a {hof} but the reference sums "
                            "(it uses '@', dot or sum)")
        axis = self.function.dim(hof.axis) if hof.axis else None  # of a square matrix, its rows'
        if hof.reduce and hof.nested and axis and axis not in self.contracted:
            summed = ", ".join(sorted(self.contracted))
            raise self.fail(f"the function reduces over {hof.axis} but the reference "
                            f"sums over {summed}")


def _diagonal(node: ast.expr) -> int | None:
    """The integer a literal ``k`` or ``-k`` stands for; None for anything else."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node, sign = node.operand, -1
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value <= MAX_DIAGONAL:
        return sign * node.value
    return None


def _op_text(op: ast.AST) -> str:
    texts = {ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
             ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^",
             ast.BitAnd: "&", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}
    return texts.get(type(op), type(op).__name__)


def _kind_word(shape: Shape) -> str:
    return {0: "scalar", 1: "vector", 2: "matrix"}.get(len(shape), f"{len(shape)}-d array")


def _describe(shape: Shape) -> str:
    return _kind_word(shape) + (f"[{', '.join(shape)}]" if shape else "")


def _parse(function: Function) -> ast.expr:
    text = (function.reference or "").strip()
    if not text:
        raise LibraryValidationError(
            f"function {function.name!r} has no reference expression", function.coord)
    if not text.isascii():  # Python reads a fullwidth x as x (NFKC): the language is ASCII
        raise LibraryValidationError(
            f"reference of {function.name!r} ({function.reference!r}) has a character that is not ASCII"
            f" ({next(c for c in text if not c.isascii())!r})", function.coord)
    try:
        with geo.AST_LOCK:  # the parser is not thread-safe (see fusec.ir.geometry)
            tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise LibraryValidationError(
            f"reference of {function.name!r} ({function.reference!r}) does not parse: "
            f"{e.msg}", function.coord) from None
    return tree.body


def check_reference(function: Function, *, shapes: bool = True) -> None:
    """Validate ``function.reference``; raise :class:`LibraryValidationError` if bad.

    Always checked: it parses as one expression of the reference language
    (numbers, the function's parameter names, binary ``+ - * / @``, unary
    ``-``, ``.T``, ``outer(a, b)``, ``dot(a, b)``, ``sum(a)``, ``abs(a)``,
    ``sqrt(a)``, ``exp(a)``, ``min(a, b)``, ``max(a, b)``, ``triu(a[, k])``,
    ``tril(a[, k])``). With ``shapes``
    (the default) the expression is also shape-checked over the parameters'
    dimension variables: operands of ``+ - * /``, ``min`` and ``max`` have
    equal shapes or one is a scalar, ``@`` contracts equal dimensions, ``.T``
    applies to a matrix,
    ``dot``/``outer`` take vectors, the result has the declared kind and
    dimensions, and it sums (``@``, ``dot``, ``sum``) exactly when the
    function's hof reduces, over ``hof.axis`` for a nested reduce (the oracle's
    threshold depends on that axis). The error's coord is the function's.
    """
    _checked(function, shapes)


_CACHE: dict[tuple, ast.expr] = {}


def _checked(function: Function, shapes: bool = True) -> ast.expr:
    key = (function.name, function.reference, function.params, function.result,
           function.hof, function.square, shapes)
    tree = _CACHE.get(key)
    if tree is None:
        try:
            tree = _parse(function)
            if _depth(tree) > MAX_DEPTH:
                raise RecursionError  # below the parser's limit, the walks could still meet Python's
            checker = _Checker(function, shapes)
            shape = checker.shape(tree)
            if shapes:
                checker.check_result(shape)
                checker.check_hof()
        except RecursionError:  # Python's parser, and the walks over its tree, give up near 1000 levels
            raise LibraryValidationError(
                f"reference of {function.name!r} is nested too deep (more than {MAX_DEPTH} levels):"
                " write it shorter", function.coord) from None
        _CACHE[key] = tree
    return tree


def _depth(tree: ast.AST) -> int:
    """How deep the expression nests, counted as a script's (its operands and arguments: not
    Python's operator and load-context nodes); without recursion, as it may be as deep as the
    parser allows."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))
    return deepest


def reads_one_triangle(function: Function, name: str, size: int = 6) -> bool:
    """Whether ``function``'s reference leaves ``name`` (a square matrix parameter) below its
    diagonal out: evaluated on random values at ``size`` with NaN there, the result (its
    stored triangle where it declares one) holds no NaN. What a ``stored A triu`` line of
    the library promises (:func:`fusec.library.loader.load_library` checks it); of a
    ``stored A tril`` line the same above the diagonal."""
    rng = np.random.default_rng(0)
    env: dict[str, np.ndarray] = {}
    for param in function.params:
        shape = (size,) * len(param.dims)
        env[param.name] = np.asarray(rng.uniform(0.5, 1.0, shape) if shape else 0.7)
    env[name] = env[name].copy()
    outside = np.tril_indices(size, -1) if function.triangle(name) != "tril" else np.triu_indices(size, 1)
    env[name][outside] = np.nan
    with np.errstate(invalid="ignore"):
        result = reference_value(function, env)
    made = function.triangle(function.result.name)
    if made is not None:
        result = cut(made)(result)
    return not np.isnan(result).any()


def reference_value(function: Function, env: Mapping[str, np.ndarray]) -> np.ndarray:
    """``function``'s reference evaluated in float64 on ``env`` (parameter name -> value)."""
    return np.asarray(_walk(_checked(function), env, None)[0])


def reads_pointwise(function: Function, name: str) -> bool:
    """Whether ``function``'s result at (i, j) reads the matrix parameter ``name`` at (i, j)
    alone: a nested map whose result has the parameter's dimensions and element, with ``name``
    under element-wise operations only (``+ - * /``, unary ``-``, ``abs`` and the other
    element-wise functions, ``triu``/``tril``), never under ``.T``, ``@``, ``outer``, ``dot``
    or ``sum``. Such a call's result may be written over ``name``'s own memory by the block
    that read it (:mod:`fusec.runtime.in_place`)."""
    param = next((p for p in function.params if p.name == name), None)
    result = function.result
    if (param is None or param.kind is not Kind.MATRIX or not function.hof.nested or function.hof.reduce
            or result.kind is not Kind.MATRIX or result.dims != param.dims or result.element != param.element):
        return False

    def pointwise(node: ast.expr) -> bool:
        if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
            return True  # the subtree does not read it
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.BinOp):
            return not isinstance(node.op, ast.MatMult) and pointwise(node.left) and pointwise(node.right)
        if isinstance(node, ast.UnaryOp):
            return pointwise(node.operand)
        if isinstance(node, ast.Call) and node.func.id in _ELEMENTWISE + _TRIANGLES:
            return all(pointwise(a) for a in node.args)
        return False  # .T, outer, dot, sum

    return pointwise(_checked(function))


def evaluate(function: Function, env: Mapping[str, np.ndarray],
             genv: Mapping[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``function``'s reference evaluated in float64 on ``env`` (parameter name -> value):
    (value, gauge), the gauge from ``genv`` (the names' gauges; None: no gauge) as
    :func:`_walk` says."""
    return _walk(_checked(function), env, genv)


def cut(triangle: str):
    """NumPy's ``triu`` or ``tril``."""
    return np.triu if triangle == "triu" else np.tril


# ---------------------------------------------------------------------------
# The tree walker
# ---------------------------------------------------------------------------


def _walk(node: ast.expr, env: Mapping[str, np.ndarray],
          genv: Mapping[str, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Evaluate a checked reference tree in float64: (value, gauge).

    ``genv`` holds the gauges of the names (None: values only, gauge None).
    The gauge is magnitude arithmetic where that bounds the rounding: literals
    by absolute value, ``a - b`` as ``|a| + |b|``, ``-a`` as ``|a|``, every
    other sum and product of the gauges as they are, ``abs`` keeps its
    operand's. ``min`` and ``max`` give either operand, so the larger gauge.
    Where magnitudes bound nothing (an error of ``b`` in ``a / b`` grows as
    ``1 / b**2``) it is the first-order bound from the exact values, with
    ``g`` an operand's gauge: ``a / b`` -> ``(g_a + |a / b| g_b) / |b|``,
    ``sqrt(a)`` -> ``g_a / (2 sqrt(a)) + sqrt(a)``, ``exp(a)`` ->
    ``exp(a) (g_a + 1)``; the last term of each is the rounding of the
    operation itself.
    """
    gauged = genv is not None
    if isinstance(node, ast.Constant):
        value = np.asarray(float(node.value), dtype=np.float64)
        return value, (np.abs(value) if gauged else None)
    if isinstance(node, ast.Name):
        return env[node.id], (genv[node.id] if gauged else None)
    if isinstance(node, ast.BinOp):
        a, ga = _walk(node.left, env, genv)
        b, gb = _walk(node.right, env, genv)
        if isinstance(node.op, ast.Add):
            return a + b, (ga + gb if gauged else None)
        if isinstance(node.op, ast.Sub):
            return a - b, (ga + gb if gauged else None)
        if isinstance(node.op, ast.Mult):
            return a * b, (ga * gb if gauged else None)
        if isinstance(node.op, ast.Div):
            with np.errstate(divide="ignore", invalid="ignore"):
                q = np.asarray(a / b)
                return q, ((ga + np.abs(q) * gb) / np.abs(b) if gauged else None)
        return np.asarray(a @ b), (np.asarray(ga @ gb) if gauged else None)  # MatMult
    if isinstance(node, ast.UnaryOp):  # USub
        a, ga = _walk(node.operand, env, genv)
        return -a, ga
    if isinstance(node, ast.Attribute):  # .T
        a, ga = _walk(node.value, env, genv)
        return a.T, (ga.T if gauged else None)
    assert isinstance(node, ast.Call), ast.dump(node)  # _Checker admits nothing else
    name = node.func.id
    if name in _TRIANGLES:  # the gauge of a triangle is the triangle of the gauge
        a, ga = _walk(node.args[0], env, genv)
        k = _diagonal(node.args[1]) if len(node.args) == 2 else 0
        cut = np.triu if name == "triu" else np.tril
        return cut(a, k), (cut(ga, k) if gauged else None)
    pairs = [_walk(a, env, genv) for a in node.args]
    args, gauges = [p[0] for p in pairs], [p[1] for p in pairs]
    value = _CALLS[name](*args)
    if not gauged:
        return value, None
    if name in ("outer", "dot", "sum", "abs"):
        return value, (gauges[0] if name == "abs" else _CALLS[name](*gauges))
    if name in ("min", "max"):
        return value, np.maximum(gauges[0], gauges[1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if name == "exp":
            return value, value * (gauges[0] + 1.0)
        # sqrt: where sqrt(a) is 0 its slope is infinite; 0 when the operand is exact too
        slope = np.where(value > 0, gauges[0] / (2.0 * value), np.where(gauges[0] > 0, np.inf, 0.0))
        return value, np.asarray(slope + value)


def _sqrt(a: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # sqrt of a negative is NaN, which never passes
        return np.sqrt(a)


def _exp(a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(a)


_CALLS = {
    "outer": np.outer,
    "dot": lambda a, b: np.asarray(np.dot(a, b)),
    "sum": lambda a: np.asarray(np.sum(a)),
    "abs": np.abs, "sqrt": _sqrt, "exp": _exp, "min": np.minimum, "max": np.maximum,
}
