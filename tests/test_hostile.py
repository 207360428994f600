"""Regression tests of issue 50: input a hostile user gives fusec (scripts, libraries,
databases, tuning entries, caches, flags, arguments) ends in a typed, located error, or
a warning and a fallback, or a correct program; never a traceback, never a program
that means something else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import fusec
from fusec.errors import Coord, FusecError, ScriptLexError, ScriptWarning
from fusec.frontend import load_script
from fusec.frontend.check import MAX_WARNINGS
from fusec.space import unfused_plan
from tests.helpers import library

# These tests compile without naming a GPU: where none is present fusec says it predicts with the
# analytic model, as it should, and that is not what they test.
pytestmark = pytest.mark.filterwarnings("ignore:no GPU here and none named:fusec.cost.perfdb.store.PerfdbWarning")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


SCAL = "vector x[n], y[n];\ninput x;\ny = sscal({}, x);\nreturn y;\n"


# -- numbers are values -------------------------------------------------------

@pytest.mark.parametrize("text, literal", [
    ("10", "real(10.0)"), ("1.0", "real(1.0)"), (".5", "real(0.5)"), ("-2e-3", "real(-0.002)"),
    ("1.5E+2", "real(150.0)"), ("123456789.123456789", "real(123456789.12345679)"),
    ("1e-300", "real(1e-300)"),
])
def test_constants_are_emitted_as_their_value(tmp_path, text, literal):
    path = write(tmp_path, "scal.script", SCAL.format(text))
    dag = load_script(path, library())
    source = fusec.compile(path, library(), "float64", plan=unfused_plan(dag, library())).source
    assert literal in source
    assert float(literal[5:-1]) == float(text)  # round-trip exact


@pytest.mark.parametrize("text, column", [("010", 11), ("09", 11), ("-007.5", 12)])
def test_a_leading_zero_is_a_located_error(tmp_path, text, column):
    path = write(tmp_path, "scal.script", SCAL.format(text))
    with pytest.raises(ScriptLexError) as info:
        load_script(path, library())
    assert info.value.coord.line == 3 and info.value.coord.column == column
    assert "leading zero" in info.value.message


# -- warnings stay small ------------------------------------------------------

def test_thousands_of_unused_names_give_a_few_short_warnings(tmp_path):
    names = [f"v{i}" for i in range(2000)]
    text = ("vector x[n], y[n], " + ", ".join(f"{v}[n]" for v in names) + ";\n"
            "input x;\ny = sscal(2.0, x);\nreturn y;\n")
    path = write(tmp_path, "many.script", text)
    with pytest.warns(ScriptWarning) as caught:
        load_script(path, library())
    messages = [str(w.message) for w in caught]
    assert len(messages) == MAX_WARNINGS + 1
    assert "1980 more warning(s)" in messages[-1]
    assert sum(len(m) for m in messages) < 20 * 400  # the 17 KB line shows once, clipped
    assert sum(m.count("\n") for m in messages) == 2  # one line each; the source line (and caret) once


def test_a_long_line_is_shown_as_a_window_around_the_column():
    line = "x" * 5000 + "$" + "y" * 5000
    text = FusecError("bad", Coord("f", 1, 5001), line).render()
    shown, caret = text.split("\n")[1:]
    assert len(shown) < 140 and shown[caret.index("^")] == "$"


# -- performance databases ----------------------------------------------------

import json  # noqa: E402
import re  # noqa: E402

from fusec.cost.perfdb import store  # noqa: E402

BUNDLED_DB = store.BUNDLED / "h100-80gb-hbm3.json"


def _first_routine(data, field, value):
    data["routines"][0][field] = value


def _device(field, value):
    return lambda data: data["device"].__setitem__(field, value)


DB_MUTANTS = {
    "seconds null": lambda d: _first_routine(d, "seconds", None),
    "seconds string": lambda d: _first_routine(d, "seconds", "fast"),
    "seconds list": lambda d: _first_routine(d, "seconds", [1e-6]),
    "zero blocks per SM": lambda d: _first_routine(d, "seconds", {"0": 1e-6}),
    "huge seconds": lambda d: _first_routine(d, "seconds", {"1": 1e308}),
    "infinite seconds": lambda d: _first_routine(d, "seconds", {"1": float("inf")}),
    "sms 0": _device("sms", 0),
    "sms -1": _device("sms", -1),
    "sms 2.5": _device("sms", 2.5),
    "device a list": lambda d: d.__setitem__("device", ["h100"]),
    "launch NaN": lambda d: d.__setitem__("launch_seconds", float("nan")),
    "launch -1": lambda d: d.__setitem__("launch_seconds", -1),
    "iters a string": lambda d: _first_routine(d, "iters", "4"),
    "routines an object": lambda d: d.__setitem__("routines", {}),
}


def mutated_database(tmp_path, mutate) -> Path:
    data = json.loads(BUNDLED_DB.read_text())
    mutate(data)
    path = tmp_path / BUNDLED_DB.name
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    return path


@pytest.mark.parametrize("name", sorted(DB_MUTANTS))
def test_a_damaged_database_is_a_warning_and_not_used(tmp_path, name):
    path = mutated_database(tmp_path, DB_MUTANTS[name])
    with pytest.warns(store.PerfdbWarning, match=rf"performance database {path} is damaged"):
        assert store.load(path, library()) is None


@pytest.mark.parametrize("name", ["huge seconds", "sms 0", "device a list", "launch NaN"])
def test_commands_on_a_damaged_database_warn_and_fall_back(tmp_path, monkeypatch, capsys, name):
    from fusec.cli import main
    path = mutated_database(tmp_path, DB_MUTANTS[name])
    monkeypatch.setenv("FUSEC_PERFDB", str(tmp_path))
    script = str(Path(__file__).resolve().parent.parent / "scripts" / "bicgk.script")
    assert main(["space", script, "--gpu", "h100", "--top", "2"]) == 0
    assert "is damaged" in capsys.readouterr().err
    assert main(["perfdb", "show", "--gpu", "h100", "--dir", str(tmp_path)]) == 1
    warning, error = capsys.readouterr().err.splitlines()  # exit 1 says why, as every failing command does
    assert "is damaged" in warning and error.startswith(f"fusec: error: the performance database {path} cannot")
    assert main(["compile", script, "--gpu", "h100", "--no-nvcc", "-o", str(tmp_path / "out")]) == 0


def test_a_database_nested_50000_deep_is_damaged(tmp_path):
    path = tmp_path / "h100-80gb-hbm3.json"
    path.write_text("[" * 50000 + "]" * 50000)
    with pytest.warns(store.PerfdbWarning, match="is damaged"):
        assert store.load(path) is None


# -- two perfdb builds at once --------------------------------------------------

def _split_by_dtype():
    import dataclasses
    whole = store.load(BUNDLED_DB, library())
    assert whole is not None, "the bundled database times the bundled library"
    part = {d: dataclasses.replace(whole, timings={k: t for k, t in whole.timings.items() if k.dtype == d})
            for d in ("float32", "float64")}
    assert all(part[d].timings for d in part)
    return whole, part


@pytest.mark.parametrize("first", ["float32", "float64"])
def test_builds_of_each_precision_finishing_in_turn_keep_both(tmp_path, first):
    from fusec.cost.perfdb.build import save_merged
    whole, part = _split_by_dtype()
    path = tmp_path / BUNDLED_DB.name
    second = "float64" if first == "float32" else "float32"
    # both builds started on no file; each writes when it is done
    save_merged(part[first], path, library(), (first,), missing=False)
    save_merged(part[second], path, library(), (second,), missing=False)
    assert set(store.load(path, library()).timings) == set(whole.timings)


def test_a_build_of_the_missing_keys_keeps_the_prices_of_the_others(tmp_path):
    import dataclasses

    from fusec.cost.perfdb.build import save_merged
    whole, part = _split_by_dtype()
    path = tmp_path / BUNDLED_DB.name
    store.save(part["float32"], path)
    remeasured = {**whole.device, "target": {**whole.device["target"], "copy_bandwidth": 1.5e12}}
    added = dataclasses.replace(part["float64"], device=remeasured, launch=whole.launch * 2, built="later")
    save_merged(added, path, library(), ("float32", "float64"), missing=True)
    merged = store.load(path, library())
    assert set(merged.timings) == set(whole.timings) and merged.built == "later"
    assert merged.device["target"] == whole.device["target"] and merged.launch == whole.launch


def test_a_build_waits_for_the_lock_of_another(tmp_path):
    import fcntl
    import threading

    from fusec.cost.perfdb.build import save_merged
    _, part = _split_by_dtype()
    path = tmp_path / BUNDLED_DB.name
    with open(path.with_name(path.name + ".lock"), "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        writer = threading.Thread(target=save_merged, args=(part["float32"], path, library(), ("float32",), False))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and not path.exists()  # waiting for the lock
        store.save(part["float64"], path)  # what the other build wrote while it held the lock
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    writer.join(10)
    kept = store.load(path, library()).timings
    assert {k.dtype for k in kept} == {"float32", "float64"}


# -- tuning entries ---------------------------------------------------------------

from fusec.errors import FusecWarning  # noqa: E402
from fusec.tune import store as tuning  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BICGK = ROOT / "scripts" / "bicgk.script"
TUNED_SIZES = {"m": 300, "n": 200}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    return tmp_path / "cache"


def tuned_entry(root: Path | None = None) -> tuning.TuningEntry:
    """An entry holding the second-best plan of the space compile builds for gpu='h100'."""
    from fusec.cost.perfdb import predictor_for
    from fusec.space.combinations import build_space
    dag = load_script(BICGK, library())
    ranked = build_space(dag, library(), "float32", TUNED_SIZES, predictor_for(library(), "h100")).ranked()
    next(ranked)
    plan = next(ranked).plan
    entry = tuning.TuningEntry(tuning.key(dag, library(), "float32", TUNED_SIZES, "h100-80gb-hbm3"), plan,
                               12.5, 10.0, 2, 10, "NVIDIA H100 80GB HBM3", "2026-11-22T12:00:00+00:00", "bicgk")
    tuning.store(entry)
    return entry


def _kernel(data):
    kernel = data["plan"][0]
    while "steps" not in kernel:  # a horizontal, striped or held plan: its first part
        kernel = next(kernel[k] for k in ("horizontal", "striped", "held") if k in kernel)[0]
    return kernel


def _set_size(value):
    def mutate(data):
        data["key"]["sizes"]["n"] = value
    return mutate


ENTRY_MUTANTS = {
    "a step deleted": lambda d: _kernel(d)["steps"].pop(0),
    "a step re-pointed": lambda d: _kernel(d)["steps"][-1].__setitem__(2, "x"),
    "iters 1.5": lambda d: _kernel(d)["shape"].__setitem__("iters", 1.5),
    "a list in the plan": lambda d: _kernel(d)["shape"].__setitem__("block", [128]),
    "calls of strings": lambda d: _kernel(d).__setitem__("calls", ["0", 1]),
    "library pieces a list": lambda d: d.__setitem__("library_pieces", ["sgemv.cu: declaration"]),
    "a library piece's digest a number": lambda d: d["library_pieces"].__setitem__("sgemv.cu: declaration", 7),
    "calls a string": lambda d: d.__setitem__("calls", "sgemv"),
    "a call no function's": lambda d: d.__setitem__("calls", ["sgemv"]),
}


def _compile_quietly():
    return fusec.compile(BICGK, library(), sizes=TUNED_SIZES, gpu="h100")


def test_an_intact_entry_is_used(cache):
    entry = tuned_entry()
    assert _compile_quietly().generated.plan == entry.plan  # so the tests below can fail


@pytest.mark.parametrize("name", sorted(ENTRY_MUTANTS))
def test_an_altered_entry_is_a_warning_and_the_prediction(cache, name):
    entry = tuned_entry()
    data = json.loads(entry.key.path.read_text())
    ENTRY_MUTANTS[name](data)
    entry.key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match=f"ignoring the tuning-cache entry {entry.key.path}"):
        program = _compile_quietly()
    assert program.tuned is None and program.generated.plan != entry.plan


def _library_copy(tmp_path) -> str:
    """The bundled library copied: --prune deletes a stale shipped plan from the library it is given."""
    import shutil

    from fusec import data
    return str(shutil.copytree(data.LIBRARY, tmp_path / "blas"))


@pytest.mark.parametrize("value", [float("inf"), 1.5, "200", 2 ** 40, -1])
def test_an_entry_with_bad_sizes_is_skipped_by_every_reader(cache, capsys, value, tmp_path):
    from fusec.cli import main
    entry = tuned_entry()
    data = json.loads(entry.key.path.read_text())
    _set_size(value)(data)
    entry.key.path.write_text(json.dumps(data))
    near = {"m": 310, "n": 210}
    program = fusec.compile(BICGK, library(), sizes=near, gpu="h100")  # nearby: the file is not borrowed
    assert program.nearby is None
    assert main(["tunings", "--library", _library_copy(tmp_path), "--prune", "--gpu", "h100"]) == 0
    assert "does not parse" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["library pieces a list", "a library piece's digest a number", "calls a string",
                                  "a call no function's"])
def test_an_entry_with_bad_library_pieces_is_listed_as_not_parsing_and_kept(cache, capsys, name, tmp_path):
    from fusec.cli import main
    entry = tuned_entry()
    data = json.loads(entry.key.path.read_text())
    ENTRY_MUTANTS[name](data)
    entry.key.path.write_text(json.dumps(data))
    assert main(["tunings", "--library", _library_copy(tmp_path), "--prune", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    cached = out.split("in the tuning cache:")[1]
    assert re.search(r"^  h100-80gb-hbm3 +\? .* no: does not parse \(Invalid\)$", cached, re.M), out
    assert entry.key.path.exists()


def test_an_entry_nested_50000_deep_is_skipped(cache, capsys, tmp_path):
    from fusec.cli import main
    entry = tuned_entry()
    entry.key.path.write_text("[" * 50000 + "]" * 50000)
    with pytest.warns(FusecWarning, match="does not parse"):
        assert _compile_quietly().tuned is None
    assert fusec.compile(BICGK, library(), sizes={"m": 310, "n": 210}, gpu="h100").nearby is None
    assert main(["tunings", "--library", _library_copy(tmp_path), "--prune"]) == 0
    assert "does not parse" in capsys.readouterr().out


def test_a_shipped_entry_altered_is_not_used(cache, tmp_path, monkeypatch):
    import shutil

    from fusec.library.loader import load_library
    copy = tmp_path / "blas"
    shutil.copytree(library().path, copy, ignore=shutil.ignore_patterns("tunings"))
    lib = load_library(copy)
    dag = load_script(BICGK, lib)
    entry = tuned_entry()
    entry.key.path.unlink()
    shipped = tuning.ship(dataclasses.replace(entry, key=tuning.key(dag, lib, "float32", TUNED_SIZES,
                                                                    "h100-80gb-hbm3")), lib)
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    assert fusec.compile(BICGK, lib, sizes=TUNED_SIZES, gpu="h100").tuned is not None
    data = json.loads(shipped.read_text())
    ENTRY_MUTANTS["a step deleted"](data)
    shipped.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match=f"ignoring the tuning-cache entry {shipped}"):
        assert fusec.compile(BICGK, lib, sizes=TUNED_SIZES, gpu="h100").tuned is None


# -- libraries ------------------------------------------------------------------

from fusec.errors import LibraryFormatError, LibraryValidationError  # noqa: E402
from fusec.library.loader import load_library  # noqa: E402


def library_copy(tmp_path, file: str, old: str, new: str) -> Path:
    import shutil
    copy = tmp_path / "blas"
    shutil.copytree(library().path, copy, ignore=shutil.ignore_patterns("tunings"))
    text = (copy / file).read_text()
    assert old in text
    (copy / file).write_text(text.replace(old, new, 1))
    return copy


@pytest.mark.parametrize("old, new, needs", [
    ("mapping   tile          registers  TILE_ROWS/BLOCK_Y*VEC", "mapping   tile          registers  1", 16),
    ("mapping   vec           registers  VEC  ", "mapping   vec           registers  2  ", 4),
    ("mapping   cols_smem       shared     TILE_COLS ", "mapping   cols_smem       shared     32        ", 128),
])
def test_a_mapping_smaller_than_its_element_is_refused(tmp_path, old, new, needs):
    copy = library_copy(tmp_path, "library.fusec", old, new)
    with pytest.raises(LibraryValidationError) as info:
        load_library(copy)
    name = old.split()[1]
    assert f"mapping {name!r}" in info.value.message and f"needs at least {needs}" in info.value.message
    assert info.value.coord.file.endswith(".cu")  # the routine line that uses the mapping


def test_a_second_metadata_block_is_refused(tmp_path):
    copy = library_copy(tmp_path, "sdot.cu", "// r_partial += x . y",
                        "/*@fusec\nfunction other(x: vector[n]) -> y: vector[n]\n@*/\n// r_partial += x . y")
    with pytest.raises(LibraryFormatError, match="a second /\\*@fusec block") as info:
        load_library(copy)
    text = (copy / "sdot.cu").read_text().split("\n")
    assert info.value.coord.file.endswith("sdot.cu") and text[info.value.coord.line - 1] == "/*@fusec"


# -- nvcc and the caches ----------------------------------------------------------

from fusec import nvcc  # noqa: E402
from fusec.errors import CompileError, ToolError  # noqa: E402


@pytest.mark.parametrize("value", ["/bin/false", "/no/such/nvcc"])
def test_a_broken_or_missing_nvcc_is_one_clear_error(tmp_path, monkeypatch, capsys, value):
    from fusec.cli import main
    monkeypatch.setenv("FUSEC_NVCC", value)
    nvcc.nvcc_version.cache_clear()
    with pytest.raises(ToolError, match="FUSEC_NVCC|does not work"):
        nvcc.compile_cubin("__global__ void k() {}")
    script = str(ROOT / "scripts" / "sscal.script")
    assert main(["compile", script, "-o", str(tmp_path), "--gpu", "h100"]) == 1
    err = capsys.readouterr().err
    assert err.count("fusec: error:") == 1 and "Traceback" not in err
    assert value in err


@pytest.mark.nvcc
def test_an_nvcc_error_in_a_library_routine_names_the_library_file(tmp_path):
    copy = library_copy(tmp_path, "sdot.cu", "for (int v = 0; v < VEC; ++v) r[0] += x[v] * y[v];",
                        "for (int v = 0; v < VEC; ++v) r[0] += x[v] * y[v] * not_declared;")
    lib = load_library(copy)
    line = (copy / "sdot.cu").read_text().split("\n").index(
        "  for (int v = 0; v < VEC; ++v) r[0] += x[v] * y[v] * not_declared;") + 1
    script = write(tmp_path, "dot.script", "vector x[n], y[n];\nscalar r;\ninput x, y;\nr = sdot(x, y);\nreturn r;\n")
    program = fusec.compile(script, lib, "float32", plan=unfused_plan(load_script(script, lib), lib))
    with pytest.raises(CompileError) as info:
        nvcc.compile_cubin(program.source)
    message = info.value.message
    assert f"{copy / 'sdot.cu'}({line})" in message and "not_declared" in message
    kept = Path(message.split("kept in ")[1].split(":\n")[0])
    assert kept.read_text() == program.source


@pytest.mark.nvcc
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_cached_cubin_is_compiled_again(cache, damage):
    source = '__global__ void fusec_test_kernel(float* x) { x[threadIdx.x] *= 2.0f; }'
    first = nvcc.compile_cubin(source)
    (path,) = (cache / "nvcc").glob("*.cubin")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.warns(FusecWarning, match="damaged entry of the nvcc cache"):
        again = nvcc.compile_cubin(source)
    assert not again.cached and again.cubin == first.cubin
    assert nvcc.compile_cubin(source).cached  # rewritten whole


@pytest.mark.nvcc
@pytest.mark.parametrize("blocked", ["cache is a file", "folder under it is a file"])
def test_an_unusable_nvcc_cache_is_a_warning_and_compiles_without_it(cache, blocked):
    """A read-only or mistyped $FUSEC_CACHE_DIR costs the cache, not the compile."""
    if blocked == "cache is a file":
        cache.write_text("a file, not a folder")
    else:
        cache.mkdir()
        (cache / "nvcc").write_text("a file, not a folder")
    source = '__global__ void fusec_test_kernel(float* x) { x[threadIdx.x] *= 3.0f; }'
    with pytest.warns(FusecWarning, match="nvcc cache") as caught:
        compiled = nvcc.compile_cubin(source)
    assert compiled.cubin and not compiled.cached and str(cache) in str(caught[0].message)


@pytest.mark.nvcc
def test_an_nvcc_cache_that_cannot_be_written_is_a_warning_and_the_cubin_is_returned(cache, monkeypatch):
    def refuse(path, data):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(nvcc, "atomic_write_bytes", refuse)  # a read-only cache folder
    source = '__global__ void fusec_test_kernel(float* x) { x[threadIdx.x] *= 5.0f; }'
    with pytest.warns(FusecWarning, match="could not write the nvcc cache"):
        compiled = nvcc.compile_cubin(source)
    assert compiled.cubin and compiled.resources


# -- flags and arguments -------------------------------------------------------------

import os  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from fusec.errors import ArgumentError, ScriptError, ScriptSemanticError  # noqa: E402

SSCAL = str(ROOT / "scripts" / "sscal.script")
SGEMV = ROOT / "scripts" / "sgemv.script"


@pytest.mark.parametrize("argv, phrase", [
    (["compile", SSCAL, "--size", "n=99999999999", "--no-nvcc"], "--size 'n=99999999999': sizes must be at most"),
    (["compile", str(SGEMV), "--size", "n=2000000000", "--no-nvcc"], "--size: A would hold"),
    (["space", SSCAL, "--top", "-3"], "--top -3: it must be at least 1"),
    (["space", SSCAL, "--top", "0"], "--top 0: it must be at least 1"),
    (["space", SSCAL, "--top", "100001"], "--top 100001: at most 100,000 are listed"),  # GEMVER's ran for ever
    (["space", SSCAL, "--gpu", "nosuchgpu"], "--gpu 'nosuchgpu' names no GPU"),
    (["compile", SSCAL, "--gpu", "nosuchgpu", "--no-nvcc"], "names no GPU fusec knows"),
    (["tune", SSCAL, "--size", "n=64", "--top", "0"], "--top 0: it must be at least 1"),
    (["tune", SSCAL, "--size", "n=64", "--repeat", "0"], "--repeat 0: it must be at least 1"),
    (["run", SSCAL, "--size", "n=64", "--warmup", "-1"], "--warmup -1: it must be at least 0"),
    (["run", SSCAL, "--size", "n=64", "--seed", "-1"], "--seed -1: it must be at least 0"),
    (["tune", SSCAL, "--size", "n=64", "--seed", "-1"], "--seed -1: it must be at least 0"),
    (["perfdb", "measure-plans", SSCAL, str(ROOT / "scripts")], "scripts: the script is a directory"),
])
def test_a_flag_out_of_range_is_one_error_naming_it(tmp_path, capsys, argv, phrase):
    from fusec.cli import main
    assert main(argv + (["-o", str(tmp_path)] if argv[0] == "compile" else [])) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusec: error: ") and phrase in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["compile", "space"])
def test_an_unknown_gpu_in_the_environment_is_one_error_naming_the_variable(tmp_path, capsys, monkeypatch, command):
    from fusec.cli import main
    monkeypatch.setenv("FUSEC_GPU", "nosuchgpu")
    extra = ["--no-nvcc", "-o", str(tmp_path / "out")] if command == "compile" else ["--top", "1"]
    assert main([command, SSCAL, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusec: error: $FUSEC_GPU 'nosuchgpu' names no GPU fusec knows"), err
    assert err.count("\n") == 1  # no warning that kernels are chosen for it all the same
    assert not (tmp_path / "out").exists()


def test_an_unknown_gpu_in_the_environment_is_an_argument_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("FUSEC_GPU", "nosuchgpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning about its database first
        with pytest.raises(ArgumentError, match="unknown GPU 'nosuchgpu'") as info:
            fusec.compile(SSCAL, library(), sizes={"n": 64}, tuned=False)
    assert info.value.argument == "$FUSEC_GPU"


def test_an_unknown_gpu_with_analytic_is_the_analytic_model(tmp_path, capsys):
    from fusec.cli import main
    assert main(["space", SSCAL, "--gpu", "nosuchgpu", "--analytic", "--top", "1"]) == 0
    assert "analytic" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_the_script_is_refused_at_once(tmp_path, capsys):
    from fusec.cli import main
    fifo = tmp_path / "script.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ScriptError, match="FIFO"):
        load_script(fifo, library())
    assert main(["compile", str(fifo), "--no-nvcc", "-o", str(tmp_path)]) == 1  # returns: nothing opens it
    assert "is a FIFO, not a regular file" in capsys.readouterr().err


class PredictorWithoutTarget:
    name = "no target"

    def kernel_seconds(self, kernel, dag, sizes):
        return 1.0


@pytest.mark.parametrize("kwargs, argument", [
    ({"dtype": "float16"}, "dtype"), ({"dtype": None}, "dtype"), ({"dtype": "int32"}, "dtype"),
    ({"sizes": {"n": 0}}, "sizes"), ({"sizes": {"n": -5}}, "sizes"), ({"sizes": {"n": 2 ** 31}}, "sizes"),
    ({"sizes": {"n": 1.5}}, "sizes"), ({"sizes": {"n": "8"}}, "sizes"), ({"sizes": [("n", 4)]}, "sizes"),
    ({"library": 42}, "library"), ({"plan": "fused"}, "plan"), ({"predictor": object()}, "predictor"),
    ({"predictor": PredictorWithoutTarget()}, "predictor"),
    ({"gpu": 100}, "gpu"), ({"tuned": "no"}, "tuned"), ({"tuned": None}, "tuned"),
    ({"reproducible": "no"}, "reproducible"), ({"reproducible": 1}, "reproducible"),
])
def test_a_bad_api_argument_is_an_argument_error_naming_it(kwargs, argument):
    with pytest.raises(ArgumentError) as info:
        fusec.compile(SSCAL, **{"library": library(), **kwargs})
    assert info.value.argument == argument


def test_a_script_that_is_not_a_path_is_an_argument_error():
    with pytest.raises(ArgumentError) as info:
        fusec.compile(3.5, library())
    assert info.value.argument == "script"


def test_a_missing_script_is_a_fusec_error(tmp_path):
    with pytest.raises(ScriptError, match="does not exist"):
        fusec.compile(tmp_path / "missing.script", library())


@pytest.mark.parametrize("script", ["", "scripts/sscal\0.script"])
def test_a_script_path_that_names_no_file_is_an_argument_error(script):
    with pytest.raises(ArgumentError) as info:  # not os.stat's ValueError, nor "'': the script does not exist"
        fusec.compile(script, library())
    assert info.value.argument == "script"


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_library_in_the_environment_that_is_no_folder_is_named(tmp_path, monkeypatch, capsys, kind):
    place = tmp_path / "library"
    if kind == "file":
        place.write_text("not a folder")
    monkeypatch.setenv("FUSEC_LIBRARY", str(place))
    with pytest.raises(LibraryFormatError) as info:
        fusec.compile(SSCAL)
    assert str(info.value).startswith(f"$FUSEC_LIBRARY names {str(place)!r}, which is not a folder")
    from fusec.cli import main
    assert main(["compile", SSCAL, "--no-nvcc", "-o", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == f"fusec: error: {info.value}\n"


def test_a_script_path_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path, capsys):
    """Linux allows any bytes in a name; the generated code names its script in UTF-8."""
    from fusec.cli import main
    path = os.fsdecode(bytes(tmp_path) + b"/\xffscal.script")
    Path(path).write_bytes(Path(SSCAL).read_bytes())
    with pytest.raises(ScriptError, match="not UTF-8"):
        fusec.compile(path, library(), sizes={"n": 64})
    assert main(["compile", path, "--no-nvcc", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusec: error: ") and "not UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # was an empty .cu and a UnicodeEncodeError


def test_a_source_name_that_is_not_utf8_is_an_argument_error():
    with pytest.raises(ArgumentError) as info:
        fusec.compile(source=Path(SSCAL).read_text(), name="\udcffscal", library=library())
    assert info.value.argument == "name"


def test_a_library_path_that_is_a_file_is_called_so(tmp_path):
    path = write(tmp_path, "library", "not a folder")
    with pytest.raises(LibraryFormatError) as info:
        fusec.compile(SSCAL, path)
    assert str(info.value) == f"library directory {str(path)!r} is a file, not a folder"


def test_a_float32_program_refuses_a_literal_past_float32(tmp_path):
    path = write(tmp_path, "scal.script", SCAL.format("1e300"))
    with pytest.raises(ScriptSemanticError, match="outside the range of float32") as info:
        fusec.compile(path, library(), "float32", sizes={"n": 64})
    assert (info.value.coord.line, info.value.coord.column) == (3, 11)
    assert "real(1e+300)" in fusec.compile(path, library(), "float64", sizes={"n": 64}).source


@pytest.fixture(scope="module")
def sscal_program():
    return fusec.compile(SSCAL, library(), "float32", sizes={"n": 64}, tuned=False)


@pytest.mark.parametrize("alpha, phrase", [
    pytest.param(10 ** 400, "too large for any float", id="10**400"), (float("nan"), "must be finite"),
    (float("inf"), "must be finite"),
    (-float("inf"), "must be finite"), (1e300, "outside the range of float32"), (np.float64("nan"), "must be finite"),
])
def test_a_bad_scalar_is_an_argument_error_naming_it(sscal_program, alpha, phrase):
    x = np.ones(64, np.float32)
    with pytest.raises(ArgumentError, match=phrase) as info:
        sscal_program.bind({"x": x, "alpha": alpha})
    assert info.value.argument == "alpha"


class FakeDevice:
    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


GOOD = {"shape": (64,), "typestr": "<f4", "data": (4096, False), "version": 3}


@pytest.mark.parametrize("interface, phrase", [
    ({k: v for k, v in GOOD.items() if k != "shape"}, "has no 'shape'"),
    ({k: v for k, v in GOOD.items() if k != "data"}, "has no 'data'"),
    ({k: v for k, v in GOOD.items() if k != "typestr"}, "has no 'typestr'"),
    ({**GOOD, "data": None}, r"not \(pointer, read-only flag\)"),
    ({**GOOD, "data": (-8, False)}, r"not \(pointer, read-only flag\)"),
    ({**GOOD, "data": (0, False)}, "null data pointer"),
    ({**GOOD, "shape": (-64,)}, "negative extent"),
    ({**GOOD, "shape": (64.0,)}, "not a tuple of whole numbers"),
    ({**GOOD, "shape": 64}, "not a tuple of whole numbers"),
    ({**GOOD, "typestr": 4}, "not a string"),
    ({**GOOD, "typestr": "<zz"}, "not a real number"),
    ({**GOOD, "strides": (4, 4)}, "not one whole number per axis"),
    ({**GOOD, "strides": 4}, "not a tuple"),
])
def test_a_malformed_array_interface_is_an_argument_error_naming_it(sscal_program, interface, phrase):
    with pytest.raises(ArgumentError, match=phrase) as info:
        sscal_program.bind({"x": FakeDevice(**interface), "alpha": 2.0})
    assert info.value.argument == "x"


def test_a_wellformed_fake_array_binds(sscal_program):
    binding = sscal_program.bind({"x": FakeDevice(**GOOD), "alpha": 2.0})  # so the tests above can fail
    assert binding.sizes == {"n": 64}


@pytest.fixture(scope="module")
def sgemv_program():
    return fusec.compile(SGEMV, library(), "float32", sizes={"n": 64}, tuned=False)


@pytest.mark.parametrize("sizes, phrase", [
    ({"m": 5, "n": 0}, "size n = 0 is out of range"), ({"m": 5, "n": -1}, "size n = -1 is out of range"),
    ({"m": 5, "n": 2 ** 31}, "out of range"), ({"m": 5, "n": 3.5}, "size n is 3.5, not a whole number"),
    ({"m": 5, "n": "7"}, "size n is '7', not a whole number"), ({"m": True, "n": 7}, "not a whole number"),
    ({"m": 5}, "no value for n"), ({}, "no value for m, n"), ({"m": 5, "n": 7, "x": 2}, "has no size x"),
    ("n=5", "is a str: pass a mapping"), (5, "is a int: pass a mapping"),
])
@pytest.mark.parametrize("method", ["describe", "plan_for", "minimum_bytes"])
def test_sizes_given_to_a_program_are_checked(sgemv_program, method, sizes, phrase):
    with pytest.raises(ArgumentError, match=phrase) as info:
        getattr(sgemv_program, method)(sizes)
    assert info.value.argument == "sizes"


def test_sizes_given_to_a_program_in_range_are_taken(sgemv_program):
    assert "m=5" in sgemv_program.describe({"m": 5, "n": np.int64(7)})  # so the test above can fail
    assert sgemv_program.plan_for({"m": 5, "n": 7}) is not None
    assert sgemv_program.minimum_bytes({"m": 5, "n": 7}) == 4 * (5 * 7 + 7 + 5 + 5)


@pytest.mark.parametrize("arrays", [[1, 2], "x", None])
def test_arguments_that_are_not_a_mapping_are_an_argument_error(sscal_program, arrays):
    with pytest.raises(ArgumentError, match="pass a mapping") as info:
        sscal_program.bind(arrays)
    assert info.value.argument == "arrays"


@pytest.mark.parametrize("kwargs, argument", [
    ({"repeat": 0}, "repeat"), ({"repeat": -2}, "repeat"), ({"repeat": 2.5}, "repeat"), ({"repeat": True}, "repeat"),
    ({"warmup": -1}, "warmup"), ({"warmup": "3"}, "warmup"), ({"host": "no"}, "host"),
])
def test_bad_timing_arguments_are_refused_before_the_gpu_is_looked_for(sscal_program, kwargs, argument):
    with pytest.raises(ArgumentError) as info:  # repeat=0 timed nothing and returned []
        sscal_program.time({"x": np.ones(64, np.float32), "alpha": 2.0}, **kwargs)
    assert info.value.argument == argument


@pytest.mark.parametrize("planned, compiled", [("bicgk", "sscal"), ("sscal", "bicgk"), ("gemver", "atax"),
                                               ("sgemvt", "sgemv")])
def test_a_plan_of_another_script_is_an_argument_error(planned, compiled):
    def path(name):
        return ROOT / "scripts" / f"{name}.script"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no GPU here: the analytic model chooses
        plan = fusec.compile(path(planned), library(), sizes={"n": 256}, tuned=False).generated.plan
    with pytest.raises(ArgumentError, match="a plan of another script") as info:  # not a KeyError deep inside
        fusec.compile(path(compiled), library(), plan=plan)
    assert info.value.argument == "plan"


def test_a_plan_whose_implementation_the_function_lacks_is_an_argument_error(sscal_program):
    import dataclasses as dc
    plan = sscal_program.generated.plan
    kernel = plan.kernels[0]
    bad = type(plan)((dc.replace(kernel, implementations=("nosuch",)),))
    with pytest.raises(ArgumentError, match="sscal has no implementation 'nosuch'") as info:
        fusec.compile(SSCAL, library(), plan=bad)
    assert info.value.argument == "plan"
    assert fusec.compile(SSCAL, library(), plan=plan).generated.plan == plan  # so the test above can fail


@pytest.mark.parametrize("sizes", [{"n": -1}, {"x": 5}, "n=5"])
def test_sizes_are_checked_beside_an_imposed_plan(sscal_program, sizes):
    with pytest.raises(ArgumentError) as info:  # they were ignored, whatever they were
        fusec.compile(SSCAL, library(), plan=sscal_program.generated.plan, sizes=sizes)
    assert info.value.argument == "sizes"


def test_the_gpu_present_named_in_the_environment_is_known_though_fusec_has_no_figures_of_it(
        tmp_path, capsys, monkeypatch):
    import dataclasses as dc

    from fusec import target
    from fusec.cli import main
    present = dc.replace(target.reference(), name="NVIDIA Made Up 9000")
    monkeypatch.setattr(target, "from_device", lambda: present)
    monkeypatch.setenv("FUSEC_GPU", "made-up-9000")
    assert main(["compile", SSCAL, "--no-nvcc", "-o", str(tmp_path)]) == 0  # read from the device
    assert "error" not in capsys.readouterr().err


# -- environment variables ----------------------------------------------------------------

@pytest.mark.parametrize(("value", "why"), [
    ("abc", r"is 'abc': set it to a whole number of at least 0, or unset it for 0"),
    ("-1", r"is '-1'"), ("1.5", r"is '1.5'"), ("nan", r"is 'nan'")])
def test_a_bad_fusec_device_is_an_argument_error_naming_it(monkeypatch, value, why):
    """Not Python's ValueError from int(), and not quietly 'no GPU' (target.present caught
    everything): the device a call runs on is asked for, so a typo must say so."""
    from fusec import target
    from fusec.errors import ArgumentError
    from fusec.runtime import cuda
    monkeypatch.setenv("FUSEC_DEVICE", value)
    target.present.cache_clear()
    target.from_device.cache_clear()
    for read in (target.present, target.from_device, cuda.primary_context):
        with pytest.raises(ArgumentError, match=r"argument '\$FUSEC_DEVICE': " + why):
            read()
    target.present.cache_clear()
    target.from_device.cache_clear()
    monkeypatch.setenv("FUSEC_DEVICE", " 3 ")
    assert target.device_index() == 3


@pytest.mark.parametrize("value", ["abc", "0", "-5", "inf"])
def test_a_bad_collective_timeout_is_an_argument_error_when_used_not_at_import(monkeypatch, value):
    import os
    import subprocess
    import sys

    import fusec.distributed.comm as comm
    from fusec.errors import ArgumentError
    monkeypatch.setenv("FUSEC_COLLECTIVE_TIMEOUT", value)
    imported = subprocess.run([sys.executable, "-c", "import fusec.distributed"], capture_output=True, text=True,
                              env=os.environ.copy())
    assert imported.returncode == 0, imported.stderr  # importing reads nothing
    with pytest.raises(ArgumentError, match=r"argument '\$FUSEC_COLLECTIVE_TIMEOUT': is .*: set it to a number"
                                            r" above 0, or unset it for 120.0"):
        comm.default_timeout()
    with pytest.raises(ArgumentError, match=r"\$FUSEC_COLLECTIVE_TIMEOUT"):
        comm.communicator(None)
    monkeypatch.setenv("FUSEC_COLLECTIVE_TIMEOUT", "2.5")
    assert comm.default_timeout() == 2.5
    monkeypatch.delenv("FUSEC_COLLECTIVE_TIMEOUT")
    assert comm.default_timeout() == comm.DEFAULT_TIMEOUT == 120.0


def test_environment_flags_take_1_or_0():
    import os

    from fusec.errors import ArgumentError
    from fusec.validate import environment_flag
    name = "FUSEC_TEST_FLAG"
    for value, default, expected in (("1", False, True), ("0", True, False), ("", True, True), (" 1 ", False, True)):
        os.environ[name] = value
        assert environment_flag(name, default) is expected
    os.environ[name] = "yes"
    try:
        with pytest.raises(ArgumentError, match=r"argument '\$FUSEC_TEST_FLAG': is 'yes': set it to 1 or 0,"
                                                r" or unset it for 1"):
            environment_flag(name, True)
    finally:
        del os.environ[name]
