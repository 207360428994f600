"""Measuring plans at random sizes without a GPU: the draws are deterministic, the wide
candidates hold every layout class, the collection resumes under a budget (a fake
measurer times plans by a known rule), the fit command recovers that rule, and the
commands check their arguments. ``bench.prediction --draw``'s scoring too."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest

from fusec import cli
from fusec.cost import correction, training
from fusec.cost.features import plan_class
from fusec.tune import plans
from fusec.tune.search import OK, Measurement, Measurer
from tests.helpers import ROOT, library, script_dag

GPU_NAME = "NVIDIA H100 80GB HBM3"
GPU = "h100-80gb-hbm3"
BAND_SLOWER = 1.5  # the fake GPU runs band kernels this much slower than the database prices them


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- draws


def test_a_draw_is_the_same_for_the_same_seed_and_another_for_another():
    dag = script_dag("bicgk")
    first = [plans.draw_sizes(dag, 7, d, "float32") for d in range(20)]
    assert first == [plans.draw_sizes(dag, 7, d, "float32") for d in range(20)]
    assert first != [plans.draw_sizes(dag, 8, d, "float32") for d in range(20)]
    assert plans.draw_sizes(dag, 7, 0, "float32") != plans.draw_sizes(dag, 7, 0, "float64")


def test_draws_are_in_range_square_and_rectangular_and_rarely_powers_of_two():
    dag = script_dag("bicgk")
    drawn = [plans.draw_sizes(dag, 1, d, "float64") for d in range(300)]
    sides = [v for s in drawn for v in s.values()]
    assert min(sides) >= plans.SIZE_RANGE[0] and max(sides) <= plans.SIZE_RANGE[1]
    square = sum(s["m"] == s["n"] for s in drawn) / len(drawn)
    assert 0.2 < square < 0.5  # a third
    assert any(s["m"] > 2 * s["n"] for s in drawn) and any(s["n"] > 2 * s["m"] for s in drawn)
    assert sum(v & (v - 1) == 0 for v in sides) <= 3
    # log-uniform: as many below the geometric middle as above it, about
    middle = math.sqrt(plans.SIZE_RANGE[0] * plans.SIZE_RANGE[1])
    assert 0.4 < sum(v < middle for v in sides) / len(sides) < 0.6


def test_vector_sequences_get_as_many_elements_as_a_matrix_and_one_size_scripts_are_square():
    vector = plans.draw_sizes(script_dag("waxpby"), 3, 0, "float32")
    matrix = plans.draw_sizes(script_dag("bicgk"), 3, 0, "float32")
    assert set(vector) == {"n"} and plans.SIZE_RANGE[0] ** 2 <= vector["n"] <= plans.SIZE_RANGE[1] ** 2
    assert set(matrix) == {"m", "n"}
    assert set(plans.draw_sizes(script_dag("gesummv"), 3, 0, "float32")) == {"n"}


def test_the_bench_draw_is_deterministic_for_a_seed():
    from bench import prediction_draw
    one = [(s, d, sizes) for s, d, _, sizes in prediction_draw.draw_points(["bicgk", "sscal"], ["float32", "float64"],
                                                                         11, library())]
    assert one == [(s, d, sizes) for s, d, _, sizes in
                   prediction_draw.draw_points(["bicgk", "sscal"], ["float32", "float64"], 11, library())]
    assert len(one) == 4 and one != [(s, d, sizes) for s, d, _, sizes in
                                     prediction_draw.draw_points(["bicgk", "sscal"], ["float32", "float64"], 12,
                                                                 library())]
    assert 0 <= prediction_draw.new_seed() < 2 ** 31


# ---------------------------------------------------------------------------- candidates


def predictor():
    from fusec.cost.perfdb import predictor_for
    return predictor_for(library(), GPU, corrected=False)


def test_the_wide_candidates_hold_the_top_and_the_best_of_every_layout_class():
    from fusec.space.combinations import build_space
    dag = script_dag("atax")
    space = build_space(dag, library(), "float32", {"m": 3001, "n": 1207}, predictor())
    found = plans.wide_candidates(space, top=3, layouts=2)
    assert len({c.plan for c in found}) == len(found)
    assert found[0].plan == space.best().plan and "top" in found[0].groups
    classes = {plans.layout_class(c) for c in space.layouts(plans.ALL_LAYOUTS)}
    by_plan = {c.plan: c for c in space.layouts(plans.ALL_LAYOUTS)}
    measured_classes = {plans.layout_class(by_plan[c.plan]) for c in found if "class" in c.groups}
    assert measured_classes == classes and len(classes) >= 5
    kinds = {k[1] for k in classes}
    assert {"band", "tile", "held", "striped"} <= kinds
    merged = plans.merge(found, [plans.Candidate(found[0].plan, ("first",))])
    assert len(merged) == len(found) and merged[0].groups == found[0].groups + ("first",)


# ---------------------------------------------------------------------------- collecting


class FakeGpu(Measurer):
    """Compiles and checks nothing; a plan takes its kernels' database prices, band
    kernels BAND_SLOWER times theirs. ``fail`` names plan summaries that fail to launch."""

    gpu_name = GPU_NAME

    def __init__(self, dag, library, dtype, sizes, fail=()):
        super().__init__(dag, library, dtype, sizes)
        self.fail = set(fail)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    @property
    def expected(self):
        return None

    def compile(self, programs, done):
        for i in range(len(programs)):
            done(i)
        return [""] * len(programs)

    def measure(self, program):
        if program.generated.plan.summary(self.dag) in self.fail:
            return Measurement("launch failed", reason="an illegal address")
        base = predictor()
        seconds = sum(base.kernel_seconds(k, self.dag, self.sizes) * (BAND_SLOWER if k.plan.family == "band" else 1)
                      for k in program.kernels)
        return Measurement(OK, seconds, fastest=seconds, slowest=seconds)


class Clock:
    """A clock each point moves on by ``step`` seconds."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now

    def tick(self):
        self.now += self.step


