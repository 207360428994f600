"""The GPU loop's pieces that need no GPU: the driver structures' layout (cuda.h), the solver's
kernels (the loop's test, the survey of the arguments) compiled by nvcc for sm_90, and a
reason, not a crash, where no driver is present."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from fusec import nvcc
from fusec.runtime import while_graph
from fusec.solvers import kernels


def test_node_parameters_have_the_layout_of_cuda_h():
    # CUgraphNodeParams: type and 3 reserved ints, a union of 29 long longs, one more long long
    assert ctypes.sizeof(while_graph._NodeParams) == 16 + 29 * 8 + 8
    assert while_graph._NodeParams.conditional.offset == 16
    fields = {name: getattr(while_graph._Conditional, name).offset
              for name in ("handle", "type", "size", "phGraph_out", "ctx")}
    assert fields == {"handle": 0, "type": 8, "size": 12, "phGraph_out": 16, "ctx": 24}


@pytest.mark.nvcc
def test_the_solver_kernels_compile_for_sm_90_leaving_set_conditional_to_the_driver():
    compiled = nvcc.compile_cubin(kernels.SOURCE, "sm_90", use_cache=False)
    for dtype in ("float32", "float64"):
        assert f"fusec_loop_test_{dtype}".encode() in compiled.cubin
        assert f"fusec_survey_{dtype}".encode() in compiled.cubin
    assert b"fusec_copy_arrays" in compiled.cubin
    assert b"cudaGraphSetConditional" in compiled.cubin  # resolved when the driver loads it


def test_the_survey_stripes_cover_every_row_once_within_the_kernels_row_bits():
    assert f"#define SURVEY_ROWS {kernels.SURVEY_ROWS} " in kernels.SOURCE
    for n in [*range(1, 300), 1023, 1024, 1025, 4097, 65535, 65536, 65537, 100_000]:
        rows, blocks = kernels.stripes(n)
        assert 1 <= rows <= kernels.SURVEY_ROWS and blocks <= kernels.MOST_BLOCKS
        stripes = -(-n // rows)
        assert blocks == min(stripes, kernels.MOST_BLOCKS)  # no block without a stripe
        # block b takes stripes b, b + blocks, ...: every row once
        covered = sorted(r for b in range(blocks) for s in range(b, stripes, blocks)
                         for r in range(s * rows, min(n, (s + 1) * rows)))
        assert covered == list(range(n))


class _HostArrays:
    """The two things survey_workspace asks of a framework's arrays, on the host."""

    name = "host"

    def upload(self, values, like):
        return np.array(values, copy=True)


def test_the_survey_workspace_is_the_largest_yet_for_each_thread():
    like = np.zeros(1)
    first = kernels.survey_workspace(_HostArrays(), like, 1000)
    assert first.dtype == np.float64 and first.nbytes >= kernels.HEADER_BYTES + 4 * kernels.flag_words(1000)
    assert kernels.survey_workspace(_HostArrays(), like, 10) is first  # a smaller n: the same array
    larger = kernels.survey_workspace(_HostArrays(), like, 5000)
    assert larger.nbytes >= kernels.HEADER_BYTES + 4 * kernels.flag_words(5000) > first.nbytes
    assert kernels.survey_workspace(_HostArrays(), like, 1000) is larger


@pytest.mark.parametrize("n", [1, 2, 31, 32, 33, 127, 128, 129, 1000, 4097, 65537])
@pytest.mark.parametrize("vec", [2, 4])
def test_the_survey_column_bits_fit_their_words(n, vec):
    """Column j's bit is bit (j % 32V) / V of word (j / 32V) V + j % V: every column its own
    bit, all inside flag_words(n) words."""
    places = {((j // (32 * vec)) * vec + j % vec, (j % (32 * vec)) // vec) for j in range(n)}
    assert len(places) == n
    assert max(word for word, _ in places) < kernels.flag_words(n)
    assert all(0 <= bit < 32 for _, bit in places)


def test_unsupported_names_a_reason_or_none():
    why = while_graph.unsupported()
    assert why is None or isinstance(why, str) and why
    if why is not None:
        with pytest.raises(while_graph.DriverError, match="no conditional graph nodes"):
            while_graph.WhileGraph(0, lambda handle: None)
