"""The numerical oracle (fusec/oracle.py) on hand-built DAGs and a fake library.

Pass rule under test, fixed for the whole suite (TESTING.md): an output passes
when ratio < 16 if it sums at most one term, and ratio < 16 * sqrt(k) when it
sums k terms along its longest dependency path; NaN never passes; an all-zero
reference is a broken test.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fusec import oracle
from fusec.errors import ArgumentError, Coord, LibraryValidationError
from fusec.ir.dag import Call, Constant, Dag, Value
from fusec.library.model import Function, Hof, Kind, Param
from fusec.library.reference import check_reference

M, V, S = Kind.MATRIX, Kind.VECTOR, Kind.SCALAR
HERE = Coord("fake.cu", 1, 1)


# ---------------------------------------------------------------------------
# A fake library
# ---------------------------------------------------------------------------


def param(text: str) -> Param:
    """``"A:m,n"`` -> matrix A[m, n]; ``"x:n"`` -> vector; ``"alpha"`` -> scalar."""
    name, _, dims = text.partition(":")
    dims = tuple(d for d in dims.split(",") if d)
    kind = {0: S, 1: V, 2: M}[len(dims)]
    return Param(name, kind, dims, HERE)


def function(name, params, result, reference, nested=False, reduce=False, axis=None,
             line=1):
    return Function(
        name=name, params=tuple(param(p) for p in params.split()), result=param(result),
        hof=Hof(nested=nested, reduce=reduce, axis=axis), threads=("32",),
        reference=reference, implementations=(), finish=None, summary="", file="fake.cu",
        source="", coord=Coord("fake.cu", line, 1))


FUNCTIONS = [
    function("gemv", "alpha A:m,n x:n beta y:m", "out:m", "alpha * (A @ x) + beta * y",
             nested=True, reduce=True, axis="n"),
    function("mv", "A:m,n x:n", "y:m", "A @ x", nested=True, reduce=True, axis="n"),
    function("mvt", "A:m,n x:m", "y:n", "A.T @ x", nested=True, reduce=True, axis="m"),
    function("axpby", "alpha x:n beta y:n", "z:n", "alpha * x + beta * y"),
    function("waxpy", "w:n alpha v:n", "z:n", "w - alpha * v"),
    function("dot", "x:n y:n", "r", "dot(x, y)", reduce=True),
    function("ger", "A:m,n u:m v:n", "B:m,n", "A + outer(u, v)", nested=True),
    function("madd", "A:m,n B:m,n", "C:m,n", "A + B", nested=True),
    function("asum", "x:n", "r", "sum(x)", reduce=True),
    function("neg", "x:n", "y:n", "-x"),
    function("vdiv", "x:n y:n", "z:n", "x / y"),
    function("nrm2", "x:n", "r", "sqrt(dot(x, x))", reduce=True),
    function("abssum", "x:n", "r", "sum(abs(x))", reduce=True),
    function("expm", "x:n", "z:n", "exp(x) - 1"),
    function("clip", "lo x:n hi", "z:n", "min(max(x, lo), hi)"),
]


class FakeLibrary:
    def __init__(self, functions):
        self.functions = {f.name: f for f in functions}


LIB = FakeLibrary(FUNCTIONS)


# ---------------------------------------------------------------------------
# Hand-built DAGs
# ---------------------------------------------------------------------------


def build(inputs, calls, outputs, name="script"):
    """A Dag from ``inputs = [(name, dims)]``, ``calls = [(result, dims, fn, args)]``.

    Arguments are names (the latest version) or numbers (constants); assigning
    a name again makes a new version, as the script checker does.
    """
    values, current, dag_calls = [], {}, []

    def new_value(vname, dims, producer=None):
        kind = {0: S, 1: V, 2: M}[len(dims)]
        version = 1 + sum(v.name == vname for v in values)
        value = Value(len(values), vname, version, kind, tuple(dims),
                      Coord("s.fu", len(values) + 1, 1), producer)
        values.append(value)
        current[vname] = value.id
        return value.id

    input_ids = tuple(new_value(n, d) for n, d in inputs)
    for result, dims, fn, args in calls:
        call_args = tuple(Constant(float(a), str(a), HERE) if isinstance(a, (int, float))
                          else current[a] for a in args)
        rid = new_value(result, dims, producer=len(dag_calls))
        dag_calls.append(Call(len(dag_calls), fn, call_args, rid, Coord("s.fu", rid + 1, 1)))
    sizes = tuple(dict.fromkeys(d for _, dims in inputs for d in dims))
    return Dag(name, f"{name}.fu", "", tuple(values), tuple(dag_calls), input_ids,
               tuple(current[o] for o in outputs), sizes)


def by_name(dag, results):
    """Value id -> array map re-keyed by the label (``y``, ``y#2``)."""
    return {dag.value(vid).label: arr for vid, arr in results.items()}


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def rand(rng, *shape):
    return rng.uniform(-0.5, 0.5, size=shape)


GEMV = build([("alpha", ()), ("A", ("m", "n")), ("x", ("n",)), ("beta", ()), ("y", ("m",))],
             [("y", ("m",), "gemv", ("alpha", "A", "x", "beta", "y"))], ["y"])
ATAX = build([("A", ("m", "n")), ("x", ("n",))],
             [("t", ("m",), "mv", ("A", "x")), ("y", ("n",), "mvt", ("A", "t"))], ["y"])


# ---------------------------------------------------------------------------
# evaluate
# ---------------------------------------------------------------------------


def test_evaluate_gemv(rng):
    A, x, y = rand(rng, 5, 3), rand(rng, 3), rand(rng, 5)
    out = by_name(GEMV, oracle.evaluate(GEMV, LIB, {"alpha": 0.7, "A": A, "x": x,
                                                    "beta": -1.0, "y": y}))
    np.testing.assert_allclose(out["y#2"], 0.7 * A @ x - y, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(out["y"], y)  # the input value is kept
    assert out["alpha"].shape == () and out["alpha"].dtype == np.float64


def test_evaluate_gemv_transposed(rng):
    A, x = rand(rng, 4, 6), rand(rng, 4)
    dag = build([("A", ("m", "n")), ("x", ("m",))], [("y", ("n",), "mvt", ("A", "x"))], ["y"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"A": A, "x": x}))
    np.testing.assert_allclose(out["y"], A.T @ x, rtol=1e-15)
    assert out["y"].shape == (6,)


def test_evaluate_axpby_with_constants(rng):
    x, y = rand(rng, 7), rand(rng, 7)
    dag = build([("x", ("n",)), ("y", ("n",))],
                [("z", ("n",), "axpby", (2.5, "x", -0.5, "y"))], ["z"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"x": x, "y": y}))
    np.testing.assert_allclose(out["z"], 2.5 * x - 0.5 * y, rtol=1e-15)


