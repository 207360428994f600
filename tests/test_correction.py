"""The fitted correction of the database's prices without a GPU: the fit recovers known
coefficients, the fitted file is validated on load (a bad one is a warning and the
database's prices stand), and the corrected predictor ranks the space by the
corrected prices."""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings

import numpy as np
import pytest

from fusec.cost import correction, fit, training
from fusec.cost.features import BASE, BLOCK_SIZE, CLASSES, FEATURES, FEATURES_VERSION, features, plan_class
from tests.helpers import ROOT, library, script_dag

GPU = "h100-80gb-hbm3"  # the bundled performance database's
SIZES = {"m": 3001, "n": 3001}
KERNEL_VALUES = (1.0, 0, 0, 0.5, 0.1, 2.0, -1.0, 1.0, 1.0, 0, 0, 0, 0)  # a 256-thread band kernel loading ahead


def synthetic(weights: np.ndarray, points: int = 30, plans: int = 25, seed: int = 1) -> fit.Samples:
    """Plans of one or two kernels of the band and tile classes with random features and
    prices, whose times are exactly sum_k price_k exp(weights[class_k] . x_k)."""
    rng = np.random.default_rng(seed)
    point_of, log_time, plan_of, kind_of, log_price, xs = [], [], [], [], [], []
    for p in range(points):
        for i in range(plans):
            logs = []
            for _ in range(1 + (i % 3 == 0)):
                c = CLASSES.index(("band", "tile")[rng.integers(2)])
                hint = rng.integers(3)  # none, evict-first loads, streaming stores
                block = rng.integers(3)  # another size, 1024 threads, 128 threads
                x = np.r_[1.0, rng.integers(2), rng.uniform(-2, 2), rng.uniform(-3, 5), rng.uniform(0, 1),
                          rng.uniform(0, 6), rng.uniform(-5, 3), rng.uniform(0, 1), rng.integers(2), hint == 1,
                          hint == 2, block == 1, block == 2]
                price = rng.normal(-10, 1)
                plan_of.append(len(log_time))
                kind_of.append(c)
                log_price.append(price)
                xs.append(x)
                logs.append(price + x @ weights[c])
            point_of.append(p)
            log_time.append(np.log(np.sum(np.exp(logs))))
    return fit.Samples(np.array(point_of), np.array(log_time), np.array(plan_of), np.array(kind_of),
                       np.array(log_price), np.array(xs), tuple(str(p) for p in range(points)))


def known_weights() -> np.ndarray:
    weights = np.zeros((len(CLASSES), len(FEATURES)))
    weights[CLASSES.index("band")] = [0.2, 0.1, 0.15, -0.1, 0.3, -0.05, 0.02, -0.2, -0.1, 0.05, -0.04, 0.12, 0.06]
    weights[CLASSES.index("tile")] = [-0.1, 0.05, -0.1, 0.08, 0.2, 0.1, -0.03, 0.1, 0.07, 0.03, -0.06, -0.05, 0.09]
    return weights


def test_the_absolute_fit_recovers_known_coefficients():
    weights = known_weights()
    found = fit.fit(synthetic(weights), ridge=0.0, relative=False)
    assert set(found.fitted) == {"band", "tile"}
    np.testing.assert_allclose(found.weights, weights, atol=1e-8)


def test_the_relative_fit_recovers_how_plans_of_a_point_compare():
    weights = known_weights()
    samples = synthetic(weights)
    found = fit.fit(samples, ridge=0.0, relative=True)
    # a common shift of every class's bias is a point's level, which the relative fit leaves free
    shift = found.weights[:, 0] - weights[:, 0]
    active = [CLASSES.index(k) for k in ("band", "tile")]
    np.testing.assert_allclose(shift[active], shift[active[0]], atol=1e-6)
    np.testing.assert_allclose(found.weights[active, 1:], weights[active, 1:], atol=1e-6)
    predicted = fit.log_predictions(samples, found)
    for p in range(len(samples.labels)):
        mine = samples.point_of == p
        np.testing.assert_allclose(predicted[mine] - predicted[mine].mean(),
                                   samples.log_time[mine] - samples.log_time[mine].mean(), atol=1e-6)
    scored = fit.scores(samples, predicted).summary()
    assert scored["first_worst"] == pytest.approx(1.0) and scored["rho_worst"] == pytest.approx(1.0)
    assert fit.scores(samples, fit.log_predictions(samples, None)).summary()["first_worst"] > 1.05


