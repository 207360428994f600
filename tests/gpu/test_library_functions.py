"""GPU tier for the BLAS-1 functions added to fusec/data/blas (snrm2, sasum, saxpby, scopy,
svmul, svdiv): each alone and fused with a neighbour (tests/library_scripts.py), both
precisions, the suite's sizes, against the float64 oracle.

Outputs are poisoned with NaN before each run, so an element no kernel writes fails; inputs
are checked unchanged afterwards. Each script runs as the analytic model's first choice
(fused: one kernel for two calls) and unfused, and the two agree bit for bit on
integer-valued inputs (exact sums) where nothing divides. FUSEC_TEST_SIZES (e.g. "1,33,1000") narrows the sizes,
for runs under compute-sanitizer.
"""

from __future__ import annotations

import os
import shutil
import zlib

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.api import script_dag
from fusec.cost.analytic import DEFAULT
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, compile_for_this_gpu, library, size_cases
from tests.library_scripts import DIVISORS, FUSED, SCRIPTS

pytestmark = pytest.mark.gpu

# the suite's sizes, and one past the L2 (a vector of 4 MB / 8 MB; matrices stop at 8192)
BASE_SIZES = [int(s) for s in os.environ.get("FUSEC_TEST_SIZES", "1,2,31,32,33,1000,4097,8192,1000003").split(",")]
MATRIX_SIZES = [n for n in BASE_SIZES if n <= 8192]
RECTANGULAR_BASES = [n for n in (33, 1000) if n in BASE_SIZES]
PLANS = ("predicted", "unfused")


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _dag(name):
    return script_dag(None, SCRIPTS[name], f"{name}.script", library())


_PROGRAMS: dict = {}


def program(name: str, dtype: str, plan: str):
    """The script compiled with the analytic model's first choice (no GPU's database has the
    new routines' timings until `fusec perfdb build --missing` ran), or unfused."""
    key = (name, dtype, plan)
    if key not in _PROGRAMS:
        dag = _dag(name)
        chosen = (unfused_plan(dag, library()) if plan == "unfused" else
                  build_space(dag, library(), dtype, {s: 1 << 22 for s in dag.sizes}, DEFAULT).best().plan)
        _PROGRAMS[key] = fusec.compile(source=SCRIPTS[name], name=f"{name}.script", dtype=dtype, plan=chosen)
    return _PROGRAMS[key]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Every program of this module, compiled up front in parallel (nvcc's cache then
    has each when a test first runs it)."""
    programs = [program(name, dtype, plan) for name in SCRIPTS for dtype in DTYPES for plan in PLANS]
    compile_for_this_gpu([p.source for p in programs])


def _cases():
    out = []
    for name in sorted(SCRIPTS):
        dag = _dag(name)
        if len(dag.sizes) == 2:
            cases = size_cases(dag, MATRIX_SIZES)[:len(MATRIX_SIZES)] + size_cases(dag, RECTANGULAR_BASES)[
                len(RECTANGULAR_BASES):]
        else:
            cases = size_cases(dag, BASE_SIZES)
        for sizes in cases:
            out.append(pytest.param(name, sizes, id=f"{name}-" + "x".join(str(v) for v in sizes.values())))
    return out


def inputs_for(prog, name, sizes, dtype, rng, mode="uniform"):
    """The oracle's random inputs; a divisor kept away from 0 (|y| in [0.25, 0.75], or
    integers 1..8 with a sign), so that a quotient's reference is finite."""
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, rng, mode=mode)
    divisor = DIVISORS.get(name)
    if divisor:
        shape = inputs[divisor].shape
        sign = rng.choice([-1.0, 1.0], size=shape)
        size = rng.uniform(0.25, 0.75, size=shape) if mode == "uniform" else rng.integers(1, 9, size=shape)
        inputs[divisor] = np.ascontiguousarray(sign * size, dtype=dtype)
    return inputs


def _host(value) -> np.ndarray:
    if hasattr(value, "get"):
        return value.get()
    if hasattr(value, "cpu"):
        return value.cpu().numpy()
    return np.asarray(value)


