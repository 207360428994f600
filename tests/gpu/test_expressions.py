"""GPU tier of scalar expressions: programs whose kernels evaluate expressions of
scalars other kernels left on the GPU, against the float64 oracle.

- The solver iterations of ``scripts/solvers/`` (CG, BiCG, BiCGStab) and the
  expression scripts of ``tests/expressions.py``, with their predicted plans, and
  the ``gemver`` expression script in a plan of every family (tile, band,
  horizontal, striped, held with column sums finished after its barrier): at
  n = 1, 33, 1000, 4097 in both precisions, outputs and fusec's buffers
  poisoned with NaN, inputs checked unchanged, a second run the same bits
  (where no kernel adds with atomics).
- The iterations looped from the host on well-conditioned systems: the true
  residual of the last iterate falls below the precision's tolerance, and the
  returned squared norm is that of the returned residual.

FUSEC_TEST_SIZES (e.g. "1,33") narrows the sizes, for runs under compute-sanitizer.
"""

from __future__ import annotations

import os
import warnings
import zlib

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.emit.program import generate
from fusec.errors import FusecWarning
from fusec.runtime.program import Program
from tests.expressions import FAMILIES, PLAN_SIZE, SCRIPTS, SOLVERS, family_plan, script_dag
from tests.helpers import DTYPES, ROOT, compile_for_this_gpu, library, no_gpu_named

pytestmark = pytest.mark.gpu

SIZES = [int(s) for s in os.environ.get("FUSEC_TEST_SIZES", "1,33,1000,4097").split(",")]
NAMES = SOLVERS + tuple(SCRIPTS) + tuple(f"gemver-{f}" for f in FAMILIES)


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


@pytest.fixture(scope="module")
def programs():
    """(name, dtype) -> Program, every source compiled up front in parallel. Plans are
    made for n = PLAN_SIZE, the largest size tested (a band kernel holds rows of at most
    the width it was made for)."""
    out = {}
    with no_gpu_named(), warnings.catch_warnings():
        # what choosing the plans warns of (BiCG's 11 calls and BiCGStab's 14 are searched by
        # the bounded search, SpaceCutWarning) is not what these tests judge
        warnings.simplefilter("ignore", FusecWarning)
        for dtype in DTYPES:
            for name in SOLVERS:
                out[name, dtype] = fusec.compile(ROOT / "scripts" / "solvers" / f"{name}.script", library(),
                                                 dtype, sizes={"n": PLAN_SIZE}, tuned=False)
            for name, text in SCRIPTS.items():
                out[name, dtype] = fusec.compile(source=text, name=f"{name}.script", library=library(),
                                                 dtype=dtype, sizes={"n": PLAN_SIZE}, tuned=False)
            for family in FAMILIES:
                out[f"gemver-{family}", dtype] = Program(
                    generate(script_dag("gemver"), library(), family_plan(family, dtype), dtype))
    compile_for_this_gpu([p.source for p in out.values()])
    return out


def _host(value):
    if hasattr(value, "get"):  # PyCUDA, CuPy
        return np.asarray(value.get())
    if hasattr(value, "cpu"):  # PyTorch
        return value.cpu().numpy()
    return np.asarray(value)