def test_the_ridge_pulls_towards_no_correction_and_thin_classes_are_not_fitted():
    weights = known_weights()
    samples = synthetic(weights)
    loose, tight = fit.fit(samples, ridge=0.0, relative=False), fit.fit(samples, ridge=10.0, relative=False)
    assert np.abs(tight.weights).sum() < 0.5 * np.abs(loose.weights).sum()
    few = samples.select(samples.point_of < 1)  # one point: no class has MIN_POINTS
    assert fit.fit(few).fitted == () and not fit.fit(few).weights.any()


def test_cross_validation_predicts_each_point_by_a_fit_without_it():
    samples = synthetic(known_weights(), points=12)
    validated = fit.scores(samples, fit.cross_validated(samples, ridge=0.0, relative=False, folds=4)).summary()
    assert validated["points"] == 12 and validated["first_worst"] == pytest.approx(1.0, abs=1e-6)


def test_a_fit_of_some_features_is_the_fit_of_their_columns_alone():
    weights = known_weights()
    weights[:, [FEATURES.index(f) for f in BLOCK_SIZE]] = 0.0
    samples = synthetic(weights)
    found = fit.fit(samples, ridge=0.0, relative=False, used=BASE)
    assert found.used == BASE and not found.weights[:, [FEATURES.index(f) for f in BLOCK_SIZE]].any()
    np.testing.assert_allclose(found.weights, weights, atol=1e-8)
    with pytest.raises(ValueError, match="'threads_2048' is not a feature"):
        fit.fit(samples, used=BASE + ("threads_2048",))


def test_the_features_are_chosen_by_their_cross_validated_first_choices():
    """The block size's indicators are kept where they predict better held out, and left out
    where both sets predict alike (a tie keeps the smaller set)."""
    weights = known_weights()
    weights[CLASSES.index("band"), FEATURES.index("threads_1024")] = 0.8  # a bend the slope cannot follow
    weights[CLASSES.index("band"), FEATURES.index("threads_128")] = -0.6
    samples = synthetic(weights, points=16)
    used, tried = fit.choose(samples, ridge=0.0, relative=False, folds=4)
    assert used == FEATURES and tried[1]["first_gmean"] == pytest.approx(1.0, abs=1e-6)
    assert tried[0]["first_gmean"] > 1.01  # without the indicators held-out first choices miss
    weights[:, [FEATURES.index(f) for f in BLOCK_SIZE]] = 0.0  # the indicators say nothing: a tie
    used, tried = fit.choose(synthetic(weights, points=16), ridge=0.0, relative=False, folds=4)
    assert used == BASE and tried[0]["first_gmean"] == tried[1]["first_gmean"] == pytest.approx(1.0, abs=1e-6)


def test_a_larger_feature_set_must_win_by_the_margin(monkeypatch):
    """Scores a hair apart keep the smaller set; past CHOICE_MARGIN the larger wins."""
    gmeans = iter([])

    class Scored:
        def __init__(self, gmean):
            self.gmean = gmean

        def summary(self):
            return {"first_gmean": self.gmean}

    monkeypatch.setattr(fit, "cross_validated", lambda s, **kw: None)
    monkeypatch.setattr(fit, "scores", lambda s, predicted: Scored(next(gmeans)))
    for without, with_, chosen in ((1.053, 1.051, BASE), (1.066, 1.043, FEATURES),
                                   (1.050, 1.050 / (1 + fit.CHOICE_MARGIN) - 1e-6, FEATURES)):
        gmeans = iter([without, with_])
        assert fit.choose(None)[0] == chosen, (without, with_)


