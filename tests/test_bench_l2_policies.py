"""bench.l2_policies without a GPU: its variants of generated programs, and that nvcc takes them."""

from __future__ import annotations

import pytest

import fusec
from bench import l2_policies
from fusec import nvcc
from helpers import ROOT


def compiled(script: str):
    return fusec.compile(ROOT / "scripts" / f"{script}.script", dtype="float64", sizes={"n": 1000},
                         tuned=False)


@pytest.fixture(scope="module")
def sgemv():
    return compiled("sgemv")


@pytest.fixture(scope="module")
def gemver():
    """GEMVER in two launches (its kernels' own policies; a striped kernel sets the producer's)."""
    from fusec.cost.analytic import DEFAULT
    from fusec.space.combinations import build_space
    from fusec.frontend import load_script
    from helpers import library
    dag = load_script(ROOT / "scripts" / "gemver.script", library())
    plan = build_space(dag, library(), "float64", {s: 1000 for s in dag.sizes}, DEFAULT, striped=False).best().plan
    return fusec.compile(ROOT / "scripts" / "gemver.script", dtype="float64", plan=plan)


def test_generated_programs_discard_their_partials(sgemv):
    assert l2_policies.variant(sgemv.source, "fusec") == sgemv.source
    assert "fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);" in sgemv.source


def test_write_back_removes_only_the_discard(sgemv):
    source = l2_policies.variant(sgemv.source, "write-back")
    assert l2_policies.DISCARD not in source and 'asm volatile("discard' not in source
    assert len(source.splitlines()) == len(sgemv.source.splitlines())
    assert "fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);" in source  # the call stays, empty


def test_evict_first_follows_what_a_kernel_stores(sgemv, gemver):
    # sgemv stores a vector: its matrix loads stream; GEMVER's first kernel stores B
    assert "#define STREAM_MATRIX 1" in sgemv.source and "#define STREAM_MATRIX 0" not in sgemv.source
    kernels = {k.name: k for k in gemver.generated.kernels}
    stores_matrix = {name for name, k in kernels.items()
                     if any(a.role == "out" and gemver.dag.value(a.value).kind.value == "matrix" for a in k.args)}
    assert stores_matrix and set(kernels) - stores_matrix
    for name, kernel in kernels.items():
        if kernel.plan.geometry.value == "tile":
            assert kernel.stream_matrices == (name not in stores_matrix)
            assert f"#define STREAM_MATRIX {int(kernel.stream_matrices)}" in gemver.generated.sources[kernel.index]
    off = l2_policies.variant(sgemv.source, "no evict-first")
    assert "#define STREAM_MATRIX 1" not in off and "#define STREAM_MATRIX 0" in off
    on = l2_policies.variant(gemver.source, "evict-first everywhere")
    assert "#define STREAM_MATRIX 0" not in on


def test_a_changed_support_file_is_noticed():
    with pytest.raises(AssertionError, match="update bench.l2_policies"):
        l2_policies.variant("// no discard here", "fusec")


@pytest.mark.nvcc
@pytest.mark.parametrize("name", l2_policies.VARIANTS)
def test_every_variant_compiles(gemver, name):
    compiled = nvcc.compile_cubin(l2_policies.variant(gemver.source, name), arch="sm_90", use_cache=False)
    assert set(compiled.resources) == {k.name for k in gemver.generated.kernels}
