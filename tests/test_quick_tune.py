"""The quick tune (fusec.tune.quick, ``fusec tune --quick``, ``fusec.compile(measure=True)``), without a GPU.

Its first round times the first choice, the next layouts, the best of each structure of kernel
families predicted near the first choice and the plan tuned nearby; its second round further
layouts of the first round's winner's structure. A fake measurer times plans from a table, so
the winner is known: a tune keeps it, caches it, and compile(measure=True) runs it and finds
it in the cache the next time. Bad arguments are typed errors naming the argument.
"""

from __future__ import annotations

import pytest

import fusec
import fusec.api
from fusec import cli, oracle
from fusec.cost.analytic import DEFAULT
from fusec.errors import ArgumentError, GPUUnavailableError
from fusec.frontend import load_script
from fusec.space.combinations import ALL_LAYOUTS, build_space
from fusec.target import GpuInfo
from fusec.tune import quick
from fusec.tune import search as S
from fusec.tune import store as tuning
from tests.helpers import ROOT, library, own_cache

H100 = "NVIDIA H100 80GB HBM3"
SIZES = {"m": 3000, "n": 3000}


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    return own_cache(monkeypatch, tmp_path)


def script(name="bicgk"):
    return load_script(ROOT / "scripts" / f"{name}.script", library())


def space_of(dag, sizes=SIZES, dtype="float32"):
    return build_space(dag, library(), dtype, sizes, DEFAULT)


@pytest.mark.parametrize("name", ["bicgk", "gemver", "gesummv"])
def test_the_first_round_times_the_first_choice_and_each_family_structure_near_it(name):
    dag = script(name)
    space = space_of(dag)
    first = quick.first_round(space)
    every = space.layouts(ALL_LAYOUTS)
    assert first[0].plan == space.top(1)[0].plan
    assert len({c.plan for c in first}) == len(first)
    assert {c.plan for c in every[:quick.FIRST]} <= {c.plan for c in first}
    near = {quick.families(c.plan) for c in every if c.predicted <= quick.WITHIN * first[0].predicted}
    assert near <= {quick.families(c.plan) for c in first}
    # one of each structure past the first layouts, its best-predicted, none far slower
    later = first[1 + quick.FIRST:]
    assert len({quick.families(c.plan) for c in later}) == len(later)
    for c in later:
        assert c.predicted <= quick.WITHIN * first[0].predicted
        assert c.plan == next(e.plan for e in every if quick.families(e.plan) == quick.families(c.plan))
    assert len(first) < len(every)


def test_a_structure_far_slower_than_the_first_choice_is_left_out():
    dag = script("gemver")
    space = space_of(dag)
    wide = quick.first_round(space, within=100.0)
    narrow = quick.first_round(space, within=1.0)
    assert len(narrow) < len(wide)
    assert {c.plan for c in narrow} == {c.plan for c in quick.first_round(space, within=1.0)}
    also = space.layouts(ALL_LAYOUTS)[-1]
    assert quick.first_round(space, within=1.0, also=[also])[-1].plan == also.plan


def structures_near(space, within=quick.WITHIN):
    """The best-predicted plan of each family structure predicted within ``within`` times the
    first choice, best first: what the first round would time with no cap."""
    best = {}
    for c in space.layouts(ALL_LAYOUTS):
        if c.predicted > within * space.top(1)[0].predicted:
            break
        best.setdefault(quick.families(c.plan), c)
    return list(best.values())


def test_a_solver_iterations_first_round_times_the_best_predicted_family_structures_only():
    space = space_of(script("solvers/cg"), {"n": 3000})
    near = structures_near(space)
    assert len(near) > quick.FAMILIES  # CG's seven calls combine into more structures than the cap
    first = quick.first_round(space)
    assert len(first) <= 1 + quick.FIRST + quick.FAMILIES
    assert len({quick.families(c.plan) for c in first}) <= quick.FAMILIES
    # the first choice, the best layouts, then the best of the FAMILIES best-predicted structures, in order
    every = space.layouts(ALL_LAYOUTS)
    head = [space.top(1)[0].plan] + [c.plan for c in every[:quick.FIRST] if c.plan != space.top(1)[0].plan]
    kept = [c.plan for c in near[:quick.FAMILIES] if c.plan not in head]
    assert [c.plan for c in first] == head + kept
    for cap in (1, 2, 5):
        capped = quick.first_round(space, family_structures=cap)
        assert [c.plan for c in capped] == head + [c.plan for c in near[:cap] if c.plan not in head]
    assert len(quick.first_round(space, family_structures=len(near))) > len(first)


