"""GPU tier of horizontal fusion: every horizontal combination is correct.

For the issue's scripts (two gemvs on different matrices, a gemv beside a
dot), BiCGK (its two calls side by side) and GESUMMV (its two gemvs side by
side, then the waxpby), in both precisions: every combination with a
horizontal kernel that the space offers at n = 1024, 4096 and 16384, plus
the parts in the other order and with a register bound low enough to spill.
Each runs at sizes where its parts have different grid sizes (both ways
round where the parts have sizes of their own), with outputs and fusec's
buffers poisoned, and is judged by the float64 oracle; its outputs must
equal bit for bit those of the same kernels launched one after another
(each part does exactly the arithmetic it does alone), and a second run
must give them again (the reductions' counters reset).

FUSEC_HORIZONTAL_QUICK=1 keeps two sizes per script, five plans (the two
extra ones and the three best-predicted) and float32: for runs under
compute-sanitizer, which is slow::

    FUSEC_LINEINFO=1 FUSEC_HORIZONTAL_QUICK=1 compute-sanitizer --tool racecheck \\
        --error-exitcode 1 python -m pytest -q -x tests/gpu/test_horizontal.py
"""

from __future__ import annotations

import gc
import os
import zlib

import numpy as np
import pytest

from fusec import oracle
from fusec.cost.analytic import DEFAULT
from fusec.emit.program import generate
from fusec.frontend import load_script
from fusec.ir.plan import HorizontalPlan, ProgramPlan
from fusec.runtime.program import Program
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, ROOT, compiled_with_parts_apart, library, outputs_on_host

pytestmark = pytest.mark.gpu

QUICK = bool(os.environ.get("FUSEC_HORIZONTAL_QUICK"))
PATHS = {"two_gemv": ROOT / "scripts" / "horizontal" / "two_gemv.script",
         "gemv_dot": ROOT / "scripts" / "horizontal" / "gemv_dot.script",
         "bicgk": ROOT / "scripts" / "bicgk.script",
         "gesummv": ROOT / "scripts" / "gesummv.script"}
# Sizes where the parts' grids differ; where each part has sizes of its own, both ways round.
SIZES = {
    "two_gemv": [dict(m=1000, n=33, p=33, q=1000), dict(m=33, n=1000, p=4097, q=2047),
                 dict(m=4097, n=2047, p=1, q=1), dict(m=1, n=31, p=1000, q=1000)],
    "gemv_dot": [dict(m=1000, n=1000, k=33), dict(m=33, n=31, k=300001), dict(m=4097, n=2047, k=4097),
                 dict(m=1, n=1, k=1)],
    "bicgk": [dict(m=4097, n=33), dict(m=33, n=4097), dict(m=1000, n=1000), dict(m=4097, n=2047)],
    "gesummv": [dict(n=33), dict(n=1000), dict(n=4097)],
}
BOTH_WAYS = ("two_gemv", "gemv_dot")  # scripts whose parts have sizes of their own
SCRIPTS = tuple(PATHS)


def dag_of(script):
    return load_script(PATHS[script], library())


def sizes_of(script) -> list[dict[str, int]]:
    return SIZES[script][:2] if QUICK else SIZES[script]


def horizontal_combinations(script: str, dtype: str) -> list[ProgramPlan]:
    """Every combination with a horizontal kernel the space offers at three
    sizes (GESUMMV: each horizontal kernel with its best-predicted waxpby), the
    parts the other way round, and a bound low enough to spill."""
    dag = dag_of(script)
    parts = unfused_plan(dag, library()).kernels[:2]
    rest = unfused_plan(dag, library()).kernels[2:]
    plans: dict[ProgramPlan, None] = {ProgramPlan((HorizontalPlan(parts[::-1]),) + rest): None,
                                      ProgramPlan((HorizontalPlan(parts, 24),) + rest): None}
    for n in (1024, 4096, 16384):
        space = build_space(dag, library(), dtype, {s: n for s in dag.sizes}, DEFAULT)
        seen = set()
        for combination in space.ranked():
            kernels = [k for k in combination.plan.kernels if isinstance(k, HorizontalPlan)]
            if kernels and kernels[0] not in seen:
                seen.add(kernels[0])
                plans[combination.plan] = None
            if len(seen) == sum(len(space.options[h]) for h in space.horizontals):
                break
    out = list(plans)
    return out[:5] if QUICK else out


