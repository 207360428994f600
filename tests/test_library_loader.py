"""The library loader (fusec/library/loader.py): the real library, the worked example of
docs/library-format.md, and every error the loader reports, each at its file:line:column.

Broken libraries are built in tmp_path from MINI, a small library written out below, so that
these tests do not move when fusec/data/blas changes. Every case edits MINI in one or two places
and names the error TYPE, the file and line, the word the caret must point at, and a key
phrase of the message. The expected column is where that word is in the edited line.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

import fusec
from fusec.errors import LibraryError, LibraryFormatError, LibraryValidationError
from fusec.library.loader import load_library
from fusec.library.model import Access, Geometry, Kind
from tests.helpers import LIBRARY, ROOT

F, V = LibraryFormatError, LibraryValidationError
README = ROOT / "docs" / "library-format.md"

BLAS_FUNCTIONS = ["sasum", "saxpby", "saxpy", "scopy", "sdot", "sgemtv", "sgemtv_a", "sgemtv_ab", "sgemv",
                  "sgemv_a", "sgemv_ab", "sger", "smadd", "snrm2", "sscal", "ssyr", "ssyr2", "ssyr2_lower",
                  "ssyr_lower", "strmtv_strict", "strmtv_strict_lower", "strmv", "strmv_lower", "svadd", "svdiv",
                  "svmul", "swaxpby", "sxmay"]


# -- a minimal library --------------------------------------------------------------

MINI = {
    "library.fusec": """\
# A small library for loader tests
library   mini
summary   enough of fusec/data/blas to exercise every check
prelude   prelude.cuh
routines  vector.cuh tile.cuh
mapping   vec        registers  VEC
mapping   partial    registers  1
mapping   tile       registers  TILE_ROWS/BLOCK_Y*VEC
mapping   rows       registers  TILE_ROWS/BLOCK_Y
mapping   cols       registers  VEC
mapping   rows_sum   registers  TILE_ROWS/BLOCK_Y
mapping   block      shared     BLOCK*VEC               # a whole chunk: thread t at t*VEC
mapping   wide       registers  ELEMENT                 # fits the vector geometry only
""",
    "prelude.cuh": """\
__device__ __forceinline__ real axpby_finish(real acc, real alpha, real beta, real y) {
  return alpha * acc + beta * y;
}
""",
    "vector.cuh": """\
__device__ void vec_load(const real* x, real* e, const fusec_chunk& c) { e[0] = x[c.i]; }
__device__ void vec_store(const real* e, real* x, const fusec_chunk& c) { x[c.i] = e[0]; }
__device__ void partial_store(const real* e, real* out, real* scratch, const fusec_chunk& c) {
  scratch[c.t] = e[0];
  BARRIER();
  if (c.t == 0) out[0] = scratch[0];
}
""",
    "tile.cuh": """\
__device__ void tile_load(const real* A, real* a, const fusec_tile& c) { a[0] = A[c.row0]; }
__device__ void tile_store(const real* a, real* A, const fusec_tile& c) { A[c.row0] = a[0]; }
__device__ void rows_load(const real* y, real* e, const fusec_tile& c) { e[0] = y[c.row0]; }
__device__ void cols_load(const real* x, real* e, const fusec_tile& c) { e[0] = x[c.col0]; }
__device__ void rows_sum_store(const real* e, real* y, const fusec_tile& c) { y[c.row0] = e[0]; }
__device__ void gemv_compute(const real* a, const real* x, real* y, const fusec_tile& c) {
  y[0] += a[0] * x[0];
}
""",
    "saxpy.cu": """\
/*@fusec
function   saxpy(alpha: scalar, x: vector[n], y: vector[n]) -> z: vector[n]
summary    z = alpha x + y
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  alpha * x + y

load       x vec_load as vec
load       y vec_load as vec
compute    axpy_compute(alpha, x:vec, y:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ void axpy_compute(real alpha, const real* x, const real* y, real* z, const fusec_chunk& c) {
  z[0] = alpha * x[0] + y[0];
}
""",
    "sdot.cu": """\
/*@fusec
function   sdot(x: vector[n], y: vector[n]) -> r: scalar
summary    r = x . y
hof        reduce(+)
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
threads    32
reference  dot(x, y)

load       x vec_load as vec
load       y vec_load as vec
compute    dot_compute(x:vec, y:vec) -> r:partial
store      r partial_store as partial scratch INSTANCES sync
@*/

__device__ void dot_compute(const real* x, const real* y, real* r, const fusec_chunk& c) {
  r[0] += x[0] * y[0];
}
""",
    "sgemv_ab.cu": """\
/*@fusec
function   sgemv_ab(alpha: scalar, A: matrix[m, n], x: vector[n], beta: scalar, y0: vector[m]) -> y: vector[m]
summary    y = alpha A x + beta y0
hof        nested reduce(+) over n
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    y0 subvector(TILE_ROWS)
element    y subvector(TILE_ROWS)
threads    BLOCK_X x BLOCK_Y
reference  alpha * (A @ x) + beta * y0
finish     axpby_finish(acc, alpha, beta, y0)

load       A tile_load as tile
load       x cols_load as cols
compute    gemv_compute(A:tile, x:cols) -> y:rows_sum
store      y rows_sum_store as rows_sum
@*/
""",
    "sger.cu": """\
/*@fusec
function   sger(A: matrix[m, n], u: vector[m], v: vector[n]) -> B: matrix[m, n]
summary    B = A + u v^T
hof        nested map
element    A tile(TILE_ROWS, TILE_COLS)
element    u subvector(TILE_ROWS)
element    v subvector(TILE_COLS)
element    B tile(TILE_ROWS, TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  A + outer(u, v)

load       A tile_load as tile
load       u rows_load as rows
load       v cols_load as cols
compute    ger_compute(A:tile, u:rows, v:cols) -> B:tile
store      B tile_store as tile
@*/