@pytest.mark.parametrize("name", ["bicgk", "gemver", "gesummv"])
def test_the_cap_on_family_structures_leaves_the_sequences_first_rounds_as_they_were(name):
    space = space_of(script(name))
    assert len(structures_near(space)) < quick.FAMILIES
    assert quick.first_round(space) == quick.first_round(space, family_structures=10**6)


def test_the_second_round_takes_further_layouts_of_the_winners_structure_only():
    dag = script("bicgk")
    space = space_of(dag)
    first = quick.first_round(space)
    winner = first[-1].plan
    second = quick.second_round(space, [(1.0, winner)], [c.plan for c in first])
    assert 0 < len(second) <= quick.REFINE + quick.ORDERS
    assert all(quick.structure(c.plan) == quick.structure(winner) for c in second)
    assert not {c.plan for c in second} & {c.plan for c in first}
    layouts = quick.second_round(space, [(1.0, winner)], [c.plan for c in first], orders=0)
    assert [c.predicted for c in layouts] == sorted(c.predicted for c in layouts) and len(layouts) <= quick.REFINE
    assert quick.second_round(space, [(1.0, winner)], [c.plan for c in first], refine=1, orders=0) == layouts[:1]


class TableMeasurer(S.Measurer):
    """Runs nothing: outputs from the oracle; each plan's time from ``seconds(plan)``."""

    gpu_name = H100

    def __init__(self, dag, sizes, seconds, dtype="float32"):
        super().__init__(dag, library(), dtype, sizes)
        self.seconds, self.timed, self.entered = seconds, [], 0

    def __enter__(self):
        self.entered += 1
        return super().__enter__()

    def compile(self, programs, done):
        for i, _ in enumerate(programs):
            done(i)
        return ["" for _ in programs]

    def run(self, program):
        values = oracle.evaluate(self.dag, self.library, self.host)
        return {self.dag.value(v).name: values[v].astype(self.dtype) for v in self.dag.outputs}

    def time(self, program):
        self.timed.append(program.generated.plan)
        return [self.seconds(program.generated.plan) * 1e3] * 3


def planted_times(space, fastest):
    """Predicted times, except ``fastest``, which measures half its prediction."""
    predicted = {c.plan: c.predicted for c in space.layouts(ALL_LAYOUTS)}
    return lambda plan: predicted.get(plan, 1.0) * (0.5 if plan == fastest else 1.0)


SMALL = {"m": 600, "n": 500}  # the oracle stays quick


def test_a_quick_tune_keeps_a_plan_of_its_second_round_when_it_is_the_fastest(cache):
    dag = script("bicgk")
    space = space_of(dag, SMALL)
    first = S.quick_first_round(space, "h100-80gb-hbm3")
    winner_of_first = first[-1].plan  # made fastest of the first round, and one of the second faster still
    second = quick.second_round(space, [(2e-7, winner_of_first)], [c.plan for c in first])
    predicted = {c.plan: c.predicted for c in space.layouts(ALL_LAYOUTS)}

    def seconds(plan):
        if plan == second[-1].plan:
            return 1e-7
        return 2e-7 if plan == winner_of_first else predicted.get(plan, 1.0)

    measurer = TableMeasurer(dag, SMALL, seconds)
    result = S.tune(dag, library(), "float32", SMALL, predictor=DEFAULT, measurer=measurer, progress=False,
                    quick=True)
    assert result.quick and result.ranked == len(first) and result.by_layout == len(second)
    assert [r.plan for r in result.rows] == [c.plan for c in first + second]
    assert [r.rank for r in result.rows] == list(range(1, len(first) + len(second) + 1))
    assert result.winner.plan == second[-1].plan
    assert result.entry.top == len(result.rows) and result.cache_path.is_file()
    assert tuning.lookup(dag, library(), "float32", SMALL, "h100-80gb-hbm3").plan == second[-1].plan
    text = S.report(result)
    assert "a quick tune" in text and "further layouts" in text and "winner: rank" in text