def test_spearman_of_ties_and_of_constants():
    assert fit.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert fit.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert fit.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert math.isnan(fit.spearman([1, 1, 1], [1, 2, 3]))


# ---------------------------------------------------------------------------- the fitted file


@pytest.fixture
def perfdb(tmp_path, monkeypatch):
    """A copy of the bundled database in its own folder, the correction switched on."""
    from fusec import data
    shutil.copy(data.PERFDB / f"{GPU}.json", tmp_path / f"{GPU}.json")
    monkeypatch.setenv("FUSEC_PERFDB", str(tmp_path))
    monkeypatch.setenv("FUSEC_CORRECTION", "1")
    return tmp_path


def base_predictor():
    from fusec.cost.perfdb import predictor_for
    return predictor_for(library(), GPU, corrected=False)


def a_correction(database, band_bias: float = math.log(10.0), low=None, high=None,
                 kind: str = "band") -> correction.Correction:
    """A correction that makes kernels of class ``kind`` ``exp(band_bias)`` times slower, no other change."""
    coefficients = tuple(band_bias if f == "bias" else 0.0 for f in FEATURES)
    fitted = correction.ClassFit(coefficients, low or (-1e3,) * len(FEATURES), high or (1e3,) * len(FEATURES), 50)
    return correction.Correction(database.slug, str(database.library["hash"]), database.built, ((kind, fitted),))


