"""bench.band without a GPU: its cases and shapes, and nvcc takes every kernel it times."""

from __future__ import annotations

import argparse

import pytest

from bench import band
from fusec import nvcc


def test_a_case_is_a_precision_and_a_size():
    assert band.parse_case("float64:4096") == ("float64", 4096)
    for text in ("float16:4096", "float32", "float32:n"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected DTYPE:N"):
            band.parse_case(text)


def test_pieces_per_thread_tile_the_row_or_the_shape_is_left_out():
    assert band.pieces("float32", 4096, 512) == 2  # 512 threads x 2 x 4 floats
    assert band.pieces("float64", 4096, 256) == 8
    assert band.pieces("float32", 4000, 512) is None  # does not tile n
    assert band.pieces("float32", 65536, 512) is None  # more than MAX_PER pieces: registers


def test_names_say_the_shape():
    assert band.name_of((512, 16, 2, 1)) == "band 512t 16r U2 (workspace)"
    assert band.name_of((256, 16, 2, 0)) == "band 256t 16r U2 (memset)"
    assert band.instantiation("double", (512, 32, 2, 0), 4) == "bicgk_band<double,512,4,32,2,0>"


@pytest.mark.nvcc
def test_every_kernel_of_the_default_cases_compiles_for_sm_90():
    names = set()
    for dtype, n in (band.parse_case(c) for c in band.CASES):
        ctype = "float" if dtype == "float32" else "double"
        for shape in band.SHAPES:
            per = band.pieces(dtype, n, shape[0])
            if per:
                names.add(band.instantiation(ctype, shape, per))
    assert len(names) >= len(band.SHAPES)
    signature = "(const {t}*, const {t}*, const {t}*, {t}*, {t}*, {t}*, unsigned*, int)"
    explicit = "\n".join(f"template __global__ void {name}" + signature.format(t=name.split("<")[1].split(",")[0])
                         + ";" for name in sorted(names))
    compiled = nvcc.compile_cubin(band.SOURCE.read_text() + "\n" + explicit, arch="sm_90", use_cache=False)
    kernels = [r for name, r in compiled.resources.items() if "bicgk_band" in name]
    assert len(kernels) == len(names)
    assert all(0 < r.registers <= 255 for r in kernels)
