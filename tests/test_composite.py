"""Composites, without a GPU: functions a library defines by calls of its other functions
(``composite`` in a part, docs/library-format.md "Composites"), here ssymv of
fusec/data/blas/symv.fusec. A script calling ssymv generates the code and plan of
scripts/triangle/symv.script, but for names and comments; the oracle evaluates the
expansion as NumPy's symv; every bad definition and every bad call is a located error.
Numerics on the GPU: tests/gpu/test_composite.py.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.api import script_dag
from fusec.errors import (
    ArityError,
    FusecWarning,
    KindError,
    LibraryFormatError,
    LibraryValidationError,
    NestedCallError,
    ScriptWarning,
    SizeMismatchError,
    UnknownFunctionError,
)
from fusec.library.digest import dag_files, library_digest
from fusec.library.loader import load_library
from tests.helpers import DTYPES, LIBRARY, ROOT, library

SYMV = ROOT / "scripts" / "triangle" / "symv.script"
CALL = """\
# symv as one call
matrix A[n, n];
vector x[n], y[n];
input A, x;
y = ssymv(A, x);
return y;
"""
GPUS = ("h200", "h100-80gb-hbm3")


def _dag(text: str, lib=None, name: str = "call.script"):
    return script_dag(None, text, name, lib or library())


def _where(exc) -> tuple[str, int, int]:
    return Path(exc.coord.file).name, exc.coord.line, exc.coord.column


@pytest.fixture
def mylib(tmp_path) -> Path:
    folder = tmp_path / "lib"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns("tunings"))
    return folder


# -- the bundled ssymv ------------------------------------------------------------------

def test_ssymv_is_a_composite_of_the_symv_scripts_calls():
    composite = library().composites["ssymv"]
    assert composite.signature() == "ssymv(A: matrix[m, n], x: vector[n]) -> y: vector[m]"
    assert composite.square == ("A",)
    assert [(c.target, c.function, c.args) for c in composite.calls] == [
        ("y1", "strmv", ("A", "x")), ("y2", "strmtv_strict", ("A", "x")), ("y", "svadd", ("y1", "y2"))]
    assert Path(composite.file).name == "symv.fusec"
    assert "ssymv" not in library().functions  # the compiler sees its calls only


def test_the_expansion_is_the_symv_scripts_dag():
    """Values, calls and sizes as the script writes them; the intermediates are named
    after the composite, and every call is at the script's line and says where it came from."""
    dag, script = _dag(CALL), _dag(SYMV.read_text(encoding="utf-8"), name="symv.script")
    assert [(c.function, c.args, c.result) for c in dag.calls] == [(c.function, c.args, c.result) for c in script.calls]
    assert [(v.kind, v.dims) for v in dag.values] == [(v.kind, v.dims) for v in script.values]
    assert [v.label for v in dag.values] == ["A", "x", "ssymv_y1", "ssymv_y2", "y"]
    assert {c.coord.line for c in dag.calls} == {5} and {c.via for c in dag.calls} == {("ssymv",)}
    assert dag.describe().splitlines()[0] == "call.script:5: ssymv_y1 = strmv(A, x)  (in ssymv)"


