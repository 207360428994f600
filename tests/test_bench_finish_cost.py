"""bench.finish_cost without a GPU: its variants of generated programs, and that nvcc takes them."""

from __future__ import annotations

import argparse

import pytest

import fusec
from bench import finish_cost
from fusec import nvcc
from helpers import ROOT


def compiled(script: str, n: int = 1000):
    return fusec.compile(ROOT / "scripts" / f"{script}.script", dtype="float32", sizes={"n": n}, tuned=False)


@pytest.fixture(scope="module")
def bicgk():
    return compiled("bicgk")


def test_no_fence_drops_only_the_fence(bicgk):
    source = finish_cost.variant(bicgk.source, "no fence")
    kernel = 'extern "C" __global__'
    assert "__threadfence();" in bicgk.source.split(kernel)[1] and "__threadfence();" not in source.split(kernel)[1]
    assert source.split(kernel)[1].count("atomicAdd(") == bicgk.source.split(kernel)[1].count("atomicAdd(") == 2
    assert len(source.splitlines()) == len(bicgk.source.splitlines()) - 1


def test_fence_per_warp_is_the_earlier_order(bicgk):
    """Every thread fences, then the barrier: one fence line, moved before the barrier."""
    source = finish_cost.variant(bicgk.source, "fence per warp")
    kernel = source.split('extern "C" __global__')[1]
    assert "  __threadfence();\n  BARRIER();\n" in kernel and "if (threadIdx.x == 0) __threadfence();" not in kernel
    assert len(source.splitlines()) == len(bicgk.source.splitlines())


def test_horizontal_parts_fence_by_their_own_first_thread():
    program = compiled("gesummv", 4096)
    if "tid == 0) __threadfence();" not in program.source:
        pytest.skip("gesummv's ranked plan here is not a horizontal fusion")
    source = finish_cost.variant(program.source, "fence per warp")
    assert "__threadfence();" in source and "tid == 0) __threadfence();" not in source


def test_no_finish_keeps_the_partials_and_drops_the_rest(bicgk):
    source = finish_cost.variant(bicgk.source, "no finish")
    kernel = source.split('extern "C" __global__')[1]
    assert "rows_partial_store(" in kernel and "cols_partial_store(" in kernel
    for text in ("__threadfence();", "atomicAdd(", "fusec_sum_partials<BLOCK>("):
        assert text not in kernel
    assert source.count("{") == source.count("}") and source.count("#undef ITERS") == 1


def test_every_kernel_of_a_program_loses_its_finish():
    program = compiled("gesummv")  # two reductions: one kernel, or one per horizontal part
    source = finish_cost.variant(program.source, "no finish")
    assert program.source.count(finish_cost.FINISH) >= 1 and finish_cost.FINISH not in source
    assert source.count("{") == source.count("}")
    assert finish_cost.variant(program.source, "fusec") == program.source


def test_a_case_is_dtype_and_size():
    assert finish_cost.case("float64:8192") == ("float64", 8192)
    with pytest.raises(argparse.ArgumentTypeError, match="expected DTYPE:N"):
        finish_cost.case("8192")


@pytest.mark.nvcc
@pytest.mark.parametrize("script", finish_cost.SEQUENCES)
def test_nvcc_compiles_every_variant_for_sm_90(script):
    program = compiled(script)
    sources = [finish_cost.variant(program.source, name) for name in finish_cost.VARIANTS[1:]]
    assert all(nvcc.compile_many(sources, "sm_90"))


def test_striped_plans_are_recognised_and_left_out():
    from fusec.ir.plan import StripedPlan
    from fusec.frontend import load_script
    from fusec.space.combinations import build_space
    from fusec.cost.analytic import DEFAULT
    from helpers import library
    dag = load_script(ROOT / "scripts" / "sgemvt.script", library())
    space = build_space(dag, library(), "float32", {s: 16384 for s in dag.sizes}, DEFAULT)
    striped = next(c.plan for c in space.ranked() if any(isinstance(k, StripedPlan) for k in c.plan.kernels))
    program = fusec.compile(ROOT / "scripts" / "sgemvt.script", dtype="float32", plan=striped)
    assert finish_cost.FINISH in program.source
    assert finish_cost.why_left_out(program) == "striped: its consumers wait on the finish"
    assert finish_cost.why_left_out(compiled("bicgk")) is None
    assert finish_cost.why_left_out(compiled("vadd", 4096)) == "no reduction across blocks"