SCRIPTS = [ROOT / "scripts" / f"{s}.script" for s in ("sgemv", "madd")]  # small spaces of band and tile plans


def collect(out, clock, **kwargs):
    def measurer_for(dag, library, dtype, sizes):
        clock.tick()
        return FakeGpu(dag, library, dtype, sizes)
    return plans.collect(SCRIPTS, library(), out=out, gpu_name=GPU_NAME, base=predictor(), dtypes=("float32",),
                         measurer_for=measurer_for, clock=clock, **kwargs)


def test_the_collection_writes_each_point_and_a_run_resumes_where_the_budget_stopped(tmp_path):
    out = tmp_path / "training.json"
    first = collect(out, Clock(10.0), seed=5, draws=3, budget=15.0)
    # the first point always starts; the second is expected to take 10 s more, past 15
    assert len(first.measured) == 1 and first.left
    assert [p.label for p in training.read(out).points] == list(first.measured)
    second = collect(out, Clock(10.0), seed=5, draws=3, budget=25.0)
    assert set(second.measured).isdisjoint(first.measured) and len(second.measured) == 2
    everything = collect(out, Clock(10.0), seed=5, draws=3)
    assert len(everything.data.points) == 6 and not everything.left  # 2 scripts x 3 draws
    data = training.read(out)
    assert [p.draw for p in data.points] == [0, 0, 1, 1, 2, 2] and {p.seed for p in data.points} == {5}
    point = data.points[0]
    # the database the point was predicted with: the library it timed (a library that only
    # gained files since keeps it, under another content hash) and when it was built
    assert point.complete and point.library == predictor().database.library["hash"]
    assert point.perfdb_built == predictor().database.built
    for plan in point.plans:
        assert plan.measured is not None and plan.verdict == "ok" and plan.groups
        band = any(k.kind == "band" for k in plan.kernels)
        assert plan.measured == pytest.approx(sum(k.predicted * (BAND_SLOWER if k.kind == "band" else 1)
                                                  for k in plan.kernels), rel=1e-12)
        assert band == ("band" in plan.summary)
    assert collect(out, Clock(10.0), seed=5, draws=3).measured == ()  # nothing left to do