def test_evaluate_dot_is_zero_dimensional(rng):
    x, y = rand(rng, 9), rand(rng, 9)
    dag = build([("x", ("n",)), ("y", ("n",))], [("r", (), "dot", ("x", "y"))], ["r"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"x": x, "y": y}))
    assert out["r"].shape == () and out["r"].dtype == np.float64
    assert out["r"] == pytest.approx(float(np.dot(x, y)), rel=1e-15)


def test_evaluate_ger(rng):
    A, u, v = rand(rng, 3, 4), rand(rng, 3), rand(rng, 4)
    dag = build([("A", ("m", "n")), ("u", ("m",)), ("v", ("n",))],
                [("A", ("m", "n"), "ger", ("A", "u", "v"))], ["A"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"A": A, "u": u, "v": v}))
    np.testing.assert_allclose(out["A#2"], A + np.outer(u, v), rtol=1e-15)


def test_evaluate_atax_chain(rng):
    A, x = rand(rng, 5, 3), rand(rng, 3)
    out = by_name(ATAX, oracle.evaluate(ATAX, LIB, {"A": A, "x": x}))
    np.testing.assert_allclose(out["t"], A @ x, rtol=1e-14)
    np.testing.assert_allclose(out["y"], A.T @ (A @ x), rtol=1e-14)


