"""bench.retune without a GPU: a fake tune stands in for the GPU's. Every point
bench.peers measures is tuned at its sizes and shipped with the library; a
point with a usable plan is skipped; --budget stops cleanly and the next run
carries on; results merge into one table."""

from __future__ import annotations

import json
import shutil

import pytest

from bench import retune
from fusec.cost.analytic import DEFAULT
from fusec.library.loader import load_library
from fusec.space.combinations import build_space
from fusec.tune import store as tuning
from fusec.tune.search import OK, WRONG, Measurement, Row, TuneResult
from tests.helpers import LIBRARY

H100 = "NVIDIA H100 80GB HBM3"


class FakeTune:
    """Tunes nothing: the winner is the predictor's second choice at ``us``
    (its first measured 1.25x slower); a point in ``failing`` has no winner."""

    device = H100

    def __init__(self, failing=(), seconds=0.0):
        self.failing, self.seconds, self.calls = set(failing), seconds, []

    def __call__(self, dag, library, dtype, sizes, *, top, layouts, progress):
        self.calls.append((dag.name, dtype, dict(sizes), top, layouts))
        plans = [c.plan for _, c in zip(range(2), build_space(dag, library, dtype, sizes, DEFAULT).ranked())]
        nbytes = 1_000_000  # 50 GB/s at 20 us
        if dag.name in self.failing:
            rows = tuple(Row(i + 1, p, 1e-5, Measurement(WRONG, reason="ratio 1e9"), nbytes)
                         for i, p in enumerate(plans))
            winner = entry = None
        else:
            rows = (Row(1, plans[0], 1e-5, Measurement(OK, 25e-6), nbytes),
                    Row(2, plans[-1], 1.1e-5, Measurement(OK, 20e-6), nbytes))
            winner = rows[1]
            entry = tuning.TuningEntry(tuning.key(dag, library, dtype, sizes, "h100-80gb-hbm3"), winner.plan, 20.0,
                                       11.0, 2, 2, H100, tuning.now(), dag.name)
            tuning.store(entry)
        return TuneResult(dag, dtype, dict(sizes), H100, "fake", rows, winner, entry, None, "", self.seconds,
                          first=rows[0])


@pytest.fixture
def own_library(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    folder = tmp_path / "blas"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    return folder


def run(own_library, tmp_path, fake, *argv):
    return retune.main(["--library", str(own_library), "--out", str(tmp_path / "out"), "--name", "retune",
                        *argv], tune=fake)


def test_every_point_is_tuned_at_the_peers_sizes_and_shipped(own_library, tmp_path, capsys):
    fake = FakeTune()
    assert run(own_library, tmp_path, fake, "--scripts", "bicgk,vadd", "--top", "3", "--layouts", "7") == 0
    assert [(name, dtype, sizes, top, layouts) for name, dtype, sizes, top, layouts in fake.calls] == [
        ("bicgk", "float32", {"m": 16384, "n": 16384}, 3, 7), ("vadd", "float32", {"n": 2 ** 26}, 3, 7),
        ("bicgk", "float64", {"m": 8192, "n": 8192}, 3, 7), ("vadd", "float64", {"n": 2 ** 25}, 3, 7)]
    library = load_library(own_library)
    shipped = sorted((tuning.shipped_root(library) / "h100-80gb-hbm3").glob("*.json"))
    assert len(shipped) == 4
    table = (tmp_path / "out" / "retune.md").read_text()
    assert table.count("| bicgk |") == 2 and "| vadd | float64 | n=33554432 | 20.0 | 50 | 2 | 25.0 | 1.25 |" in table
    # tuned points are skipped the next time, unless --again
    fake = FakeTune()
    assert run(own_library, tmp_path, fake, "--scripts", "bicgk,vadd") == 0
    assert fake.calls == [] and "has a usable plan, skipped" in capsys.readouterr().err
    assert run(own_library, tmp_path, fake, "--scripts", "vadd", "--dtype", "float64", "--again") == 0
    assert len(fake.calls) == 1
    rows = json.loads((tmp_path / "out" / "retune.json").read_text())["rows"]
    assert len(rows) == 4  # the point tuned again replaced its row


def test_the_budget_stops_cleanly_and_the_next_run_carries_on(own_library, tmp_path, capsys):
    fake = FakeTune(seconds=1.0)
    assert run(own_library, tmp_path, fake, "--scripts", "sgemv,sscal", "--dtype", "float32", "--budget", "0") == 0
    assert len(fake.calls) == 1  # the first point starts; none after the budget
    assert "1 point(s) left for the next run: sscal float32 n=67108864" in capsys.readouterr().err
    fake = FakeTune()
    assert run(own_library, tmp_path, fake, "--scripts", "sgemv,sscal", "--dtype", "float32") == 0
    assert [c[0] for c in fake.calls] == ["sscal"]
    assert len(json.loads((tmp_path / "out" / "retune.json").read_text())["rows"]) == 2


def test_a_point_where_nothing_passed_ships_nothing_and_fails_the_run(own_library, tmp_path):
    fake = FakeTune(failing={"madd"})
    assert run(own_library, tmp_path, fake, "--scripts", "madd", "--dtype", "float32", "--size", "n=512") == 1
    assert not tuning.shipped_root(load_library(own_library)).exists()
    assert "| madd | float32 | m=512,n=512 | none passed |" in (tmp_path / "out" / "retune.md").read_text()


def test_bad_arguments_are_clear_errors(own_library, tmp_path, capsys):
    for argv, message in ((["--scripts", "nope"], "no sequence 'nope'"), (["--top", "0"], "--top must be"),
                          (["--size", "m=3"], "expected n=VALUE"), (["--budget", "-1"], "--budget -1: seconds"),
                          (["--vector-size", "0"], "--vector-size 0: a length")):
        with pytest.raises(SystemExit):
            run(own_library, tmp_path, FakeTune(), *argv)
        assert message in capsys.readouterr().err


def test_a_plan_the_cache_holds_is_shipped_without_tuning_again(own_library, tmp_path, capsys):
    fake = FakeTune()
    assert run(own_library, tmp_path, fake, "--scripts", "sgemv", "--dtype", "float64", "--no-ship") == 0
    library = load_library(own_library)
    assert len(fake.calls) == 1 and not tuning.shipped_root(library).exists()
    assert "--no-ship: nothing shipped" in (tmp_path / "out" / "retune.md").read_text()
    assert run(own_library, tmp_path, fake, "--scripts", "sgemv", "--dtype", "float64") == 0
    assert len(fake.calls) == 1  # not tuned again
    assert "the tuning cache's plan, shipped:" in capsys.readouterr().err
    (path,) = (tuning.shipped_root(library) / "h100-80gb-hbm3").glob("*.json")
    cached = next((tmp_path / "cache" / "tuning" / "h100-80gb-hbm3").glob("*.json"))
    assert path.read_text() == cached.read_text()


@pytest.mark.slow
def test_several_sizes_are_several_points(own_library, tmp_path):
    fake = FakeTune()
    assert run(own_library, tmp_path, fake, "--scripts", "gemver", "--dtype", "float64",
               "--size", "n=512", "--size", "n=1024") == 0
    assert [c[2] for c in fake.calls] == [{"m": 512, "n": 512}, {"m": 1024, "n": 1024}]