def test_measuring_again_retimes_the_plans_priced_otherwise_and_keeps_the_rest(tmp_path):
    """`measure-plans --again`: the plans the database no longer prices as recorded (a change
    of the model or the code) are timed anew with their prices and features; the others,
    the points' sizes and draws stay; a point of another database is not touched; the budget
    leaves points for the next run."""
    out = tmp_path / "training.json"
    collect(out, Clock(1.0), seed=5, draws=2)
    data = training.read(out)
    first, second = data.points[0], data.points[1]
    # the first point's first two plans recorded at other prices and times, as before a change
    changed = tuple(dataclasses.replace(p, measured=1.0, kernels=tuple(dataclasses.replace(k, predicted=k.predicted * 2)
                                                                      for k in p.kernels))
                    if i < 2 else p for i, p in enumerate(first.plans))
    other = dataclasses.replace(second, perfdb_built="2020-01-01T00:00:00+00:00",
                                plans=tuple(dataclasses.replace(p, measured=1.0) for p in second.plans))
    training.write(dataclasses.replace(data, points=(dataclasses.replace(first, plans=changed), other)
                                       + data.points[2:]), out)
    stale = plans.stale_plans(training.read(out).points[0], script_dag(first.script), library(), predictor())
    assert sorted(stale) == [0, 1]

    def again(clock, budget=None):
        def measurer_for(dag, library, dtype, sizes):
            clock.tick()
            return FakeGpu(dag, library, dtype, sizes)
        return plans.remeasure(SCRIPTS, library(), out=out, base=predictor(), measurer_for=measurer_for,
                               clock=clock, budget=budget)

    done = again(Clock(1.0))
    assert len(done.measured) == 1 and "2 of" in done.measured[0] and not done.left
    after = training.read(out)
    assert [(p.summary, p.groups, p.verdict, [k.kind for k in p.kernels]) for p in after.points[0].plans] == [
        (p.summary, p.groups, p.verdict, [k.kind for k in p.kernels]) for p in first.plans]
    # timed and priced anew as the fake GPU and the database do: as when first recorded (the file's
    # microseconds move the last bit of a time each time it is written)
    assert [t for p in after.points[0].plans for t in (p.measured, p.predicted)] == pytest.approx(
        [t for p in first.plans for t in (p.measured, p.predicted)], rel=1e-12)
    assert "again" in after.points[0].when and after.points[0].sizes == first.sizes
    def times(points):
        return [p.measured for point in points for p in point.plans]
    assert after.points[1].perfdb_built == other.perfdb_built  # another database's point: left
    assert times(after.points[1:]) == pytest.approx(times((other,) + data.points[2:]), rel=1e-12)
    assert [p.label for p in after.points] == [p.label for p in data.points]  # each where it stood
    assert again(Clock(1.0)).measured == ()  # nothing priced otherwise any more


def test_two_runs_writing_one_training_file_keep_each_others_points(tmp_path):
    """Another `perfdb measure-plans` run adds its points while this one measures: each
    point is added to the file as it is then, never to what this run read at its start."""
    out = tmp_path / "training.json"
    other = []

    def measurer_for(dag, library, dtype, sizes):
        if not other:  # the other run measures and writes its points while this one runs
            other.append(collect(out, Clock(1.0), seed=7, draws=1))
        return FakeGpu(dag, library, dtype, sizes)
    mine = plans.collect(SCRIPTS, library(), out=out, gpu_name=GPU_NAME, base=predictor(), dtypes=("float32",),
                         measurer_for=measurer_for, clock=Clock(1.0), seed=5, draws=1)
    assert len(other[0].measured) == 2 and len(mine.measured) == 2
    assert sorted(p.seed for p in training.read(out).points) == [5, 5, 7, 7]


