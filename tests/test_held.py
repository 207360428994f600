"""Held fusion without a GPU: the plan record, its checks, the space, codegen, prediction.

GEMVER, SGEMVT and ATAX each have a global barrier between two matrix passes.
A held plan runs both passes in one launch of resident blocks with one grid
barrier, the tiles the consumer reads again kept in registers and shared
memory. Options are offered only there, where the grid fits at one or two
blocks per SM; every kind of option compiles with nvcc for sm_90 with nothing
in local memory (the held registers really are registers); the checks say why
a pair cannot be held.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from fusec import nvcc
from fusec.cost.analytic import DEFAULT
from fusec.cost.registers import estimate
from fusec.emit.program import generate
from fusec.errors import PlanError
from fusec.families import build_kernel
from fusec.families.held import BAND_REGISTER_MARGIN, HeldKernel, held_matrix, why_not_held
from fusec.frontend import load_script
from fusec.ir.plan import HeldPlan, ProgramPlan, kernel_plan_from_json
from fusec.library.model import Geometry
from fusec.space.combinations import build_space
from fusec.space.implementations import TILE_SHAPES, by_time, load_phases
from fusec.space.striped import StripedFusion
from tests.helpers import DTYPES, ROOT, library, script_names

HELD = {"gemver": "B", "sgemvt": "A", "atax": "A"}  # the scripts that get held options, and what is held


def dag_of(script: str):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def space_of(script: str, n: int = 4096, dtype: str = "float32"):
    dag = dag_of(script)
    return build_space(dag, library(), dtype, {s: n for s in dag.sizes}, DEFAULT)


def held_options(space):
    """(plan, kernel, seconds) of every held option, over the pair slots."""
    return [o for slot in space.options if isinstance(slot, StripedFusion)
            for o in space.options[slot] if isinstance(o[0], HeldPlan)]


def most_held(script: str, dtype: str = "float32", n: int = 4096) -> tuple[HeldPlan, HeldKernel]:
    """The held option of the two-kernel cover that holds the largest share."""
    space = space_of(script, n, dtype)
    options = [o for o in held_options(space) if len(o[0].calls) == len(space.dag.calls)]
    plan, kernel, _ = max(options, key=lambda o: (o[1].held_fraction(), -o[2]))
    return plan, kernel


@pytest.mark.parametrize("script", script_names())
@pytest.mark.slow
def test_held_options_where_a_reduction_result_crosses_a_barrier(script):
    space = space_of(script)
    options = held_options(space)
    if script not in HELD:
        assert not options
        return
    assert options
    sms = DEFAULT.sms
    for plan, kernel, seconds in options:
        assert isinstance(kernel, HeldKernel) and seconds > 0
        assert plan.producer.shape == plan.consumer.shape and plan.producer.serial == plan.consumer.serial
        grid = kernel.grid(space.sizes)
        assert grid <= plan.per_sm * sms and plan.per_sm == -(-grid // sms) <= 2
        assert why_not_held(space.dag, plan, kernel.parts) is None
        if plan.registers or plan.shared:
            assert space.dag.value(kernel.held).label == HELD[script]
    # some hold most of a block's tiles (fp32 n = 4096: blocks of 32 tiles of 32 x 128)
    assert max(k.held_fraction() for _, k, _ in options) > 0.5
    for slot in space.options:  # both kinds in one sorted list
        times = [t for _, _, t in space.options[slot]]
        assert times == sorted(times)


@pytest.mark.slow
def test_no_held_options_where_the_grid_cannot_be_resident():
    # fp32 n = 16384: every tile shape's grid is past two blocks per SM; band shapes
    # are made for one or two blocks per SM, and only they are held there
    space = space_of("gemver", n=16384)
    options = held_options(space)
    assert options
    for plan, kernel, _ in options:
        assert plan.producer.geometry is Geometry.BAND and plan.consumer.geometry is Geometry.BAND
        assert kernel.grid(space.sizes) <= 2 * DEFAULT.sms
    assert not held_options(build_space(space.dag, library(), "float32", space.sizes, DEFAULT, shapes=TILE_SHAPES))


@pytest.mark.slow
def test_the_held_plan_round_trips_and_prints():
    plan, _ = most_held("gemver")
    again = kernel_plan_from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    text = ProgramPlan((plan,)).summary(dag_of("gemver"))
    assert text.startswith("B{") and f"held {plan.registers} in registers, {plan.shared} in shared" in text


@pytest.mark.slow
def test_why_not_held_names_the_problem():
    dag = dag_of("gemver")
    plan, kernel = most_held("gemver")
    parts = kernel.parts
    other = dataclasses.replace(plan.consumer, serial="cols" if plan.consumer.serial == "rows" else "rows")
    assert "shapes or serial axes differ" in why_not_held(dag, dataclasses.replace(plan, consumer=other))
    tiles = plan.producer.shape.iters
    assert f"more than the {tiles} of a block" in why_not_held(
        dag, dataclasses.replace(plan, registers=tiles, shared=1))
    assert "more than a block may have" in why_not_held(
        dag, dataclasses.replace(plan, registers=0, shared=tiles), parts)
    assert "they would spill" in why_not_held(dag, dataclasses.replace(plan, registers=tiles, shared=0), parts)
    assert "blocks per SM" in why_not_held(dag, dataclasses.replace(plan, per_sm=0))
    swapped = HeldPlan(plan.consumer, plan.producer, 0, 0)
    assert "come before" in why_not_held(dag, swapped)
    with pytest.raises(PlanError, match="held fusion of calls"):
        generate(dag, library(), ProgramPlan((dataclasses.replace(plan, consumer=other),)), "float32")


def test_a_staged_producer_holds_nothing():
    # ATAX's t = A x with sgemv's `staged` implementation has A's tile in shared memory,
    # not in registers in the consumer's mapping
    dag = dag_of("atax")
    plan, kernel = most_held("atax")
    staged = dataclasses.replace(plan.producer, implementations=("staged",))
    parts = (build_kernel(dag, library(), staged, "float32", 0), kernel.parts[1])
    assert held_matrix(dag, parts) is None
    assert "nothing to hold" in why_not_held(dag, dataclasses.replace(plan, producer=staged), parts)
    assert why_not_held(dag, dataclasses.replace(plan, producer=staged, registers=0, shared=0), parts) is None


@pytest.mark.slow
def test_the_kernel_keeps_and_takes_the_held_tiles():
    dag = dag_of("gemver")
    plan, _ = most_held("gemver")
    program = generate(dag, library(), ProgramPlan((plan,)), "float32")
    kernel = program.kernels[0]
    source = program.sources[0]
    slots = kernel.slots
    assert f"real held_registers[{plan.registers}][{slots}];" in source
    assert f"__launch_bounds__(BLOCK, {plan.per_sm})" in source
    # the producer keeps B after computing it, the consumer takes it instead of loading it
    assert source.count("held_registers[it][s] = r_v10_B[s]") == 1
    assert source.count("r_v10_B[s] = held_registers[it][s]") == 1
    assert source.count("fusec_grid_sync(fusec_arrivals, gridDim.x);") == 1
    assert source.index("held_registers[it][s] = r_v10_B[s]") < source.index("fusec_grid_sync(fusec_arrivals")
    # both serial loops are unrolled, so `it` is a constant in each copy
    assert len(re.findall(r"#pragma unroll\n\s*for \(int it = 0; it < ITERS; \+\+it, c\.(?:row|col)0 \+=", source)) == 2
    assert kernel.all_resident and kernel.schedule_counters({}) == 2
    assert kernel.dynamic_shared_bytes == plan.shared * slots * plan.block * 4
    # B and x cross inside the launch: not read through the non-coherent cache
    assert re.search(r"\breal\* g_v10_B,", source) and re.search(r"\breal\* g_v11_x,", source)


@pytest.mark.parametrize("script, producer_streams, consumer_streams", [
    ("gemver", True, True),    # A is read once; B is written by this launch, new every call
    ("sgemvt", False, False),  # A is read again, then kept for the next call on it
])
@pytest.mark.slow
def test_l2_keeps_what_is_read_again_in_the_launch_or_by_the_next_call(
        script, producer_streams, consumer_streams):
    """Evict-first only for a matrix read for the last time that changes from call
    to call: the producer keeps a matrix the consumer re-reads, and the consumer
    keeps the program's input matrices (a solver calls again on the same one)."""
    plan, kernel = most_held(script)
    producer, consumer = kernel.parts
    assert producer.stream_matrices == producer_streams
    assert consumer.stream_matrices == consumer_streams
    source = generate(dag_of(script), library(), ProgramPlan((plan,)), "float32").sources[0]
    assert re.findall(r"#define STREAM_MATRIX (\d)", source) == [
        str(int(producer_streams)), str(int(consumer_streams))]


