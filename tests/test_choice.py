"""The predictor's choice, checked by ptxas: fusec.compile takes the best-predicted
combination whose kernels compile without spilling registers (fusec.tune.untuned.SPILL_CHECKS)."""

from __future__ import annotations

import re

import pytest

from fusec import nvcc
from fusec.api import build_program
from fusec.cost.perfdb import predictor_for
from fusec.emit.program import generate
from fusec.frontend import load_script
from fusec.nvcc import Compiled, Resources
from fusec.space.combinations import build_space
from fusec.tune import untuned
from tests.helpers import ROOT, library

GPU = "h100-80gb-hbm3"  # the bundled performance database's


def _dag(script: str):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def _fake_nvcc(monkeypatch, spills):
    """nvcc that reports 448 bytes spilled for the kernels ``spills(source, name)``
    names, none for the others; the sources it was given."""
    seen = []

    def compile_cubin(source, arch=nvcc.DEFAULT_ARCH, lineinfo=False, use_cache=True):
        seen.append(source)
        names = re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", source)
        resources = {n: Resources(128, 0, 64, 224, 224) if spills(source, n) else Resources(64, 0, 0, 0, 0)
                     for n in names}
        return Compiled(b"", arch, "", resources)
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: "/usr/bin/nvcc")
    monkeypatch.setattr(nvcc, "compile_cubin", compile_cubin)
    return seen


@pytest.mark.slow
def test_a_combination_whose_kernel_spills_gives_way_to_the_next_without_it(monkeypatch):
    dag = _dag("gesummv")
    sizes = {s: 6000 for s in dag.sizes}
    space = build_space(dag, library(), "float32", sizes, predictor_for(library(), GPU))
    first = space.best()
    first_program = generate(dag, library(), first.plan, "float32")
    spilling, spilling_source = first_program.kernels[0], first_program.sources[0]
    seen = _fake_nvcc(monkeypatch, lambda source, name: name == spilling.name and spilling_source in source)
    program, entry = build_program(dag, library(), "float32", sizes=sizes, gpu=GPU)
    assert entry is None
    assert first.plan.kernels[0] not in program.generated.plan.kernels  # the spilling kernel is gone
    assert program.predicted.startswith("predicted rank ")
    assert f"better-ranked combinations spill registers ({spilling.name} 448 bytes)" in program.predicted
    assert f"plan: {program.predicted}" in program.describe(sizes)
    assert len(seen) == 2  # the first choice, then the next free of its kernel
    # the next is the best-ranked combination without that kernel
    expected = next(c for c in space.ranked() if first.plan.kernels[0] not in c.plan.kernels)
    assert program.generated.plan == expected.plan


def test_where_every_combination_checked_spills_the_first_is_kept(monkeypatch):
    dag = _dag("sgemv")
    sizes = {s: 6000 for s in dag.sizes}
    space = build_space(dag, library(), "float32", sizes, predictor_for(library(), GPU))
    seen = _fake_nvcc(monkeypatch, lambda source, name: True)
    program, _ = build_program(dag, library(), "float32", sizes=sizes, gpu=GPU)
    assert len(seen) == untuned.SPILL_CHECKS
    assert program.generated.plan == space.best().plan
    assert program.predicted == "predicted (rank 1; its kernels spill registers)"


def test_without_nvcc_the_first_choice_is_taken_unchecked(monkeypatch):
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: None)
    dag = _dag("bicgk")
    sizes = {s: 4096 for s in dag.sizes}
    program, _ = build_program(dag, library(), "float32", sizes=sizes, gpu=GPU)
    space = build_space(dag, library(), "float32", sizes, predictor_for(library(), GPU))
    assert program.generated.plan == space.best().plan
    assert program.predicted == "predicted (rank 1; registers not checked: no nvcc)"


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gesummv_at_n_6000_compiles_without_spills(dtype):
    """The case that showed it: GESUMMV at fp32 n = 6000 was first priced as a band kernel
    that loads both matrices ahead, which spilled (measured 1.50x the space's best)."""
    dag = _dag("gesummv")
    sizes = {s: 6000 for s in dag.sizes}
    program, _ = build_program(dag, library(), dtype, sizes=sizes, gpu=GPU)
    compiled = nvcc.compile_cubin(program.source)
    for kernel in program.kernels:
        used = compiled.resources[kernel.name]
        assert used.spill_stores + used.spill_loads == 0, (kernel.name, used)


def test_fusec_tune_reports_the_untuned_choice_not_a_spilling_rank_1(monkeypatch):
    """``fusec tune``'s 'first choice' is what fusec.compile takes untuned: where rank 1
    spills, the next without its kernel, and the report says why."""
    from fusec.tune.search import OK, Measurement, Row, TuneResult, report, untuned_choice
    dag = _dag("sgemv")
    sizes = {s: 6000 for s in dag.sizes}
    predictor = predictor_for(library(), GPU)
    plans = [c.plan for c in build_space(dag, library(), "float32", sizes, predictor).top(3)]
    rows = tuple(Row(i + 1, p, 1e-5, Measurement(OK, t), 1_000_000) for i, (p, t) in
                 enumerate(zip(plans, (30e-6, 25e-6, 20e-6))))
    first_source = generate(dag, library(), plans[0], "float32").sources[0]
    _fake_nvcc(monkeypatch, lambda source, name: first_source in source)
    first = untuned_choice(dag, library(), "float32", sizes, predictor, rows)
    assert first is rows[1]
    result = TuneResult(dag, "float32", sizes, "H100", "fake", rows, rows[2], None, None, "not asked to", 1.0,
                        first=first)
    assert ("the predictor's first choice (rank 2: better-ranked ones spill registers) measured 25.0 us"
            " (1.25x the winner's time)") in report(result)
