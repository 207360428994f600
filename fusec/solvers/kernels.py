"""The CUDA a solve runs besides its iterations: the loop's test (:mod:`.device_loop`), the
copy of the loop's checkpoint (all the state arrays in one launch), and the survey of its
arguments (whether ``b`` and ``x0`` are finite, the sum of ``A``, ``||b||^2``: one kernel and
one read, where CuPy or PyTorch would take seven kernels of their own). Compiled by nvcc once
per GPU architecture (cached) and loaded once per context.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from ..runtime import while_graph

SOURCE = r"""
#include <cuda_runtime.h>

// record: [0] squared tolerance, [1] most iterations, [2] iterations done, [3] why it stopped
// (0 running, 1 converged, 2 not finite, 3 most iterations)
template <typename real>
__device__ void test(cudaGraphConditionalHandle loop, const real *squared_norm, double *record)
{
    if (record[3] != 0.0) {  // the first test of this body stopped the loop: keep its record
        cudaGraphSetConditional(loop, 0);
        return;
    }
    double done = record[2] + 1.0, rr = (double)squared_norm[0];
    double why = !isfinite(rr) ? 2.0 : rr <= record[0] ? 1.0 : done >= record[1] ? 3.0 : 0.0;
    record[2] = done;
    record[3] = why;
    cudaGraphSetConditional(loop, why == 0.0);
}

extern "C" __global__ void fusec_loop_test_float32(cudaGraphConditionalHandle loop, const float *rr, double *record)
{ test<float>(loop, rr, record); }

extern "C" __global__ void fusec_loop_test_float64(cudaGraphConditionalHandle loop, const double *rr, double *record)
{ test<double>(loop, rr, record); }

// out: [0] elements of b not finite, [1] of x0, [2] the sum of A, [3] ||b||^2 (all float64,
// added to by every block: out starts zeroed)
template <typename real>
__device__ void survey(const real *A, long long count, const real *b, const real *x0, int n, double *out)
{
    double nonfinite_b = 0.0, nonfinite_x0 = 0.0, sum = 0.0, bb = 0.0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        sum += (double)A[i];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double v = (double)b[i];
        nonfinite_b += isfinite(v) ? 0.0 : 1.0;
        bb += v * v;
        if (x0 != nullptr)
            nonfinite_x0 += isfinite((double)x0[i]) ? 0.0 : 1.0;
    }
    __shared__ double partial[32][4];  // one row per warp, then the block's in row 0
    double mine[4] = {nonfinite_b, nonfinite_x0, sum, bb};
    for (int k = 0; k < 4; k++) {
        for (int offset = 16; offset > 0; offset /= 2)
            mine[k] += __shfl_down_sync(0xffffffffu, mine[k], offset);
        if (threadIdx.x % 32 == 0)
            partial[threadIdx.x / 32][k] = mine[k];
    }
    __syncthreads();
    if (threadIdx.x < 4) {  // one atomic per block and value, not one per warp
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++)
            total += partial[w][threadIdx.x];
        atomicAdd(out + threadIdx.x, total);
    }
}

// The checkpoint of a loop's body: up to 8 arrays of one length copied in one launch, not one
// launch each (a graph's launches cost about 2 us apiece on the loop's path)
struct fusec_copies { const unsigned int *src[8]; unsigned int *dst[8]; };

extern "C" __global__ void fusec_copy_arrays(fusec_copies copies, int count, long long words)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (int k = 0; k < count; k++)
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
            copies.dst[k][i] = copies.src[k][i];
}

extern "C" __global__ void fusec_survey_float32(const float *A, long long count, const float *b, const float *x0,
                                                int n, double *out)
{ survey<float>(A, count, b, x0, n, out); }

extern "C" __global__ void fusec_survey_float64(const double *A, long long count, const double *b, const double *x0,
                                                int n, double *out)
{ survey<double>(A, count, b, x0, n, out); }
"""

THREADS, MOST_BLOCKS = 256, 1024  # a survey's and a copy's launch: enough in flight to stream A
COPIES = 8  # arrays one launch of fusec_copy_arrays copies


def unsupported() -> str | None:
    """Why these kernels cannot run here (a driver without conditional graph nodes, no nvcc),
    or None. Asked on every solve: once they are loaded, nvcc is not looked for again."""
    why = while_graph.unsupported()
    if why is None and not _loaded.cache_info().currsize:
        from .. import nvcc
        if nvcc.nvcc_path() is None:
            why = "nvcc is not on PATH (the solver's kernels are compiled once)"
    return why


def loaded() -> while_graph.Kernels:
    """The kernels in the current context."""
    return _loaded(while_graph.current_context())


@functools.lru_cache(maxsize=None)
def _loaded(context: int) -> while_graph.Kernels:  # kept: a graph holding the test outlives any solve
    from .. import nvcc
    return while_graph.Kernels(nvcc.compile_cubin(SOURCE, while_graph.device_arch()).cubin)


def _blocks(elements: int) -> int:
    """Blocks of THREADS for a grid-stride loop over ``elements``: one each, MOST_BLOCKS at most."""
    return max(1, min(MOST_BLOCKS, -(-elements // THREADS)))


def survey(arrays, A, b, x0, dtype: str) -> list[float]:
    """``[b finite, x0 finite, sum of A, ||b||^2]`` (1.0 or 0.0 for the first two; x0 None
    counts as finite) by one kernel on the current stream of ``arrays``, and one read."""
    out = _survey_out(arrays, b)
    while_graph.zero(arrays.address(out), out.nbytes, arrays.stream_handle())
    count, n = int(A.shape[0]) * int(A.shape[1]), int(b.shape[0])
    pointer = lambda a: ctypes.c_void_p(arrays.address(a) if a is not None else None)  # noqa: E731
    loaded().launch(f"fusec_survey_{dtype}", [pointer(A), ctypes.c_longlong(count), pointer(b), pointer(x0),
                                              ctypes.c_int(n), pointer(out)],
                    arrays.stream_handle(), threads=THREADS, blocks=_blocks(count))
    nonfinite_b, nonfinite_x0, total, bb = arrays.download(out).tolist()
    return [float(nonfinite_b == 0), float(nonfinite_x0 == 0), total, bb]


class _Copies(ctypes.Structure):  # struct fusec_copies
    _fields_ = [("src", ctypes.c_void_p * COPIES), ("dst", ctypes.c_void_p * COPIES)]


def copy_arrays(arrays, pairs, stream: int) -> None:
    """``dst[...] = src`` for each ``(dst, src)`` of ``pairs`` (contiguous arrays of one size in
    bytes, a multiple of 4), eight to a launch on ``stream``."""
    words = pairs[0][0].nbytes // 4
    for start in range(0, len(pairs), COPIES):
        group = pairs[start:start + COPIES]
        copies = _Copies()
        for k, (dst, src) in enumerate(group):
            copies.src[k], copies.dst[k] = arrays.address(src), arrays.address(dst)
        loaded().launch("fusec_copy_arrays", [copies, ctypes.c_int(len(group)), ctypes.c_longlong(words)], stream,
                        threads=THREADS, blocks=_blocks(words))


_OUT: dict = {}  # (framework, device, thread) -> the four doubles a survey writes: allocated once


def _survey_out(arrays, like):
    key = (arrays.name, str(like.device), threading.get_ident())
    if key not in _OUT:
        _OUT[key] = arrays.upload(np.zeros(4), like)
    return _OUT[key]