def test_a_point_past_the_grace_keeps_what_it_measured_and_is_measured_again_next_run(tmp_path):
    out = tmp_path / "training.json"
    clock = Clock(plans.GRACE + 100.0)  # the first point starts past budget + grace: nothing measured
    first = collect(out, clock, seed=2, draws=1, budget=0.0)
    (point,) = training.read(out).points
    assert not point.complete and all(p.verdict == plans.NOT_MEASURED and p.measured is None for p in point.plans)
    assert first.left
    again = collect(out, Clock(1.0), seed=2, draws=1)
    assert point.label in again.measured and all(p.complete for p in training.read(out).points)


def test_the_collection_refuses_a_file_of_another_gpu_and_a_damaged_one(tmp_path):
    from fusec.errors import FusecError
    out = tmp_path / "training.json"
    training.write(training.TrainingData({"name": "NVIDIA A100", "slug": "a100"}), out)
    with pytest.raises(FusecError, match="holds plan times of a100"):
        collect(out, Clock(1.0), draws=1)
    out.write_text("{")
    with pytest.raises(FusecError, match="is damaged"):
        collect(out, Clock(1.0), draws=1)
    assert out.read_text() == "{"  # never overwritten


def test_failed_plans_are_recorded_with_their_reason(tmp_path):
    dag = script_dag("sgemv")
    sizes = plans.draw_sizes(dag, 0, 0, "float32")
    base = predictor()
    from fusec.space.combinations import build_space
    failing = plans.wide_candidates(build_space(dag, library(), "float32", sizes, base))[1].plan.summary(dag)
    point = plans.measure_point(dag, library(), "float32", sizes, base, seed=0, draw=0, top=plans.TOP,
                                layouts=plans.LAYOUTS, measurer=FakeGpu(dag, library(), "float32", sizes, [failing]))
    (failed,) = [p for p in point.plans if p.measured is None]
    assert failed.summary == failing and failed.verdict == "launch failed: an illegal address"
    assert point.complete


# ---------------------------------------------------------------------------- fitting, end to end


@pytest.fixture
def perfdb(tmp_path, monkeypatch):
    from fusec import data
    folder = tmp_path / "perfdb"
    folder.mkdir()
    shutil.copy(data.PERFDB / f"{GPU}.json", folder / f"{GPU}.json")
    monkeypatch.setenv("FUSEC_PERFDB", str(folder))
    monkeypatch.setenv("FUSEC_TRAINING", str(tmp_path / "training"))
    monkeypatch.setenv("FUSEC_CORRECTION", "1")
    return folder


