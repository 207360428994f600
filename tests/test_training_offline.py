"""Training points made and remade on the CPU (issue 49): the features of version 2 tell the
choices the database prices alike apart, older points get them recomputed from each
plan's JSON, a draw's measured rows become training points by matching summaries (and
name the rows they cannot match), the pooled fit shares coefficients across classes,
and the shipped correction fits the shipped database."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from fusec.cost import correction, fit, training
from fusec.cost.features import BLOCK_SIZE, CLASSES, FEATURES, FEATURES_VERSION, features
from fusec.emit.program import generate
from fusec.errors import FusecError
from fusec.ir.plan import L2_EVICT_LOADS, L2_PLAIN, L2_STREAM_STORES, ProgramPlan
from fusec.tune import plans
from tests.helpers import ROOT, library, script_dag

GPU = "h100-80gb-hbm3"


def predictor():
    from fusec.cost.perfdb import predictor_for
    return predictor_for(library(), GPU, corrected=False)


def candidates(script: str, dtype: str, sizes: dict) -> list:
    from fusec.space.combinations import build_space
    return plans.wide_candidates(build_space(script_dag(script), library(), dtype, sizes, predictor()))


def value(kernel_features, name: str) -> float:
    return kernel_features.values[FEATURES.index(name)]


def test_the_features_tell_apart_what_the_database_prices_alike():
    base = predictor()
    dag, sizes = script_dag("sgemv"), {"m": 947, "n": 6491}
    bands = {}
    for c in candidates("sgemv", "float32", sizes):
        (kernel,) = generate(dag, library(), c.plan, "float32", base.target).kernels
        if kernel.plan.geometry.value == "band":
            bands.setdefault(kernel.plan.ahead, (kernel, c.plan))
    assert set(bands) == {True, False}  # the draw measured both, priced alike
    for ahead, (kernel, _) in bands.items():
        assert value(features(kernel, dag, sizes, base.target), "ahead") == float(ahead)
    dag, sizes = script_dag("sscal"), {"n": 4334000}
    hints = {}
    for c in candidates("sscal", "float32", sizes):
        (kernel,) = generate(dag, library(), c.plan, "float32", base.target).kernels
        hints[kernel.plan.l2] = features(kernel, dag, sizes, base.target)
    assert set(hints) == {L2_PLAIN, L2_EVICT_LOADS, L2_STREAM_STORES}
    assert [(value(hints[h], "evict_loads"), value(hints[h], "stream_stores"))
            for h in (L2_PLAIN, L2_EVICT_LOADS, L2_STREAM_STORES)] == [(0, 0), (1, 0), (0, 1)]
    assert all(value(f, "ahead") == 0 for f in hints.values())


def measured_point(script: str, dtype: str, sizes: dict, count: int = 4) -> training.PointRecord:
    """A point of ``count`` real candidates with made-up times, as measure_point records it."""
    base = predictor()
    dag = script_dag(script)
    chosen = candidates(script, dtype, sizes)[:count]
    generated = plans.generate_all(dag, library(), dtype, [c.plan for c in chosen], base.target)
    records = tuple(training.PlanRecord(c.plan.to_json(), c.plan.summary(dag), c.groups,
                                        plans.kernel_records(base, dag, sizes, g), "ok", (10 + i) * 1e-6)
                    for i, (c, g) in enumerate(zip(chosen, generated)))
    database = base.database
    return training.PointRecord(script, dtype, tuple(sorted(sizes.items())), str(database.library.get("hash")),
                                database.built, FEATURES_VERSION, 0, 0, "today", 1.0, True, records)


def as_version_1(point: training.PointRecord) -> training.PointRecord:
    """``point`` as a fusec of features' version 1 recorded it: 8 features per kernel."""
    return dataclasses.replace(point, features_version=1, plans=tuple(
        dataclasses.replace(p, kernels=tuple(dataclasses.replace(k, values=k.values[:8]) for k in p.kernels))
        for p in point.plans))