def test_evaluate_reassignment_reads_the_latest_version(rng):
    x, y = rand(rng, 6), rand(rng, 6)
    dag = build([("x", ("n",)), ("y", ("n",))],
                [("y", ("n",), "axpby", (1.0, "x", 2.0, "y")),   # y#2 = x + 2y
                 ("y", ("n",), "axpby", (3.0, "y", -1.0, "x")),  # y#3 = 3 y#2 - x
                 ("s", (), "dot", ("y", "y"))], ["y", "s"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"x": x, "y": y}))
    y2 = x + 2 * y
    y3 = 3 * y2 - x
    np.testing.assert_allclose(out["y#2"], y2, rtol=1e-15)
    np.testing.assert_allclose(out["y#3"], y3, rtol=1e-15)
    assert out["s"] == pytest.approx(y3 @ y3, rel=1e-14)
    assert [dag.value(v).label for v in dag.outputs] == ["y#3", "s"]


def test_evaluate_other_references(rng):
    A, B, x = rand(rng, 3, 2), rand(rng, 3, 2), rand(rng, 4)
    dag = build([("A", ("m", "n")), ("B", ("m", "n")), ("x", ("k",))],
                [("C", ("m", "n"), "madd", ("A", "B")), ("s", (), "asum", ("x",)),
                 ("z", ("k",), "neg", ("x",))], ["C", "s", "z"])
    out = by_name(dag, oracle.evaluate(dag, LIB, {"A": A, "B": B, "x": x}))
    np.testing.assert_array_equal(out["C"], A + B)
    assert out["s"] == pytest.approx(x.sum(), rel=1e-15)
    np.testing.assert_array_equal(out["z"], -x)


def test_evaluate_casts_to_float64_and_never_touches_inputs(rng):
    A = rand(rng, 3, 3).astype(np.float32)
    x = rand(rng, 3).astype(np.float32)
    A0, x0 = A.copy(), x.copy()
    dag = build([("A", ("m", "n")), ("x", ("n",))],
                [("x", ("n",), "neg", ("x",))], ["x"])
    values = oracle.evaluate(dag, LIB, {"A": A, "x": x})
    assert all(v.dtype == np.float64 for v in values.values())
    values[dag.outputs[0]][:] = 99.0
    values[dag.inputs[1]][:] = 99.0
    np.testing.assert_array_equal(A, A0)
    np.testing.assert_array_equal(x, x0)


def test_evaluate_rejects_bad_inputs(rng):
    A, x = rand(rng, 5, 3), rand(rng, 3)
    with pytest.raises(ArgumentError) as e:
        oracle.evaluate(ATAX, LIB, {"A": A})
    assert e.value.argument == "x"
    with pytest.raises(ArgumentError) as e:
        oracle.evaluate(ATAX, LIB, {"A": A, "x": rand(rng, 4)})  # n = 3 from A
    assert e.value.argument == "x"
    with pytest.raises(ArgumentError) as e:
        oracle.evaluate(ATAX, LIB, {"A": x, "x": x})  # a vector for a matrix
    assert e.value.argument == "A"
    with pytest.raises(ArgumentError) as e:
        oracle.evaluate(ATAX, LIB, {"A": A, "x": x, "z": x})
    assert e.value.argument == "z"


# ---------------------------------------------------------------------------
# gauge
# ---------------------------------------------------------------------------


def test_gauge_of_subtraction_adds_magnitudes(rng):
    w, v = rand(rng, 8), rand(rng, 8)
    dag = build([("w", ("n",)), ("alpha", ()), ("v", ("n",))],
                [("z", ("n",), "waxpy", ("w", "alpha", "v"))], ["z"])
    g = by_name(dag, oracle.gauge(dag, LIB, {"w": w, "alpha": -0.7, "v": v}))
    np.testing.assert_allclose(g["z"], np.abs(w) + 0.7 * np.abs(v), rtol=1e-15)
    assert (g["w"] >= 0).all() and g["alpha"] == 0.7


def test_gauge_of_gemv_is_smvch(rng):
    A, x, y = rand(rng, 6, 4), rand(rng, 4), rand(rng, 6)
    alpha, beta = -0.7, -1.3
    g = by_name(GEMV, oracle.gauge(GEMV, LIB, {"alpha": alpha, "A": A, "x": x,
                                               "beta": beta, "y": y}))
    # SMVCH: G(i) = |alpha| * sum_j |A(i,j) * x(j)| + |beta * y(i)|
    smvch = abs(alpha) * np.abs(A * x[None, :]).sum(axis=1) + np.abs(beta * y)
    np.testing.assert_allclose(g["y#2"], smvch, rtol=1e-14)