@pytest.mark.slow
def test_the_fit_command_learns_what_the_gpu_does_and_predictions_follow(perfdb, tmp_path, capsys):
    from fusec.cost.perfdb import predictor_for
    from fusec.space.combinations import build_space
    collect(training.path_for(GPU), Clock(1.0), seed=1, draws=4)
    code, _, err = run(capsys, "perfdb", "fit", "--gpu", "h100", "--ridge", "0", "--folds", "1000")
    assert code == 1 and "--folds 1000: more than the" in err  # not leave-one-out, quietly
    code, out, _ = run(capsys, "perfdb", "fit", "--gpu", "h100", "--ridge", "0")
    assert code == 0, out
    assert "fit, cross-validated" in out and f"wrote {correction.path_for(GPU, perfdb)}" in out
    fitted = correction.load(correction.path_for(GPU, perfdb), predictor().database)
    band, tile = fitted.of("band"), fitted.of("tile")
    assert band is not None and tile is not None
    # relative to the tile kernels, the band kernels are BAND_SLOWER slower, whatever their features
    assert band.coefficients[0] - tile.coefficients[0] == pytest.approx(math.log(BAND_SLOWER), abs=1e-3)
    # and every training plan's corrected price is its measured time up to its point's level
    for point in training.read(training.path_for(GPU)).points:
        ratios = [sum(k.predicted * fitted.of(k.kind).factor(k.values) for k in plan.kernels) / plan.measured
                  for plan in point.plans]
        assert ratios == pytest.approx([ratios[0]] * len(ratios), rel=1e-6)
    corrected = predictor_for(library(), GPU)
    assert isinstance(corrected, correction.CorrectedPredictor)
    dag = script_dag("bicgk")
    sizes = {"m": 2500, "n": 1700}  # not drawn
    space = build_space(dag, library(), "float32", sizes, corrected)
    ranked = [c.plan for c in plans.wide_candidates(space)]
    fake = FakeGpu(dag, library(), "float32", sizes)
    from fusec.emit.program import generate
    from fusec.runtime.program import Program
    generated = [generate(dag, library(), plan, "float32") for plan in ranked]
    measured = [fake.measure(Program(g)).seconds for g in generated]
    predicted = [plans.plan_seconds(corrected, dag, sizes, g) for g in generated]
    # plans of the fitted classes: their corrected prices are their times up to one factor
    of_fitted = [i for i, plan in enumerate(ranked) if all(fitted.of(plan_class(k)) for k in plan.kernels)]
    ratios = [predicted[i] / measured[i] for i in of_fitted]
    assert len(ratios) > 5 and ratios == pytest.approx([ratios[0]] * len(ratios), rel=1e-3)
    assert {ranked[i].uses_band for i in of_fitted} == {True, False}
    assert measured[0] == pytest.approx(min(measured[i] for i in of_fitted), rel=1e-9)


def test_the_fit_refuses_a_fit_worse_than_none_unless_forced(perfdb, tmp_path, capsys, monkeypatch):
    from fusec.cost import fit
    collect(training.path_for(GPU), Clock(1.0), seed=1, draws=2)
    monkeypatch.setattr(fit, "cross_validated", lambda samples, **kw: -fit.log_predictions(samples, None))
    code, out, _ = run(capsys, "perfdb", "fit", "--gpu", "h100")
    assert code == 1 and "not written" in out and not correction.path_for(GPU, perfdb).exists()
    code, out, _ = run(capsys, "perfdb", "fit", "--gpu", "h100", "--force", "-o", tmp_path / "forced.json")
    assert code == 0 and (tmp_path / "forced.json").is_file()



def test_the_fit_refuses_an_output_in_the_way_before_fitting(tmp_path, capsys):
    """-o naming a folder, or a path under a file, is refused before any training data is
    read or fitted (it was found only when writing, after the fit)."""
    (tmp_path / "a file").write_text("x")
    for where, said in ((tmp_path, "a folder"), (tmp_path / "a file" / "c.json", "is a file, not a folder")):
        code, out, err = run(capsys, "perfdb", "fit", "--gpu", "h100", "--training", tmp_path / "none.json",
                             "-o", where)
        assert code == 1 and said in err and str(where) in err and out == ""

def test_the_fit_leaves_out_points_priced_by_another_database(perfdb, capsys):
    path = training.path_for(GPU)
    collect(path, Clock(1.0), seed=1, draws=1)
    raw = json.loads(path.read_text())
    for point in raw["points"]:
        point["perfdb_built"] = "long ago"
    path.write_text(json.dumps(raw))
    code, out, err = run(capsys, "perfdb", "fit", "--gpu", "h100")
    assert code == 1 and "left out: sgemv float32" in out and "priced by the database" in out
    assert "holds no measured plan priced by" in err


# ---------------------------------------------------------------------------- the commands


