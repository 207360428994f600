"""GPU tier of composites: ``y = ssymv(A, x);`` (fusec/data/blas/symv.fusec) against the
float64 oracle, both precisions, the suite's square sizes and one past the L2, with A's lower
triangle NaN (no kernel may read it), outputs poisoned and inputs checked unchanged; and bit
for bit the program of scripts/triangle/symv.script on integer-valued inputs (the same
kernels). FUSEC_TEST_SIZES (e.g. "1,33,1000") narrows the sizes.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import fusec
from fusec import oracle
from tests.helpers import DTYPES, ROOT, compile_for_this_gpu, library

pytestmark = pytest.mark.gpu

SIZES = [int(s) for s in os.environ.get("FUSEC_TEST_SIZES", "1,2,31,32,33,1000,4097,8192").split(",")]
CALL = "matrix A[n, n];\nvector x[n], y[n];\ninput A, x;\ny = ssymv(A, x);\nreturn y;\n"
SYMV = (ROOT / "scripts" / "triangle" / "symv.script").read_text(encoding="utf-8")
_PROGRAMS: dict = {}


def program(which: str, dtype: str):
    key = (which, dtype)
    if key not in _PROGRAMS:
        text, name = (CALL, "ssymv.script") if which == "call" else (SYMV, "symv.script")
        _PROGRAMS[key] = fusec.compile(source=text, name=name, dtype=dtype, sizes={"n": 8192}, tuned=False)
    return _PROGRAMS[key]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    compile_for_this_gpu([program(which, dtype).source for which in ("call", "script") for dtype in DTYPES])


def _inputs(dag, n: int, dtype: str, seed: int, mode: str = "uniform") -> dict:
    inputs = oracle.random_inputs(dag, {"n": n}, dtype, np.random.default_rng(seed), mode=mode)
    A = inputs["A"].copy()
    A[np.tril_indices(n, -1)] = np.nan
    inputs["A"] = A
    return inputs


def _run(prog, inputs, dtype) -> np.ndarray:
    result = prog.run(inputs, poison=True)
    y = np.asarray(result.get() if hasattr(result, "get") else result)
    checks = oracle.check_outputs(prog.dag, library(), inputs, {"y": y}, dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, "; ".join(failed)
    return y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_ssymv_against_the_oracle(n, dtype):
    prog = program("call", dtype)
    inputs = _inputs(prog.dag, n, dtype, zlib.crc32(repr((n, dtype)).encode()))
    before = {k: np.copy(v) for k, v in inputs.items()}
    y = _run(prog, inputs, dtype)
    assert y.dtype == np.dtype(dtype)
    for key, array in before.items():
        np.testing.assert_array_equal(inputs[key], array, err_msg=f"input {key} was modified")


@pytest.mark.parametrize("dtype", DTYPES)
def test_ssymv_gives_the_symv_scripts_bits(dtype):
    call, script = program("call", dtype), program("script", dtype)
    assert len(call.generated.kernels) == 2
    for n in (33, 1000, 4097):
        inputs = _inputs(call.dag, n, dtype, n, "integer")
        np.testing.assert_array_equal(_run(call, inputs, dtype), _run(script, inputs, dtype), err_msg=f"n = {n}")