__device__ void ger_compute(const real* a, const real* u, const real* v, real* b, const fusec_tile& c) {
  b[0] = a[0] + u[0] * v[0];
}
""",
}


def write_mini(directory: Path, *edits: tuple[str, str | None, str]) -> Path:
    """MINI in ``directory`` after ``edits``: (file, old, new) replaces the one occurrence of
    ``old`` (an edit that does not match exactly once is a broken test), or writes the
    whole file when ``old`` is None."""
    directory.mkdir()
    files = dict(MINI)
    for file, old, new in edits:
        if old is None:
            files[file] = new
            continue
        assert files[file].count(old) == 1, f"{old!r} is not in {file} exactly once"
        files[file] = files[file].replace(old, new)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def load_error(library: Path) -> LibraryError:
    with pytest.raises(LibraryError) as info:
        load_library(library)
    return info.value


def test_mini_library_loads(tmp_path):
    lib = load_library(write_mini(tmp_path / "mini"))
    assert (lib.name, lib.summary) == ("mini", "enough of fusec/data/blas to exercise every check")
    assert sorted(lib.functions) == ["saxpy", "sdot", "sgemv_ab", "sger"]
    assert lib.mappings["block"].doc == "a whole chunk: thread t at t*VEC"
    store = lib.functions["sdot"].implementations[0].store
    assert (store.name, store.scratch, store.sync, store.threads) == ("partial_store", "INSTANCES", True, None)
    sgemv_ab = lib.functions["sgemv_ab"]
    assert str(sgemv_ab.hof) == "nested reduce(+) over n"
    assert sgemv_ab.finish.args == ("acc", "alpha", "beta", "y0")
    assert sgemv_ab.finish_only == ("y0",)  # read by the finish only, never loaded
    compute = lib.functions["saxpy"].implementations[0].compute
    assert compute.reads == ("alpha", Access("x", "vec"), Access("y", "vec"))


# -- every error, located -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Bad:
    id: str
    edits: tuple[tuple[str, str | None, str], ...]
    kind: type
    file: str
    line: int
    word: str  # the caret points at the nth occurrence of word in that line
    phrase: str
    nth: int = 1
    column: int | None = None  # when there is no word to point at (end of line)


def bad(id, edits, kind, file, line, word, phrase, **kw) -> pytest.param:
    edits = (edits,) if isinstance(edits[0], str) else tuple(edits)
    return pytest.param(Bad(id, edits, kind, file, line, word, phrase, **kw), id=id)


LIB = "library.fusec"
SAXPY_SIG = "saxpy(alpha: scalar, x: vector[n], y: vector[n]) -> z: vector[n]"
SAXPY_COMPUTE = "compute    axpy_compute(alpha, x:vec, y:vec) -> z:vec"
SDOT_STORE = "store      r partial_store as partial scratch INSTANCES sync"
FINISH = "finish     axpby_finish(acc, alpha, beta, y0)"

INDEX_CASES = [
    bad("index-unknown-keyword", (LIB, "prelude   prelude.cuh", "preludes  prelude.cuh"), F, LIB, 4,
        "preludes", "unknown keyword 'preludes'"),
    bad("library-two-words", (LIB, "library   mini", "library   mini extra"), F, LIB, 2, "mini",
        "expected 'library NAME'"),
    bad("library-bad-name", (LIB, "library   mini", "library   9mini"), F, LIB, 2, "9mini",
        "expected 'library NAME'"),
    bad("library-missing", (LIB, "library   mini\n", ""), F, LIB, 1, "#",
        "the library has no 'library NAME' line"),
    bad("library-twice", (LIB, "library   mini", "library   mini\nlibrary   other"), V, LIB, 3, "other",
        "'library' is given twice (first on line 2)"),
    bad("summary-twice", (LIB, "prelude   prelude.cuh", "summary   again\nprelude   prelude.cuh"), V, LIB, 4,
        "again", "'summary' is given twice"),
    bad("prelude-without-files", (LIB, "prelude   prelude.cuh", "prelude"), F, LIB, 4, "",
        "expected file names after 'prelude'", column=8),
    bad("prelude-file-missing", (LIB, "prelude   prelude.cuh", "prelude   prelude.cuh missing.cuh"), V, LIB, 4,
        "missing.cuh", "no file 'missing.cuh' in the library"),
    bad("routines-file-missing", (LIB, "vector.cuh tile.cuh", "vector.cuh tiles.cuh"), V, LIB, 5,
        "tiles.cuh", "no file 'tiles.cuh' in the library"),
    bad("file-listed-twice", (LIB, "vector.cuh tile.cuh", "vector.cuh tile.cuh vector.cuh"), V, LIB, 5,
        "vector.cuh", "'vector.cuh' is listed twice", nth=2),
    bad("mapping-fields", (LIB, "partial    registers  1", "partial    registers"), F, LIB, 7, "partial",
        "expected 'mapping NAME registers|shared SIZE'"),
    bad("mapping-bad-name", (LIB, "partial    registers  1", "9partial   registers  1"), F, LIB, 7,
        "9partial", "bad mapping name '9partial'"),
    bad("mapping-reserved-name", (LIB, "partial    registers  1", "sync       registers  1"), V, LIB, 7,
        "sync", "'sync' cannot name a mapping: it is a routine option"),
    bad("mapping-unknown-storage", (LIB, "partial    registers  1", "partial    register   1"), F, LIB, 7,
        "register", "storage must be 'registers' or 'shared', not 'register'"),
    bad("mapping-size-not-integer", (LIB, "partial    registers  1", "partial    registers  1.5"), V, LIB, 7,
        "1.5", "not an integer expression: '1.5'"),
    bad("mapping-size-unknown-macro", (LIB, "partial    registers  1", "partial    registers  WARPZ"), V, LIB, 7,
        "WARPZ", "unknown macro 'WARPZ'"),
    bad("mapping-size-not-positive", (LIB, "partial    registers  1", "partial    registers  VEC-4"), V, LIB, 7,
        "VEC-4", "'VEC-4' is not positive"),
    bad("mapping-size-division-by-zero", (LIB, "partial    registers  1", "partial    registers  VEC/0"), V,
        LIB, 7, "VEC/0", "division by zero"),
    # SIZE is C: Python literals that C has not (True, 1_0, 0o7) nor a fullwidth letter Python
    # reads as its ASCII twin, and no chain that Python's parser cannot nest (RecursionError)
    bad("mapping-size-python-true", (LIB, "partial    registers  1", "partial    registers  True"), V, LIB, 7,
        "True", "unknown macro 'True'"),
    bad("mapping-size-python-underscore", (LIB, "partial    registers  1", "partial    registers  1_0"), V, LIB, 7,
        "1_0", "'1_0' is not a C integer constant"),
    bad("mapping-size-python-octal", (LIB, "partial    registers  1", "partial    registers  0o7"), V, LIB, 7,
        "0o7", "'0o7' is not a C integer constant"),
    bad("mapping-size-fullwidth-letter", (LIB, "vec        registers  VEC", "vec        registers  \uff36EC"), V,
        LIB, 6, "\uff36EC", "not an integer expression"),
    bad("mapping-size-too-long", (LIB, "partial    registers  1", "partial    registers  " + "+".join(["1"] * 3000)),
        V, LIB, 7, "1+1", "more than 100 operators"),
    bad("mapping-twice", (LIB, "# fits the vector geometry only",
                          "# fits the vector geometry only\nmapping   vec  registers  VEC"),
        V, LIB, 14, "vec", "mapping 'vec' is declared twice"),
]

FILE_CASES = [
    bad("function-name-twice", ("zaxpy.cu", None, MINI["saxpy.cu"].replace("axpy_compute", "zaxpy_compute")),
        V, "zaxpy.cu", 2, "saxpy", "function 'saxpy' is defined twice (also in"),
    bad("routine-defined-twice", ("sdot.cu", "r[0] += x[0] * y[0];\n}\n",
                                  "r[0] += x[0] * y[0];\n}\n__device__ void vec_load(const real* x) {}\n"),
        V, "sdot.cu", 19, "vec_load", "routine 'vec_load' is defined twice (also in"),
    bad("syncthreads-in-function-file",
        ("sdot.cu", "r[0] += x[0] * y[0];", "__syncthreads(); r[0] += x[0] * y[0];"), V, "sdot.cu", 17,
        "__syncthreads", "use BARRIER() instead of __syncthreads()"),
    bad("syncthreads-in-routine-file", ("vector.cuh", "BARRIER();", "__syncthreads();"), V, "vector.cuh", 5,
        "__syncthreads", "use BARRIER() instead of __syncthreads()"),
    bad("syncthreads-in-prelude-comment", ("prelude.cuh", "__device__ __forceinline__ real axpby",
                                           "// never __syncthreads() here\n__device__ __forceinline__ real axpby"),
        V, "prelude.cuh", 1, "__syncthreads", "use BARRIER()"),
    bad("block-not-first", ("saxpy.cu", "/*@fusec", "int x; /*@fusec"), F, "saxpy.cu", 1, "/*@fusec",
        "the /*@fusec block must open the file"),
    bad("block-not-closed", ("saxpy.cu", "@*/", ""), F, "saxpy.cu", 1, "/*@fusec",
        "/*@fusec block is never closed with @*/"),
]

KEYWORD_CASES = [
    bad("unknown-keyword", ("saxpy.cu", "summary    z", "summry     z"), F, "saxpy.cu", 3, "summry",
        "unknown keyword 'summry' (expected one of function, summary, hof"),
    bad("element-no-shape", ("saxpy.cu", "element    x subvector(ELEMENT)", "element    x"), F, "saxpy.cu", 5,
        "x", "expected 'element PARAM SHAPE'"),
    bad("element-twice", ("saxpy.cu", "element    x subvector(ELEMENT)",
                          "element    x subvector(ELEMENT)\nelement    x subvector(ELEMENT)"),
        V, "saxpy.cu", 6, "x", "element of 'x' is declared twice"),
    bad("implementation-bad-name", ("saxpy.cu", "load       x vec_load as vec",
                                    "implementation fast path here\nload       x vec_load as vec"),
        F, "saxpy.cu", 11, "fast", "expected 'implementation NAME'"),
    bad("implementation-twice", ("saxpy.cu", "store      z vec_store as vec",
                                 "store      z vec_store as vec\nimplementation default"),
        V, "saxpy.cu", 15, "default", "implementation 'default' is declared twice"),
    bad("two-computes", ("saxpy.cu", SAXPY_COMPUTE, SAXPY_COMPUTE + "\n" + SAXPY_COMPUTE), V, "saxpy.cu", 14,
        "axpy_compute", "implementation 'default' has two compute routines"),
    bad("two-stores", ("saxpy.cu", "store      z vec_store as vec",
                       "store      z vec_store as vec\nstore      z vec_store as vec"),
        V, "saxpy.cu", 15, "z", "implementation 'default' has two store routines"),
    bad("key-twice", ("saxpy.cu", "hof        map", "hof        map\nhof        map"), V, "saxpy.cu", 5,
        "map", "'hof' is given twice (first on line 4)"),
    bad("function-missing", ("saxpy.cu", "function   " + SAXPY_SIG + "\n", ""), V, "saxpy.cu", 2, "summary",
        "function metadata has no 'function' line"),
    bad("hof-missing", ("saxpy.cu", "hof        map\n", ""), V, "saxpy.cu", 2, "function",
        "function metadata has no 'hof' line"),
    bad("reference-missing", ("saxpy.cu", "reference  alpha * x + y\n", ""), V, "saxpy.cu", 2, "function",
        "function metadata has no 'reference' line"),
]

SIGNATURE_CASES = [
    bad("function-format", ("saxpy.cu", SAXPY_SIG, "saxpy alpha"), F, "saxpy.cu", 2, "saxpy",
        "expected 'function NAME(PARAM: KIND[DIMS], ...) -> RESULT: KIND[DIMS]'"),
    bad("param-format", ("saxpy.cu", "x: vector[n], y", "x vector[n], y"), F, "saxpy.cu", 2, "x vector",
        "expected 'NAME: KIND[DIMS]', got 'x vector[n]'"),
    bad("result-format", ("saxpy.cu", "-> z: vector[n]", "-> z vector[n]"), F, "saxpy.cu", 2, "z vector",
        "expected 'NAME: KIND[DIMS]', got 'z vector[n]'"),
    bad("kind-unknown", ("saxpy.cu", "x: vector[n], y", "x: vectr[n], y"), F, "saxpy.cu", 2, "vectr",
        "kind must be matrix, vector or scalar, not 'vectr'"),
    bad("matrix-one-dim", ("sger.cu", "sger(A: matrix[m, n]", "sger(A: matrix[m]"), V, "sger.cu", 2, "matrix",
        "a matrix takes 2 dimension name(s), got [m]"),
    bad("scalar-with-dims", ("saxpy.cu", "alpha: scalar,", "alpha: scalar[n],"), V, "saxpy.cu", 2, "scalar",
        "a scalar takes 0 dimension name(s), got [n]"),
    bad("dim-not-a-name", ("saxpy.cu", "x: vector[n], y", "x: vector[2], y"), V, "saxpy.cu", 2, "vector[2]",
        "a vector takes 1 dimension name(s), got [2]"),
    bad("param-twice", ("saxpy.cu", "y: vector[n]) ->", "x: vector[n]) ->"), V, "saxpy.cu", 2, "x: vector",
        "parameter 'x' appears twice", nth=2),
    bad("result-named-like-param", ("saxpy.cu", "-> z: vector[n]", "-> y: vector[n]"), V, "saxpy.cu", 2,
        "y: vector", "parameter 'y' appears twice", nth=2),
    bad("no-params", ("saxpy.cu", "saxpy(alpha: scalar, x: vector[n], y: vector[n])", "saxpy()"), V,
        "saxpy.cu", 2, "saxpy", "function 'saxpy' takes no parameters"),
]

HOF_CASES = [
    bad("hof-format", ("saxpy.cu", "hof        map", "hof        mapping"), F, "saxpy.cu", 4, "mapping",
        "expected 'map', 'reduce(+)', 'nested map' or 'nested reduce(+) over DIM'"),
    bad("hof-operator", ("sdot.cu", "reduce(+)", "reduce(*)"), V, "sdot.cu", 4, "*",
        "only the '+' reduction is supported, not '*'"),
    bad("hof-operator-after-spaces", ("sgemv_ab.cu", "nested reduce(+) over n", "nested   reduce(*)  over n"),
        V, "sgemv_ab.cu", 4, "*", "only the '+' reduction is supported, not '*'"),
    bad("hof-over-on-a-map", ("saxpy.cu", "hof        map", "hof        map over n"), V, "saxpy.cu", 4, "over",
        "'over DIM' only makes sense for a nested reduce"),
    bad("hof-nested-reduce-without-over", ("sgemv_ab.cu", "nested reduce(+) over n", "nested reduce(+)"), V,
        "sgemv_ab.cu", 4, "nested", "a nested reduce needs 'over DIM'"),
    bad("hof-over-a-non-axis", ("sgemv_ab.cu", "reduce(+) over n", "reduce(+) over k"), V, "sgemv_ab.cu", 4,
        "k", "the reduction axis must be m or n, not 'k'"),
]

ELEMENT_CASES = [
    bad("element-of-non-param", ("saxpy.cu", "element    x subvector(ELEMENT)",
                                 "element    q subvector(ELEMENT)\nelement    x subvector(ELEMENT)"),
        V, "saxpy.cu", 5, "q", "'element' names 'q', which is not a parameter"),
    bad("element-wrong-vector-geometry", ("saxpy.cu", "x subvector(ELEMENT)", "x subvector(TILE_ROWS)"), V,
        "saxpy.cu", 5, "subvector", "element of x must be subvector(ELEMENT) in the vector geometry,"
        " not subvector(TILE_ROWS)"),
    bad("element-wrong-tile-vector", ("sgemv_ab.cu", "x subvector(TILE_COLS)", "x subvector(TILE_ROWS)"), V,
        "sgemv_ab.cu", 6, "subvector", "element of x must be subvector(TILE_COLS) in the tile geometry"),
    bad("element-wrong-tile", ("sger.cu", "A tile(TILE_ROWS, TILE_COLS)", "A tile(TILE_COLS, TILE_ROWS)"), V,
        "sger.cu", 5, "tile(", "element of A must be tile(TILE_ROWS,TILE_COLS) in the tile geometry"),
    bad("element-missing", ("saxpy.cu", "element    y subvector(ELEMENT)\n", ""), V, "saxpy.cu", 2,
        "y: vector", "y needs an 'element' line: 'element y subvector(ELEMENT)'"),
    bad("element-of-scalar", ("saxpy.cu", "element    x subvector(ELEMENT)",
                              "element    alpha subvector(ELEMENT)\nelement    x subvector(ELEMENT)"),
        V, "saxpy.cu", 5, "subvector", "scalar alpha has no element shape"),
    bad("threads-wrong-vector", ("saxpy.cu", "threads    32", "threads    64"), V, "saxpy.cu", 8, "64",
        "an instance of a vector function runs on 'threads 32'"),
    bad("threads-wrong-tile", ("sger.cu", "threads    BLOCK_X x BLOCK_Y", "threads    32"), V, "sger.cu", 9,
        "32", "an instance of a tile function runs on 'threads BLOCK_X x BLOCK_Y'"),
    bad("threads-missing", ("saxpy.cu", "threads    32\n", ""), V, "saxpy.cu", 2, "saxpy",
        "an instance of a vector function runs on 'threads 32'"),
    bad("threads-format", ("saxpy.cu", "threads    32", "threads    32 x"), F, "saxpy.cu", 8, "32",
        "expected 'threads N' or 'threads X x Y'"),
]

FINISH_CASES = [
    bad("finish-format", ("sgemv_ab.cu", FINISH, "finish     axpby_finish"), F, "sgemv_ab.cu", 11,
        "axpby_finish", "expected 'finish ROUTINE(acc, ARG, ...)'"),
    bad("finish-bad-argument", ("sgemv_ab.cu", "alpha, beta, y0)", "alpha, 2beta, y0)"), F, "sgemv_ab.cu", 11,
        "2beta", "bad finish argument '2beta'"),
    bad("finish-without-acc", ("sgemv_ab.cu", "(acc, alpha, beta, y0)", "(alpha, beta, y0)"), V, "sgemv_ab.cu",
        11, "alpha", "a finish routine takes 'acc', the reduced value"),
    bad("finish-on-a-map", ("saxpy.cu", "reference  alpha * x + y",
                            "reference  alpha * x + y\nfinish     axpby_finish(acc, alpha, alpha, x)"),
        V, "saxpy.cu", 10, "axpby_finish", "only a reduction has a finish routine"),
    bad("finish-routine-undefined", ("sgemv_ab.cu", "axpby_finish(", "axpby_finis("), V, "sgemv_ab.cu", 11,
        "axpby_finis", "routine 'axpby_finis' is not defined in"),
    bad("finish-argument-not-a-param", ("sgemv_ab.cu", "beta, y0)", "gamma, y0)"), V, "sgemv_ab.cu", 11,
        "gamma", "finish argument 'gamma' is not a parameter"),
    bad("finish-argument-is-the-result", ("sgemv_ab.cu", "beta, y0)", "beta, y)"), V, "sgemv_ab.cu", 11,
        "y)", "finish argument 'y' must be a scalar or a vector indexed like the result"),
    bad("finish-argument-is-a-matrix", ("sgemv_ab.cu", "beta, y0)", "beta, A)"), V, "sgemv_ab.cu", 11,
        "A)", "finish argument 'A' must be a scalar or a vector indexed like the result"),
    bad("finish-argument-other-axis", ("sgemv_ab.cu", "beta, y0)", "beta, x)"), V, "sgemv_ab.cu", 11,
        "x)", "finish argument 'x' must be a scalar or a vector indexed like the result"),
]

ROUTINE_LINES = ("load       x vec_load as vec\nload       y vec_load as vec\n" + SAXPY_COMPUTE
                 + "\nstore      z vec_store as vec\n")

ROUTINE_FORMAT_CASES = [
    bad("no-routines", ("saxpy.cu", ROUTINE_LINES, ""), V, "saxpy.cu", 2, "saxpy",
        "function 'saxpy' has no load, compute or store routines"),
    bad("implementation-without-compute", ("saxpy.cu", SAXPY_COMPUTE + "\n", ""), V, "saxpy.cu", 11,
        "x vec_load", "implementation 'default' of 'saxpy' has no compute routine"),
    bad("implementation-without-store", ("saxpy.cu", "store      z vec_store as vec\n", ""), V, "saxpy.cu",
        11, "x vec_load", "implementation 'default' of 'saxpy' has no store routine"),
    bad("compute-format", ("saxpy.cu", "y:vec) -> z:vec", "y:vec)"), F, "saxpy.cu", 13, "axpy_compute",
        "expected 'compute ROUTINE(ARG:MAPPING, SCALAR, ...) -> RESULT:MAPPING'"),
    bad("compute-bad-argument", ("saxpy.cu", "x:vec, y:vec)", "x:vec:z, y:vec)"), F, "saxpy.cu", 13,
        "x:vec:z", "bad compute argument 'x:vec:z'"),
    bad("load-format", ("saxpy.cu", "load       x vec_load as vec", "load       x vec_load vec"), F,
        "saxpy.cu", 11, "x vec_load", "expected 'load PARAM ROUTINE as MAPPING'"),
    bad("store-format", ("saxpy.cu", "store      z vec_store as vec", "store      z as vec"), F, "saxpy.cu",
        14, "z as", "expected 'store PARAM ROUTINE as MAPPING'"),
    bad("option-unknown", ("sdot.cu", "INSTANCES sync", "INSTANCES synced"), F, "sdot.cu", 13, "synced",
        "unknown routine option 'synced' (expected threads, scratch or sync)"),
    bad("option-twice", ("sdot.cu", "INSTANCES sync", "INSTANCES sync sync"), F, "sdot.cu", 13, "sync",
        "routine option 'sync' is given twice", nth=2),
    bad("option-scratch-without-size", ("sdot.cu", "scratch INSTANCES sync", "sync scratch"), F, "sdot.cu", 13,
        "scratch", "expected 'scratch EXPR'"),
    bad("option-scratch-unknown-macro", ("sdot.cu", "scratch INSTANCES", "scratch WARPZ"), V, "sdot.cu", 13,
        "WARPZ", "unknown macro 'WARPZ'"),
    bad("option-threads-without-y", ("saxpy.cu", "z vec_store as vec", "z vec_store as vec threads 32 x"), F,
        "saxpy.cu", 14, "x", "expected 'threads X x Y'"),
    bad("option-threads-not-positive", ("saxpy.cu", "z vec_store as vec", "z vec_store as vec threads 0"), V,
        "saxpy.cu", 14, "0", "'0' is not positive"),
    bad("option-threads-too-deep", ("saxpy.cu", "z vec_store as vec", "z vec_store as vec threads " + "-" * 3000 + "1"),
        V, "saxpy.cu", 14, "---", "more than 100 operators"),
    bad("option-scratch-python-false", ("sdot.cu", "scratch INSTANCES", "scratch False+1"), V, "sdot.cu", 13,
        "False", "unknown macro 'False'"),
]

ROUTINE_CASES = [
    bad("routine-undefined", ("saxpy.cu", "compute    axpy_compute(", "compute    axpy_compte("), V, "saxpy.cu",
        13, "axpy_compte", "routine 'axpy_compte' is not defined in"),
    bad("routine-of-another-function", ("sdot.cu", "compute    dot_compute(", "compute    axpy_compute("), V,
        "sdot.cu", 12, "axpy_compute", "which this function's kernels do not include"),
    bad("mapping-unknown", ("saxpy.cu", "-> z:vec", "-> z:vek"), V, "saxpy.cu", 13, "axpy_compute",
        "unknown mapping 'vek' (library.fusec and its part files declare"),
    bad("mapping-of-the-other-geometry", ("sger.cu", "u rows_load as rows", "u rows_load as wide"), V, "sger.cu",
        13, "rows_load", "mapping 'wide' does not fit the tile geometry: unknown macro 'ELEMENT'"),
    bad("threads-with-sync", ("sdot.cu", "scratch INSTANCES sync", "threads 32 scratch INSTANCES sync"), V,
        "sdot.cu", 13, "partial_store", "a 'sync' routine runs on every thread; it cannot also reduce 'threads'"),
    bad("threads-two-numbers-in-vector", ("saxpy.cu", "z vec_store as vec", "z vec_store as vec threads 32 x 2"),
        V, "saxpy.cu", 14, "vec_store", "'threads' of a vector routine takes 1 number(s)"),
    bad("threads-one-number-in-tile", ("sger.cu", "B tile_store as tile", "B tile_store as tile threads 32"), V,
        "sger.cu", 16, "tile_store", "'threads' of a tile routine takes 2 number(s)"),
    bad("threads-macro-of-the-other-geometry", ("sger.cu", "B tile_store as tile",
                                                "B tile_store as tile threads ELEMENT x 2"),
        V, "sger.cu", 16, "tile_store", "'threads' of a tile routine: unknown macro 'ELEMENT'"),
    bad("load-of-a-scalar", ("saxpy.cu", "load       x vec_load", "load       alpha vec_load"), V, "saxpy.cu",
        11, "vec_load", "'load alpha': 'alpha' is not an array input of saxpy"),
    bad("load-of-the-result", ("saxpy.cu", "load       x vec_load", "load       z vec_load"), V, "saxpy.cu", 11,
        "vec_load", "'load z': 'z' is not an array input of saxpy"),
    bad("load-twice", ("saxpy.cu", "load       y vec_load", "load       x vec_load"), V, "saxpy.cu", 12,
        "vec_load", "'x' is loaded twice"),
    bad("compute-reads-unloaded", ("saxpy.cu", "load       y vec_load as vec\n", ""), V, "saxpy.cu", 12,
        "axpy_compute", "compute reads 'y' but the implementation has no 'load y'"),
    bad("compute-mapping-on-a-scalar", ("saxpy.cu", "(alpha, x:vec", "(alpha:vec, x:vec"), V, "saxpy.cu", 13,
        "axpy_compute", "compute argument 'alpha' is not an array input"),
    bad("compute-unknown-scalar", ("saxpy.cu", "(alpha, x:vec", "(beta, x:vec"), V, "saxpy.cu", 13,
        "axpy_compute", "compute argument 'beta' needs a mapping ('beta:MAPPING') unless it is a scalar"),
    bad("compute-storage-mismatch", ("saxpy.cu", "x:vec, y:vec)", "x:block, y:vec)"), V, "saxpy.cu", 13,
        "axpy_compute", "'x' is loaded into registers but read from shared"),
    bad("compute-register-mapping-mismatch", ("saxpy.cu", "x:vec, y:vec)", "x:partial, y:vec)"), V,
        "saxpy.cu", 13, "axpy_compute", "'x' is written with mapping 'vec' and read with 'partial'"),
    bad("compute-writes-non-result", ("saxpy.cu", "-> z:vec", "-> x:vec"), V, "saxpy.cu", 13, "axpy_compute",
        "compute must write the result 'z'"),
    bad("store-of-non-result", ("saxpy.cu", "store      z vec_store", "store      x vec_store"), V, "saxpy.cu",
        14, "vec_store", "the store routine must store the result 'z'"),
    bad("store-storage-mismatch", ("saxpy.cu", "z vec_store as vec", "z vec_store as block"), V, "saxpy.cu", 14,
        "vec_store", "the result is stored from another storage than compute writes it"),
    bad("store-register-mapping-mismatch", ("saxpy.cu", "z vec_store as vec", "z vec_store as partial"), V,
        "saxpy.cu", 14, "vec_store", "'z' is written with mapping 'vec' and read with 'partial'"),
    bad("array-input-unused", ("saxpy.cu", "x:vec, y:vec)", "x:vec)"), V, "saxpy.cu", 13, "axpy_compute",
        "array input 'y' is neither read by compute nor by the finish routine"),
    bad("finish-input-loaded-but-unread", ("sgemv_ab.cu", "load       x cols_load as cols",
                                           "load       x cols_load as cols\nload       y0 rows_load as rows"),
        V, "sgemv_ab.cu", 15, "rows_load", "'y0' is loaded but compute does not read it"),
    bad("scalar-input-unused", ("saxpy.cu", "(alpha, x:vec", "(x:vec"), V, "saxpy.cu", 13, "axpy_compute",
        "scalar input 'alpha' is neither read by compute nor by the finish routine"),
]

SHAPE_CASES = [
    bad("unnested-with-a-matrix", ("saxpy.cu", "x: vector[n], y", "x: matrix[n, n], y"), V, "saxpy.cu", 2,
        "x: matrix", "an unnested function works on vectors and scalars only"),
    bad("unnested-without-a-vector", [("saxpy.cu", SAXPY_SIG, "saxpy(alpha: scalar, x: scalar) -> z: scalar"),
                                      ("saxpy.cu", "element    y subvector(ELEMENT)\n", "")],
        V, "saxpy.cu", 2, "saxpy", "an unnested function needs a vector parameter"),
    bad("unnested-lengths-differ", ("saxpy.cu", "y: vector[n])", "y: vector[k])"), V, "saxpy.cu", 2,
        "y: vector[k]", "every vector of an unnested function has the same length [n]"),
    bad("unnested-reduce-returns-a-vector", ("sdot.cu", "-> r: scalar", "-> r: vector[n]"), V, "sdot.cu", 2,
        "r: vector", "an unnested reduce returns a scalar"),
    bad("map-returns-a-scalar", ("saxpy.cu", "-> z: vector[n]", "-> z: scalar"), V, "saxpy.cu", 2, "z: scalar",
        "a map returns a vector"),
    bad("nested-without-a-matrix", ("sgemv_ab.cu", "A: matrix[m, n]", "A: vector[m]"), V, "sgemv_ab.cu", 2,
        "sgemv_ab", "a nested function needs a matrix parameter"),
    bad("nested-matrices-differ", ("sger.cu", "-> B: matrix[m, n]", "-> B: matrix[n, m]"), V, "sger.cu", 2,
        "B: matrix", "every matrix of a nested function must be [m, n]; B is [n, m]"),
    bad("nested-vector-of-neither-axis", ("sger.cu", "u: vector[m]", "u: vector[k]"), V, "sger.cu", 2,
        "u: vector", "vector u must be indexed by m or n"),
    bad("nested-reduce-returns-the-summed-axis", ("sgemv_ab.cu", "-> y: vector[m]", "-> y: vector[n]"), V,
        "sgemv_ab.cu", 2, "y: vector[n]", "a nested reduce over n returns a vector[m]"),
    bad("nested-map-returns-a-vector", ("sger.cu", "-> B: matrix[m, n]", "-> B: vector[m]"), V, "sger.cu", 2,
        "B: vector", "a nested map returns a matrix"),
    bad("result-dimension-of-no-input", [
        ("sger.cu", "sger(A: matrix[m, n], u: vector[m], v: vector[n])", "sger(u: vector[m], v: vector[m])"),
        ("sger.cu", "element    A tile(TILE_ROWS, TILE_COLS)\n", ""),
        ("sger.cu", "load       A tile_load as tile\n", "")],
        V, "sger.cu", 2, "B: matrix", "result dimension 'n' is not the size of any input"),
]

REFERENCE_CASES = [
    bad("reference-unknown-name", ("saxpy.cu", "alpha * x + y\n", "alpha * x + q\n"), V, "saxpy.cu", 9,
        "alpha * x + q", "unknown name 'q' (parameters: alpha, x, y)"),
    bad("reference-does-not-parse", ("saxpy.cu", "alpha * x + y\n", "alpha * (x + y\n"), V, "saxpy.cu", 9,
        "alpha", "does not parse"),
    bad("reference-operator-not-allowed", ("saxpy.cu", "alpha * x + y\n", "alpha * x // y\n"), V, "saxpy.cu", 9,
        "alpha", "operator '//' is not allowed (only + - * / @)"),
    bad("reference-numpy-call", ("sdot.cu", "dot(x, y)", "np.dot(x, y)"), V, "sdot.cu", 8, "np.dot",
        "call of `np.dot` is not allowed"),
    bad("reference-shapes-differ", ("sger.cu", "A + outer(u, v)", "A + u"), V, "sger.cu", 10, "A + u",
        "'+' of shapes [m, n] and [m]"),
    bad("reference-wrong-result-kind", ("sdot.cu", "dot(x, y)", "x * y"), V, "sdot.cu", 8, "x * y",
        "gives a vector[n], but the result 'r' is a scalar"),
    bad("reference-sums-in-a-map", ("saxpy.cu", "alpha * x + y\n", "sum(x) * y\n"), V, "saxpy.cu", 9, "sum",
        "the function is a map but the reference sums"),
    bad("reference-reduce-sums-nothing", ("sgemv_ab.cu", "alpha * (A @ x) + beta * y0", "beta * y0"), V,
        "sgemv_ab.cu", 10, "beta", "the function is a nested reduce(+) over n but the reference sums nothing"),
    bad("reference-sums-the-other-axis", ("sgemv_ab.cu", "alpha * (A @ x) + beta * y0", "sum(y0) * y0"), V,
        "sgemv_ab.cu", 10, "sum", "the function reduces over n but the reference sums over m"),
    # Python's parser (and the checks' recursion) give up on ~1000 nested operations: RecursionError
    bad("reference-nested-too-deep", ("saxpy.cu", "alpha * x + y\n", "-" * 3000 + "alpha * x + y\n"), V,
        "saxpy.cu", 9, "---", "nested too deep"),
    bad("reference-chain-too-long", ("saxpy.cu", "alpha * x + y\n", "alpha * x" + " + y" * 3000 + "\n"), V,
        "saxpy.cu", 9, "alpha", "nested too deep"),
    # a script reads `t = abs(x);` as a scalar expression and `matrix(...)` as a declaration
    bad("function-named-as-an-expression-function", ("saxpy.cu", SAXPY_SIG, SAXPY_SIG.replace("saxpy", "abs")), V,
        "saxpy.cu", 2, "abs", "function 'abs': a function of scalar expressions, so no script could call it"),
    bad("function-named-as-a-keyword", ("saxpy.cu", SAXPY_SIG, SAXPY_SIG.replace("saxpy", "matrix")), V,
        "saxpy.cu", 2, "matrix", "function 'matrix': a word of the script language, so no script could call it"),
]

# Composites (a part file c.fusec): numbers as the script's lexer reads them, and a bound on
# how deep composites nest and how many calls one stands for (a script's call expands them).
SAXPY_IN = "composite  c0(a: scalar, x: vector[n], y: vector[n]) -> z: vector[n]\ncall       z = saxpy({}, x, y)\n"
# c_i calls c_(i-1) once: nested i deep
CHAIN = "".join(f"composite  c{i}(a: scalar, x: vector[n], y: vector[n]) -> z: vector[n]\n"
                f"call       z = c{i - 1}(a, x, y)\n" for i in range(1, 3001))
# c_i calls c_(i-1) twice: 2^i calls of saxpy
FAN = "".join(f"composite  c{i}(a: scalar, x: vector[n], y: vector[n]) -> z: vector[n]\n"
              f"call       u = c{i - 1}(a, x, y)\ncall       z = c{i - 1}(a, u, y)\n" for i in range(1, 41))

COMPOSITE_CASES = [
    bad("composite-number-out-of-range", ("c.fusec", None, SAXPY_IN.format("1e999")), F, "c.fusec", 2, "1e999",
        "number 1e999 is out of range"),
    bad("composite-number-leading-zero", ("c.fusec", None, SAXPY_IN.format("010")), F, "c.fusec", 2, "010",
        "number 010 has a leading zero"),
    bad("composite-number-not-ascii", ("c.fusec", None, SAXPY_IN.format("\u0663")), F, "c.fusec", 2, "\u0663",
        "bad argument '\u0663': a name or a number"),
    bad("composite-nested-too-deep", ("c.fusec", None, SAXPY_IN.format("a") + CHAIN), V, "c.fusec", 2 * 100 + 2,
        "c99", "composites nest more than 100 deep"),
    bad("composite-too-many-calls", ("c.fusec", None, SAXPY_IN.format("a") + FAN), V, "c.fusec", 3 * 10,
        "c10", "stands for 1024 calls of functions, more than 1000"),
]


@pytest.mark.parametrize("case", INDEX_CASES + FILE_CASES + KEYWORD_CASES + SIGNATURE_CASES + HOF_CASES
                         + ELEMENT_CASES + FINISH_CASES + ROUTINE_FORMAT_CASES + ROUTINE_CASES + SHAPE_CASES
                         + REFERENCE_CASES + COMPOSITE_CASES)
def test_error_is_located(tmp_path, case: Bad):
    library = write_mini(tmp_path / "mini", *case.edits)
    error = load_error(library)
    assert type(error) is case.kind, error.render()
    assert case.phrase in error.message, error.render()
    assert error.coord is not None
    source = (library / case.file).read_text(encoding="utf-8").split("\n")[case.line - 1]
    column = case.column
    if column is None:
        column = -1
        for _ in range(case.nth):
            column = source.index(case.word, column + 1)
        column += 1
    assert (Path(error.coord.file), error.coord.line, error.coord.column) == \
        (library / case.file, case.line, column), error.render()
    assert error.source_line == source
    assert error.render().startswith(f"{library / case.file}:{case.line}:{column}: ")


def test_error_cases_have_unique_ids():
    ids = [case.values[0].id for case in INDEX_CASES + FILE_CASES + KEYWORD_CASES + SIGNATURE_CASES
           + HOF_CASES + ELEMENT_CASES + FINISH_CASES + ROUTINE_FORMAT_CASES + ROUTINE_CASES
           + SHAPE_CASES + REFERENCE_CASES + COMPOSITE_CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_a_listed_file_outside_the_library_is_an_error(tmp_path, where):
    """The library is its directory: its hash, its shipped tunings and a wheel cover
    only what is in it, so library.fusec names no file elsewhere."""
    outside = tmp_path / "tile.cuh"
    outside.write_text(MINI["tile.cuh"], encoding="utf-8")
    name = "../tile.cuh" if where == "relative" else str(outside)
    library = write_mini(tmp_path / "mini", (LIB, "vector.cuh tile.cuh", f"vector.cuh {name}"))
    error = load_error(library)
    assert type(error) is V and f"{name!r} is outside the library's directory" in error.message
    assert (error.coord.line, error.coord.column) == (5, error.source_line.index(name) + 1)


@pytest.mark.parametrize("name", [b"lib\xff", b"lib\nint x;"])
def test_a_library_path_that_is_not_utf8_printable_text_is_refused(tmp_path, name):
    """The generated code names its library by its path, in a comment a newline would end."""
    import os
    library = write_mini(Path(os.fsdecode(bytes(tmp_path) + b"/" + name)))
    error = load_error(library)
    assert type(error) is F and "not UTF-8 printable text" in error.message


def test_missing_directory(tmp_path):
    error = load_error(tmp_path / "nowhere")
    assert type(error) is F and error.coord is None
    assert "does not exist" in error.message and "nowhere" in error.message


def test_directory_without_library_fusec(tmp_path):
    (tmp_path / "saxpy.cu").write_text(MINI["saxpy.cu"])
    error = load_error(tmp_path)
    assert type(error) is F and error.coord is None
    assert "is not a fusec library: it has no library.fusec" in error.message


def test_file_that_is_not_utf8(tmp_path):
    library = write_mini(tmp_path / "mini")
    text = MINI["saxpy.cu"].replace("summary    z = alpha", "summary    z = \N{GREEK SMALL LETTER ALPHA}")
    (library / "saxpy.cu").write_bytes(text.encode("utf-8").replace("\N{GREEK SMALL LETTER ALPHA}".encode(),
                                                                     b"\xe9"))
    error = load_error(library)
    assert type(error) is F
    assert (Path(error.coord.file), error.coord.line, error.coord.column) == (library / "saxpy.cu", 3, 16)
    assert "library files must be UTF-8" in error.message


def test_a_cu_file_without_metadata_is_not_a_function(tmp_path):
    library = write_mini(tmp_path / "mini", ("helpers.cu", None, "// no metadata block: not a function\n"))
    assert sorted(load_library(library).functions) == ["saxpy", "sdot", "sgemv_ab", "sger"]


def test_metadata_block_may_follow_blank_lines_and_carry_comments(tmp_path):
    library = write_mini(tmp_path / "mini", ("saxpy.cu", "/*@fusec\n", "\n\n/*@fusec   # the metadata\n"),
                         ("saxpy.cu", "hof        map", "hof        map   # element-wise"))
    function = load_library(library).functions["saxpy"]
    assert str(function.hof) == "map"
    assert function.coord.line == 4  # line numbers of the file, not of the block


# -- the real library ----------------------------------------------------------------

def test_blas_library_loads():
    lib = load_library(LIBRARY)
    assert lib.name == "blas"
    assert list(lib.functions) == BLAS_FUNCTIONS
    for function in lib.functions.values():
        assert function.implementations, function.name
        assert Path(function.file).parent == LIBRARY
    assert re.fullmatch(r"[0-9a-f]{16}", lib.content_hash)


def test_content_hash_follows_the_content_not_the_place(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    shutil.copytree(LIBRARY, first)
    shutil.copytree(LIBRARY, second)
    assert load_library(first).content_hash == load_library(second).content_hash == \
        load_library(LIBRARY).content_hash
    index = second / "library.fusec"
    index.write_text(index.read_text() + "# a comment changes the hash too\n")
    assert load_library(second).content_hash != load_library(first).content_hash
    routine = first / "sdot.cu"
    routine.write_text(routine.read_text() + "// a comment at the end\n")
    assert load_library(first).content_hash != load_library(LIBRARY).content_hash


def test_files_are_hashed_one_by_one(tmp_path):
    """library.files holds a hash of each file the content hash covers (what a performance
    database records it timed): editing one function's file changes its entry alone."""
    lib = load_library(LIBRARY)
    assert set(lib.files) == {"library.fusec", "prelude.cuh", "vector.cuh", "tile.cuh", "band.cuh", "triangle.fusec",
                              "triangle.cuh", "triangle_store.fusec", "triangle_store.cuh",
                              "symv.fusec", "triangle_lower.fusec", "triangle_lower.cuh",
                              "symv_lower.fusec"} | {Path(f.file).name for f in lib.functions.values()}
    copy = tmp_path / "copy"
    shutil.copytree(LIBRARY, copy)
    routine = copy / "sdot.cu"
    routine.write_text(routine.read_text() + "// a comment at the end\n")
    edited = load_library(copy)
    assert {name for name, digest in lib.files.items() if edited.files[name] != digest} == {"sdot.cu"}


