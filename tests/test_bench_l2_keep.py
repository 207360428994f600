"""bench.l2_keep without a GPU: its variants of generated programs, and that nvcc takes them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fusec
from bench import l2_keep
from fusec import nvcc
from helpers import ROOT


@pytest.fixture(scope="module", params=["float32", "float64"])
def sgemv(request):
    return fusec.compile(ROOT / "scripts" / "sgemv.script", dtype=request.param, sizes={"n": 1000},
                         tuned=False)


def test_variant_names():
    assert l2_keep.variant_names((0.3, 1.0)) == ("fusec", "no evict-first", "keep 0.3", "keep 1")


def test_keep_marks_the_matrix_loads_of_the_last_blocks(sgemv):
    assert l2_keep.variant(sgemv.source, "fusec") == sgemv.source
    source = l2_keep.variant(sgemv.source, "keep 0.3")
    assert "#define KEEP_PERMILLE 300" in source
    assert l2_keep.CALL not in source  # every matrix load goes through the keeping load
    assert source.count("fusec_load16_keep<STREAM_MATRIX>(") == sgemv.source.count(l2_keep.CALL)
    assert "createpolicy.fractional.L2::evict_last.b64" in source
    # the rest of the program is untouched
    assert source.replace("fusec_load16_keep<STREAM_MATRIX>(", l2_keep.CALL).endswith(
        sgemv.source[sgemv.source.index(l2_keep.ANCHOR):])


def test_no_evict_first_turns_streaming_off(sgemv):
    source = l2_keep.variant(sgemv.source, "no evict-first")
    assert "#define STREAM_MATRIX 1" not in source and "#define STREAM_MATRIX 0" in source


@pytest.mark.parametrize("name", ["keep 0", "keep 1.5"])
def test_a_fraction_outside_0_1_is_refused(sgemv, name):
    with pytest.raises(ValueError, match="must be in"):
        l2_keep.variant(sgemv.source, name)


@pytest.mark.nvcc
def test_every_variant_compiles(sgemv):
    if nvcc.nvcc_path() is None:
        pytest.skip("nvcc is not on PATH")
    sources = [l2_keep.variant(sgemv.source, name) for name in l2_keep.variant_names((0.5,))]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        assert compiled.resources


@pytest.mark.parametrize("bad, said", [(["--keep", "1.5"], "--keep 1.5"), (["--keep", "0"], "--keep 0"),
                                       (["--scripts", "sgemv,nope"], "nope.script")])
def test_bad_arguments_exit_2_before_anything_runs(bad, said):
    done = subprocess.run([sys.executable, "-m", "bench.l2_keep", *bad], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and said in done.stderr
