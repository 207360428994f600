"""What makes a tuned plan and a routine's timings stale (fusec/library/pieces.py).

On a copy of the bundled library, a plan of BiCGK (sgemv's `registers` implementation beside
sgemtv, tile.cuh's routines) is shipped and the library then changed one way at a time: a new
implementation of sgemv (metadata, a routine, a mapping) or edits the plan's code does not see
leave it a hit, listed usable and kept by --prune, and leave every routine's timings in the
performance database; an edit to anything its kernels are built from makes it stale: a quiet
miss, found by previous(), named by `fusec tunings` and deleted by --prune.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import warnings
from pathlib import Path

import pytest

from fusec import cli
from fusec.cost.analytic import DEFAULT
from fusec.cost.perfdb import store as perfdb
from fusec.frontend import load_script
from fusec.library import pieces
from fusec.library.loader import load_library
from fusec.space.combinations import build_space
from fusec.tune import store as tuning
from tests.helpers import LIBRARY, ROOT, library, own_cache

SLUG = "h200"
SIZES = {"m": 300, "n": 200}
BICGK = ROOT / "scripts" / "bicgk.script"
VADD = ROOT / "scripts" / "vadd.script"

# a new implementation of sgemv: its metadata block, its compute routine (in sgemv.cu) and a
# mapping of its own (in library.fusec)
NEW_IMPLEMENTATION = """
implementation deferred band  # a new way, as "row sums deferred past the loop" would be
load       A band_load as band
load       x band_cols_load as band_cols
compute    band_gemv_deferred_compute(A:band, x:band_cols) -> y:band_rows_deferred scratch WARPS*BAND_ROWS sync
store      y band_rows_store as band_rows_deferred
"""
HELPER = "struct fusec_tile_note { int unused; };\n"  # no routine, no macro: the rest of its file
NEW_MAPPING = "mapping   band_rows_deferred registers  BAND_ROWS  # the new implementation's row sums\n"


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    return own_cache(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def tuned():
    """Entries of BiCGK (sgemv's `registers` implementation) and of VADD, tuned with the
    bundled library."""
    out = []
    for script in (BICGK, VADD):
        dag = load_script(script, library())
        sizes = {s: SIZES.get(s, 4096) for s in dag.sizes}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ranked = build_space(dag, library(), "float32", sizes, DEFAULT).ranked()
        plan = next(c.plan for c in ranked if script != BICGK or _implementations(c.plan)["sgemv"] == "registers")
        out.append(tuning.TuningEntry(tuning.key(dag, library(), "float32", sizes, SLUG), plan, 10.0, 11.0, 1, 5,
                                      "NVIDIA H200", "2026-12-01T00:00:00+00:00", script.stem))
    return out


def _implementations(plan) -> dict[str, str]:
    calls = ("sgemv", "sgemtv")
    return {calls[c]: i for k in plan.kernels for p in k.parts for c, i in zip(p.calls, p.implementations)}


@pytest.fixture
def folder(tmp_path, tuned) -> Path:
    """A copy of the bundled library shipping the two entries."""
    folder = tmp_path / "blas"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    copy = load_library(folder)
    for entry in tuned:
        tuning.ship(entry, copy)
    return folder


def _edit(folder: Path, name: str, old: str, new: str) -> None:
    path = folder / name
    text = path.read_text(encoding="utf-8")
    assert old in text, (name, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _lookup(folder: Path, script: Path):
    lib = load_library(folder)
    dag = load_script(script, lib)
    return tuning.lookup(dag, lib, "float32", {s: SIZES.get(s, 4096) for s in dag.sizes}, SLUG)


def _listed(capsys, folder: Path, *flags) -> dict[str, str]:
    """`fusec tunings`' shipped rows: script -> what its 'usable?' column says."""
    assert cli.main(["tunings", "--library", str(folder), *flags]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^  h200\s+(\w+)\s+float32\s+\S+\s+[\d.]+ us\s+\S+\s+(.*)$", out, re.M)
    return dict(rows)


def _add_an_implementation(folder: Path) -> None:
    _edit(folder, "sgemv.cu", "@*/", NEW_IMPLEMENTATION + "@*/")
    band = (folder / "band.cuh").read_text(encoding="utf-8")
    compute = re.search(r"__device__[^\n]*band_gemv_compute\(.*?\n}\n", band, re.S).group()
    with open(folder / "sgemv.cu", "a", encoding="utf-8") as f:
        f.write("\n// the new implementation's compute\n"
                + compute.replace("band_gemv_compute", "band_gemv_deferred_compute"))
    _edit(folder, "library.fusec", "mapping   band_rows ", NEW_MAPPING + "mapping   band_rows ")


def _database():
    """The bundled H200 database, which records each routine's digest."""
    database = perfdb.Database.from_json(perfdb.path_for("h200").read_text(encoding="utf-8"))
    assert database.library.get("routines")
    return database


def test_a_new_implementation_keeps_the_plans_and_the_timings(capsys, folder):
    _add_an_implementation(folder)
    grown = load_library(folder)
    assert "deferred" in {i.name for i in grown.functions["sgemv"].implementations}
    assert grown.files["sgemv.cu"] != library().files["sgemv.cu"]  # a file the plan reads changed
    assert _lookup(folder, BICGK) is not None and _lookup(folder, VADD) is not None
    assert _listed(capsys, folder, "--prune") == {"bicgk": "yes", "vadd": "yes"}
    assert len(list((folder / tuning.SHIPPED).glob("*/*.json"))) == 2
    database = _database()
    assert perfdb.stale_routines(database, grown) == frozenset()
    # judged by files, as before routine digests, the same database would be lost whole
    files_only = dataclasses.replace(database, library={k: v for k, v in database.library.items() if k != "routines"})
    assert perfdb.stale_routines(files_only, grown) is None


def test_a_change_to_a_routine_the_plan_uses_stales_it(capsys, folder):
    _edit(folder, "tile.cuh", "y[k] += s;", "y[k] += s * real(1);")
    changed = load_library(folder)
    assert _lookup(folder, BICGK) is None and _lookup(folder, VADD) is not None
    dag = load_script(BICGK, changed)
    stale = tuning.previous(dag, changed, "float32", SIZES, SLUG)
    assert stale is not None and stale.plan == _lookup_plan(folder)
    rows = _listed(capsys, folder)
    assert rows["vadd"] == "yes"
    assert rows["bicgk"] == "no: built from the library as it was: tile.cuh: gemv_compute() changed"
    assert perfdb.stale_routines(_database(), changed) == {"gemv_compute"}
    assert _listed(capsys, folder, "--prune") == {"vadd": "yes"}
    assert [p.name for p in (folder / tuning.SHIPPED).glob("*/*.json")] == [_shipped_name(folder, VADD)]


def _lookup_plan(folder: Path):
    (path,) = [p for p in (folder / tuning.SHIPPED).glob("*/*.json") if p.name != _shipped_name(folder, VADD)]
    from fusec.ir.plan import ProgramPlan
    return ProgramPlan.from_json(json.dumps(json.loads(path.read_text())["plan"]))


def _shipped_name(folder: Path, script: Path) -> str:
    lib = library()
    dag = load_script(script, lib)
    return f"{tuning.key(dag, lib, 'float32', {s: SIZES.get(s, 4096) for s in dag.sizes}, SLUG).digest}.json"


@pytest.mark.parametrize("name, old, new", [
    ("sgemv.cu", "s += a[c.tx * (TILE_COLS + 1) + j] * x[j];", "s += x[j] * a[c.tx * (TILE_COLS + 1) + j];"),
    ("tile.cuh", "// Routines of the tile geometry.", "// The routines of the tile geometry."),
    ("sgemv.cu", "@*/", "# a comment\n@*/"),
    ("library.fusec", "# thread (tx,ty) holds rows", "# thread (tx, ty) holds rows"),
], ids=["a routine of its function's file it does not run", "a comment", "a metadata comment",
        "a used mapping's comment"])
def test_what_the_plans_code_does_not_see_leaves_it_current(capsys, folder, name, old, new):
    _edit(folder, name, old, new)
    assert load_library(folder).files[name] != library().files[name]
    assert _lookup(folder, BICGK) is not None
    assert _listed(capsys, folder, "--prune")["bicgk"] == "yes"


@pytest.mark.parametrize("name, old, new, why", [
    ("library.fusec", "registers  TILE_ROWS/BLOCK_Y*VEC", "registers  (TILE_ROWS/BLOCK_Y)*VEC",
     "library.fusec: mapping tile changed"),
    ("tile.cuh", "#define ROWS_PER_THREAD", HELPER + "#define ROWS_PER_THREAD",
     "tile.cuh: rest changed"),
    ("sgemv.cu", "reference  A @ x", "reference  (A @ x)", "sgemv.cu: declaration changed"),
    ("sgemv.cu", "compute    gemv_compute(A:tile, x:cols) -> y:rows_partial",
     "compute    gemv_compute(A:tile, x:cols) -> y:rows_partial threads BLOCK_X x BLOCK_Y",
     "sgemv.cu: implementation registers changed"),
    ("tile.cuh", "#define ROWS_PER_THREAD (TILE_ROWS / BLOCK_Y)", "#define ROWS_PER_THREAD (TILE_ROWS/BLOCK_Y)",
     "tile.cuh: macro ROWS_PER_THREAD changed"),
    ("prelude.cuh", "// Helpers shared", "#define FUSEC_NOTE 1\n// Helpers shared", "prelude.cuh changed"),
], ids=["a used mapping", "a helper in a used routine file's rest", "the function's declaration",
        "the implementation the plan runs", "a macro its routines name", "the prelude"])
def test_what_the_plans_kernels_are_built_from_stales_it(capsys, folder, name, old, new, why):
    _edit(folder, name, old, new)
    changed = load_library(folder)
    assert _lookup(folder, BICGK) is None
    assert tuning.previous(load_script(BICGK, changed), changed, "float32", SIZES, SLUG) is not None
    row = _listed(capsys, folder)["bicgk"]
    assert row.startswith("no: built from the library as it was: ") and why in row, row
    assert "bicgk" not in _listed(capsys, folder, "--prune")


def test_the_rest_of_a_routine_file_stales_only_what_uses_that_file(capsys, folder):
    """VADD's kernels include vector.cuh and no tile routine: a helper added to tile.cuh's
    rest leaves its plan, and the vector routines' timings, as they were."""
    _edit(folder, "tile.cuh", "#define ROWS_PER_THREAD", HELPER + "#define ROWS_PER_THREAD")
    changed = load_library(folder)
    assert _lookup(folder, VADD) is not None and _lookup(folder, BICGK) is None
    stale = perfdb.stale_routines(_database(), changed)
    tile_routines = {r for r, home in changed.routine_homes.items() if home.endswith("tile.cuh")}
    timed = {key.routine for key in _database().timings}
    # the tile routines, and those of other files whose code names them or tile.cuh's macros
    assert tile_routines & timed <= stale and "madd_compute" in stale
    assert stale == {r for r in timed if "tile.cuh: rest" in pieces.routine_pieces(changed, r)}
    assert not {"vec_load", "vec_store", "dot_compute", "axpy_compute"} & stale


def test_a_plan_records_the_pieces_it_is_built_from(tuned):
    bicgk, vadd = tuned
    assert set(bicgk.recorded.pieces) >= {
        "prelude.cuh", "sgemv.cu: declaration", "sgemv.cu: implementation registers", "sgemtv.cu: declaration",
        "tile.cuh: gemv_compute()", "tile.cuh: tile_load()", "tile.cuh: macro ROWS_PER_THREAD", "tile.cuh: rest",
        "library.fusec: mapping tile", "sgemv.cu: rest"}
    assert not {p for p in bicgk.recorded.pieces if "band" in p or "staged" in p or "gemv_rows" in p}
    assert not {p for p in vadd.recorded.pieces if p.startswith("tile.cuh")}
    assert bicgk.recorded.pieces == {p: pieces.library_pieces(library()).digests[p] for p in bicgk.recorded.pieces}
    data = json.loads(bicgk.to_json())
    assert data["key"]["library"] == "blas" and data["calls"] == ["sgemv", "sgemtv"]
    assert data["library_pieces"] == dict(bicgk.recorded.pieces)


def test_an_entry_that_records_other_calls_than_its_script_is_a_warning(folder):
    lib = load_library(folder)
    dag = load_script(BICGK, lib)
    path = tuning.key(dag, lib, "float32", SIZES, SLUG).shipped_path(lib)
    data = json.loads(path.read_text())
    other = ("sgemv", "sgemtv_a")  # a plan of these would be judged current: they are as they were
    data.update(calls=list(other), library_pieces=dict(tuning.Recorded.of(lib, other, (), _lookup_plan(folder)).pieces))
    path.write_text(json.dumps(data))
    with pytest.warns(Warning, match="records other calls than its script makes"):
        assert tuning.lookup(dag, lib, "float32", SIZES, SLUG) is None


def test_every_shipped_plan_is_found_by_its_script_at_its_sizes(tmp_path):
    """The bundled library's shipped plans (the H100's among them, which no GPU here can tune
    again) are each found by a lookup with their script (the bundled scripts, the solvers'
    iterations, and the local stages of the two-rank programs tools/stage_scripts.py writes)."""
    import hashlib

    from fusec import data
    from tools.stage_scripts import write
    scripts = [*(ROOT / "scripts").rglob("*.script"), *(data.ROOT / "solvers").glob("*.script")]
    for script in ("atax", "bicgk"):
        scripts += [path for path, _ in write(str(ROOT / "scripts" / f"{script}.script"), 2, {"n": 16384},
                                              "float32", tmp_path / "stages")]
    by_text = {}
    for script in scripts:
        dag = load_script(script, library())
        by_text[hashlib.sha256(dag.text.encode()).hexdigest()] = dag
    shipped = sorted(tuning.shipped_root(library()).glob("*/*.json"))
    assert len(shipped) >= 116 and {p.parent.name for p in shipped} == {"h100-80gb-hbm3", "h200"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in shipped:
            key = json.loads(path.read_text(encoding="utf-8"))["key"]
            found = tuning.lookup(by_text[key["script"]], library(), key["dtype"], key["sizes"], key["gpu"])
            assert found is not None and found.path.samefile(path), path.name
    assert all(e.why_unused == "" for e in tuning.filed(library()) if e.shipped)