def test_gauge_takes_constants_and_negation_by_magnitude(rng):
    x, y = rand(rng, 5), rand(rng, 5)
    dag = build([("x", ("n",)), ("y", ("n",))],
                [("z", ("n",), "axpby", (-2.0, "x", -3.0, "y")),
                 ("z", ("n",), "neg", ("z",))], ["z"])
    g = by_name(dag, oracle.gauge(dag, LIB, {"x": x, "y": y}))
    np.testing.assert_allclose(g["z#2"], 2 * np.abs(x) + 3 * np.abs(y), rtol=1e-15)


def test_gauge_of_a_chain_uses_gauges_of_intermediates(rng):
    A, x = rand(rng, 5, 3), rand(rng, 3)
    g = by_name(ATAX, oracle.gauge(ATAX, LIB, {"A": A, "x": x}))
    np.testing.assert_allclose(g["y"], np.abs(A).T @ (np.abs(A) @ np.abs(x)), rtol=1e-14)


def _one_call(fn, args, inputs, result_dims=("n",)):
    dag = build(inputs, [("z", result_dims, fn, args)], ["z"])
    return dag, dag.outputs[0]


def test_element_wise_functions_evaluate_as_numpy(rng):
    x, y = rand(rng, 9), rand(rng, 9)
    cases = [("vdiv", ("x", "y"), x / y), ("expm", ("x",), np.exp(x) - 1),
             ("clip", (-0.2, "x", 0.3), np.minimum(np.maximum(x, -0.2), 0.3))]
    for fn, args, want in cases:
        inputs = [(a, ("n",)) for a in args if isinstance(a, str)]
        dag, out = _one_call(fn, args, inputs)
        got = oracle.evaluate(dag, LIB, {"x": x, "y": y} if "y" in args else {"x": x})[out]
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0, err_msg=fn)
    dag, out = _one_call("nrm2", ("x",), [("x", ("n",))], ())
    assert oracle.evaluate(dag, LIB, {"x": x})[out] == pytest.approx(np.linalg.norm(x), rel=1e-15)
    dag, out = _one_call("abssum", ("x",), [("x", ("n",))], ())
    assert oracle.evaluate(dag, LIB, {"x": x})[out] == pytest.approx(np.abs(x).sum(), rel=1e-15)


def test_gauge_of_min_max_and_abs_are_magnitudes(rng):
    x = rand(rng, 9)
    dag, out = _one_call("clip", (-0.2, "x", 0.3), [("x", ("n",))])
    np.testing.assert_array_equal(oracle.gauge(dag, LIB, {"x": x})[out], np.maximum(np.abs(x), 0.3))
    dag, out = _one_call("abssum", ("x",), [("x", ("n",))], ())
    assert oracle.gauge(dag, LIB, {"x": x})[out] == pytest.approx(np.abs(x).sum(), rel=1e-15)


def test_gauge_of_division_sqrt_and_exp_is_first_order(rng):
    """The gauge bounds what float32 rounding does to the value: a float32 evaluation
    of each reference stays within a few eps times it, at inputs where magnitude
    arithmetic would not (exp of a negative, a quotient of computed values)."""
    x, y = rand(rng, 4000) * 20, rand(rng, 4000)
    cases = [("vdiv", ("x", "y"), lambda x, y: x / y, 2 * np.abs(x / y)),
             ("expm", ("x",), lambda x, y: np.exp(x) - 1, np.exp(x) * (np.abs(x) + 1) + 1)]
    for fn, args, f32, want in cases:
        dag, out = _one_call(fn, args, [(a, ("n",)) for a in args])
        inputs = {"x": x, "y": y} if "y" in args else {"x": x}
        g = oracle.gauge(dag, LIB, inputs)[out]
        np.testing.assert_allclose(g, want, rtol=1e-14, err_msg=fn)
        computed = f32(*(v.astype(np.float32) for v in (x, y)))
        ratio = oracle.test_ratio(computed, oracle.evaluate(dag, LIB, inputs)[out], g, np.float32)
        assert 0 < ratio < oracle.threshold(1), fn
    dag, out = _one_call("nrm2", ("x",), [("x", ("n",))], ())
    g = oracle.gauge(dag, LIB, {"x": x})[out]
    assert g == pytest.approx(1.5 * np.linalg.norm(x), rel=1e-14)  # g_a / (2 sqrt a) + sqrt a, g_a = a
    zero = oracle.gauge(dag, LIB, {"x": np.zeros(5)})[out]
    assert zero == 0.0  # sqrt(0) of an exact 0: no slope term, no NaN