def test_the_block_size_is_a_category_beside_its_slope():
    """threads is log2(threads / 256); threads_1024 and threads_128 mark the two ends, where
    the database's bias bends (issue 49)."""
    base = predictor()
    dag, sizes = script_dag("sscal"), {"n": 4334000}
    seen = {}
    for c in candidates("sscal", "float32", sizes):
        (kernel,) = generate(dag, library(), c.plan, "float32", base.target).kernels
        seen.setdefault(kernel.block, features(kernel, dag, sizes, base.target))
    assert {128, 256, 1024} <= set(seen)
    as_block = {block: tuple(value(f, n) for n in ("threads", "threads_1024", "threads_128"))
                for block, f in seen.items()}
    assert as_block[128] == (-1.0, 0.0, 1.0) and as_block[256] == (0.0, 0.0, 0.0)
    assert as_block[1024] == (2.0, 1.0, 0.0)
    assert as_block.get(512, (1.0, 0.0, 0.0)) == (1.0, 0.0, 0.0)


def test_points_of_older_features_are_read_left_out_and_recomputed_from_their_plans(tmp_path):
    point = measured_point("atax", "float64", {"m": 2422, "n": 2422})
    assert any(value(k, "ahead") for p in point.plans for k in p.kernels)  # something to recompute
    old = as_version_1(point)
    data = training.TrainingData({"name": "NVIDIA H100 80GB HBM3", "slug": GPU}, (old,))
    training.write(data, tmp_path / "t.json")
    read = training.read(tmp_path / "t.json")  # 8 features: read as they are
    assert read.points[0].features_version == 1 and len(read.points[0].plans[0].kernels[0].values) == 8
    samples, notes = fit.samples(read)
    assert samples.plans == 0 and notes == [f"{point.label}: features of version 1, not {FEATURES_VERSION}"]
    logged = []
    again = plans.refeature_all(read, library(), predictor().target, (ROOT / "scripts",), log=logged.append)
    assert logged == [] and again.points[0].features_version == FEATURES_VERSION
    for mine, theirs in zip(again.points[0].plans, point.plans):
        assert len(mine.kernels) == len(theirs.kernels)
        for a, b in zip(mine.kernels, theirs.kernels):  # approx compares flat sequences only
            assert a.values == pytest.approx(b.values, abs=1e-6)
        assert [k.predicted for k in mine.kernels] == pytest.approx([k.predicted for k in theirs.kernels], rel=1e-6)
        assert mine.measured == theirs.measured and mine.summary == theirs.summary
    assert fit.samples(again)[0].plans == len(point.plans)


def test_a_solver_point_is_recomputed_from_the_first_folder_that_holds_its_script():
    """A training point keeps its script's name only; the solvers' scripts are not in scripts/."""
    from fusec import data
    point = dataclasses.replace(measured_point("solvers/cg", "float32", {"n": 3125}, count=2), script="cg")
    old = as_version_1(point)
    data_ = training.TrainingData({"slug": GPU}, (old,))
    logged = []
    kept = plans.refeature_all(data_, library(), predictor().target, (ROOT / "scripts",), log=logged.append)
    assert kept.points == (old,) and f"no script cg.script in {ROOT / 'scripts'}" in logged[0]
    again = plans.refeature_all(data_, library(), predictor().target, (ROOT / "scripts", data.SOLVERS),
                                log=logged.append)
    assert len(logged) == 1 and again.points[0].features_version == FEATURES_VERSION
    for mine, theirs in zip(again.points[0].plans, point.plans):
        for a, b in zip(mine.kernels, theirs.kernels, strict=True):  # approx compares flat sequences only
            assert a.values == pytest.approx(b.values, abs=1e-6)
    assert plans.script_path("cg", (ROOT / "scripts", data.SOLVERS)) == data.SOLVERS / "cg.script"
    assert plans.script_path("cg", (ROOT / "scripts",)) is None


