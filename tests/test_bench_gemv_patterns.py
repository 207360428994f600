"""bench.gemv_patterns without a GPU: its arguments and which hand kernels fit a size."""

from __future__ import annotations

import sys

import pytest

from bench import gemv_patterns


def test_variants_cover_the_matrix_exactly():
    assert gemv_patterns.fitting(16384, 4) == list(gemv_patterns.VARIANTS)
    assert gemv_patterns.fitting(8192, 2) == list(gemv_patterns.VARIANTS)
    small = gemv_patterns.fitting(4096, 4)
    assert (8, 8, 8, 16, 1) not in small  # 16 tiles of 1024 columns: wider than the matrix
    for rows, _, u, iters, _ in small:
        assert 4096 % rows == 0 and 4096 % (128 * u * iters) == 0


def test_a_size_the_kernels_cannot_cover_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gemv_patterns", "--n", "1000"])
    with pytest.raises(SystemExit) as exc:
        gemv_patterns.main()
    assert exc.value.code == 2
    assert "--n must be a multiple of 4096" in capsys.readouterr().err
