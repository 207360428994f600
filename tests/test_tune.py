"""``fusec tune`` and the tuning cache, without a GPU.

The cache (fusec/tuning.py): its key changes with every field it is keyed on,
entries round-trip, an entry that is damaged or filed under the wrong key is a
miss with a warning naming the file, and concurrent writers never leave a file
a reader cannot parse. ``fusec.compile`` and ``fusec compile`` use a planted
entry and say so; ``tuned=False`` / ``--no-tuned`` ignore it. The tune flow
(fusec/tune.py) runs with a fake measurer: a wrong candidate or one that fails
to compile or launch is never chosen. Every test points $FUSEC_CACHE_DIR at
its own folder.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import re
import shutil
import time
import warnings
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

import fusec
import fusec.api
from fusec import cli, oracle
from fusec.cost.analytic import DEFAULT
from fusec.errors import FusecWarning
from fusec.frontend import load_script
from fusec.ir.plan import HorizontalPlan
from fusec.space.combinations import build_space
from fusec.tune import store as tuning
from fusec.tune import untuned
from fusec.tune.search import (
    COMPILE_FAILED,
    LAUNCH_FAILED,
    OK,
    WRONG,
    Measurer,
    candidate_groups,
    candidates,
    choose,
    report,
    tune,
)
from tests.helpers import LIBRARY, ROOT, library, own_cache

BICGK = ROOT / "scripts" / "bicgk.script"
GESUMMV = ROOT / "scripts" / "gesummv.script"
H100 = "NVIDIA H100 80GB HBM3"
SLUG = "h100-80gb-hbm3"
SIZES = {"m": 300, "n": 200}


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    return own_cache(monkeypatch, tmp_path)


def bicgk():
    return load_script(BICGK, library())


def planted(dag=None, *, rank=3, sizes=SIZES, dtype="float32", gpu=SLUG, store=True) -> tuning.TuningEntry:
    """An entry holding the ``rank``-th best-predicted plan, or a later one: never
    the plan compile would pick without the cache."""
    dag = dag or bicgk()
    predicted = fusec.api.compile_dag(dag, library(), dtype, sizes=sizes, gpu=gpu, tuned=False).generated.plan
    # from the space compile builds for gpu="h100": a tuned plan is used only where it offers it
    ranked = (c for c in build_space(dag, library(), dtype, sizes, h100()).ranked() if c.plan != predicted)
    combination = [next(ranked) for _ in range(rank - 1)][-1]
    entry = tuning.TuningEntry(tuning.key(dag, library(), dtype, sizes, gpu), combination.plan, 12.5,
                               combination.predicted * 1e6, rank, 10, H100, "2026-11-22T12:00:00+00:00",
                               "bicgk")
    if store:
        tuning.store(entry)
    return entry


# -- the key --------------------------------------------------------------------------------


def edited(lib, files: dict):
    """``lib`` as the loader would give it with ``files`` (name -> digest) changed or added:
    its content hash, over every file, changes too."""
    import hashlib
    files = {**lib.files, **files}
    return dataclasses.replace(lib, files=MappingProxyType(files),
                               content_hash=hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16])


def test_the_key_changes_with_every_field(monkeypatch):
    dag, lib = bicgk(), library()
    base = tuning.key(dag, lib, "float32", SIZES, SLUG)
    assert base == tuning.key(dag, lib, "float32", {"n": 200, "m": 300}, SLUG)  # order does not matter
    variants = {
        "script": tuning.key(dataclasses.replace(dag, text=dag.text + "\n# a comment\n"), lib, "float32",
                             SIZES, SLUG),
        "library": tuning.key(dag, dataclasses.replace(lib, name="other"), "float32", SIZES, SLUG),
        "sizes": tuning.key(dag, lib, "float32", {"m": 300, "n": 201}, SLUG),
        "dtype": tuning.key(dag, lib, "float64", SIZES, SLUG),
        "gpu": tuning.key(dag, lib, "float32", SIZES, "a100-sxm4-80gb"),
    }
    monkeypatch.setattr(tuning, "__version__", "99.0")
    variants["fusec"] = tuning.key(dag, lib, "float32", SIZES, SLUG)
    for field, other in variants.items():
        assert other.fields()[field] != base.fields()[field], field
        assert other.digest != base.digest and other.path != base.path, field
    assert len({k.digest for k in variants.values()}) == len(variants)


def test_the_key_holds_the_librarys_name_not_its_files():
    """What a plan uses of the library is known only from the plan, so it is no part of the key
    (it is recorded in the entry, and judged after reading it: tests/test_staleness.py): a
    library whose files changed, any of them, keys BiCGK's plans alike; another name does not."""
    dag, lib = bicgk(), library()
    base = tuning.key(dag, lib, "float32", SIZES, SLUG)
    assert base.library == lib.name and base.calls == ("sgemv", "sgemtv") and base.composites == ()
    changed = edited(lib, {"sgemv.cu": "0" * 16, "tile.cuh": "1" * 16, "library.fusec": "2" * 16})
    assert changed.content_hash != lib.content_hash
    assert tuning.key(dag, changed, "float32", SIZES, SLUG).digest == base.digest


def test_the_key_is_a_sha256_of_canonical_json_and_files_under_the_gpu(cache):
    key = tuning.key(bicgk(), library(), "float32", SIZES, SLUG)
    assert re.fullmatch(r"[0-9a-f]{64}", key.digest)
    assert key.fields()["script"] == __import__("hashlib").sha256(bicgk().text.encode()).hexdigest()
    assert key.path == cache / "tuning" / SLUG / f"{key.digest}.json"


# -- entries --------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_entry_round_trips(cache):
    entry = planted()
    assert entry.key.path.is_file()
    found = tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG)
    assert found == entry and found.path == entry.key.path
    data = json.loads(entry.key.path.read_text())
    assert data["key"] == entry.key.fields()  # a reader can check what the file is for
    assert {"plan", "measured_us", "predicted_rank", "top", "gpu_name", "date"} <= set(data)
    assert found.describe() == f"tuned on {H100} 2026-11-22, K=10, measured 12.5 us (predicted rank 3)"


@pytest.mark.slow
def test_an_entry_says_whether_its_kernels_turn_and_an_older_one_turns(cache):
    entry = planted(store=False)
    forwards = dataclasses.replace(entry, turning=False)
    tuning.store(forwards)
    found = tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG)
    assert found.turning is False and found.describe().endswith(", blocks always walk forwards")
    program = fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100")
    assert program.turning is False and program.tuned == found.describe()
    data = json.loads(entry.key.path.read_text())
    del data["turning"]  # an entry from before directions were measured
    entry.key.path.write_text(json.dumps(data))
    assert tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG).turning is True
    assert fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100").turning is True


@pytest.mark.slow
def test_lookup_misses_quietly_without_an_entry_or_a_gpu(cache):
    planted()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.lookup(bicgk(), library(), "float64", SIZES, SLUG) is None
        assert tuning.lookup(bicgk(), library(), "float32", {"m": 300, "n": 300}, SLUG) is None
        assert tuning.lookup(bicgk(), library(), "float32", SIZES, None) is None
        assert tuning.lookup(bicgk(), library(), "float32", SIZES, "a100") is None


@pytest.mark.slow
def test_a_gpu_prefix_finds_the_full_slug(cache):
    entry = planted()
    assert tuning.lookup(bicgk(), library(), "float32", SIZES, "h100") == entry


def kernel_dicts(plan: list[dict]) -> list[dict]:
    """The kernel plans of a plan's JSON, those of horizontal fusions' parts included."""
    return [part for kernel in plan for part in kernel.get("horizontal", [kernel])]


