"""bench.gemver_l2 without a GPU: its rewrites of GEMVER's two kernels, and that nvcc takes them."""

from __future__ import annotations

import pytest

import fusec
from bench import gemver_l2
from fusec import nvcc
from helpers import ROOT


@pytest.fixture(scope="module")
def gemver():
    """GEMVER fp32 in two launches, as tuned at n = 4096."""
    from fusec.cost.analytic import DEFAULT
    from fusec.space.combinations import build_space
    from fusec.frontend import load_script
    from helpers import library
    dag = load_script(ROOT / "scripts" / "gemver.script", library())
    plan = build_space(dag, library(), "float32", {s: 1000 for s in dag.sizes}, DEFAULT, striped=False).best().plan
    return fusec.compile(ROOT / "scripts" / "gemver.script", dtype="float32", plan=plan)


def test_each_variant_changes_what_it_says(gemver):
    source = gemver.source
    assert len(gemver.generated.kernels) == 2 and source.count("#define STREAM_MATRIX 0") == 1
    assert gemver_l2.variant(source, "fusec") == source
    streamed = gemver_l2.variant(source, "A evict-first")
    assert streamed.count("#define STREAM_MATRIX 1") == source.count("#define STREAM_MATRIX 1") + 1
    assert "#define STREAM_MATRIX 0" not in streamed  # kernel 0's, the one that stores B
    kept = gemver_l2.variant(source, "B stores evict-last")
    assert gemver_l2.PLAIN_STORE not in kept and kept.count("evict_last") == 1
    both = gemver_l2.variant(source, "both")
    assert gemver_l2.PLAIN_STORE not in both and both.count("#define STREAM_MATRIX 1") == streamed.count(
        "#define STREAM_MATRIX 1")


def test_a_source_without_the_store_routine_is_refused():
    with pytest.raises(AssertionError, match="update bench.gemver_l2"):
        gemver_l2.variant("// no store here", "fusec")


@pytest.mark.nvcc
@pytest.mark.parametrize("name", gemver_l2.VARIANTS)
def test_every_variant_compiles(gemver, name):
    compiled = nvcc.compile_cubin(gemver_l2.variant(gemver.source, name), arch="sm_90", use_cache=False)
    assert set(compiled.resources) == {k.name for k in gemver.generated.kernels}
