"""A result of one stored triangle, without a GPU: the ``stored MATRIX triu`` lines of the
library format (ssyr and ssyr2 store B's upper triangle alone, strmv, strmtv_strict, ssyr and
ssyr2 read A's alone), each bad line a located error; the script checker's TriangleError where a
function that reads the whole matrix is passed such a result, in scripts and composites; the
oracle's comparison of the stored triangle alone; the generated code's store of it
(triu_tile_store, never tile_store); the analytic model's bytes of it; a performance database
that timed function files since changed. The routine itself on the host, writing nothing below
the diagonal: tests/test_triangle.py (test_the_triangle_routines_on_the_host). On the GPU:
tests/gpu/test_triangle.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusec import data, oracle
from fusec.api import script_dag
from fusec.cost.analytic import DEFAULT
from fusec.cost.model import traffic
from fusec.cost.perfdb import store
from fusec.cost.perfdb.store import PerfdbWarning
from fusec.emit.program import generate
from fusec.errors import KindError, LibraryFormatError, LibraryValidationError, TriangleError
from fusec.library.loader import load_library
from fusec.library.reference import reads_one_triangle
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import LIBRARY, ROOT, library

TRIANGLE = ROOT / "scripts" / "triangle"
# the scripts below declare more than each uses (unused names warn)
pytestmark = pytest.mark.filterwarnings("ignore::fusec.errors.ScriptWarning")


@pytest.fixture
def mylib(tmp_path) -> Path:
    """A copy of the bundled library to edit (its tunings left out)."""
    folder = tmp_path / "lib"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns("tunings"))
    return folder


def _where(exc) -> tuple[str, int, int]:
    return Path(exc.coord.file).name, exc.coord.line, exc.coord.column


def _dag(name: str, lib=None):
    path = TRIANGLE / f"{name}.script"
    return script_dag(None, path.read_text(encoding="utf-8"), str(path), lib or library())


# -- the library format ---------------------------------------------------------------

def test_the_bundled_functions_say_which_triangles_they_store():
    lib = library()
    assert lib.functions["ssyr"].stored == lib.functions["ssyr2"].stored == (("A", "triu"), ("B", "triu"))
    assert lib.functions["strmv"].stored == lib.functions["strmtv_strict"].stored == (("A", "triu"),)
    assert not any(f.stored for name, f in lib.functions.items()
                   if name not in ("ssyr", "ssyr2", "strmv", "strmtv_strict")
                   and not name.endswith("_lower"))


def _edit(mylib: Path, file: str, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` in a function file of ``mylib``; the line ``new`` starts on."""
    path = mylib / file
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return text[:text.index(old)].count("\n") + 1


SSYR_STORED = "stored     A triu\nstored     B triu\n"


@pytest.mark.parametrize("lines,error,column,phrase", [
    ("stored     A triu\nstored     B lower\n", LibraryValidationError, 14, "unknown triangle 'lower'"),
    ("stored     A triu\nstored     B triL\n", LibraryValidationError, 14, "or the lower one, 'tril'"),
    ("stored     A triu\nstored     B\n", LibraryFormatError, 12,
     "expected 'stored MATRIX triu' or 'stored MATRIX tril'"),
    ("stored     A triu\nstored     B triu upper\n", LibraryFormatError, 12, "expected 'stored MATRIX triu'"),
    ("stored     A triu\nstored     B tril tril\n", LibraryFormatError, 12, "expected 'stored MATRIX triu'"),
    ("stored     A triu\nstored     A triu\n", LibraryValidationError, 12, "'stored' names 'A' twice (first on line"),
    # a matrix names one triangle: the upper and the lower are not both stored
    ("stored     A triu\nstored     A tril\n", LibraryValidationError, 12,
     "'stored' names 'A' twice (first on line 6): a matrix is stored as one triangle"),
    ("stored     A triu\nstored     x triu\n", LibraryValidationError, 12, "'x', which is a vector"),
    ("stored     A triu\nstored     C triu\n", LibraryValidationError, 12,
     "'C', which is not a parameter nor the result"),
    ("stored     A triu\nstored     alpha triu\n", LibraryValidationError, 12, "'alpha', which is a scalar"),
])
def test_a_bad_stored_line_is_located(mylib, lines, error, column, phrase):
    """Each at the second line (the first, 'stored A triu', is the bundled one)."""
    first = _edit(mylib, "ssyr.cu", SSYR_STORED, lines)
    with pytest.raises(error) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("ssyr.cu", first + 1, column)
    assert phrase in caught.value.message