def _damage(kind: str, text: str) -> str:
    data = json.loads(text)
    if kind == "garbage":
        return "not json at all {"
    if kind == "truncated":
        return text[: len(text) // 2]
    if kind == "empty":
        return ""
    if kind == "not an object":
        return "[1, 2, 3]"
    if kind == "wrong dtype in the key":
        data["key"]["dtype"] = "float64"
    elif kind == "wrong version in the key":
        data["key"]["fusec"] = "0.0.1"
    elif kind == "other format":
        data["format"] = 3
    elif kind == "no plan":
        del data["plan"]
    elif kind == "bad plan":
        kernel_dicts(data["plan"])[0]["shape"]["geometry"] = "cube"
    elif kind == "plan misses a call":
        if len(data["plan"]) > 1:
            data["plan"] = data["plan"][:1]
        elif "horizontal" in data["plan"][0]:  # one kernel running both calls side by side
            data["plan"][0]["horizontal"] = data["plan"][0]["horizontal"][:1]
        else:
            data["plan"] = [dict(data["plan"][0], calls=[0])]
    elif kind == "time is text":
        data["measured_us"] = "fast"
    elif kind == "turning is text":
        data["turning"] = "yes"
    return json.dumps(data)


@pytest.mark.parametrize("kind", ["garbage", "truncated", "empty", "not an object", "wrong dtype in the key",
                                  "wrong version in the key", "other format", "no plan", "bad plan",
                                  "plan misses a call", "time is text", "turning is text"])
@pytest.mark.slow
def test_a_damaged_entry_is_a_miss_with_a_warning_naming_the_file(cache, kind):
    entry = planted()
    path = entry.key.path
    path.write_text(_damage(kind, path.read_text()))
    with pytest.warns(FusecWarning, match=re.escape(str(path))):
        assert tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG) is None
    with pytest.warns(FusecWarning, match="tuning-cache entry"):  # compile goes on with the prediction
        program = fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100")
    assert program.tuned is None


@pytest.mark.slow
def test_an_entry_whose_plan_does_not_build_is_ignored_by_compile(cache):
    entry = planted()
    data = json.loads(entry.key.path.read_text())
    kernel_dicts(data["plan"])[0]["shape"]["iters"] = 3  # no shape the space searches
    entry.key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match="its plan is not one the optimization space offers"):
        program = fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100")
    assert program.tuned is None


@pytest.mark.slow
def test_an_entry_whose_plan_runs_implementations_the_library_lacks_is_never_used(cache):
    """Not built from the pieces it records (the implementations are not the library's): a
    stale entry, a quiet miss, whatever it records."""
    entry = planted()
    data = json.loads(entry.key.path.read_text())
    for kernel in kernel_dicts(data["plan"]):
        kernel["implementations"] = ["no_such_implementation"] * len(kernel["calls"])
    entry.key.path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG) is None
        assert fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100").tuned is None


def test_an_unreadable_cache_does_not_break_compile(monkeypatch, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(blocker))
    program = fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100")
    assert program.tuned is None


def _write_many(args) -> None:
    path_text, texts, count = args
    import os
    from pathlib import Path

    from fusec.cache import atomic_write_text
    for i in range(count):
        atomic_write_text(Path(path_text), texts[i % len(texts)])
        os.sched_yield()


@pytest.mark.slow
def test_concurrent_writers_never_leave_a_file_a_reader_cannot_parse(cache):
    entry = planted(store=False)
    texts = [dataclasses.replace(entry, measured_us=float(w)).to_json() for w in range(4)]
    # a long entry, so that a torn write would show
    texts = [t.replace('"script": "bicgk"', '"script": "' + "x" * 20000 + '"') for t in texts]
    path = tuning.store(entry)
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                          else "spawn")
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning is a parse failure
        with context.Pool(4) as pool:
            result = pool.map_async(_write_many, [(str(path), texts[w:] + texts[:w], 50) for w in range(4)])
            reads = 0
            while not result.ready() or reads < 20:
                found = tuning.read(path, entry.key, calls=2)
                assert found is not None
                seen.add(found.measured_us)
                reads += 1
            result.get()
    assert tuning.read(path, entry.key, calls=2).measured_us in {0.0, 1.0, 2.0, 3.0}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert len(seen) > 1  # the reader saw several writers' entries


# -- compile uses the cache -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:no GPU here and none named")  # the untuned compile names none
def test_compile_uses_a_planted_entry_and_says_so(monkeypatch):
    entry = planted()
    predicted = fusec.compile(BICGK, library(), sizes=SIZES, tuned=False)
    assert predicted.tuned is None and predicted.generated.plan != entry.plan
    tuned = fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100")
    assert tuned.generated.plan == entry.plan
    assert tuned.tuned == entry.describe()
    assert f"plan: tuned on {H100}" in tuned.describe(SIZES)
    monkeypatch.setenv("FUSEC_GPU", "H100 80GB HBM3")  # the target from the environment
    assert fusec.compile(BICGK, library(), sizes=SIZES).generated.plan == entry.plan
    # a plan given, another precision or other sizes: the cache does not apply
    assert fusec.compile(BICGK, library(), sizes=SIZES, plan=predicted.generated.plan).tuned is None
    assert fusec.compile(BICGK, library(), "float64", sizes=SIZES).tuned is None
    assert fusec.compile(BICGK, library(), sizes={"m": 300, "n": 300}).tuned is None


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:no GPU here and none named")
def test_a_call_at_sizes_a_plan_was_tuned_for_runs_that_plan(monkeypatch):
    """A program compiled for other sizes, whose own plan could serve these, still runs the
    plan tuned here (compile's choice at these sizes), compiled once; the lookup is asked
    once per sizes; its own sizes, untuned sizes, tuned=False and an imposed plan keep it."""
    from fusec.runtime.program import row_width_problem
    entry = planted()
    program = fusec.compile(BICGK, library(), sizes={"m": 1000, "n": 700}, gpu="h100")
    assert program.tuned is None and row_width_problem(program.kernels, SIZES) is None
    asked = []
    lookup = program.tuned_at
    monkeypatch.setattr(program, "tuned_at", lambda sizes: asked.append(dict(sizes)) or lookup(sizes))
    there = program.plan_for(SIZES)
    assert there is not program and there.generated.plan == entry.plan and there.tuned == entry.describe()
    assert program.plan_for({"n": 200, "m": 300}) is there and asked == [SIZES]
    assert "at these sizes this program runs the plan compiled for them: a plan was tuned for them" \
        in program.describe(SIZES)
    assert program.plan_for({"m": 1000, "n": 700}) is program  # its own sizes
    assert program.plan_for({"m": 900, "n": 700}) is program  # nothing tuned there
    assert asked == [SIZES, {"m": 1000, "n": 700}, {"m": 900, "n": 700}]
    untuned = fusec.compile(BICGK, library(), sizes={"m": 1000, "n": 700}, gpu="h100", tuned=False)
    assert untuned.tuned_at is None and untuned.plan_for(SIZES) is untuned
    imposed = fusec.compile(BICGK, library(), sizes={"m": 1000, "n": 700}, gpu="h100",
                            plan=program.generated.plan)
    assert imposed.plan_for(SIZES) is imposed


def test_compile_default_sizes_are_the_key_sizes():
    entry = planted(sizes={"m": 8192, "n": 8192})
    assert fusec.compile(BICGK, library(), gpu="h100").generated.plan == entry.plan


# -- a size nothing was tuned for borrows the plan of the nearest tuned one ----------------


def plant(plan, sizes, dtype="float32", gpu=SLUG) -> tuning.TuningEntry:
    """An entry holding ``plan`` for ``sizes``, stored in the cache."""
    entry = tuning.TuningEntry(tuning.key(bicgk(), library(), dtype, sizes, gpu), plan, 12.5, 10.0, 2, 10,
                               H100, "2026-11-22T12:00:00+00:00", "bicgk")
    tuning.store(entry)
    return entry


def h100():
    """The predictor compile uses for gpu="h100" (options such as a fusion's register
    bound come from it)."""
    from fusec.cost.perfdb import predictor_for
    return predictor_for(library(), "h100")


def offered(sizes) -> set:
    """The kernel plans the space at ``sizes`` offers."""
    space = build_space(bicgk(), library(), "float32", sizes, h100())
    return {plan for options in space.options.values() for plan, _, _ in options}


def tile_plan_offered_at(*all_sizes):
    """A plan other than compile's own at the first sizes, every kernel of it offered at each of them."""
    first = fusec.compile(BICGK, library(), sizes=all_sizes[0], gpu="h100", tuned=False).generated.plan
    spaces = [offered(s) for s in all_sizes]
    for combination in build_space(bicgk(), library(), "float32", all_sizes[0], h100()).ranked():
        plan = combination.plan
        if plan != first and all(k in space for space in spaces for k in plan.kernels):
            return plan
    raise AssertionError("no plan offered at every size")