def test_the_plan_commands_explain_their_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["perfdb", "measure-plans", "--help"])
    out = capsys.readouterr().out
    for option in ("--budget", "--seed", "--draws", "--top", "--layouts", "--repeat", "-o", "SCRIPT", "--again"):
        assert option in out
    with pytest.raises(SystemExit):
        cli.main(["perfdb", "fit", "--help"])
    out = capsys.readouterr().out
    for option in ("--gpu", "--training", "--ridge", "--absolute", "--force", "--folds", "-o"):
        assert option in out
    with pytest.raises(SystemExit):
        cli.main(["perfdb", "--help"])
    assert "measure-plans" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--top", "0"], "--top 0: it must be at least 1"),
    (["--draws", "0"], "--draws 0: it must be at least 1"),
    (["--layouts", "-1"], "--layouts -1: it must be at least 0"),
    (["--repeat", "0"], "--repeat 0: it must be at least 1"),
    (["--seed", "-3"], "--seed -3: it must be at least 0"),
    (["--budget", "-1"], "--budget -1: seconds, 0 or more"),
    (["--budget", "nan"], "--budget nan: seconds, 0 or more"),
])
def test_measure_plans_checks_its_arguments(capsys, argv, message):
    code, _, err = run(capsys, "perfdb", "measure-plans", ROOT / "scripts" / "bicgk.script", *argv)
    assert code == 1 and message in err


def test_measure_plans_needs_scripts_that_exist_and_a_gpu(capsys, tmp_path):
    code, _, err = run(capsys, "perfdb", "measure-plans", tmp_path / "nope.script")
    assert code == 1 and "no script" in err and "nope.script" in err
    from fusec.target import present
    if present() is None:
        code, _, err = run(capsys, "perfdb", "measure-plans", ROOT / "scripts" / "bicgk.script")
        assert code == 1 and "times plans on the GPU: none found" in err
    with pytest.raises(SystemExit):  # no script at all: a usage error
        cli.main(["perfdb", "measure-plans"])
    # nothing to measure again: named before the GPU is looked for
    code, _, err = run(capsys, "perfdb", "measure-plans", ROOT / "scripts" / "bicgk.script", "--again",
                       "-o", tmp_path / "none.json")
    assert code == 1 and f"--again: no training file {tmp_path / 'none.json'} to measure again" in err


@pytest.mark.parametrize("argv, message", [
    (["--ridge", "-1"], "--ridge -1: a weight, finite, 0 or more"),
    (["--ridge", "inf"], "--ridge inf: a weight, finite, 0 or more"),  # else a correction of "ridge": Infinity
    (["--ridge", "1e400"], "--ridge inf: a weight, finite, 0 or more"),
    (["--ridge", "nan"], "--ridge nan: a weight, finite, 0 or more"),
    (["--folds", "1"], "--folds 1: at least 2"),
    (["--gpu", "a100"], "no performance database for 'a100' in"),
    (["--gpu", "["], "no performance database for '[' (slug 'unknown') in"),  # what was typed, too
])
def test_fit_checks_its_arguments(perfdb, capsys, argv, message):
    code, _, err = run(capsys, "perfdb", "fit", "--gpu", "h100", *argv)
    assert code == 1 and message in err


def test_fit_without_training_data_says_how_to_get_it(perfdb, capsys):
    code, _, err = run(capsys, "perfdb", "fit", "--gpu", "h100")
    assert code == 1 and "no training data" in err and "fusec perfdb measure-plans" in err


# ---------------------------------------------------------------------------- bench.prediction --draw