def test_a_quick_tune_where_the_first_choice_is_fastest_keeps_it(cache):
    dag = script("sgemvt")
    sizes = {"m": 700, "n": 500}
    space = space_of(dag, sizes)
    best = space.top(1)[0].plan
    result = S.tune(dag, library(), "float32", sizes, predictor=DEFAULT, progress=False, quick=True,
                    measurer=TableMeasurer(dag, sizes, planted_times(space, best)))
    assert result.winner.plan == best and result.winner.rank == 1


def fake_gpu(monkeypatch, measurers: list, seconds=None):
    """A GPU that is present, whose measurer times plans as predicted (or by ``seconds``)."""
    h100 = GpuInfo(H100, 132, "9.0", "13.0")
    monkeypatch.setattr(fusec.api, "present", lambda: h100)
    monkeypatch.setattr("fusec.target.present", lambda: h100)  # where the tuning cache is looked up
    monkeypatch.setattr("fusec.runtime.cuda.driver", lambda: None)

    def measurer(dag, library_, dtype, sizes, **kwargs):
        space = build_space(dag, library(), dtype, sizes, DEFAULT)
        times = seconds or planted_times(space, space.layouts(ALL_LAYOUTS)[1].plan)
        measurers.append(TableMeasurer(dag, sizes, times, dtype))
        return measurers[-1]

    monkeypatch.setattr(S, "GpuMeasurer", measurer)


def test_compile_with_measure_runs_a_quick_tune_once_and_then_finds_its_plan(monkeypatch, cache):
    measurers = []
    fake_gpu(monkeypatch, measurers)
    path = ROOT / "scripts" / "bicgk.script"
    program = fusec.compile(path, sizes=SMALL, predictor=DEFAULT, measure=True)
    assert len(measurers) == 1 and measurers[0].entered == 1
    space = space_of(script(), SMALL)
    assert program.generated.plan == space.layouts(ALL_LAYOUTS)[1].plan  # the one planted fastest
    assert program.tuned and "K=" in program.tuned
    again = fusec.compile(path, sizes=SMALL, predictor=DEFAULT, measure=True)
    assert len(measurers) == 1 and again.generated.plan == program.generated.plan and again.tuned
    assert fusec.compile(path, sizes=SMALL, predictor=DEFAULT).generated.plan == program.generated.plan
    # another size the program is called at is measured alike
    other = {"m": 640, "n": 520}
    assert program.replan(other).tuned and len(measurers) == 2 and measurers[1].sizes == other


def test_compile_with_measure_where_nothing_passes_warns_and_predicts(monkeypatch, cache):
    measurers = []
    fake_gpu(monkeypatch, measurers, seconds=lambda plan: float("nan"))
    with pytest.warns(fusec.FusecWarning, match="no candidate of the quick tune passed"):
        program = fusec.compile(ROOT / "scripts" / "bicgk.script", sizes=SMALL, predictor=DEFAULT, measure=True)
    assert not program.tuned and program.generated.plan == space_of(script(), SMALL).top(1)[0].plan


def test_measure_needs_the_tuning_cache_a_gpu_and_no_other_gpu_named(monkeypatch, cache):
    path = ROOT / "scripts" / "bicgk.script"
    with pytest.raises(ArgumentError, match="measure") as err:
        fusec.compile(path, sizes=SMALL, measure=True, tuned=False)
    assert err.value.argument == "measure"
    with pytest.raises(ArgumentError) as err:
        fusec.compile(path, sizes=SMALL, measure=True, reproducible=True, predictor=DEFAULT)
    assert err.value.argument == "measure"
    with pytest.raises(ArgumentError) as err:
        fusec.compile(path, sizes=SMALL, measure="yes")
    assert err.value.argument == "measure"
    monkeypatch.setattr("fusec.runtime.cuda.driver", lambda: None)
    monkeypatch.setattr(fusec.api, "present", lambda: None)
    with pytest.raises(GPUUnavailableError, match="measure=True"):
        fusec.compile(path, sizes=SMALL, measure=True, predictor=DEFAULT)
    monkeypatch.setattr(fusec.api, "present", lambda: GpuInfo(H100, 132, "9.0", "13.0"))
    with pytest.raises(ArgumentError, match="GPU present") as err:
        fusec.compile(path, sizes=SMALL, measure=True, gpu="h200", predictor=DEFAULT)
    assert err.value.argument == "gpu"