def test_a_byte_order_mark_opening_a_library_file_is_left_out(tmp_path):
    """Some editors write one first: the library reads as without it, and an error on the
    first line keeps its column (scripts already read so)."""
    copy = tmp_path / "copy"
    shutil.copytree(LIBRARY, copy)
    for name in ("library.fusec", "sdot.cu", "band.cuh"):
        (copy / name).write_bytes(b"\xef\xbb\xbf" + (copy / name).read_bytes())
    lib, bom = load_library(LIBRARY), load_library(copy)
    assert bom.functions["sdot"].implementations == lib.functions["sdot"].implementations
    assert bom.mappings == lib.mappings
    (copy / "sdot.cu").write_bytes(b"\xef\xbb\xbf/*@fusec\nfunction   sdot(x: vector[n], y: vector[n]) -> r: scalar\n"
                                   b"bogus line\n@*/\n")
    with pytest.raises(LibraryError) as e:
        load_library(copy)
    assert (e.value.coord.line, e.value.coord.column) == (3, 1) and e.value.source_line == "bogus line"
    shutil.copy(LIBRARY / "sdot.cu", copy / "sdot.cu")
    (copy / "library.fusec").write_bytes(b"\xef\xbb\xbfbogus 1\n" + (LIBRARY / "library.fusec").read_bytes())
    with pytest.raises(LibraryError) as e:
        load_library(copy)
    assert (e.value.coord.line, e.value.coord.column) == (1, 1) and e.value.source_line == "bogus 1"