def test_the_draw_scores_each_choice_against_the_best_and_ranks_by_rho():
    from bench import prediction_draw
    table = (("a", 10.0, 1.0, 3.0), ("b", 12.0, 2.0, 2.0), ("c", 15.0, 3.0, 1.0), ("d", None, 0.5, 9.0))
    rows = [{"summary": s, "groups": ["top"], "measured_us": m, "predicted_us": {"database": d, "corrected": c}}
            for s, m, d, c in table]
    choices = {"database": {"summary": "b", "origin": "predicted", "row": 1},
               "corrected": {"summary": "a", "origin": "predicted", "row": 0},
               "database + nearby": {"summary": "d", "origin": "tuned for the nearest size", "row": 3}}
    scored = prediction_draw.score(rows, choices, ["database", "corrected"])
    assert scored["best_us"] == 10.0 and scored["measured"] == 3 and scored["candidates"] == 4
    assert scored["choices"]["database"]["ratio"] == pytest.approx(1.2)
    assert scored["choices"]["corrected"]["ratio"] == pytest.approx(1.0)
    assert scored["choices"]["database + nearby"]["ratio"] is None  # it failed
    assert scored["rho"] == {"database": pytest.approx(1.0), "corrected": pytest.approx(-1.0)}
    point = {"script": "bicgk", "dtype": "float32", "sizes": {"m": 700, "n": 900}, "complete": True, **scored}
    report = {"device": GPU_NAME, "runs": [{"seed": 4, "command": "python -m bench.prediction --draw", "date": "today",
                                            "predictors": ["perfdb", "corrected"], "top": 4, "layouts": 8,
                                            "repeat": 20, "points": [point]}]}
    text = prediction_draw.markdown(report)
    assert "seed 4" in text and "| database | 1 | 1.200 | 1.200 | 0 % |" in text
    assert "| corrected | 1 | 1.000 | 1.000 | 100 % |" in text


def test_a_previous_correction_is_scored_beside_the_others():
    """--previous: a run's choices name it, its first choice and rho get columns of their own,
    and an earlier run without it still reads."""
    from bench import prediction_draw
    assert prediction_draw.choices_of({"database": 0, "corrected": 0, "previous": 0})[-1] == ("previous", False)
    assert [n for n, _ in prediction_draw.choices_of({"database": 0})] == ["database", "database + nearby"]
    rows = [{"summary": s, "groups": ["top"], "measured_us": m, "predicted_us": {"database": d, "corrected": c,
                                                                                   "previous": q}}
            for s, m, d, c, q in (("a", 10.0, 1.0, 3.0, 2.0), ("b", 13.0, 2.0, 2.0, 1.0), ("c", 15.0, 3.0, 1.0, 3.0))]
    choices = {"database": {"summary": "a", "origin": "predicted", "row": 0},
               "corrected": {"summary": "c", "origin": "predicted", "row": 2},
               "previous": {"summary": "b", "origin": "predicted", "row": 1}}
    scored = prediction_draw.score(rows, choices, ["database", "corrected", "previous"])
    point = {"script": "bicgk", "dtype": "float32", "sizes": {"m": 700, "n": 900}, "complete": True, **scored}
    names = ["database", "corrected", "previous"]
    old = {"seed": 3, "command": "c", "date": "yesterday", "predictors": ["perfdb"], "top": 4, "layouts": 8,
           "repeat": 20, "points": [dict(point, choices={"database": scored["choices"]["database"]})]}
    new = {"seed": 4, "command": "c", "date": "today", "predictors": ["perfdb", "corrected", "previous"], "top": 4,
           "layouts": 8, "repeat": 20, "choices": names, "points": [point]}
    text = prediction_draw.markdown({"device": GPU_NAME, "runs": [old, new]})
    assert "| previous | 1 | 1.300 | 1.300 | 0 % | 0.50 | 0.50 |" in text
    assert "| ρ database | ρ corrected | ρ previous | best plan |" in text
    assert "| 1.00 | 1.50 | 1.30 | 1.00 | -1.00 | 0.50 |" in text
    assert "- seed 3 (yesterday, 1 points): database gmean 1.000, worst 1.000" in text