@pytest.mark.slow
def test_prediction_rewards_the_held_share():
    space = space_of("gemver")
    dag, sizes = space.dag, space.sizes
    plan, kernel = most_held("gemver")
    assert kernel.held_fraction() > 0
    times = []
    for registers in (0, plan.registers):
        for shared in (0, plan.shared):
            k = build_kernel(dag, library(), dataclasses.replace(plan, registers=registers, shared=shared),
                             "float32", 0)
            times.append(DEFAULT.kernel_seconds(k, dag, sizes))
    assert times[0] > times[1] > times[3] and times[0] > times[2] > times[3]
    apart = sum(DEFAULT.kernel_seconds(p, dag, sizes) for p in kernel.parts)
    assert DEFAULT.kernel_seconds(kernel, dag, sizes) < apart


def test_a_held_kernel_sets_its_own_residency_and_the_features_take_it():
    """A held fusion's blocks per SM are its plan's, not what its registers would allow: the
    correction's waves are counted with them."""
    from fusec.cost.features import FEATURES, WAVES_RANGE, features
    space = space_of("gemver")
    plan, kernel = most_held("gemver")
    assert kernel.resident_per_sm == plan.per_sm and all(p.resident_per_sm is None for p in kernel.parts)
    target = DEFAULT.target
    more = dataclasses.replace(plan, per_sm=plan.per_sm + 1, registers=0, shared=0)  # nothing held: it fits
    for held in (kernel, build_kernel(space.dag, library(), more, "float32", 0)):
        expected = math.log2(held.grid(space.sizes) / (target.sms * held.plan.per_sm))
        got = features(held, space.dag, space.sizes, target).values[FEATURES.index("waves")]
        assert got == pytest.approx(min(max(expected, WAVES_RANGE[0]), WAVES_RANGE[1]))


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", HELD)
def test_held_programs_compile_with_their_registers_in_registers(script, dtype):
    """The most held option, one with nothing in registers, and one at two blocks per SM
    (fp64 n = 4096 needs two): ptxas must find no stack frame, which held registers
    indexed at run time would need."""
    dag = dag_of(script)
    options = [o for o in held_options(space_of(script, dtype=dtype)) if len(o[0].calls) == len(dag.calls)]
    picks = {max(options, key=lambda o: (o[1].held_fraction(), -o[2]))[0]: None}
    picks.update({next(o[0] for o in options if o[0].registers == 0): None})
    picks.update({o[0]: None for o in options[:1]})
    sources = [generate(dag, library(), ProgramPlan((plan,)), dtype).source for plan in picks]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        name = next(n for n in compiled.resources if "_b_" in n)
        assert re.search(rf"Function properties for {name}\s+0 bytes stack frame, 0 bytes spill stores",
                         compiled.log), compiled.log


