"""GPU tier of the band geometry: nested calls on whole rows per block.

For every script with nested calls, in both precisions, the best-predicted
combination whose nested kernels are all band kernels (and, for ATAX and
BiCGK, one that takes two rows at a time), each with and without its loads
issued one instance ahead (KernelPlan.ahead), is built for each size and judged
by the float64 oracle there: whole rows of exactly BAND_COLS columns, ragged
rows and columns, a few columns, one row. Outputs and fusec's buffers are
poisoned; the program runs three times (the column sums' accumulator and
counter must be cleared by each launch's last block). ATAX runs in one pass
over A (its two calls in one band kernel).

FUSEC_BAND_QUICK=1 keeps float32, for runs under compute-sanitizer::

    FUSEC_LINEINFO=1 FUSEC_BAND_QUICK=1 compute-sanitizer --tool memcheck \\
        --error-exitcode 1 python -m pytest -q -x tests/gpu/test_band.py
"""

from __future__ import annotations

import gc
import os
import zlib

import numpy as np
import pytest

from fusec import oracle
from fusec.emit.program import generate
from fusec.library.model import Geometry
from fusec.runtime.program import Program
from tests.helpers import DTYPES, compile_for_this_gpu, library
from tests.test_band import band_program, dag_of

pytestmark = pytest.mark.gpu

QUICK = bool(os.environ.get("FUSEC_BAND_QUICK"))
SCRIPTS = ("atax", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt")
SIZES = [dict(m=2048, n=2048), dict(m=1000, n=777), dict(m=4097, n=33), dict(m=1, n=300)]
TWO_ROWS = ("atax", "bicgk")


def sizes_of(dag, sizes):
    return {s: sizes[s] if s in sizes else sizes["n"] for s in dag.sizes}


@pytest.fixture(scope="module")
def compiled():
    """(script, dtype) -> [(sizes, Program)], compiled up front in parallel."""
    out, sources = {}, []
    for script in SCRIPTS:
        dag = dag_of(script)
        for dtype in ("float32",) if QUICK else DTYPES:
            cases = []
            for sizes in SIZES:
                sizes = sizes_of(dag, sizes)
                for rows in (None, 2) if script in TWO_ROWS else (None,):
                    for ahead in (False, True):  # loads issued one instance ahead, or not
                        try:
                            plan = band_program(script, dtype, sizes, rows, ahead)
                        except AssertionError:
                            continue  # no two-row shape at this width
                        cases.append((sizes, Program(generate(dag, library(), plan, dtype))))
            out[script, dtype] = cases
            sources += [p.source for _, p in cases]
    compile_for_this_gpu(sources)
    return out


def _host(results, program) -> dict[str, np.ndarray]:
    results = results if isinstance(results, tuple) else (results,)
    return {name: np.asarray(r) for name, r in zip(program.outputs, results)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_band_plan(script, dtype, compiled):
    if (script, dtype) not in compiled:
        pytest.skip("FUSEC_BAND_QUICK: float32 only")
    cases = compiled.pop((script, dtype))
    dag = dag_of(script)
    assert any(k.plan.geometry is Geometry.BAND for _, p in cases for k in p.kernels)
    if script == "atax":
        assert all(len(p.kernels) == 1 for _, p in cases), "ATAX is one band kernel: one pass over A"
    failures = []
    for sizes, prog in cases:
        inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(zlib.crc32(repr(sizes).encode())))
        expected = oracle.expect(dag, library(), inputs)
        label = f"{prog.generated.plan.summary(dag)} at {sizes}"
        for run in range(3):
            outputs = _host(prog.run(inputs, poison=True), prog)
            for check in oracle.check_outputs(dag, library(), inputs, outputs, dtype, expected=expected):
                if not check.passed:
                    failures.append(f"{label}, run {run + 1}: {check.name} {check.reason}")
        prog.release()
        gc.collect()
    assert not failures, f"{len(failures)} failures, first: " + "; ".join(failures[:3])
