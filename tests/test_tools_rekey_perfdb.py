"""tools/rekey_perfdb.py: routine digests recorded in a database built before them, only where
every file it recorded is the library's as it is; anything else left as it is and named."""

from __future__ import annotations

import json

import pytest

from fusec import data
from fusec.cost.perfdb import store
from fusec.library.loader import load_library
from tests.helpers import LIBRARY
from tools.rekey_perfdb import main

SHIPPED = data.PERFDB / "h200.json"


def _without_digests(folder, name="h200.json", **files):
    """The shipped H200 database as it was before routine digests, as if built from the
    library's files as they are now (a comment edited since it was built changes a file's
    digest), those named in ``files`` (name -> digest) changed, into ``folder``."""
    database = json.loads(SHIPPED.read_text())
    del database["library"]["routines"]
    database["library"]["hash"] = "0" * 16  # not the library's content hash: judged by its files
    database["library"]["files"] = {**load_library(LIBRARY).files, **files}
    path = folder / name
    path.write_text(json.dumps(database, indent=1))
    return path


def test_the_digests_of_a_database_that_timed_the_library_as_it_is_are_recorded(tmp_path, capsys):
    path = _without_digests(tmp_path)
    assert main(["--perfdb", str(tmp_path), "--library", str(LIBRARY)]) == 0
    timed = {entry["routine"] for entry in json.loads(path.read_text())["routines"]}
    recorded = json.loads(path.read_text())["library"]["routines"]
    assert recorded == store.routine_digests(load_library(LIBRARY), timed) == \
        json.loads(SHIPPED.read_text())["library"]["routines"]
    assert f"h200.json: recorded the digests of {len(timed)} routines" in capsys.readouterr().out
    assert main(["--perfdb", str(tmp_path), "--library", str(LIBRARY)]) == 0
    assert "records routine digests already" in capsys.readouterr().out


def test_a_database_of_other_files_a_damaged_one_and_a_dry_run_are_left_as_they_are(tmp_path, capsys):
    other = _without_digests(tmp_path, "other.json", **{"sgemv.cu": "0" * 16})
    dry = _without_digests(tmp_path, "dry.json")
    (tmp_path / "broken.json").write_text("{")
    before = {p.name: p.read_text() for p in (other, dry)}
    assert main(["--perfdb", str(tmp_path), "--library", str(LIBRARY), "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "other.json: not proven to time the library as it is (files differ: sgemv.cu); left as it is" in out
    assert "broken.json: cannot be read as a performance database (JSONDecodeError" in out
    assert "dry.json: would record the digests of" in out
    assert {p.name: p.read_text() for p in (other, dry)} == before


@pytest.mark.parametrize("argv, message", [
    (["--perfdb", "no/such/folder"], "--perfdb no/such/folder: not a folder"),
    (["--library", "no/such/library"], "--library no/such/library:"),
])
def test_a_bad_folder_is_named(argv, message, capsys, tmp_path):
    argv = [a.replace("no/such", str(tmp_path / "no/such")) for a in argv]
    if "--perfdb" not in argv:
        argv += ["--perfdb", str(tmp_path)]
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2 and message.replace("no/such", str(tmp_path / "no/such")) in capsys.readouterr().err
