"""GPU tier of the plan measurements: ``fusec perfdb measure-plans`` measures every
candidate of a drawn point on the GPU (each checked by the oracle), records the
database's prices beside the times, and ``fusec perfdb fit`` reads the file back;
``bench.prediction --draw`` scores a point. Small scripts only, one precision."""

from __future__ import annotations

import json

import pytest

from fusec import cli
from fusec.cost import training
from fusec.target import present
from tests.helpers import ROOT

pytestmark = pytest.mark.gpu

SCRIPTS = [ROOT / "scripts" / f"{s}.script" for s in ("sgemv", "waxpby")]


@pytest.fixture(autouse=True)
def folders(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSEC_TRAINING", str(tmp_path / "training"))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    return tmp_path


def test_measure_plans_times_every_candidate_of_a_draw_and_fit_reads_them(capsys, tmp_path):
    out = tmp_path / "plans.json"
    code = cli.main(["perfdb", "measure-plans", *map(str, SCRIPTS), "--dtype", "float32", "--draws", "1",
                     "--seed", "3", "--repeat", "5", "-o", str(out), "-q"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    data = training.read(out)
    assert data.gpu["slug"] == present().slug
    assert [p.script for p in data.points] == ["sgemv", "waxpby"] and all(p.complete for p in data.points)
    for point in data.points:
        assert all(p.verdict == "ok" and p.measured > 0 for p in point.plans), [p.verdict for p in point.plans]
        assert point.seed == 3 and point.draw == 0
        assert len({p.plan for p in point.plans}) == len(point.plans)
    # the same command again measures nothing more
    assert cli.main(["perfdb", "measure-plans", *map(str, SCRIPTS), "--dtype", "float32", "--draws", "1",
                     "--seed", "3", "-o", str(out), "-q"]) == 0
    assert "0 point(s) measured" in capsys.readouterr().out
    code = cli.main(["perfdb", "fit", "--training", str(out), "-o", str(tmp_path / "fitted.json"), "--force"])
    printed = capsys.readouterr().out
    assert "2 points" in printed and "fit, cross-validated" in printed


def test_the_draw_mode_scores_a_point(capsys, tmp_path):
    from bench import prediction
    assert prediction.main(["--draw", "--seed", "5", "--scripts", "sgemv", "--dtype", "float32", "--repeat", "5",
                            "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("*-prediction-draw.json")
    report = json.loads(path.read_text())
    (run,) = report["runs"]
    (point,) = run["points"]
    assert run["seed"] == 5 and point["complete"] and point["measured"] >= 3
    ratios = [c["ratio"] for c in point["choices"].values()]
    assert ratios and all(r is not None and r >= 1.0 for r in ratios)
    assert min(r["measured_us"] for r in point["rows"] if r["measured_us"]) == point["best_us"]
    assert path.with_suffix(".md").is_file() and "seed 5" in path.with_suffix(".md").read_text()