def test_without_pycuda_measure_is_a_clear_error(monkeypatch, cache):
    def no_driver():
        raise GPUUnavailableError("running a program needs PyCUDA and an NVIDIA GPU")
    monkeypatch.setattr("fusec.runtime.cuda.driver", no_driver)
    with pytest.raises(GPUUnavailableError, match="PyCUDA"):
        fusec.compile(ROOT / "scripts" / "bicgk.script", sizes=SMALL, measure=True, predictor=DEFAULT)


def test_the_cli_refuses_quick_with_top_and_measure_with_no_tuned(capsys):
    path = ROOT / "scripts" / "bicgk.script"
    for argv, flag in ((["tune", path, "--size", "n=300", "--quick", "--top", "3"], "--quick"),
                       (["tune", path, "--size", "n=300", "--quick", "--layouts", "0"], "--quick"),
                       (["run", path, "--size", "n=300", "--measure", "--no-tuned"], "--measure")):
        assert cli.main([str(a) for a in argv]) != 0
        assert f"argument '{flag}'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    assert "--quick" in capsys.readouterr().out


def test_the_draw_scores_the_quick_tunes_choice_from_its_two_rounds():
    from bench import prediction_draw
    dag = script("bicgk")
    space = space_of(dag, SMALL)
    first = S.quick_first_round(space, None)
    times = {c.plan: c.predicted for c in space.layouts(ALL_LAYOUTS)}
    times[first[-1].plan] = 1e-9  # the first round's winner
    asked = []

    def add(chosen):
        asked.append([c.groups for c in chosen])
        return [times.get(c.plan, 1.0) for c in chosen]

    choice = prediction_draw.quick_choice(dag, library(), "float32", SMALL, DEFAULT, add)
    second = quick.second_round(space, [(1e-9, first[-1].plan)], [c.plan for c in first])
    assert asked == [[("quick: first round",)] * len(first), [("quick: second round",)] * len(second)]
    assert choice["plan"] == first[-1].plan
    assert choice["origin"] == f"quick tune: the fastest of {len(first)} + {len(second)} plans"
    assert prediction_draw.quick_choice(dag, library(), "float32", SMALL, DEFAULT,
                                        lambda chosen: [None] * len(chosen))["origin"].startswith("failed")
    assert prediction_draw.quick_predictor({"database": 0, "corrected": 0}) == "corrected"
    assert prediction_draw.quick_predictor({"database": 0}) == "database"


def test_the_second_round_adds_other_routine_orders_of_the_winners_heaviest_kernel():
    dag = script("bicgk")
    space = space_of(dag)
    winner = next(c for c in space.layouts(ALL_LAYOUTS) if len(c.plan.kernels) == 1
                  and quick.routine_orders(space, c.plan))
    orders = quick.routine_orders(space, winner.plan)
    kernel = winner.plan.kernels[0]
    assert all(o.plan.kernels[0].layout() == kernel.layout() and o.plan.kernels[0] != kernel for o in orders)
    assert len({o.plan for o in orders}) == len(orders)
    assert [o.predicted for o in orders] == sorted(o.predicted for o in orders)
    second = quick.second_round(space, [(1.0, winner.plan)], [winner.plan], refine=0)
    assert second == orders[:quick.ORDERS]
    both = quick.second_round(space, [(1.0, winner.plan)], [winner.plan])
    assert both[-len(second):] == second and len(both) <= quick.REFINE + quick.ORDERS
    # a plan that is none of the space's combinations has no orders
    assert quick.routine_orders(space_of(script("sgemvt")), winner.plan) == []