def write(folder, text: str):
    path = correction.path_for(GPU, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_without_a_fitted_file_the_prediction_is_the_database_alone(perfdb):
    from fusec.cost.perfdb import predictor_for
    from fusec.cost.perfdb.model import PerfdbPredictor
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either
        predictor = predictor_for(library(), GPU)
    assert type(predictor) is PerfdbPredictor and predictor.name == f"perfdb {GPU}"


def test_a_fitted_file_beside_the_database_corrects_its_prices(perfdb):
    from fusec.cost.perfdb import predictor_for
    base = base_predictor()
    fitted = a_correction(base.database)
    correction.save(fitted, correction.path_for(GPU, perfdb))
    predictor = predictor_for(library(), GPU)
    assert isinstance(predictor, correction.CorrectedPredictor) and predictor.correction == fitted
    assert predictor.name.endswith("+ fitted correction") and predictor.target == base.target
    from fusec.space.combinations import build_space
    dag = script_dag("bicgk")
    options = build_space(dag, library(), "float32", SIZES, base).options
    kernels = [kernel for found in options.values() for _, kernel, _ in found[:20]]
    assert {k.plan.family for k in kernels} >= {"band", "tile"}
    for kernel in kernels:
        factor = 10.0 if kernel.plan.family == "band" else 1.0
        assert predictor.kernel_seconds(kernel, dag, SIZES) == pytest.approx(
            base.kernel_seconds(kernel, dag, SIZES) * factor, rel=1e-12)


def test_fusec_correction_0_and_corrected_false_give_the_database_alone(perfdb, monkeypatch):
    from fusec.cost.perfdb import predictor_for
    from fusec.cost.perfdb.model import PerfdbPredictor
    correction.save(a_correction(base_predictor().database), correction.path_for(GPU, perfdb))
    assert type(predictor_for(library(), GPU, corrected=False)) is PerfdbPredictor
    monkeypatch.setenv("FUSEC_CORRECTION", "0")
    assert type(predictor_for(library(), GPU)) is PerfdbPredictor


@pytest.mark.parametrize("value", ["no", "false", "2", "-1"])
def test_a_bad_fusec_correction_is_an_argument_error_naming_it(perfdb, monkeypatch, value):
    """Not quietly the correction: FUSEC_CORRECTION=no (meant as 0) applied it."""
    from fusec.cost.perfdb import predictor_for
    from fusec.errors import ArgumentError
    correction.save(a_correction(base_predictor().database), correction.path_for(GPU, perfdb))
    monkeypatch.setenv("FUSEC_CORRECTION", value)
    with pytest.raises(ArgumentError, match=rf"is '{value}': set it to 1 or 0") as info:
        predictor_for(library(), GPU)
    assert info.value.argument == "$FUSEC_CORRECTION"


def test_the_corrected_ranking_follows_the_corrected_prices(perfdb):
    from fusec.cost.perfdb import predictor_for
    from fusec.space.combinations import build_space
    dag = script_dag("bicgk")
    base = base_predictor()
    first = build_space(dag, library(), "float32", SIZES, base).best().plan
    kinds = {plan_class(k) for k in first.kernels}
    assert len(kinds) == 1  # the database's first: kernels of one class, which the correction slows
    correction.save(a_correction(base.database, kind=kinds.pop()), correction.path_for(GPU, perfdb))
    space = build_space(dag, library(), "float32", SIZES, predictor_for(library(), GPU))
    best = space.best()
    assert not {plan_class(k) for k in best.plan.kernels} & {plan_class(k) for k in first.kernels}
    ranked = [c.predicted for c in space.top(10)]
    assert ranked == sorted(ranked)
    # and each combination's price is its kernels' corrected prices summed
    assert best.predicted == pytest.approx(sum(base.kernel_seconds(k, dag, SIZES) for k in
                                               _kernels(dag, best.plan, base.target)), rel=1e-12)


def _kernels(dag, plan, target):
    from fusec.emit.program import generate
    return generate(dag, library(), plan, "float32", target).kernels


def test_features_are_clamped_to_the_range_fitted():
    fitted = correction.ClassFit((0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0), (0.0,) * 8,
                                 (1.0, 1.0, 1.0, 2.0) + (1.0,) * 4, 9)
    assert fitted.factor((1.0, 0, 0, 1.5, 0, 0, 0, 0)) == pytest.approx(math.exp(1.5))
    assert fitted.factor((1.0, 0, 0, 9.0, 0, 0, 0, 0)) == pytest.approx(math.exp(2.0))  # not exp(9)
    assert fitted.factor((1.0, 0, 0, -4.0, 0, 0, 0, 0)) == pytest.approx(1.0)


def test_the_fitted_file_round_trips():
    database = base_predictor().database
    fitted = a_correction(database)
    again = correction.Correction.from_json(fitted.to_json())
    assert again == fitted and again.of("band") == fitted.of("band") and again.of("tile") is None


def _edited(database, edit) -> str:
    data = json.loads(a_correction(database).to_json())
    edit(data)
    return json.dumps(data)


BAD_FILES = {
    "not JSON": lambda d: "{not json",
    "another kind": lambda d: _edited(d, lambda x: x.update(kind="fusec tuning")),
    "a coefficient missing": lambda d: _edited(d, lambda x: x["classes"]["band"]["coefficients"].pop("waves")),
    "a coefficient not a number": lambda d: _edited(
        d, lambda x: x["classes"]["band"]["coefficients"].update(tail="fast")),
    "a coefficient too large": lambda d: _edited(d, lambda x: x["classes"]["band"]["coefficients"].update(bias=1e9)),
    "an unknown class": lambda d: _edited(d, lambda x: x["classes"].update(warp=x["classes"]["band"])),
    "low above high": lambda d: _edited(d, lambda x: x["classes"]["band"]["low"].update(waves=5e5)),
    "features of another version": lambda d: _edited(d, lambda x: x["features"].update(version=FEATURES_VERSION + 1)),
    "features of version 1": lambda d: _edited(d, lambda x: x["features"].update(version=1)),
    "an unknown feature used": lambda d: _edited(d, lambda x: x["features"].update(used=["bias", "warps"])),
    "no features used": lambda d: _edited(d, lambda x: x["features"].pop("used")),
    "a feature used without coefficients": lambda d: _edited(
        d, lambda x: x["classes"]["band"]["coefficients"].pop("threads_128")),
    "no kernels": lambda d: _edited(d, lambda x: x["classes"]["band"].update(kernels=0)),
    "the device missing": lambda d: _edited(d, lambda x: x.pop("gpu")),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_fitted_file_is_a_warning_naming_it_and_the_database_stands(perfdb, case):
    from fusec.cost.perfdb import predictor_for
    from fusec.cost.perfdb.model import PerfdbPredictor
    path = write(perfdb, BAD_FILES[case](base_predictor().database))
    with pytest.warns(correction.CorrectionWarning, match="damaged") as caught:
        predictor = predictor_for(library(), GPU)
    assert str(path) in str(caught[0].message)
    assert type(predictor) is PerfdbPredictor


def test_a_file_names_the_features_it_uses_and_applies_those_alone(perfdb):
    from fusec.cost.features import KernelFeatures
    database = base_predictor().database
    data = json.loads(a_correction(database).to_json())
    assert data["features"] == {"version": FEATURES_VERSION, "names": list(FEATURES), "used": list(FEATURES)}
    data["features"]["used"] = list(BASE)
    for field in ("coefficients", "low", "high"):
        for name in BLOCK_SIZE:
            data["classes"]["band"][field].pop(name)
    fitted = correction.Correction.from_json(json.dumps(data))
    assert fitted.used == BASE and json.loads(fitted.to_json()) == data
    at_1024 = KernelFeatures("band", KERNEL_VALUES[:-2] + (1.0, 0.0))
    assert fitted.factor(at_1024) == pytest.approx(10.0, rel=1e-12)


def test_a_file_of_features_version_2_is_used_with_its_eleven(perfdb):
    """Version 3 only adds the block size's indicators: a correction fitted with version 2's
    eleven features predicts as it did, with a file of today's format using those eleven."""
    from fusec.cost.perfdb import predictor_for
    database = base_predictor().database
    data = json.loads(a_correction(database, band_bias=0.3).to_json())
    data["classes"]["band"]["coefficients"].update(waves=-0.2, threads=0.1)
    today = dict(data, features=dict(data["features"], used=list(BASE)))
    data["features"] = {"version": 2, "names": list(BASE)}
    for entry in (data, today):
        for field in ("coefficients", "low", "high"):
            for name in BLOCK_SIZE:
                entry["classes"]["band"][field].pop(name, None)
    path = write(perfdb, json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predictor = predictor_for(library(), GPU)
    assert predictor.correction.used == BASE and predictor.correction.path == str(path)
    same = correction.Correction.from_json(json.dumps(today))
    dag = script_dag("bicgk")
    from fusec.space.combinations import build_space
    options = build_space(dag, library(), "float32", SIZES, predictor.base).options
    kernels = [kernel for found in options.values() for _, kernel, _ in found]
    assert {k.block for k in kernels} >= {128, 1024} and {k.plan.family for k in kernels} >= {"band"}
    for kernel in kernels:
        found = features(kernel, dag, SIZES, predictor.target)
        assert predictor.correction.factor(found) == same.factor(found)


@pytest.mark.parametrize("field", ["gpu", "library", "perfdb_built"], ids=["device", "library", "built"])
def test_a_file_fitted_to_another_database_is_not_used(perfdb, field):
    from fusec.cost.perfdb import predictor_for
    from fusec.cost.perfdb.model import PerfdbPredictor
    path = write(perfdb, _edited(base_predictor().database, lambda x: x.update({field: "something else"})))
    with pytest.warns(correction.CorrectionWarning, match="fitted to the database of") as caught:
        predictor = predictor_for(library(), GPU)
    assert str(path) in str(caught[0].message) and type(predictor) is PerfdbPredictor


def test_features_of_every_family():
    """Every class the space makes has features in range: bias 1, fp64 0 or 1, tail in [0, 1)."""
    from fusec.space.combinations import build_space
    base = base_predictor()
    seen = set()
    for script in ("atax", "gesummv"):  # band, tile, held, striped; vector, horizontal
        dag = script_dag(script)
        sizes = {s: 3001 for s in dag.sizes}
        for options in build_space(dag, library(), "float64", sizes, base).options.values():
            for _, kernel, _ in options[:40]:
                f = features(kernel, dag, sizes, base.target)
                seen.add(f.kind)
                values = f.as_dict()
                assert values["bias"] == 1.0 and values["fp64"] == 1.0 and 0.0 <= values["tail"] < 1.0
                assert 0.0 < values["l2_fit"] <= 1.0 and values["iterations"] >= 0.0
                assert all(math.isfinite(v) for v in f.values)
    assert {"vector", "tile", "band", "horizontal", "striped", "held"} <= seen


def test_training_file_round_trips_and_a_damaged_one_names_the_field(tmp_path):
    from fusec.errors import FusecError
    kernel = training.KernelRecord("band", 12e-6, KERNEL_VALUES)
    plan = training.PlanRecord('[{"calls":[0]}]', "q=sgemv", ("top",), (kernel,), "ok", 13e-6, 12.5e-6, 14e-6)
    point = training.PointRecord("bicgk", "float32", (("m", 700), ("n", 900)), "abc", "2026", FEATURES_VERSION, 3, 0,
                                 "today", 4.5, True, (plan,))
    data = training.TrainingData({"name": "NVIDIA H100 80GB HBM3", "slug": GPU}, (point,))
    path = tmp_path / "t.json"
    training.write(data, path)
    again = training.read(path)
    (read,) = again.points
    assert read.key == point.key and read.plans[0].kernels[0].values == kernel.values
    assert read.plans[0].predicted == pytest.approx(12e-6, rel=1e-12)
    assert read.plans[0].measured == pytest.approx(13e-6, rel=1e-12)  # kept in us: equal to rounding
    raw = json.loads(path.read_text())
    raw["points"][0]["plans"][0]["kernels"][0]["features"] = [1.0, 2.0]
    path.write_text(json.dumps(raw))
    with pytest.raises(FusecError, match=r"t\.json is damaged \(point 1 plan 1 kernel 1: features is not a list of 13"):
        training.read(path)


def test_every_point_weighs_the_same_and_slow_plans_less_within_it():
    one_kernel = lambda times: (np.arange(len(times)), np.zeros(len(times), int))  # noqa: E731
    times = [10.0, 12.0, 30.0, 2.0, 2.0]  # point 0: the first three; point 1: the other two
    plan_of, kind_of = one_kernel(times)
    samples = fit.Samples(np.array([0, 0, 0, 1, 1]), np.log(times), plan_of, kind_of, np.zeros(5),
                          np.ones((5, len(FEATURES))), ("a", "b"))
    weights = fit.plan_weights(samples)
    assert weights[:3].sum() == pytest.approx(1.0) and weights[3:].sum() == pytest.approx(1.0)
    assert weights[0] == weights[1]  # 12 is within NEAR x 10
    assert weights[2] / weights[0] == pytest.approx((fit.NEAR * 10.0 / 30.0) ** 2)


def _mutants(document, rng, count: int):
    """``count`` copies of a JSON document, each with one value somewhere replaced by a
    value of another type or out of range, or one key deleted."""
    odd = [None, True, -1, 0, 1e308, float("nan"), "x", [], {}, [1.0] * 9, {"bias": 1}]

    def paths(node, prefix=()):
        yield prefix
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            yield from paths(value, prefix + (key,))

    every = [p for p in paths(document) if p]
    for _ in range(count):
        copy = json.loads(json.dumps(document))
        path = every[int(rng.integers(len(every)))]
        parent = copy
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and rng.random() < 0.3:
            del parent[path[-1]]
        else:
            parent[path[-1]] = odd[int(rng.integers(len(odd)))]
        yield json.dumps(copy)


def test_mutated_fitted_files_are_used_or_refused_with_a_warning(perfdb):
    from fusec.cost.perfdb import predictor_for
    from fusec.cost.perfdb.model import PerfdbPredictor
    document = json.loads(a_correction(base_predictor().database).to_json())
    path = correction.path_for(GPU, perfdb)
    path.parent.mkdir(parents=True)
    outcomes = set()
    for i, text in enumerate(_mutants(document, np.random.default_rng(2026), 150)):
        path.write_text(text)
        os.utime(path, ns=(i + 1, i + 1))  # a new mtime: read again
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            predictor = predictor_for(library(), GPU)
        if type(predictor) is PerfdbPredictor:
            assert any(issubclass(w.category, correction.CorrectionWarning) for w in caught), text
            outcomes.add("refused")
        else:
            assert isinstance(predictor, correction.CorrectedPredictor)
            outcomes.add("used")
    assert outcomes == {"refused", "used"}


def test_mutated_training_files_are_read_or_refused_naming_the_file(tmp_path):
    from fusec.errors import FusecError
    kernel = training.KernelRecord("band", 12e-6, KERNEL_VALUES)
    plan = training.PlanRecord('[{"calls":[0]}]', "q=sgemv", ("top",), (kernel,), "ok", 13e-6, 12.5e-6, 14e-6)
    point = training.PointRecord("bicgk", "float32", (("m", 700), ("n", 900)), "abc", "2026", FEATURES_VERSION, 3, 0,
                                 "today", 4.5, True, (plan,))
    document = json.loads(training.TrainingData({"name": "NVIDIA H100 80GB HBM3", "slug": GPU}, (point,)).to_text())
    path = tmp_path / "t.json"
    outcomes = set()
    for text in _mutants(document, np.random.default_rng(7), 150):
        path.write_text(text)
        try:
            data = training.read(path)
        except FusecError as exc:
            assert str(path) in str(exc)
            outcomes.add("refused")
        else:
            fit.samples(data)  # what a fit reads of it works
            outcomes.add("read")
    assert outcomes == {"refused", "read"}


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h100-80gb-hbm3", "h200"])
def test_a_shipped_correction_is_what_its_shipped_training_file_fits(gpu, tmp_path, monkeypatch, capsys):
    """`fusec perfdb fit --gpu GPU` on the bundled training file gives the bundled correction's
    features and coefficients: the recipe in docs/tuning.md reproduces what ships."""
    from fusec import data
    from fusec.cli import main
    monkeypatch.delenv("FUSEC_PERFDB", raising=False)
    monkeypatch.delenv("FUSEC_TRAINING", raising=False)
    monkeypatch.chdir(ROOT)  # points of older features are recomputed from ./scripts
    out = tmp_path / "fitted.json"
    assert main(["perfdb", "fit", "--gpu", gpu, "-o", str(out)]) == 0, capsys.readouterr().out
    shipped = json.loads((data.ROOT / "perfdb" / "corrections" / f"{gpu}.json").read_text())
    fitted = json.loads(out.read_text())
    assert fitted["features"]["used"] == shipped["features"]["used"]
    assert fitted["fitted"]["points"] == shipped["fitted"]["points"]

    def numbers(tree, path=""):
        if isinstance(tree, dict):
            for key, value in tree.items():
                yield from numbers(value, f"{path}/{key}")
        elif isinstance(tree, list):
            for i, value in enumerate(tree):
                yield from numbers(value, f"{path}[{i}]")
        elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
            yield path, float(tree)
    want, got = dict(numbers(shipped["classes"])), dict(numbers(fitted["classes"]))
    assert set(got) == set(want)
    assert all(math.isclose(got[k], want[k], rel_tol=1e-9, abs_tol=1e-12) for k in want), \
        max(want, key=lambda k: abs(got[k] - want[k]))
