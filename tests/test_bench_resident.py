"""bench.resident without a GPU: its kernel shapes fit the sizes it runs, and nvcc takes every one."""

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
