"""GPU tier of striped fusion: a producer and its consumer in one launch, in stripes.

For the three sequences with a global barrier between matrix passes (GEMVER,
SGEMVT, ATAX), in both precisions: the striped kernels the space ranks best
at n = 1024 and 16384, each lag, and a few shapes the ranking would not
pick (128-thread blocks, one serial iteration). Each runs at sizes with one
stripe, a ragged last stripe, a lag longer than the stripes, and one block
per stripe, with outputs and fusec's buffers poisoned, and is judged by the
float64 oracle; its outputs must equal bit for bit those of the same two
kernels launched one after another (each part does exactly the arithmetic it
does alone), and a second and third run must give them again (the schedule's
counters clear themselves).

FUSEC_STRIPED_QUICK=1 keeps two sizes and three plans per script, float32:
for runs under compute-sanitizer::

    FUSEC_LINEINFO=1 FUSEC_STRIPED_QUICK=1 compute-sanitizer --tool racecheck \\
        --error-exitcode 1 python -m pytest -q -x tests/gpu/test_striped.py
"""

from __future__ import annotations

import dataclasses
import gc
import os
import zlib

import numpy as np
import pytest

from fusec import oracle
from fusec.cost.analytic import DEFAULT
from fusec.emit.program import generate
from fusec.frontend import load_script
from fusec.ir.geometry import Shape
from fusec.ir.plan import ProgramPlan, StripedPlan
from fusec.library.model import Geometry
from fusec.runtime.program import Program
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, ROOT, compiled_with_parts_apart, library, outputs_on_host

pytestmark = pytest.mark.gpu

QUICK = bool(os.environ.get("FUSEC_STRIPED_QUICK"))
SCRIPTS = ("gemver", "sgemvt", "atax")
# one stripe; ragged rows and columns; a lag past the stripes; wide and flat
SIZES = [dict(m=4097, n=33), dict(m=1000, n=777), dict(m=33, n=4097), dict(m=2048, n=2048), dict(m=1, n=300)]


def dag_of(script):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def striped_plans(script: str, dtype: str) -> list[ProgramPlan]:
    """The best-ranked striped combinations at two sizes, and the first one
    with 128-thread blocks and with one serial iteration in each part."""
    dag = dag_of(script)
    plans: dict[ProgramPlan, None] = {}
    for n in (1024, 16384):
        space = build_space(dag, library(), dtype, {s: n for s in dag.sizes}, DEFAULT, horizontal=False)
        found = [c.plan for c in space.top(40) if any(isinstance(k, StripedPlan) for k in c.plan.kernels)]
        for plan in found[:4]:
            plans[plan] = None
    first = next(iter(plans))
    kernel = next(k for k in first.kernels if isinstance(k, StripedPlan))

    def reshaped(block: int, iters: int, tile_rows: int) -> ProgramPlan:
        parts = tuple(dataclasses.replace(p, shape=Shape(Geometry.TILE, block, iters, tile_rows))
                      for p in kernel.parts)
        striped = StripedPlan(*parts, lag=2)
        return ProgramPlan(tuple(striped if k is kernel else k for k in first.kernels))
    plans[reshaped(128, 1, 16)] = None
    plans[reshaped(256, 1, 8)] = None
    out = list(plans)
    return out[:3] if QUICK else out


@pytest.fixture(scope="module")
def compiled():
    """(script, dtype) -> [(Program, the same kernels apart)], compiled up front in parallel."""
    return compiled_with_parts_apart(SCRIPTS, ("float32",) if QUICK else DTYPES, dag_of, striped_plans, StripedPlan)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_striped_plan(script, dtype, compiled):
    if (script, dtype) not in compiled:
        pytest.skip("FUSEC_STRIPED_QUICK: float32 only")
    pairs = compiled.pop((script, dtype))  # freed when the test ends
    dag = pairs[0][0].dag
    failures, stripes = [], set()
    for sizes in SIZES[:2] if QUICK else SIZES:
        inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(zlib.crc32(repr(sizes).encode())))
        expected = oracle.expect(dag, library(), inputs)
        for prog, alone in pairs:
            label = f"{prog.generated.plan.summary(dag)} at {sizes}"
            striped = next(k for k in prog.kernels if hasattr(k, "schedule_counters"))
            stripes.add(striped.stripes(sizes))
            outputs = outputs_on_host(prog.run(inputs, poison=True), prog)
            for check in oracle.check_outputs(dag, library(), inputs, outputs, dtype, expected=expected):
                if not check.passed:
                    failures.append(f"{label}: {check.name} {check.reason}")
            apart_outputs = outputs_on_host(alone.run(inputs, poison=True), alone)
            for again in range(2):
                repeated = outputs_on_host(prog.run(inputs, poison=True), prog)
                for name in outputs:
                    if not np.array_equal(outputs[name], repeated[name]):
                        failures.append(f"{label}: {name} differs on run {again + 2}")
            for name in outputs:
                if not np.array_equal(outputs[name], apart_outputs[name]):
                    failures.append(f"{label}: {name} differs from the same kernels one after another")
        for pair in pairs:
            for p in pair:
                p.release()
        gc.collect()
    assert not failures, f"{len(failures)} failures, first: " + "; ".join(failures[:3])
    if not QUICK:
        assert 1 in stripes and max(stripes) > 2, f"stripes seen: {sorted(stripes)}"


def test_striped_program_on_device_arrays_and_timing():
    """Device arrays in place, prepared calls, many calls, timing."""
    import pycuda.gpuarray as gpuarray

    from fusec.runtime import cuda
    dag = dag_of("sgemvt")
    plan = striped_plans("sgemvt", "float32")[0]
    prog = Program(generate(dag, library(), plan, "float32"))
    sizes = dict(m=3000, n=1500)
    inputs = oracle.random_inputs(dag, sizes, "float32", np.random.default_rng(5))
    expected = oracle.expect(dag, library(), inputs)
    with cuda.context():
        device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        for _ in range(5):
            x, w = prog.run(device, poison=True)
            outputs = {"x": x.get(), "w": w.get()}
            assert all(c.passed for c in oracle.check_outputs(dag, library(), inputs, outputs, "float32",
                                                              expected=expected))
        times = prog.time(device, repeat=5, host=False)
        assert len(times) == 5 and all(t > 0 for t in times)
        prog.release()
