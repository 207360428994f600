"""bench.one_pass_atax without a GPU: its shapes, and nvcc takes every kernel it times without spilling."""

from __future__ import annotations

import re

import pytest

from bench import one_pass_atax as O
from bench.band import parse_case
from fusec import nvcc


def test_pieces_tile_the_row_and_fit_in_registers_or_the_shape_is_left_out():
    assert O.pieces("float32", 4096, (512, 2)) == 2  # 512 threads x 2 x 4 floats
    assert O.pieces("float32", 16384, (512, 1)) == 8  # 8 x 4 x 3 + 32 = 128 registers of 128
    assert O.pieces("float32", 16384, (512, 2)) is None  # 192: past 128
    assert O.pieces("float64", 8192, (256, 1)) == 16  # 224 of 255
    assert O.pieces("float32", 4000, (512, 1)) is None  # does not tile n
    assert O.instantiation("double", (256, 1), 16) == "atax_band<double,256,16,1>"


def instantiations() -> set[str]:
    names = set()
    for dtype, n in (parse_case(c) for c in O.CASES):
        ctype = "float" if dtype == "float32" else "double"
        for shape in O.SHAPES:
            per = O.pieces(dtype, n, shape)
            if per:
                names.add(O.instantiation(ctype, shape, per))
    return names


def test_every_case_has_a_shape():
    for dtype, n in (parse_case(c) for c in O.CASES):
        assert any(O.pieces(dtype, n, s) for s in O.SHAPES), (dtype, n)


@pytest.mark.nvcc
def test_every_kernel_of_the_default_cases_compiles_for_sm_90_without_spilling():
    names = instantiations()
    signature = "(const {t}*, const {t}*, {t}*, {t}*, unsigned*, int)"
    explicit = "\n".join(f"template __global__ void {name}" + signature.format(t=name.split("<")[1].split(",")[0])
                         + ";" for name in sorted(names))
    compiled = nvcc.compile_cubin(O.SOURCE.read_text() + "\n" + explicit, arch="sm_90", use_cache=False)
    kernels = {name: r for name, r in compiled.resources.items() if "atax_band" in name}
    assert len(kernels) == len(names)
    assert all(0 < r.registers <= 255 for r in kernels.values())
    for name in kernels:
        assert re.search(rf"Function properties for {name}\s+0 bytes stack frame, 0 bytes spill stores",
                         compiled.log), compiled.log
