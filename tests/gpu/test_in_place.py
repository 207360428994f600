"""GPU tier of results written in place (BLAS's A := A + x y^T): GEMVER's B, MADD's C and the
triangle updates' B written over the device array of their matrix A with ``out=``, for plans of
every family the space has, against the float64 oracle of the inputs as they were; a second
call on the updated A (the prepared call) against the oracle of that. A triangle update leaves
the other triangle of A as it was (NaN there: no kernel may read it)."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.cost.analytic import DEFAULT
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, ROOT, compile_for_this_gpu, library

pytestmark = pytest.mark.gpu

# script (under scripts/), the result written over the input
CASES = [("gemver", "B", "A"), ("madd", "C", "A"), ("madd", "C", "B"),
         ("triangle/syr2", "B", "A"), ("triangle/syr2_lower", "B", "A"),
         ("triangle/syr_symv", "B", "A"), ("triangle/syr_symv_lower", "B", "A")]
SCRIPTS = sorted({c[0] for c in CASES})


def _sizes(dag) -> list[dict[str, int]]:
    if len(dag.sizes) == 2:
        return [{"m": 1000, "n": 1000}, {"m": 777, "n": 1001}, {"m": 4097, "n": 2049}]
    return [{"n": 33}, {"n": 1000}, {"n": 4097}]


_PROGRAMS: dict = {}


def programs(script: str, dtype: str) -> list:
    """The programs of the first choice, the unfused plan, held fusions (one whose consumer stores
    the held tiles, one whose producer does) and a striped one where the space has them, and two
    drawn plans."""
    key = (script, dtype)
    if key not in _PROGRAMS:
        path = ROOT / "scripts" / f"{script}.script"
        dag = fusec.compile(path, library(), dtype).dag
        space = build_space(dag, library(), dtype, {s: 4096 for s in dag.sizes}, DEFAULT)
        held = {}  # one held fusion storing its held tiles after the barrier (the consumer's), one not
        for c in itertools.islice(space.with_held(), 200):
            held.setdefault(any(getattr(k, "stores_after", False) for k in c.plan.kernels), c.plan)
        held = list(held.values())
        striped = [c.plan for c in space.top(40) if any(k.family == "striped" for k in c.plan.kernels)][:1]
        drawn = [c.plan for c in space.sample(2, np.random.default_rng(zlib.crc32(script.encode())))]
        plans = dict.fromkeys([space.best().plan, unfused_plan(dag, library())] + held + striped + drawn)
        _PROGRAMS[key] = [fusec.compile(path, library(), dtype, plan=plan) for plan in plans]
    return _PROGRAMS[key]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    compile_for_this_gpu([p.source for s in SCRIPTS for d in DTYPES for p in programs(s, d)])


def _inputs(prog, sizes, dtype, seed):
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(seed))
    functions = library().functions
    triangles = {functions[c.function].triangle("A") for c in prog.dag.calls}
    if "triu" in triangles or "tril" in triangles:  # the triangle no function reads: NaN
        n = sizes["n"]
        inputs["A"][np.tril_indices(n, -1) if "triu" in triangles else np.triu_indices(n, 1)] = np.nan
    return inputs


def _check(prog, inputs, results, dtype) -> None:
    results = results if isinstance(results, tuple) else (results,)
    computed = {prog.dag.value(v).name: r.get() for v, r in zip(prog.dag.outputs, results, strict=True)}
    checks = oracle.check_outputs(prog.dag, library(), inputs, computed, dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, "; ".join(failed)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script, result, given", CASES)
def test_a_result_written_over_its_matrix(script, result, given, dtype):
    cupy = pytest.importorskip("cupy")
    triangle_of = oracle.stored_triangle
    for index, prog in enumerate(programs(script, dtype)):
        result_id = next(v for v in prog.dag.outputs if prog.dag.value(v).name == result)
        triangle = triangle_of(prog.dag, library(), result_id)
        for sizes in _sizes(prog.dag):
            inputs = _inputs(prog, sizes, dtype, zlib.crc32(repr((script, dtype, sizes)).encode()))
            device = {k: cupy.asarray(v) if np.ndim(v) else v for k, v in inputs.items()}  # scalars: host numbers
            place = device[given]
            for call in range(2):  # the whole way, then the prepared call on the updated matrix
                before = {k: v.get() if np.ndim(v) else v for k, v in device.items()}
                results = prog.run(device, out={result: place})
                returned = results[prog.outputs.index(result)] if isinstance(results, tuple) else results
                assert returned.data.ptr == place.data.ptr, (index, sizes)
                _check(prog, before, results, dtype)
                if triangle is not None:  # the other triangle: as the input held it
                    n = sizes["n"]
                    outside = np.tril_indices(n, -1) if triangle == "triu" else np.triu_indices(n, 1)
                    np.testing.assert_array_equal(place.get()[outside], before[given][outside])
                for name, array in before.items():  # every other input unchanged
                    if name != given and np.ndim(array):
                        np.testing.assert_array_equal(device[name].get(), array, err_msg=name)


@pytest.mark.parametrize("script, result, given", CASES[:2] + CASES[3:4])
def test_a_numpy_result_written_over_its_matrix(script, result, given):
    """NumPy inputs: the matrix is copied to the GPU before anything runs, and the result back
    into that same host array afterwards; the other results are new arrays."""
    prog = programs(script, "float32")[0]
    sizes = _sizes(prog.dag)[1]
    inputs = _inputs(prog, sizes, "float32", zlib.crc32(repr(("numpy", script)).encode()))
    before = {k: np.copy(v) for k, v in inputs.items()}
    place = inputs[given]
    results = prog.run(inputs, out={result: place})
    results = results if isinstance(results, tuple) else (results,)
    assert results[prog.outputs.index(result)] is place
    computed = {prog.dag.value(v).name: np.asarray(r) for v, r in zip(prog.dag.outputs, results, strict=True)}
    checks = oracle.check_outputs(prog.dag, library(), before, computed, "float32")
    assert all(c.passed for c in checks), [f"{c.name}: {c.reason}" for c in checks if not c.passed]
