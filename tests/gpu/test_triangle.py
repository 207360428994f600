"""GPU tier of one stored triangle (fusec/data/blas/triangle.fusec): the scripts of
scripts/triangle/ (trmv; symv: strmv and strmtv_strict in one kernel, then svadd; syr2; ssyr
then symv of its result) against the float64 oracle, both precisions, the suite's square sizes
and one past the L2.

The same for the lower triangle's scripts (NAME_lower: strmv_lower, strmtv_strict_lower,
ssyr_lower, ssyr2_lower on triangle_lower.fusec), mirrored: A's upper triangle NaN, the oracle
comparing B on and below the diagonal, an out= array keeping its values above it.

A's lower triangle is NaN in every run: a kernel that used any value of it (a tile wholly
below the diagonal that was not skipped, a crossing tile not masked) fails. ssyr's and ssyr2's
results hold one stored triangle ('stored B triu'): the oracle compares them on and above the
diagonal, and below it they keep what their array held (an out= CuPy array's values, checked;
the NaN of the poisoned outputs otherwise, which symv of B in syr_symv must not use). Outputs are
poisoned with NaN before each run, inputs checked unchanged after. Sizes from 1000 on have
tiles wholly below the diagonal, whose load reads nothing. Every combination the space can
emit for the two scripts (tile shapes, serial axes, implementations registers and shared_x)
runs at three sizes; the first choice and the unfused plan agree bit for bit on
integer-valued inputs (exact sums). FUSEC_TEST_SIZES (e.g. "1,33,1000") narrows the sizes,
for runs under compute-sanitizer.
"""

from __future__ import annotations

import gc
import os
import zlib

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.api import script_dag
from fusec.cost.analytic import DEFAULT
from fusec.emit.program import generate
from fusec.runtime.program import Program
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, ROOT, compile_for_this_gpu, library
from tests.library_scripts import TRIANGLE_SCRIPTS, TRIL_SCRIPTS

pytestmark = pytest.mark.gpu

SIZES = [int(s) for s in os.environ.get("FUSEC_TEST_SIZES", "1,2,31,32,33,1000,4097,8192").split(",")]
PLANS = ("predicted", "unfused")
TEXT = {name: (ROOT / "scripts" / "triangle" / f"{name}.script").read_text(encoding="utf-8")
        for name in TRIANGLE_SCRIPTS}


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _dag(name):
    return script_dag(None, TEXT[name], f"{name}.script", library())


_PROGRAMS: dict = {}


def program(name: str, dtype: str, plan: str):
    key = (name, dtype, plan)
    if key not in _PROGRAMS:
        dag = _dag(name)
        chosen = (unfused_plan(dag, library()) if plan == "unfused" else
                  build_space(dag, library(), dtype, {"n": 8192}, DEFAULT).best().plan)
        _PROGRAMS[key] = fusec.compile(source=TEXT[name], name=f"{name}.script", dtype=dtype, plan=chosen)
    return _PROGRAMS[key]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    programs = [program(name, dtype, plan) for name in TRIANGLE_SCRIPTS for dtype in DTYPES for plan in PLANS]
    compile_for_this_gpu([p.source for p in programs])


def _lower(dag) -> bool:
    """Whether the script's functions read the lower triangle of A (the NAME_lower scripts)."""
    functions = library().functions
    return any(functions[c.function].triangle("A") == "tril" for c in dag.calls if c.function in functions)


def inputs_for(dag, n: int, dtype: str, rng, mode: str = "uniform") -> dict:
    """The oracle's random inputs, A's triangle that no function reads NaN (no kernel may use
    it): the lower one of the upper triangle's scripts, the upper one of the NAME_lower ones."""
    inputs = oracle.random_inputs(dag, {"n": n}, dtype, rng, mode=mode)
    A = inputs["A"].copy()
    A[np.triu_indices(n, 1) if _lower(dag) else np.tril_indices(n, -1)] = np.nan
    inputs["A"] = A
    return inputs


def _host(value) -> np.ndarray:
    return np.asarray(value.get() if hasattr(value, "get") else value)


def _computed(dag, results) -> dict[str, np.ndarray]:
    results = results if isinstance(results, tuple) else (results,)
    return {dag.value(v).name: _host(r) for v, r in zip(dag.outputs, results, strict=True)}


def _check(dag, inputs, results, dtype) -> dict[str, np.ndarray]:
    computed = _computed(dag, results)
    checks = oracle.check_outputs(dag, library(), inputs, computed, dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, "; ".join(failed)
    return computed


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", TRIANGLE_SCRIPTS)
def test_against_the_oracle(name, n, dtype, plan):
    prog = program(name, dtype, plan)
    inputs = inputs_for(prog.dag, n, dtype, np.random.default_rng(_seed(name, n, dtype)))
    before = {k: np.copy(v) for k, v in inputs.items()}
    computed = _check(prog.dag, inputs, prog.run(inputs, poison=True), dtype)
    assert all(v.dtype == np.dtype(dtype) for v in computed.values())
    for key, array in before.items():
        np.testing.assert_array_equal(inputs[key], array, err_msg=f"input {key} was modified")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["symv", "syr_symv", "symv_lower", "syr_symv_lower"])