def test_a_quotient_by_zero_never_passes(rng):
    x, y = rand(rng, 5), rand(rng, 5)
    y[2] = 0.0
    dag, out = _one_call("vdiv", ("x", "y"), [("x", ("n",)), ("y", ("n",))])
    [check] = oracle.check_outputs(dag, LIB, {"x": x, "y": y}, {"z": x / np.where(y, y, 1)}, np.float64)
    assert not check.passed and check.ratio == math.inf


# ---------------------------------------------------------------------------
# sum_lengths and threshold
# ---------------------------------------------------------------------------


def test_sum_lengths_atax_rectangular():
    k = by_name(ATAX, oracle.sum_lengths(ATAX, LIB, {"m": 7, "n": 3}))
    assert k == {"A": 0, "x": 0, "t": 3, "y": 3 + 7}


def test_sum_lengths_maps_function_dims_to_script_sizes():
    # the script calls the matrix p x q; the function calls it m x n
    dag = build([("B", ("p", "q")), ("v", ("q",)), ("w", ("q",))],
                [("s", (), "dot", ("v", "w")),
                 ("u", ("p",), "mv", ("B", "v")),
                 ("c", (), "dot", ("u", "u"))], ["c", "s"])
    k = by_name(dag, oracle.sum_lengths(dag, LIB, {"p": 11, "q": 5}))
    assert k["s"] == 5 and k["u"] == 5 and k["c"] == 5 + 11


def test_sum_lengths_counts_scalar_arguments_and_maps():
    dag = build([("x", ("n",)), ("y", ("n",))],
                [("s", (), "dot", ("x", "y")),
                 ("z", ("n",), "axpby", ("s", "x", 1.0, "y")),  # map: k of s carries
                 ("w", ("n",), "neg", ("y",))], ["z", "w"])
    k = by_name(dag, oracle.sum_lengths(dag, LIB, {"n": 9}))
    assert k["z"] == 9 and k["w"] == 0


def test_threshold_rule():
    assert oracle.threshold(0) == 16 and oracle.threshold(1) == 16
    assert oracle.threshold(4) == 32
    assert oracle.threshold(100) == pytest.approx(160)


# ---------------------------------------------------------------------------
# test_ratio
# ---------------------------------------------------------------------------


def test_ratio_of_a_float32_gemv_is_small(rng):
    A, x = rand(rng, 200, 300).astype(np.float32), rand(rng, 300).astype(np.float32)
    computed = A @ x  # float32 arithmetic
    reference = A.astype(np.float64) @ x.astype(np.float64)
    g = np.abs(A.astype(np.float64)) @ np.abs(x.astype(np.float64))
    ratio = oracle.test_ratio(computed, reference, g, np.float32)
    assert 0 <= ratio < oracle.threshold(300)
    assert oracle.test_ratio(reference, reference, g, np.float32) == 0.0


def test_ratio_measures_in_eps_of_the_dtype():
    ref = np.array([1.0, -2.0, 0.5])
    g = np.array([1.0, 2.0, 4.0])
    eps = np.finfo(np.float32).eps
    computed = ref + np.array([0.0, 3 * eps * 2.0, -eps * 4.0])
    assert oracle.test_ratio(computed, ref, g, np.float32) == pytest.approx(3.0)
    assert oracle.test_ratio(computed, ref, g, np.float64) == pytest.approx(
        3 * eps / np.finfo(np.float64).eps)


def test_ratio_nan_and_zero_gauge():
    ref, g = np.ones(4), np.ones(4)
    assert oracle.test_ratio([1, 1, np.nan, 1], ref, g, np.float32) == math.inf
    assert oracle.test_ratio([1, 1, np.inf, 1], ref, g, np.float32) == math.inf
    zero_g = np.array([0.0, 1.0])
    assert oracle.test_ratio([0.0, 1.0], [0.0, 1.0], zero_g, np.float64) == 0.0
    assert oracle.test_ratio([1e-30, 1.0], [0.0, 1.0], zero_g, np.float64) == math.inf
    assert oracle.test_ratio(np.float32(2.0), np.float64(2.0), 1.0, np.float32) == 0.0


