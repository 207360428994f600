"""bench.one_barrier without a GPU: which shapes run at which size, and nvcc takes every kernel."""

from __future__ import annotations

import pytest

from bench import one_barrier
from fusec import nvcc

H100_SMS = 132


def sizes():
    return [(d, int(n)) for d, n in (c.split(":") for c in one_barrier.CASES)]


def test_every_shape_runs_at_its_case_with_every_row_owned_and_room_for_its_rows():
    for dtype, n in sizes():
        for shape in one_barrier.SHAPES[dtype]:
            fits = one_barrier.shape_at(dtype, n, H100_SMS, shape)
            assert not isinstance(fits, str), (dtype, n, shape, fits)
            grid, shared = fits
            block, rrows, srows, unroll, deal, blocks, stop, defer = shape
            assert grid == (blocks or H100_SMS)
            assert rrows + srows + 4 <= one_barrier.RMAX if deal else -(-n // grid) <= one_barrier.RMAX
            assert rrows % unroll == 0 and stop in (0, 1, 2) and defer in (0, 1)
            size = 4 if dtype == "float32" else 8
            assert shared == srows * n * size + one_barrier.RMAX * block // 32 * size <= one_barrier.MAX_SHARED


def test_a_shape_that_does_not_fit_says_why():
    assert one_barrier.shape_at("float32", 1000, H100_SMS, (512, 0, 13, 2, 0, 0, 0, 0)) == "does not tile n = 1000"
    assert one_barrier.shape_at("float32", 4096, H100_SMS, (512, 0, 14, 2, 0, 0, 0, 0)) == "233472 bytes of shared memory"
    assert one_barrier.shape_at("float32", 16384, H100_SMS, (512, 0, 1, 2, 0, 0, 0, 0)) == "125 rows per block, more than 64"
    assert one_barrier.shape_at("float32", 16384, H100_SMS, (512, 0, 1, 2, 1, 0, 0, 0)) == (H100_SMS, 69632)
    assert one_barrier.shape_at("float32", 2048, H100_SMS, (512, 0, 61, 2, 1, 0, 0, 0)) == (
        "61 rows held per block and 4 dealt, more than 64")
    assert one_barrier.shape_at("float32", 4096, 100, (512, 0, 13, 2, 0, 128, 0, 0)) == "128 blocks, more than the 100 SMs"


def instantiations():
    names = set()
    for dtype, n in sizes():
        for shape in one_barrier.SHAPES[dtype]:
            for gemver in (True, False):
                names.add(one_barrier.kernel_name(dtype, n, shape, gemver))
    return sorted(names)


@pytest.mark.nvcc
def test_nvcc_compiles_every_kernel_for_sm_90():
    keep = ",\n  ".join(f"(const void*)&{name}" for name in instantiations())
    source = one_barrier.SOURCE.read_text() + f"\nconst void* bench_one_barrier_kernels[] = {{\n  {keep}}};\n"
    assert all(nvcc.compile_many([source], "sm_90"))


@pytest.mark.parametrize("spec", ["float16:4096", "float32", "float32:n", "float64:0"])
def test_a_bad_case_is_refused_before_anything_runs(spec, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["one_barrier", "--case", "float32:4096", "--case", spec])
    monkeypatch.setattr(one_barrier, "measure", lambda *a: pytest.fail("measured before checking"))
    with pytest.raises(SystemExit) as exit:
        one_barrier.main()
    assert exit.value.code == 2 and f"--case {spec!r}" in capsys.readouterr().err


@pytest.mark.parametrize("shape", ["512,6,13,2", "512,6,13,2,0,0,0,9", "a,b"])
def test_a_shape_not_in_the_table_is_refused_before_anything_runs(shape, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["one_barrier", "--shape", shape])
    monkeypatch.setattr(one_barrier, "measure", lambda *a: pytest.fail("measured before checking"))
    with pytest.raises(SystemExit) as exit:
        one_barrier.main()
    assert exit.value.code == 2 and "--shape" in capsys.readouterr().err