@pytest.mark.slow
def test_nearby_finds_entries_within_a_factor_of_2_of_every_size_nearest_first():
    near = plant(planted(store=False).plan, {"m": 300, "n": 200})
    farther = plant(planted(store=False).plan, {"m": 600, "n": 400})
    plant(planted(store=False).plan, {"m": 1000, "n": 1000})  # 2.9x and 4x: too far
    plant(planted(store=False).plan, {"m": 350, "n": 250}, dtype="float64")  # another precision
    plant(planted(store=False).plan, {"m": 350, "n": 260}, gpu="a100-sxm4-80gb")  # another GPU
    found = tuning.nearby(bicgk(), library(), "float32", {"m": 350, "n": 250}, SLUG)
    assert [e.key for e in found] == [near.key, farther.key]  # 1.25x before 1.71x
    assert tuning.nearby(bicgk(), library(), "float32", {"m": 300, "n": 200}, SLUG)[0].key == farther.key
    assert tuning.nearby(bicgk(), library(), "float32", {"m": 350, "n": 250}, None) == []
    assert tuning.nearby(bicgk(), library(), "float32", {"m": 140, "n": 250}, SLUG) == []  # m: 300 is 2.1x


@pytest.mark.slow
def test_a_damaged_nearby_entry_is_skipped_with_a_warning_naming_the_file():
    entry = plant(planted(store=False).plan, {"m": 300, "n": 200})
    entry.key.path.write_text(_damage("bad plan", entry.key.path.read_text()))
    with pytest.warns(FusecWarning, match=re.escape(str(entry.key.path))):
        assert tuning.nearby(bicgk(), library(), "float32", {"m": 320, "n": 210}, SLUG) == []