def test_readme_lists_every_blas_function_with_its_signature():
    """And every composite, with the functions it calls."""
    rows = re.findall(r"^\| `(\w+)\((.*)\) -> (.*)` \| (.+?) \|", README.read_text(), re.M)
    lib = load_library(LIBRARY)
    listed = {name: (f"{name}({args}) -> {result}", hof) for name, args, result, hof in rows}
    assert sorted(listed) == sorted([*lib.functions, *lib.composites])
    for name, function in lib.functions.items():
        assert listed[name] == (function.signature(), str(function.hof)), name
    for name, composite in lib.composites.items():  # the second column: the functions it calls
        calls = ", ".join(dict.fromkeys(call.function for call in composite.calls))
        assert listed[name] == (composite.signature(), calls), name


# -- the worked example of docs/library-format.md ----------------------------------------

def readme_examples() -> dict[str, str]:
    """The fenced blocks of the README marked ``<!-- example: NAME -->``: the test runs the
    README's own text, so the two cannot drift apart."""
    found = re.findall(r"<!-- example: (\S+) -->\n```[^\n]*\n(.*?)```\n", README.read_text(), re.S)
    return dict(found)


@pytest.fixture
def example(tmp_path) -> Path:
    """fusec/data/blas copied to tmp_path/mylib with the README's sexp.cu, and softsum.script."""
    mylib = tmp_path / "mylib"
    shutil.copytree(LIBRARY, mylib)
    blocks = readme_examples()
    assert set(blocks) == {"sexp.cu", "softsum.script", "missing-routine.txt"}
    (mylib / "sexp.cu").write_text(blocks["sexp.cu"], encoding="utf-8")
    (tmp_path / "softsum.script").write_text(blocks["softsum.script"], encoding="utf-8")
    return mylib