def test_a_point_whose_plans_cannot_be_recomputed_is_kept_as_it_was_and_named():
    point = as_version_1(measured_point("sscal", "float32", {"n": 100000}, count=2))
    target = predictor().target
    data = training.TrainingData({"slug": GPU}, (point,))
    logged = []
    kept = plans.refeature_all(data, library(), target, (ROOT / "no-such-folder",), log=logged.append)
    assert kept.points == (point,) and "no script" in logged[0] and point.label in logged[0]
    doubled = dataclasses.replace(point, plans=(dataclasses.replace(
        point.plans[0], kernels=point.plans[0].kernels * 2),))  # two kernels recorded, one generated
    with pytest.raises(FusecError, match=r"sscal float32 n=100000 plan 1 .* generates 1 kernels, not the 2"):
        plans.refeatured(doubled, script_dag("sscal"), library(), target)
    for damaged in ('[null]', '[7]', '[{"calls": "x"}]', 'not json'):  # a damaged plan: named, no traceback
        broken = dataclasses.replace(point, plans=(dataclasses.replace(point.plans[0], plan=damaged),))
        with pytest.raises(FusecError, match=r"sscal float32 n=100000 plan 1 .*: its plan does not parse"):
            plans.refeatured(broken, script_dag("sscal"), library(), target)


def draw_rows(point: training.PointRecord) -> list[dict]:
    """The rows bench.prediction --draw records for the plans of ``point``."""
    return [{"summary": p.summary, "groups": list(p.groups), "predicted_us": {"database": p.predicted * 1e6},
             "measured_us": p.measured * 1e6, "verdict": "ok"} for p in point.plans]


def test_a_draws_rows_become_a_training_point_and_the_rows_not_matched_are_named():
    sizes = {"m": 947, "n": 6491}
    truth = measured_point("sgemv", "float32", sizes, count=5)
    rows = draw_rows(truth)
    rows.append({**rows[0], "summary": "z=sgemv_ab [no such plan]"})
    rows.append({**rows[1], "predicted_us": {"database": rows[1]["predicted_us"]["database"] * 1.5}})
    rows.append({**rows[2], "measured_us": None, "verdict": "compile failed: spills"})
    matched = plans.point_from_rows(script_dag("sgemv"), library(), "float32", sizes, predictor(), rows, seed=5,
                                    draw=0, when="today", seconds=2.0, complete=True)
    assert matched.unmatched == ("z=sgemv_ab [no such plan]",) and not matched.ambiguous
    assert len(matched.mispriced) == 1 and matched.mispriced[0].startswith(rows[1]["summary"])
    assert not matched.complete
    point = matched.point
    assert point.key == truth.key and point.features_version == FEATURES_VERSION and point.seed == 5
    assert len(point.plans) == len(truth.plans) + 1
    for mine, theirs in zip(point.plans, truth.plans):
        assert ProgramPlan.from_json(mine.plan) == ProgramPlan.from_json(theirs.plan)
        assert mine.kernels == theirs.kernels and mine.measured == pytest.approx(theirs.measured, rel=1e-12)
        assert mine.fastest is None  # a draw keeps the median alone
    failed = point.plans[-1]
    assert failed.measured is None and failed.verdict.startswith("compile failed") and failed.kernels
    text = training.TrainingData({"slug": GPU}, (point,)).to_text()
    assert "fastest_us" not in text
    (read,) = training.TrainingData.from_text(text).points  # the median alone reads back
    assert [p.measured is None for p in read.plans] == [p.measured is None for p in point.plans]
    assert ([p.measured for p in read.plans if p.measured is not None]
            == pytest.approx([p.measured for p in point.plans if p.measured is not None], rel=1e-9))
    assert all(p.fastest is None for p in read.plans)


