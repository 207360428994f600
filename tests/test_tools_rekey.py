"""tools/rekey_tunings.py: shipped plans keyed the ways fusec keyed them before (on a whole
library's content hash; on the digest of the files their scripts read, format 1) carried over to
the key and record of now, where the pieces their plans are built from are unchanged."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from fusec.cost.analytic import DEFAULT
from fusec.frontend import load_script
from fusec.library.digest import dag_files, digest
from fusec.library.loader import load_library
from fusec.space.combinations import build_space
from fusec.tune import store as tuning
from tests.helpers import LIBRARY, ROOT
from tests.test_library_loader import readme_examples
from tools.rekey_tunings import main, rekey

SLUG = "h100-80gb-hbm3"
SIZES = {"m": 300, "n": 200}


def _entry(script, library, sizes):
    dag = load_script(ROOT / "scripts" / f"{script}.script", library)
    plan = build_space(dag, library, "float32", sizes, DEFAULT).best().plan
    return dag, tuning.TuningEntry(tuning.key(dag, library, "float32", sizes, SLUG), plan, 12.5, 13.0, 2, 10,
                                   "NVIDIA H100 80GB HBM3", "2026-11-22T00:00:00+00:00", script)


def _ship_keyed_as_before(entry, library, keyed_on: str, files: dict | None = None) -> Path:
    """Ship ``entry`` as fusec once keyed it (format 1): on ``keyed_on``, a library's content
    hash (recording no files) or the digest of ``files``, the files its script read."""
    old = dataclasses.replace(entry, key=dataclasses.replace(entry.key, library=keyed_on))
    data = json.loads(old.to_json())
    for field in ("library_pieces", "calls", "composites"):
        del data[field]
    data["format"] = tuning.KEYED_ON_FILES
    if files is not None:
        data["library_files"] = files
    path = old.key.shipped_path(library)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _libraries(tmp_path):
    """(the bundled library copied, a copy of that with a function added, sdot's routine
    edited and a comment of sgemv.cu edited)."""
    was_folder, now_folder = tmp_path / "was", tmp_path / "now"
    shutil.copytree(LIBRARY, was_folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    shutil.copytree(was_folder, now_folder)
    (now_folder / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")  # a function added
    sdot = now_folder / "sdot.cu"
    sdot.write_text(sdot.read_text().replace("r[0] += x[v] * y[v];", "r[0] += y[v] * x[v];"))  # axpydot runs it
    sgemv = now_folder / "sgemv.cu"
    sgemv.write_text(sgemv.read_text() + "// edited\n")  # a file bicgk reads, none of its code
    return load_library(was_folder), load_library(now_folder)


def test_plans_move_only_where_the_pieces_of_their_plans_are_unchanged_and_all_or_none(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    was, now = _libraries(tmp_path)
    bicgk, kept = _entry("bicgk", was, SIZES)
    axpydot, edited = _entry("axpydot", was, {"n": 1000})
    sscal, on_files = _entry("sscal", was, {"n": 1000})
    _, current = _entry("sscal", now, {"n": 2000})  # keyed as fusec keys them now
    other = dataclasses.replace(kept, key=dataclasses.replace(kept.key, sizes=(("m", 64), ("n", 64))))
    kept_path = _ship_keyed_as_before(kept, now, was.content_hash)
    edited_path = _ship_keyed_as_before(edited, now, was.content_hash)
    files = dag_files(was, sscal)
    files_path = _ship_keyed_as_before(on_files, now, digest(files), files)
    other_path = _ship_keyed_as_before(other, now, "0" * 16)
    current_path = tuning.ship(current, now)
    assert tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None  # keyed the old way: never found
    reasons = sorted([
        f"{edited_path.name}: its plan is built from pieces that changed: sdot.cu: dot_compute()",
        f"{other_path.name}: keyed on library 0000000000000000, not the one at the revision given"
        f" ({was.content_hash})"])
    moving = sorted([kept.key.shipped_path(now), on_files.key.shipped_path(now)])

    for dry_run in (True, False):  # something cannot move: nothing moves
        outcome = rekey(now, was, ROOT / "scripts", dry_run=dry_run)
        assert outcome.refused and sorted(outcome.left) == reasons
        assert sorted(outcome.moved) == moving and outcome.current == [current_path]
        assert kept_path.exists() and tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None

    outcome = rekey(now, was, ROOT / "scripts", partial=True)
    found = tuning.lookup(bicgk, now, "float32", SIZES, SLUG)
    assert not outcome.refused and found is not None and found.path in outcome.moved
    assert (found.plan, found.measured_us, found.date) == (kept.plan, kept.measured_us, kept.date)
    recorded = json.loads(found.path.read_text())
    assert recorded["format"] == tuning.FORMAT and recorded["key"]["library"] == now.name
    assert recorded["library_pieces"] == dict(tuning.Recorded.of(now, ("sgemv", "sgemtv"), (), kept.plan).pieces)
    assert tuning.lookup(sscal, now, "float32", {"n": 1000}, SLUG).plan == on_files.plan
    assert not kept_path.exists() and not files_path.exists() and edited_path.exists() and other_path.exists()
    assert sorted(outcome.left) == reasons
    assert tuning.lookup(axpydot, now, "float32", {"n": 1000}, SLUG) is None
    again = rekey(now, was, ROOT / "scripts", partial=True)
    assert again.moved == [] and sorted(again.current) == sorted([current_path, *outcome.moved])


def test_without_a_revision_the_plans_must_be_keyed_on_the_library_as_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    was, now = _libraries(tmp_path)
    bicgk, entry = _entry("bicgk", now, SIZES)
    old = _ship_keyed_as_before(entry, now, was.content_hash)  # not the hash of `now`
    assert main(["--library", now.path, "--scripts", str(ROOT / "scripts")]) == 1
    out = capsys.readouterr().out
    assert (f"left: {old.name}: keyed on library {was.content_hash}, not the one at the revision given"
            f" ({now.content_hash})") in out
    assert "refused: 1 plan(s) cannot move, so none moved" in out and old.exists()
    old.unlink()
    old = _ship_keyed_as_before(entry, now, now.content_hash)
    assert main(["--library", now.path, "--scripts", str(ROOT / "scripts")]) == 0
    assert (f"re-keyed 1 shipped plan(s) usable with library {now.content_hash} to the pieces their plans are"
            " built from; 0 keyed so already") in capsys.readouterr().out
    assert not old.exists() and tuning.lookup(bicgk, now, "float32", SIZES, SLUG).plan == entry.plan
