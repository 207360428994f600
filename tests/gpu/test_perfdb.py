"""Building a performance database on the GPU, and predicting from it."""

from __future__ import annotations

import pytest

from fusec.cost.perfdb import store
from fusec.cost.perfdb.build import build
from fusec.cost.perfdb.model import PerfdbPredictor
from fusec.cost.perfdb.probes import probes
from fusec.frontend import load_script
from fusec.space.combinations import build_space
from tests.helpers import ROOT, library

pytestmark = pytest.mark.gpu

# Published DRAM peaks (bytes/s) by slug prefix: no probe can move data faster.
PEAKS = {"h100": 3.35e12, "h200": 4.8e12}


def _peak() -> float:
    from fusec.target import present
    name = present().slug
    for prefix, peak in PEAKS.items():
        if name.startswith(prefix):
            return peak
    pytest.skip(f"no published DRAM peak for {name} in this test")


@pytest.fixture(scope="module")
def vector_database(tmp_path_factory):
    folder = tmp_path_factory.mktemp("perfdb")
    database, path = build(library(), ("float32",), folder, progress=False,
                           select=lambda p: p.key.geometry == "vector")
    return database, path


def test_every_selected_routine_is_timed_and_the_file_loads(vector_database):
    database, path = vector_database
    wanted = {p.key for p in probes(library(), ("float32",)) if p.key.geometry == "vector"}
    loaded = store.load(path, library())
    assert loaded is not None and set(loaded.timings) == wanted
    assert loaded.library["hash"] == library().content_hash
    assert 0 < loaded.launch < 50e-6
    for timing in loaded.timings.values():
        assert 1 in timing.seconds and all(s > 0 for s in timing.seconds.values())


def test_missing_times_only_what_the_database_lacks(vector_database, tmp_path):
    """--missing adds held fusions' wide tile shapes to a database and keeps the
    timings it had, bit for bit."""
    import shutil

    from fusec.space.held import HELD_SHAPES
    old, path = vector_database
    folder = tmp_path / "grown"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    wide = {(s.block, s.iters, s.tile_rows) for s in HELD_SHAPES}

    def wanted(p):
        return p.key.geometry == "vector" or (p.key.routine == "tile_load"
                                              and (p.key.block, p.key.iters, p.key.tile_rows) in wide)
    grown, grown_path = build(library(), ("float32",), folder, progress=False, select=wanted, missing=True)
    loaded = store.load(grown_path, library())
    new = set(loaded.timings) - set(old.timings)
    assert new and {(k.routine, k.block, k.iters, k.tile_rows) for k in new} == {
        ("tile_load", *shape) for shape in wide}
    assert all(loaded.timings[k] == t for k, t in old.timings.items())
    assert loaded.launch == old.launch  # the kept timings were measured net of it
    for key in new:
        assert all(s > 0 for s in loaded.timings[key].seconds.values())


def test_load_probes_move_data_at_a_possible_speed(vector_database):
    """A load nvcc dropped would look faster than the memory; one that runs is
    below the peak and, with enough blocks, well above a tenth of it."""
    database, _ = vector_database
    peak = _peak()
    for timing in database.timings.values():
        key = timing.key
        if key.routine != "vec_load":
            continue
        nbytes = key.block * 16  # one 16-byte access per thread and iteration
        best = max(database.sms * blocks * nbytes / s for blocks, s in timing.seconds.items())
        assert 0.1 * peak < best < peak, (key, best)


def test_fused_waxpby_is_predicted_first(vector_database, monkeypatch):
    database, _ = vector_database
    dag = load_script(ROOT / "scripts" / "waxpby.script", library())
    space = build_space(dag, library(), "float32", {"n": 1 << 24}, PerfdbPredictor(database, library()))
    assert len(space.best().plan.kernels) == 1


def test_the_database_records_the_copy_bandwidth_it_measured(vector_database):
    """No attribute gives the copy bandwidth: perfdb build measures it and the GPU
    record keeps it as measured, between a third of the DRAM peak and the peak."""
    database, _ = vector_database
    target = database.device["target"]
    assert target["bandwidth_source"] == "measured"
    assert _peak() / 3 < target["copy_bandwidth"] < _peak()