def test_the_first_round_tells_fusions_apart_by_their_parts_classes():
    # SGEMVT fp32 1654 x 1024 on the H200 (seed 1838348157): the fastest plan measured, a held
    # fusion of band parts, predicted 1.44x the first choice; one of tile parts had stood for it
    from fusec.cost.perfdb import predictor_for
    dag = script("sgemvt")
    space = build_space(dag, library(), "float32", {"m": 1654, "n": 1024}, predictor_for(library(), "h200"))
    first = quick.first_round(space)
    held = {quick.families(c.plan) for c in first if c.plan.kernels[0].family == "held"}
    assert {("held(tile,tile)",), ("held(band,band)",)} <= held
    assert all(quick.kernel_class(k) == "tile" for k in first[0].plan.kernels if not k.composite)


def test_the_draw_report_names_the_quick_rule_each_run_measured():
    from bench import prediction_draw
    assert prediction_draw._rule({"quick": quick.rule()}) == (
        f": first {quick.FIRST}, within {quick.WITHIN}x (at most {quick.FAMILIES} family structures),"
        f" fusions by their parts' classes, {quick.FIRST_ORDERS} other routine order each;"
        f" refine {quick.REFINE}, orders {quick.ORDERS},"
        f" structures within {quick.TIE}x of the fastest, register-bound twins as one layout")
    assert prediction_draw._rule({"quick": {"first": 2, "within": 1.6, "refine": 3, "orders": 0}}).endswith(
        "register-bound twins apart")
    assert prediction_draw._rule({}) == ""


def test_fusec_measure_in_the_environment_measures_unless_the_call_says_otherwise(monkeypatch, cache):
    measurers = []
    fake_gpu(monkeypatch, measurers)
    path = ROOT / "scripts" / "bicgk.script"
    monkeypatch.setenv("FUSEC_MEASURE", "1")
    assert not fusec.compile(path, sizes=SMALL, predictor=DEFAULT, measure=False).tuned and not measurers
    assert not fusec.compile(path, sizes=SMALL, predictor=DEFAULT, tuned=False).tuned and not measurers
    assert not fusec.compile(path, sizes=SMALL, predictor=DEFAULT, reproducible=True).tuned and not measurers
    plan = space_of(script(), SMALL).top(1)[0].plan
    assert fusec.compile(path, sizes=SMALL, plan=plan).generated.plan == plan and not measurers
    assert fusec.compile(path, sizes=SMALL, predictor=DEFAULT).tuned and len(measurers) == 1
    monkeypatch.setenv("FUSEC_MEASURE", "0")
    assert not fusec.compile(path, sizes={"m": 610, "n": 500}, predictor=DEFAULT).tuned and len(measurers) == 1
    monkeypatch.setenv("FUSEC_MEASURE", "yes")
    with pytest.raises(ArgumentError) as err:
        fusec.compile(path, sizes=SMALL, predictor=DEFAULT)
    assert err.value.argument == "$FUSEC_MEASURE"


def test_measure_with_a_plan_given_is_refused(cache):
    plan = space_of(script(), SMALL).top(1)[0].plan
    with pytest.raises(ArgumentError) as err:
        fusec.compile(ROOT / "scripts" / "bicgk.script", sizes=SMALL, plan=plan, measure=True)
    assert err.value.argument == "measure"


def test_register_bound_twins_count_as_one_layout_in_the_second_round_and_as_variants():
    """A horizontal fusion's register-bounded twin moves the same bytes: the second round
    takes further layouts past it, and offers it among the winner's variants."""
    dag = script("bicgk")
    space = space_of(dag, {"m": 795, "n": 795})
    horizontal = [c for c in space.layouts(ALL_LAYOUTS) if quick.families(c.plan)[0].startswith("horizontal(")]
    winner = next(c.plan for c in horizontal
                  if any(o.plan.kernels[0].bound != c.plan.kernels[0].bound
                         for o in quick.routine_orders(space, c.plan)))
    twins = [o.plan for o in quick.routine_orders(space, winner)
             if o.plan.kernels[0].bound != winner.kernels[0].bound]
    assert twins and all(quick._bytes_moved(t) == quick._bytes_moved(winner) for t in twins)
    second = quick.second_round(space, [(1.0, winner)], [winner], orders=0)
    keys = [quick._bytes_moved(c.plan) for c in second]
    assert len(set(keys)) == len(keys) and quick._bytes_moved(winner) not in keys
    assert all(quick.structure(c.plan) == quick.structure(winner) for c in second)


