"""One stored triangle of a square matrix, without a GPU: the library's part files (a
``*.fusec`` beside library.fusec), ``square`` matrices in signatures and scripts, ``triu`` and
``tril`` in references, strmv, strmtv_strict, ssyr and ssyr2 (on fusec/data/blas/triangle.fusec)
and their lower triangle's twins (NAME_lower, on triangle_lower.fusec), and the scripts of
scripts/triangle/ (symv, trmv, syr2, syr then symv, each also NAME_lower): their oracle semantics
against NumPy, the fused plans the space finds, the generated code under nvcc, and that the
shipped performance databases stay valid for the library that gained these files. Numerics on
the GPU: tests/gpu/test_triangle.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import data, oracle
from fusec.api import script_dag
from fusec.cost.analytic import DEFAULT
from fusec.cost.perfdb import probes as P
from fusec.cost.perfdb import store
from fusec.errors import LibraryFormatError, LibraryValidationError, SizeMismatchError
from fusec.ir.steps import array_args
from fusec.library.loader import load_library
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, LIBRARY, ROOT, library
from tests.library_scripts import (
    TRIANGLE_FUNCTIONS,
    TRIANGLE_ROUTINES,
    TRIANGLE_SCRIPTS,
    TRIL_FUNCTIONS,
    TRIL_ROUTINES,
    unstored,
)

SCRIPTS = {name: (ROOT / "scripts" / "triangle" / f"{name}.script") for name in TRIANGLE_SCRIPTS}
SIZES = (1, 2, 31, 33, 1000, 4097)
LARGE = 8192  # past the L2 in float32 (256 MB), values only: the gauge would double the memory


def _dag(name: str):
    path = SCRIPTS[name]
    return script_dag(None, path.read_text(encoding="utf-8"), str(path), library())


@pytest.fixture
def mylib(tmp_path) -> Path:
    """A copy of the bundled library to add parts to (its tunings left out)."""
    folder = tmp_path / "lib"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns("tunings"))
    return folder


def _where(exc) -> tuple[str, int, int]:
    return Path(exc.coord.file).name, exc.coord.line, exc.coord.column


# -- parts ---------------------------------------------------------------------------

def test_the_bundled_library_has_the_triangle_part():
    lib = library()
    for name in ("triu_tile", "tri_x", "tri_x_all"):
        assert Path(lib.mappings[name].coord.file).name == "triangle.fusec"
    assert Path(lib.mappings["tril_tile"].coord.file).name == "triangle_lower.fusec"
    # parts in sorted order: triangle.fusec, triangle_lower.fusec, triangle_store.fusec
    assert [Path(f.path).name for f in lib.routine_files][-3:] == ["triangle.cuh", "triangle_lower.cuh",
                                                                   "triangle_store.cuh"]
    assert {"triangle.fusec", "triangle.cuh", "triangle_store.fusec", "triangle_store.cuh", "strmv.cu",
            "strmtv_strict.cu"} <= set(lib.files)
    assert Path(lib.routine_homes["triu_tile_load"]).name == "triangle.cuh"
    assert Path(lib.routine_homes["triu_tile_store"]).name == "triangle_store.cuh"
    assert {Path(lib.routine_homes[r]).name for r in ("tril_tile_load", "tril_tile_store")} == {"triangle_lower.cuh"}


def test_parts_load_in_sorted_order_and_the_hash_covers_them(mylib):
    before = load_library(mylib)
    (mylib / "b.fusec").write_text("mapping  second  registers  VEC   # from b\n", encoding="utf-8")
    (mylib / "a.fusec").write_text("# a part\nroutines extra.cuh\nmapping  first  registers  1\n",
                                   encoding="utf-8")
    (mylib / "extra.cuh").write_text("__device__ __forceinline__ void extra_routine() {}\n", encoding="utf-8")
    lib = load_library(mylib)
    order = list(lib.mappings)
    assert order.index("first") < order.index("second") < order.index("triu_tile")  # a, b, triangle
    assert lib.mappings["second"].doc == "from b"
    assert [Path(f.path).name for f in lib.routine_files][-4:] == ["extra.cuh", "triangle.cuh", "triangle_lower.cuh",
                                                                   "triangle_store.cuh"]
    assert {"a.fusec", "b.fusec", "extra.cuh"} <= set(lib.files)
    assert lib.content_hash != before.content_hash
    (mylib / "extra.cuh").write_text("__device__ __forceinline__ void extra_routine() { }\n", encoding="utf-8")
    changed = load_library(mylib)
    assert changed.content_hash != lib.content_hash and changed.files["extra.cuh"] != lib.files["extra.cuh"]
    (mylib / "b.fusec").write_text("mapping  second  registers  VEC   # from b, edited\n", encoding="utf-8")
    assert load_library(mylib).content_hash != changed.content_hash


@pytest.mark.parametrize("text,error,where,phrase", [
    ("mapping  m  registers  1\nlibrary  other\n", LibraryFormatError, ("part.fusec", 2, 1),
     "'library' is for library.fusec only"),
    ("summary  more\n", LibraryFormatError, ("part.fusec", 1, 1), "'summary' is for library.fusec only"),
    ("\n  prelude  prelude.cuh\n", LibraryFormatError, ("part.fusec", 2, 3), "'prelude' is for library.fusec only"),
    ("mappin  m  registers  1\n", LibraryFormatError, ("part.fusec", 1, 1), "'mappin' is unknown"),
    ("mapping  tile  registers  1\n", LibraryValidationError, ("part.fusec", 1, 10),
     "mapping 'tile' is declared twice (first at"),
    ("routines  nowhere.cuh\n", LibraryValidationError, ("part.fusec", 1, 11), "no file 'nowhere.cuh'"),
    ("routines  tile.cuh\n", LibraryValidationError, ("part.fusec", 1, 11), "'tile.cuh' is listed twice"),
    ("routines  ../x.cuh\n", LibraryValidationError, ("part.fusec", 1, 11), "outside the library's directory"),
    ("mapping  m  registers\n", LibraryFormatError, ("part.fusec", 1, 10), "expected 'mapping NAME"),
])
def test_a_bad_part_is_a_located_error(mylib, text, error, where, phrase):
    (mylib / "part.fusec").write_text(text, encoding="utf-8")
    with pytest.raises(error) as caught:
        load_library(mylib)
    assert _where(caught.value) == where
    assert phrase in caught.value.message


def test_a_mapping_of_two_parts_is_reported_at_the_second(mylib):
    (mylib / "a.fusec").write_text("mapping  twice  registers  1\n", encoding="utf-8")
    (mylib / "b.fusec").write_text("# the same name\nmapping  twice  registers  VEC\n", encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("b.fusec", 2, 10)
    assert "a.fusec:1" in caught.value.message


def test_a_part_read_before_another_leaves_the_error_to_the_later(mylib):
    """part.fusec sorts before triangle.fusec: the mapping both declare is an error at the
    latter's line."""
    (mylib / "part.fusec").write_text("mapping  triu_tile  registers  1\n", encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    line = next(i for i, text in enumerate((mylib / "triangle.fusec").read_text().splitlines(), 1)
                if text.startswith("mapping   triu_tile"))
    assert _where(caught.value) == ("triangle.fusec", line, 11)
    assert "part.fusec:1" in caught.value.message


def test_a_part_that_is_not_utf8_is_located(mylib):
    (mylib / "part.fusec").write_bytes(b"mapping  m  registers  1  # caf\xe9\n")
    with pytest.raises(LibraryFormatError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("part.fusec", 1, 32)


@pytest.mark.parametrize("path", [data.PERFDB / "h100-80gb-hbm3.json", data.PERFDB / "h200.json"],
                         ids=lambda p: p.stem)  # the installed package's (a wheel has no tree)
def test_the_shipped_databases_still_time_the_library(path):
    """The triangle parts only add files: every shared file a shipped database timed is
    unchanged, so it stays the library's. A database built before the part lacks only probes
    of the triangle's functions (their routines, and the vector loads they make in every
    iteration of the loop), for `fusec perfdb build --missing` to time. One built since times
    them all: the H200's, which timed ssyr.cu and ssyr2.cu again (and the store
    triu_tile_store) after their results became one stored triangle ('stored B triu'). The
    lower triangle's part (triangle_lower.fusec) and its functions came after: the H200's
    database times them since (`--missing` again), the H100's does not (its kernels are priced
    by the analytic model until it does)."""
    database = store.load(path, library())
    assert database is not None and store.timed(database, library())
    lacking = [p for p in P.probes(library()) if p.key not in database.timings]
    if "triangle.fusec" in database.library["files"]:
        assert store.stale_routines(store.Database.from_json(path.read_text(encoding="utf-8")), library()) \
            == frozenset()
        assert {p.function for p in lacking} <= set(TRIL_FUNCTIONS)
    else:
        assert set(TRIANGLE_ROUTINES) <= {p.key.routine for p in lacking}
        assert {p.function for p in lacking} <= set(TRIANGLE_FUNCTIONS)
    if "triangle_lower.fusec" in database.library["files"]:
        assert lacking == []
    else:
        assert set(TRIL_ROUTINES) <= {p.key.routine for p in lacking}


# -- square matrices -----------------------------------------------------------------

def test_the_triangle_functions_need_a_square_matrix():
    for name, (signature, reference) in {
        "strmv": ("strmv(A: matrix[m, n], x: vector[n]) -> y: vector[m]", "triu(A) @ x"),
        "strmtv_strict": ("strmtv_strict(A: matrix[m, n], x: vector[m]) -> y: vector[n]", "triu(A, 1).T @ x"),
        "ssyr": ("ssyr(alpha: scalar, A: matrix[m, n], x: vector[n]) -> B: matrix[m, n]",
                 "triu(A + alpha * outer(x, x))"),
        "ssyr2": ("ssyr2(alpha: scalar, A: matrix[m, n], x: vector[n], y: vector[n]) -> B: matrix[m, n]",
                  "triu(A + alpha * (outer(x, y) + outer(y, x)))"),
    }.items():
        f = library().functions[name]
        assert (f.signature(), f.reference, f.square) == (signature, reference, ("A",))
        assert f.dims_of(f.param("A")) == ("m", "m") and f.dim("n") == "m"


def test_a_rectangular_matrix_is_a_located_script_error():
    text = "matrix A[m, n];\nvector x[n], y[m];\ninput A, x;\ny = strmv(A, x);\nreturn y;\n"
    with pytest.raises(SizeMismatchError) as caught:
        script_dag(None, text, "rect.script", library())
    assert (caught.value.coord.line, caught.value.coord.column) == (4, 11)
    assert "argument 1 of strmv must be a square matrix, but 'A' is [m, n]" in caught.value.message


def test_a_square_matrix_of_a_later_size_is_unified():
    """A matrix declared without sizes takes them from the call: both become x's n."""
    text = "matrix A;\nvector x[n], y[n];\ninput A, x;\ny = strmv(A, x);\nreturn y;\n"
    dag = script_dag(None, text, "later.script", library())
    assert dag.value(dag.inputs[0]).dims == ("n", "n")


@pytest.mark.parametrize("line,where,phrase", [
    ("square     x", 12, "'square' names 'x', which is a vector"),
    ("square     B", 12, "'square' names 'B', which is not a parameter"),
    ("square     A A", 14, "'square' names 'A' twice"),
])
def test_a_bad_square_line_is_located(mylib, line, where, phrase):
    path = mylib / "strmv.cu"
    path.write_text(path.read_text(encoding="utf-8").replace("square     A", line), encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("strmv.cu", 5, where)
    assert phrase in caught.value.message


def test_a_square_line_without_names_is_a_format_error(mylib):
    path = mylib / "strmv.cu"
    path.write_text(path.read_text(encoding="utf-8").replace("square     A", "square"), encoding="utf-8")
    with pytest.raises(LibraryFormatError) as caught:
        load_library(mylib)
    assert _where(caught.value)[:2] == ("strmv.cu", 5) and "expected 'square MATRIX" in caught.value.message


def test_no_distributed_layout_for_a_triangle():
    from fusec.distributed import rules
    assert rules.valid_choices(library().functions["strmv"], library()) == ()


# -- triu and tril in references -----------------------------------------------------

@pytest.mark.parametrize("reference,phrase", [
    ("triu(x) @ x", "triu of a vector"),
    ("triu(A, x) @ x", "the diagonal of triu must be an integer literal"),
    ("triu(A, 1.5) @ x", "the diagonal of triu must be an integer literal"),
    ("tril(A, 0, 1) @ x", "tril takes 1 or 2 arguments"),
    ("triu(A, k=1) @ x", "keyword argument"),
    ("triu(A) @ outer(x, x)", "gives a matrix[m, m], but the result 'y' is a vector[m]"),
])
def test_bad_triangles_in_a_reference_are_located(mylib, reference, phrase):
    path = mylib / "strmv.cu"
    path.write_text(path.read_text(encoding="utf-8").replace("triu(A) @ x", reference), encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("strmv.cu", 11, 12)
    assert phrase in caught.value.message


@pytest.mark.parametrize("reference,numpy", [
    ("tril(A) @ x", lambda A, x: np.tril(A) @ x),
    ("triu(A, -1) @ x", lambda A, x: np.triu(A, -1) @ x),
    ("tril(A, -2) @ abs(x)", lambda A, x: np.tril(A, -2) @ np.abs(x)),
    ("triu(A) @ x + abs(x)", lambda A, x: np.triu(A) @ x + np.abs(x)),  # x: [n] is [m] of a square A
    ("max(triu(A), 0.1) @ sqrt(abs(x))", lambda A, x: np.maximum(np.triu(A), 0.1) @ np.sqrt(np.abs(x))),
])
def test_a_user_reference_with_triangles_is_numpys(mylib, reference, numpy):
    path = mylib / "strmv.cu"  # without its 'stored A triu': some of these read A below the diagonal
    text = path.read_text(encoding="utf-8").replace("triu(A) @ x", reference).replace("stored     A triu\n", "")
    path.write_text(text, encoding="utf-8")
    lib = load_library(mylib)
    text = SCRIPTS["trmv"].read_text(encoding="utf-8")
    dag = script_dag(None, text, "trmv.script", lib)
    rng = np.random.default_rng(7)
    A, x = rng.uniform(-0.5, 0.5, (33, 33)), rng.uniform(-0.5, 0.5, 33)
    got = oracle.evaluate(dag, lib, {"A": A, "x": x})[dag.outputs[0]]
    np.testing.assert_allclose(got, numpy(A, x), rtol=1e-13, atol=1e-15)


def _symv(A, x, cut=np.triu):
    """The symmetric matrix of A's upper triangle (its lower one, ``cut=np.tril``) times x."""
    return (cut(A) + cut(A, 1 if cut is np.triu else -1).T) @ x


def _syr(alpha, A, x, y=None, cut=np.triu):
    return cut(A + alpha * np.outer(x, x)) if y is None else cut(A + alpha * (np.outer(x, y) + np.outer(y, x)))


def _lower(a):
    return _syr(a["alpha"], a["A"], a["x"], cut=np.tril)


# each script's outputs in NumPy, and their gauges (SMVCH's: the same of the inputs' magnitudes)
NUMPY = {
    "trmv": lambda a: [np.triu(a["A"]) @ a["x"]],
    "symv": lambda a: [_symv(a["A"], a["x"])],
    "syr2": lambda a: [_syr(a["alpha"], a["A"], a["x"], a["y"])],
    "syr_symv": lambda a: [_syr(a["alpha"], a["A"], a["x"]), _symv(_syr(a["alpha"], a["A"], a["x"]), a["p"])],
    "trmv_lower": lambda a: [np.tril(a["A"]) @ a["x"]],
    "symv_lower": lambda a: [_symv(a["A"], a["x"], np.tril)],
    "syr2_lower": lambda a: [_syr(a["alpha"], a["A"], a["x"], a["y"], np.tril)],
    "syr_symv_lower": lambda a: [_lower(a), _symv(_lower(a), a["p"], np.tril)],
}


def _inputs(name: str, n: int, dtype, rng) -> dict:
    dag = _dag(name)
    out = {}
    for vid in dag.inputs:
        value = dag.value(vid)
        shape = (n,) * len(value.dims)
        out[value.name] = rng.uniform(-0.5, 0.5, shape).astype(dtype) if shape else -0.7
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", TRIANGLE_SCRIPTS)
def test_the_references_are_numpys(name, n, dtype):
    """strmv is np.triu(A) @ x, the symv script the symmetric matrix of A's upper triangle
    times x, ssyr2 np.triu(A + alpha (x y^T + y x^T)), ssyr then symv both in turn; each
    gauge is the same of the magnitudes; A's lower triangle plays no part (NaN there
    changes nothing). The same of the lower triangle for the NAME_lower scripts (np.tril;
    NaN above the diagonal)."""
    if name.startswith("syr_symv") and n > 1000:
        pytest.skip("two n x n temporaries more than syr2 at the same size: up to 1000 suffices")
    inputs = _inputs(name, n, dtype, np.random.default_rng(n))
    wide = {k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    dag = _dag(name)
    expected = oracle.expect(dag, library(), inputs)
    gauged = {k: np.abs(v) for k, v in wide.items()}
    for out, want, gauge in zip(dag.outputs, NUMPY[name](wide), NUMPY[name](gauged), strict=True):
        np.testing.assert_allclose(expected.reference[out], want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(expected.gauge[out], gauge, rtol=1e-12, atol=1e-14)
    if n > 1:
        poisoned = dict(inputs, A=inputs["A"].copy())
        poisoned["A"][unstored(name, n)] = np.nan
        values = oracle.evaluate(dag, library(), poisoned)
        assert not any(np.isnan(values[out]).any() for out in dag.outputs)


def test_the_references_at_a_size_past_the_l2():
    rng = np.random.default_rng(LARGE)
    A = rng.uniform(-0.5, 0.5, (LARGE, LARGE)).astype(np.float32)
    x = rng.uniform(-0.5, 0.5, LARGE).astype(np.float32)
    for name in ("trmv", "symv"):
        dag = _dag(name)
        got = oracle.evaluate(dag, library(), {"A": A, "x": x})[dag.outputs[0]]
        A64 = A.astype(np.float64)
        want = np.triu(A64) @ x if name == "trmv" else _symv(A64, x.astype(np.float64))
        del A64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_symv_oracle_fails_a_wrong_answer():
    """gemv of the stored matrix (its lower triangle not symmetric) is not symv."""
    rng = np.random.default_rng(3)
    n = 100
    A, x = rng.uniform(-0.5, 0.5, (n, n)), rng.uniform(-0.5, 0.5, n)
    dag = _dag("symv")
    [right] = oracle.check_outputs(dag, library(), {"A": A, "x": x}, {"y": _symv(A, x).astype(np.float32)},
                                   np.float32)
    [wrong] = oracle.check_outputs(dag, library(), {"A": A, "x": x}, {"y": (A @ x).astype(np.float32)},
                                   np.float32)
    assert right.passed and not wrong.passed


# -- the space, the plan, the code ---------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,suffix", [("symv", ""), ("symv_lower", "_lower")])
def test_the_space_fuses_symvs_two_products(name, suffix, dtype):
    """The first choice runs strmv and strmtv_strict in one kernel, which loads the triangle
    once (one load of A, one of x, in their shared_x implementations), then svadd; the same
    of the lower triangle's strmv_lower and strmtv_strict_lower."""
    dag = _dag(name)
    best = build_space(dag, library(), dtype, {"n": 8192}, DEFAULT).best().plan
    assert len(best.kernels) == 2
    products = [k for k in best.kernels if len(k.calls) == 2]
    assert len(products) == 1
    (kernel,) = products
    assert {dag.call(c).function for c in kernel.calls} == {"strmv" + suffix, "strmtv_strict" + suffix}
    assert set(kernel.implementations) == {"shared_x"}
    loaded = [dag.value(dict(array_args(dag, library(), s.call))[s.param]).name
              for s in kernel.steps if s.kind.value == "load"]
    assert sorted(loaded) == ["A", "x"]  # once each


@pytest.mark.parametrize("name,suffix", [("syr_symv", ""), ("syr_symv_lower", "_lower")])
def test_the_space_fuses_ssyr_with_the_products_of_its_result(name, suffix):
    """B = ssyr(alpha, A, x) and symv of B: one kernel reads A's triangle, keeps B on chip
    for both products (B is returned, so it is stored once), then svadd; the same of the
    lower triangle's functions."""
    dag = _dag(name)
    best = build_space(dag, library(), "float32", {"n": 8192}, DEFAULT).best().plan
    assert len(best.kernels) == 2
    (nested,) = [k for k in best.kernels if len(k.calls) == 3]
    assert {dag.call(c).function for c in nested.calls} == {f + suffix for f in ("ssyr", "strmv", "strmtv_strict")}
    loaded = [dag.value(dict(array_args(dag, library(), s.call))[s.param]).name
              for s in nested.steps if s.kind.value == "load"]
    assert sorted(loaded) == ["A", "p", "x"]


def test_fusec_space_shows_the_fused_kernel(capsys):
    from fusec import cli
    code = cli.main(["space", str(SCRIPTS["symv"]), "--library", str(LIBRARY), "--size", "n=8192",
                     "--gpu", "h100-80gb-hbm3"])
    out = capsys.readouterr().out
    assert code == 0
    first = next(line for line in out.splitlines() if line.strip().startswith("1 "))
    assert "y1=strmv(shared_x)+y2=strmtv_strict(shared_x)" in first and " 2 " in first


def _programs():
    for name in TRIANGLE_SCRIPTS:
        dag = _dag(name)
        text = SCRIPTS[name].read_text(encoding="utf-8")
        for dtype in DTYPES:
            best = build_space(dag, library(), dtype, {"n": 8192}, DEFAULT).best().plan
            for plan in (best, unfused_plan(dag, library())):
                yield name, dtype, fusec.compile(source=text, name=f"{name}.script", dtype=dtype, plan=plan)


def _loads_before_the_loop(source: str) -> list[str]:
    """Loads from global memory (``ROUTINE(g_...``) that a kernel issues before its serial loop."""
    found = []
    for body in source.split("__global__")[1:]:
        loop = body.find("for (int it = 0;")
        head = body if loop < 0 else body[:loop]
        found += re.findall(r"(\w+_load)\(g_", head)
    return found


@pytest.mark.parametrize("name", TRIANGLE_SCRIPTS)
def test_no_kernel_on_a_triangle_holds_a_vector_before_its_loop(name):
    """symv's x is one shared element holding its piece along the columns and along the
    rows, and ssyr reads its x along both: a vector read by a function of a square matrix is
    loaded in every iteration of the serial loop, whichever axis that walks, in every layout
    of the space (both serial axes, several iterations)."""
    from fusec.emit.program import generate
    dag = _dag(name)
    space = build_space(dag, library(), "float32", {"n": 4097}, DEFAULT)
    walks = set()
    for combination in space.layouts(400):
        tiles = [k for k in combination.plan.kernels if k.family == "tile"]
        if not any(k.shape.iters > 1 for k in tiles):
            continue
        walks |= {(k.serial, k.shape.iters > 1) for k in tiles}
        source = generate(dag, library(), combination.plan, "float32").source
        assert _loads_before_the_loop(source) == [], combination.plan
    assert {("rows", True), ("cols", True)} <= walks


def test_a_plain_matrix_kernel_still_holds_its_vector_before_the_loop():
    """The rule is the triangle's: sgemv walking the rows holds x (along the columns) before."""
    from fusec.emit.program import generate
    text = "matrix A[m, n];\nvector x[n], y[m];\ninput A, x;\ny = sgemv(A, x);\nreturn y;\n"
    dag = script_dag(None, text, "gemv.script", library())
    space = build_space(dag, library(), "float32", {"m": 4096, "n": 4096}, DEFAULT)
    plan = next(c.plan for c in space.layouts(400) if c.plan.kernels[0].family == "tile"
                and c.plan.kernels[0].serial == "rows" and c.plan.kernels[0].shape.iters > 1)
    assert _loads_before_the_loop(generate(dag, library(), plan, "float32").source) == ["cols_load"]


@pytest.mark.nvcc
def test_the_generated_code_compiles_with_nvcc():
    from fusec import nvcc
    programs = list(_programs())
    compiled = nvcc.compile_many([p.generated.source for _, _, p in programs], "sm_90")
    for (name, dtype, program), cubin in zip(programs, compiled):
        assert set(cubin.resources) == {f for k in program.generated.kernels for f in k.function_names}, (name, dtype)
        # no spills, but for ptxas's own trade at 64 registers (four 256-thread blocks an SM): with the
        # sums apart, trmv_lower's fp64 kernel and syr_symv_lower's fused fp32 one (77 registers, three
        # blocks, with the last block's sums) keep 64 and spill one register; the sums never spill
        assert all(r.spill_stores == 0 or (r.registers == 64 and r.spill_stores <= 4)
                   for r in cubin.resources.values()), (name, dtype)
        assert all(r.spill_stores == 0 for f, r in cubin.resources.items() if f.endswith("_sums")), (name, dtype)


def test_probes_cover_the_triangle_routines():
    """`fusec perfdb build` probes every routine of the triangle part in both precisions
    (on a square matrix: the probe script sizes strmv's A [m, m])."""
    keys = {(p.key.routine, p.key.dtype) for p in P.probes(library())}
    assert {(r, d) for r in TRIANGLE_ROUTINES for d in DTYPES} <= keys


@pytest.mark.nvcc
def test_the_probes_of_the_triangle_routines_compile():
    from fusec import nvcc
    mine = [p for p in P.probes(library(), ("float32",)) if p.key.routine in TRIANGLE_ROUTINES]
    sources = [source for source, _ in P.modules(library(), mine)]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        assert compiled.resources and all(r.spill_stores == 0 for r in compiled.resources.values())


# -- the routines themselves, on the host --------------------------------------------

HOST = ROOT / "tests" / "data" / "triangle_host.cpp"
# (real, TILE_ROWS, BLOCK_Y): tiles of the space's shapes, 1 to 16 rows per thread
HOST_SHAPES = [("float", 64, 8), ("float", 16, 4), ("double", 128, 4), ("double", 32, 8)]


def _host_build(blas: Path, real: str, rows: int, block_y: int, out: Path, source: Path = HOST) -> Path:
    import subprocess
    exe = out / f"{source.stem}_{real}_{rows}_{block_y}"
    subprocess.run(["g++", "-std=c++17", "-O1", "-Wno-unknown-pragmas", f"-DREAL={real}", f"-DTILE_ROWS={rows}",
                    f"-DBLOCK_Y={block_y}", "-I", str(blas), str(source), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    return exe


def _host_run(exe: Path, n: int, aligned: bool):
    import subprocess
    return subprocess.run([str(exe), str(n), str(int(aligned))], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("real,rows,block_y", HOST_SHAPES)
def test_the_triangle_routines_on_the_host(tmp_path, real, rows, block_y):
    """triangle.cuh's routines, ssyr's and ssyr2's, run thread by thread on the host over an
    n x n matrix whose lower triangle is NaN: strmv and strmtv_strict (both implementations),
    ssyr and ssyr2 equal double sums on and above the diagonal and write nothing below it
    (triu_tile_store: B starts NaN and stays so there); every value on or above the diagonal is
    loaded once and no 16-byte piece wholly below it is loaded (about half of A), with aligned
    rows, rows off 16 bytes (n % VEC != 0) and a matrix off 16 bytes."""
    exe = _host_build(LIBRARY, real, rows, block_y, tmp_path)
    for n in (1, 2, 31, 33, 257, 260):
        for aligned in (True, False):
            run = _host_run(exe, n, aligned)
            assert run.returncode == 0 and run.stdout.startswith("ok"), (n, aligned, run.stdout, run.stderr)
    run = _host_run(exe, 1000, True)
    read, total = (int(w) for w in re.match(r"ok (\d+) of (\d+)", run.stdout).groups())
    assert read == sum(1000 - (r // (16 // (4 if real == "float" else 8))) * (16 // (4 if real == "float" else 8))
                       for r in range(1000)) and read < 0.51 * total


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("edit,phrase", [
    (("if (row < c.rows && col + VEC - 1 >= row) {", "if (row < c.rows) {"), "read below the diagonal"),
    (("if (col + j < row) a[k * VEC + j] = real(0);", "if (false) a[k * VEC + j] = real(0);"),
     "strmv (registers)"),
    (("return c.row0 + TILE_ROWS - 1 <= c.col0;", "return c.row0 <= c.col0;"), "read below the diagonal"),
    (("if (row < col + v) y[v] += a[k * VEC + v] * x[k];", "y[v] += a[k * VEC + v] * x[k];"),
     "strmtv_strict (registers)"),
    (("for (int t = c.ty * BLOCK_X + c.tx; t < TILE_COLS + TILE_ROWS; t += BLOCK)",
      "for (int t = c.ty * BLOCK_X + c.tx; t < TILE_COLS; t += BLOCK)"), "strmtv_strict (shared_x)"),
    (("if (col + j >= row && col + j < c.cols) p[col + j]", "if (col + j < c.cols) p[col + j]"),
     "ssyr wrote below the diagonal"),
    (("if (triu_tile_below(c)) return;\n  if (triu_tile_above(c)) {", "if (true) {"),
     "ssyr2 wrote below the diagonal"),
    (("if (col >= row) {\n      store_values", "if (col + VEC - 1 >= row) {\n      store_values"),
     "ssyr wrote below the diagonal"),
])
def test_the_host_run_finds_a_broken_routine(tmp_path, edit, phrase):
    """The host run is no formality: each of these edits of triangle.cuh or triangle_store.cuh
    (a store that writes below the diagonal) fails it."""
    blas = tmp_path / "blas"
    shutil.copytree(LIBRARY, blas, ignore=shutil.ignore_patterns("tunings"))
    file = next(blas / name for name in ("triangle.cuh", "triangle_store.cuh")
                if edit[0] in (blas / name).read_text(encoding="utf-8"))
    text = file.read_text(encoding="utf-8")
    file.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")
    exe = _host_build(blas, "float", 64, 8, tmp_path)
    run = _host_run(exe, 257, True)
    assert run.returncode == 1 and f"failed: {phrase} (" in run.stdout, run.stdout


HOST_LOWER = ROOT / "tests" / "data" / "triangle_lower_host.cpp"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("real,rows,block_y", HOST_SHAPES)
def test_the_lower_triangle_routines_on_the_host(tmp_path, real, rows, block_y):
    """The same of triangle_lower.cuh's routines, ssyr_lower's and ssyr2_lower's, over a
    matrix whose upper triangle is NaN: strmv_lower and strmtv_strict_lower (both
    implementations), ssyr_lower and ssyr2_lower equal double sums on and below the diagonal
    and write nothing above it (tril_tile_store); every value on or below the diagonal is loaded
    once and no 16-byte piece wholly above it is loaded."""
    exe = _host_build(LIBRARY, real, rows, block_y, tmp_path, HOST_LOWER)
    for n in (1, 2, 31, 33, 257, 260):
        for aligned in (True, False):
            run = _host_run(exe, n, aligned)
            assert run.returncode == 0 and run.stdout.startswith("ok"), (n, aligned, run.stdout, run.stderr)
    run = _host_run(exe, 1000, True)
    read, total = (int(w) for w in re.match(r"ok (\d+) of (\d+)", run.stdout).groups())
    vec = 16 // (4 if real == "float" else 8)
    assert read == sum(min(1000, (r // vec + 1) * vec) for r in range(1000)) and read < 0.51 * total


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("edit,phrase", [
    (("if (row < c.rows && col <= row) {", "if (row < c.rows) {"), "read above the diagonal"),
    (("if (col + j > row) a[k * VEC + j] = real(0);", "if (false) a[k * VEC + j] = real(0);"),
     "strmv_lower (registers)"),
    (("return c.col0 + TILE_COLS - 1 <= c.row0;", "return c.col0 <= c.row0;"), "read above the diagonal"),
    (("if (row > col + v) y[v] += a[k * VEC + v] * x[k];", "y[v] += a[k * VEC + v] * x[k];"),
     "strmtv_strict_lower (registers)"),
    (("y[v] += v < below ? a[k * VEC + v] * x : real(0);", "y[v] += v <= below ? a[k * VEC + v] * x : real(0);"),
     "strmtv_strict_lower (shared_x)"),
    (("if (col + j <= row && col + j < c.cols) p[col + j]", "if (col + j < c.cols) p[col + j]"),
     "ssyr_lower wrote above the diagonal"),
    (("if (tril_tile_above(c)) return;\n  if (tril_tile_below(c)) {", "if (true) {"),
     "ssyr2_lower wrote above the diagonal"),
])
def test_the_lower_host_run_finds_a_broken_routine(tmp_path, edit, phrase):
    """Each of these edits of triangle_lower.cuh fails the lower triangle's host run."""
    blas = tmp_path / "blas"
    shutil.copytree(LIBRARY, blas, ignore=shutil.ignore_patterns("tunings"))
    file = blas / "triangle_lower.cuh"
    text = file.read_text(encoding="utf-8")
    assert edit[0] in text
    file.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")
    exe = _host_build(blas, "float", 64, 8, tmp_path, HOST_LOWER)
    run = _host_run(exe, 257, True)
    assert run.returncode == 1 and f"failed: {phrase} (" in run.stdout, run.stdout
