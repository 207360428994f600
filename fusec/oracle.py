"""The numerical oracle: a float64 interpreter of a script's DAG, and the reference BLAS test
ratio (sblat2's) generalised to a script.

Each call is evaluated by its function's ``reference`` expression
(:mod:`fusec.library.reference`), in float64 and in magnitude arithmetic.

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

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from .errors import ArgumentError, FusecError, LibraryValidationError, UnknownFunctionError
from .ir import expr
from .ir.dag import Constant, Dag
from .library import reference
from .library.model import TRIANGLES, Function, Kind
from .library.reference import cut

__all__ = [
    "Expected", "OutputCheck", "check_outputs", "evaluate", "expect", "gauge", "random_inputs",
    "stored_triangle", "sum_lengths", "test_ratio", "threshold",
]

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
        result, result_gauge = reference.evaluate(function, env, genv)
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


def _triangle_nonzero(a: np.ndarray, triangle: str) -> bool:
    """Whether a matrix has a value other than 0 in the triangle (by bands of rows: no copy
    of a large matrix; band r's diagonal is its column r)."""
    return any(np.count_nonzero(cut(triangle)(a[r:r + 256], r)) for r in range(0, a.shape[0], 256))


def _triangle_nan(a: np.ndarray, triangle: str) -> bool:
    """Whether a matrix holds NaN in the triangle (``triu``: on or above its diagonal)."""
    return any(np.isnan(cut(triangle)(a[r:r + 256].astype(np.float64), r)).any()
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