def test_a_consumer_that_needs_the_whole_vector_may_be_held(tmp_path):
    # w = A^T x needs all of x = A^T y: no stripes, but after one grid barrier it has it
    script = tmp_path / "twice.script"
    script.write_text("matrix A[n, n];\nvector y[n], x[n], w[n];\ninput A, y;\n"
                      "x = sgemtv(A, y);\nw = sgemtv(A, x);\nreturn w;\n")
    dag = load_script(script, library())
    space = build_space(dag, library(), "float32", {"n": 4096}, DEFAULT)
    options = held_options(space)
    assert options and not [o for s in space.options if isinstance(s, StripedFusion)
                            for o in space.options[s] if not isinstance(o[0], HeldPlan)]
    plan, kernel, _ = max(options, key=lambda o: o[1].held_fraction())
    assert kernel.held_fraction() > 0 and dag.value(kernel.held).label == "A"


def test_the_tuner_measures_the_best_held_plans():
    space = space_of("sgemvt")
    top = space.top(4, twins=True)
    plans = {c.plan for c in top}
    for geometry in (Geometry.TILE, Geometry.BAND):  # the best held plan of each kind of part
        best = next(c for c in space.with_held()
                    if any(isinstance(k, HeldPlan) and k.producer.geometry is geometry for k in c.plan.kernels))
        assert best.plan in plans


# -- held band kernels -----------------------------------------------------------------------

def most_held_band(script: str, dtype: str = "float32", n: int = 4096) -> tuple[HeldPlan, HeldKernel]:
    """The held option of two band kernels over all the calls that holds the largest share."""
    space = space_of(script, n, dtype)
    options = [o for o in held_options(space) if len(o[0].calls) == len(space.dag.calls)
               and o[0].producer.geometry is Geometry.BAND]
    plan, kernel, _ = max(options, key=lambda o: (o[1].held_fraction(), -o[2]))
    return plan, kernel


@pytest.mark.parametrize("script", HELD)
@pytest.mark.slow
def test_two_band_kernels_may_be_held(script):
    """A band producer and band consumer of the same shape hold whole instances of
    rows: the matrix HELD names, a block's instances in registers then shared memory."""
    dag = dag_of(script)
    plan, kernel = most_held_band(script)
    assert plan.producer.shape == plan.consumer.shape
    assert dag.value(kernel.held).label == HELD[script]
    assert 0 < kernel.held_fraction() <= 1
    assert kernel.slots == plan.producer.shape.macros("float32")["BAND_ROWS"] * plan.producer.shape.pieces * 4
    source = generate(dag, library(), ProgramPlan((plan,)), "float32").sources[0]
    # the instances are kept and taken only where whole: each part's first `registers`
    # iterations unrolled (registers, then shared memory), the others rolled (shared memory)
    assert plan.registers and plan.shared
    assert source.count(f"if (c.full && it < {plan.registers}) {{") == 2
    assert source.count(f"if (c.full && it < {plan.registers + plan.shared}) {{") == 4
    assert len(re.findall(rf"#pragma unroll\n\s*for \(int it = 0; it < {plan.registers};"
                          r" \+\+it, c\.row0 \+= BAND_ROWS\)"
                          r"\s*\{\n\s*if \(c\.row0 >= rows\) continue;", source)) == 2
    assert source.count(f"for (int it = {plan.registers}; it < ITERS && c.row0 < rows; ++it, c.row0 += BAND_ROWS)") == 2
    assert "whole instances of rows held in registers" in source