def _check(prog, inputs, results) -> tuple:
    results = results if isinstance(results, tuple) else (results,)
    computed = {name: _host(value) for name, value in zip(prog.outputs, results)}
    checks = oracle.check_outputs(prog.dag, library(), inputs, computed, prog.dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, "; ".join(failed)
    return tuple(computed[name] for name in prog.outputs)


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,sizes", _cases())
def test_against_the_oracle(name, sizes, dtype, plan):
    prog = program(name, dtype, plan)
    inputs = inputs_for(prog, name, sizes, dtype, np.random.default_rng(_seed(name, sizes, dtype)))
    before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
    results = prog.run(inputs, poison=True)
    _check(prog, inputs, results)
    for key, array in before.items():
        np.testing.assert_array_equal(inputs[key], array, err_msg=f"input {key} was modified")
    for value in (results if isinstance(results, tuple) else (results,)):
        assert np.asarray(value).dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_is_one_kernel_and_gives_the_unfused_bits(name, dtype):
    """Integer-valued inputs: every sum is exact (in float32 too, at these sizes), and a
    square root is rounded once, so the fused kernel and the unfused ones agree bit for
    bit at ragged sizes, and in float64 at one with many blocks. A sum of quotients is
    not exact: there both only pass the oracle."""
    fused, unfused = program(name, dtype, "predicted"), program(name, dtype, "unfused")
    assert len(fused.generated.kernels) == 1 < len(unfused.generated.kernels)
    for n in (33, 1000, 4097) + ((1000003,) if dtype == "float64" else ()):
        sizes = {s: n for s in fused.dag.sizes}
        inputs = inputs_for(fused, name, sizes, dtype, np.random.default_rng(_seed(name, n, "int")), "integer")
        a = _check(fused, inputs, fused.run(inputs, poison=True))
        b = _check(unfused, inputs, unfused.run(inputs, poison=True))
        if name in DIVISORS:
            continue
        for out, x, y in zip(fused.outputs, a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"{name} {out}, n = {n}")


SCALARS = [(0.0, 1.0), (1.0, 0.0), (-1.0, 0.7), (0.7, -1.0), (1.0, 1.0)]


@pytest.mark.parametrize("alpha,beta", SCALARS)
@pytest.mark.parametrize("name", ["axpby", "axpby_dot", "axpy_nrm2", "copy_axpy"])
def test_special_scalars(name, alpha, beta):
    prog = program(name, "float32", "predicted")
    inputs = inputs_for(prog, name, {"n": 333}, "float32", np.random.default_rng(_seed(name, alpha, beta)))
    inputs.update({k: v for k, v in {"alpha": alpha, "beta": beta}.items() if k in inputs})
    _check(prog, inputs, prog.run(inputs, poison=True))


@pytest.mark.parametrize("name", sorted(FUSED))
def test_cupy_arrays_in_and_out(name):
    cupy = pytest.importorskip("cupy")
    from fusec.runtime import cuda
    prog = program(name, "float64", "predicted")
    inputs = inputs_for(prog, name, {"n": 1000}, "float64", np.random.default_rng(_seed(name, "cupy")))
    with cuda.context():
        device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        results = prog(**device)
        for value in (results if isinstance(results, tuple) else (results,)):
            assert isinstance(value, cupy.ndarray)
        _check(prog, inputs, results)


def test_perfdb_missing_times_the_new_routines(tmp_path):
    """What the lead runs on the H100, `fusec perfdb build --missing`, on a copy of the
    bundled database less any timing of the new functions' own routines (fp32 only, to
    keep it short): it times exactly those routines, keeps every other timing bit for
    bit, and records the library as it is now."""
    import dataclasses

    from fusec.cost.perfdb import store
    from fusec.cost.perfdb.build import build
    from fusec.cost.perfdb.probes import probes
    from fusec.target import present
    from tests.test_library_functions import OWN_ROUTINES
    info = present()
    bundled = store.path_for(info.slug, store.BUNDLED)
    if not bundled.exists():
        pytest.skip(f"no bundled database for {info.slug}")
    whole = store.load(bundled, library())
    assert whole is not None
    mine = set(OWN_ROUTINES.values())
    old = dataclasses.replace(whole, timings={k: t for k, t in whole.timings.items() if k.routine not in mine})
    store.save(old, tmp_path / bundled.name)
    grown, path = build(library(), ("float32",), tmp_path, progress=False, missing=True,
                        select=lambda p: p.key.routine in mine)
    new = set(grown.timings) - set(old.timings)
    assert new == {p.key for p in probes(library(), ("float32",)) if p.key.routine in mine}
    assert all(grown.timings[k] == t for k, t in old.timings.items())
    again = store.load(path, library())
    assert again.library["hash"] == library().content_hash and again.library["files"] == dict(library().files)
    for key in new:
        assert all(s > 0 for s in grown.timings[key].seconds.values())


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_worked_example_sums_exponentials(tmp_path, dtype):
    """docs/library-format.md's user-added sexp, fused with sasum: right at sizes with
    padded lanes (exp(0) = 1 there, which exp_compute must not let sasum add)."""
    from fusec.library.loader import load_library
    from tests.test_library_loader import readme_examples
    blocks = readme_examples()
    mylib = tmp_path / "mylib"
    shutil.copytree(library().path, mylib, ignore=shutil.ignore_patterns("tunings"))
    (mylib / "sexp.cu").write_text(blocks["sexp.cu"], encoding="utf-8")
    lib = load_library(mylib)
    dag = script_dag(None, blocks["softsum.script"], "softsum.script", lib)
    best = build_space(dag, lib, dtype, {"n": 1 << 22}, DEFAULT).best().plan
    assert len(best.kernels) == 1
    prog = fusec.compile(source=blocks["softsum.script"], name="softsum.script", library=lib, dtype=dtype, plan=best)
    for n in (1, 33, 1000, 4097, 1000003):
        inputs = oracle.random_inputs(prog.dag, {"n": n}, dtype, np.random.default_rng(_seed("softsum", n)))
        result = prog.run(inputs, poison=True)
        checks = oracle.check_outputs(prog.dag, lib, inputs, {"s": _host(result)}, dtype)
        assert all(c.passed for c in checks), [str(c) for c in checks]