@pytest.mark.slow
def test_compile_borrows_the_plan_tuned_at_the_nearest_size_and_says_so(capsys, tmp_path):
    here, tuned_at = {"m": 320, "n": 210}, {"m": 300, "n": 200}
    plan = tile_plan_offered_at(here, tuned_at)
    entry = plant(plan, tuned_at)
    program = fusec.compile(BICGK, library(), sizes=here, gpu="h100")
    assert program.generated.plan == plan and program.tuned is None
    assert program.nearby == f"tuned for the nearest size, m=300, n=200 ({entry.describe()})"
    assert "plan: tuned for the nearest size, m=300, n=200" in program.describe(here)
    assert fusec.compile(BICGK, library(), sizes=here, gpu="h100", tuned=False).generated.plan != plan
    assert fusec.compile(BICGK, library(), sizes={"m": 320, "n": 420}, gpu="h100").nearby is None  # n: 2.1x
    args = ["compile", BICGK, "--library", LIBRARY, "-o", tmp_path / "out", "--no-nvcc",
            "--size", "m=320", "--size", "n=210", "--gpu", "h100"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert (f"plan: from the tuning cache, tuned for the nearest size, m=300, n=200 ({entry.describe()}):"
            f" {entry.key.path}") in out
    code, out, err = run_cli(capsys, *args, "--no-tuned")
    assert code == 0, err
    assert "tuning cache" not in out and "nearest size" not in out


@pytest.mark.slow
def test_a_nearby_plan_the_space_here_does_not_offer_is_not_borrowed():
    here, tuned_at = {"m": 300, "n": 390}, {"m": 300, "n": 513}  # 1.32x: bands of more columns
    kernels_here = offered(here)
    plan = next(c.plan for c in build_space(bicgk(), library(), "float32", tuned_at, h100()).ranked()
                if any(k not in kernels_here for k in c.plan.kernels))
    nearest = plant(plan, tuned_at)
    program = fusec.compile(BICGK, library(), sizes=here, gpu="h100")
    assert program.nearby is None and program.generated.plan != plan
    # a farther one that the space does offer is taken instead
    usable = tile_plan_offered_at(here, {"m": 300, "n": 256})  # 1.52x
    plant(usable, {"m": 300, "n": 256})
    assert nearest.key in [e.key for e in tuning.nearby(bicgk(), library(), "float32", here, SLUG)][:1]
    assert fusec.compile(BICGK, library(), sizes=here, gpu="h100").generated.plan == usable


@pytest.mark.slow
def test_a_reproducible_compile_borrows_no_plan_that_adds_with_atomics():
    here, tuned_at = {"m": 320, "n": 210}, {"m": 300, "n": 200}
    spaces = [offered(here), offered(tuned_at)]
    atomic = next((c.plan for c in build_space(bicgk(), library(), "float32", tuned_at, h100()).ranked()
                   if all(k in s for s in spaces for k in c.plan.kernels)
                   and not untuned.adds_no_atomics(bicgk(), library(), c.plan)), None)
    if atomic is None:
        pytest.skip("no plan with atomics offered at both sizes")
    plant(atomic, tuned_at)
    assert fusec.compile(BICGK, library(), sizes=here, gpu="h100").generated.plan == atomic
    kept = fusec.compile(BICGK, library(), sizes=here, gpu="h100", reproducible=True)
    assert kept.nearby is None and kept.generated.reproducible


def run_cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_fusec_compile_says_the_plan_came_from_the_tuning_cache(capsys, tmp_path):
    entry = planted()
    args = ["compile", BICGK, "--library", LIBRARY, "-o", tmp_path / "out", "--no-nvcc",
            "--size", "m=300", "--size", "n=200", "--gpu", "h100"]
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert f"plan: from the tuning cache ({entry.describe()}): {entry.key.path}" in out
    assert f"plan: tuned on {H100}" in (tmp_path / "out" / "bicgk.float32.plan.txt").read_text()
    code, out, err = run_cli(capsys, *args, "--no-tuned")
    assert code == 0, err
    assert "tuning cache" not in out and "tuned on" not in out


def test_fusec_space_takes_a_gpu(capsys):
    code, out, err = run_cli(capsys, "space", BICGK, "--library", LIBRARY, "--gpu", "h100", "--top", "2")
    assert code == 0, err
    assert "predictor" in out.splitlines()[0]


def test_fusec_space_lists_the_layouts_tune_measures(capsys):
    code, out, err = run_cli(capsys, "space", GESUMMV, "--library", LIBRARY, "--gpu", "h100", "--size", "n=16384",
                             "--layouts", "60")
    assert code == 0, err
    assert "the best of each layout of the heaviest kernel" in out
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+\s+[\d.]+ us", line)]
    assert len(rows) == 60
    # the fused GESUMMV plan the tunes keep on the H100 is among them (12th with the perfdb of
    # 2026-11-24; band layouts rank among them)
    fused = "t1=sgemv(registers)+t2=sgemv(registers) [256t,2it,32r,cols; t1>t2, 1 load phase]"
    assert sum(fused in row for row in rows) == 1
    code, out, err = run_cli(capsys, "space", GESUMMV, "--library", LIBRARY, "--layouts", "0")
    assert code == 1 and "--layouts 0: it must be at least 1" in err
    with pytest.raises(SystemExit):  # one of --top, --all, --layouts
        cli.main(["space", str(GESUMMV), "--all", "--layouts", "3"])


# -- the tune flow, with a fake measurer ----------------------------------------------------


class FakeMeasurer(Measurer):
    """Runs nothing: outputs come from the oracle (made wrong for some ranks),
    times from a table; some ranks fail to compile or to launch."""

    gpu_name = H100

    def __init__(self, dag, dtype, sizes, plans, *, times, wrong=(), broken=(), crash=()):
        super().__init__(dag, library(), dtype, sizes)
        self.rank = {plan: i + 1 for i, plan in enumerate(plans)}
        self.times, self.wrong, self.broken, self.crash = times, set(wrong), set(broken), set(crash)
        self.compiled, self.measured, self.released = [], [], []

    def compile(self, programs, done):
        out = []
        for i, program in enumerate(programs):
            rank = self.rank[program.generated.plan]
            self.compiled.append(rank)
            out.append(f"nvcc failed on the generated code (sm_90):\nerror: rank {rank}" if rank in self.broken
                       else "")
            done(i)
        return out

    def run(self, program):
        rank = self.rank[program.generated.plan]
        self.measured.append(rank)
        values = oracle.evaluate(self.dag, self.library, self.host)
        outputs = {self.dag.value(v).name: values[v].astype(self.dtype) for v in self.dag.outputs}
        if rank in self.wrong:
            first = next(iter(outputs))
            outputs[first].flat[0] += 1.0
        return outputs

    def time(self, program):
        rank = self.rank[program.generated.plan]
        if rank in self.crash:
            raise RuntimeError("cuLaunchKernel failed: too many resources requested for launch")
        # ms; the median is times[rank] (ranks not listed, twins added after a horizontal
        # fusion, are slow)
        return [self.times.get(rank, 1.0) * f for f in (1.0, 1.1, 0.9)]

    def release(self, program):
        self.released.append(self.rank[program.generated.plan])


def fake(dag, dtype="float32", sizes=SIZES, top=6, **kwargs):
    plans = [c.plan for c in candidates(dag, library(), dtype, sizes, top, DEFAULT)]
    return FakeMeasurer(dag, dtype, sizes, plans, **kwargs)


@pytest.mark.slow
def test_runs_kept_late_are_counted_per_candidate_and_reported():
    dag = bicgk()

    class LateMeasurer(FakeMeasurer):
        count = 0

        def late_samples(self):
            return self.count

        def time(self, program):
            if self.rank[program.generated.plan] == 2:
                self.count += 3  # the clock kept three of this candidate's runs late
            return super().time(program)

    measurer = LateMeasurer(dag, "float32", SIZES, [c.plan for c in candidates(dag, library(), "float32", SIZES, 3,
                                                                                 DEFAULT)],
                            times={1: 0.03, 2: 0.02, 3: 0.01})
    result = tune(dag, library(), "float32", SIZES, top=3, predictor=DEFAULT, measurer=measurer, store=False)
    assert {r.rank: r.measurement.late for r in result.rows[:3]} == {1: 0, 2: 3, 3: 0}
    assert "late: rank 2 (3 runs) queued after the timing spin ended" in report(result)
    assert "late:" not in report(tune(dag, library(), "float32", SIZES, top=3, predictor=DEFAULT, store=False,
                                      measurer=fake(dag, top=3, times={1: 0.03, 2: 0.02, 3: 0.01})))


@pytest.mark.slow
def test_tune_chooses_the_fastest_correct_candidate_and_caches_it(capsys):
    dag = bicgk()
    # the fastest three are wrong, do not compile, do not launch
    times = {1: 0.050, 2: 0.010, 3: 0.011, 4: 0.012, 5: 0.030, 6: 0.020}
    measurer = fake(dag, times=times, wrong=[2], broken=[3], crash=[4])
    result = tune(dag, library(), "float32", SIZES, top=6, predictor=DEFAULT, measurer=measurer)
    k = len(result.rows)  # 6, and the twins of the horizontal fusions among them
    assert [r.rank for r in result.rows] == list(range(1, k + 1)) and k >= 6
    verdicts = {r.rank: r.measurement.verdict for r in result.rows[:6]}
    assert verdicts == {1: OK, 2: WRONG, 3: COMPILE_FAILED, 4: LAUNCH_FAILED, 5: OK, 6: OK}
    assert all(r.measured == float("inf") and r.gbps == 0 for r in result.rows if r.rank in (2, 3, 4))
    assert "ratio" in result.rows[1].measurement.reason and "rank 3" in result.rows[2].measurement.reason
    assert result.winner.rank == 6 and result.winner.measured == pytest.approx(20e-6)
    nbytes = 4 * (300 * 200 + 200 + 300 + 300 + 200)
    assert result.winner.nbytes == nbytes and result.winner.gbps == pytest.approx(nbytes / 20e-6 / 1e9)
    assert measurer.compiled == list(range(1, k + 1))
    assert 3 not in measurer.measured  # never run what did not compile
    # freed after each measurement, the winner's too where it is measured again both ways (it turns)
    assert sorted(measurer.released) == sorted([r for r in range(1, k + 1) if r != 3]
                                               + [result.winner.rank] * len(result.directions))
    # the cache holds the winner, and compile uses it
    assert result.cache_path == result.entry.key.path and result.cache_path.is_file()
    found = tuning.lookup(dag, library(), "float32", SIZES, SLUG)
    assert found.plan == result.winner.plan and found.predicted_rank == 6 and found.top == k
    assert found.measured_us == pytest.approx(20.0) and found.gpu_name == H100
    # (compiled with the predictor tune ranked with: the space it offers depends on it)
    assert fusec.compile(BICGK, library(), sizes=SIZES, gpu="h100",
                         predictor=DEFAULT).generated.plan == result.winner.plan
    # progress went to stderr, with the failures as they happened
    err = capsys.readouterr().err
    assert "compiling" in err and "measuring" in err and "rank 2 wrong:" in err
    # the table
    text = report(result)
    header = next(line for line in text.splitlines() if "predicted" in line)
    assert header.split() == ["rank", "predicted", "measured", "GB/s", "verdict", "kernels"]
    assert re.search(r"^\*\s+6\s+[\d.]+ us\s+20\.0 us\s+\d+\s+ok\s+(H\{)?q=sgemv", text, re.M)
    assert re.search(r"^\s+2\s+[\d.]+ us\s+inf\s+-\s+wrong\s", text, re.M)
    assert "rank 3 compile failed: nvcc failed on the generated code (sm_90): error: rank 3" in text
    assert "rank 4 launch failed: RuntimeError: cuLaunchKernel failed" in text
    assert result.by_layout > 0 and result.ranked + result.by_layout == k
    assert (f"(ranks 1-{result.ranked}: the top K; {result.ranked + 1}-{k}: the best-ranked combination of each"
            " further layout of the heaviest kernel)") in text
    assert "winner: rank 6, 20.0 us" in text and "the predictor's first choice measured 50.0 us (2.50x" in text
    assert f"tuning cache: wrote {result.cache_path}" in text


class DirectedMeasurer(FakeMeasurer):
    """Times that depend on the direction too: forwards at ``forwards`` ms."""

    def __init__(self, *args, forwards, **kwargs):
        super().__init__(*args, **kwargs)
        self.forwards, self.ways = forwards, []

    def time(self, program):
        self.ways.append(program.turning)
        return [self.forwards] * 3 if not program.turning else super().time(program)


@pytest.mark.parametrize("forwards", [0.015, 0.025])
@pytest.mark.slow
def test_tune_measures_the_winner_both_ways_and_keeps_the_faster(cache, forwards):
    dag = bicgk()
    plans = [c.plan for c in candidates(dag, library(), "float32", SIZES, 2, DEFAULT)]
    measurer = DirectedMeasurer(dag, "float32", SIZES, plans, times={1: 0.03, 2: 0.02}, forwards=forwards)
    result = tune(dag, library(), "float32", SIZES, top=2, predictor=DEFAULT, measurer=measurer, progress=False)
    assert result.winner.rank == 2
    # every candidate alternating, then the winner again both ways
    assert measurer.ways == [True] * len(result.rows) + [True, False]
    assert measurer.measured[-2:] == [2, 2]
    assert result.directions[True].seconds == pytest.approx(20e-6)
    assert result.directions[False].seconds == pytest.approx(forwards * 1e-3)
    turning = forwards > 0.02
    assert result.entry.turning is turning
    assert tuning.lookup(dag, library(), "float32", SIZES, SLUG).turning is turning
    kept = "alternating" if turning else "forwards"
    assert (f"directions (the winner again): alternating 20.0 us, always forwards {forwards * 1e3:.1f} us:"
            f" {kept} kept") in report(result)


@pytest.mark.slow
def test_tune_where_nothing_passes_chooses_and_caches_nothing(cache):
    dag = bicgk()
    count = len(candidates(dag, library(), "float32", SIZES, 3, DEFAULT))  # 3 and their twins
    measurer = fake(dag, top=3, times={}, wrong=[1, *range(4, count + 1)], broken=[2], crash=[3])
    result = tune(dag, library(), "float32", SIZES, top=3, predictor=DEFAULT, measurer=measurer, progress=False)
    assert result.winner is None and result.entry is None and result.cache_path is None
    assert not (cache / "tuning").exists()
    assert "no candidate passed" in report(result)


@pytest.mark.slow
def test_tune_on_float64_with_rectangular_sizes(cache):
    dag = bicgk()
    sizes = {"m": 33, "n": 1000}
    measurer = fake(dag, "float64", sizes, top=2, times={1: 0.02, 2: 0.01})
    result = tune(dag, library(), "float64", sizes, top=2, predictor=DEFAULT, measurer=measurer, progress=False)
    assert all(r.measurement.verdict == OK for r in result.rows) and result.winner.rank == 2
    assert tuning.lookup(dag, library(), "float64", sizes, "h100").plan == result.winner.plan


def test_a_cache_that_cannot_be_written_is_a_warning(monkeypatch, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(blocker))
    dag = bicgk()
    measurer = fake(dag, top=2, times={1: 0.02, 2: 0.01})
    with pytest.warns(FusecWarning, match="could not write the tuning cache"):
        result = tune(dag, library(), "float32", SIZES, top=2, predictor=DEFAULT, measurer=measurer,
                      progress=False)
    assert result.winner.rank == 2 and result.cache_path is None and result.cache_error
    assert "tuning cache: not written" in report(result)


def test_top_k_takes_the_best_predicted_in_order():
    dag = bicgk()
    chosen = candidates(dag, library(), "float32", SIZES, 5, DEFAULT)
    space = build_space(dag, library(), "float32", SIZES, DEFAULT)
    ranked = [c.plan for _, c in zip(range(5), space.ranked())]
    assert [c.plan for c in chosen if c.plan in ranked] == ranked  # the best-predicted, in order
    for i, c in enumerate(chosen):  # each horizontal fusion followed by its parts launched apart
        if any(isinstance(k, HorizontalPlan) for k in c.plan.kernels):
            twin = space.twin(c).plan
            assert twin in [x.plan for x in chosen[i + 1:i + 2]] or twin in [x.plan for x in chosen[:i]]
    assert any(isinstance(k, HorizontalPlan) for c in chosen for k in c.plan.kernels)
    assert len(chosen) > 5
    with pytest.raises(fusec.FusecError, match="--top"):
        candidates(dag, library(), "float32", SIZES, 0, DEFAULT)


def test_past_the_top_k_the_best_of_each_layout_of_the_heaviest_kernel():
    dag = bicgk()
    ranked, by_layout = candidate_groups(dag, library(), "float32", SIZES, 4, DEFAULT, 30)
    assert [c.plan for c in ranked] == [c.plan for c in candidates(dag, library(), "float32", SIZES, 4,
                                                                   DEFAULT, layouts=0)]
    space = build_space(dag, library(), "float32", SIZES, DEFAULT)
    layouts = dict.fromkeys(c.plan for c in space.layouts(30, twins=True))  # a twin may be a layout too
    # the layouts' best combinations not measured already, in predicted order, twins included
    assert [c.plan for c in by_layout] == [p for p in layouts if p not in {c.plan for c in ranked}]
    assert len(by_layout) > 20 and len({c.plan for c in ranked + by_layout}) == len(ranked) + len(by_layout)
    assert candidates(dag, library(), "float32", SIZES, 4, DEFAULT, layouts=30) == ranked + by_layout
    with pytest.raises(fusec.FusecError, match="--layouts must be at least 0"):
        candidate_groups(dag, library(), "float32", SIZES, 4, DEFAULT, -1)


@pytest.mark.parametrize("dtype, n", [("float32", 16384), pytest.param("float64", 8192, marks=pytest.mark.xfail(
    strict=True, reason="since the sums apart are priced (2026-12-01) the H100's database ranks the pair's layout"
    " 73rd at fp64, past the default 60; it was measured fastest with the last block's sums, and no H100 has"
    " measured it since"))])
def test_the_default_layouts_reach_gesummvs_fastest_plan_on_the_h100(dtype, n):
    """Measured on the H100 (docs/design/optimization-space.md): the fused [256t,2it,32r] gemv pair, which the H100's
    predictor ranks past 1,500th, beat every plan of the top 150; the default --layouts reaches it."""
    from fusec.cost.perfdb import predictor_for
    from fusec.space.combinations import LAYOUTS
    dag = load_script(GESUMMV, library())
    sizes = {"n": n}
    predictor = predictor_for(library(), SLUG)
    ranked, by_layout = candidate_groups(dag, library(), dtype, sizes, 10, predictor, LAYOUTS)
    summaries = [c.plan.summary(dag) for c in ranked + by_layout]
    fastest = "t1=sgemv(registers)+t2=sgemv(registers) [256t,2it,32r,cols; t1>t2, 1 load phase]"
    assert not any(s.startswith(fastest) for s in summaries[:len(ranked)])
    assert any(s.startswith(fastest) for s in summaries[len(ranked):])


def test_choose_breaks_ties_by_predicted_rank():
    from fusec.tune.search import Measurement, Row
    plan = candidates(bicgk(), library(), "float32", SIZES, 1, DEFAULT)[0].plan
    rows = [Row(1, plan, 1e-5, Measurement(WRONG), 100), Row(2, plan, 2e-5, Measurement(OK, 3e-5), 100),
            Row(3, plan, 3e-5, Measurement(OK, 3e-5), 100)]
    assert choose(rows).rank == 2
    assert choose(rows[:1]) is None


def test_check_outputs_with_the_expectation_computed_once(rng=np.random.default_rng(5)):
    dag = bicgk()
    inputs = oracle.random_inputs(dag, SIZES, "float32", rng)
    expected = oracle.expect(dag, library(), inputs)
    values = oracle.evaluate(dag, library(), inputs)
    outputs = {dag.value(v).name: values[v].astype(np.float32) for v in dag.outputs}
    assert oracle.check_outputs(dag, library(), inputs, outputs, "float32", expected=expected) == \
        oracle.check_outputs(dag, library(), inputs, outputs, "float32")


# -- nvcc, for the compile step -------------------------------------------------------------


@pytest.mark.nvcc
def test_the_gpu_measurer_compiles_in_parallel_and_scores_a_failure():
    from fusec.emit.program import generate
    from fusec.runtime.program import Program
    from fusec.tune.search import GpuMeasurer
    dag = bicgk()
    plans = [c.plan for c in candidates(dag, library(), "float32", SIZES, 2, DEFAULT)]
    programs = [Program(generate(dag, library(), p, "float32")) for p in plans]
    broken = Program(dataclasses.replace(programs[1].generated,
                                         source=programs[1].source + "\nthis is not CUDA;\n"))
    measurer = GpuMeasurer(dag, library(), "float32", SIZES)
    measurer.arch = "sm_90"  # compiling needs no GPU
    done = []
    start = time.perf_counter()
    errors = measurer.compile([programs[0], broken, programs[1]], done.append)
    assert sorted(done) == [0, 1, 2]
    assert errors[0] == errors[2] == "" and "nvcc failed" in errors[1]
    assert time.perf_counter() - start < 120


# -- the command line -----------------------------------------------------------------------


def test_fusec_tune_help_mentions_its_options(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["tune", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for option in ("--size", "--dtype", "--library", "--top K", "--layouts L", "--repeat", "--warmup", "--seed",
                   "--quiet"):
        assert option in out, option
    assert "oracle" in out and "tuning cache" in out and "~/.cache/fusec/tuning" in out


def test_fusec_tune_needs_sizes(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["tune", str(BICGK)])
    assert info.value.code == 2
    assert "--size" in capsys.readouterr().err


def test_fusec_tune_without_a_gpu_is_a_clear_error(capsys):
    from fusec.runtime import cuda
    if cuda.gpu_available():
        pytest.skip("a GPU is here")
    code, out, err = run_cli(capsys, "tune", BICGK, "--library", LIBRARY, "--size", "n=100", "--top", "2")
    assert code == 1 and err.startswith("fusec: error:") and ("PyCUDA" in err or "CUDA" in err)


@pytest.mark.slow
def test_the_cached_plan_is_measured_again_beside_the_candidates():
    """Tuning anew never replaces the cached plan with a slower one: it is the last candidate."""
    dag = bicgk()
    incumbent = planted(rank=40).plan  # far down the ranking: not among the top 6
    plans = [c.plan for c in candidates(dag, library(), "float32", SIZES, 6, DEFAULT)]
    assert incumbent not in plans

    def tune_with(incumbent_ms: float):
        measurer = FakeMeasurer(dag, "float32", SIZES, plans + [incumbent],
                                times={1: 0.01, len(plans) + 1: incumbent_ms})
        result = tune(dag, library(), "float32", SIZES, top=6, predictor=DEFAULT, measurer=measurer,
                      progress=False)
        assert [r.plan for r in result.rows] == plans + [incumbent] and result.rows[-1].predicted > 0
        return result.winner.plan

    assert tune_with(0.005) == incumbent  # faster than every candidate: kept
    assert tuning.lookup(dag, library(), "float32", SIZES, SLUG).plan == incumbent
    assert tune_with(0.5) == plans[0]  # slower: replaced
    assert tuning.lookup(dag, library(), "float32", SIZES, SLUG).plan == plans[0]


def test_each_candidate_is_timed_from_an_empty_l2(monkeypatch):
    """GpuMeasurer empties L2 before it times a candidate, so none inherits the lines the
    one before left (evict-first loads never displace them)."""
    import contextlib

    from fusec.runtime import cuda
    from fusec.tune.search import GpuMeasurer
    events = []

    class Clock:
        def empty_l2(self):
            events.append("empty L2")

    class Program:
        def time(self, arrays, *, warmup, repeat, host):
            events.append(("time", warmup, repeat, host))
            return [1.0] * repeat

    monkeypatch.setattr(cuda, "context", contextlib.nullcontext)
    monkeypatch.setattr(cuda, "gpu_clock", lambda ctx: Clock())
    dag = load_script(ROOT / "scripts" / "sscal.script", library())
    measurer = GpuMeasurer(dag, library(), "float32", {"n": 8}, repeat=5, warmup=2)
    measurer.device = {}
    assert measurer.time(Program()) == [1.0] * 5
    assert events == ["empty L2", ("time", 2, 5, False)]


@pytest.mark.nvcc
def test_the_kernel_that_empties_l2_writes_and_discards_whole_lines(tmp_path):
    import subprocess

    from fusec import nvcc
    from fusec.runtime.cuda import TIMING_KERNELS
    compiled = nvcc.compile_cubin(TIMING_KERNELS, arch="sm_90", use_cache=False)
    assert {"fusec_spin", "fusec_empty", "fusec_empty_l2"} <= set(compiled.resources)
    source = tmp_path / "timing.cu"
    source.write_text(TIMING_KERNELS)
    subprocess.run([nvcc.nvcc_path(), "-ptx", "-arch=sm_90", "-O3", str(source), "-o", str(tmp_path / "t.ptx")],
                   check=True, capture_output=True)
    ptx = (tmp_path / "t.ptx").read_text()
    body = ptx[ptx.index("fusec_empty_l2("):]
    assert "discard.global.L2" in body and body.count("st.global.v4") >= 1  # 16-byte stores, then the discard


# -- plans a library ships ------------------------------------------------------------------


@pytest.fixture
def own_library(tmp_path, monkeypatch):
    """A copy of the bundled library, whose tunings/ folder a test may write."""
    from fusec.library.loader import load_library
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")  # the suite ignores shipped plans elsewhere
    folder = tmp_path / "blas"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns(tuning.SHIPPED))
    copy = load_library(folder)
    assert copy.content_hash == library().content_hash  # the folder's name is not hashed
    return copy


@pytest.mark.slow
def test_a_shipped_plan_runs_where_the_cache_has_none_and_the_cache_wins(cache, own_library, monkeypatch):
    dag = load_script(BICGK, own_library)
    shipped = dataclasses.replace(planted(store=False, rank=3), script="bicgk (shipped)")
    path = tuning.ship(shipped, own_library)
    assert path == own_library.path / Path(tuning.SHIPPED) / SLUG / f"{shipped.key.digest}.json"
    assert not (cache / "tuning").exists()  # shipping writes nothing into the cache
    found = tuning.lookup(dag, own_library, "float32", SIZES, "h100")
    assert found.plan == shipped.plan and found.path == path
    program = fusec.compile(BICGK, own_library, sizes=SIZES, gpu="h100")
    assert program.generated.plan == shipped.plan and program.tuned == shipped.describe()
    assert tuning.lookup(dag, library(), "float32", SIZES, "h100") is None  # the bundled library ships none
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "0")
    assert tuning.lookup(dag, own_library, "float32", SIZES, "h100") is None
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    # the user's own tuning of the same key wins
    mine = planted(rank=4)
    assert mine.plan != shipped.plan
    assert tuning.lookup(dag, own_library, "float32", SIZES, "h100").path == mine.key.path
    assert fusec.compile(BICGK, own_library, sizes=SIZES, gpu="h100").generated.plan == mine.plan
    assert fusec.compile(BICGK, own_library, sizes=SIZES, gpu="h100", tuned=False).tuned is None


@pytest.mark.parametrize("value", ["no", "false", "2", "-1"])
def test_a_bad_fusec_shipped_tunings_is_an_argument_error_naming_it(capsys, cache, own_library, monkeypatch, value):
    """Not quietly the shipped plans: FUSEC_SHIPPED_TUNINGS=no (meant as 0) ran them."""
    from fusec.errors import ArgumentError
    tuning.ship(planted(store=False), own_library)
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", value)
    with pytest.raises(ArgumentError, match=rf"is '{value}': set it to 1 or 0") as info:
        fusec.compile(BICGK, own_library, sizes=SIZES, gpu="h100")
    assert info.value.argument == "$FUSEC_SHIPPED_TUNINGS"
    code, out, err = run_cli(capsys, "compile", BICGK, "--library", own_library.path, "--size", "m=300",
                             "--size", "n=200", "--gpu", "h100", "--no-nvcc", "-o", cache / "out")
    assert code == 1 and err.startswith("fusec: error: argument '$FUSEC_SHIPPED_TUNINGS'") and err.count("\n") == 1


def _shipped_row(out: str, sizes: str) -> str:
    """The line of `fusec tunings`' shipped list for bicgk at ``sizes``."""
    rows = re.findall(rf"^  {SLUG}\s+bicgk\s+float32\s+{sizes}\s.*$", out.split("shipped with the library:")[1], re.M)
    assert len(rows) == 1, out
    return rows[0]


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_a_shipped_plan_stays_current_when_the_library_gains_a_function(capsys, cache, own_library):
    """A function file added (as strmv.cu would be) is no file BiCGK reads: its shipped
    plan is still found, used, listed as usable and kept by --prune."""
    from fusec.library.loader import load_library
    from tests.test_library_loader import readme_examples
    entry = planted(store=False)
    path = tuning.ship(entry, own_library)
    (Path(own_library.path) / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")
    grown = load_library(own_library.path)
    assert "sexp" in grown.functions and grown.content_hash != own_library.content_hash
    assert tuning.lookup(bicgk(), grown, "float32", SIZES, "h100").path == path
    assert fusec.compile(BICGK, grown, sizes=SIZES, gpu="h100").tuned == entry.describe()
    code, out, err = run_cli(capsys, "tunings", "--library", own_library.path, "--prune")
    assert code == 0, err
    assert _shipped_row(out, "m=300,n=200").endswith("  yes") and "pruned" not in out
    assert path.exists()


def test_a_shipped_plan_goes_stale_only_when_code_its_kernels_are_built_from_changes(capsys, cache, own_library):
    """Edits to a function BiCGK does not call (sdot.cu), to a routine file its functions do
    not name (vector.cuh) and to comments of the files it reads leave its shipped plan
    current; an edit to the declaration of a function it calls (sgemv.cu), or to a routine
    its kernels run (tile.cuh), makes it stale, and `fusec tunings` names the piece."""
    from fusec.library.loader import load_library
    folder = Path(own_library.path)
    path = tuning.ship(planted(store=False), own_library)
    _append(folder / "sdot.cu", "\n__device__ int sdot_note() { return 1; }\n")
    _append(folder / "vector.cuh", "\nstruct fusec_vector_note { int unused; };\n")
    for name in ("sgemv.cu", "tile.cuh", "library.fusec"):
        _append(folder / name, "\n// edited\n" if name != "library.fusec" else "\n# edited\n")
    assert tuning.lookup(bicgk(), load_library(folder), "float32", SIZES, SLUG).path == path
    code, out, err = run_cli(capsys, "tunings", "--library", folder)
    assert code == 0 and _shipped_row(out, "m=300,n=200").endswith("  yes"), err
    edits = {"sgemv.cu": ("reference  A @ x", "reference  (A @ x)", "sgemv.cu: declaration"),
             "tile.cuh": ("tile_load(const real* __restrict__ A, real* a, const fusec_tile& c) {",
                          "tile_load(const real* __restrict__ A, real* a, const fusec_tile& c) {\n  (void)0;",
                          "tile.cuh: tile_load()")}
    for name, (old, new, piece) in edits.items():
        pristine = (folder / name).read_text(encoding="utf-8")
        assert old in pristine
        (folder / name).write_text(pristine.replace(old, new), encoding="utf-8")
        changed = load_library(folder)
        assert tuning.lookup(bicgk(), changed, "float32", SIZES, SLUG) is None
        code, out, err = run_cli(capsys, "tunings", "--library", folder)
        assert code == 0, err
        assert _shipped_row(out, "m=300,n=200").endswith(f"  no: built from the library as it was: {piece} changed")
        assert "1 shipped file(s) are stale" in out
        (folder / name).write_text(pristine, encoding="utf-8")
    _append(folder / "tile.cuh", "\nstruct fusec_tile_note { int unused; };\n")
    code, out, err = run_cli(capsys, "tunings", "--library", folder, "--prune")
    assert code == 0 and f"pruned 1 stale file(s) from the library's tunings:\n  {path}" in out
    assert not path.exists()


def _as_it_was(entry: tuning.TuningEntry, **changed) -> tuning.TuningEntry:
    """``entry`` as tuned before the pieces ``changed`` (name -> digest then) changed."""
    recorded = entry.recorded
    return dataclasses.replace(entry, recorded=dataclasses.replace(
        recorded, pieces=MappingProxyType({**recorded.pieces, **changed})))


@pytest.mark.slow
def test_a_plan_shipped_for_the_library_as_it_was_is_measured_again_when_tuning(cache, own_library):
    """After a library change its shipped plans are stale (never used), but fusec tune
    measures the stale plan of the same point beside its candidates, so tuning again
    keeps it where it still wins."""
    dag = load_script(BICGK, own_library)
    old = _as_it_was(planted(store=False, rank=40), **{"sgemv.cu: declaration": "0" * 16})
    tuning.ship(old, own_library)
    other_sizes = dataclasses.replace(old, key=dataclasses.replace(old.key, sizes=(("m", 64), ("n", 64))),
                                      plan=planted(store=False, rank=5).plan)
    tuning.ship(other_sizes, own_library)
    assert tuning.lookup(dag, own_library, "float32", SIZES, SLUG) is None  # stale: never used
    assert tuning.previous(dag, own_library, "float32", SIZES, SLUG).plan == old.plan
    assert tuning.previous(dag, own_library, "float64", SIZES, SLUG) is None
    assert tuning.previous(dag, own_library, "float32", SIZES, None) is None
    plans = [c.plan for c in candidates(dag, own_library, "float32", SIZES, 6, DEFAULT)]
    assert old.plan not in plans
    measurer = FakeMeasurer(dag, "float32", SIZES, plans + [old.plan], times={1: 0.01, len(plans) + 1: 0.005})
    result = tune(dag, own_library, "float32", SIZES, top=6, predictor=DEFAULT, measurer=measurer, progress=False)
    assert [r.plan for r in result.rows] == plans + [old.plan]
    assert result.winner.plan == old.plan
    assert tuning.lookup(dag, own_library, "float32", SIZES, SLUG).plan == old.plan  # now under the new key


@pytest.mark.slow
def test_a_plan_shipped_for_a_gpu_of_the_same_compute_capability_is_measured_when_tuning(cache, own_library):
    """Tuning on a new GPU of a known chip (the H200: compute capability 9.0, as the
    H100) measures the plan the library ships for the H100 at that very key beside
    the candidates; a GPU of another capability, an unknown one, another key, or the
    same GPU (whose own plan lookup finds) gets none."""
    dag = load_script(BICGK, own_library)
    h100 = planted(store=False, rank=40)
    tuning.ship(h100, own_library)
    assert tuning.sibling(dag, own_library, "float32", SIZES, "h200").plan == h100.plan
    assert tuning.sibling(dag, own_library, "float32", SIZES, SLUG) is None
    assert tuning.sibling(dag, own_library, "float32", SIZES, "a100-sxm4-80gb") is None  # 8.0
    assert tuning.sibling(dag, own_library, "float32", SIZES, "rtx-9999") is None
    assert tuning.sibling(dag, own_library, "float32", SIZES, None) is None
    assert tuning.sibling(dag, own_library, "float64", SIZES, "h200") is None
    assert tuning.sibling(dag, own_library, "float32", {"m": 64, "n": 64}, "h200") is None
    plans = [c.plan for c in candidates(dag, own_library, "float32", SIZES, 6, DEFAULT)]
    assert h100.plan not in plans
    measurer = FakeMeasurer(dag, "float32", SIZES, plans + [h100.plan], times={1: 0.01, len(plans) + 1: 0.005})
    measurer.gpu_name = "NVIDIA H200"
    result = tune(dag, own_library, "float32", SIZES, top=6, predictor=DEFAULT, measurer=measurer, progress=False)
    assert [r.plan for r in result.rows] == plans + [h100.plan]
    assert result.winner.plan == h100.plan
    assert tuning.lookup(dag, own_library, "float32", SIZES, "h200").plan == h100.plan  # the H200's own now


def test_fusec_compile_says_the_plan_is_shipped_with_the_library(capsys, tmp_path, own_library):
    entry = planted(store=False)
    path = tuning.ship(entry, own_library)
    code, out, err = run_cli(capsys, "compile", BICGK, "--library", own_library.path, "-o", tmp_path / "out",
                             "--no-nvcc", "--size", "m=300", "--size", "n=200", "--gpu", "h100")
    assert code == 0, err
    assert f"plan: shipped with the library ({entry.describe()}): {path}" in out


@pytest.mark.slow
def test_fusec_tune_ship_writes_the_winner_into_the_library(capsys, monkeypatch, cache, own_library):
    import fusec.tune.search as tune_module
    real_tune = tune_module.tune

    def tune_with_a_fake_gpu(dag, library_, dtype, sizes, **kwargs):
        measurer = fake(dag, top=2, times={1: 0.02, 2: 0.01})
        return real_tune(dag, library_, dtype, sizes, top=2, predictor=DEFAULT, measurer=measurer, progress=False)

    monkeypatch.setattr(tune_module, "tune", tune_with_a_fake_gpu)
    argv = ["tune", BICGK, "--library", own_library.path, "--size", "m=300", "--size", "n=200", "-q"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "shipped" not in out and not tuning.shipped_root(own_library).exists()
    code, out, err = run_cli(capsys, *argv, "--ship")
    assert code == 0, err
    dag = load_script(BICGK, own_library)
    key = tuning.key(dag, own_library, "float32", SIZES, SLUG)
    assert f"shipped with the library: wrote {key.shipped_path(own_library)}" in out
    assert key.shipped_path(own_library).read_text() == key.path.read_text()  # the same entry as the cache's


@pytest.mark.slow
def test_fusec_tunings_lists_both_folders_and_prunes_only_stale_shipped_files(capsys, cache, own_library):
    mine = planted()
    current = planted(store=False, sizes={"m": 8192, "n": 8192})
    tuning.ship(current, own_library)
    from fusec.library.digest import dag_files, digest
    as_it_was = _as_it_was(dataclasses.replace(current, key=dataclasses.replace(current.key, sizes=(("m", 32),))),
                           **{"sgemv.cu: declaration": "0" * 16})  # as if tuned before sgemv's declaration changed
    stale = tuning.ship(as_it_was, own_library)
    newer = dataclasses.replace(current, key=dataclasses.replace(current.key, fusec="99.0"))
    kept = tuning.ship(newer, own_library)
    broken = tuning.shipped_root(own_library) / SLUG / "broken.json"
    broken.write_text("{")
    # keyed as fusec once keyed tunings, on the whole library's content hash, recording no files
    legacy = dataclasses.replace(current, key=dataclasses.replace(current.key, library=own_library.content_hash,
                                                                  sizes=(("m", 64), ("n", 64))))
    data = json.loads(legacy.to_json())
    for field in ("library_pieces", "calls", "composites"):
        del data[field]
    unjudged = tuning.shipped_root(own_library) / SLUG / f"{legacy.key.digest}.json"
    unjudged.write_text(json.dumps(dict(data, format=tuning.KEYED_ON_FILES)))
    # keyed as fusec keyed tunings next, on the files its script reads (format 1), as they are
    files = dag_files(own_library, bicgk())
    on_files = dataclasses.replace(current, key=dataclasses.replace(current.key, library=digest(files),
                                                                    sizes=(("m", 128), ("n", 128))))
    data = json.loads(on_files.to_json())
    for field in ("library_pieces", "calls", "composites"):
        del data[field]
    carried = tuning.shipped_root(own_library) / SLUG / f"{on_files.key.digest}.json"
    carried.write_text(json.dumps(dict(data, format=tuning.KEYED_ON_FILES, library_files=files)))
    code, out, err = run_cli(capsys, "tunings", "--library", own_library.path)
    assert code == 0, err
    cached, shipped = out.split("in the tuning cache:")[1].split("shipped with the library:")
    assert re.search(r"h100-80gb-hbm3\s+bicgk\s+float32\s+m=300,n=200\s+12\.5 us\s+2026-11-22\s+yes", cached)
    assert len(re.findall(r"^  h100", shipped, re.M)) == 6
    assert re.search(r"m=8192,n=8192\s+12\.5 us\s+2026-11-22\s+yes$", shipped, re.M)
    assert re.search(r"m=32 .* no: built from the library as it was: sgemv.cu: declaration changed$", shipped, re.M)
    assert re.search(rf"m=128,n=128 .* no: keyed on the library files its script reads \(hash {digest(files)}\),"
                     r" as fusec once keyed tunings; python tools/rekey_tunings.py carries it over$", shipped, re.M)
    assert "no: made by fusec 99.0, this is 0.1.0" in shipped
    assert "no: does not parse (JSONDecodeError)" in shipped
    assert re.search(rf"m=64,n=64 .* no: records no library files \(keyed on a whole library's hash,"
                     rf" {own_library.content_hash}, as fusec once keyed tunings\): cannot tell", shipped)
    assert "1 shipped file(s) are stale" in out and "1 shipped file(s) cannot be judged" in out
    code, out, err = run_cli(capsys, "tunings", "--library", own_library.path, "--prune")
    assert code == 0, err
    assert f"pruned 1 stale file(s) from the library's tunings:\n  {stale}" in out
    assert not stale.exists() and kept.exists() and broken.exists() and mine.key.path.exists()
    assert unjudged.exists() and carried.exists()  # what cannot be judged, or can be carried over, is kept
    code, out, err = run_cli(capsys, "tunings", "--library", own_library.path, "--gpu", "a100")
    assert code == 0 and "no entries for GPUs named 'a100'" in out



def _in_the_format_before(entry: tuning.TuningEntry, files: dict) -> tuning.TuningEntry:
    """``entry`` as fusec filed it before pieces: keyed on the digest of ``files`` (the
    library files its script reads, with their digests), recording them, format 1."""
    from fusec.library.digest import digest
    old = dataclasses.replace(entry, key=dataclasses.replace(entry.key, library=digest(files)))
    data = json.loads(old.to_json())
    for field in ("library_pieces", "calls", "composites"):
        del data[field]
    path = old.key.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(data, format=tuning.KEYED_ON_FILES, library_files=files)))
    return old


def test_a_users_entry_of_the_format_before_is_carried_over_where_its_files_are_as_they_were(cache):
    from fusec.library.digest import dag_files
    entry = planted(store=False)
    old = _in_the_format_before(entry, dag_files(library(), bicgk()))
    assert not entry.key.path.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quietly
        found = tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG)
    assert found is not None and found.plan == entry.plan and found.measured_us == 12.5
    assert found.path == entry.key.path and entry.key.path.exists() and not old.key.path.exists()
    again = tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG)  # now the entry of this format
    assert again.path == entry.key.path and again.recorded == found.recorded
    assert json.loads(entry.key.path.read_text())["format"] == tuning.FORMAT


