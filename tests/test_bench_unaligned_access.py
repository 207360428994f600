"""bench.unaligned_access without a GPU: its grid, its table, and nvcc takes every kernel it times."""

from __future__ import annotations

import pytest

from bench import unaligned_access as U
from fusec import nvcc


def test_the_grid_covers_every_tile_once():
    assert U.grid(10000, 10001, 1) == 313 * 79  # 32-row tiles, 128-column tiles, the last ones ragged
    assert U.grid(10000, 10000, 4) == 79 * 79  # 313 row tiles, 4 to a block
    assert U.grid(32, 128, 4) == 1


def test_the_table_names_each_way():
    row = dict(kernel="madd", cols=10001, variant="piece_g", iters=4, us=438.84, gbps=2735.2, check="ok")
    assert U.table([row]).splitlines()[-1] == "| madd | 10001 | piece branch | 4 | 438.8 | 2735 | ok |"


@pytest.mark.nvcc
def test_every_kernel_compiles_for_sm_90():
    compiled = nvcc.compile_cubin(U.SOURCE.read_text(), arch="sm_90", use_cache=False)
    names = {f"{kernel}_{variant}" for kernel, variants in U.VARIANTS.items() for variant in variants}
    assert names <= set(compiled.resources)