def test_the_draw_mode_checks_its_arguments(capsys, tmp_path):
    from bench import prediction
    damaged = tmp_path / "c.json"
    damaged.write_text("{not json")
    missing = tmp_path / "none.json"
    for argv, message in ((["--scripts", "nope"], "no sequence 'nope'"), (["--top", "0"], "--top and --repeat"),
                          (["--seed", "-1"], "--seed -1"), (["--budget", "-2"], "--budget -2"),
                          (["--previous", str(damaged)], f"--previous {damaged}: not a fitted correction"),
                          (["--previous", str(missing)], f"--previous {missing}: cannot be read")):
        with pytest.raises(SystemExit):
            prediction.main(["--draw", *argv])
        assert message in capsys.readouterr().err


def test_a_draw_point_measures_the_first_choices_beside_the_wide_tune(monkeypatch):
    from bench import prediction_draw
    from fusec import nvcc
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)  # the first choice unchecked for spills: no compiling
    dag = script_dag("sgemv")
    sizes = plans.draw_sizes(dag, 9, 0, "float32")
    point = prediction_draw.evaluate_point("sgemv", dag, library(), "float32", sizes, {"database": predictor()},
                                           top=2, layouts=2, measurer=FakeGpu(dag, library(), "float32", sizes))
    assert point["complete"] and point["measured"] == point["candidates"] == len(point["rows"])
    first = point["choices"]["database"]
    assert first["origin"].startswith("predicted") and "first: database" in point["rows"][first["row"]]["groups"]
    # no tuned plan to borrow (the suite hides the shipped ones): the same choice
    assert point["choices"]["database + nearby"]["row"] == first["row"]
    assert point["best_us"] == min(r["measured_us"] for r in point["rows"]) and first["ratio"] >= 1.0
    assert point["rho"]["database"] is not None and -1.0 <= point["rho"]["database"] <= 1.0
    assert "corrected" not in point["choices"]


def test_a_plan_not_generated_is_recorded_without_kernels(tmp_path):
    plan = training.PlanRecord('[{"calls":[0]}]', "q=sgemv", ("class",), (), "not generated: no such shape")
    point = training.PointRecord("sgemv", "float32", (("m", 700), ("n", 900)), "abc", "2026", 1, 0, 0, "today", 1.0,
                                 True, (plan,))
    path = tmp_path / "t.json"
    training.write(training.TrainingData({"name": GPU_NAME, "slug": GPU}, (point,)), path)
    assert training.read(path).points[0].plans[0].kernels == ()


def test_a_first_choice_outside_the_wide_tune_is_measured_after_it(monkeypatch):
    import numpy as np

    from bench import prediction_draw
    from fusec.space.combinations import build_space
    dag = script_dag("bicgk")
    sizes = plans.draw_sizes(dag, 9, 0, "float32")
    space = build_space(dag, library(), "float32", sizes, predictor())
    wide = {c.plan for c in plans.wide_candidates(space, 2, 2)}
    outside = next(c.plan for c in space.sample(50, np.random.default_rng(0)) if c.plan not in wide)
    monkeypatch.setattr(prediction_draw, "first_choices",
                        lambda *args: {"database": {"plan": outside, "origin": "predicted rank 9: spills"}})
    point = prediction_draw.evaluate_point("bicgk", dag, library(), "float32", sizes, {"database": predictor()},
                                           top=2, layouts=2, measurer=FakeGpu(dag, library(), "float32", sizes))
    row = point["rows"][point["choices"]["database"]["row"]]
    assert row is point["rows"][len(wide)] and row["groups"] == ["first: database"] and row["measured_us"] > 0
    # then the quick tune's plans not measured yet, each once
    quick = [r for r in point["rows"] if any(g.startswith("quick: ") for g in r["groups"])]
    assert point["rows"][len(wide) + 1:] == [r for r in quick if not set(r["groups"]) & {"top", "layout", "class"}]
    assert point["choices"]["database + quick"]["origin"].startswith("quick tune: the fastest of")
    assert point["complete"] and point["measured"] == len(point["rows"]) == len({r["summary"] + str(r["groups"])
                                                                                  for r in point["rows"]})