def _normalised(text: str, script: str) -> str:
    """The text without what names the script and its lines: the header's script and
    digest lines, ``FILE:LINE`` of each call, the expansion's ``(in ssymv)`` and the
    intermediates' ``ssymv_`` prefix."""
    text = re.sub(r"^// (script|library): .*$", "", text, flags=re.M)
    text = re.sub(r"^program .*$", "", text, flags=re.M)
    text = re.sub(rf"{re.escape(script)}:\d+", "FILE:LINE", text)
    return text.replace("  (in ssymv)", "").replace("ssymv_y", "y")


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", (1000, 4097))
def test_ssymv_generates_the_symv_scripts_code_and_plan(n, dtype, gpu):
    """The predicted plans (tuned plans are keyed on the script's text) of the two scripts:
    the CUDA and the plan text are the same but for the normalised names and comments; the
    library digest differs only by symv.fusec, which the ssymv script reads."""
    options = dict(dtype=dtype, sizes={"n": n}, gpu=gpu, tuned=False)
    with warnings.catch_warnings():  # a database missing a shape warns, for both alike
        warnings.simplefilter("ignore", FusecWarning)
        script = fusec.compile(source=SYMV.read_text(encoding="utf-8"), name="symv.script", **options)
        call = fusec.compile(source=CALL, name="call.script", **options)
    assert len(call.generated.kernels) == 2
    assert [k.name for k in call.generated.kernels] == [k.name for k in script.generated.kernels]
    assert _normalised(call.generated.source, "call.script") == _normalised(script.generated.source, "symv.script")
    assert _normalised(call.describe(), "call.script") == _normalised(script.describe(), "symv.script")
    assert "call.script:5  ssymv_y1 = strmv(A, x)  (in ssymv)" in call.describe()
    assert set(dag_files(library(), call.dag)) == set(dag_files(library(), script.dag)) | {"symv.fusec"}


@pytest.mark.nvcc
def test_the_ssymv_code_compiles_with_nvcc():
    from fusec import nvcc
    programs = [fusec.compile(source=CALL, name="call.script", dtype=dtype, sizes={"n": 4097}, gpu="h200",
                              tuned=False) for dtype in DTYPES]
    for program, cubin in zip(programs, nvcc.compile_many([p.generated.source for p in programs], "sm_90")):
        assert set(cubin.resources) == {f for k in program.generated.kernels for f in k.function_names}
        assert all(r.spill_stores == 0 for r in cubin.resources.values())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", (1, 2, 31, 33, 1000))