def test_a_stored_parameter_must_be_square(mylib):
    line = _edit(mylib, "ssyr.cu", "square     A\n", "")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("ssyr.cu", line, 12)
    assert "'stored A triu' needs A square: say 'square A' too" in caught.value.message


def test_a_stored_result_must_be_square(mylib):
    """sger's B is [m, n] of no square parameter: no triangle of it is one."""
    line = _edit(mylib, "sger.cu", "hof ", "stored     B triu\nhof ")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("sger.cu", line, 12)
    assert "needs B square: its dimensions [m, n] must be those of a 'square' matrix parameter" in caught.value.message


@pytest.mark.parametrize("file,reference", [
    ("strmv.cu", "A @ x"),             # the whole matrix
    ("strmv.cu", "triu(A, -1) @ x"),   # one diagonal below it
    ("strmtv_strict.cu", "tril(A, 0).T @ x"),
])
def test_a_stored_parameter_whose_reference_reads_below_the_diagonal_is_located(mylib, file, reference):
    """The loader evaluates the reference with NaN below the diagonal of a 'stored' parameter:
    a reference that uses any of it contradicts the line."""
    old = re.search(r"reference  (.*)\n", (mylib / file).read_text(encoding="utf-8")).group(1)
    _edit(mylib, file, f"reference  {old}\n", f"reference  {reference}\n")
    line = (mylib / file).read_text(encoding="utf-8").split("\n").index("stored     A triu") + 1
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == (file, line, 12)
    assert "reads only A's upper triangle, but its reference" in caught.value.message
    assert "depends on A below the diagonal" in caught.value.message


def test_a_reference_that_reads_one_triangle_by_any_means_is_accepted():
    lib = library()
    for name in ("ssyr", "ssyr2", "strmv", "strmtv_strict"):
        assert reads_one_triangle(lib.functions[name], "A")


# -- the script checker ---------------------------------------------------------------------

SYR_THEN = """matrix A[n, n], B[n, n], C[n, n];
vector x[n], p[n], y[n];
scalar alpha;
input alpha, A, x, p;
B = ssyr(alpha, A, x);
{call}
return {out};
"""


@pytest.mark.parametrize("call,out,column,callee", [
    ("y = sgemv(B, p);", "y", 11, "argument 1 of sgemv"),
    ("y = sgemtv(B, p);", "y", 12, "argument 1 of sgemtv"),
    ("C = smadd(A, B);", "C", 14, "argument 2 of smadd"),
    ("C = sger(B, p, x);", "C", 10, "argument 1 of sger"),
])
def test_a_whole_matrix_reader_of_a_triangle_is_a_located_error(call, out, column, callee):
    """Below the diagonal B holds whatever its array held: a function that reads the whole
    matrix would read garbage, so the script checker refuses it at the argument."""
    text = SYR_THEN.format(call=call, out=out)
    with pytest.raises(TriangleError) as caught:
        script_dag(None, text, "t.script", library())
    assert isinstance(caught.value, KindError)
    assert (caught.value.coord.line, caught.value.coord.column) == (6, column)
    message = caught.value.message
    assert f"{callee} reads the whole matrix, but 'B' holds only its upper triangle (ssyr on line 5" in message
    assert "ssymv, ssyr, ssyr2, strmtv_strict, strmv" in message


@pytest.mark.parametrize("call,out", [
    ("y = strmv(B, p);", "y"),
    ("y = ssymv(B, p);", "y"),           # a composite whose calls read one triangle
    ("C = ssyr(alpha, B, p);", "C"),
    ("C = ssyr2(alpha, B, x, p);", "C"),
    ("y = sgemv(A, p);", "y"),           # A is the caller's whole matrix
])
def test_a_reader_of_one_triangle_takes_it(call, out):
    dag = script_dag(None, SYR_THEN.format(call=call, out=out), "t.script", library())
    assert dag.outputs


def test_a_triangle_may_be_returned():
    dag = _dag("syr_symv")
    returned = [dag.value(v) for v in dag.outputs]
    assert [v.name for v in returned] == ["B", "y"]
    assert [oracle.stored_triangle(dag, library(), v) for v in dag.outputs] == ["triu", None]


