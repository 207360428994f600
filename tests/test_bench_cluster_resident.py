"""bench.cluster_resident without a GPU: which shapes run at which size, and nvcc takes every kernel."""

from __future__ import annotations

import pytest

from bench import cluster_resident
from fusec import nvcc


def sizes():
    return [(d, int(n)) for d, n in (c.split(":") for c in cluster_resident.CASES)]


def test_every_shape_runs_somewhere_and_a_cluster_covers_every_row():
    for dtype, shapes in cluster_resident.SHAPES.items():
        for shape in shapes:
            fitting = [(n, cluster_resident.shape_at(dtype, n, shape)) for d, n in sizes() if d == dtype]
            assert any(not isinstance(fits, str) for _, fits in fitting), (dtype, shape)
            for n, fits in fitting:
                if isinstance(fits, str):
                    continue
                iters, width, shared = fits
                cluster, block, lanes, pref, hold, *_ = shape
                assert cluster * iters * (block // lanes) == n and n % width == 0
                assert shared == (pref + 1 + hold) * iters * block * 16 <= cluster_resident.MAX_SHARED


def test_a_shape_that_does_not_fit_says_why():
    assert cluster_resident.shape_at("float32", 1000, (16, 512, 4, 1, 1, 1, 0, 0)) == "does not tile n = 1000"
    assert "bytes of shared memory" in cluster_resident.shape_at("float32", 16384, (8, 512, 8, 1, 1, 1, 0, 0))


def instantiations():
    names = []
    for dtype, n in sizes():
        ctype = "float" if dtype == "float32" else "double"
        for shape in cluster_resident.SHAPES[dtype]:
            fits = cluster_resident.shape_at(dtype, n, shape)
            if isinstance(fits, str):
                continue
            cluster, block, lanes, pref, hold, sync, wide, warm = shape
            for gemver in ("true", "false"):
                names.append(f"cluster_resident<{ctype},{cluster},{block},{lanes},{fits[0]},{pref},{gemver},"
                             f"{hold},{sync},{wide},{warm}>")
    return sorted(set(names))


@pytest.mark.nvcc
def test_nvcc_compiles_every_kernel_for_sm_90():
    keep = ",\n  ".join(f"(const void*)&{name}" for name in instantiations())
    source = cluster_resident.SOURCE.read_text() + f"\nconst void* bench_cluster_kernels[] = {{\n  {keep}}};\n"
    assert all(nvcc.compile_many([source], "sm_90"))


@pytest.mark.parametrize("spec", ["float16:4096", "float32", "float32:n", "float64:0"])
def test_a_bad_case_is_refused_before_anything_runs(spec, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["cluster_resident", "--case", "float32:4096", "--case", spec])
    monkeypatch.setattr(cluster_resident, "measure", lambda *a: pytest.fail("measured before checking"))
    with pytest.raises(SystemExit) as exit:
        cluster_resident.main()
    assert exit.value.code == 2 and f"--case {spec!r}" in capsys.readouterr().err