@pytest.mark.slow
def test_only_a_kernel_holding_registers_unrolls_its_loops():
    """Held registers need constant indices; units held in shared memory do not, and
    the loops stay rolled (the unrolled kernel is many times the code). A band part
    unrolls only the iterations that hold registers."""
    dag = dag_of("gemver")
    unrolled = re.compile(r"#pragma unroll\n\s*for \(int it = 0; it < ITERS;")
    shared_only = ProgramPlan.from_json(TUNED_GEMVER_4096)
    assert shared_only.kernels[0].registers == 0 and shared_only.kernels[0].shared > 0
    source = generate(dag, library(), shared_only, "float32").source
    assert not unrolled.search(source)
    assert source.count("for (int it = 0; it < ITERS && c.row0 < rows; ++it, c.row0 += BAND_ROWS)") == 2
    assert "if (c.full && it < 7)" in source  # the shared instances found at run time
    plan, _ = most_held_band("gemver")
    assert plan.registers > 0
    source = generate(dag, library(), ProgramPlan((plan,)), "float32").source
    assert not unrolled.search(source)
    assert len(re.findall(rf"#pragma unroll\n\s*for \(int it = 0; it < {plan.registers};", source)) == 2


@pytest.mark.slow
def test_a_held_band_kernel_adds_with_atomics():
    """GEMVER's x = beta B^T y + z is added by the band producer's blocks with atomics
    into an accumulator that starts at zero: the launch is not bit for bit, and the
    space and the kernel agree on it."""
    from fusec.space.fusions import adds_with_atomics
    dag = dag_of("gemver")
    plan, kernel = most_held_band("gemver")
    assert kernel.zeroed_workspace and not kernel.reproducible
    assert adds_with_atomics(dag, library(), plan)
    assert ProgramPlan((plan,)).uses_band
    tile, tile_kernel = most_held("gemver")
    if tile.producer.geometry is Geometry.TILE:
        assert tile_kernel.reproducible and not tile_kernel.zeroed_workspace
        assert not adds_with_atomics(dag, library(), tile)


@pytest.mark.slow
def test_a_tile_part_and_a_band_part_are_not_held():
    dag = dag_of("gemver")
    band, _ = most_held_band("gemver")
    tile = next(o[0] for o in held_options(space_of("gemver"))
                if o[0].producer.geometry is Geometry.TILE and len(o[0].calls) == len(dag.calls))
    mixed = dataclasses.replace(band, consumer=tile.consumer, registers=0, shared=0)
    assert "both band kernels" in why_not_held(dag, mixed)


@pytest.mark.slow
def test_a_part_that_loads_ahead_may_hold_registers_within_bounds():
    """Band parts loading ahead may hold instances in registers (their loops are
    unrolled only over those); the space offers every count up to the band bounds,
    and a plan past them is refused with the reason."""
    from fusec.families.held import BAND_HELD_WORDS
    dag = dag_of("gemver")
    options = [o for o in held_options(space_of("gemver")) if o[0].producer.geometry is Geometry.BAND]
    ahead = [(p, k) for p, k, _ in options if p.producer.ahead or p.consumer.ahead]
    assert any(p.registers for p, _ in ahead)
    assert all(k.held_words <= BAND_HELD_WORDS and k.estimated_registers + 8 <= k.most_registers
               for _, k in ahead)
    counts = {p.registers for p, _ in ahead}
    assert counts == set(range(max(counts) + 1))  # every count, not every other
    plan = ProgramPlan.from_json(TUNED_GEMVER_4096).kernels[0]  # 256 threads of 4 pieces, 1 row: 16 words
    words = dataclasses.replace(plan, registers=4, shared=5)
    parts = tuple(build_kernel(dag, library(), p, "float32", 0) for p in words.parts)
    assert f"more than {BAND_HELD_WORDS}" in why_not_held(dag, words, parts)
    with pytest.raises(PlanError, match=f"more than {BAND_HELD_WORDS}"):
        generate(dag, library(), ProgramPlan((words,)), "float32")


@pytest.mark.slow
def test_a_held_band_kernel_refuses_rows_wider_than_it_holds():
    from fusec.errors import RowWidthError
    from fusec.runtime.program import check_row_widths
    plan, _ = most_held_band("gemver")
    kernels = generate(dag_of("gemver"), library(), ProgramPlan((plan,)), "float32").kernels
    widest = kernels[0].parts[0].macros()["BAND_COLS"]
    check_row_widths(kernels, dict(m=widest, n=widest))
    with pytest.raises(RowWidthError, match=f"holds whole rows of at most {widest} columns"):
        check_row_widths(kernels, dict(m=widest, n=widest + 4))


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", HELD)
def test_held_band_programs_compile_with_their_registers_in_registers(script, dtype):
    """The band option that holds most, and the best-predicted band option: no stack
    frame (the held instances really are in registers), nothing spilled."""
    dag = dag_of(script)
    options = [o for o in held_options(space_of(script, dtype=dtype))
               if len(o[0].calls) == len(dag.calls) and o[0].producer.geometry is Geometry.BAND]
    picks = {most_held_band(script, dtype)[0]: None, options[0][0]: None}
    sources = [generate(dag, library(), ProgramPlan((plan,)), dtype).source for plan in picks]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        name = next(n for n in compiled.resources if "_b_" in n)
        assert re.search(rf"Function properties for {name}\s+0 bytes stack frame, 0 bytes spill stores",
                         compiled.log), compiled.log