def test_a_composite_that_reads_a_triangle_whole_is_a_library_error(mylib):
    (mylib / "bad.fusec").write_text(
        "composite  syrmv(alpha: scalar, A: matrix[m, n], x: vector[n]) -> y: vector[m]\n"
        "square     A\n"
        "call       B = ssyr(alpha, A, x)\n"
        "call       y = sgemv(B, x)\n", encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("bad.fusec", 4, 22)
    assert "argument 1 of sgemv reads the whole matrix, but 'B' holds only its upper triangle (made by ssyr)" \
        in caught.value.message


def test_a_composite_makes_a_triangle_as_its_last_call_does(mylib):
    (mylib / "more.fusec").write_text(
        "composite  csyr(alpha: scalar, A: matrix[m, n], x: vector[n]) -> B: matrix[m, n]\n"
        "square     A\n"
        "call       B = ssyr(alpha, A, x)\n", encoding="utf-8")
    lib = load_library(mylib)
    text = SYR_THEN.replace("B = ssyr(alpha, A, x);", "B = csyr(alpha, A, x);")
    with pytest.raises(TriangleError) as caught:
        script_dag(None, text.format(call="y = sgemv(B, p);", out="y"), "t.script", lib)
    assert (caught.value.coord.line, caught.value.coord.column) == (6, 11)
    assert script_dag(None, text.format(call="y = ssymv(B, p);", out="y"), "t.script", lib).outputs


# -- the oracle --------------------------------------------------------------------------------

def _syr2_case(n: int = 37):
    dag = _dag("syr2")
    inputs = oracle.random_inputs(dag, {"n": n}, np.float32, 5)
    expected = oracle.expect(dag, library(), inputs)
    [out] = dag.outputs
    return dag, inputs, expected.reference[out].astype(np.float32)


def test_the_oracle_compares_the_stored_triangle_alone():
    """Whatever lies below the diagonal (NaN, poison, huge values, the array's old
    contents) passes; a wrong value on or above it fails."""
    dag, inputs, right = _syr2_case()
    below = np.tril_indices(right.shape[0], -1)
    for garbage in (np.nan, 1e30, -7.0):
        computed = right.copy()
        computed[below] = garbage
        [check] = oracle.check_outputs(dag, library(), inputs, {"B": computed}, np.float32)
        assert check.passed, check
    for where in ((0, 0), (3, 20), (36, 36)):  # the first, an inner and the last value it stores
        wrong = right.copy()
        wrong[below] = np.nan
        wrong[where] += 0.01
        [check] = oracle.check_outputs(dag, library(), inputs, {"B": wrong}, np.float32)
        assert not check.passed and "ratio" in check.reason, (where, check)
    nan = right.copy()
    nan[5, 6] = np.nan
    [check] = oracle.check_outputs(dag, library(), inputs, {"B": nan}, np.float32)
    assert not check.passed and check.reason == "the output contains NaN on or above the diagonal"


def test_the_ratio_of_an_upper_triangle_over_slices():
    """test_ratio(upper=True) judges every value on or above the diagonal of a matrix larger
    than its slices (65536 values), and none below."""
    n = 300
    rng = np.random.default_rng(2)
    reference = np.triu(rng.uniform(-1, 1, (n, n)))
    gauge = np.abs(reference) + 1.0
    computed = reference.copy()
    computed[np.tril_indices(n, -1)] = np.nan
    assert oracle.test_ratio(computed, reference, gauge, np.float64, upper=True) == 0.0
    assert oracle.test_ratio(computed, reference, gauge, np.float64) == np.inf
    computed[299, 299] += 1e-10  # the last value, in the last slice
    assert oracle.test_ratio(computed, reference, gauge, np.float64, upper=True) > 1e5
    with pytest.raises(ValueError, match="only a matrix has an upper triangle"):
        oracle.test_ratio(np.ones(3), np.ones(3), np.ones(3), np.float64, upper=True)


def test_an_all_zero_stored_triangle_is_a_broken_test():
    """The reference's triangle all zeros (A = 0, alpha = 0) is a broken test, not a pass, even
    where the computed array holds values below the diagonal."""
    dag = _dag("syr2")
    n = 8
    inputs = {"alpha": 0.0, "A": np.zeros((n, n)), "x": np.ones(n), "y": np.ones(n)}
    [check] = oracle.check_outputs(dag, library(), inputs, {"B": np.tril(np.ones((n, n)), -1)}, np.float32)
    assert not check.passed and "all zeros" in check.reason


# -- the generated code -------------------------------------------------------------------------

_CALL = re.compile(r"^\s+(\w*tile_store)\(r_\w+, g_(\w+), c\);", re.M)


def _stores(source: str) -> dict[str, set[str]]:
    """The store routine each global matrix a kernel body stores goes through."""
    found: dict[str, set[str]] = {}
    for routine, value in _CALL.findall(source):
        found.setdefault(value, set()).add(routine)
    return found


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["syr2", "syr_symv"])
def test_every_plan_stores_b_through_the_triangle_store(name, dtype):
    """The unfused plan and the space's layouts (tile shapes, serial axes, fusions) store B with
    triu_tile_store, whose tile wholly below the diagonal writes nothing: no kernel stores B
    with tile_store, which writes a whole tile."""
    dag = _dag(name)
    space = build_space(dag, library(), dtype, {"n": 4097}, DEFAULT)
    plans = [unfused_plan(dag, library())] + [c.plan for c in space.layouts(40)]
    for plan in plans:
        stores = _stores(generate(dag, library(), plan, dtype).source)
        assert stores and all(routines == {"triu_tile_store"} for routines in stores.values()), (plan, stores)
        assert all(value.endswith("_B") for value in stores), stores