def test_ratio_shapes_must_match():
    with pytest.raises(ValueError):
        oracle.test_ratio(np.ones(3), np.ones(4), np.ones(4), np.float32)
    with pytest.raises(ValueError):
        oracle.test_ratio(np.ones((2, 3)), np.ones((3, 2)), np.ones((3, 2)), np.float32)


# ---------------------------------------------------------------------------
# check_outputs
# ---------------------------------------------------------------------------


def gemv_inputs(rng, dtype):
    return {"alpha": 0.7, "A": rand(rng, 40, 30).astype(dtype),
            "x": rand(rng, 30).astype(dtype), "beta": -1.0, "y": rand(rng, 40).astype(dtype)}


def test_check_outputs_passes_a_float32_computation(rng):
    inputs = gemv_inputs(rng, np.float32)
    A, x, y = inputs["A"], inputs["x"], inputs["y"]
    computed = np.float32(0.7) * (A @ x) - y
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {"y": computed}, np.float32)
    assert check.name == "y" and check.passed and check.reason == ""
    assert check.threshold == oracle.threshold(30)
    assert check.ratio < check.threshold


def test_check_outputs_fails_a_wrong_result(rng):
    inputs = gemv_inputs(rng, np.float32)
    reference = oracle.evaluate(GEMV, LIB, inputs)[GEMV.outputs[0]]
    wrong = reference.copy()
    wrong[3] += 1e-3
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {"y": wrong}, np.float32)
    assert not check.passed and "threshold" in check.reason


def test_check_outputs_nan_missing_and_shape(rng):
    inputs = gemv_inputs(rng, np.float64)
    reference = oracle.evaluate(GEMV, LIB, inputs)[GEMV.outputs[0]]
    poisoned = reference.copy()
    poisoned[-1] = np.nan
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {"y": poisoned}, np.float64)
    assert not check.passed and check.ratio == math.inf and "NaN" in check.reason
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {}, np.float64)
    assert not check.passed and "no output" in check.reason
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {"y": reference[:-1]}, np.float64)
    assert not check.passed and "shape" in check.reason


def test_check_outputs_flags_an_all_zero_reference(rng):
    inputs = gemv_inputs(rng, np.float64)
    inputs.update(x=np.zeros(30), beta=0.0)
    zeros = np.zeros(40)
    [check] = oracle.check_outputs(GEMV, LIB, inputs, {"y": zeros}, np.float64)
    assert check.ratio == 0.0
    assert not check.passed and "all zeros" in check.reason


def test_check_outputs_several_outputs(rng):
    x, y = rand(rng, 10), rand(rng, 10)
    dag = build([("x", ("n",)), ("y", ("n",))],
                [("s", (), "dot", ("x", "y")), ("z", ("n",), "axpby", ("s", "x", 1.0, "y"))],
                ["z", "s"])
    ref = by_name(dag, oracle.evaluate(dag, LIB, {"x": x, "y": y}))
    checks = oracle.check_outputs(dag, LIB, {"x": x, "y": y},
                                  {"z": ref["z"], "s": ref["s"] + 1.0}, np.float64)
    assert [c.name for c in checks] == ["z", "s"]
    assert [c.passed for c in checks] == [True, False]
    assert checks[1].threshold == oracle.threshold(10)


# ---------------------------------------------------------------------------
# the reference language (fusec.library.reference): check_reference
# ---------------------------------------------------------------------------


def with_reference(reference, base="gemv", **changes):
    f = next(f for f in FUNCTIONS if f.name == base)
    return dataclasses.replace(f, reference=reference, coord=Coord("lib.cu", 17, 3), **changes)


def test_library_references_are_accepted():
    for f in FUNCTIONS:
        check_reference(f)
    check_reference(with_reference("-(alpha * ((A @ x))) + 2 * beta * y - 0.5 * y"))
    check_reference(with_reference("(A.T).T @ x + y * 0"))