# The plan `fusec tune` measured fastest for GEMVER at fp32 n = 4096 (70.9 us on the H100,
# 2026-11-23): both band parts loading ahead, two blocks per SM, its estimate 110 registers
# of 128 (ptxas: 121, nothing spilled).
TUNED_GEMVER_4096 = (
    '[{"held": [{"ahead": true, "calls": [0, 1, 2], "implementations": ["band", "band", "band"],'
    ' "serial": "rows", "shape": {"block": 256, "geometry": "band", "iters": 16, "pieces": 4, "tile_rows": 1},'
    ' "steps": [[0, "load", "A"], [0, "load", "u"], [0, "load", "v"], [1, "load", "u"], [1, "load", "v"],'
    ' [2, "load", "x"], [0, "compute", null], [1, "compute", null], [1, "store", "B"], [2, "compute", null],'
    ' [2, "store", "y"]]}, {"ahead": true, "calls": [3], "implementations": ["band"], "serial": "rows",'
    ' "shape": {"block": 256, "geometry": "band", "iters": 16, "pieces": 4, "tile_rows": 1},'
    ' "steps": [[3, "load", "A"], [3, "load", "x"], [3, "compute", null], [3, "store", "y"]]}],'
    ' "per_sm": 2, "registers": 0, "shared": 7}]')


@pytest.mark.nvcc
def test_a_tuned_held_band_plan_near_the_register_cap_builds_and_fits():
    """The register estimate is a guide, not the judge: a plan measured fastest stays
    in the space and builds, and ptxas fits it without spilling."""
    dag = dag_of("gemver")
    plan = ProgramPlan.from_json(TUNED_GEMVER_4096)
    held = plan.kernels[0]
    assert why_not_held(dag, held) is None
    assert held in [o[0] for o in held_options(space_of("gemver"))]
    source = generate(dag, library(), plan, "float32").source
    compiled = nvcc.compile_many([source], "sm_90")[0]
    assert re.search(r"0 bytes stack frame, 0 bytes spill stores", compiled.log), compiled.log


@pytest.mark.parametrize("n", [4096, 16384])
def test_a_held_consumer_finds_in_l2_only_the_last_of_the_producers_pass(n):
    """The consumer starts after the producer has passed over the whole matrix, so of
    what it re-reads L2 holds at most STRIPE_L2_SHARE of its size, at STRIPE_REREAD_COST
    a byte; the rest comes from DRAM again. At fp32 n = 16384 (1 GiB) pricing all of it
    from L2 ranked a held band SGEMVT first at 566 us, which measured 714 (the tuned
    striped plan: 575). What is not read from DRAM is saved at the rate the consumer
    streams alone, the bandwidth at most. A band consumer's column-sum atomics come on
    top, whole: bytes from chip do not shorten them; a band producer's where they
    outlast its pass."""
    from fusec.cost.model import traffic
    L2_BYTES = DEFAULT.target.l2_bytes
    from fusec.families.band import band_atomic_seconds
    from fusec.families.held import GRID_BARRIER_SECONDS, held_part_seconds
    from fusec.families.striped import STRIPE_L2_SHARE, STRIPE_REREAD_COST
    space = space_of("sgemvt", n)
    dag, sizes = space.dag, space.sizes
    options = [o for o in held_options(space) if len(o[0].calls) == len(dag.calls)]
    assert options
    matrix = n * n * 4
    for plan, kernel, _ in options[:20]:
        alone = [held_part_seconds(DEFAULT, kernel, p, dag, sizes, DEFAULT.launch, DEFAULT.bandwidth)
                 for p in kernel.parts]
        saved = sum(alone) - DEFAULT.kernel_seconds(kernel, dag, sizes)
        unheld = (1 - kernel.held_fraction()) * matrix
        from_l2 = min(unheld, STRIPE_L2_SHARE * L2_BYTES)
        rate = min(DEFAULT.bandwidth, traffic(kernel.parts[1], dag, sizes, L2_BYTES) / (alone[1] - DEFAULT.launch))
        expected = (DEFAULT.launch - GRID_BARRIER_SECONDS
                    + (matrix - unheld + from_l2 * (1 - STRIPE_REREAD_COST)) / rate)
        if plan.finish_after:  # and the producer's ticket per column sum
            expected += DEFAULT.finish_tile * len(kernel.parts[0].reductions)
        producer_part, consumer_part = kernel.parts
        slots = DEFAULT.sms * plan.per_sm
        if consumer_part.plan.geometry is Geometry.BAND:
            expected -= band_atomic_seconds(DEFAULT, consumer_part, sizes, slots)
        if producer_part.plan.geometry is Geometry.BAND:  # beyond the producer's pass only
            producer = alone[0] - DEFAULT.launch
            if plan.stores_after:
                producer -= kernel.held_fraction() * matrix / DEFAULT.bandwidth
            expected -= max(0.0, band_atomic_seconds(DEFAULT, producer_part, sizes, slots) - producer)
        assert saved == pytest.approx(expected)
        if n == 16384:  # L2 is a small part of the matrix: little is saved
            assert saved < 0.1 * sum(alone)


