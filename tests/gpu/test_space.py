"""GPU tier of the optimization space: every implementation it can emit is correct.

Each script's space is ranked for the largest test size; all its combinations
run where there are at most 100, else the 10 best-predicted plus a seeded
uniform sample of 100 others. Each runs at three sizes in both precisions
against the float64 oracle, with poisoned outputs. Programs of one script
are compiled together, nvcc in parallel.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from fusec import nvcc, oracle
from fusec.cost.analytic import DEFAULT
from fusec.emit.program import generate
from fusec.runtime.program import Program
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, library, program, script_names

pytestmark = pytest.mark.gpu

ALL_UP_TO, TOP, SAMPLE = 100, 10, 100


def _sizes(dag) -> list[dict[str, int]]:
    if len(dag.sizes) == 2:
        return [{s: 33 for s in dag.sizes}, {s: 1000 for s in dag.sizes}, dict(zip(dag.sizes, (4097, 2047)))]
    return [{s: n for s in dag.sizes} for n in (33, 1000, 4097)]


def chosen_combinations(script: str, dtype: str):
    dag = program(script, dtype).dag
    space = build_space(dag, library(), dtype, _sizes(dag)[-1], DEFAULT)
    if space.combination_count <= ALL_UP_TO:
        return list(space.ranked())
    ranked = space.ranked()
    top = [next(ranked) for _ in range(TOP)]
    rng = np.random.default_rng(int(os.environ.get("FUSEC_SPACE_SEED", "20261122")))
    return top + space.sample(SAMPLE, rng, exclude={c.plan for c in top})


@pytest.fixture(scope="module")
def compiled_programs():
    """script, dtype -> [(rank, Program)], all compiled up front in parallel."""
    from fusec.runtime import cuda
    with cuda.context() as ctx:
        arch = cuda.arch_of(ctx)
    out, sources = {}, []
    for script in script_names():
        for dtype in DTYPES:
            dag = program(script, dtype).dag
            programs = [Program(generate(dag, library(), c.plan, dtype))
                        for c in chosen_combinations(script, dtype)]
            out[script, dtype] = programs
            sources += [p.source for p in programs]
    nvcc.compile_many(sources, arch)  # fills the cache that Program._load reads
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_every_chosen_combination(script, dtype, compiled_programs):
    programs = compiled_programs.pop((script, dtype))  # freed when the test ends
    dag = programs[0].dag
    failures = []
    for sizes in _sizes(dag):
        rng = np.random.default_rng(len(failures) + sum(sizes.values()))
        inputs = oracle.random_inputs(dag, sizes, dtype, rng)
        reference = oracle.evaluate(dag, library(), inputs)
        gauge = oracle.gauge(dag, library(), inputs)
        k = oracle.sum_lengths(dag, library(), sizes)
        for rank, prog in enumerate(programs):
            results = prog.run(inputs, poison=True)
            results = results if isinstance(results, tuple) else (results,)
            for value, computed in zip(dag.outputs, results):
                ratio = oracle.test_ratio(np.asarray(computed), reference[value], gauge[value], dtype)
                if not ratio < oracle.threshold(k[value]):
                    failures.append(f"combination #{rank} {prog.generated.plan} at {sizes}:"
                                    f" {dag.value(value).name} ratio {ratio:.3g}")
        for prog in programs:
            prog.release()
        gc.collect()
    assert not failures, f"{len(failures)} failures, first: " + "; ".join(failures[:3])