def test_a_plan_borrowed_from_a_nearby_tuning_is_matched_when_given():
    from fusec.space.combinations import build_space
    sizes = {"m": 947, "n": 6491}
    dag = script_dag("sgemv")
    base = predictor()
    offered = {c.plan for c in candidates("sgemv", "float32", sizes)}
    other = next(c.plan for c in build_space(dag, library(), "float32", sizes, base).top(500)
                 if c.plan not in offered)  # one the wide tune does not take: as a tuned plan of a nearby size
    kernels = plans.kernel_records(base, dag, sizes, generate(dag, library(), other, "float32", base.target))
    row = {"summary": other.summary(dag), "groups": ["first: database + nearby"],
           "predicted_us": {"database": sum(k.predicted for k in kernels) * 1e6}, "measured_us": 9.0, "verdict": "ok"}
    kw = dict(seed=0, draw=0, when="today", seconds=1.0, complete=True)
    assert plans.point_from_rows(dag, library(), "float32", sizes, base, [row], **kw).unmatched == (row["summary"],)
    matched = plans.point_from_rows(dag, library(), "float32", sizes, base, [row], extra=[other], **kw)
    assert matched.point.plans[0].groups == ("first: database + nearby",)
    assert matched.complete and matched.point.plans[0].kernels == kernels


def test_the_pooled_fit_shares_coefficients_and_corrects_a_thin_class():
    rng = np.random.default_rng(3)
    truth = rng.uniform(-0.2, 0.2, len(FEATURES))  # one law for every class
    point_of, log_time, plan_of, kind_of, log_price, xs = [], [], [], [], [], []
    for p in range(12):
        for i in range(20):
            c = CLASSES.index("held") if (p < 2 and i < 3) else CLASSES.index(("band", "tile")[i % 2])
            x = np.r_[1.0, rng.uniform(-2, 2, len(FEATURES) - 1)]
            price = rng.normal(-10, 1)
            plan_of.append(len(log_time)), kind_of.append(c), log_price.append(price), xs.append(x)
            point_of.append(p), log_time.append(price + x @ truth)
    samples = fit.Samples(np.array(point_of), np.array(log_time), np.array(plan_of), np.array(kind_of),
                          np.array(log_price), np.array(xs), tuple(str(p) for p in range(12)))
    apart = fit.fit(samples, ridge=0.0, relative=False)
    assert "held" not in apart.fitted  # 6 plans: too few to fit alone
    pooled = fit.fit(samples, ridge=0.0, relative=False, pool=1e3)
    assert set(pooled.fitted) == {"band", "tile", "held"}
    for kind in pooled.fitted:
        np.testing.assert_allclose(pooled.weights[CLASSES.index(kind)], truth, atol=1e-3)