def test_readme_example_loads(example):
    lib = load_library(example)
    assert list(lib.functions) == sorted(BLAS_FUNCTIONS + ["sexp"])
    sexp = lib.functions["sexp"]
    assert sexp.signature() == "sexp(x: vector[n]) -> z: vector[n]"
    assert (sexp.hof.geometry, sexp.hof.reduce, sexp.reference) == (Geometry.VECTOR, False, "exp(x)")
    assert [p.kind for p in sexp.params] == [Kind.VECTOR]
    (impl,) = sexp.implementations
    assert [(r.param, r.name, r.writes) for r in impl.loads] == [("x", "vec_load", Access("x", "vec"))]
    assert (impl.compute.name, impl.compute.reads, impl.compute.writes) == \
        ("exp_compute", (Access("x", "vec"),), Access("z", "vec"))
    assert (impl.store.name, impl.store.reads) == ("vec_store", (Access("z", "vec"),))


def test_readme_example_error(example):
    text = (example / "sexp.cu").read_text()
    start = text.index("__device__")
    (example / "sexp.cu").write_text(text[:start])
    error = load_error(example)
    expected = readme_examples()["missing-routine.txt"].rstrip("\n")
    assert error.render().replace(str(example), "mylib") == expected


def _fused_plan(dag, library):
    """Both calls of softsum in one kernel, in the simplest valid routine order."""
    from fusec.ir.geometry import Shape
    from fusec.ir.plan import KernelPlan, ProgramPlan
    from fusec.ir.steps import canonical_steps
    calls = tuple(c.id for c in dag.calls)
    plan = KernelPlan(calls, ("default",) * len(calls), canonical_steps(dag, library, calls),
                      Shape(Geometry.VECTOR, block=256, iters=4), None)
    return ProgramPlan((plan,))


