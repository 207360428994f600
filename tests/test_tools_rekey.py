"""tools/rekey_tunings.py: shipped plans keyed on a whole library's content hash carried over to
the key on the files their scripts read, where those files are unchanged."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from fusec.cost.analytic import DEFAULT
from fusec.frontend import load_script
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


def _ship_keyed_on_the_whole_library(entry, library, content_hash: str) -> Path:
    """Ship ``entry`` as fusec once keyed it: on a library's content hash, recording no files."""
    old = dataclasses.replace(entry, key=dataclasses.replace(entry.key, library=content_hash))
    data = json.loads(old.to_json())
    del data["library_files"]
    path = old.key.shipped_path(library)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _libraries(tmp_path):
    """(the bundled library copied, a copy of that with a function added and sdot.cu edited)."""
    was_folder, now_folder = tmp_path / "was", tmp_path / "now"
    shutil.copytree(LIBRARY, was_folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    shutil.copytree(was_folder, now_folder)
    (now_folder / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")  # a function added
    sdot = now_folder / "sdot.cu"
    sdot.write_text(sdot.read_text() + "// edited\n")  # and one axpydot calls, edited
    return load_library(was_folder), load_library(now_folder)


def test_plans_move_only_where_their_scripts_files_are_unchanged_and_all_or_none(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    was, now = _libraries(tmp_path)
    bicgk, kept = _entry("bicgk", was, SIZES)
    axpydot, edited = _entry("axpydot", was, {"n": 1000})
    _, current = _entry("sscal", now, {"n": 1000})  # keyed as fusec keys them now
    other = dataclasses.replace(kept, key=dataclasses.replace(kept.key, sizes=(("m", 64), ("n", 64))))
    kept_path = _ship_keyed_on_the_whole_library(kept, now, was.content_hash)
    edited_path = _ship_keyed_on_the_whole_library(edited, now, was.content_hash)
    other_path = _ship_keyed_on_the_whole_library(other, now, "0" * 16)
    current_path = tuning.ship(current, now)
    assert tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None  # keyed the old way: never found
    reasons = sorted([
        f"{edited_path.name}: its script is built from files that changed: sdot.cu",
        f"{other_path.name}: keyed on library 0000000000000000, not the one at the revision given"
        f" ({was.content_hash})"])

    for dry_run in (True, False):  # something cannot move: nothing moves
        outcome = rekey(now, was, ROOT / "scripts", dry_run=dry_run)
        assert outcome.refused and sorted(outcome.left) == reasons
        assert outcome.moved == [kept.key.shipped_path(now)] and outcome.current == [current_path]
        assert kept_path.exists() and tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None

    outcome = rekey(now, was, ROOT / "scripts", partial=True)
    found = tuning.lookup(bicgk, now, "float32", SIZES, SLUG)
    assert not outcome.refused and found is not None and outcome.moved == [found.path]
    assert (found.plan, found.measured_us, found.date) == (kept.plan, kept.measured_us, kept.date)
    assert json.loads(found.path.read_text())["library_files"] == dict(tuning.key(bicgk, now, "float32", SIZES,
                                                                                  SLUG).files)
    assert not kept_path.exists() and edited_path.exists() and other_path.exists()
    assert sorted(outcome.left) == reasons
    assert tuning.lookup(axpydot, now, "float32", {"n": 1000}, SLUG) is None
    again = rekey(now, was, ROOT / "scripts", partial=True)
    assert again.moved == [] and sorted(again.current) == sorted([current_path, found.path])


def test_without_a_revision_the_plans_must_be_keyed_on_the_library_as_it_is(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    was, now = _libraries(tmp_path)
    bicgk, entry = _entry("bicgk", now, SIZES)
    old = _ship_keyed_on_the_whole_library(entry, now, was.content_hash)  # not the hash of `now`
    assert main(["--library", now.path, "--scripts", str(ROOT / "scripts")]) == 1
    out = capsys.readouterr().out
    assert (f"left: {old.name}: keyed on library {was.content_hash}, not the one at the revision given"
            f" ({now.content_hash})") in out
    assert "refused: 1 plan(s) cannot move, so none moved" in out and old.exists()
    old.unlink()
    old = _ship_keyed_on_the_whole_library(entry, now, now.content_hash)
    assert main(["--library", now.path, "--scripts", str(ROOT / "scripts")]) == 0
    assert (f"re-keyed 1 shipped plan(s) keyed on library {now.content_hash} to the files their scripts read;"
            " 0 keyed so already") in capsys.readouterr().out
    assert not old.exists() and tuning.lookup(bicgk, now, "float32", SIZES, SLUG).plan == entry.plan