def test_the_shipped_correction_fits_the_shipped_database_and_beat_it_cross_validated(monkeypatch):
    from fusec import data
    from fusec.cost.perfdb import predictor_for
    path = correction.path_for(GPU, data.PERFDB)
    monkeypatch.setenv("FUSEC_CORRECTION", "1")
    monkeypatch.delenv("FUSEC_PERFDB", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", correction.CorrectionWarning)  # refitting is due when this fails
        corrected = predictor_for(library(), GPU)
    assert isinstance(corrected, correction.CorrectedPredictor) and corrected.correction.path == str(path)
    scores = json.loads(path.read_text())["fitted"]["scores"]
    assert scores["fit, cross-validated"]["first_gmean"] < scores["database"]["first_gmean"]


def test_the_fit_command_recomputes_older_features_from_the_scripts_here(tmp_path, monkeypatch, capsys):
    from fusec import cli
    points = (as_version_1(measured_point("sgemv", "float32", {"m": 947, "n": 6491})),
              as_version_1(measured_point("atax", "float64", {"m": 2422, "n": 2422})))
    path = tmp_path / "old.json"
    training.write(training.TrainingData({"name": "NVIDIA H100 80GB HBM3", "slug": GPU}, points), path)
    monkeypatch.chdir(ROOT)  # ./scripts
    code = cli.main(["perfdb", "fit", "--gpu", "h100", "--training", str(path), "-o", str(tmp_path / "c.json")])
    out = capsys.readouterr().out
    assert f"{path}: 2 points, 8 measured plans" in out and "left out" not in out
    assert code == 1 and "no class has enough measured plans" in out  # 8 plans: too few to fit, but all read
    monkeypatch.chdir(tmp_path)  # no scripts here: the points cannot be recomputed, and say so
    code = cli.main(["perfdb", "fit", "--gpu", "h100", "--training", str(path)])
    captured = capsys.readouterr()
    assert code != 0 and "not recomputed (no script sgemv.script in scripts, " in captured.out
    assert "holds no measured plan" in captured.err


def test_the_model_study_scores_the_shipped_fit_as_the_fit_command_cross_validates_it():
    """experiments.prediction_models measures what 'fusec perfdb fit --folds <points>' does:
    its one-point-out scores of the shipped fit are fit.cross_validated's with the shipped
    correction's features, the block size's indicators it studied are fusec's, and an added
    feature that is 0 everywhere changes nothing."""
    study = pytest.importorskip("experiments.prediction_models",
                                reason="experiments/ is beside the source, not in the wheel")
    samples, raw = study.load("h100")
    data = {"h100": (samples, raw)}
    points = len(samples.labels)
    used = study.shipped_features("h100")
    expected = fit.scores(samples, fit.cross_validated(samples, folds=points, used=used)).summary()
    _, predicted = study.cross_validated(data, "h100", "point", {"shipped": True})
    assert fit.scores(samples, predicted).summary() == pytest.approx(expected)
    assert expected["first_gmean"] < fit.scores(samples, fit.log_predictions(samples, None)).summary()["first_gmean"]
    np.testing.assert_array_equal(samples.x[:, [FEATURES.index(f) for f in BLOCK_SIZE]],
                                  study.extra_columns(raw, BLOCK_SIZE))
    _, eleven = study.cross_validated(data, "h100", "point", {})
    raw = dict(raw, block=np.full_like(raw["block"], 256.0))  # neither 128 nor 1024 threads: two zero columns
    _, padded = study.cross_validated({"h100": (samples, raw)}, "h100", "point", {"add": study.BLOCK})
    np.testing.assert_allclose(padded, eleven, atol=1e-6)


@pytest.mark.slow
def test_a_fit_reproduces_the_shipped_h200_correction(tmp_path, monkeypatch, capsys):
    """'fusec perfdb fit --gpu h200' on the bundled training data writes the shipped file (but
    its date), its choice of features included."""
    from fusec import cli, data
    monkeypatch.chdir(ROOT)  # ./scripts, for the points of older features
    monkeypatch.delenv("FUSEC_PERFDB", raising=False)
    monkeypatch.delenv("FUSEC_TRAINING", raising=False)
    out = tmp_path / "h200.json"
    assert cli.main(["perfdb", "fit", "--gpu", "h200", "-o", str(out)]) == 0
    assert "<- chosen" in capsys.readouterr().out
    made, shipped = (json.loads(p.read_text()) for p in (out, correction.path_for("h200", data.PERFDB)))
    numbers = [{(kind, field): entry.pop(field) for kind, entry in record["classes"].items()
                for field in ("coefficients", "low", "high")} for record in (made, shipped)]
    assert numbers[0].keys() == numbers[1].keys()
    for key, values in numbers[0].items():
        assert values.keys() == numbers[1][key].keys()
        assert list(values.values()) == pytest.approx(list(numbers[1][key].values()), rel=1e-9, abs=1e-12)
    made["fitted"].pop("when"), shipped["fitted"].pop("when")
    assert _same(made, shipped)


def _same(a, b) -> bool:
    """Equal, but for floats within 1e-4 of each other: the scores recorded beside the choice
    of features (a Spearman rho, a geometric mean) move in the sixth digit with the order
    another NumPy or BLAS sums in; which features were chosen, and every other field, may not."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == pytest.approx(b, rel=1e-4)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