@pytest.fixture(scope="module")
def compiled():
    """(script, dtype) -> [(Program, the same kernels apart)], compiled up front in parallel."""
    return compiled_with_parts_apart(SCRIPTS, ("float32",) if QUICK else DTYPES, dag_of, horizontal_combinations,
                                     HorizontalPlan)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_horizontal_combination(script, dtype, compiled):
    if (script, dtype) not in compiled:
        pytest.skip("FUSEC_HORIZONTAL_QUICK: float32 only")
    pairs = compiled.pop((script, dtype))  # freed when the test ends
    dag = pairs[0][0].dag
    failures, ways = [], {}
    for sizes in sizes_of(script):
        inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(zlib.crc32(repr(sizes).encode())))
        expected = oracle.expect(dag, library(), inputs)
        for prog, sequential in pairs:
            plan = prog.generated.plan
            label = f"{plan.summary(dag)} at {sizes}"
            for kernel in prog.kernels:
                if getattr(kernel, "parts", None):
                    grids = tuple(p.grid(sizes) for p in kernel.parts)
                    ways.setdefault(plan, set()).add((grids[0] > grids[1]) - (grids[0] < grids[1]))
            outputs = outputs_on_host(prog.run(inputs, poison=True), prog)
            for check in oracle.check_outputs(dag, library(), inputs, outputs, dtype, expected=expected):
                if not check.passed:
                    failures.append(f"{label}: {check.name} {check.reason}")
            alone = outputs_on_host(sequential.run(inputs, poison=True), sequential)
            again = outputs_on_host(prog.run(inputs, poison=True), prog)
            for name in outputs:
                if not np.array_equal(outputs[name], alone[name]):
                    failures.append(f"{label}: {name} differs from the same kernels one after another")
                if not np.array_equal(outputs[name], again[name]):
                    failures.append(f"{label}: {name} differs on a second run")
        for pair in pairs:
            for p in pair:
                p.release()
        gc.collect()
    assert not failures, f"{len(failures)} failures, first: " + "; ".join(failures[:3])
    # the parts really had different grid sizes: for every kernel both ways round where
    # the parts have sizes of their own; else for some kernels (identical parts on
    # matrices of one size have one grid)
    if script in BOTH_WAYS and not QUICK:
        for plan, signs in ways.items():
            assert {-1, 1} <= signs, f"{plan.summary(dag)}: grids differ one way only ({signs})"
    if not QUICK:  # the quick (sanitizer) selection may hold only kernels of equal grids
        assert any(signs - {0} for signs in ways.values()), "the parts always had the same grid"


def test_horizontal_program_on_device_arrays_and_repeated_calls():
    """Device arrays in place (PyCUDA), outputs as device arrays, many calls."""
    import pycuda.gpuarray as gpuarray

    from fusec.runtime import cuda
    dag = dag_of("gemv_dot")
    plan = ProgramPlan((HorizontalPlan(unfused_plan(dag, library()).kernels),))
    prog = Program(generate(dag, library(), plan, "float32"))
    sizes = dict(m=300, n=200, k=100000)
    inputs = oracle.random_inputs(dag, sizes, "float32", np.random.default_rng(3))
    expected = oracle.expect(dag, library(), inputs)
    with cuda.context():
        device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
        for _ in range(5):
            y, r = prog.run(device, poison=True)
            outputs = {"y": y.get(), "r": r.get()}
            assert all(c.passed for c in oracle.check_outputs(dag, library(), inputs, outputs, "float32",
                                                              expected=expected))
        times = prog.time(device, repeat=5, host=False)
        assert len(times) == 5 and all(t > 0 for t in times)
        prog.release()