def test_fusec_measure_without_a_gpu_or_for_another_gpu_predicts(monkeypatch, cache):
    """The environment's wish yields to the machine and to the call: no GPU, a warning and
    the predicted plan (where measure=True is an error); gpu= naming another GPU, predicted."""
    path = ROOT / "scripts" / "bicgk.script"
    monkeypatch.setenv("FUSEC_MEASURE", "1")

    def no_driver():
        raise GPUUnavailableError("running a program needs PyCUDA and an NVIDIA GPU")
    monkeypatch.setattr("fusec.runtime.cuda.driver", no_driver)
    with pytest.warns(fusec.FusecWarning, match=r"\$FUSEC_MEASURE=1, but nothing can be measured here"):
        program = fusec.compile(path, sizes=SMALL, predictor=DEFAULT)
    assert not program.tuned and program.generated.plan == space_of(script(), SMALL).top(1)[0].plan
    measurers = []
    fake_gpu(monkeypatch, measurers)
    assert not fusec.compile(path, sizes=SMALL, predictor=DEFAULT, gpu="h200").tuned and not measurers
    with pytest.raises(ArgumentError):
        fusec.compile(path, sizes=SMALL, predictor=DEFAULT, gpu="h200", measure=True)


def test_the_first_round_adds_another_routine_order_of_each_plan_fusing_calls_in_an_order():
    """The model prices a vertical fusion's routine orders alike (BiCGK fp32 3342 x 667 measured
    16.3 against 11.8 us): each such plan of the first round brings its best other order;
    horizontal fusions (whose variants are register bounds) and single calls bring none."""
    space = space_of(script("bicgk"), {"m": 3342, "n": 667})
    every = space.layouts(ALL_LAYOUTS)
    vertical = next(c for c in every if len(c.plan.kernels) == 1 and len(c.plan.kernels[0].calls) == 2
                    and quick.families(c.plan) in (("tile",), ("band",)))
    horizontal = next(c for c in every if quick.families(c.plan)[0].startswith("horizontal(")
                      and quick.routine_orders(space, c.plan))
    apart = next(c for c in every if all(len(k.calls) == 1 for k in c.plan.kernels))
    other = quick.routine_orders(space, vertical.plan)[0]
    assert other.plan.kernels[0].calls == vertical.plan.kernels[0].calls and other.plan != vertical.plan
    assert quick.with_other_orders(space, [vertical, horizontal, apart]) == [vertical, horizontal, apart, other]
    twice = quick.with_other_orders(space, [vertical, other])  # each its next order not yet there
    assert twice[:2] == [vertical, other] and len({c.plan for c in twice}) == len(twice) > 2
    assert quick.with_other_orders(space, [vertical], orders=0) == [vertical]
    first = S.quick_first_round(space, None)
    round_one = quick.first_round(space)
    assert first[:len(round_one)] == round_one
    assert first[len(round_one):] == quick.with_other_orders(space, round_one)[len(round_one):]
    assert len(first) > len(round_one)  # this point's vertical fusions bring their other orders


def test_the_second_round_refines_every_structure_timed_within_a_tie_of_the_fastest():
    space = space_of(script("bicgk"), {"m": 3342, "n": 667})
    by_structure = {}
    for c in space.layouts(ALL_LAYOUTS):
        by_structure.setdefault(quick.structure(c.plan), []).append(c.plan)
    x, x2 = next(plans for plans in by_structure.values() if len(plans) > 1)[:2]
    y, z = [plans[0] for key, plans in by_structure.items() if key != quick.structure(x)][:2]
    timed = [(1.0, x), (1.01, x2), (1.0 + (quick.TIE - 1) / 2, y), (quick.TIE + 0.01, z)]
    assert quick.leaders(timed) == [x, y]
    assert quick.leaders(timed, tie=1.0) == [x]
    assert quick.leaders(timed, most=1) == [x]  # at most LEADERS structures, however many tie
    both = quick.second_round(space, timed, [p for _, p in timed])
    assert {quick.structure(c.plan) for c in both} == {quick.structure(x), quick.structure(y)}
    alone = quick.second_round(space, timed, [p for _, p in timed], tie=1.0)
    assert both[:len(alone)] == alone and len(both) > len(alone)
    assert not {c.plan for c in both} & {p for _, p in timed} and len({c.plan for c in both}) == len(both)