def test_the_oracle_is_numpys_symv(n, dtype):
    """The oracle evaluates the expansion: np.triu(A) @ x + np.triu(A, 1).T @ x, its gauge
    the same of |A| and |x|; A's lower triangle (NaN) plays no part."""
    dag = _dag(CALL)
    rng = np.random.default_rng(n)
    A, x = rng.uniform(-0.5, 0.5, (n, n)).astype(dtype), rng.uniform(-0.5, 0.5, n).astype(dtype)
    expected = oracle.expect(dag, library(), {"A": A, "x": x})
    (out,) = dag.outputs

    def symv(a, v):
        a, v = a.astype(np.float64), v.astype(np.float64)
        return np.triu(a) @ v + np.triu(a, 1).T @ v
    np.testing.assert_allclose(expected.reference[out], symv(A, x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(expected.gauge[out], symv(np.abs(A), np.abs(x)), rtol=1e-12, atol=1e-14)
    poisoned = A.copy()
    poisoned[np.tril_indices(n, -1)] = np.nan
    assert not np.isnan(oracle.evaluate(dag, library(), {"A": poisoned, "x": x})[out]).any()


def test_ssymv_fuses_with_a_neighbour():
    """d = y . y after ssymv: the plan fuses sdot into the kernel of svadd, which reads y on chip."""
    text = CALL.replace("vector x[n], y[n];", "vector x[n], y[n];\nscalar d;").replace(
        "return y;", "d = sdot(y, y);\nreturn y, d;")
    program = fusec.compile(source=text, name="dot.script", sizes={"n": 4097}, gpu="h200", tuned=False)
    kernels = [[program.dag.call(c).function for c in k.calls] for k in program.generated.plan.kernels]
    assert sorted(f for k in kernels for f in k) == ["sdot", "strmtv_strict", "strmv", "svadd"]
    assert ["svadd", "sdot"] in kernels


def test_the_intermediates_never_take_the_users_names():
    """A script declaring ssymv_y1 keeps it; the expansion's value is ssymv_y1_. Two calls
    give each intermediate two versions, as a name assigned twice."""
    text = """\
matrix A[n, n];
vector x[n], y[n], z[n], ssymv_y1[n];
input A, x, ssymv_y1;
y = ssymv(A, x);
z = ssymv(A, y);
z = svadd(z, ssymv_y1);
return z;
"""
    dag = _dag(text)
    labels = [dag.value(c.result).label for c in dag.calls]
    assert labels == ["ssymv_y1_", "ssymv_y2", "y", "ssymv_y1_#2", "ssymv_y2#2", "z", "z#2"]
    assert dag.value(dag.calls[-1].args[1]).name == "ssymv_y1" and dag.is_input(dag.calls[-1].args[1])


def test_an_unused_ssymv_is_one_statement_left_out():
    text = CALL.replace("vector x[n], y[n];", "vector x[n], y[n], u[n];").replace(
        "return y;", "u = ssymv(A, y);\nreturn y;")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dag = _dag(text)
    assert len(dag.calls) == 3
    messages = [str(w.message) for w in caught if isinstance(w.message, ScriptWarning)]
    assert any("1 statement that no returned value depends on (line 6) left out" in m for m in messages)


def test_the_digest_reads_the_composites_part(mylib):
    """A program using ssymv is keyed on strmv's, strmtv_strict's and svadd's files and on
    symv.fusec; editing symv.fusec changes its digest, not the symv script's."""
    files = dag_files(library(), _dag(CALL))
    assert {"symv.fusec", "strmv.cu", "strmtv_strict.cu", "svadd.cu", "triangle.fusec"} <= set(files)
    assert not {"sgemv.cu", "sdot.cu"} & set(files)
    before = load_library(mylib)
    part = mylib / "symv.fusec"
    part.write_text(part.read_text(encoding="utf-8") + "# a comment\n", encoding="utf-8")
    after = load_library(mylib)
    script = SYMV.read_text(encoding="utf-8")
    assert library_digest(after, _dag(CALL, after)) != library_digest(before, _dag(CALL, before))
    assert library_digest(after, _dag(script, after)) == library_digest(before, _dag(script, before))


# -- composites calling composites ------------------------------------------------------

NESTED = """\
composite  ssymv_norm2(A: matrix[m, n], x: vector[n]) -> r: scalar  # r = (A x) . (A x)
square     A
call       y = ssymv(A, x)
call       r = sdot(y, y)
composite  saxpy2(x: vector[n], y: vector[n]) -> z: vector[n]  # z = 2 x + y, a number argument
call       z = saxpy(2.0, x, y)
"""


def test_a_composite_calls_a_composite(mylib):
    (mylib / "more.fusec").write_text(NESTED, encoding="utf-8")
    lib = load_library(mylib)
    text = ("matrix A[n, n];\nvector x[n], z[n];\nscalar r;\ninput A, x;\nr = ssymv_norm2(A, x);\n"
            "z = saxpy2(x, x);\nreturn r, z;\n")
    dag = _dag(text, lib)
    assert [(c.function, c.via) for c in dag.calls] == [
        ("strmv", ("ssymv_norm2", "ssymv")), ("strmtv_strict", ("ssymv_norm2", "ssymv")),
        ("svadd", ("ssymv_norm2", "ssymv")), ("sdot", ("ssymv_norm2",)), ("saxpy", ("saxpy2",))]
    assert "(in ssymv in ssymv_norm2)" in dag.describe()
    assert [dag.value(c.result).label for c in dag.calls] == ["ssymv_y1", "ssymv_y2", "ssymv_norm2_y", "r", "z"]
    assert dag.calls[-1].args[0].text == "2.0"
    rng = np.random.default_rng(5)
    A, x = rng.uniform(-0.5, 0.5, (9, 9)), rng.uniform(-0.5, 0.5, 9)
    values = oracle.evaluate(dag, lib, {"A": A, "x": x})
    y = np.triu(A) @ x + np.triu(A, 1).T @ x
    np.testing.assert_allclose(values[dag.outputs[0]], y @ y, rtol=1e-13)
    np.testing.assert_allclose(values[dag.outputs[1]], 3 * x, rtol=1e-13)
    assert {"more.fusec", "symv.fusec"} <= set(dag_files(lib, dag))


# -- bad definitions --------------------------------------------------------------------

HEAD = "composite  f(A: matrix[m, n], x: vector[n]) -> y: vector[m]\nsquare     A\n"


@pytest.mark.parametrize("text, error, where, phrase", [
    (HEAD + "call       y = strmvv(A, x)\n", LibraryValidationError, 3, "unknown function 'strmvv'"),
    (HEAD + "call       y = strmv(A, x, x)\n", LibraryValidationError, 3, "strmv takes 2 arguments, 3 given"),
    (HEAD + "call       y = f(A, x)\n", LibraryValidationError, 3, "composite 'f' calls itself"),
    (HEAD + "call       y = strmv(A, q)\n", LibraryValidationError, 3, "'q' is neither a parameter"),
    (HEAD + "call       y = strmv(x, x)\n", LibraryValidationError, 3, "argument 1 of strmv must be a matrix"),
    (HEAD + "call       y = strmv(A, 1.5)\n", LibraryValidationError, 3, "must be a vector, but 1.5 is a number"),
    (HEAD + "call       y1 = strmv(A, x)\ncall       y = svadd(y1, y1)\ncall       y = svadd(y1, y1)\n",
     LibraryValidationError, 5, "'y' is assigned already (line 4)"),
    (HEAD + "call       y1 = strmv(A, x)\ncall       y2 = strmv(A, x)\ncall       y = svadd(y1, y1)\n",
     LibraryValidationError, 4, "'y2' is read by no later call"),
    (HEAD + "call       y = strmv(A, x)\ncall       z = svadd(y, y)\n", LibraryValidationError, 4,
     "its target must be 'y'"),
    (HEAD + "call       A = strmv(A, x)\n", LibraryValidationError, 3, "'A' is a parameter already"),
    ("composite  f(A: matrix[m, n], x: vector[n]) -> y: vector[m]\ncall       y = strmv(A, x)\n",
     LibraryValidationError, 2, "must be a square matrix, but 'A' is [m, n]: say 'square A'"),
    ("composite  f(A: matrix[m, n], x: vector[n], z: vector[n]) -> y: vector[m]\nsquare     A\n"
     "call       y = strmv(A, x)\n", LibraryValidationError, 1, "parameter 'z' is passed to no call"),
    ("composite  f(A: matrix[m, n], x: vector[m]) -> y: vector[m]\ncall       y = sgemv(A, x)\n",
     LibraryValidationError, 2, "size mismatch in argument 2 of sgemv: 'x' has length m, but it must have length n"),
    ("composite  f(A: matrix[m, n], x: vector[n]) -> y: vector[n]\ncall       y = sgemv(A, x)\n",
     LibraryValidationError, 2, "the result 'y' is declared with length n, but sgemv makes it with length m"),
    ("composite  f(x: vector[n]) -> r: vector[n]\ncall       r = sdot(x, x)\n",
     LibraryValidationError, 2, "sdot returns a scalar, but the result 'r' is a vector"),
    ("composite  f(x: vector[n]) -> r: vector[n]\n", LibraryValidationError, 1, "has no 'call' lines"),
    ("composite  sdot(x: vector[n]) -> r: scalar\ncall       r = sasum(x)\n", LibraryValidationError, 1,
     "composite 'sdot' has the name of a function"),
    ("composite  sqrt(x: vector[n]) -> r: scalar\ncall       r = sasum(x)\n", LibraryValidationError, 1,
     "a function of scalar expressions"),
    ("composite  input(x: vector[n]) -> r: scalar\ncall       r = sasum(x)\n", LibraryValidationError, 1,
     "'input' is a word of the script language: a composite cannot take it"),
    ("call       y = strmv(A, x)\n", LibraryFormatError, 1, "a 'call' line belongs to a composite"),
    (HEAD + "mapping    m1  registers  1\ncall       y = strmv(A, x)\n", LibraryFormatError, 4,
     "a 'call' line belongs to a composite"),
    (HEAD + "call       y strmv(A, x)\n", LibraryFormatError, 3, "expected 'call TARGET = FUNCTION(ARG, ...)'"),
    (HEAD + "call       y = strmv(A, x+1)\n", LibraryFormatError, 3, "bad argument 'x+1'"),
    (HEAD + "square     x\ncall       y = strmv(A, x)\n", LibraryValidationError, 3, "'square' is given twice"),
    ("composite  f\n", LibraryFormatError, 1, "expected 'composite NAME(PARAM: KIND[DIMS], ...)"),
    (HEAD + "call       y = strmv(A, x)\n" + HEAD + "call       y = strmv(A, x)\n", LibraryValidationError, 4,
     "composite 'f' is defined twice"),
])
def test_a_bad_composite_is_a_located_error(mylib, text, error, where, phrase):
    (mylib / "bad.fusec").write_text(text, encoding="utf-8")
    with pytest.raises(error) as info:
        load_library(mylib)
    assert type(info.value) is error
    assert _where(info.value)[:2] == ("bad.fusec", where)
    assert phrase in info.value.message
    assert str(info.value).startswith(f"{mylib / 'bad.fusec'}:{where}:")


@pytest.mark.parametrize("text, line, column", [
    ("composite  f(x: vector[n]) -> y: vector[n]\ncall       y = strmv(A, x)\n", 2, 22),
    ("composite  f(x: vector[n]) -> y: vector[n]\ncall       y = strmvv(x, x)\n", 2, 16),
    ("composite  f(x: vector[n]) -> y: vector[n]\ncall       y = svadd(x)\n", 2, 16),
])
def test_errors_point_at_the_word(mylib, text, line, column):
    (mylib / "bad.fusec").write_text(text, encoding="utf-8")
    with pytest.raises(LibraryValidationError) as info:
        load_library(mylib)
    assert _where(info.value) == ("bad.fusec", line, column)
    assert "^" in str(info.value)


def test_a_cycle_between_composites_is_located_at_the_call_closing_it(mylib):
    (mylib / "cycle.fusec").write_text(
        "composite  a(x: vector[n]) -> y: vector[n]\ncall       y = b(x)\n"
        "composite  b(x: vector[n]) -> y: vector[n]\ncall       y = c(x)\n"
        "composite  c(x: vector[n]) -> y: vector[n]\ncall       y = a(x)\n", encoding="utf-8")
    with pytest.raises(LibraryValidationError) as info:
        load_library(mylib)
    assert _where(info.value) == ("cycle.fusec", 6, 16)
    assert "composites call each other in a cycle: a -> b -> c -> a" in info.value.message


# -- bad calls in a script ---------------------------------------------------------------

@pytest.mark.parametrize("call, declarations, error, column, phrase", [
    ("y = ssymv(A);", "matrix A[n, n];\nvector x[n], y[n];", ArityError, 5,
     "ssymv takes 2 arguments, 1 given: ssymv(A: matrix[m, n], x: vector[n]) -> y: vector[m]"),
    ("y = ssymv(A, x);", "matrix A[m, n];\nvector x[n], y[m];", SizeMismatchError, 11,
     "argument 1 of ssymv must be a square matrix"),
    ("y = ssymv(A, x);", "matrix A[n, n];\nvector x[k], y[n];", SizeMismatchError, 14,
     "size mismatch in argument 2 of ssymv"),
    ("y = ssymv(x, x);", "matrix A[n, n];\nvector x[n], y[n];", KindError, 11,
     "argument 1 of ssymv must be a matrix"),
    ("y = ssymvv(A, x);", "matrix A[n, n];\nvector x[n], y[n];", UnknownFunctionError, 5, "did you mean 'ssymv'?"),
    ("s = ssymv(A, x);", "matrix A[n, n];\nvector x[n], y[n];\nscalar s;", KindError, 1,
     "ssymv returns a vector, but 's' is a scalar"),
    ("s = ssymv(A, x) + 1;", "matrix A[n, n];\nvector x[n], y[n];\nscalar s;", NestedCallError, 5,
     "ssymv is a library function"),
])
def test_a_bad_call_of_a_composite_is_located(call, declarations, error, column, phrase):
    text = f"{declarations}\ninput A, x;\n{call}\nreturn y;\n"
    line = text.split("\n").index(call) + 1
    with pytest.raises(error) as info:
        _dag(text)
    assert _where(info.value) == ("call.script", line, column)
    assert phrase in info.value.message


# -- the bundled ssymv_lower: the same of the lower triangle -------------------------------

SYMV_LOWER = ROOT / "scripts" / "triangle" / "symv_lower.script"
CALL_LOWER = CALL.replace("# symv as one call", "# symv of the lower triangle as one call").replace("ssymv(",
                                                                                                 "ssymv_lower(")


def test_ssymv_lower_is_a_composite_of_the_symv_lower_scripts_calls():
    composite = library().composites["ssymv_lower"]
    assert composite.signature() == "ssymv_lower(A: matrix[m, n], x: vector[n]) -> y: vector[m]"
    assert [c.function for c in composite.calls] == ["strmv_lower", "strmtv_strict_lower", "svadd"]
    assert Path(composite.file).name == "symv_lower.fusec"


@pytest.mark.parametrize("dtype", DTYPES)
def test_ssymv_lower_generates_the_symv_lower_scripts_code_and_plan(dtype):
    """As ssymv's, on the H200, whose database has no timings of the lower triangle's routines:
    both are priced alike, by the analytic model, and fused the same (two kernels)."""
    options = dict(dtype=dtype, sizes={"n": 4097}, gpu="h200", tuned=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FusecWarning)
        script = fusec.compile(source=SYMV_LOWER.read_text(encoding="utf-8"), name="symv_lower.script", **options)
        call = fusec.compile(source=CALL_LOWER, name="call.script", **options)
    assert len(call.generated.kernels) == 2
    normalise = lambda text, name: _normalised(text, name).replace("  (in ssymv_lower)", "").replace(  # noqa: E731
        "ssymv_lower_y", "y")
    assert normalise(call.generated.source, "call.script") == normalise(script.generated.source, "symv_lower.script")
    assert "call.script:5  ssymv_lower_y1 = strmv_lower(A, x)  (in ssymv_lower)" in call.describe()


@pytest.mark.nvcc
def test_the_ssymv_lower_code_compiles_with_nvcc():
    from fusec import nvcc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FusecWarning)
        programs = [fusec.compile(source=CALL_LOWER, name="call.script", dtype=dtype, sizes={"n": 4097},
                                  gpu="h200", tuned=False) for dtype in DTYPES]
    for program, cubin in zip(programs, nvcc.compile_many([p.generated.source for p in programs], "sm_90")):
        assert set(cubin.resources) == {f for k in program.generated.kernels for f in k.function_names}
        assert all(r.spill_stores == 0 for r in cubin.resources.values())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", (1, 2, 31, 33, 1000))
def test_the_oracle_is_numpys_lower_symv(n, dtype):
    """np.tril(A) @ x + np.tril(A, -1).T @ x; A's upper triangle (NaN) plays no part."""
    dag = _dag(CALL_LOWER)
    rng = np.random.default_rng(n)
    A, x = rng.uniform(-0.5, 0.5, (n, n)).astype(dtype), rng.uniform(-0.5, 0.5, n).astype(dtype)
    expected = oracle.expect(dag, library(), {"A": A, "x": x})
    (out,) = dag.outputs
    a, v = A.astype(np.float64), x.astype(np.float64)
    np.testing.assert_allclose(expected.reference[out], (np.tril(a) + np.tril(a, -1).T) @ v, rtol=1e-12, atol=1e-14)
    poisoned = A.copy()
    poisoned[np.triu_indices(n, 1)] = np.nan
    assert not np.isnan(oracle.evaluate(dag, library(), {"A": poisoned, "x": x})[out]).any()