@pytest.mark.parametrize("reference, construct", [
    ("__import__('os')", "'__import__'"),
    ("__import__('os').system('true')", "call of `__import__('os').system`"),
    ("__import__('os').sep", "attribute '.sep'"),
    ("A.real @ x", "attribute '.real'"),
    ("A @ z", "unknown name 'z'"),
    ("out", "unknown name 'out'"),
    ("(lambda: A)() @ x", "call of `lambda: A`"),
    ("lambda: 0", "lambda"),
    ("A[0] * y", "subscript"),
    ("y // alpha", "operator '//'"),
    ("y % alpha", "operator '%'"),
    ("log(y) + A @ x", "call of 'log'"),
    ("abs(y, x) + A @ x", "abs takes 1"),
    ("max(A @ x) ", "max takes 2"),
    ("y ** 2", "operator '**'"),
    ("+y", "unary operator '+'"),
    ("dot(x=A, y=x) * y", "keyword argument"),
    ("outer(y) ", "outer takes 2"),
    ("sum(*y) * y", "starred"),
    ("'y'", "constant 'y'"),
    ("True * y", "constant True"),
    ("[y][0]", "subscript"),
    ("y if alpha else y", "conditional"),
    ("alpha < beta", "comparison"),
    ("np.dot(A, x)", "call of `np.dot`"),
    ("eval('y')", "call of 'eval'"),
    ("alpha * (A @ x", "does not parse"),
    ("", "no reference"),
    ("alpha * (A @ x) + 1e999 * y", "a constant is out of range"),
    ("alpha * (A @ x) + " + "9" * 400 + " * y", "a constant is out of range"),
    ("triu(A, 99999999999999999999) @ x", "the diagonal of triu must be an integer literal"),
    ("alpha * (A @ \uff58)", "not ASCII"),  # a fullwidth x, which Python reads as x
    ("-" * 3000 + "(A @ x)", "nested too deep"),
    (" + ".join(["y"] * 3000), "nested too deep"),
])
def test_check_reference_rejects(reference, construct):
    with pytest.raises(LibraryValidationError) as e:
        check_reference(with_reference(reference))
    assert construct in e.value.message
    assert e.value.coord == Coord("lib.cu", 17, 3)
    assert str(e.value).startswith("lib.cu:17:3: ")


@pytest.mark.parametrize("reference, base, message", [
    ("A @ y", "gemv", "'@' contracts n with m"),
    ("x @ A", "gemv", "'@' contracts n with m"),
    ("alpha * (A @ x) + x", "gemv", "shapes [m] and [n]"),
    ("A.T @ y", "gemv", "gives a vector[n]"),
    ("x.T @ A.T", "mv", "'.T' of a vector"),
    ("dot(A, x) * y", "gemv", "dot of a matrix"),
    ("dot(x, x) + sum(y)", "dot", None),
    ("A + outer(v, u)", "ger", "shapes [m, n] and [n, m]"),
    ("y", "gemv", "sums nothing"),
    ("w - dot(w, v) * v", "waxpy", "sums (it uses"),
    ("A @ x", "mvt", None),
    ("abs(A) @ abs(x) + sqrt(exp(y))", "gemv", None),
    ("max(alpha * (A @ x), beta) / y", "gemv", None),
    ("sqrt(A) @ y", "gemv", "'@' contracts n with m"),
    ("min(A @ x, x)", "gemv", "'min' of shapes [m] and [n]"),
    ("y / x + A @ x", "gemv", "'/' of shapes [m] and [n]"),
    ("max(exp(1), 2)", "dot", "sums nothing"),
    ("sqrt(dot(x, y)) * x", "dot", "gives a vector[n]"),
    ("abs(x - dot(x, x))", "neg", "sums (it uses"),
])
def test_check_reference_checks_shapes_and_hof(reference, base, message):
    f = with_reference(reference, base)
    if base == "mvt" and reference == "A @ x":
        # mvt's x has length m; rebinding the parameter makes A @ x well formed but
        # it sums over n while the hof says m
        f = dataclasses.replace(f, params=(param("A:m,n"), param("x:n")), result=param("y:m"))
        message = "reduces over m but the reference sums over n"
    if message is None:
        check_reference(f)
        return
    with pytest.raises(LibraryValidationError) as e:
        check_reference(f)
    assert message in e.value.message
    check_reference(f, shapes=False)  # constructs and names are fine


def test_evaluate_rejects_a_bad_reference_with_the_function_coord(rng):
    lib = FakeLibrary([with_reference("__import__('os').getcwd()")])
    with pytest.raises(LibraryValidationError) as e:
        oracle.evaluate(GEMV, lib, gemv_inputs(rng, np.float64))
    assert e.value.coord == Coord("lib.cu", 17, 3)


