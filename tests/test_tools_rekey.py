"""tools/rekey_tunings.py: shipped plans carried over a library change their scripts do not see."""

from __future__ import annotations

import dataclasses
import shutil

from fusec.cost.analytic import DEFAULT
from fusec.frontend import load_script
from fusec.library.loader import load_library
from fusec.space.combinations import build_space
from fusec.tune import store as tuning
from tests.helpers import LIBRARY, ROOT
from tests.test_library_loader import readme_examples
from tools.rekey_tunings import rekey

SLUG = "h100-80gb-hbm3"
SIZES = {"m": 300, "n": 200}


def _entry(script, library, sizes):
    dag = load_script(ROOT / "scripts" / f"{script}.script", library)
    plan = build_space(dag, library, "float32", sizes, DEFAULT).best().plan
    return dag, tuning.TuningEntry(tuning.key(dag, library, "float32", sizes, SLUG), plan, 12.5, 13.0, 2, 10,
                                   "NVIDIA H100 80GB HBM3", "2026-11-22T00:00:00+00:00", script)


def test_plans_move_only_where_their_scripts_files_are_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    was_folder, now_folder = tmp_path / "was", tmp_path / "now"
    shutil.copytree(LIBRARY, was_folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    was = load_library(was_folder)
    shutil.copytree(was_folder, now_folder)
    (now_folder / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")  # a function added
    sdot = now_folder / "sdot.cu"
    sdot.write_text(sdot.read_text() + "// edited\n")  # and one axpydot calls, edited
    now = load_library(now_folder)
    bicgk, kept = _entry("bicgk", was, SIZES)
    axpydot, edited = _entry("axpydot", was, {"n": 1000})
    other = dataclasses.replace(kept, key=dataclasses.replace(kept.key, library="0" * 16, sizes=(("m", 64), ("n", 64))))
    for entry in (kept, edited, other):
        tuning.ship(entry, now)
    assert tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None  # stale: keyed on the library as it was

    moved, left = rekey(now, was, ROOT / "scripts", dry_run=True)
    assert len(moved) == 1 and len(left) == 2 and tuning.lookup(bicgk, now, "float32", SIZES, SLUG) is None

    moved, left = rekey(now, was, ROOT / "scripts")
    found = tuning.lookup(bicgk, now, "float32", SIZES, SLUG)
    assert found is not None and moved == [found.path]
    assert (found.plan, found.measured_us, found.date) == (kept.plan, kept.measured_us, kept.date)
    assert not kept.key.shipped_path(now).exists()
    assert sorted(left) == sorted([
        f"{edited.key.digest}.json: its script is built from files that changed: sdot.cu",
        f"{other.key.digest}.json: keyed on library 0000000000000000, not the one at the revision given"
        f" ({was.content_hash})"])
    assert tuning.lookup(axpydot, now, "float32", {"n": 1000}, SLUG) is None
    assert rekey(now, was, ROOT / "scripts")[0] == []  # nothing left to move