def tuned_gemver_with(**options) -> HeldPlan:
    return dataclasses.replace(ProgramPlan.from_json(TUNED_GEMVER_4096).kernels[0], **options)


def test_held_instances_may_be_stored_after_the_barrier():
    """stores_after: the producer skips the store of each held instance of B, and the
    consumer stores it from chip, evict-first, as it takes it; the rest as before."""
    dag = dag_of("gemver")
    plan = tuned_gemver_with(stores_after=True)
    assert why_not_held(dag, plan) is None
    generated = generate(dag, library(), ProgramPlan((plan,)), "float32")
    producer, consumer = generated.source.split("namespace k0p1_", 1)
    assert re.search(r"if \(!\(c\.full && it < 7\)\) \{\n\s*// [^\n]*store B \[band_store\]\n\s*band_store\(",
                     producer)
    taken = consumer.split("if (c.full && it < 7) {")[1].split("} else {")[0]
    assert "fusec_store16<true>(const_cast<real*>(g_v10_B)" in taken
    assert "fusec_store16<true>" not in generate(dag, library(), ProgramPlan((tuned_gemver_with(),)),
                                                 "float32").source.split("namespace k0p1_", 1)[1]
    text = ProgramPlan((plan,)).to_json()
    assert json.loads(text)[0]["stores_after"] is True and ProgramPlan.from_json(text) == ProgramPlan((plan,))
    assert "stores_after" not in ProgramPlan.from_json(TUNED_GEMVER_4096).to_json()  # as made before it
    assert "stored after" in ProgramPlan((plan,)).summary(dag)


def test_column_sums_may_be_finished_after_the_barrier():
    """finish_after: no tickets and no last block; the producer adds into the half of a
    doubled accumulator its launch's round picks and one block clears the other half;
    after the barrier every block finishes its own columns of x, block 0 stores x, and
    the consumer takes them instead of loading x."""
    dag = dag_of("gemver")
    plan = tuned_gemver_with(finish_after=True)
    assert why_not_held(dag, plan) is None
    generated = generate(dag, library(), ProgramPlan((plan,)), "float32")
    source = generated.source
    assert "fusec_came_last(cnt_" not in source and "atomicAdd(cnt_v11_x" not in source
    assert "const unsigned long long launch_round = fusec_round(fusec_arrivals, gridDim.x);" in source
    assert "band_cols_partial_store(r_v11_x, ws_v11_x + fusec_half, c);" in source
    assert "ws_v11_x[other + i] = real(0);" in source
    consumer = source.split("namespace k0p1_", 1)[1]
    assert "r_v11_x[s] = given_v11_x[s];" in consumer and "band_cols_load(g_v11_x" not in consumer
    sync = source.index("fusec_grid_sync(fusec_arrivals, gridDim.x);")
    assert sync < source.index("::finish_sums(") < source.index("k0p1_sgemv_a::run(")
    assert "if (item == 0) g_v11_x[i] = sums_v11_x[s];" in source
    kernel = generated.kernels[0]
    before = generate(dag, library(), ProgramPlan((tuned_gemver_with(),)), "float32").kernels[0]
    sizes = dict(m=4096, n=4096)
    reduction = kernel.reductions[0]
    assert kernel.reduction_buffers(reduction, sizes)[0] == 2 * before.reduction_buffers(reduction, sizes)[0]
    assert kernel.zeroed_workspace and not kernel.reproducible
    assert DEFAULT.kernel_seconds(kernel, dag, sizes) == pytest.approx(
        DEFAULT.kernel_seconds(before, dag, sizes) - DEFAULT.finish_tile)
    assert ProgramPlan.from_json(ProgramPlan((plan,)).to_json()) == ProgramPlan((plan,))


@pytest.mark.slow
def test_the_options_after_the_barrier_are_refused_where_they_mean_nothing():
    gemver, sgemvt, atax = dag_of("gemver"), dag_of("sgemvt"), dag_of("atax")
    assert "nothing is held" in why_not_held(gemver, tuned_gemver_with(shared=0, stores_after=True))
    tile = next(o[0] for o in held_options(space_of("gemver"))
                if o[0].producer.geometry is Geometry.TILE and len(o[0].calls) == 4 and o[0].shared)
    for option in ("stores_after", "finish_after"):
        assert "band parts only" in why_not_held(gemver, dataclasses.replace(tile, **{option: True}))

    def why(dag, plan):
        return why_not_held(dag, plan, tuple(build_kernel(dag, library(), p, "float32", 0)
                                             for p in plan.parts))

    band, _ = most_held_band("sgemvt")
    assert "the producer stores no A" in why(sgemvt, dataclasses.replace(band, stores_after=True))
    assert why(sgemvt, dataclasses.replace(band, finish_after=True)) is None
    band, _ = most_held_band("atax")  # t = A x is a row sum, whole in the block: nothing to finish
    assert "the producer has none" in why(atax, dataclasses.replace(band, finish_after=True))
    with pytest.raises(PlanError, match="band parts only"):
        generate(gemver, library(), ProgramPlan((dataclasses.replace(tile, stores_after=True),)), "float32")


