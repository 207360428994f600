"""bench.resident without a GPU: its kernel shapes fit the sizes it runs, nvcc takes every one, and
its table shows a with-host column only where those times were taken."""

from __future__ import annotations

import pytest

from bench import resident
from fusec import nvcc


@pytest.mark.parametrize("dtype", sorted(resident.SHAPES))
def test_every_shape_runs_at_its_size(dtype):
    n = resident.SIZES[dtype]
    for kernel, *shape in resident.SHAPES[dtype]:
        fits = resident.layout(dtype, tuple(shape), n)
        assert not isinstance(fits, str), (kernel, shape, fits)
        blocks, stripes, shared = fits
        assert blocks <= 132 and stripes * (n // stripes) == n and shared <= resident.MAX_SHARED


def test_a_shape_that_does_not_fit_says_why():
    assert resident.layout("float32", (256, 16, 8, 2, 2), 1000) == "does not tile n = 1000"
    assert "bytes of shared memory" in resident.layout("float32", (512, 32, 8, 3, 3), 16384)


def test_the_lockstep_kernel_is_float_only():
    assert all(k != "resident_ll" for k, *_ in resident.SHAPES["float64"])
    assert resident.instantiation("resident_ll", "float", (256, 16, 8, 2, 2), True) == "resident_ll<256,16,8,2,2,true>"
    assert (resident.instantiation("resident_fixed", "double", (256, 32, 8, 2, 2), False)
            == "resident_fixed<double,256,32,8,2,2,false>")


@pytest.mark.nvcc
def test_nvcc_compiles_every_kernel_for_sm_90():
    names = [resident.instantiation(k, "float" if d == "float32" else "double", tuple(s), g)
             for d in resident.SHAPES for k, *s in resident.SHAPES[d] for g in (True, False)]
    keep = ",\n  ".join(f"(const void*)&{name}" for name in names)
    source = resident.SOURCE.read_text() + f"\nconst void* bench_resident_kernels[] = {{\n  {keep}}};\n"
    assert all(nvcc.compile_many([source], "sm_90"))


def _fake_cupy(monkeypatch):
    import sys
    import types
    runtime = types.SimpleNamespace(getDeviceProperties=lambda i: {"name": b"Test GPU"})
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))


def _row(contender, gpu, host):
    return {"script": "gemver", "dtype": "float32", "n": 4096, "contender": contender, "detail": "d",
            "gpu_us": gpu, "floor_us": 40.0, "of_floor": gpu / 40.0, "host_us": host, "error": 0.0}


@pytest.mark.parametrize("with_host", [True, False])
def test_the_table_has_a_with_host_column_only_where_times_were_taken(tmp_path, monkeypatch, with_host):
    import argparse
    _fake_cupy(monkeypatch)
    rows = [_row("fusec (tuned)", 70.0, 78.5 if with_host else None),
            _row("kernel", 60.0, 66.25 if with_host else None), _row("kernel pass 1", 50.0, None)]
    args = argparse.Namespace(out=tmp_path, name="t", dtype="float32", repeat=20)
    resident.write(args, rows, {"float32": 2800.0})
    table = [line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("|")]
    assert ("with host µs" in table[0]) is with_host
    assert all(line.count("|") == table[0].count("|") for line in table)
    kernel = next(line for line in table if line.startswith("| kernel |"))
    assert kernel.endswith("| 60.0 | 1.50 | 0.86 | 66.2 |" if with_host else "| 60.0 | 1.50 | 0.86 |")
