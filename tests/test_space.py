"""The optimization space (paper §3.2, §4.2), on the real BLAS library, no GPU.

Illegal fusions are never produced; every implementation the space holds
can be built; dominated implementations are pruned; combinations cover every
call in a launch order that respects the DAG and come out best-first.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from fusec.cost.analytic import DEFAULT
from fusec.families import build_kernel
from fusec.ir.plan import COLS
from fusec.library.model import Geometry
from fusec.space.combinations import build_space
from fusec.space.fusions import Fusion, fusions, why_not_fusible
from fusec.space.implementations import load_phases
from tests.helpers import library, script_dag, script_names

SIZES = {"m": 4096, "n": 2048}


def dag_of(script):
    return script_dag(script)


def sizes_of(dag):
    return {s: SIZES.get(s, 4096) for s in dag.sizes}


# Multi-call fusions each script must have, and nothing else.
EXPECTED = {
    "atax": {(0, 1)}, "sgemvt": set(), "sgemv": set(), "sscal": set(), "madd": set(),
    "bicgk": {(0, 1)}, "axpydot": {(0, 1)}, "vadd": {(0, 1)}, "waxpby": {(0, 1)},
    "gesummv": {(0, 1)}, "gemver": {(0, 1), (1, 2), (0, 1, 2)},
}  # ATAX's in the band geometry only (t's rows are whole in a block that owns whole rows)


@pytest.mark.parametrize("script", script_names())
def test_fusions_are_exactly_the_legal_ones(script):
    dag = dag_of(script)
    found = fusions(dag, library())
    multi = {f.calls for f in found if len(f) > 1}
    assert multi == EXPECTED[script]
    assert {f.calls for f in found if len(f) == 1} == {(c.id,) for c in dag.calls}  # every call alone
    for fusion in found:
        assert (why_not_fusible(dag, library(), fusion.calls) is None
                or why_not_fusible(dag, library(), fusion.calls, Geometry.BAND) is None)
    for size in range(2, len(dag.calls) + 1):  # every subset left out breaks a rule, in both geometries
        for subset in itertools.combinations(range(len(dag.calls)), size):
            if subset not in multi:
                assert why_not_fusible(dag, library(), subset) is not None
                assert why_not_fusible(dag, library(), subset, Geometry.BAND) is not None


@pytest.mark.parametrize("script,calls,reason", [
    ("atax", (0, 1), "final result of a reduction"),  # y = A^T (A x) needs all of A x
    ("sgemvt", (0, 1), "final result of a reduction"),
    ("gemver", (2, 3), "final result of a reduction"),  # w = alpha B x needs all of x
    ("gemver", (0, 2), "not convex"),  # the second sger lies between them
    ("gesummv", (0, 2), "nesting depths"),  # a gemv and a vector map
    ("gesummv", (1, 2), "nesting depths"),
])
def test_why_a_fusion_is_illegal(script, calls, reason):
    assert reason in why_not_fusible(dag_of(script), library(), calls)


@pytest.mark.parametrize("script", script_names())
@pytest.mark.slow
def test_every_implementation_builds_and_covers_are_ordered(script):
    dag = dag_of(script)
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    for fusion, options in space.options.items():
        assert options, f"fusion {fusion} has no implementation"
        for plan, kernel, seconds in options[:20]:
            build_kernel(dag, library(), plan, "float32", 0)  # emits without PlanError
            assert seconds > 0
        times = [t for _, _, t in options]
        assert times == sorted(times)
    for cover in space.covers:
        assert sorted(c for f in cover for c in f.calls) == [c.id for c in dag.calls]
        done: set[int] = set()
        for fusion in cover:  # launch order: every producer's kernel runs first
            for call in fusion.calls:
                assert set(dag.predecessors(call)) - set(fusion.calls) <= done
            done |= set(fusion.calls)


def test_ranked_is_best_first_complete_and_without_repeats():
    dag = dag_of("bicgk")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    everything = list(space.ranked())
    assert len(everything) == space.combination_count
    assert len({c.plan for c in everything}) == len(everything)
    times = [c.predicted for c in everything]
    assert times == sorted(times)
    assert everything[0].plan == space.best().plan
    assert abs(everything[0].predicted - sum(everything[0].kernel_times)) < 1e-12


@pytest.mark.slow
def test_sample_is_uniform_over_distinct_combinations_of_the_space():
    dag = dag_of("gemver")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    top = {c.plan for c in itertools.islice(space.ranked(), 10)}
    sample = space.sample(100, np.random.default_rng(1), exclude=top)
    assert len({c.plan for c in sample}) == 100
    assert not top & {c.plan for c in sample}
    fused = sum(len(c.plan.kernels) == 2 for c in sample)  # covers weighted by their size
    share = sum(len(space.options[f]) for f in space.options if len(f) == 3) * len(
        space.options[Fusion((3,))]) / space.combination_count
    assert abs(fused / 100 - share) < 0.15


def test_fused_bicgk_is_first_and_never_mixes_register_and_shared_tiles():
    dag = dag_of("bicgk")
    space = build_space(dag, library(), "float32", {"m": 16384, "n": 16384}, DEFAULT)
    assert space.best().fused_calls == ((0, 1),)
    # the staged sgemv keeps A in shared memory, sgemtv in registers: never in one kernel
    for plan, _, _ in space.options[Fusion((0, 1))]:
        assert plan.implementations[0] == ("band" if plan.geometry is Geometry.BAND else "registers")


def test_a_vector_kernel_of_one_block_is_priced_without_a_grids_finish():
    """One block's partial is its dot (fusec.emit.kernel writes it back, no ticket): one round
    of the finish, no counter; two blocks take tickets and the last sums both partials."""
    dag = dag_of("axpydot")
    space = build_space(dag, library(), "float32", {"n": 4096}, DEFAULT)
    ((_, kernel, _),) = [o for o in space.options[Fusion((0, 1))] if o[0] == space.best().plan.kernels[0]]
    assert kernel.plan.geometry is Geometry.VECTOR and kernel.grid({"n": 4096}) == 1
    assert DEFAULT.reduction_seconds(kernel, {"n": 4096}) == (0.0, DEFAULT.finish_round)
    sizes = {"n": 4096 + 1}
    assert kernel.grid(sizes) == 2
    assert DEFAULT.reduction_seconds(kernel, sizes) == pytest.approx(
        (2 * DEFAULT.atomic, DEFAULT.finish_tile + DEFAULT.finish_round))


def test_a_slot_is_priced_as_launched_alone_and_a_part_as_a_part():
    """The space's options are kernels as a program launches them: a BiCGK tile kernel alone
    on the reference GPU (dependent launches) sums its tiles apart, priced by sums_seconds (a
    fixed part and its partials read back) with no counters. As a part of a fusion it is the
    kernel built without turning (lower.part_of, the same value), its sums with its last
    block, and priced so (space.implementations.as_parts)."""
    from fusec.lower.kernel import part_of
    from fusec.space.implementations import as_parts
    dag = dag_of("bicgk")
    sizes = {"m": 3000, "n": 5000}
    space = build_space(dag, library(), "float32", sizes, DEFAULT)
    options = [o for o in space.options[Fusion((0, 1))] if o[0].geometry is Geometry.TILE]
    plan, kernel, seconds = options[0]
    assert kernel.turns and kernel.sums_apart and seconds == DEFAULT.kernel_seconds(kernel, dag, sizes)
    partials = sum(DEFAULT._arrivals(kernel, r, sizes)[0] * -(-sizes["m" if r.axis == COLS else "n"] // width) * width
                   for r in kernel.reductions for width in [DEFAULT._arrivals(kernel, r, sizes)[1]])
    assert DEFAULT.reduction_seconds(kernel, sizes) == pytest.approx(
        (0.0, DEFAULT.sums_launch + partials * 4 / DEFAULT.sums_rate), rel=1e-12)
    part = part_of(kernel)
    assert part == build_kernel(dag, library(), plan, "float32", 0)  # what the fusion's family builds
    assert not part.turns and not part.sums_apart and part.shared_reals >= plan.shape.block
    counters, finish = DEFAULT.reduction_seconds(part, sizes)
    assert counters > 0 and finish != DEFAULT.reduction_seconds(kernel, sizes)[1]
    parts = as_parts(options, DEFAULT, dag, sizes)
    assert {p for p, _, _ in parts} == {p for p, _, _ in options}
    assert all(k == part_of(dict((o[0], o[1]) for o in options)[p]) and t == DEFAULT.kernel_seconds(k, dag, sizes)
               for p, k, t in parts)
    assert [t for _, _, t in parts] == sorted(t for _, _, t in parts)


@pytest.mark.parametrize("script", ["gemver", "gesummv", "atax", "sgemvt"])
def test_a_part_made_of_a_kernel_alone_is_the_part_built(script):
    """lower.part_of undoes exactly what a kernel alone adds (the direction, the blocks kept in
    L2, the sums apart and their shared memory) for every implementation the space offers."""
    from fusec.lower.kernel import part_of
    from fusec.space.implementations import implementations
    from fusec.target import resolve
    dag = dag_of(script)
    target = resolve("h200")
    for fusion in fusions(dag, library()):
        for plan, kernel in implementations(dag, library(), fusion, "float64", None, {s: 3000 for s in dag.sizes},
                                            target):
            assert part_of(kernel) == build_kernel(dag, library(), plan, "float64", 0, target=target), plan


def test_orders_dominated_in_on_chip_memory_are_pruned():
    """Fused GESUMMV with both gemvs staged in shared memory: loading every tile
    first keeps both tiles alive at once, loading each before its compute lets
    them share memory; the first is dominated and pruned."""
    dag = dag_of("gesummv")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    staged = [(p, k) for p, k, _ in space.options[Fusion((0, 1))] if p.implementations == ("staged", "staged")]
    assert staged
    assert all(load_phases(p) == 2 for p, _ in staged)  # the loads-first order is gone
    registers = [p for p, _, _ in space.options[Fusion((0, 1))] if p.implementations == ("registers", "registers")]
    assert {load_phases(p) for p in registers} == {1, 2}  # equal memory: both orders kept
    plan, kernel = staged[0]
    regions = {e.value: e.region for e in kernel.elements if e.region}
    a, b = (dag.call(0).args[0], dag.call(1).args[0])
    assert regions[a].offset == regions[b].offset  # A's tile memory is reused for B's


def test_barriers_only_where_mappings_differ_or_memory_is_reused():
    dag = dag_of("gesummv")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    options = space.options[Fusion((0, 1))]
    plan, kernel, _ = next(o for o in options if o[0].implementations == ("registers", "registers"))
    assert not any(op.barrier for op in kernel.ops)  # registers with one mapping: no barrier
    plan, kernel, _ = next(o for o in options if o[0].implementations == ("staged", "staged"))
    loads = [i for i, op in enumerate(kernel.ops) if op.step and op.step.kind.value == "load"]
    computes = [i for i, op in enumerate(kernel.ops) if op.step and op.step.kind.value == "compute"]
    for c in computes:  # read one row per thread after rows of threads wrote the tile
        assert any(kernel.ops[i].barrier for i in range(c, max(i for i in loads if i < c), -1))
    second_load = [i for i in loads if i > computes[0]][0]
    # B's tile reuses A's words while A is still read: a barrier before it is written
    assert any(kernel.ops[i].barrier for i in range(computes[0] + 1, second_load + 1))


@pytest.mark.slow
def test_layouts_are_each_layout_of_the_heaviest_kernel_once_at_its_best():
    """Space.layouts against the whole ranking: in each cover the kernel predicted slowest varies
    its layout (routine order left out), the others are at their best, and each layout comes
    once, as its best-predicted combination, best first."""
    dag = dag_of("bicgk")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    best = {slot: options[0][0] for slot, options in space.options.items()}

    def key(combination):
        cover = tuple(k.calls for k in combination.plan.kernels)
        slots = [next(s for s in space.options if s.calls == k.calls and any(
            o[0] == k for o in space.options[s])) for k in combination.plan.kernels]
        heaviest = max(range(len(slots)), key=lambda i: space.options[slots[i]][0][2])
        if any(k != best[s] for i, (k, s) in enumerate(zip(combination.plan.kernels, slots)) if i != heaviest):
            return None  # a light kernel not at its best: not a layout's best combination
        return cover, combination.plan.kernels[heaviest].layout()

    expected = {}
    for combination in space.ranked():  # best first: the first of each key is its best
        k = key(combination)
        if k is not None and k not in expected:
            expected[k] = combination.predicted
    found = space.layouts(10**6)
    assert len(found) == len(expected) < space.combination_count
    assert {key(c) for c in found} == set(expected)
    assert all(abs(c.predicted - expected[key(c)]) < 1e-15 for c in found)
    times = [c.predicted for c in found]
    assert times == sorted(times)
    assert found[0].plan == space.best().plan
    assert [c.plan for c in space.layouts(7)] == [c.plan for c in found[:7]]
    # twins follow a horizontal fusion, as in Space.top
    with_twins = space.layouts(len(found), twins=True)
    assert len(with_twins) > len(found) and {c.plan for c in found} <= {c.plan for c in with_twins}


def test_a_layout_is_the_plan_without_its_routine_order():
    dag = dag_of("gesummv")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    fused = next(s for s in space.options if len(s.calls) == 2 and type(s) is Fusion)
    plans = [p for p, _, _ in space.options[fused]]
    a = plans[0]
    other_order = next(p for p in plans if p.steps != a.steps and p.shape == a.shape
                       and p.implementations == a.implementations and p.serial == a.serial)
    assert a.layout() == other_order.layout() and a.layout().steps == ()
    assert next(p for p in plans if p.shape != a.shape).layout() != a.layout()


def test_vector_kernels_offer_each_l2_policy_and_tile_kernels_only_the_rule():
    """A vector kernel's plans come in the three L2 policies, the same shapes and orders
    in each, plain ranked first where the prediction ties; tile kernels keep L2_PLAIN
    (their STREAM_MATRIX is set by rule). The policy reaches the kernel as its macros."""
    from fusec.ir.plan import L2_EVICT_LOADS, L2_NAMES, L2_PLAIN, L2_STREAM_STORES
    dag = dag_of("waxpby")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    plans = [p for p, _, _ in space.options[Fusion((0, 1))]]
    by_policy = {l2: {dataclasses.replace(p, l2=L2_PLAIN) for p in plans if p.l2 == l2} for l2 in L2_NAMES}
    assert by_policy[L2_PLAIN] and by_policy[L2_PLAIN] == by_policy[L2_EVICT_LOADS] == by_policy[L2_STREAM_STORES]
    assert plans[0].l2 == L2_PLAIN
    for plan, kernel, _ in space.options[Fusion((0, 1))][:3]:
        expected = {"STREAM_LOADS": int(plan.l2 == L2_EVICT_LOADS), "STREAM_STORES": int(plan.l2 == L2_STREAM_STORES)}
        assert {k: kernel.macros()[k] for k in expected} == expected
    gemv = dag_of("sgemv")
    tile_space = build_space(gemv, library(), "float32", sizes_of(gemv), DEFAULT)
    assert {p.l2 for options in tile_space.options.values() for p, _, _ in options} == {L2_PLAIN}


def test_a_plan_keeps_its_l2_policy_through_json():
    from fusec.ir.plan import L2_STREAM_STORES, KernelPlan, ProgramPlan
    dag = dag_of("vadd")
    space = build_space(dag, library(), "float32", sizes_of(dag), DEFAULT)
    plan = next(p for options in space.options.values() for p, _, _ in options if p.l2 == L2_STREAM_STORES)
    data = plan.to_json()
    assert data["l2"] == "st.cs" and KernelPlan.from_json(data) == plan
    plain = dict(data)
    del plain["l2"]  # plans written before the policy existed read as plain
    assert KernelPlan.from_json(plain).l2 == 0
    with pytest.raises(ValueError, match="unknown L2 policy 'ld.nc'"):
        KernelPlan.from_json(dict(data, l2="ld.nc"))
    assert ",st.cs" in ProgramPlan((plan,)).summary(dag)