@pytest.mark.nvcc
def test_plans_storing_one_triangle_compile_for_sm_90():
    """The unfused plan and ten layouts of each script whose kernels store B through
    triu_tile_store (ssyr alone, ssyr2 alone, ssyr fused with symv's products), both
    precisions, under nvcc for sm_90: every kernel is built. (The first choices and the
    unfused plans also compile without spills: tests/test_triangle.py.)"""
    from fusec import nvcc
    programs = []
    for name in ("syr2", "syr_symv"):
        dag = _dag(name)
        for dtype in ("float32", "float64"):
            space = build_space(dag, library(), dtype, {"n": 4097}, DEFAULT)
            for plan in [unfused_plan(dag, library())] + [c.plan for c in space.layouts(10)]:
                programs.append(generate(dag, library(), plan, dtype))
    for program, compiled in zip(programs, nvcc.compile_many([p.source for p in programs], "sm_90")):
        assert set(compiled.resources) == {f for k in program.kernels for f in k.function_names}


def test_the_store_routine_writes_nothing_below_the_diagonal():
    """The one routine every such store goes through: a tile wholly below the diagonal
    returns before any write, a crossing tile writes values with column >= row only (the
    host run checks it value by value)."""
    text = (LIBRARY / "triangle_store.cuh").read_text(encoding="utf-8")
    body = text[text.index("void triu_tile_store"):]
    assert body.index("if (triu_tile_below(c)) return;") < body.index("tile_store(b, B, c)")
    assert "if (col + j >= row && col + j < c.cols) p[col + j] = b[k * VEC + j];" in body


# -- the analytic model ---------------------------------------------------------------------------

