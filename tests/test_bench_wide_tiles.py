"""bench.wide_tiles without a GPU: its rewrites of fusec's SGEMV kernel, and that nvcc takes them."""

from __future__ import annotations

import re

import pytest

import fusec
from bench import wide_tiles
from fusec import nvcc
from helpers import ROOT

CASES = (("float32", 4096), ("float32", 16384), ("float64", 8192))


def generated(dtype: str, n: int):
    predicted = fusec.compile(ROOT / "scripts" / "sgemv.script", dtype=dtype, sizes={"m": n, "n": n}, tuned=False,
                              gpu="h100")
    program = wide_tiles.tile_base(predicted, n, dtype, gpu="h100")
    assert "each block walks ITERS tiles along the columns" in program.source
    return program


def fitting(n: int, vec: int):
    return [wide_tiles.Wide(t, w, r, d) for t, w, r in wide_tiles.WIDE for d in (False, True)
            if wide_tiles.Wide(t, w, r, d).fits(n, vec)]


def macro(source: str, name: str) -> int:
    return int(re.search(rf"#define {name} (\d+)\n", source).group(1))


@pytest.mark.parametrize("dtype, n", CASES)
def test_every_wide_shape_covers_whole_rows(dtype, n):
    vec = 4 if dtype == "float32" else 2
    shapes = fitting(n, vec)
    assert len(shapes) == 2 * len(wide_tiles.WIDE)  # every shape runs at the sizes measured
    program = generated(dtype, n)
    for wide in shapes:
        source = wide_tiles.rewrite(program.source, wide, n, vec)
        assert macro(source, "BLOCK_X") * macro(source, "BLOCK_Y") == macro(source, "BLOCK") == wide.threads
        assert macro(source, "TILE_COLS") * macro(source, "ITERS") == n  # one block per row tile
        assert macro(source, "TILE_ROWS") % macro(source, "BLOCK_Y") == 0
        assert "  rows_partial_store(r_" not in source and "#pragma unroll 4\n  for (int it = 0; it < ITERS;" in source


def test_direct_drops_the_fence_ticket_and_finish_and_nothing_else():
    program = generated("float32", 4096)
    kept = wide_tiles.rewrite(program.source, wide_tiles.Wide(256, 8, 4, False), 4096, 4)
    direct = wide_tiles.rewrite(program.source, wide_tiles.Wide(256, 8, 4, True), 4096, 4)
    for text in ("__threadfence();", "atomicAdd(", "fusec_sum_partials<BLOCK>(", "axpby_finish(acc"):
        assert text in kept and text not in direct.split("extern \"C\" __global__")[1]
    assert "wide_rows_store<false>(r_v5_z, ws_v5_z" in kept
    assert "wide_rows_store<true>(r_v5_z, g_v5_z, g_v2_y, v3_alpha, v4_beta, c);" in direct
    assert direct.count("{") == direct.count("}")


def test_a_shape_that_does_not_tile_is_left_out():
    assert not wide_tiles.Wide(256, 8, 1, True).fits(1000, 4)
    assert not wide_tiles.Wide(256, 8, 3, True).fits(4096, 4)  # 3 rows over one row of threads: fine; 4096 % 3: not
    assert not wide_tiles.Wide(256, 1, 4, True).fits(4096, 4)  # 8 rows of threads on a 4-row tile


def test_a_kernel_it_cannot_rewrite_is_an_error():
    program = generated("float32", 4096)
    with pytest.raises(AssertionError, match="walks the columns"):
        wide_tiles.rewrite(program.source.replace("along the columns", "along the rows"),
                           wide_tiles.Wide(256, 8, 1, True), 4096, 4)


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype, n", CASES)
def test_nvcc_compiles_every_rewrite_for_sm_90(dtype, n):
    vec = 4 if dtype == "float32" else 2
    program = generated(dtype, n)
    sources = [wide_tiles.rewrite(program.source, wide, n, vec) for wide in fitting(n, vec)]
    assert all(nvcc.compile_many(sources, "sm_90"))


@pytest.mark.nvcc
def test_nvcc_compiles_the_hand_kernels_for_sm_90():
    names = [f"row_per_block<{c},{t},{n // (t * v)}>" for c, v, n in (("float", 4, 4096), ("float", 4, 16384),
                                                                      ("double", 2, 8192))
             for t in wide_tiles.HAND_THREADS]
    keep = ",\n  ".join(f"(const void*)&{name}" for name in names)
    source = wide_tiles.SOURCE.read_text() + f"\nconst void* bench_wide_tiles_kernels[] = {{\n  {keep}}};\n"
    assert all(nvcc.compile_many([source], "sm_90"))


def test_a_size_the_rewrites_cannot_cover_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bench.wide_tiles", "--n", "5000"])
    with pytest.raises(SystemExit) as exit_:
        wide_tiles.main()
    assert exit_.value.code == 2 and "--n must be a multiple of 4096" in capsys.readouterr().err