def test_a_users_entry_of_the_format_before_keyed_on_other_files_is_not_carried_over(cache):
    from fusec.library.digest import dag_files
    entry = planted(store=False)
    files = dict(dag_files(library(), bicgk()), **{"sgemv.cu": "0" * 16})  # sgemv.cu as it was
    old = _in_the_format_before(entry, files)
    assert tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG) is None
    assert old.key.path.exists() and not entry.key.path.exists()  # nothing lost, nothing made


DAMAGED_FIELDS = {
    "measured_us -1": lambda d: d.update(measured_us=-1),
    "predicted_rank 0": lambda d: d.update(predicted_rank=0),
    "turning a string": lambda d: d.update(turning="yes"),
    "a kernel of the plan null": lambda d: d["plan"].__setitem__(0, None),
    "the plan an object": lambda d: d.update(plan={}),
}


@pytest.mark.parametrize("name", sorted(DAMAGED_FIELDS))
def test_fusec_tunings_lists_an_entry_that_lookups_ignore_as_not_usable(capsys, cache, name):
    """A lookup ignores the entry with a warning; `fusec tunings` said it was usable ("yes")."""
    entry = planted()
    data = json.loads(entry.key.path.read_text())
    DAMAGED_FIELDS[name](data)
    entry.key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match=re.escape(str(entry.key.path))):
        assert tuning.lookup(bicgk(), library(), "float32", SIZES, SLUG) is None
    code, out, err = run_cli(capsys, "tunings", "--library", LIBRARY, "--gpu", "h100")
    assert code == 0, err
    (row,) = re.findall(r"^  h100-80gb-hbm3 .*$", out.split("in the tuning cache:")[1].split("shipped with")[0], re.M)
    assert re.search(r"  no: does not parse \(\w+", row), row


