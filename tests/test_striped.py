"""Striped fusion without a GPU: the plan record, its checks, the space, codegen, prediction.

GEMVER, SGEMVT and ATAX each have a global barrier between two matrix passes
(a reduction's whole result is needed); the striped plan runs both in one
launch, stripes of columns for the first two and of rows for ATAX. Options are
offered only there, every option builds and compiles with nvcc for sm_90 in
both precisions, and the checks say why a pair cannot be striped.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from fusec import nvcc
from fusec.cost.analytic import DEFAULT
from fusec.emit.program import generate
from fusec.errors import PlanError
from fusec.families import build_kernel
from fusec.families.striped import StripedKernel, why_not_striped
from fusec.frontend import load_script
from fusec.ir.geometry import Shape
from fusec.ir.plan import COLS, ROWS, ProgramPlan, StripedPlan, kernel_plan_from_json
from fusec.library.model import Geometry
from fusec.runtime.program import Program
from fusec.space.combinations import build_space
from fusec.space.striped import StripedFusion
from tests.helpers import DTYPES, ROOT, library, script_names

STRIPED = {"gemver": COLS, "sgemvt": COLS, "atax": ROWS}  # the scripts that get stripes, and their axis


def dag_of(script: str):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def space_of(script: str, n: int = 4096, dtype: str = "float32"):
    """The space without held fusions (tests/test_held.py has those), whose options share the slots."""
    dag = dag_of(script)
    return build_space(dag, library(), dtype, {s: n for s in dag.sizes}, DEFAULT, held=False)


def best_striped(script: str, dtype: str = "float32") -> ProgramPlan:
    space = space_of(script, dtype=dtype)
    return next(c.plan for c in space.ranked() if any(isinstance(k, StripedPlan) for k in c.plan.kernels))


def striped_of(plan: ProgramPlan) -> StripedPlan:
    return next(k for k in plan.kernels if isinstance(k, StripedPlan))


def with_striped(plan: ProgramPlan, striped: StripedPlan) -> ProgramPlan:
    return ProgramPlan(tuple(striped if isinstance(k, StripedPlan) else k for k in plan.kernels))


@pytest.mark.parametrize("script", script_names())
@pytest.mark.slow
def test_stripes_are_offered_where_a_reduction_result_crosses_a_barrier(script):
    space = space_of(script)
    slots = [s for s in space.options if isinstance(s, StripedFusion)]
    if script not in STRIPED:
        assert not slots
        return
    assert slots and all(space.options[s] for s in slots)
    for slot in slots:
        options = space.options[slot]
        assert [t for _, _, t in options] == sorted(t for _, _, t in options)
        for plan, kernel, seconds in options:
            assert isinstance(kernel, StripedKernel) and kernel.axis == STRIPED[script] and seconds > 0
            assert {p.serial for p in plan.parts} == {ROWS if kernel.axis == COLS else COLS}
            assert plan.producer.shape.block == plan.consumer.shape.block
    # the best-ranked combination is one launch where there were two: striped, or for ATAX
    # one band kernel (one pass over A, t's rows whole in the block)
    if script == "atax":
        (kernel,) = space.best().plan.kernels
        assert kernel.geometry is Geometry.BAND
    else:
        assert any(isinstance(k, StripedPlan) for k in space.best().plan.kernels)


@pytest.mark.parametrize("script", STRIPED)
def test_the_tuner_measures_the_parts_apart_and_the_best_without_stripes(script):
    space = space_of(script)
    top = space.top(4, twins=True)
    striped = [c for c in top if any(isinstance(k, StripedPlan) for k in c.plan.kernels)]
    plans = {c.plan for c in top}
    for combination in striped:
        twin = space.twin(combination)
        assert twin.plan in plans and not any(isinstance(k, StripedPlan) for k in twin.plan.kernels)
        assert sorted(c for k in twin.plan.kernels for c in k.calls) == sorted(
            c for k in combination.plan.kernels for c in k.calls)
    best_plain = next(c for c in space.ranked() if not any(isinstance(k, StripedPlan) for k in c.plan.kernels))
    assert best_plain.plan in plans


def test_plan_round_trips_through_json_and_prints():
    plan = best_striped("gemver")
    assert ProgramPlan.from_json(plan.to_json()) == plan
    striped = striped_of(plan)
    assert kernel_plan_from_json(json.loads(json.dumps(striped.to_json()))) == striped
    summary = plan.summary(dag_of("gemver"))
    assert summary.startswith("S{") and " -> w=sgemv_a [" in summary and f"; lag {striped.lag}}}" in summary
    assert striped.calls == (0, 1, 2, 3) and striped.implementation_of(3) == "default"


@pytest.mark.slow
def test_why_a_pair_cannot_be_striped(tmp_path):
    gemver = best_striped("gemver")
    dag = dag_of("gemver")
    striped = striped_of(gemver)
    producer, consumer = striped.parts
    assert why_not_striped(dag, striped) is None
    assert "come before" in why_not_striped(dag, StripedPlan(consumer, producer))
    assert "in both parts" in why_not_striped(dag, StripedPlan(producer, producer))
    other = dataclasses.replace(consumer, shape=Shape(Geometry.TILE, 128, 1, 16))
    assert "blocks of" in why_not_striped(dag, StripedPlan(producer, other))
    assert "lag of 0" in why_not_striped(dag, StripedPlan(producer, consumer, 0))
    along = dataclasses.replace(consumer, serial=COLS)  # its blocks would span stripes of columns
    with pytest.raises(PlanError, match="walks the cols"):
        build_kernel(dag, library(), StripedPlan(producer, along), "float32", 0)
    # BiCGK's two calls are independent: nothing crosses
    bicgk = dag_of("bicgk")
    alone = build_space(bicgk, library(), "float32", {"m": 64, "n": 64}, DEFAULT)
    q, s = (alone.options[f][0][0] for f in alone.fusions if len(f.calls) == 1)
    assert "reads nothing" in why_not_striped(bicgk, StripedPlan(q, s))
    # a consumer that reads the crossing vector along its other axis would need all of it
    script = tmp_path / "twice.script"
    script.write_text("matrix A[n, n];\nvector y[n], x[n], w[n];\ninput A, y;\n"
                      "x = sgemtv(A, y);\nw = sgemtv(A, x);\nreturn w;\n")
    twice = load_script(script, library())
    space = build_space(twice, library(), "float32", {"n": 1024}, DEFAULT)
    # the best of each call whose loop walks the rows (a stripe of columns is the crossing axis)
    first, second = (next(o[0] for o in space.options[f] if o[0].serial == ROWS)
                     for f in space.fusions if len(f.calls) == 1)
    second = dataclasses.replace(second, shape=first.shape, serial=first.serial)
    with pytest.raises(PlanError, match="along the other axis"):
        build_kernel(twice, library(), StripedPlan(first, second), "float32", 0)
    assert not [o for s in space.options if isinstance(s, StripedFusion)
                for o in space.options[s] if isinstance(o[0], StripedPlan)]  # held ones may be (test_held.py)


@pytest.mark.parametrize("script", STRIPED)
@pytest.mark.slow
def test_generated_kernel(script):
    plan = best_striped(script)
    program = Program(generate(dag_of(script), library(), plan, "float32"))
    kernel = next(k for k in program.kernels if isinstance(k, StripedKernel))
    source, dag = program.source, program.dag
    kernel_source = program.generated.sources[kernel.index]
    assert len(re.findall(r"__global__", source)) == len(program.kernels)
    assert f'extern "C" __global__ void __launch_bounds__(BLOCK) {kernel.name}(' in source
    assert kernel.args[-1].role == "schedule" and "unsigned* __restrict__ fusec_schedule)" in source
    # its blocks take items by ticket, so neither it nor its parts turn (Kernel.turns)
    assert not any(k.turns for k in (kernel, *kernel.parts)) and "fusec_item" not in kernel_source
    for role in ("fusec_stripe_ticket", "fusec_stripe_done", "fusec_stripe_wait", "fusec_stripe_leave"):
        assert f"{role}(" in kernel_source
    # values one launch writes and reads are not restrict-qualified in either part
    written = {a.value for a in kernel.parts[0].args if a.role == "out"}
    read = {a.value for a in kernel.parts[1].args if a.role == "in"}
    assert written & read
    for part in kernel.parts:
        for arg in part.args:
            if arg.role in ("in", "out"):  # arrays of the script
                assert ("__restrict__" in arg.decl) == (arg.value not in written & read), arg
    # L2 keeps what the consumer reads again: GEMVER's producer streams A (it keeps B,
    # which it writes), SGEMVT's and ATAX's keep A (the consumer reads it again)
    producer, consumer = kernel.parts
    assert producer.stream_matrices == (script == "gemver") and consumer.stream_matrices
    sizes = {"m": 1000, "n": 777}
    m0, m1 = producer.macros(), consumer.macros()
    if kernel.axis == COLS:
        stripes = -(-777 // m0["TILE_COLS"])
        across = [-(-(-(-1000 // m["TILE_ROWS"])) // m["ITERS"]) for m in (m0, m1)]
    else:
        stripes = -(-1000 // m0["TILE_ROWS"])
        across = [-(-(-(-777 // m["TILE_COLS"])) // m["ITERS"]) for m in (m0, m1)]
    assert kernel.stripes(sizes) == stripes and kernel.grid(sizes) == stripes * sum(across)
    assert kernel.schedule_counters(sizes) == 2 + stripes
    text = program.describe(sizes)
    assert "striped fusion across a global barrier" in text and "producer:" in text and "consumer:" in text
    # each tile's ticket is taken just before its sum, in both parts (Threads.tickets_at_once)
    assert "unsigned got[" not in kernel_source and "fusec_came_last(" not in kernel_source.split("__global__")[-1]
    for part in kernel.parts:
        for reduction in part.reductions:
            c = dag.value(reduction.value).c_name
            assert re.search(rf"if \(fusec_arrive\(cnt_{c}( \+ tile)?, \w+, &fusec_flag, threadIdx\.x\)\)",
                             kernel_source), c
    if script == "atax":  # t passes through memory inside the one launch
        assert program.intermediates == tuple(v.id for v in dag.values if v.name == "t")


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", STRIPED)
def test_striped_programs_compile(script, dtype):
    sources = [generate(dag_of(script), library(), best_striped(script, dtype), dtype).source]
    space = space_of(script, dtype=dtype)
    slot = next(s for s in space.options if isinstance(s, StripedFusion))
    for plan, _, _ in space.options[slot][:: max(1, len(space.options[slot]) // 3)]:
        sources.append(generate(dag_of(script), library(), with_striped(best_striped(script, dtype), plan),
                                dtype).source)
    for compiled in nvcc.compile_many(sources, "sm_90"):
        assert [name for name in compiled.resources if "_s_" in name]  # the striped kernel is there


@pytest.mark.slow
def test_prediction_counts_the_reread_and_the_wait():
    space = space_of("gemver", n=16384)
    dag = space.dag
    slot = next(s for s in space.options if isinstance(s, StripedFusion))
    plan, kernel, seconds = space.options[slot][0]
    sizes = space.sizes
    apart = sum(DEFAULT.kernel_seconds(p, dag, sizes) for p in kernel.parts)
    assert seconds < apart  # B re-read from L2, one launch fewer
    longer = dataclasses.replace(plan, producer=dataclasses.replace(
        plan.producer, shape=dataclasses.replace(plan.producer.shape, iters=32)))
    long_kernel = build_kernel(dag, library(), longer, "float32", 0)
    long_apart = sum(DEFAULT.kernel_seconds(p, dag, sizes) for p in long_kernel.parts)
    # longer producer blocks keep consumers waiting: that costs more than it saves apart
    assert DEFAULT.kernel_seconds(long_kernel, dag, sizes) - long_apart > seconds - apart


@pytest.mark.slow
def test_a_tuned_striped_plan_is_used_and_a_bad_one_is_ignored(monkeypatch, tmp_path):
    import fusec
    from fusec.errors import FusecWarning
    from fusec.tune import store as tuning
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    dag, sizes, slug = dag_of("sgemvt"), {"m": 3000, "n": 2000}, "h100-80gb-hbm3"
    from fusec.cost.perfdb import predictor_for
    # the space compile builds for gpu="h100": a tuned plan is used only where it offers it
    space = build_space(dag, library(), "float32", sizes, predictor_for(library(), "h100"))
    plan = [c.plan for c in space.ranked() if isinstance(c.plan.kernels[0], StripedPlan)][3]  # not the first
    key = tuning.key(dag, library(), "float32", sizes, slug)
    tuning.store(tuning.TuningEntry(key, plan, 50.0, 60.0, 4, 10, "NVIDIA H100 80GB HBM3",
                                    "2026-11-22T12:00:00+00:00", "sgemvt"))
    program = fusec.compile(ROOT / "scripts" / "sgemvt.script", library(), sizes=sizes, gpu="h100")
    assert program.tuned and program.generated.plan == plan and isinstance(program.kernels[0], StripedKernel)
    # a striped plan the space does not offer (no lag ahead) is ignored with a warning
    data = json.loads(key.path.read_text())
    data["plan"][0]["lag"] = 0
    key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match="not one the optimization space offers"):
        program = fusec.compile(ROOT / "scripts" / "sgemvt.script", library(), sizes=sizes, gpu="h100")
    assert program.tuned is None
    # one that does not parse (its lag gone) is a miss naming the file
    del data["plan"][0]["lag"]
    key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match=re.escape(str(key.path))):
        assert tuning.lookup(dag, library(), "float32", sizes, slug) is None


@pytest.mark.slow
def test_a_tuned_striped_plan_of_offered_parts_is_used_though_its_pairing_is_not_among_the_options(
        monkeypatch, tmp_path):
    """The striped options pair each part's best-predicted implementations only; a
    plan tuned elsewhere (the H100's, measured fastest on the H200: GEMVER fp64
    n = 8192) may pair a producer ranked lower. Made of parts the space offers, with
    a lag it searches, it is used; with a lag it does not search it is not."""
    import fusec
    from fusec.cost.perfdb import predictor_for
    from fusec.errors import FusecWarning
    from fusec.space.fusions import Fusion
    from fusec.tune import store as tuning
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    dag, sizes, slug = dag_of("sgemvt"), {"m": 3000, "n": 2000}, "h100-80gb-hbm3"
    space = build_space(dag, library(), "float32", sizes, predictor_for(library(), "h100"))
    offered = {plan for options in space.options.values() for plan, _, _ in options}
    paired, plan = next((paired, candidate) for paired in sorted(p for p in offered if isinstance(p, StripedPlan))
                        for candidate in (dataclasses.replace(paired, producer=other)
                                          for other, _, _ in space.options[Fusion(paired.producer.calls)]
                                          if other.shape.block == paired.producer.shape.block
                                          and other.serial == paired.producer.serial)
                        if candidate not in offered and _builds(dag, candidate))
    key = tuning.key(dag, library(), "float32", sizes, slug)
    tuning.store(tuning.TuningEntry(key, _program_plan(space, paired, plan),
                                    50.0, 60.0, 9, 10, "NVIDIA H200", "2026-11-28T10:00:00+00:00", "sgemvt"))
    program = fusec.compile(ROOT / "scripts" / "sgemvt.script", library(), sizes=sizes, gpu="h100")
    assert program.tuned and plan in program.generated.plan.kernels
    data = json.loads(key.path.read_text())
    for kernel in data["plan"]:
        if "striped" in kernel:
            kernel["lag"] = 9  # LAGS: 1 to 4
    key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match="not one the optimization space offers"):
        program = fusec.compile(ROOT / "scripts" / "sgemvt.script", library(), sizes=sizes, gpu="h100")
    assert program.tuned is None


def _builds(dag, plan) -> bool:
    try:
        build_kernel(dag, library(), plan, "float32", 0)
    except PlanError:
        return False
    return True


def _program_plan(space, paired, plan):
    """The best-ranked program plan with ``paired`` in it, ``plan`` in its place."""
    best = next(c.plan for c in space.ranked() if paired in c.plan.kernels)
    return dataclasses.replace(best, kernels=tuple(plan if k == paired else k for k in best.kernels))


@pytest.mark.slow
def test_a_lag_whose_stripes_do_not_fit_in_l2_is_predicted_to_reread_from_dram():
    # fp32 n = 16384: GEMVER's stripes of B are 8 MB (5 in flight at lag 4: 40 MB, past half of
    # L2); ATAX's stripes of A are 64 rows, 4 MB (20 MB at lag 4)
    for script, worse in (("gemver", True), ("atax", False)):
        space = space_of(script, n=16384)
        slot = next(s for s in space.options if isinstance(s, StripedFusion))
        plan, kernel, _ = space.options[slot][0]
        lag2, lag4 = (DEFAULT.kernel_seconds(build_kernel(space.dag, library(), dataclasses.replace(plan, lag=lag),
                                                          "float32", 0), space.dag, space.sizes)
                      for lag in (2, 4))
        assert (lag4 > lag2) == worse, (script, lag2, lag4)


def test_a_fusion_of_two_parts_saves_one_of_their_two_launches():
    # tiny: no wait, nothing to re-read worth a microsecond; what is left is the launch
    # (the parts were summed with both launches, less one, plus the fusion's one: none saved)
    space = space_of("sgemvt", n=64)
    dag, sizes = space.dag, space.sizes
    slot = next(s for s in space.options if isinstance(s, StripedFusion))
    for plan, kernel, seconds in space.options[slot][:10]:
        apart = sum(DEFAULT.kernel_seconds(p, dag, sizes) for p in kernel.parts)
        assert apart - seconds == pytest.approx(DEFAULT.launch, rel=0.05)
