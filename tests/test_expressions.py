"""Scalar expressions past the front end (no GPU): the trees' text, the DAG's view
of them in the space, the kernels that evaluate them, the kernel that stores the
returned ones, the oracle's values and gauges, and nvcc on the generated code.
Parsing and checking are in test_script_parser and test_script_check."""

from __future__ import annotations

import math
import random
import re
import warnings

import numpy as np
import pytest

from fusec import oracle
from fusec.emit.program import generate
from fusec.emit.scalars import c_expression
from fusec.errors import DivisionByZeroError
from fusec.families.scalar import ScalarKernel
from fusec.families.striped import why_scalar_crosses
from fusec.frontend import check, parse
from fusec.ir import expr
from fusec.ir.plan import ScalarPlan
from fusec.library.model import Kind
from fusec.space.fusions import fusions, why_not_fusible
from fusec.space.search import likeness
from tests.expressions import FAMILIES, PLAN_SIZE, SCRIPTS, SOLVERS, family_plan, script_dag
from tests.helpers import DTYPES, library


def checked(text: str, name: str = "t.script"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check(parse(text, name), library())


def default_plan(dag, dtype: str = "float32"):
    """The analytic model's first choice at PLAN_SIZE (no performance database, no GPU)."""
    from fusec.cost.analytic import DEFAULT
    from fusec.space.combinations import build_space
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_space(dag, library(), dtype, {s: PLAN_SIZE for s in dag.sizes}, DEFAULT).best().plan


def call_named(dag, name: str) -> int:
    return next(c.id for c in dag.calls if dag.value(c.result).label == name)


def value_named(dag, label: str) -> int:
    return next(v.id for v in dag.values if v.label == label)


# -- the trees' text ---------------------------------------------------------------------

ROUND_TRIP = """\
vector x, y;
scalar a, b, c, t;
input x, a, b, c;
t = {};
y = sscal(t, x);
return y;
"""  # a, b, c are values 1, 2, 3


def random_tree(rng: random.Random, depth: int) -> expr.Expr:
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.6:
            return expr.Ref(rng.choice((1, 2, 3)), None)
        number = rng.choice(("1", "2.5", "0.5", "3", "1e-3"))
        return expr.Constant(float(number), number, None)
    kind = rng.random()
    if kind < 0.15:
        return expr.Negate(random_tree(rng, depth - 1), None)
    if kind < 0.3:
        return expr.Apply(rng.choice(expr.FUNCTIONS), random_tree(rng, depth - 1), None)
    return expr.Binary(rng.choice(expr.OPERATORS), random_tree(rng, depth - 1), random_tree(rng, depth - 1), None)


def test_printed_text_parses_back_to_the_same_tree():
    """expr.text puts parentheses exactly where the structure needs them (C shares the
    printer): every tree reads back, through the parser and the checker, as itself."""
    rng = random.Random(46)
    done = 0
    while done < 300:
        tree = random_tree(rng, 4)
        text = expr.text(tree, lambda v: "abc"[v - 1])
        try:
            dag = checked(ROUND_TRIP.format(text))
        except DivisionByZeroError:  # (2.5 - 2.5) as a divisor: the checker refuses it, rightly
            assert any(isinstance(n, expr.Binary) and n.op == "/" and expr.folded(n.right) == 0
                       for n in _nodes(tree))
            continue
        assert dag.expressions[0].tree == tree, text
        done += 1


def _nodes(tree):
    yield tree
    for child in expr.children(tree):
        yield from _nodes(child)


@pytest.mark.parametrize("text, c", [
    ("-(-a)", "-(-v1_a)"),
    ("- - a", "-(-v1_a)"),
    ("a - (b - c)", "v1_a - (v2_b - v3_c)"),
    ("(a - b) - c", "v1_a - v2_b - v3_c"),
    ("a / (b * c)", "v1_a / (v2_b * v3_c)"),
    ("-(a * b)", "-(v1_a * v2_b)"),
    ("-a * b", "-v1_a * v2_b"),
    ("abs(a) / 2", "fabs(v1_a) / real(2.0)"),
    ("sqrt(a + 1e-3)", "sqrt(v1_a + real(0.001))"),
    ("a - -2.5", "v1_a - -real(2.5)"),
])
def test_c_expressions(text, c):
    """C text: the values' C names, literals as real(value), sqrt and fabs; the minus
    of a minus kept apart (C reads -- as a decrement)."""
    dag = checked(ROUND_TRIP.format(text))
    assert c_expression(dag.expressions[0].tree, dag) == c


def test_constants_fold_as_ieee_does():
    def tree(text):
        return checked(ROUND_TRIP.format(f"a + 0 * ({text})")).expressions[0].tree.right.right
    assert expr.folded(tree("2 - 2.5")) == -0.5
    assert expr.folded(tree("abs(-4) / 8")) == 0.5
    assert math.isnan(expr.folded(tree("sqrt(-1)")))
    assert expr.folded(tree("a * 2")) is None


# -- the DAG in the space ----------------------------------------------------------------

def test_a_call_reading_an_expression_of_a_reduction_shares_no_kernel_with_it():
    """CG's x1 = saxpy(alpha, p, x), alpha = rr / pq: fused with pq = sdot(p, q) it would
    read pq's final result before every block has added its share."""
    dag = script_dag("cg")
    pq, x1 = call_named(dag, "pq"), call_named(dag, "x1")
    assert why_not_fusible(dag, library(), (pq, x1)) == (
        f"call {x1} reads pq (in alpha), the final result of a reduction in the same kernel (a global barrier)")
    assert not dag.independent(pq, x1)  # nor side by side (horizontal fusion)
    for fusion in fusions(dag, library()):
        made = {dag.call(c).result for c in fusion.calls if library().functions[dag.call(c).function].hof.reduce}
        assert not any(set(dag.reads(c)) & made for c in fusion.calls), fusion


@pytest.mark.parametrize("script", SOLVERS + tuple(SCRIPTS))
def test_kernels_run_after_what_their_expressions_read(script):
    dag = script_dag(script)
    plan = default_plan(dag)
    kernel_of = {c: i for i, k in enumerate(plan.kernels) for c in k.calls}
    for call in dag.calls:
        for before in dag.predecessors(call.id):
            assert kernel_of[before] <= kernel_of[call.id]
        for arg in (a for a in call.value_args() if dag.expression(a) is not None):
            for leaf in dag.leaves(arg):  # a scalar's final value: made by an earlier kernel
                if dag.producer(leaf) is not None:
                    assert kernel_of[dag.producer(leaf)] < kernel_of[call.id], (dag.value(leaf).label, call.function)


def test_alike_calls_read_alike_expressions():
    """The bounded search builds alike sets of calls once (likeness): expressions of the
    same shape over operands alike are alike; another shape, or a reduction's result
    for an input, is not."""
    def key(second: str):
        dag = checked(f"""\
vector x, y, z;
scalar a, b, rho, s, t;
input x, a, b;
rho = sdot(x, x);
s = a * 2;
t = {second};
y = sscal(s, x);
z = sscal(t, x);
return y, z;
""")
        y, z = call_named(dag, "y"), call_named(dag, "z")
        return likeness(dag, (y,), ((y,),)), likeness(dag, (z,), ((z,),))
    same, other = key("b * 2")
    assert same == other
    for second in ("b + 2", "b * 3", "rho * 2", "2 * b"):
        y, z = key(second)
        assert y != z, second


def test_no_striped_or_held_consumer_reads_a_scalar_its_producer_makes():
    dag = script_dag("cg")
    pq, x1, q = call_named(dag, "pq"), call_named(dag, "x1"), call_named(dag, "q")
    assert why_scalar_crosses(dag, (pq,), (x1,)) == (
        "the consumer reads pq, a scalar the producer makes: scalars pass from one launch to the next")
    assert why_scalar_crosses(dag, (q,), (pq,)) is None  # q is a vector


# -- the kernels --------------------------------------------------------------------------

def _leaf_kernels(generated):
    return [leaf for kernel in generated.kernels for leaf in kernel.leaves()]


@pytest.mark.parametrize("script", SOLVERS + tuple(SCRIPTS))
def test_each_kernel_evaluates_the_expressions_its_calls_read_from_its_arguments(script):
    dag = script_dag(script)
    generated = generate(dag, library(), default_plan(dag), "float32")
    for kernel in _leaf_kernels(generated):
        functions = [library().functions[dag.call(c).function] for c in kernel.plan.calls]
        scalars = [a for c, f in zip(kernel.plan.calls, functions)
                   for p, a in zip(f.params, dag.call(c).args) if p.kind is Kind.SCALAR and isinstance(a, int)]
        assert kernel.expressions == dag.needed_expressions(scalars)
        passed = {a.value: a.role for a in kernel.args if a.role in ("scalar", "scalar_ptr")}
        operands = {leaf for v in scalars for leaf in dag.leaves(v)}
        assert passed == {v: "scalar" if dag.is_input(v) else "scalar_ptr" for v in operands}
        made_here = {dag.call(c).result for c in kernel.plan.calls}
        assert not operands & made_here


def test_cg_kernels_read_rr_and_pq_and_evaluate_alpha():
    dag = script_dag("cg")
    generated = generate(dag, library(), default_plan(dag), "float32")
    (x1_kernel,) = [k for k in _leaf_kernels(generated) if call_named(dag, "x1") in k.plan.calls]
    alpha, rr, pq = (value_named(dag, n) for n in ("alpha", "rr", "pq"))
    assert alpha in x1_kernel.expressions
    assert {("scalar_ptr", rr), ("scalar_ptr", pq)} <= {(a.role, a.value) for a in x1_kernel.args}
    source = generated.sources[[k.index for k in generated.kernels if x1_kernel in k.leaves()][0]]
    assert "const real v7_alpha = v4_rr / v6_pq;  // alpha = rr / pq (line 14)" in source
    assert source.index("const real v4_rr = *g_v4_rr;") < source.index("const real v7_alpha")
    assert not isinstance(generated.kernels[-1], ScalarKernel)  # CG returns no expression


def test_a_returned_expression_is_stored_by_one_thread_after_every_kernel():
    dag = script_dag("scaled")
    generated = generate(dag, library(), default_plan(dag), "float64")
    last = generated.kernels[-1]
    assert isinstance(last, ScalarKernel) and last.index == len(generated.kernels) - 1
    t, u, rho, a = (value_named(dag, n) for n in ("t", "u", "rho", "a"))
    assert last.plan == ScalarPlan((t, u)) and last.expressions == (t, u)
    assert [(arg.role, arg.value) for arg in last.args] == [("out", t), ("out", u), ("scalar", a),
                                                           ("scalar_ptr", rho)]
    assert (last.grid({"n": 10 ** 6}), last.block, last.leaves(), last.reductions) == (1, 1, (), ())
    source = generated.sources[-1]
    assert "__launch_bounds__(1) k2_scalars(" in source
    assert re.search(r"k2_scalars\([^)]*\)\n\{\n  fusec_follow_previous\(\);\n", source)
    assert "const real v4_t = -(v2_a + real(2.5)) * fabs(v3_rho);  // t = -(a + 2.5) * abs(rho) (line 5)" in source
    assert source.rstrip().endswith("*g_v4_t = v4_t;\n  *g_v5_u = v5_u;\n}")
    assert "k2_scalars: the returned scalar expressions, stored by one thread" in generated.source
    # the plan text says what it stores
    from fusec.runtime.plan_text import describe
    assert "  store    t = -(a + 2.5) * abs(rho)" in describe(generated).split("\n")


def test_the_scalar_kernel_prices_at_zero():
    """Not part of the space (every plan of a script has the same one): priced at 0, so a
    program of a tuned plan compares with the space's combinations, which leave it out."""
    from fusec.cost.analytic import DEFAULT
    dag = script_dag("scaled")
    last = generate(dag, library(), default_plan(dag), "float32").kernels[-1]
    assert DEFAULT.kernel_seconds(last, dag, {"n": 4096}) == 0.0


# -- the oracle ---------------------------------------------------------------------------

def _scaled_inputs(n: int = 50, seed: int = 3):
    rng = np.random.default_rng(seed)
    return {"x": rng.uniform(-0.5, 0.5, n), "y": rng.uniform(-0.5, 0.5, n), "a": -0.7}


def test_oracle_evaluates_expressions():
    dag = script_dag("scaled")
    inputs = _scaled_inputs()
    values = oracle.evaluate(dag, library(), inputs)
    x, y, a = inputs["x"], inputs["y"], inputs["a"]
    rho = x @ y
    t = -(a + 2.5) * abs(rho)
    u = math.sqrt(abs(rho)) / (1 + a * a)
    assert values[value_named(dag, "t")] == pytest.approx(t, rel=1e-15)
    assert values[value_named(dag, "u")] == pytest.approx(u, rel=1e-15)
    np.testing.assert_allclose(values[value_named(dag, "z")], t * x + y, rtol=1e-14)


def test_oracle_gauges_quotients_and_roots_by_their_first_order_error():
    dag = script_dag("scaled")
    inputs = _scaled_inputs()
    gauges = oracle.gauge(dag, library(), inputs)
    x, y, a = inputs["x"], inputs["y"], inputs["a"]
    rho, g_rho = x @ y, np.abs(x) @ np.abs(y)
    assert gauges[value_named(dag, "t")] == pytest.approx((abs(a) + 2.5) * g_rho, rel=1e-14)
    g_root = g_rho / (2 * math.sqrt(abs(rho))) + math.sqrt(abs(rho))
    den, g_den = 1 + a * a, 1 + abs(a) * abs(a)
    expected = g_root / abs(den) + math.sqrt(abs(rho)) * g_den / den ** 2
    assert gauges[value_named(dag, "u")] == pytest.approx(expected, rel=1e-14)
    assert oracle.sum_lengths(dag, library(), {"n": 50})[value_named(dag, "u")] == 50


def test_a_divisor_that_cancels_widens_the_gauge():
    """alpha = rr / pq with pq = p . (A p) near 0 for an indefinite A: the quotient's
    gauge grows with G(pq) / pq^2, its value's error bound, not with |alpha| alone."""
    dag = script_dag("cg")
    rng = np.random.default_rng(0)
    n = 64
    inputs = {k: rng.uniform(-0.5, 0.5, n) for k in ("x", "r", "p")}
    inputs["A"] = rng.uniform(-0.5, 0.5, (n, n))
    values, gauges = oracle.evaluate(dag, library(), inputs), oracle.gauge(dag, library(), inputs)
    alpha, pq, rr = (value_named(dag, v) for v in ("alpha", "pq", "rr"))
    assert gauges[alpha] == pytest.approx(gauges[rr] / abs(values[pq]) + abs(values[rr]) * gauges[pq] / values[pq] ** 2)
    assert gauges[alpha] > 2 * abs(values[alpha])


@pytest.mark.parametrize("dtype", DTYPES)
def test_check_outputs_passes_the_computation_in_the_precision_and_fails_a_wrong_one(dtype):
    dag = script_dag("scaled")
    inputs = {k: np.asarray(v, dtype) for k, v in _scaled_inputs(1000).items()}
    real = np.dtype(dtype).type
    x, y, a = inputs["x"], inputs["y"], real(inputs["a"])
    rho = real(np.dot(x, y))
    t = -(a + real(2.5)) * abs(rho)
    u = np.sqrt(abs(rho)) / (real(1) + a * a)
    outputs = {"z": t * x + y, "t": t, "u": u}
    assert all(c.passed for c in oracle.check_outputs(dag, library(), inputs, outputs, dtype))
    gauges = oracle.gauge(dag, library(), inputs)
    eps, k = np.finfo(dtype).eps, oracle.sum_lengths(dag, library(), {"n": 1000})[value_named(dag, "u")]
    wrong = dict(outputs, u=np.float64(u) + 2 * oracle.threshold(k) * eps * gauges[value_named(dag, "u")])
    verdict = {c.name: c.passed for c in oracle.check_outputs(dag, library(), inputs, wrong, dtype)}
    assert verdict == {"z": True, "t": True, "u": False}


# -- nvcc -----------------------------------------------------------------------------------

def _programs():
    out = []
    for dtype in DTYPES:
        for script in SOLVERS + tuple(SCRIPTS):
            out.append((f"{script}-{dtype}", script, default_plan(script_dag(script), dtype), dtype))
        for family in FAMILIES:
            out.append((f"gemver-{family}-{dtype}", "gemver", family_plan(family, dtype), dtype))
    return out


@pytest.mark.nvcc
def test_nvcc_compiles_every_expression_program():
    """The solver scripts, the expression scripts, and a plan of every family reading
    expressions (tile, band, horizontal, striped, held with its column sums finished
    after the barrier), both precisions, for sm_90."""
    from fusec import nvcc
    programs = _programs()
    generated = [generate(script_dag(script), library(), plan, dtype) for _, script, plan, dtype in programs]
    families = {f for _, _, plan, _ in programs for f in (k.family for k in plan.kernels)}
    assert families >= {"tile", "band", "horizontal", "striped", "held"}
    compiled = nvcc.compile_many([g.source for g in generated], "sm_90")
    for (name, script, plan, dtype), program, result in zip(programs, generated, compiled):
        assert set(result.resources) == {f for k in program.kernels for f in k.function_names}, name
        for kernel in program.kernels:
            if isinstance(kernel, ScalarKernel):
                used = result.resources[kernel.name]
                assert used.spill_stores + used.spill_loads == 0 and used.registers <= 32, (name, used)
        dag = script_dag(script)
        for e in dag.expressions:
            if any(e.value in k.expressions for k in _leaf_kernels(program)) or e.value in dag.outputs:
                assert f"const real {dag.value(e.value).c_name} = " in program.source, (name, e)


def test_a_literal_outside_the_precision_is_refused_where_it_is_written():
    from fusec.api import check_arguments
    from fusec.errors import ScriptSemanticError
    dag = checked(ROUND_TRIP.format("a * 1e39 + 2"))
    with pytest.raises(ScriptSemanticError) as info:
        check_arguments(dag, "float32", None, None, None)
    assert (info.value.coord.line, info.value.coord.column, info.value.message) == (
        4, 9, "1e39 is outside the range of float32")
    assert check_arguments(dag, "float64", None, None, None) == "float64"


def test_an_expression_as_deep_as_the_front_end_takes_compiles_and_evaluates():
    """Every stage walks expression trees recursively: one MAX_EXPRESSION_DEPTH deep (the
    deepest the checker passes) must get through the space, the generator and the oracle."""
    import fusec
    from fusec.frontend.check import MAX_EXPRESSION_DEPTH
    terms = MAX_EXPRESSION_DEPTH - 1
    text = ("vector x[n], y[n];\nscalar a, t;\ninput x, a;\nt = a" + " + a" * terms
            + ";\ny = sscal(t, x);\nreturn y;\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no GPU here: the analytic model chooses, and says so
        program = fusec.compile(source=text, sizes={"n": 64}, tuned=False)
    assert "y = sscal(t, x)" in program.describe()
    x = np.linspace(-0.5, 0.5, 64)
    y = oracle.evaluate(program.dag, library(), {"x": x, "a": 0.25})[program.dag.outputs[0]]
    np.testing.assert_allclose(y, 0.25 * (terms + 1) * x, rtol=1e-12)