@pytest.mark.slow
def test_the_space_offers_the_options_after_the_barrier():
    options = [o[0] for o in held_options(space_of("gemver")) if o[0].producer.geometry is Geometry.BAND]
    assert {(p.stores_after, p.finish_after) for p in options} == {(False, False), (True, False), (False, True),
                                                                    (True, True)}
    tile = [o[0] for o in held_options(space_of("gemver")) if o[0].producer.geometry is Geometry.TILE]
    assert not any(p.stores_after or p.finish_after for p in tile)


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_options_after_the_barrier_compile_without_spilling(dtype):
    dag = dag_of("gemver")
    bases = ((tuned_gemver_with(),) if dtype == "float32" else ()) + (most_held_band("gemver", dtype)[0],)
    plans = [dataclasses.replace(base, stores_after=s, finish_after=f) for base in bases
             for s in (False, True) for f in (False, True)]
    sources = [generate(dag, library(), ProgramPlan((plan,)), dtype).source for plan in plans]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        name = next(n for n in compiled.resources if "_b_" in n)
        assert re.search(rf"Function properties for {name}\s+0 bytes stack frame, 0 bytes spill stores",
                         compiled.log), compiled.log


@pytest.mark.parametrize("dtype, n", [("float32", 4096), ("float64", 2048)])
@pytest.mark.slow
def test_held_band_ties_go_to_fewer_load_phases_where_registers_leave_room(dtype, n):
    """Predicted alike, one load phase measured faster than three in most held GEMVER
    pairs; at the register margin loading at once spilled, so those ties are left alone,
    as a held tile plan's are."""
    options = held_options(space_of("gemver", n, dtype))
    room = lambda o: o[1].most_registers - o[1].estimated_registers  # noqa: E731
    band = [o for o in options if o[0].producer.geometry is Geometry.BAND]
    roomy = [o for o in band if room(o) > BAND_REGISTER_MARGIN]
    assert roomy and all(by_time(o)[1] == sum(load_phases(p) for p in o[0].parts) for o in roomy)
    assert all(by_time(o)[1] == 0 for o in options if o not in roomy)
    if dtype == "float64":  # some estimates there leave just the margin
        assert any(room(o) == BAND_REGISTER_MARGIN for o in band)
    twins = {}  # in the space's order: the same plan but its steps, predicted alike
    for o in roomy:
        twins.setdefault((o[0].layout(), o[0].registers, o[0].shared, o[2]), []).append(o)
    ordered = [t for t in twins.values() if len({by_time(o)[1] for o in t}) > 1]
    assert ordered and all(by_time(t[0])[1] == min(by_time(o)[1] for o in t) for t in ordered)


def test_held_stores_after_the_barrier_move_into_the_consumer_s_pass():
    """Measured faster in every pair (experiments/results/h100-held-after.md and
    h100-held-grid.md): the producer's pass writes only what is re-read, so the model
    finds STORES_AFTER_L2_SHARE of L2 holding it, where it found STRIPE_L2_SHARE; and
    the held tiles' stores leave the producer's pass for the consumer's, where they
    cost STORES_AFTER_EXPOSED of their DRAM time beside its stream."""
    from fusec.cost.model import traffic
    L2_BYTES = DEFAULT.target.l2_bytes
    from fusec.families.held import STORES_AFTER_EXPOSED, STORES_AFTER_L2_SHARE, held_part_seconds
    from fusec.families.striped import STRIPE_L2_SHARE, STRIPE_REREAD_COST
    dag, sizes = dag_of("gemver"), dict(m=4096, n=4096)
    kernels = [generate(dag, library(), ProgramPlan((tuned_gemver_with(stores_after=s),)), "float32").kernels[0]
               for s in (False, True)]
    matrix = 4096 * 4096 * 4
    unheld = (1 - kernels[0].held_fraction()) * matrix
    more = min(unheld, STORES_AFTER_L2_SHARE * L2_BYTES) - min(unheld, STRIPE_L2_SHARE * L2_BYTES)
    assert more > 0
    gained = DEFAULT.kernel_seconds(kernels[0], dag, sizes) - DEFAULT.kernel_seconds(kernels[1], dag, sizes)
    consumer = kernels[0].parts[1]  # the same part in both: saved at its rate alone
    alone = held_part_seconds(DEFAULT, kernels[0], consumer, dag, sizes, DEFAULT.launch, DEFAULT.bandwidth)
    rate = min(DEFAULT.bandwidth, traffic(consumer, dag, sizes, L2_BYTES) / (alone - DEFAULT.launch))
    stores = kernels[1].held_fraction() * matrix / DEFAULT.bandwidth
    left = alone - DEFAULT.launch - (matrix - unheld + min(unheld, STORES_AFTER_L2_SHARE * L2_BYTES)
                                     * (1 - STRIPE_REREAD_COST)) / rate
    assert left + STORES_AFTER_EXPOSED * stores > stores  # the stores hide behind the stream
    assert gained == pytest.approx(more * (1 - STRIPE_REREAD_COST) / rate + (1 - STORES_AFTER_EXPOSED) * stores)


