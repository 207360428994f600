"""experiments.finish_cost rewrites generated CUDA by its text: each variant must find what it
rewrites in today's generated code (or say the program has none), and the rewritten code must
still compile. A change to the finish's emission that the study no longer matches fails here,
on the CPU, instead of on the GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusec import compile as fusec_compile
from fusec import nvcc

finish_cost = pytest.importorskip("experiments.finish_cost",
                                  reason="experiments/ is beside the source, not in the wheel")

# A tile kernel with two reductions finished across blocks (reproducible: no band atomics),
# and a vector kernel whose dot may run as one block.
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CASES = (("bicgk", {"m": 4096, "n": 4096}), ("axpydot", {"n": 1 << 20}))


def generated(script: str, sizes: dict) -> str:
    return fusec_compile(SCRIPTS / f"{script}.script", dtype="float32", sizes=sizes, gpu="h200",
                         reproducible=True).source


@pytest.mark.parametrize("script,sizes", CASES)
def test_every_variant_rewrites_what_it_names(script, sizes):
    source = generated(script, sizes)
    assert finish_cost.FINISH in source
    for name in finish_cost.VARIANTS[1:]:
        rewritten = finish_cost.variant(source, name)
        if name in ("columns first", "accumulated") and script == "axpydot":
            assert rewritten is None  # a vector kernel: no grid of tiles, no tile partials
            continue
        assert rewritten is not None and rewritten != source, name
    assert not finish_cost.FENCE.search(finish_cost.variant(source, "no fence"))
    per_warp = finish_cost.variant(source, "fence per warp")
    assert not finish_cost.FENCE.search(per_warp) and "  __threadfence();\n  BARRIER();\n" in per_warp
    assert "fusec_sum_partials<BLOCK>(" not in finish_cost.variant(source, "no sums")
    assert "fusec_sum_partials<BLOCK>(" not in finish_cost.variant(source, "no finish")


def test_columns_first_walks_down_each_column_of_tiles():
    rewritten = finish_cost.variant(generated(*CASES[0]), "columns first")
    assert "block_row = fusec_item % grid_rows;" in rewritten
    assert "block_col = fusec_item / grid_rows;" in rewritten and "/ grid_cols;" not in rewritten


def test_the_accumulated_variant_reads_one_partial_and_keeps_it_zero():
    rewritten = finish_cost.variant(generated(*CASES[0]), "accumulated")
    assert rewritten.count("atomicAdd(y + ") == 2  # the rows' and the columns' partial stores
    assert "block_col * TILE_ROWS" not in rewritten and "block_row * TILE_COLS" not in rewritten
    assert rewritten.count("fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * TILE_ROWS, 1, ") == 1
    assert rewritten.count("fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * TILE_COLS, 1, ") == 1
    assert rewritten.count("tile_partials[i] = real(0);  // kept zero") == 2
    assert "fusec_discard<BLOCK>(tile_partials" not in rewritten


@pytest.mark.nvcc
@pytest.mark.parametrize("script,sizes", CASES)
def test_every_variant_compiles(script, sizes):
    source = generated(script, sizes)
    for name in finish_cost.VARIANTS[1:]:
        rewritten = finish_cost.variant(source, name)
        if rewritten is not None:
            nvcc.compile_cubin(rewritten, arch="sm_90", use_cache=False)