def _unfused_plan(dag, library):
    from fusec.ir.geometry import Shape
    from fusec.ir.plan import KernelPlan, ProgramPlan
    from fusec.ir.steps import canonical_steps
    return ProgramPlan(tuple(
        KernelPlan((c.id,), ("default",), canonical_steps(dag, library, (c.id,)),
                   Shape(Geometry.VECTOR, block=256, iters=4), None) for c in dag.calls))


@pytest.mark.filterwarnings("ignore:no GPU here and none named")  # it compiles for no GPU named
def test_readme_example_compiles(example):
    program = fusec.compile(example.parent / "softsum.script", library=example)
    assert [dag_call.function for dag_call in program.dag.calls] == ["sexp", "sasum"]
    assert "void exp_compute(" in program.generated.source
    assert program.outputs == ("s",)


def test_readme_example_fuses(example):
    """sexp's result e stays in registers and never reaches global memory."""
    from fusec.frontend import load_script
    lib = load_library(example)
    dag = load_script(example.parent / "softsum.script", lib)
    program = fusec.compile(example.parent / "softsum.script", library=lib, plan=_fused_plan(dag, lib))
    (kernel,) = program.generated.kernels
    assert kernel.name == "k0_sexp_sasum"
    (source,) = program.generated.sources
    assert "real r_v1_e[VEC];  // e, mapping vec" in source
    assert "g_v1_e" not in source  # e is neither a kernel argument nor stored
    assert "BARRIER();" not in source.split("for (int it")[1].split("// after the loop")[0]
    body = [line.strip() for line in source.split("for (int it")[1].split("\n  }\n")[0].split("\n")
            if line.strip().endswith(");")]
    assert [line.split("(")[0] for line in body] == ["vec_load", "exp_compute", "asum_compute"]