def test_the_analytic_model_counts_one_triangle():
    """A kernel reading and writing one triangle moves n(n+1)/2 values of each matrix, not n^2:
    syr2's kernel about half of sger's, and trmv's about half of sgemv's."""
    n = 8192
    sizes = {"n": n}
    dag = _dag("syr2")
    program = generate(dag, library(), unfused_plan(dag, library()), "float32")
    [kernel] = program.kernels
    matrices = {a.role: a.triangle for a in kernel.args if a.role in ("in", "out")
                and dag.value(a.value).kind.value == "matrix"}
    assert matrices == {"in": "triu", "out": "triu"}
    moved = traffic(kernel, dag, sizes, l2_bytes=0)
    assert moved == pytest.approx(2 * n * (n + 1) // 2 * 4, rel=0.01)
    trmv = build_space(_dag("trmv"), library(), "float32", sizes, DEFAULT).best().predicted
    sgemv_path = ROOT / "scripts" / "sgemv.script"
    sgemv_dag = script_dag(None, sgemv_path.read_text(encoding="utf-8"), str(sgemv_path), library())
    sgemv = build_space(sgemv_dag, library(), "float32", {"m": n, "n": n}, DEFAULT).best().predicted
    assert 0.45 < trmv / sgemv < 0.6


def test_a_matrix_read_whole_by_one_call_of_a_kernel_is_counted_whole():
    """syr_symv's fused kernel reads A through ssyr alone (one triangle); an input that a call
    reads whole counts whole (sgemv's A)."""
    dag = _dag("syr_symv")
    plan = build_space(dag, library(), "float32", {"n": 4097}, DEFAULT).best().plan
    program = generate(dag, library(), plan, "float32")
    flags = {dag.value(a.value).name: a.triangle for k in program.kernels for a in k.args
             if a.role in ("in", "out") and dag.value(a.value).kind.value == "matrix"}
    assert flags == {"A": "triu", "B": "triu"}
    path = ROOT / "scripts" / "sgemv.script"
    sgemv = script_dag(None, path.read_text(encoding="utf-8"), str(path), library())
    program = generate(sgemv, library(), unfused_plan(sgemv, library()), "float32")
    assert not any(a.triangle for k in program.kernels for a in k.args)


# -- performance databases --------------------------------------------------------------------------

def _database(lib) -> store.Database:
    """The shipped H100 database, as if it had timed ``lib`` as it is now."""
    database = store.Database.from_json((data.PERFDB / "h100-80gb-hbm3.json").read_text(encoding="utf-8"))
    library_record = {"name": lib.name, "hash": "0" * 16, "files": dict(lib.files)}
    return store.Database(database.device, library_record, database.fusec, database.built, database.launch,
                          database.bench_sizes, database.timings)


def test_a_database_serves_a_library_less_the_routines_of_changed_function_files(mylib, tmp_path):
    database = _database(load_library(mylib))
    path = tmp_path / "db.json"
    store.save(database, path)
    assert store.stale_routines(database, load_library(mylib)) == frozenset()
    sdot = mylib / "sdot.cu"
    sdot.write_text(sdot.read_text(encoding="utf-8") + "// edited\n", encoding="utf-8")
    edited = load_library(mylib)
    assert store.stale_routines(database, edited) == {"dot_compute"}
    served = store.load(path, edited)
    assert served is not None and store.timed(database, edited)
    assert {k.routine for k in database.timings} - {k.routine for k in served.timings} == {"dot_compute"}
    assert len(served.timings) == len([k for k in database.timings if k.routine != "dot_compute"])


@pytest.mark.parametrize("shared", ["tile.cuh", "library.fusec", "triangle.fusec", "prelude.cuh"])
def test_a_database_of_a_library_whose_shared_file_changed_is_not_used(mylib, tmp_path, shared):
    database = _database(load_library(mylib))
    path = tmp_path / "db.json"
    store.save(database, path)
    file = mylib / shared
    comment = "\n# edited\n" if shared.endswith("fusec") else "\n// edited\n"
    file.write_text(file.read_text(encoding="utf-8") + comment, encoding="utf-8")
    edited = load_library(mylib)
    assert store.stale_routines(database, edited) is None and not store.timed(database, edited)
    with pytest.warns(PerfdbWarning, match="not used"):
        assert store.load(path, edited) is None


def test_a_database_of_a_library_that_lost_a_function_is_not_used(mylib):
    database = _database(load_library(mylib))
    (mylib / "sxmay.cu").unlink()
    assert store.stale_routines(database, load_library(mylib)) is None


def test_a_numpy_out_array_keeps_its_values_below_the_diagonal():
    """NumPy results come back from a device buffer: for a result stored as one triangle only
    its values on and above the diagonal are copied into an out= array, so what it held below
    stays, as it does in an out= device array (the copy itself: the GPU tier runs the call)."""
    from fusec.runtime.program import Program, copy_triangle
    triangles = {}
    for name in ("syr2", "syr_symv", "symv"):
        dag = script_dag(ROOT / "scripts" / "triangle" / f"{name}.script", None, "<test>", library())
        program = Program(generate(dag, library(), unfused_plan(dag, library()), "float32"))
        triangles[name] = {dag.value(v).name for v in program.triangle_results}
    assert triangles == {"syr2": {"B"}, "syr_symv": {"B"}, "symv": set()}
    for rows, cols in ((1, 1), (5, 5), (3, 6), (6, 3)):
        target, source = np.full((rows, cols), 7.0), np.arange(rows * cols, dtype=float).reshape(rows, cols)
        copy_triangle(target, source, "triu")
        upper = np.triu(np.ones((rows, cols), bool))
        assert (target[upper] == source[upper]).all() and (target[~upper] == 7.0).all()


# -- the lower triangle: 'stored MATRIX tril' --------------------------------------------------

def test_the_lower_functions_say_tril():
    lib = library()
    assert lib.functions["ssyr_lower"].stored == lib.functions["ssyr2_lower"].stored == (("A", "tril"), ("B", "tril"))
    assert lib.functions["strmv_lower"].stored == lib.functions["strmtv_strict_lower"].stored == (("A", "tril"),)
    assert lib.functions["ssyr_lower"].triangle("B") == "tril" and lib.functions["ssyr_lower"].triangle("x") is None
    for name in ("ssyr_lower", "ssyr2_lower", "strmv_lower", "strmtv_strict_lower"):
        assert reads_one_triangle(lib.functions[name], "A")


@pytest.mark.parametrize("file,reference", [
    ("strmv_lower.cu", "A @ x"),             # the whole matrix
    ("strmv_lower.cu", "triu(A) @ x"),       # the other triangle
    ("strmv_lower.cu", "tril(A, 1) @ x"),    # one diagonal above it
    ("strmtv_strict_lower.cu", "triu(A, 0).T @ x"),
])
def test_a_tril_parameter_whose_reference_reads_above_the_diagonal_is_located(mylib, file, reference):
    """The loader evaluates the reference with NaN above the diagonal of a 'stored A tril'
    parameter."""
    old = re.search(r"reference  (.*)\n", (mylib / file).read_text(encoding="utf-8")).group(1)
    _edit(mylib, file, f"reference  {old}\n", f"reference  {reference}\n")
    line = (mylib / file).read_text(encoding="utf-8").split("\n").index("stored     A tril") + 1
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == (file, line, 12)
    assert "'stored A tril' says" in caught.value.message
    assert "reads only A's lower triangle, but its reference" in caught.value.message
    assert "depends on A above the diagonal" in caught.value.message


def test_a_tril_parameter_must_be_square(mylib):
    line = _edit(mylib, "ssyr_lower.cu", "square     A\n", "")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("ssyr_lower.cu", line, 12)
    assert "'stored A tril' needs A square: say 'square A' too" in caught.value.message


SYR_LOWER_THEN = SYR_THEN.replace("B = ssyr(alpha, A, x);", "B = ssyr_lower(alpha, A, x);")
LOWER_READERS = "ssymv_lower, ssyr2_lower, ssyr_lower, strmtv_strict_lower, strmv_lower"


@pytest.mark.parametrize("call,out,column,callee,reads", [
    ("y = sgemv(B, p);", "y", 11, "argument 1 of sgemv", "the whole matrix"),
    ("C = smadd(A, B);", "C", 14, "argument 2 of smadd", "the whole matrix"),
    ("y = strmv(B, p);", "y", 11, "argument 1 of strmv", "only its upper triangle"),
    ("y = ssymv(B, p);", "y", 11, "argument 1 of ssymv", "only its upper triangle"),
    ("C = ssyr(alpha, B, p);", "C", 17, "argument 2 of ssyr", "only its upper triangle"),
])
def test_a_lower_triangle_goes_to_lower_readers_alone(call, out, column, callee, reads):
    """A value of the lower triangle passed to a function reading the whole matrix, or the
    upper triangle alone: a TriangleError at the argument, naming the functions that take it."""
    with pytest.raises(TriangleError) as caught:
        script_dag(None, SYR_LOWER_THEN.format(call=call, out=out), "t.script", library())
    assert (caught.value.coord.line, caught.value.coord.column) == (6, column)
    message = caught.value.message
    assert f"{callee} reads {reads}, but 'B' holds only its lower triangle (ssyr_lower on line 5" in message
    assert "above the diagonal it holds whatever its array held" in message
    assert f"Functions that read one stored lower triangle: {LOWER_READERS}" in message


@pytest.mark.parametrize("call,out,column,callee", [
    ("y = strmv_lower(B, p);", "y", 17, "argument 1 of strmv_lower"),
    ("y = ssymv_lower(B, p);", "y", 17, "argument 1 of ssymv_lower"),
    ("C = ssyr2_lower(alpha, B, x, p);", "C", 24, "argument 2 of ssyr2_lower"),
])
def test_an_upper_triangle_goes_to_upper_readers_alone(call, out, column, callee):
    with pytest.raises(TriangleError) as caught:
        script_dag(None, SYR_THEN.format(call=call, out=out), "t.script", library())
    assert (caught.value.coord.line, caught.value.coord.column) == (6, column)
    assert f"{callee} reads only its lower triangle, but 'B' holds only its upper triangle (ssyr on line 5" \
        in caught.value.message
    assert "Functions that read one stored upper triangle: ssymv, ssyr, ssyr2, strmtv_strict, strmv" \
        in caught.value.message


@pytest.mark.parametrize("call,out", [
    ("y = strmv_lower(B, p);", "y"),
    ("y = ssymv_lower(B, p);", "y"),
    ("C = ssyr_lower(alpha, B, p);", "C"),
    ("C = ssyr2_lower(alpha, B, x, p);", "C"),
    ("y = strmv(A, p);", "y"),           # A is the caller's whole matrix: either triangle of it
])
def test_a_reader_of_the_lower_triangle_takes_it(call, out):
    assert script_dag(None, SYR_LOWER_THEN.format(call=call, out=out), "t.script", library()).outputs


def test_a_composite_that_reads_a_lower_triangle_as_upper_is_a_library_error(mylib):
    (mylib / "bad.fusec").write_text(
        "composite  syrmv(alpha: scalar, A: matrix[m, n], x: vector[n]) -> y: vector[m]\n"
        "square     A\n"
        "call       B = ssyr_lower(alpha, A, x)\n"
        "call       y = strmv(B, x)\n", encoding="utf-8")
    with pytest.raises(LibraryValidationError) as caught:
        load_library(mylib)
    assert _where(caught.value) == ("bad.fusec", 4, 22)
    assert "argument 1 of strmv reads only its upper triangle, but 'B' holds only its lower triangle" \
        " (made by ssyr_lower): above the diagonal" in caught.value.message


def test_a_composite_reading_both_triangles_of_a_parameter_reads_it_whole(mylib):
    """A parameter passed to strmv and to strmv_lower: the composite reads both triangles, so
    a value of one triangle may not go to it."""
    (mylib / "both.fusec").write_text(
        "composite  sboth(A: matrix[m, n], x: vector[n]) -> y: vector[m]\n"
        "square     A\n"
        "call       u = strmv(A, x)\n"
        "call       v = strmv_lower(A, x)\n"
        "call       y = svadd(u, v)\n", encoding="utf-8")
    lib = load_library(mylib)
    with pytest.raises(TriangleError, match="argument 1 of sboth reads the whole matrix, but 'B' holds only its upper"):
        script_dag(None, SYR_THEN.format(call="y = sboth(B, p);", out="y"), "t.script", lib)


def _syr2_lower_case(n: int = 37):
    dag = _dag("syr2_lower")
    inputs = oracle.random_inputs(dag, {"n": n}, np.float32, 5)
    expected = oracle.expect(dag, library(), inputs)
    [out] = dag.outputs
    return dag, inputs, expected.reference[out].astype(np.float32)


def test_the_oracle_compares_the_stored_lower_triangle_alone():
    """A lower result: whatever lies above the diagonal passes; a wrong value on or below it,
    or NaN there, fails."""
    dag, inputs, right = _syr2_lower_case()
    assert oracle.stored_triangle(dag, library(), dag.outputs[0]) == "tril"
    above = np.triu_indices(right.shape[0], 1)
    for garbage in (np.nan, 1e30, -7.0):
        computed = right.copy()
        computed[above] = garbage
        [check] = oracle.check_outputs(dag, library(), inputs, {"B": computed}, np.float32)
        assert check.passed, check
    for where in ((0, 0), (20, 3), (36, 36), (36, 0)):
        wrong = right.copy()
        wrong[above] = np.nan
        wrong[where] += 0.01
        [check] = oracle.check_outputs(dag, library(), inputs, {"B": wrong}, np.float32)
        assert not check.passed and "ratio" in check.reason, (where, check)
    nan = right.copy()
    nan[6, 5] = np.nan
    [check] = oracle.check_outputs(dag, library(), inputs, {"B": nan}, np.float32)
    assert not check.passed and check.reason == "the output contains NaN on or below the diagonal"


def test_the_ratio_of_a_lower_triangle_over_slices():
    n = 300
    rng = np.random.default_rng(2)
    reference = np.tril(rng.uniform(-1, 1, (n, n)))
    gauge = np.abs(reference) + 1.0
    computed = reference.copy()
    computed[np.triu_indices(n, 1)] = np.nan
    assert oracle.test_ratio(computed, reference, gauge, np.float64, triangle="tril") == 0.0
    assert oracle.test_ratio(computed, reference, gauge, np.float64, triangle="triu") == np.inf
    computed[299, 0] += 1e-10  # in the last slice
    assert oracle.test_ratio(computed, reference, gauge, np.float64, triangle="tril") > 1e5
    with pytest.raises(ValueError, match="only a matrix has a lower triangle"):
        oracle.test_ratio(np.ones(3), np.ones(3), np.ones(3), np.float64, triangle="tril")


def test_an_all_zero_stored_lower_triangle_is_a_broken_test():
    dag = _dag("syr2_lower")
    n = 8
    inputs = {"alpha": 0.0, "A": np.zeros((n, n)), "x": np.ones(n), "y": np.ones(n)}
    [check] = oracle.check_outputs(dag, library(), inputs, {"B": np.triu(np.ones((n, n)), 1)}, np.float32)
    assert not check.passed and "all zeros" in check.reason


@pytest.mark.parametrize("name", ["syr2_lower", "syr_symv_lower"])
def test_every_plan_stores_a_lower_b_through_the_lower_store(name):
    dag = _dag(name)
    space = build_space(dag, library(), "float32", {"n": 4097}, DEFAULT)
    for plan in [unfused_plan(dag, library())] + [c.plan for c in space.layouts(20)]:
        stores = _stores(generate(dag, library(), plan, "float32").source)
        assert stores and all(routines == {"tril_tile_store"} for routines in stores.values()), (plan, stores)


def test_the_analytic_model_counts_one_lower_triangle():
    """syr2_lower's kernel moves n(n+1)/2 values of A and of B; trmv_lower is priced as trmv."""
    n = 8192
    dag = _dag("syr2_lower")
    [kernel] = generate(dag, library(), unfused_plan(dag, library()), "float32").kernels
    matrices = {a.role: a.triangle for a in kernel.args if a.role in ("in", "out")
                and dag.value(a.value).kind.value == "matrix"}
    assert matrices == {"in": "tril", "out": "tril"}
    assert traffic(kernel, dag, {"n": n}, l2_bytes=0) == pytest.approx(2 * n * (n + 1) // 2 * 4, rel=0.01)
    lower = build_space(_dag("trmv_lower"), library(), "float32", {"n": n}, DEFAULT).best().predicted
    upper = build_space(_dag("trmv"), library(), "float32", {"n": n}, DEFAULT).best().predicted
    assert lower == pytest.approx(upper, rel=1e-9)


def test_a_matrix_read_as_both_triangles_by_one_kernel_is_counted_whole():
    """strmv and strmv_lower of one A in one kernel (a horizontal fusion: a part each) read all
    of it: no triangle."""
    text = ("matrix A[n, n];\nvector x[n], u[n], v[n];\ninput A, x;\nu = strmv(A, x);\nv = strmv_lower(A, x);\n"
            "return u, v;\n")
    dag = script_dag(None, text, "both.script", library())
    space = build_space(dag, library(), "float32", {"n": 4097}, DEFAULT)
    fused = [c.plan for c in space.layouts(40) if len(c.plan.kernels) == 1]
    assert fused
    program = generate(dag, library(), fused[0], "float32")
    [a] = [a for k in program.kernels for a in k.args if a.role == "in" and dag.value(a.value).name == "A"]
    assert a.triangle is None


@pytest.mark.parametrize(("gpu", "timed"), [("h200", True), ("h100-80gb-hbm3", False)])
def test_the_shipped_databases_price_the_lower_functions(gpu, timed):
    """The H200 database times the lower triangle's routines (`perfdb build --missing` after
    they came): a kernel calling them is priced from it. The H100's does not: it still serves
    the library, and such a kernel is priced by the database GPU's analytic model (a warning, no
    error), as a routine missing from a database is."""
    import warnings as _warnings

    from fusec.cost.perfdb.model import PerfdbPredictor
    from fusec.families import build_kernel
    database = store.load(data.PERFDB / f"{gpu}.json", library())
    assert database is not None
    assert any(k.routine.startswith("tril_") for k in database.timings) == timed
    predictor = PerfdbPredictor(database, library())
    for name in ("trmv_lower", "syr2_lower", "symv_lower"):
        dag = _dag(name)
        plan = unfused_plan(dag, library())
        kernel = build_kernel(dag, library(), plan.kernels[0], "float32", 0)
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            seconds = predictor.kernel_seconds(kernel, dag, {"n": 8192})
        analytic = predictor.analytic.kernel_seconds(kernel, dag, {"n": 8192})
        assert 0 < seconds < 1 and (seconds != analytic) == timed, name


def test_a_numpy_out_array_keeps_its_values_above_the_diagonal_of_a_lower_result():
    from fusec.runtime.program import Program, copy_triangle
    triangles = {}
    for name in ("syr2_lower", "syr_symv_lower", "symv_lower", "syr2"):
        dag = script_dag(ROOT / "scripts" / "triangle" / f"{name}.script", None, "<test>", library())
        program = Program(generate(dag, library(), unfused_plan(dag, library()), "float32"))
        triangles[name] = {dag.value(v).name: t for v, t in program.triangle_results.items()}
    assert triangles == {"syr2_lower": {"B": "tril"}, "syr_symv_lower": {"B": "tril"}, "symv_lower": {},
                         "syr2": {"B": "triu"}}
    for rows, cols in ((1, 1), (5, 5), (3, 6), (6, 3)):
        target, source = np.full((rows, cols), 7.0), np.arange(rows * cols, dtype=float).reshape(rows, cols)
        copy_triangle(target, source, "tril")
        lower = np.tril(np.ones((rows, cols), bool))
        assert (target[lower] == source[lower]).all() and (target[~lower] == 7.0).all()
    with pytest.raises(ValueError, match="'triu' or 'tril'"):
        copy_triangle(target, source, "upper")