def test_fused_is_two_kernels_and_gives_the_unfused_bits(name, dtype):
    """Integer-valued inputs: every sum is exact, so the fused products (shared_x, and ssyr's
    B kept on chip) and the unfused ones (registers) agree bit for bit, at ragged sizes and
    one with many tiles below the diagonal."""
    fused, unfused = program(name, dtype, "predicted"), program(name, dtype, "unfused")
    assert len(fused.generated.kernels) == 2 < len(unfused.generated.kernels)
    for n in (33, 1000, 4097):
        inputs = inputs_for(fused.dag, n, dtype, np.random.default_rng(_seed("int", n)), "integer")
        a = _check(fused.dag, inputs, fused.run(inputs, poison=True), dtype)
        b = _check(unfused.dag, inputs, unfused.run(inputs, poison=True), dtype)
        for vid in fused.dag.outputs:  # a result of one stored triangle: that triangle
            out = fused.dag.value(vid).name
            triangle = oracle.stored_triangle(fused.dag, library(), vid)
            cut = {"triu": np.triu, "tril": np.tril, None: np.asarray}[triangle]
            np.testing.assert_array_equal(cut(a[out]), cut(b[out]), err_msg=f"{out}, n = {n}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", TRIANGLE_SCRIPTS)
def test_every_combination_of_the_space(name, dtype):
    """Every layout of the space's heaviest kernel (tile shapes, serial axes and iterations,
    implementations registers and shared_x, horizontal fusions), each at its best, at sizes
    whose diagonal crosses tiles unevenly."""
    from fusec import nvcc
    from fusec.runtime import cuda
    dag = _dag(name)
    space = build_space(dag, library(), dtype, {"n": 4097}, DEFAULT)
    chosen = space.layouts(400)
    programs = [Program(generate(dag, library(), c.plan, dtype)) for c in chosen]
    with cuda.context() as ctx:
        arch = cuda.arch_of(ctx)
    nvcc.compile_many([p.source for p in programs], arch)
    failures = []
    for n in (33, 1000, 4097):
        inputs = inputs_for(dag, n, dtype, np.random.default_rng(_seed(name, n, "space")))
        expected = oracle.expect(dag, library(), inputs)
        for rank, prog in enumerate(programs):
            computed = _computed(dag, prog.run(inputs, poison=True))
            prog.release()  # its buffers: hundreds of programs' at n = 4097 do not fit beside other workers'
            for check in oracle.check_outputs(dag, library(), inputs, computed, dtype, expected=expected):
                if not check.passed:
                    failures.append(f"#{rank} {prog.generated.plan} at n={n}: {check.name}: {check.reason}")
    gc.collect()
    assert not failures, f"{len(failures)} of {len(programs) * 3} failed, first: " + "; ".join(failures[:3])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", TRIANGLE_SCRIPTS)
def test_a_matrix_off_its_16_byte_boundary(name, dtype):
    """A as a CuPy view one value past a 16-byte boundary (the kernels' unaligned paths:
    triu_tile_load's whole pieces of VEC single loads), first choice and unfused."""
    pytest.importorskip("cupy")
    from tests.gpu.test_unaligned import _off_boundary
    for plan in PLANS:
        prog = program(name, dtype, plan)
        for n in (33, 1000):
            inputs = inputs_for(prog.dag, n, dtype, np.random.default_rng(_seed(name, n, "off")))
            given = _off_boundary(inputs)
            assert given["A"].data.ptr % 16 != 0
            _check(prog.dag, inputs, prog.run(given, poison=True), dtype)


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["syr2", "syr_symv", "syr2_lower", "syr_symv_lower"])
def test_the_stored_triangle_leaves_the_rest_of_an_out_array(name, dtype, plan):
    """B given as an out= CuPy array holding 12345 everywhere: the kernels write its values on
    and above the diagonal (the oracle's) and none below it, which keeps 12345 (the store
    skips tiles wholly below the diagonal and the values below it of the tiles it crosses)."""
    cupy = pytest.importorskip("cupy")
    prog = program(name, dtype, plan)
    for n in (1, 33, 1000, 4097):
        inputs = inputs_for(prog.dag, n, dtype, np.random.default_rng(_seed(name, n, "out")))
        B = cupy.full((n, n), 12345, dtype=dtype)
        results = prog.run({k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()},
                           out={"B": B})
        computed = _check(prog.dag, inputs, results, dtype)
        outside = np.triu_indices(n, 1) if name in TRIL_SCRIPTS else np.tril_indices(n, -1)
        assert (computed["B"][outside] == 12345).all(), f"n = {n}: B written outside its triangle"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["syr2", "syr_symv", "syr2_lower", "syr_symv_lower"])
def test_the_stored_triangle_leaves_the_rest_of_a_numpy_out_array(name, dtype):
    """The same with NumPy arrays, whose results come back from a device buffer: B given as an
    out= NumPy array holding 12345 keeps it below the diagonal, the oracle's values above."""
    prog = program(name, dtype, "predicted")
    for n in (1, 33, 1000):
        inputs = inputs_for(prog.dag, n, dtype, np.random.default_rng(_seed(name, n, "numpy out")))
        B = np.full((n, n), 12345, dtype=dtype)
        results = prog.run(inputs, out={"B": B}, poison=True)
        computed = _check(prog.dag, inputs, results, dtype)
        assert computed["B"] is B or np.shares_memory(computed["B"], B)
        outside = np.triu_indices(n, 1) if name in TRIL_SCRIPTS else np.tril_indices(n, -1)
        assert (B[outside] == 12345).all(), f"n = {n}: B's values outside its triangle lost"