# ---------------------------------------------------------------------------
# random_inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_inputs_uniform(dtype, rng):
    inputs = oracle.random_inputs(GEMV, {"m": 33, "n": 17}, dtype, rng)
    assert list(inputs) == ["alpha", "A", "x", "beta", "y"]
    assert inputs["A"].shape == (33, 17) and inputs["x"].shape == (17,)
    assert inputs["y"].shape == (33,)
    for name in "Axy":
        a = inputs[name]
        assert a.dtype == dtype and a.flags.c_contiguous
        assert a.min() >= -0.5 and a.max() <= 0.5 and np.any(a != 0)
        assert np.unique(a).size > a.size // 2  # not integer-valued
    for name in ("alpha", "beta"):
        s = inputs[name]
        assert type(s) is float and -1 <= s <= 1
        assert s == float(np.dtype(dtype).type(s))  # exactly representable
    oracle.evaluate(GEMV, LIB, inputs)  # the shapes bind


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_inputs_integer(dtype):
    seen_scalars = set()
    for seed in range(300):
        inputs = oracle.random_inputs(GEMV, {"m": 1, "n": 1}, dtype, seed, mode="integer")
        for name in "Axy":
            a = inputs[name]
            assert a.dtype == dtype and a.flags.c_contiguous
            assert np.any(a != 0), (seed, name)  # never all zeros, even of size 1
            assert np.all(a == np.round(a)) and a.min() >= -8 and a.max() <= 8
        for name in ("alpha", "beta"):
            s = inputs[name]
            assert type(s) is float and s == int(s) and 1 <= abs(s) <= 3
            seen_scalars.add(s)
    assert seen_scalars == {-3.0, -2.0, -1.0, 1.0, 2.0, 3.0}


def test_random_inputs_integer_large_covers_the_range():
    inputs = oracle.random_inputs(ATAX, {"m": 50, "n": 40}, np.float32,
                                  np.random.default_rng(0), mode="integer")
    assert set(np.unique(inputs["A"])) == set(range(-8, 9))


def test_random_inputs_is_reproducible_and_validates():
    a = oracle.random_inputs(ATAX, {"m": 4, "n": 3}, np.float64, 7)
    b = oracle.random_inputs(ATAX, {"m": 4, "n": 3}, np.float64, 7)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ArgumentError):
        oracle.random_inputs(ATAX, {"m": 4}, np.float64, 7)
    with pytest.raises(ValueError):
        oracle.random_inputs(ATAX, {"m": 4, "n": 3}, np.float64, 7, mode="gaussian")
    with pytest.raises(ValueError):
        oracle.random_inputs(ATAX, {"m": 4, "n": 3}, np.int32, 7)


def test_random_integer_inputs_give_exact_results():
    inputs = oracle.random_inputs(ATAX, {"m": 33, "n": 31}, np.float32, 3, mode="integer")
    A, x = inputs["A"], inputs["x"]
    computed = A.T @ (A @ x)  # float32, but every partial sum is an exact integer
    [check] = oracle.check_outputs(ATAX, LIB, inputs, {"y": computed}, np.float32)
    assert check.passed and check.ratio == 0.0


def test_a_reference_nests_as_deep_as_a_script_expression():
    """200 levels, counted as a script's expression counts them (fusec.frontend.check): its
    operands and arguments, not Python's operator and load-context nodes. alpha * (A @ x) is
    three levels (*, @, A); each + before it, or each minus sign around it, one more."""
    from fusec.frontend.check import MAX_EXPRESSION_DEPTH
    from fusec.library.reference import MAX_DEPTH
    assert MAX_DEPTH == MAX_EXPRESSION_DEPTH == 200
    gemv = "alpha * (A @ x)"
    for levels in (197, 198):  # 197 + 3 = 200 levels: as deep as may be; 201: one too many
        chain, minus = " + ".join([gemv] + ["y"] * levels), "-" * levels + f"({gemv})"
        for reference in (chain, minus):
            if levels == 197:
                check_reference(with_reference(reference))
            else:
                with pytest.raises(LibraryValidationError, match="nested too deep"):
                    check_reference(with_reference(reference))
