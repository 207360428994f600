"""The numerical oracle: a float64 interpreter of a script's DAG, and the reference BLAS test
ratio (sblat2's) generalised to a script.

Every library function carries a ``reference``: a NumPy-style expression over
its parameter names (``alpha * (A @ x) + beta * y``). The oracle parses it with
:mod:`ast` and evaluates it with its own small tree walker, never ``eval``:
the language is numbers, parameter names, binary ``+ - * / @``, unary ``-``,
parentheses, ``.T``, the sums ``outer(a, b)``, ``dot(a, b)``, ``sum(a)``,
the element-wise ``abs(a)``, ``sqrt(a)``, ``exp(a)``, ``min(a, b)``,
``max(a, b)`` (NumPy's ``abs``, ``sqrt``, ``exp``, ``minimum``, ``maximum``),
and a matrix's triangles ``triu(a)``, ``tril(a)``, ``triu(a, k)``,
``tril(a, k)`` (NumPy's, ``k`` an integer literal).

A compiled output is judged with the reference BLAS test ratio (SMVCH in
Reference-LAPACK ``sblat2.f``) generalised to a whole script:

- the *gauge* ``g`` is the script evaluated in magnitude arithmetic on the
  absolute values of every input and constant (``a - b`` becomes
  ``|a| + |b|``, ``-a`` becomes ``|a|``); for ``y = alpha*A@x + beta*y`` it is
  SMVCH's ``|alpha| * sum_j |A_ij x_j| + |beta y_i|``. Where magnitudes do
  not bound the rounding (``/``, ``sqrt``, ``exp``) the gauge is the
  first-order one, from the exact values (see :func:`gauge`);
- ``ratio = max_i |computed_i - reference_i| / (eps * g_i)`` with ``eps`` the
  machine epsilon of the compiled precision;
- the output passes when ``ratio < threshold(k)``, ``k`` being the number of
  terms summed along the longest dependency path of the output (see
  :func:`threshold`); NaN never passes and an all-zero reference is a broken
  test, never a pass.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from .errors import ArgumentError, FusecError, LibraryValidationError, UnknownFunctionError
from .ir import expr
from .ir import geometry as geo
from .ir.dag import Constant, Dag
from .library.model import TRIANGLES, Function, Kind

__all__ = [
    "Expected", "OutputCheck", "check_outputs", "check_reference", "evaluate", "expect", "gauge",
    "random_inputs", "reads_one_triangle", "reads_pointwise", "reference_value", "stored_triangle", "sum_lengths",
    "test_ratio", "threshold",
]

# name -> number of positional arguments
_FUNCTIONS = {"outer": 2, "dot": 2, "sum": 1, "abs": 1, "sqrt": 1, "exp": 1, "min": 2, "max": 2,
              "triu": 1, "tril": 1}  # triu and tril: a second argument, k, is optional
# element-wise: the shape of their operands (min and max broadcast a scalar as + does)
_ELEMENTWISE = ("abs", "sqrt", "exp", "min", "max")
# a matrix's triangle, on and above (triu) or on and below (tril) its diagonal k (NumPy's
# triu and tril); k, an optional second argument, is an integer literal (triu(A, 1): strictly above)
_TRIANGLES = ("triu", "tril")

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
    if isinstance(node, ast.Constant) and type(node.value) is int:
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
        tree = _parse(function)
        checker = _Checker(function, shapes)
        shape = checker.shape(tree)
        if shapes:
            checker.check_result(shape)
            checker.check_hof()
        _CACHE[key] = tree
    return tree


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
        result = _cut(made)(result)
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


# ---------------------------------------------------------------------------
# Interpreting a DAG
# ---------------------------------------------------------------------------


def _function(library: Any, call) -> Function:
    function = library.functions.get(call.function)
    if function is None:
        raise UnknownFunctionError(f"the library has no function {call.function!r}",
                                   call.coord, call.source_line or None)
    if len(function.params) != len(call.args):
        raise FusecError(f"{call.function} takes {len(function.params)} argument(s), "
                         f"the call passes {len(call.args)}", call.coord)
    return function


def _bind_inputs(dag: Dag, inputs: Mapping[str, Any]) -> tuple[dict[int, np.ndarray],
                                                             dict[str, int]]:
    """float64 copies of the inputs by value id, and the size symbols they bind."""
    names = {dag.value(i).name for i in dag.inputs}
    extra = sorted(set(inputs) - names)
    if extra:
        raise ArgumentError(extra[0], f"the script {dag.name!r} has no input named so")
    values: dict[int, np.ndarray] = {}
    sizes: dict[str, int] = {}
    for vid in dag.inputs:
        value = dag.value(vid)
        if value.name not in inputs:
            raise ArgumentError(value.name, "missing input")
        try:
            array = np.array(inputs[value.name], dtype=np.float64)  # a copy: never alias
        except (TypeError, ValueError) as e:
            raise ArgumentError(value.name, f"not convertible to float64: {e}") from None
        want = 0 if value.kind is Kind.SCALAR else len(value.dims)
        if array.ndim != want:
            raise ArgumentError(value.name, f"expected a {value.kind} ({want}-d), "
                                f"got an array of shape {array.shape}")
        for symbol, extent in zip(value.dims, array.shape):
            if sizes.setdefault(symbol, extent) != extent:
                raise ArgumentError(value.name, f"size {symbol} is {sizes[symbol]} from "
                                    f"another input but {extent} here")
        values[vid] = array
    return values, sizes


def _interpret(dag: Dag, library: Any, inputs: Mapping[str, Any],
               gauged: bool) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray] | None]:
    """(values, gauges) of every value of the DAG; gauges None unless ``gauged``."""
    values, sizes = _bind_inputs(dag, inputs)
    gauges = {k: np.abs(v) for k, v in values.items()} if gauged else None
    for made in dag.values:  # in id order: every value after those it is made from
        if made.id in values:
            continue  # an input
        expression = dag.expression(made.id)
        if expression is not None:  # the gauge of a quotient or a root needs the operands' values
            values[made.id] = _expression_value(expression.tree, values)
            if gauged:
                gauges[made.id] = _expression_gauge(expression.tree, gauges, values)
            continue
        call = dag.call(made.producer)
        function = _function(library, call)
        tree = _checked(function)
        env: dict[str, np.ndarray] = {}
        genv: dict[str, np.ndarray] | None = {} if gauged else None
        for param, arg in zip(function.params, call.args):
            if isinstance(arg, Constant):
                env[param.name] = np.asarray(arg.value, dtype=np.float64)
                if gauged:
                    genv[param.name] = np.asarray(abs(arg.value), dtype=np.float64)
            else:
                env[param.name] = values[arg]
                if gauged:
                    genv[param.name] = gauges[arg]
        result, result_gauge = _walk(tree, env, genv)
        result = np.array(result, dtype=np.float64)  # owned copies
        value = dag.value(call.result)
        expected = tuple(sizes.get(d, -1) for d in value.dims)
        if result.shape != expected and -1 not in expected:
            raise LibraryValidationError(
                f"reference of {function.name!r} gives shape {result.shape} for "
                f"{value.label} (line {call.coord.line}), expected {expected}",
                function.coord)
        values[call.result] = result
        if gauged:
            gauges[call.result] = np.array(result_gauge, dtype=np.float64)
    return values, gauges


def evaluate(dag: Dag, library: Any, inputs: Mapping[str, Any]) -> dict[int, np.ndarray]:
    """float64 value of every value of the DAG: value id -> array (scalars 0-d).

    ``inputs`` are keyed by script input name and cast to float64 (copied, so
    the caller's arrays are never touched). ``library`` is anything with a
    ``functions`` mapping of :class:`Function`.
    """
    return _interpret(dag, library, inputs, gauged=False)[0]


def gauge(dag: Dag, library: Any, inputs: Mapping[str, Any]) -> dict[int, np.ndarray]:
    """The script in magnitude arithmetic on ``|inputs|`` (the SMVCH gauge).

    Every input and constant (script constants and literals of references) is
    replaced by its absolute value, ``a - b`` by ``|a| + |b|`` and ``-a`` by
    ``|a|``. Intermediate values are the gauges of their producers, so the
    gauge of a chain bounds the rounding of the whole chain, not one call.
    ``/``, ``sqrt`` and ``exp`` take the first-order bound instead, which
    needs the exact values too (see :func:`_walk`): it bounds the rounding
    when their operands are well conditioned (``sqrt(dot(x, x))``, a divisor
    far from 0), and grows as they lose it, as the error itself does. Scalar
    expressions follow the same rules (:func:`_expression_gauge`).
    """
    return _interpret(dag, library, inputs, gauged=True)[1]


# ---------------------------------------------------------------------------
# Scalar expressions of scripts (fusec.ir.expr)
# ---------------------------------------------------------------------------


def _expression_value(tree: expr.Expr, values: Mapping[int, np.ndarray]) -> np.ndarray:
    """The float64 value of a scalar expression (IEEE: a quotient by 0 is inf or NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(_value(tree, values), dtype=np.float64)


def _value(tree: expr.Expr, values: Mapping[int, np.ndarray]) -> np.float64:
    if isinstance(tree, expr.Constant):
        return np.float64(tree.value)
    if isinstance(tree, expr.Ref):
        return np.float64(values[tree.value])
    if isinstance(tree, expr.Negate):
        return -_value(tree.operand, values)
    if isinstance(tree, expr.Apply):
        operand = _value(tree.operand, values)
        return np.sqrt(operand) if tree.function == "sqrt" else np.abs(operand)
    a, b = _value(tree.left, values), _value(tree.right, values)
    if tree.op == "+":
        return a + b
    if tree.op == "-":
        return a - b
    return a * b if tree.op == "*" else a / b


def _expression_gauge(tree: expr.Expr, gauges: Mapping[int, np.ndarray],
                      reference: Mapping[int, np.ndarray]) -> np.ndarray:
    """The gauge of a scalar expression: a bound of its rounding error in units of
    eps, from its operands' gauges ``G`` and values (``reference``).

    As elsewhere, numbers count by magnitude, ``-a`` and ``|a|`` have ``G(a)``,
    ``a ± b`` has ``G(a) + G(b)`` and ``a * b`` has ``G(a) G(b)``. A quotient and
    a root have no such magnitude rule: their error grows as the divisor or the
    radicand shrinks, so they take the first-order bound of the error of the
    computed operands (each off by about ``eps G``) plus their own rounding:

    - ``a / b``: ``G(a) / |b| + |a| G(b) / b²`` (at least ``2 |a / b|``, since
      ``G >= |value|``): a divisor that cancels (``G(b) >> |b|``) widens it;
    - ``sqrt(a)``: ``G(a) / (2 sqrt(a)) + sqrt(a)`` for ``a > 0``; ``sqrt(G(a))``
      at ``a = 0``, where no first-order bound exists.

    ``reference`` is the float64 value of every value (:func:`evaluate`). The
    gauge is again at least the value's magnitude, so a call that reads it is
    gauged as it would be with an input."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(_gauge(tree, gauges, reference)[0], dtype=np.float64)


def _gauge(tree: expr.Expr, gauges, reference) -> tuple[np.float64, np.float64]:
    """(gauge, float64 value) of a subtree."""
    if isinstance(tree, expr.Constant):
        return np.float64(abs(tree.value)), np.float64(tree.value)
    if isinstance(tree, expr.Ref):
        return np.float64(gauges[tree.value]), np.float64(reference[tree.value])
    if isinstance(tree, expr.Negate):
        g, v = _gauge(tree.operand, gauges, reference)
        return g, -v
    if isinstance(tree, expr.Apply):
        g, v = _gauge(tree.operand, gauges, reference)
        if tree.function == "abs":
            return g, np.abs(v)
        root = np.sqrt(v)
        return (g / (2 * root) + root if v > 0 else np.sqrt(g)), root
    (ga, a), (gb, b) = _gauge(tree.left, gauges, reference), _gauge(tree.right, gauges, reference)
    if tree.op == "+":
        return ga + gb, a + b
    if tree.op == "-":
        return ga + gb, a - b
    if tree.op == "*":
        return ga * gb, a * b
    return ga / np.abs(b) + np.abs(a) * gb / (b * b), a / b


def _dim_bindings(dag: Dag, function: Function, call) -> dict[str, str]:
    """function dimension variable -> script size symbol, from the arguments."""
    binding: dict[str, str] = {}
    pairs = [(p, a) for p, a in zip(function.params, call.args) if isinstance(a, int)]
    pairs.append((function.result, call.result))
    for param, vid in pairs:
        for var, symbol in zip(param.dims, dag.value(vid).dims):
            binding.setdefault(var, symbol)
    return binding


def _reduction_length(dag: Dag, function: Function, call, sizes: Mapping[str, int]) -> int:
    hof = function.hof
    if not hof.reduce:
        return 0
    if hof.axis:
        var = hof.axis
    elif hof.nested:
        raise LibraryValidationError(
            f"function {function.name!r} is a nested reduce without an axis", function.coord)
    else:
        vectors = [p for p in function.array_params if p.dims]
        if not vectors:
            raise LibraryValidationError(
                f"function {function.name!r} reduces but has no array parameter",
                function.coord)
        var = vectors[0].dims[0]
    symbol = _dim_bindings(dag, function, call).get(var)
    if symbol is None:
        raise LibraryValidationError(
            f"function {function.name!r} reduces over {var}, which no parameter binds",
            function.coord)
    if symbol not in sizes:
        raise ArgumentError("sizes", f"no size given for {symbol!r}")
    return int(sizes[symbol])


def sum_lengths(dag: Dag, library: Any, sizes: Mapping[str, int]) -> dict[int, int]:
    """Terms summed along the longest dependency path, per value id.

    Inputs sum 0 terms; a call's result sums the maximum over its value
    arguments (arrays and scalars; constants count 0) plus, when its function
    reduces, the reduction length: the size of ``hof.axis`` as bound by this
    call (nested reduce), or the length of its vectors (unnested reduce).
    For ATAX ``t = A @ x; y = A.T @ t`` with ``A: m x n``, ``t`` sums ``n``
    and ``y`` sums ``n + m``. A scalar expression sums nothing itself: its
    value sums the maximum over the values it reads.
    """
    k: dict[int, int] = {vid: 0 for vid in dag.inputs}
    for made in dag.values:  # in id order: every value after those it is made from
        if made.id in k:
            continue
        expression = dag.expression(made.id)
        if expression is not None:  # no sum of its own: its operands' longest
            k[made.id] = max((k[v] for v in expr.refs(expression.tree)), default=0)
            continue
        call = dag.call(made.producer)
        function = _function(library, call)
        before = max((k[a] for a in call.value_args()), default=0)
        k[call.result] = before + _reduction_length(dag, function, call, sizes)
    return k


# ---------------------------------------------------------------------------
# The test ratio
# ---------------------------------------------------------------------------


def test_ratio(computed: Any, reference: Any, gauge: Any, dtype: Any, *, upper: bool = False,
               triangle: str | None = None) -> float:
    """``max_i |computed_i - reference_i| / (eps * gauge_i)`` (SMVCH's ratio).

    ``eps = numpy.finfo(dtype).eps`` of the compiled precision. Where
    ``gauge_i == 0`` the element contributes 0 if it is exact and ``inf``
    otherwise. NaN anywhere in ``computed`` (or in the reference or gauge)
    gives ``inf``: NaN never passes. The three shapes must match. With
    ``triangle="triu"`` (or ``upper``: a matrix of which only the upper triangle
    is stored) only the elements on and above the diagonal count: what lies below
    is not written; with ``triangle="tril"`` those on and below it.
    """
    if upper:
        triangle = "triu"
    if triangle not in (None, "triu", "tril"):
        raise ValueError(f"a triangle is 'triu' or 'tril', not {triangle!r}")
    computed = np.asarray(computed)
    reference = np.asarray(reference, dtype=np.float64)
    gauge = np.asarray(gauge, dtype=np.float64)
    if not computed.shape == reference.shape == gauge.shape:
        raise ValueError(f"shapes differ: computed {computed.shape}, reference "
                         f"{reference.shape}, gauge {gauge.shape}")
    if triangle and computed.ndim != 2:
        raise ValueError(f"only a matrix has {'an' if triangle == 'triu' else 'a'} {TRIANGLES[triangle]} triangle,"
                         f" not an array of shape {computed.shape}")
    eps = float(np.finfo(np.dtype(dtype)).eps)
    cols = computed.shape[-1] if triangle else 0
    computed, reference, gauge = computed.reshape(-1), reference.reshape(-1), gauge.reshape(-1)
    worst = 0.0
    # in slices, so the float64 temporaries of a large matrix stay in cache (a
    # tuner judges many programs on one 8192 x 8192 output)
    for start in range(0, computed.size, _SLICE):
        part = slice(start, start + _SLICE)
        a, b, g = computed[part], reference[part], gauge[part]
        if triangle:  # the flat indices of the slice in the triangle: column >= row (<= for tril)
            index = np.arange(start, start + a.size)
            keep = index % cols >= index // cols if triangle == "triu" else index % cols <= index // cols
            a, b, g = a[keep], b[keep], g[keep]
        worst = max(worst, _ratio(a.astype(np.float64), b, g, eps))
        if worst == math.inf:
            break
    return worst


def _cut(triangle: str):
    """NumPy's ``triu`` or ``tril``."""
    return np.triu if triangle == "triu" else np.tril


def _triangle_nonzero(a: np.ndarray, triangle: str) -> bool:
    """Whether a matrix has a value other than 0 in the triangle (by bands of rows: no copy
    of a large matrix; band r's diagonal is its column r)."""
    return any(np.count_nonzero(_cut(triangle)(a[r:r + 256], r)) for r in range(0, a.shape[0], 256))


def _triangle_nan(a: np.ndarray, triangle: str) -> bool:
    """Whether a matrix holds NaN in the triangle (``triu``: on or above its diagonal)."""
    return any(np.isnan(_cut(triangle)(a[r:r + 256].astype(np.float64), r)).any()
               for r in range(0, a.shape[0], 256))


def stored_triangle(dag: Dag, library: Any, value: int) -> str | None:
    """The one triangle the value ``value`` of ``dag`` holds, ``"triu"`` or ``"tril"``: the
    result of a call whose function says ``stored RESULT triu`` (``tril``; outside it the
    value holds whatever its array held); None for a value held whole."""
    made = dag.value(value)
    if made.producer is None:
        return None
    function = library.functions.get(dag.call(made.producer).function)
    return None if function is None else function.triangle(function.result.name)


_SLICE = 1 << 16  # elements


def _ratio(computed: np.ndarray, reference: np.ndarray, gauge: np.ndarray, eps: float) -> float:
    if np.isnan(gauge).any():
        return math.inf
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        error = np.abs(computed - reference)
        if np.isnan(error).any():  # NaN in either, or inf - inf: an infinite output is never right
            return math.inf
        positive = gauge > 0
        if positive.all():
            return float(np.max(error / (eps * gauge)))
        ratio = np.where(positive, error / (eps * np.where(positive, gauge, 1.0)),
                         np.where(error == 0, 0.0, np.inf))
    return float(np.max(ratio))


# pytest collects ``test_*`` names that a test module imports; this is not a test.
test_ratio.__test__ = False


def threshold(k: int) -> float:
    """Largest passing ratio for an output that sums ``k`` terms (fixed rule).

    ``16`` when ``k <= 1`` (the threshold of Reference-LAPACK ``sblat2.in``,
    for outputs with no long sum) and ``16 * sqrt(k)`` otherwise (the expected
    growth of rounding error over a sum of ``k`` terms). An output passes when
    ``ratio < threshold(k)``.
    """
    return 16.0 if k <= 1 else 16.0 * math.sqrt(k)


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    """The verdict on one returned value of a script."""

    name: str
    ratio: float
    threshold: float
    passed: bool
    reason: str = ""  # why it failed; empty when it passed

    def __str__(self) -> str:
        verdict = "ok" if self.passed else f"FAIL: {self.reason}"
        return f"{self.name}: ratio {self.ratio:.3g} (threshold {self.threshold:.3g}) {verdict}"


@dataclasses.dataclass(frozen=True)
class Expected:
    """What the oracle judges outputs by, for one set of inputs (value id keyed)."""

    reference: Mapping[int, np.ndarray]
    gauge: Mapping[int, np.ndarray]
    sum_lengths: Mapping[int, int]


def expect(dag: Dag, library: Any, inputs: Mapping[str, Any]) -> Expected:
    """The reference, gauge and sum lengths of ``inputs``: computed once where
    many programs are judged on the same inputs (``fusec tune``)."""
    values, gauges = _interpret(dag, library, inputs, gauged=True)  # one pass for both
    return Expected(values, gauges, sum_lengths(dag, library, _bind_inputs(dag, inputs)[1]))


def check_outputs(dag: Dag, library: Any, inputs: Mapping[str, Any],
                  outputs: Mapping[str, Any], dtype: Any, *,
                  expected: Expected | None = None) -> list[OutputCheck]:
    """Judge every returned value of ``dag`` against the oracle, by script name.

    An output passes when its ratio is finite and below ``threshold(k)`` and
    its float64 reference is not all zeros (an all-zero reference would pass
    anything that is zero; that is a broken test, reported as a failure).
    A missing or wrongly shaped output fails with a reason; nothing raises
    for a bad output. ``expected`` is :func:`expect` of the same ``inputs``,
    when the caller has it already.
    """
    expected = expected or expect(dag, library, inputs)
    reference, magnitudes, k = expected.reference, expected.gauge, expected.sum_lengths
    checks: list[OutputCheck] = []
    for vid in dict.fromkeys(dag.outputs):
        name = dag.value(vid).name
        limit = threshold(k[vid])
        if name not in outputs:
            checks.append(OutputCheck(name, math.inf, limit, False, "no output of this name"))
            continue
        computed = np.asarray(outputs[name])
        triangle = stored_triangle(dag, library, vid)
        try:
            ratio = test_ratio(computed, reference[vid], magnitudes[vid], dtype, triangle=triangle)
        except ValueError:
            checks.append(OutputCheck(name, math.inf, limit, False,
                                      f"shape {computed.shape}, expected "
                                      f"{reference[vid].shape}"))
            continue
        if not (_triangle_nonzero(reference[vid], triangle) if triangle else np.count_nonzero(reference[vid])):
            reason = "the reference is all zeros: a broken test, not a pass"
        elif ratio < limit:
            reason = ""
        elif (_triangle_nan(computed, triangle) if triangle
              else np.isnan(computed.astype(np.float64, copy=False)).any()):
            reason = "the output contains NaN" + (f" on or {'above' if triangle == 'triu' else 'below'} the diagonal"
                                                  if triangle else "")
        else:
            reason = f"ratio {ratio:.4g} >= threshold {limit:.4g} (k = {k[vid]})"
        checks.append(OutputCheck(name, ratio, limit, not reason, reason))
    return checks


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def random_inputs(dag: Dag, sizes: Mapping[str, int], dtype: Any, rng: Any,
                  mode: str = "uniform") -> dict[str, np.ndarray | float]:
    """Random inputs of every script input, keyed by name (the ranges the test suites use).

    ``"uniform"``: arrays uniform in [-0.5, 0.5], scalars uniform in [-1, 1].
    ``"integer"``: arrays of integers in [-8, 8], never all zeros; scalars
    integers in [-3, 3] other than 0 (sums of such values are exact, so fused
    and unfused variants must agree bit for bit). Arrays are C-contiguous of
    ``dtype``; scalars are Python floats rounded to ``dtype`` so that the
    compiled program and the oracle see the same number. ``rng`` is a
    :class:`numpy.random.Generator` or a seed.
    """
    if mode not in ("uniform", "integer"):
        raise ValueError(f"mode must be 'uniform' or 'integer', not {mode!r}")
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"dtype must be a floating type, not {dtype}")
    rng = np.random.default_rng(rng)
    out: dict[str, np.ndarray | float] = {}
    for vid in dag.inputs:
        value = dag.value(vid)
        if value.kind is Kind.SCALAR:
            if mode == "uniform":
                number = rng.uniform(-1.0, 1.0)
            else:
                number = rng.choice([-3, -2, -1, 1, 2, 3])
            out[value.name] = float(dtype.type(number))
            continue
        missing = [d for d in value.dims if d not in sizes]
        if missing:
            raise ArgumentError("sizes", f"no size given for {missing[0]!r} "
                                f"(input {value.name!r})")
        shape = tuple(int(sizes[d]) for d in value.dims)
        if mode == "uniform":
            array = rng.uniform(-0.5, 0.5, size=shape)
        else:
            array = rng.integers(-8, 9, size=shape).astype(np.float64)
            if array.size and not array.any():
                nonzero = [n for n in range(-8, 9) if n]
                array.flat[rng.integers(array.size)] = rng.choice(nonzero)
        out[value.name] = np.ascontiguousarray(array, dtype=dtype)
    return out