@pytest.mark.slow
def test_held_stores_after_the_barrier_take_at_least_their_dram_time():
    """With every instance held the consumer has almost nothing left to read: its pass
    lasts as long as DRAM takes the held stores (fp64 n = 2048, GEMVER's B of 32 MB all
    held, 1 instance in registers and 7 in shared memory: measured 32.4 us with the
    stores after, 36.8 without; experiments/results/h100-held-grid.md)."""
    from fusec.families.held import GRID_BARRIER_SECONDS, held_part_seconds
    dag, sizes = dag_of("gemver"), dict(m=2048, n=2048)
    plan, _ = most_held_band("gemver", "float64", 2048)
    plan = dataclasses.replace(plan, stores_after=True, finish_after=False)
    kernel = generate(dag, library(), ProgramPlan((plan,)), "float64").kernels[0]
    assert kernel.held_fraction() == 1.0
    producer = held_part_seconds(DEFAULT, kernel, kernel.parts[0], dag, sizes, DEFAULT.launch, DEFAULT.bandwidth)
    stores = 2048 * 2048 * 8 / DEFAULT.bandwidth
    assert DEFAULT.kernel_seconds(kernel, dag, sizes) == pytest.approx(
        DEFAULT.launch + (producer - DEFAULT.launch - stores) + stores + GRID_BARRIER_SECONDS)


def test_a_held_fusion_s_band_parts_are_priced_resident_as_its_blocks_are():
    """Alone, a band kernel's blocks per SM are what its registers allow; in a held
    fusion they are the fusion's ``per_sm``, every block in one wave. GEMVER's consumer
    at fp32 n = 4096 (128 blocks of 512 threads) fits 2 to an SM without loading ahead
    and 1 with: alone the first is priced for a half-empty wave, about 2x the second
    (74.8 against 39.1 us with the H100's database), and plans holding 3 instances in
    registers beside it (measured 57.5-58.4 us, the best) went unmeasured. In the
    fusion both cost the same."""
    from fusec.cost.model import natural_blocks
    from fusec.families.held import held_part_seconds
    dag, sizes = dag_of("gemver"), dict(m=4096, n=4096)
    shipped = json.loads(TUNED_GEMVER_4096)  # as tuned on 2026-11-23: 512 threads of 2 pieces, 2 rows
    for part in shipped[0]["held"]:
        part["shape"].update(block=512, pieces=2, tile_rows=2)
    shipped[0].update(per_sm=1, registers=2, shared=7)
    shipped[0]["held"][0]["ahead"] = False
    kernels = []
    for ahead in (False, True):
        shipped[0]["held"][1]["ahead"] = ahead
        kernels.append(generate(dag, library(), ProgramPlan.from_json(json.dumps(shipped)), "float32").kernels[0])
    consumers = [k.parts[1] for k in kernels]
    assert [natural_blocks(estimate(c), c.shared_reals * 4, c.block, DEFAULT.target)
            for c in consumers] == [2, 1]
    alone = [DEFAULT.kernel_seconds(c, dag, sizes) for c in consumers]
    assert alone[0] > 1.5 * alone[1]
    held = [held_part_seconds(DEFAULT, k, c, dag, sizes, DEFAULT.launch, DEFAULT.bandwidth)
            for k, c in zip(kernels, consumers)]
    assert held[0] == pytest.approx(held[1]) and held[1] == pytest.approx(alone[1])


@pytest.mark.parametrize("n, shows", [(512, True), (4096, False)])
def test_a_held_producers_column_sum_atomics_count_only_beyond_its_pass(n, shows):
    """SGEMVT's held band plans: x's column sums are the producer's (w's row sums add
    none), and their atomics cost the held kernel only what outlasts the producer's
    pass: at fp64 n = 512 (a 2 MB matrix) they do, at n = 4096 its pass hides them."""
    from fusec.families.band import band_atomic_seconds
    from fusec.families.held import held_part_seconds
    space = space_of("sgemvt", n, "float64")
    dag, sizes = space.dag, space.sizes
    options = [o for o in held_options(space) if len(o[0].calls) == len(dag.calls)
               and all(p.plan.geometry is Geometry.BAND for p in o[1].parts) and not o[0].stores_after]
    assert options
    free = dataclasses.replace(DEFAULT, atomic_line_add=0.0)
    for plan, kernel, _ in options[:10]:
        producer_part, consumer_part = kernel.parts
        assert producer_part.reductions and not consumer_part.reductions
        queued = band_atomic_seconds(DEFAULT, producer_part, sizes, DEFAULT.sms * plan.per_sm)
        producer = held_part_seconds(DEFAULT, kernel, producer_part, dag, sizes, DEFAULT.launch,
                                     DEFAULT.bandwidth) - DEFAULT.launch
        added = DEFAULT.kernel_seconds(kernel, dag, sizes) - free.kernel_seconds(kernel, dag, sizes)
        assert added == pytest.approx(max(0.0, queued - producer))
        assert (added > 0) == shows