def _outputs(prog, results) -> dict[str, np.ndarray]:
    results = results if isinstance(results, tuple) else (results,)
    return {name: _host(r) for name, r in zip(prog.outputs, results)}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_against_oracle(programs, name, dtype, n):
    if name == "bicgstab" and n == 1:
        pytest.skip("BiCGStab solves a 1 x 1 system in its half step: s = r - alpha A p = 0, and then"
                    " omega = (t . s) / (t . t) is 0 / 0 (the float64 reference's r1 is all zeros)")
    prog = programs[name, dtype]
    dag = prog.dag
    inputs = oracle.random_inputs(dag, {s: n for s in dag.sizes}, dtype, np.random.default_rng(_seed(name, dtype, n)))
    before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
    outputs = _outputs(prog, prog.run(inputs, poison=True))
    checks = oracle.check_outputs(dag, library(), inputs, outputs, dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, f"{prog.generated.plan.summary(dag)}: " + "; ".join(failed)
    for key, array in before.items():
        np.testing.assert_array_equal(inputs[key], array, err_msg=f"input {key} was modified")
    for value in outputs.values():
        assert value.dtype == np.dtype(dtype)
    if prog.generated.reproducible:  # the expressions read what earlier kernels left: the same every run
        again = _outputs(prog, prog.run(inputs, poison=True))
        for key in outputs:
            np.testing.assert_array_equal(again[key], outputs[key], err_msg=f"{key} differs on a second run")


@pytest.mark.parametrize("dtype", DTYPES)
def test_device_arrays_in_and_out(programs, dtype):
    """CuPy arrays in: every result, the returned expressions too, a CuPy array on the GPU;
    a second call on the same arrays (a prepared call) gives the same bits."""
    cp = pytest.importorskip("cupy")
    prog = programs["scaled", dtype]
    inputs = oracle.random_inputs(prog.dag, {"n": 1000}, dtype, np.random.default_rng(_seed("cupy", dtype)))
    device = {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    results = prog(**device)
    assert all(isinstance(r, cp.ndarray) for r in results)
    checks = oracle.check_outputs(prog.dag, library(), inputs, _outputs(prog, results), dtype)
    assert all(c.passed for c in checks), [str(c) for c in checks]
    # the same arrays again: the prepared call (in C where the extension builds), new outputs
    again = prog(**device)
    for first, second in zip(_outputs(prog, results).values(), _outputs(prog, again).values()):
        np.testing.assert_array_equal(first, second)


# -- the iterations, looped ---------------------------------------------------------------

N = 300
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}  # of the true residual, relative to b
ITERATIONS = 60


def _system(solver: str, dtype: str):
    rng = np.random.default_rng(_seed("system", solver))
    m = rng.uniform(-0.5, 0.5, (N, N))
    if solver == "cg":  # symmetric positive definite, eigenvalues in about [1, 11]
        a = 30 * m @ m.T / N + np.eye(N)
    else:  # eigenvalues in a disc of radius about 0.6 around 1
        a = np.eye(N) + 2 * m / np.sqrt(N)
    b = rng.uniform(-0.5, 0.5, N)
    return a.astype(dtype), b.astype(dtype)


def _start(solver: str, a, b) -> dict[str, np.ndarray]:
    x = np.zeros_like(b)
    r = b.copy()  # b - A x0
    state = {"A": a, "x": x, "r": r, "p": r.copy()}
    if solver == "bicg":
        state.update(rt=r.copy(), pt=r.copy())
    if solver == "bicgstab":
        state.update(rh=r.copy())
    return state


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("solver", SOLVERS)
def test_iterations_converge(programs, solver, dtype):
    """Each call is one iteration; the host feeds the new state back (a solver's loop,
    item 3 of issue 46, runs it on the GPU). The true residual of the last iterate,
    computed in float64, falls below the tolerance; rr1 is |r1|^2 all the way."""
    prog = programs[solver, dtype]
    a, b = _system(solver, dtype)
    state = _start(solver, a, b)
    target = (TOLERANCE[dtype] * np.linalg.norm(b.astype(np.float64))) ** 2
    carried = {"x1": "x", "r1": "r", "p1": "p", "rt1": "rt", "pt1": "pt"}
    for _ in range(ITERATIONS):
        out = _outputs(prog, prog(**state))
        r1 = out["r1"].astype(np.float64)
        assert np.isfinite(out["rr1"]) and out["rr1"] == pytest.approx(r1 @ r1, rel=1e3 * np.finfo(dtype).eps)
        state.update({carried[k]: v for k, v in out.items() if k in carried})
        if out["rr1"] < target / 4:  # the recurrence's residual: stop short of its breakdown at 0
            break
    x = state["x"].astype(np.float64)
    true = b.astype(np.float64) - a.astype(np.float64) @ x
    assert np.linalg.norm(true) <= TOLERANCE[dtype] * np.linalg.norm(b.astype(np.float64)), (
        f"{solver} {dtype}: |b - A x| / |b| = {np.linalg.norm(true) / np.linalg.norm(b):.3g}")