def test_fusec_tunings_of_a_folder_that_is_no_library_is_a_clear_error(capsys, tmp_path):
    code, out, err = run_cli(capsys, "tunings", "--library", tmp_path / "nowhere")
    assert code == 1 and f"fusec: error: library directory {str(tmp_path / 'nowhere')!r} does not exist" in err


def test_the_bundled_librarys_shipped_plans_parse_and_list_in_order():
    # what bench.retune shipped for the H100: every file whole, keyed on a bundled script,
    # and listed by script, precision and sizes (not by the digests that name the files)
    blas = library()
    digests = {tuning.key(load_script(path, blas), blas, "float32", {}, "").script
               for path in sorted((ROOT / "scripts").glob("*.script"))}
    shipped = [e for e in tuning.filed(blas, "h100") if e.shipped]
    assert len(shipped) >= 33
    for entry in shipped:
        assert entry.script != "?", entry.path
        key = json.loads(entry.path.read_text(encoding="utf-8"))["key"]
        assert key["script"] in digests, entry.path
        assert "does not parse" not in entry.why_unused and "do not match" not in entry.why_unused
    order = [(e.script, e.dtype, e.sizes) for e in shipped]
    assert order == sorted(order)


def test_the_bundled_librarys_shipped_plans_are_current(monkeypatch, capsys, tmp_path):
    """Every plan the bundled library ships is keyed as fusec keys it now: a lookup for its own
    script (the paper's sequences, the solvers' iterations of scripts/solvers/, the distributed
    programs' stages) finds that
    very file, and `fusec tunings` lists it as usable; `fusec compile` of GEMVER at n = 16384
    for the H100 says it runs the plan shipped for it."""
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    blas = library()
    dags = {tuning.key(dag, blas, "float32", {}, "").script: dag
            for dag in (load_script(path, blas) for path in sorted((ROOT / "scripts").glob("**/*.script")))}
    # and the local stages of the distributed programs over 2 ranks (tools/stage_scripts.py)
    import fusec.distributed as fd
    from fusec.api import script_dag
    for path in sorted((ROOT / "scripts").glob("*.script")):
        for stage in fd.plan(path, ranks=2, sizes={"n": 16384}, dtype="float32").stages:
            dag = script_dag(None, stage.source, stage.name, blas)
            dags[tuning.key(dag, blas, "float32", {}, "").script] = dag
    shipped = [e for e in tuning.filed(blas) if e.shipped]
    assert len(shipped) >= 66
    for entry in shipped:
        assert entry.why_unused == "", f"{entry.path}: {entry.why_unused}"
        key = tuning.TuningKey.from_fields(json.loads(entry.path.read_text(encoding="utf-8"))["key"])
        found = tuning.lookup(dags[key.script], blas, key.dtype, dict(key.sizes), key.gpu)
        assert found is not None and found.path == entry.path, entry.path
    code, out, err = run_cli(capsys, "compile", ROOT / "scripts" / "gemver.script", "--library", LIBRARY,
                             "--size", "n=16384", "--gpu", "h100", "--no-nvcc", "-o", tmp_path)
    assert code == 0, err
    shipped = rf"^plan: shipped with the library \(tuned on {H100} .*\): .*/tunings/{SLUG}/[0-9a-f]{{64}}\.json$"
    assert re.search(shipped, out, re.M), out
