"""GPU tier of held fusion: a producer and its consumer in one launch of
resident blocks, one grid barrier between them, tiles held on chip across it.

For GEMVER, SGEMVT and ATAX in both precisions: the held options of the
space at n = 4096 that hold the most, hold nothing in registers, hold
nothing at all, and the best-predicted one. Each runs at sizes with whole
tiles, ragged edges (held tiles are whole ones; the edges go through
memory), fewer blocks than SMs and one block, with outputs and fusec's
buffers poisoned, and is judged by the float64 oracle; its outputs must
equal bit for bit those of the same two kernels launched one after another,
and again on a second and third run (the barrier's count only grows). So
are the held options of two band kernels that hold the most and are
best-predicted, but where their producer adds column sums with atomics
(GEMVER's x) only the oracle judges them. A size
whose grid cannot be resident is refused before anything is launched.

FUSEC_HELD_QUICK=1 keeps float32 and the two ragged sizes: for runs under compute-sanitizer::

    FUSEC_LINEINFO=1 FUSEC_HELD_QUICK=1 compute-sanitizer --tool racecheck \\
        --error-exitcode 1 python -m pytest -q -x tests/gpu/test_held.py
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
from fusec.errors import FusecError
from fusec.frontend import load_script
from fusec.ir.plan import HeldPlan, ProgramPlan
from fusec.library.model import Geometry
from fusec.runtime.program import Program
from fusec.space.combinations import build_space
from fusec.space.striped import StripedFusion
from tests.helpers import DTYPES, ROOT, compiled_with_parts_apart, library, outputs_on_host

pytestmark = pytest.mark.gpu

QUICK = bool(os.environ.get("FUSEC_HELD_QUICK"))
SCRIPTS = ("gemver", "sgemvt", "atax")
# whole tiles; ragged rows and columns; a few blocks; one block; rows as wide as a band
# kernel holds (it holds only whole instances) with ragged rows
SIZES = [dict(m=4096, n=4096), dict(m=1000, n=777), dict(m=4097, n=33), dict(m=1, n=300),
         dict(m=3001, n=4096)]


def dag_of(script):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def held_plans(script: str, dtype: str) -> list[ProgramPlan]:
    """Of the tile kernels' held options: the best-predicted, the one that holds most,
    one with nothing in registers and the best with nothing held; then of the band
    kernels' options the best-predicted, the one that holds most, and the
    best-predicted with its held instances stored after the barrier, with its column
    sums finished after it, with both and with neither (where the script has them). Tile plans first;
    FUSEC_HELD_QUICK: two tile plans, the best band plan and the one with both options."""
    dag = dag_of(script)
    space = build_space(dag, library(), dtype, {s: 4096 for s in dag.sizes}, DEFAULT, horizontal=False)
    options = [o for slot in space.options if isinstance(slot, StripedFusion)
               for o in space.options[slot] if isinstance(o[0], HeldPlan) and len(o[0].calls) == len(dag.calls)]
    tiles = [o for o in options if o[0].producer.geometry is Geometry.TILE]
    picks = {tiles[0][0]: None}
    picks[max(tiles, key=lambda o: (o[1].held_fraction(), -o[2]))[0]] = None
    picks[next(o[0] for o in tiles if o[0].registers == 0 and o[0].shared)] = None
    picks[dataclasses.replace(tiles[0][0], registers=0, shared=0)] = None  # one barrier, nothing held
    bands = [o for o in options if o[0].producer.geometry is Geometry.BAND]
    band_picks = {bands[0][0]: None}
    band_picks[max(bands, key=lambda o: (o[1].held_fraction(), -o[2]))[0]] = None
    options_after = {}
    for stores, finish in ((True, True), (True, False), (False, True), (False, False)):
        found = next((o[0] for o in bands if (o[0].stores_after, o[0].finish_after) == (stores, finish)), None)
        if found is not None:
            options_after[found] = None
    plans = [ProgramPlan((p,)) for p in picks]
    band_plans = [ProgramPlan((p,)) for p in band_picks]
    after_plans = [ProgramPlan((p,)) for p in options_after]
    return plans[:2] + band_plans[:1] + after_plans[:1] if QUICK else plans + band_plans + after_plans


@pytest.fixture(scope="module")
def compiled():
    """(script, dtype) -> [(Program, the same kernels apart)], compiled up front in parallel."""
    return compiled_with_parts_apart(SCRIPTS, ("float32",) if QUICK else DTYPES, dag_of, held_plans, HeldPlan)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_held_plan(script, dtype, compiled):
    if (script, dtype) not in compiled:
        pytest.skip("FUSEC_HELD_QUICK: float32 only")
    pairs = compiled.pop((script, dtype))
    dag = pairs[0][0].dag
    failures = []
    for sizes in SIZES[1:3] + SIZES[4:] if QUICK else SIZES:
        inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(zlib.crc32(repr(sizes).encode())))
        expected = oracle.expect(dag, library(), inputs)
        for prog, alone in pairs:
            label = f"{prog.generated.plan.summary(dag)} at {sizes}"
            outputs = outputs_on_host(prog.run(inputs, poison=True), prog)
            for check in oracle.check_outputs(dag, library(), inputs, outputs, dtype, expected=expected):
                if not check.passed:
                    failures.append(f"{label}: {check.name} {check.reason}")
            if not prog.generated.reproducible:
                # a band producer adds its column sums with atomics: the oracle judges it, on
                # three launches in a row (accumulators cleared by the launch, or in halves
                # that alternate between launches with finish_after)
                for again in range(2):
                    repeated = outputs_on_host(prog.run(inputs, poison=True), prog)
                    for check in oracle.check_outputs(dag, library(), inputs, repeated, dtype, expected=expected):
                        if not check.passed:
                            failures.append(f"{label}, run {again + 2}: {check.name} {check.reason}")
                continue
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


def test_a_grid_that_cannot_be_resident_is_refused():
    """At n = 16384 the n = 4096 plan's grid is 16 times larger: refused, naming the
    kernel, before any launch (a launch would wait at the barrier for ever)."""
    dag = dag_of("gemver")
    prog = Program(generate(dag, library(), held_plans("gemver", "float32")[0], "float32"))
    sizes = dict(m=16384, n=16384)
    inputs = oracle.random_inputs(dag, sizes, "float32", np.random.default_rng(3))
    with pytest.raises(FusecError, match=prog.kernels[0].name):
        prog.run(inputs)
    small = dict(m=512, n=512)  # the program still runs where it fits
    inputs = oracle.random_inputs(dag, small, "float32", np.random.default_rng(4))
    outputs = outputs_on_host(prog.run(inputs), prog)
    assert all(c.passed for c in oracle.check_outputs(dag, library(), inputs, outputs, "float32"))
