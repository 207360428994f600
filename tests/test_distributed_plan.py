"""CPU tier: the planning of distributed programs (fusec.distributed), no GPU.

For every sequence of scripts/ and P = 1, 2, 3, 4, 8: which collectives, on
which value, where, how many bytes; the layouts each rank passes and gets; the
stage scripts parse and check; P = 1 is the plain program unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from types import MappingProxyType

import pytest

import fusec
import fusec.distributed as fd
from fusec.distributed import planner, rules
from fusec.distributed.layout import Layout, Op, block, blocks
from fusec.distributed.scaling import Latency, active_ranks, predicted_seconds
from fusec.distributed.text import describe
from fusec.errors import ArgumentError
from fusec.frontend import check, parse
from fusec.library.model import Kind
from fusec.target import reference
from tests.helpers import ROOT, library, script_dag, script_names

RANKS = (1, 2, 3, 4, 8)

# The collectives each sequence needs, and why (the specification the planner must meet):
#   value -> (operation, the stage it follows, the stage that reads it; None: the return)
COLLECTIVES = {
    "atax": {"y": (Op.ALL_REDUCE, 0, None)},  # y = A^T t sums the rank's rows
    "axpydot": {"r": (Op.ALL_REDUCE, 0, None)},  # a dot over the rank's elements
    "bicgk": {"s": (Op.ALL_REDUCE, 0, None)},  # s = A^T r sums the rank's rows
    "gemver": {"x": (Op.ALL_REDUCE, 0, 1)},  # w = alpha B x reads x whole
    "gesummv": {}, "madd": {}, "sgemv": {}, "sscal": {}, "vadd": {}, "waxpby": {},  # rows stay on their rank
    "sgemvt": {"x": (Op.ALL_REDUCE, 0, 1)},
}
# the terms rank 0 carries alone, so that the sum over ranks adds them once
KEPT_ON_ROOT = {"gemver": {"z"}, "sgemvt": {"z"}}
STAGES = {"gemver": 2, "sgemvt": 2}


def _sizes(dag, base: int, rectangular: bool = False) -> dict[str, int]:
    if rectangular and "m" in dag.sizes:
        return {"m": base + base // 2 + 1, "n": base}
    return {s: base for s in dag.sizes}


def _checked(source: str):
    return check(parse(source, "<string>"), library())


def _plan(script: str, ranks: int, sizes, dtype="float32", **kwargs):
    return planner.plan(script_dag(script), library(), ranks, sizes, dtype, **kwargs)


def test_every_sequence_has_its_expected_collectives():
    assert sorted(COLLECTIVES) == sorted(script_names())


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("script", script_names())
def test_collectives_of_every_sequence(script, ranks, dtype):
    dag = script_dag(script)
    for sizes in (_sizes(dag, 1001), _sizes(dag, 4097, rectangular=True)):
        plan = _plan(script, ranks, sizes, dtype)
        itemsize = 4 if dtype == "float32" else 8
        assert plan.ranks == ranks and plan.active == ranks
        found = {dag.value(c.value).name: (c.op, c.after, c.first_use) for c in plan.collectives}
        kept = {dag.value(c.value).name for c in plan.conversions if c.op is Op.KEEP_ON_ROOT}
        if ranks == 1:
            assert found == {} and plan.conversions == () and len(plan.stages) == 1
            continue
        assert found == COLLECTIVES[script]
        assert kept == KEPT_ON_ROOT.get(script, set())
        assert len(plan.stages) == STAGES.get(script, 1)
        for c in plan.collectives:  # the payload is the whole value, whatever the ranks
            whole = [sizes[d] for d in dag.value(c.value).dims]
            elements = whole[0] if whole else 1
            assert (c.count, c.bytes) == (elements, elements * itemsize)
        # the steps: every stage once, in order; a collective right after the stage it follows
        order = [("stage", s.stage) if s.stage is not None else ("conversion", s.conversion) for s in plan.steps]
        assert [k for kind, k in order if kind == "stage"] == list(range(len(plan.stages)))
        for i, c in enumerate(plan.conversions):
            at = order.index(("conversion", i))
            before = [k for kind, k in order[:at] if kind == "stage"]
            assert (before[-1] if before else -1) == c.after
            if c.first_use is not None:
                assert c.first_use > c.after


@pytest.mark.parametrize("script", script_names())
def test_layouts_follow_how_each_value_is_used(script):
    """Matrices split; a vector a nested call reads along its columns is whole,
    along its rows split; vectors only element-wise calls read are split; a
    returned sum is whole."""
    dag = script_dag(script)
    plan = _plan(script, 3, _sizes(dag, 1001))
    lib = library()
    for call in dag.calls:
        function = lib.function(call.function)
        shape = rules.shape_of(function)
        for param, arg in zip(function.params, call.args):
            if isinstance(arg, int) and dag.value(arg).producer is None:  # an input: as the caller passes it
                layout = plan.layout(arg)
                if param.kind is Kind.MATRIX:
                    assert layout is Layout.SPLIT
                elif param.kind is Kind.SCALAR:
                    assert layout is Layout.WHOLE
                elif shape.nested:
                    assert layout is (Layout.SPLIT if param.dims[0] == shape.rows else Layout.WHOLE), \
                        (script, dag.value(arg).name)
                else:
                    uses = [dag.call(c) for c in dag.consumers(arg)]
                    nested = any(lib.function(c.function).rows_dim for c in uses)
                    assert nested or layout is Layout.SPLIT
    for value, final in plan.outputs:
        assert final is not Layout.PARTIAL
        assert final is (Layout.WHOLE if plan.layout(value) is Layout.PARTIAL else plan.layout(value))


@pytest.mark.parametrize("ranks", RANKS[1:])
@pytest.mark.parametrize("script", script_names())
def test_stage_scripts_parse_and_check(script, ranks):
    """Each stage is a script fusec compiles like any other: it parses and checks,
    with no warning (a warning is an error in this suite), and reads and returns
    what the plan says."""
    dag = script_dag(script)
    for sizes in (_sizes(dag, 1001), _sizes(dag, 4097, rectangular=True)):
        plan = _plan(script, ranks, sizes)
        for stage in plan.stages:
            checked = check(parse(stage.source, stage.name), library())
            assert [checked.value(v).name for v in checked.inputs] == [a.name for a in stage.inputs]
            assert [checked.value(v).name for v in checked.outputs] == [a.name for a in stage.outputs]
            assert [c.function for c in checked.calls] == [dag.call(c).function for c in stage.calls]
            local = dict(stage.sizes)
            for symbol, local_name in plan.split:  # compiled for rank 0's block: the largest
                if local_name in local:
                    assert local[local_name] == -(-sizes[symbol] // ranks)
        covered = sorted(c for s in plan.stages for c in s.calls)
        assert covered == [c.id for c in dag.calls]


@pytest.mark.parametrize("script", script_names())
def test_one_rank_is_the_plain_program(script):
    dag = script_dag(script)
    plan = _plan(script, 1, _sizes(dag, 1001))
    (stage,) = plan.stages
    assert stage.source == dag.text and stage.name == dag.file
    assert dict(stage.sizes) == {s: 1001 for s in dag.sizes}
    assert [a.value for a in stage.inputs] == list(dag.inputs)


@pytest.mark.nvcc  # fusec.compile checks its kernels' registers with nvcc where it is on PATH
@pytest.mark.parametrize("script", ["bicgk", "gemver"])
def test_one_rank_compiles_the_same_cuda(script):
    path = str(ROOT / "scripts" / f"{script}.script")
    plan = fd.plan(path, sizes={"n": 4096}, ranks=1)
    (stage,) = plan.stages
    staged = fd.fusec_executor(library(), "float32", gpu="h100", tuned=False)(stage)
    plain = fusec.compile(path, library(), "float32", sizes={"n": 4096}, gpu="h100", tuned=False)
    assert staged.source == plain.source


def test_the_stages_are_never_measured_whatever_fusec_measure_says(monkeypatch):
    """Ranks timing their own candidates could compile different kernels: stages predict (or
    take a tuned plan), and $FUSEC_MEASURE=1 reaches no GPU."""
    monkeypatch.setenv("FUSEC_MEASURE", "1")
    monkeypatch.setattr("fusec.api._quick_tuned", lambda *args: pytest.fail("a stage was measured"))
    path = str(ROOT / "scripts" / "bicgk.script")
    (stage,) = fd.plan(path, sizes={"n": 1000}, ranks=1).stages
    staged = fd.fusec_executor(library(), "float32", gpu="h100")(stage)
    assert not staged.tuned and staged.generated.plan is not None


def test_blocks_cover_the_rows_and_differ_by_at_most_one():
    for length in (1, 2, 3, 7, 1001, 4097):
        for ranks in RANKS:
            for active in range(1, min(ranks, length) + 1):
                parts = blocks(length, ranks, active)
                assert parts[0][0] == 0 and parts[active - 1][1] == length
                assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
                sizes = [hi - lo for lo, hi in parts[:active]]
                assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
                assert all(lo == hi for lo, hi in parts[active:])
    assert block(10, 0, 3) == (0, 4) and block(10, 2, 3) == (7, 10)


def test_fewer_rows_than_ranks_leaves_ranks_idle():
    dag = script_dag("bicgk")
    plan = _plan("bicgk", 8, {"m": 3, "n": 100})
    assert plan.active == 3
    assert [hi - lo for lo, hi in blocks(3, 8, plan.active)] == [1, 1, 1, 0, 0, 0, 0, 0]
    # s comes to the idle ranks with its all-reduce; q stays split: nothing more
    assert {dag.value(c.value).name: c.op for c in plan.collectives} == {"s": Op.ALL_REDUCE}


def test_idle_ranks_get_whole_results_made_by_a_stage():
    """With ranks that hold no rows, a whole result no collective makes is broadcast to them."""
    source = ("matrix A[m, n];\nvector x[n], v[n], t[m], u[m], w[n];\ninput A, x, v;\n"
              "t = sgemv(A, x);\nu = sgemv(A, v);\nw = svadd(x, v);\nreturn t, u, w;\n")
    plan = fd.plan(source=source, sizes={"m": 100, "n": 100}, ranks=4, active=2)
    dag = _checked(source)
    assert [(c.op, dag.value(c.value).name) for c in plan.collectives] == [(Op.BROADCAST, "w")]
    every = fd.plan(source=source, sizes={"m": 100, "n": 100}, ranks=4)
    assert every.collectives == ()


def test_one_holding_rank_runs_the_script_and_broadcasts_whole_results():
    dag = script_dag("bicgk")
    plan = _plan("bicgk", 4, _sizes(dag, 100), active=1)
    (stage,) = plan.stages
    assert stage.source == dag.text
    assert {dag.value(c.value).name: c.op for c in plan.conversions} == {"s": Op.BROADCAST}


def test_a_partial_sum_read_whole_and_split_is_reduced_once():
    """s = A^T r read along another matrix's columns (whole) and rows (split):
    one all-reduce, and the rows are a slice of it."""
    source = ("matrix A[n, n], B[n, n];\nvector r[n], s[n], q[n], u[n];\ninput A, B, r;\n"
              "s = sgemtv(A, r);\nq = sgemv(B, s);\nu = sgemtv(B, s);\nreturn q, u;\n")
    plan = fd.plan(source=source, sizes={"n": 100}, ranks=2)
    ops = [(c.op, c.target) for c in plan.conversions]
    assert ops.count((Op.ALL_REDUCE, Layout.WHOLE)) == 2  # s for B's gemv, u for the return
    assert (Op.SLICE, Layout.SPLIT) in ops and not any(op is Op.REDUCE_SCATTER for op, _ in ops)


def test_a_partial_sum_read_only_by_rows_is_reduce_scattered():
    source = ("matrix A[n, n], B[n, n];\nvector r[n], s[n], u[n];\ninput A, B, r;\n"
              "s = sgemtv(A, r);\nu = sgemtv(B, s);\nreturn u;\n")
    plan = fd.plan(source=source, sizes={"n": 100}, ranks=3)
    assert [c.op for c in plan.collectives] == [Op.REDUCE_SCATTER, Op.ALL_REDUCE]
    assert [len(s.calls) for s in plan.stages] == [1, 1]


def test_a_split_vector_read_whole_is_gathered():
    """q = A p is split (each rank its rows); z = A q reads q whole: an all-gather between two stages."""
    source = ("matrix A[n, n];\nvector p[n], q[n], z[n];\ninput A, p;\n"
              "q = sgemv(A, p);\nz = sgemv(A, q);\nreturn z;\n")
    plan = fd.plan(source=source, sizes={"n": 100}, ranks=3)
    assert [(c.op, c.after, c.first_use, c.bytes) for c in plan.collectives] == [(Op.ALL_GATHER, 0, 1, 400)]


def test_an_element_wise_update_read_whole_runs_whole():
    """A CG-like step, p = r + beta p then q = A p: p's new value is read whole, so
    the update runs whole on every rank (its inputs passed whole): no collective."""
    source = ("matrix A[n, n];\nvector r[n], p[n], q[n];\nscalar beta;\ninput A, r, p, beta;\n"
              "p = saxpy(beta, p, r);\nq = sgemv(A, p);\nreturn q;\n")
    plan = fd.plan(source=source, sizes={"n": 100}, ranks=4)
    dag = _checked(source)
    assert plan.collectives == ()
    assert [plan.layout(v) for v in dag.inputs[1:3]] == [Layout.WHOLE, Layout.WHOLE]
    assert plan.layout(dag.outputs[0]) is Layout.SPLIT


def test_sums_of_partials_stay_partial():
    """x + y of two partial sums is the partial sum of x + y: one all-reduce, at the end."""
    source = ("matrix A[m, n], B[m, n];\nvector r[m], s[n], t[n], u[n];\ninput A, B, r;\n"
              "s = sgemtv(A, r);\nt = sgemtv(B, r);\nu = svadd(s, t);\nreturn u;\n")
    plan = fd.plan(source=source, sizes={"n": 100}, ranks=2)
    assert [c.op for c in plan.collectives] == [Op.ALL_REDUCE] and len(plan.stages) == 1


def test_a_function_whose_sum_is_not_linear_is_refused():
    """A gemv-T whose epilogue squares the sum cannot be split by rows: the
    error points at the call."""
    lib = library()
    squared = dataclasses.replace(lib.functions["sgemtv"], name="sgemtv_sq", reference="(A.T @ x) * (A.T @ x)")
    functions = dict(lib.functions, sgemtv_sq=squared)
    odd = dataclasses.replace(lib, functions=MappingProxyType(functions))
    source = "matrix A[m, n];\nvector r[m], s[n];\ninput A, r;\ns = sgemtv_sq(A, r);\nreturn s;\n"
    dag = check(parse(source, "odd.script"), odd)
    with pytest.raises(fd.DistributionError, match=r"^odd\.script:4:1: sgemtv_sq cannot be split"):
        planner.plan(dag, odd, 2, {"m": 10, "n": 10}, "float32")
    assert planner.plan(dag, odd, 1, {"m": 10, "n": 10}, "float32").stages[0].source == source


def test_the_rules_are_checked_not_assumed():
    """The row sum with an added vector: y0 whole on every rank would add it P times."""
    function = library().function("sgemtv_ab")
    held = {tuple(c.args): c.result for c in rules.valid_choices(function, library())}
    W, S, P = Layout.WHOLE, Layout.SPLIT, Layout.PARTIAL
    assert (W, S, S, W, W) not in held
    assert held[(W, S, S, W, P)] is P and held[(W, S, S, P, W)] is P
    assert not rules.holds(function, library(), rules.Choice((W, S, S, W, W), P))


def test_the_plan_example_of_the_docs_runs_and_prints_the_plan_text_they_show(capsys, monkeypatch):
    """docs/distributed.md, "The plan": its snippet runs as written (from a checkout's root) and
    prints the GEMVER plan text shown below it, but for the lines it shortens with '...'."""
    text = (ROOT / "docs" / "distributed.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S)
    (snippet,) = [code for lang, code in blocks if lang == "python" and "fd.plan(" in code]
    (shown,) = [code for lang, code in blocks if code.startswith("distributed program gemver")]
    monkeypatch.chdir(ROOT)
    exec(snippet, {})
    printed = capsys.readouterr().out.splitlines()
    for line in shown.splitlines():
        assert "..." in line or line in printed, line


def test_plan_text_names_each_collective_and_its_bytes():
    dag = script_dag("gemver")
    plan = _plan("gemver", 2, {"m": 1001, "n": 1001})
    text = describe(plan, dag)
    assert "2 rank(s), 2 holding rows" in text
    assert re.search(r"all-reduce x\[n\] \(partial -> whole\).*; 4004 bytes, after stage 0, for stage 1", text)
    assert "keep-on-root z[n]" in text and "rows:    m in blocks of 501, 500" in text
    assert "collectives: 1 a call, 4004 bytes of payload" in text
    single = describe(_plan("gemver", 1, {"m": 1001, "n": 1001}), dag)
    assert "collectives: 0 a call" in single


@pytest.mark.parametrize("sizes, argument", [(None, "sizes"), ({"m": 10}, "sizes"), ({"n": 0}, "sizes"),
                                             ({"n": 10, "k": 3}, "sizes"), ({"n": 2.5}, "sizes"),
                                             ({"n": 2**31}, "sizes")])
def test_bad_sizes(sizes, argument):
    with pytest.raises(ArgumentError, match=f"argument '{argument}'"):
        planner.plan(script_dag("bicgk"), library(), 2, sizes, "float32")


@pytest.mark.parametrize("ranks", [0, -1, 2.0, True])
def test_bad_ranks(ranks):
    with pytest.raises(ArgumentError, match="argument 'ranks'"):
        planner.plan(script_dag("bicgk"), library(), ranks, {"n": 10}, "float32")


@pytest.mark.parametrize("active, why", [(0, "it must be at least 1"), (-1, "it must be at least 1"),
                                         ("1", "pass a whole number"), (True, "pass a whole number"),
                                         (1.5, "pass a whole number"), (3, "at most the 2 ranks can hold rows")])
def test_bad_active(active, why):
    with pytest.raises(ArgumentError, match=f"argument 'active': .*{why}"):
        planner.plan(script_dag("bicgk"), library(), 2, {"n": 10}, "float32", active=active)


def test_plan_and_compile_check_gpu_latency_and_executor_before_anything(tmp_path):
    """fd.plan and fd.compile name a bad ``gpu``, an unreadable or malformed ``latency`` table
    and an ``executor`` that is not callable, before a communicator is made."""
    import fusec.distributed as fd
    args = dict(script=str(ROOT / "scripts" / "bicgk.script"), sizes={"n": 64}, ranks=2)
    with pytest.raises(ArgumentError, match="argument 'gpu': is a int"):
        fd.plan(**args, gpu=3)
    with pytest.raises(ArgumentError, match="argument 'latency': '.*missing.json' cannot be read"):
        fd.plan(**args, latency=str(tmp_path / "missing.json"))
    for text in ("not json", '{"gpu": "x"}', '{"gpu": "x", "points": [[1]]}'):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ArgumentError, match="argument 'latency': '.*bad.json' is not a table"):
            fd.plan(**args, latency=str(tmp_path / "bad.json"))
    del args["ranks"]
    with pytest.raises(ArgumentError, match="argument 'executor': is a int"):
        fd.compile(**args, comm=object(), executor=3)
    with pytest.raises(ArgumentError, match="argument 'timeout'"):
        fd.compile(**args, comm=object(), timeout=-1)


def test_the_rule_for_fewer_gpus():
    """With an all-reduce dearer than the broadcast that takes its place when one
    rank holds the rows, small problems run on one GPU, large ones on all; the
    count chosen never falls as the size grows."""
    latency = Latency("test", tuple((op, 4, b, 30e-6 if op == "all-reduce" else 10e-6)
                                    for op in ("all-reduce", "broadcast") for b in (4, 1 << 20)),
                      launch_seconds=3e-6)
    bandwidth = reference().copy_bandwidth
    dag = script_dag("bicgk")
    chosen = []
    for n in (64, 512, 2048, 8192, 32768):
        plans = {a: _plan("bicgk", 4, {"n": n}, active=a) for a in range(1, 5)}
        chosen.append(active_ranks(4, lambda a: predicted_seconds(plans[a], dag, latency, bandwidth)))
    assert chosen[0] == 1 and chosen[-1] == 4
    assert chosen == sorted(chosen)
    applied = fd.plan(str(ROOT / "scripts/bicgk.script"), sizes={"n": 64}, ranks=4, latency=latency, gpu="h100")
    assert applied.active == 1


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_rule_prices_stages_by_the_model_not_their_floor(gpu):
    """SGEMVT's A^T y must be summed over every row before A x reads A again: one GPU
    passes over A twice (or holds part of it), two ranks once each with an all-reduce
    between. Priced at its floor (A read once) the one-rank plan looked as fast as two,
    and the rule kept SGEMVT on one GPU at every size (two measured 1.6-1.9x faster
    from n = 8192 on two H200s); priced by the model, both ranks hold rows there."""
    from fusec.cost.perfdb import predictor_for
    from fusec.distributed.scaling import modelled, shipped
    script = str(ROOT / "scripts/sgemvt.script")
    for n in (8192, 16384, 32768):
        assert fd.plan(script, sizes={"n": n}, ranks=2, gpu=gpu, latency=None).active == 2, n
    table, dag = shipped(gpu), script_dag("sgemvt")
    predictor = predictor_for(library(), gpu)
    plans = {a: _plan("sgemvt", 2, {"n": 16384}, active=a) for a in (1, 2)}
    floor = {a: predicted_seconds(plans[a], dag, table, predictor.target.copy_bandwidth) for a in plans}
    model = {a: predicted_seconds(plans[a], dag, table, predictor.target.copy_bandwidth,
                                  stage_seconds=modelled(library(), "float32", predictor)) for a in plans}
    assert floor[1] < floor[2]  # the floor's mistake: one pass over A for one rank
    assert model[2] < 0.7 * model[1]


def test_latency_interpolates_between_measured_sizes():
    latency = Latency("x", (("all-reduce", 2, 1000, 10e-6), ("all-reduce", 2, 3000, 30e-6),
                            ("all-reduce", 4, 1000, 40e-6)))
    assert latency.seconds("all-reduce", 2, 2000) == pytest.approx(20e-6)
    assert latency.seconds("all-reduce", 2, 10) == pytest.approx(10e-6)  # below: the smallest's
    assert latency.seconds("all-reduce", 3, 1000) == pytest.approx(40e-6)  # nearest ranks, more on a tie
    assert latency.seconds("all-gather", 2, 1000) is None
    assert Latency.from_json(latency.to_json()) == latency


def test_the_shipped_h100_table_puts_small_problems_on_fewer_gpus():
    """The collective latencies measured on two H100s ship with fusec: asked for the H100,
    the planner keeps a small BiCGK on one GPU and spreads a large one over both; asked
    for a GPU without a table, every rank holds rows."""
    from fusec.distributed.scaling import shipped
    table = shipped("h100")
    assert table is not None and {r for _, r, _, _ in table.points} == {2}
    script = str(ROOT / "scripts/bicgk.script")
    small = fd.plan(script, sizes={"n": 512}, ranks=2, gpu="h100", latency=None)  # None: the shipped table
    large = fd.plan(script, sizes={"n": 32768}, ranks=2, gpu="h100", latency=None)
    assert (small.active, large.active) == (1, 2)
    assert shipped("a100") is None
    assert fd.plan(script, sizes={"n": 512}, ranks=2, gpu="a100", latency=None).active == 2


def test_a_stage_text_names_the_script_file_not_its_path(tmp_path):
    """A stage's tuned plan is found by the stage's text (tools/stage_scripts.py ships it so):
    the text is the same whichever path, absolute or relative, the script is compiled from."""
    import os
    import shutil
    copy = tmp_path / "elsewhere" / "bicgk.script"
    copy.parent.mkdir()
    shutil.copy(ROOT / "scripts" / "bicgk.script", copy)
    texts = {fd.plan(path, ranks=2, sizes={"n": 4096}, dtype="float32").stages[0].source
             for path in (ROOT / "scripts" / "bicgk.script", copy,
                          os.path.relpath(ROOT / "scripts" / "bicgk.script"))}
    assert len(texts) == 1
    assert "of bicgk.script over 2 ranks" in texts.pop()


def test_results_asked_in_another_layout():
    """results=: a split result gathered whole after the stage making it; with inputs= given too,
    the choices count the collective a result asked for takes (CG's p1 = r1 + beta p: r1 gathered
    before it, p1 then made on every rank); a partial one split; what no collective makes, a
    scalar split, an unknown name or layout: ArgumentError."""
    path = ROOT / "scripts" / "solvers" / "cg.script"
    plan = fd.plan(path, ranks=3, sizes={"n": 50}, results={"p1": "whole"})
    dag = script_dag("solvers/cg")
    last = plan.collectives[-1]
    assert (last.op, dag.value(last.value).name, last.first_use, last.after) == (Op.ALL_GATHER, "p1", None, 2)
    counted = fd.plan(path, ranks=3, sizes={"n": 50}, results={"p1": "whole"}, inputs={"p": "whole"})
    gathers = [(dag.value(c.value).name, c.count, c.after) for c in counted.collectives if c.op is Op.ALL_GATHER]
    assert gathers == [("r1", 50, 1)]
    assert dict((dag.value(v).name, str(lay)) for v, lay in plan.outputs)["p1"] == "whole"
    atax = fd.plan(ROOT / "scripts" / "atax.script", ranks=2, sizes={"n": 40}, results={"y": "split"})
    assert [c.op for c in atax.collectives] == [Op.REDUCE_SCATTER]
    for results, why in (({"q": "whole"}, r"'q' is not a result of .*cg.script \(its results: x1, r1, p1, rr1\)"),
                         ({"p1": "partial"}, r"p1: 'partial' is no layout to return; pass 'split' or 'whole'"),
                         ({"rr1": "split"}, r"rr1 is a scalar: it is returned whole"),
                         (["p1"], r"is a list: pass a mapping")):
        with pytest.raises(ArgumentError, match=r"argument 'results': " + why):
            fd.plan(path, ranks=2, sizes={"n": 50}, results=results)
    axpydot = "vector w[n], v[n], u[n], z[n];\nscalar alpha, r;\ninput w, v, u, alpha;\n" \
              "z = saxpy(alpha, v, w);\nr = sdot(z, u);\nreturn z, r;\n"
    whole = fd.plan(source=axpydot, ranks=2, sizes={"n": 40}, results={"z": "whole"})
    assert [c.op for c in whole.collectives] == [Op.ALL_GATHER, Op.ALL_REDUCE]


def test_inputs_passed_in_another_layout():
    """inputs=: CG's state passed as the last call returned it (r and p whole, returned whole):
    r1 = r - alpha q is made whole from q gathered, so rr1 is a dot on every rank (no
    all-reduce) and p1 is made whole (no all-gather): two collectives and two stages, where
    the layouts the calls alone want (r split) take three of each; a matrix whole, a scalar
    split, an unknown name or layout: ArgumentError."""
    path = ROOT / "scripts" / "solvers" / "cg.script"
    dag = script_dag("solvers/cg")
    state = {"x": "split", "r": "whole", "p": "whole"}
    plan = fd.plan(path, ranks=3, sizes={"n": 50}, inputs=state, results={f"{v}1": lay for v, lay in state.items()})
    assert {dag.value(v).name: str(lay) for v, lay in plan.layouts if v in dag.inputs} == {"A": "split", **state}
    assert [(c.op, dag.value(c.value).name) for c in plan.collectives] == [(Op.ALL_GATHER, "q"), (Op.ALL_REDUCE, "pq")]
    assert len(plan.stages) == 2
    plain = fd.plan(path, ranks=3, sizes={"n": 50}, results={"x1": "split", "r1": "split", "p1": "whole"})
    assert len(plain.collectives) == 4 and len(plain.stages) == 3  # rr and pq packed into one launch
    for inputs, why in (({"A": "whole"}, r"A is a matrix: each rank passes its rows \('split'\)"),
                        ({"q": "whole"}, r"'q' is not an input of .*cg.script \(its inputs: A, x, r, p\)"),
                        ({"r": "partial"}, r"r: 'partial' is no layout to pass; pass 'split' or 'whole'"),
                        (["r"], r"is a list: pass a mapping")):
        with pytest.raises(ArgumentError, match=r"argument 'inputs': " + why):
            fd.plan(path, ranks=2, sizes={"n": 50}, inputs=inputs)
    scalar = "vector v[n], w[n];\nscalar alpha;\ninput alpha, v;\nw = sscal(alpha, v);\nreturn w;\n"
    with pytest.raises(ArgumentError, match=r"argument 'inputs': alpha is a scalar: it is passed whole"):
        fd.plan(source=scalar, ranks=2, sizes={"n": 40}, inputs={"alpha": "split"})


def test_the_solvers_pass_their_state_in_the_layouts_with_the_fewest_collectives():
    """Each state vector split or whole, passed and returned so; the choice with the fewest
    collectives, then stages, then bytes: CG two collectives (three with the calls' own
    layouts), BiCG three (four), BiCGStab five (seven), at 2 and 3 ranks."""
    from fusec.distributed.solvers import _input_layouts
    from fusec.solvers.methods import METHODS
    for name, most in (("cg", 2), ("bicg", 3), ("bicgstab", 5)):
        method = METHODS[name]
        for ranks, n in ((2, 64), (3, 50)):
            layouts, own = _input_layouts(method, "float64", n, ranks, "fewest")
            assert not own
            state = {v: str(layouts[v]) for v in method.state}
            plan = fd.plan(method.script, dtype="float64", ranks=ranks, sizes={"n": n}, inputs=state,
                           results={f"{v}1": lay for v, lay in state.items()})
            steps = [s for s in plan.steps if s.conversion is not None and plan.conversions[s.conversion].op.collective]
            assert len(steps) == most, (name, ranks, state)


def test_agreed_layouts_are_the_fewest_that_leave_no_sum_to_each_rank():
    """The default: the fewest collectives among the layouts where every number the ranks use
    is all-reduced, none summed by each rank for itself (those could differ in their last bits
    between ranks whose kernels differ). BiCGStab's fewest are such (five collectives, not
    seven); CG's and BiCG's fewest have every rank sum rr1 itself, so they keep the calls' own
    layouts (three and four), planned without ``inputs=`` as before."""
    from fusec.distributed.planner import summed_on_every_rank
    from fusec.distributed.solvers import _input_layouts
    from fusec.solvers.methods import METHODS
    for name, count in (("cg", 3), ("bicg", 4), ("bicgstab", 5)):
        method = METHODS[name]
        dag = script_dag(f"solvers/{name}")
        for ranks, n in ((2, 64), (3, 50)):
            layouts, own = _input_layouts(method, "float64", n, ranks, "agreed")
            assert own == (name != "bicgstab"), (name, ranks)
            assert (layouts, True) == _input_layouts(method, "float64", n, ranks, "calls") or not own
            state = {v: str(layouts[v]) for v in method.state}
            plan = fd.plan(method.script, dtype="float64", ranks=ranks, sizes={"n": n},
                           inputs=None if own else state, results={f"{v}1": lay for v, lay in state.items()})
            assert not summed_on_every_rank(plan, dag, library())
            steps = [s for s in plan.steps if s.conversion is not None and plan.conversions[s.conversion].op.collective]
            assert len(steps) == count, (name, ranks, state)


@pytest.mark.parametrize("solver, launches", [
    ("cg", [("rr", "pq"), ("rr1",)]),
    ("bicgstab", [("rho", "rhv"), ("v",), ("tt",), ("ts",), ("rho1", "rr1")])])
def test_the_scalars_all_reduced_after_a_stage_go_in_one_collective(solver, launches):
    """A solver iteration's dots after one stage are all-reduced together, packed into one
    buffer (a collective's latency, 20-25 us on two H200s, once, not once a dot); a value
    keeps its own conversion, and the plan text says what is packed."""
    plan = fd.plan(str(ROOT / "scripts" / "solvers" / f"{solver}.script"), sizes={"n": 1000}, ranks=2)
    dag = script_dag(f"solvers/{solver}")
    named = [tuple(dag.value(c.value).name for c in launch) for launch in plan.launches]
    assert named == launches
    assert len(plan.collectives) == sum(map(len, launches))
    text = describe(plan, dag)
    first = ", ".join(launches[0])
    assert f"all-reduce {first} (partial -> whole)" in text and "one collective of 8 bytes (the 2 packed)" in text
    assert f"collectives: {len(launches)} a call ({len(plan.collectives)} values)" in text
    latency = Latency("t", (("all-reduce", 2, 4, 20e-6), ("all-reduce", 2, 8, 20e-6), ("all-gather", 2, 4000, 30e-6)))
    local = predicted_seconds(plan, dag, Latency("t", ()), 1e12)
    packed = sum(20e-6 if launch[0] != "v" else 30e-6 for launch in launches)
    assert predicted_seconds(plan, dag, latency, 1e12) == pytest.approx(local + packed)


def test_a_scalar_an_overlapped_collective_carries_is_not_packed():
    """Packing is for all-reduces of scalars no stage overlaps; a vector's or an overlapped
    one keeps its own collective."""
    from fusec.distributed.plan import Conversion
    scalar = Conversion(Op.ALL_REDUCE, 1, Layout.PARTIAL, Layout.WHOLE, 0, 1, 1, 4)
    assert planner._packable(scalar)
    assert not planner._packable(dataclasses.replace(scalar, first_use=3))  # stages 1, 2 overlap it
    assert not planner._packable(dataclasses.replace(scalar, count=10, bytes=40))
    assert not planner._packable(dataclasses.replace(scalar, op=Op.REDUCE_SCATTER))