def test_prelude_is_emitted_once_and_routine_files_per_kernel(example):
    from fusec.frontend import load_script
    lib = load_library(example)
    dag = load_script(example.parent / "softsum.script", lib)
    source = fusec.compile(example.parent / "softsum.script", library=lib,
                           plan=_unfused_plan(dag, lib)).generated.source
    assert source.count("void load_values(") == 1  # prelude.cuh
    assert source.count("void vec_load(") == 2  # vector.cuh, in each kernel's namespace
    assert source.count("void exp_compute(") == 1  # sexp.cu, only where sexp is called


@pytest.mark.nvcc
@pytest.mark.parametrize("shape", ["default", "fused", "unfused"])
@pytest.mark.filterwarnings("ignore:no GPU here and none named")  # it compiles for no GPU named
def test_readme_example_compiles_with_nvcc(example, shape):
    from fusec import nvcc
    from fusec.frontend import load_script
    lib = load_library(example)
    dag = load_script(example.parent / "softsum.script", lib)
    plan = {"default": None, "fused": _fused_plan, "unfused": _unfused_plan}[shape]
    for dtype in ("float32", "float64"):
        program = fusec.compile(example.parent / "softsum.script", library=lib, dtype=dtype,
                                plan=plan(dag, lib) if plan else None)
        compiled = nvcc.compile_cubin(program.generated.source, use_cache=False)
        assert set(compiled.resources) == {f for k in program.generated.kernels for f in k.function_names}
