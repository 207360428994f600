"""GPU tier of rows that are not whole 16-byte pieces, against the float64 oracle.

Where ``cols`` is not a multiple of VEC, no tile or band instance is ``full``: every
matrix access goes through ``load_values`` / ``store_values``, which take a whole
piece with VEC plain accesses behind one branch and guard each value only in the
piece that crosses a row's end; vectors keep their 16-byte accesses where their
bases are aligned (``c.aligned``), and band kernels add column sums with vector
atomics into their accumulators.

For every script with a matrix, in both precisions, three plans: the one
``fusec.compile`` picks for n = 1001 (whatever geometry the predictor likes there),
the best band plan and the best plan without band kernels. Each runs at sizes where
every row skew occurs (n = 1001, 777), where a row is shorter than a warp's pieces
(33, 5), with an aligned row width (1000), and once with the matrix's base off its
16-byte boundary (a CuPy view one value in: then no 16-byte access at all, vectors'
included). Outputs and fusec's buffers are poisoned, and each runs twice.

FUSEC_UNALIGNED_QUICK=1 keeps float32, for runs under compute-sanitizer.
"""

from __future__ import annotations

import gc
import os
import zlib

import numpy as np
import pytest

from fusec import oracle
from fusec.api import build_program
from fusec.cost.perfdb import predictor_for
from fusec.emit.program import generate
from fusec.runtime.program import Program
from fusec.space.combinations import build_space
from tests.gpu.test_band import sizes_of
from tests.helpers import DTYPES, compile_for_this_gpu, library
from tests.test_band import band_program, dag_of

pytestmark = pytest.mark.gpu

QUICK = bool(os.environ.get("FUSEC_UNALIGNED_QUICK"))
SCRIPTS = ("atax", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt")
PLANNED = 1001  # the size the plans are chosen for: rows of every skew
SIZES = [dict(m=1001, n=1001), dict(m=1000, n=777), dict(m=300, n=33), dict(m=7, n=5), dict(m=66, n=1000)]


def _plans(script: str, dtype: str):
    """(label, plan) of the plans the module runs for one script and precision."""
    dag = dag_of(script)
    sizes = sizes_of(dag, dict(n=PLANNED))
    predicted, _ = build_program(dag, library(), dtype, sizes=sizes, tuned=False, spill_arch=None)
    space = build_space(dag, library(), dtype, sizes, predictor_for(library(), None))
    return [("predicted", predicted.generated.plan), ("band", band_program(script, dtype, sizes)),
            ("no band", space.best_where(lambda plan: not plan.uses_band).plan)]


@pytest.fixture(scope="module")
def compiled():
    """(script, dtype) -> [(label, Program)], compiled up front in parallel."""
    out, sources = {}, []
    for script in SCRIPTS:
        dag = dag_of(script)
        for dtype in ("float32",) if QUICK else DTYPES:
            out[script, dtype] = [(label, Program(generate(dag, library(), plan, dtype)))
                                  for label, plan in _plans(script, dtype)]
            sources += [p.source for _, p in out[script, dtype]]
    compile_for_this_gpu(sources)
    return out


def _host(results, program) -> dict[str, np.ndarray]:
    results = results if isinstance(results, tuple) else (results,)
    return {name: (r.get() if hasattr(r, "get") else np.asarray(r)) for name, r in zip(program.outputs, results)}


def _off_boundary(inputs: dict) -> dict:
    """The inputs as CuPy arrays, each matrix a view one value past a 16-byte boundary."""
    import cupy
    out = {}
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.ndim == 2:
            buffer = cupy.empty(value.size + 1, dtype=value.dtype)
            view = buffer[1:].reshape(value.shape)
            view[...] = cupy.asarray(value)
            out[name] = view
        elif isinstance(value, np.ndarray):
            out[name] = cupy.asarray(value)
        else:
            out[name] = value
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_rows_off_16_byte_boundaries_against_the_oracle(script, dtype, compiled):
    if (script, dtype) not in compiled:
        pytest.skip("FUSEC_UNALIGNED_QUICK: float32 only")
    dag = dag_of(script)
    failures = []
    for label, prog in compiled.pop((script, dtype)):
        for sizes in SIZES:
            sizes = sizes_of(dag, sizes)
            rng = np.random.default_rng(zlib.crc32(repr((script, sizes, dtype)).encode()))
            inputs = oracle.random_inputs(dag, sizes, dtype, rng)
            expected = oracle.expect(dag, library(), inputs)
            runs = [("", inputs)] * 2
            if sizes == sizes_of(dag, SIZES[0]):
                runs.append((", matrix off its 16-byte boundary", _off_boundary(inputs)))
            for run, (how, given) in enumerate(runs, 1):
                outputs = _host(prog.run(given, poison=True), prog)
                for check in oracle.check_outputs(dag, library(), inputs, outputs, dtype, expected=expected):
                    if not check.passed:
                        failures.append(f"{label} plan ({prog.generated.plan.summary(dag)}) at {sizes},"
                                        f" run {run}{how}: {check.name} {check.reason}")
        prog.release()
        gc.collect()
    assert not failures, f"{len(failures)} failures, first: " + "; ".join(failures[:3])
