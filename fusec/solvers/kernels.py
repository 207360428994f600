"""The CUDA a solve runs besides its iterations: the loop's test (:mod:`.device_loop`), the
copy of the loop's checkpoint (all the state arrays in one launch), and the survey of its
arguments (whether ``b`` and ``x0`` are finite, the sum of ``A``, ``||b||^2``, the rows and
columns of ``A`` that are all zeros: one kernel reading A once, and one read, where CuPy or
PyTorch would take seven kernels of their own and more for the zeros), and the start of a solve
whose loop is captured (its record and first state from the survey, read with the loop's).
Compiled by nvcc once per GPU architecture (cached) and loaded once per context.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import numpy as np

from ..runtime import while_graph

SOURCE = r"""
#include <cuda_runtime.h>

// The loop's kernels may be programmatic dependent launches (sm_90 on): each waits first for
// the kernel before it to end and its writes to be visible.
__device__ __forceinline__ void follow_previous()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#define SURVEY_ROWS 64  // the most rows of A in a stripe of the survey: the bits of an unsigned long long
#define SURVEY_BATCH 8  // rows of a stripe whose loads a thread has in flight at once

// record: [0] squared tolerance, [1] most iterations, [2] iterations done, [3] why it stopped
// (0 running, 1 converged, 2 not finite, 3 most iterations)
template <typename real>
__device__ void test(cudaGraphConditionalHandle loop, const real *squared_norm, double *record)
{
    follow_previous();
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

// The test after a body's first iteration where the second is guarded by an IF node (handle
// second): the second runs only while the loop goes on.
template <typename real>
__device__ void test_first(cudaGraphConditionalHandle loop, cudaGraphConditionalHandle second,
                           const real *squared_norm, double *record)
{
    test<real>(loop, squared_norm, record);
    cudaGraphSetConditional(second, record[3] == 0.0);
}

extern "C" __global__ void fusec_loop_test_first_float32(cudaGraphConditionalHandle loop,
                                                         cudaGraphConditionalHandle second, const float *rr,
                                                         double *record)
{ test_first<float>(loop, second, rr, record); }

extern "C" __global__ void fusec_loop_test_first_float64(cudaGraphConditionalHandle loop,
                                                         cudaGraphConditionalHandle second, const double *rr,
                                                         double *record)
{ test_first<double>(loop, second, rr, record); }

// out: doubles [0] elements of b not finite, [1] of x0, [2] the sum of A, [3] ||b||^2; then
// unsigned ints (at out + 4) [0] zero rows of A, [1] n - the first zero row (0: none), [2] zero
// columns, [3] the first zero column (where [2] > 0), [4] blocks done. All start zeroed, as do
// the bits of A's columns (FLAG_WORDS(n) words; 1: a non-zero entry seen); the doubles and the rows are added to
// by every block, the columns counted by the last block done (CUDA samples' threadFenceReduction).
// A is read once: each block takes stripes of up to SURVEY_ROWS rows; its threads walk the
// stripe's columns, a 16-byte piece of a row each (a warp reads 512 consecutive bytes), keep
// whether their columns have a non-zero entry in the stripe (OR-ed into the columns' bits) and
// a bit for each row of the stripe in which they saw one (OR-ed over the block: a zero row has
// none).
// A NaN is not 0: a NaN row is not zero (its sum is not finite, which the checks report first).
template <typename real>
__device__ void survey(const real *A, int n, int rows, int vector, const real *b, const real *x0, double *out,
                       unsigned int *flags)
{
    constexpr int V = 16 / sizeof(real);  // the values of a 16-byte piece
    struct __align__(16) pieces { real v[V]; };
    unsigned int *lines = (unsigned int *)(out + 4);
    __shared__ unsigned int row_bits[SURVEY_ROWS / 32];  // the stripe's rows with a non-zero entry
    __shared__ double partial[32][4];  // one row per warp, then the block's in row 0
    __shared__ unsigned int zeros, first;  // the last block's count of zero columns and the first
    __shared__ bool last;
    double nonfinite_b = 0.0, nonfinite_x0 = 0.0, sum = 0.0, bb = 0.0;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // A null: b and x0 alone (check_finite=False), no stripe, no column counted
    for (long long top = (long long)blockIdx.x * rows; A != nullptr && top < n; top += (long long)gridDim.x * rows) {
        int height = (int)min((long long)rows, n - top);
        if (threadIdx.x < SURVEY_ROWS / 32)
            row_bits[threadIdx.x] = 0;
        __syncthreads();  // cleared before any warp of this stripe ORs in
        unsigned long long seen = 0;  // bit r: row top + r has a non-zero entry in my columns
        // V columns a thread: one 16-byte load a row where A allows (vector), else V guarded ones
        for (long long left = 0; left < n; left += (long long)blockDim.x * V) {  // the same trips for all
            long long j = left + (long long)threadIdx.x * V;
            bool column[V];
#pragma unroll
            for (int k = 0; k < V; k++)
                column[k] = false;
            if (j < n) {
                const real *p = A + top * n + j;
                auto take = [&](const pieces &v, int r) {
                    bool any = false;
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        sum += (double)v.v[k];
                        bool nonzero = v.v[k] != (real)0;  // true for NaN
                        column[k] |= nonzero;
                        any |= nonzero;
                    }
                    seen |= (unsigned long long)any << r;
                };
                auto load = [&](int r) {
                    const real *row = p + (long long)r * n;
                    pieces v;
                    if (vector)
                        v = *reinterpret_cast<const pieces *>(row);
                    else
#pragma unroll
                        for (int k = 0; k < V; k++)
                            v.v[k] = j + k < n ? row[k] : (real)0;
                    return v;
                };
                // SURVEY_BATCH rows' loads leave before any is used (one branch a batch, not one
                // a row: with the branch in the row loop each load waited for the one before)
                int r = 0;
                for (; r + SURVEY_BATCH <= height; r += SURVEY_BATCH) {
                    pieces v[SURVEY_BATCH];
                    if (vector) {
#pragma unroll
                        for (int u = 0; u < SURVEY_BATCH; u++)
                            v[u] = *reinterpret_cast<const pieces *>(p + (long long)(r + u) * n);
                    } else {
#pragma unroll
                        for (int u = 0; u < SURVEY_BATCH; u++)
                            v[u] = load(r + u);
                    }
#pragma unroll
                    for (int u = 0; u < SURVEY_BATCH; u++)
                        take(v[u], r + u);
                }
                for (; r < height; r++)
                    take(load(r), r);
            }
            // the warp's columns, a bit each (lane l's column k: bit l of word k of the warp's
            // 32 V columns), OR-ed in by one atomic a word, none where another block set them:
            // a flag stored by every block was 16M stores to the same lines at n = 16384
#pragma unroll
            for (int k = 0; k < V; k++) {
                unsigned int mine = __ballot_sync(0xffffffffu, column[k]);
                if (lane == k && mine) {
                    unsigned int *word = flags + (left / (32 * V) + warp) * V + k;
                    if ((__ldcg(word) & mine) != mine)
                        atomicOr(word, mine);
                }
            }
        }
        for (int offset = 16; offset > 0; offset /= 2)
            seen |= __shfl_xor_sync(0xffffffffu, seen, offset);
        if (lane == 0) {
            if ((unsigned int)seen)
                atomicOr(&row_bits[0], (unsigned int)seen);
            if (seen >> 32)
                atomicOr(&row_bits[1], (unsigned int)(seen >> 32));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long all = (unsigned long long)row_bits[1] << 32 | row_bits[0];
            unsigned long long zero = ~all & (height == SURVEY_ROWS ? ~0ull : (1ull << height) - 1);
            if (zero) {
                atomicAdd(lines + 0, (unsigned int)__popcll(zero));
                atomicMax(lines + 1, (unsigned int)(n - (top + __ffsll((long long)zero) - 1)));
            }
        }
        __syncthreads();  // row_bits read before the next stripe clears it
    }
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double v = (double)b[i];
        nonfinite_b += isfinite(v) ? 0.0 : 1.0;
        bb += v * v;
        if (x0 != nullptr)
            nonfinite_x0 += isfinite((double)x0[i]) ? 0.0 : 1.0;
    }
    double mine[4] = {nonfinite_b, nonfinite_x0, sum, bb};
    for (int k = 0; k < 4; k++) {
        for (int offset = 16; offset > 0; offset /= 2)
            mine[k] += __shfl_down_sync(0xffffffffu, mine[k], offset);
        if (lane == 0)
            partial[warp][k] = mine[k];
    }
    __syncthreads();  // the block's column bits are in, then one fence by the thread taking the ticket
    if (threadIdx.x < 4) {  // one atomic per block and value, not one per warp
        double total = 0.0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++)
            total += partial[w][threadIdx.x];
        atomicAdd(out + threadIdx.x, total);
    }
    if (threadIdx.x == 0) {
        zeros = 0;
        first = (unsigned int)n;
        __threadfence();  // this block's column bits visible to every block before it counts as done
        last = atomicAdd(lines + 4, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || A == nullptr)  // without A its lines stay 0: none zero
        return;
    unsigned int count = 0, lowest = (unsigned int)n;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        unsigned int word = __ldcg(flags + (j / (32 * V)) * V + j % V);  // from L2, where the atomics are
        if (!((word >> (j % (32 * V) / V)) & 1u)) {
            count++;
            lowest = min(lowest, (unsigned int)j);
        }
    }
    if (count) {
        atomicAdd(&zeros, count);
        atomicMin(&first, lowest);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        lines[2] = zeros;
        lines[3] = first;
    }
}

// The checkpoint of a loop's body: up to 8 arrays of one length copied in one launch, not one
// launch each (every launch in the loop's graph lengthens its path)
struct fusec_copies { const unsigned int *src[8]; unsigned int *dst[8]; };

extern "C" __global__ void fusec_copy_arrays(fusec_copies copies, int count, long long words)
{
    follow_previous();
    long long stride = (long long)gridDim.x * blockDim.x;
    for (int k = 0; k < count; k++)
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride)
            copies.dst[k][i] = copies.src[k][i];
}

// The start of a solve from x = 0 whose loop is captured already, after the survey of its
// arguments (out, as survey writes it): the loop's record and the first state in one launch.
// x (words of it) is zeroed and the state's other vectors get b (copies: src b each). The
// record's reason is set where the loop must not iterate, its first test then keeping the
// record (0 iterations done): 4 where the survey refuses the arguments, 1 where b meets the
// tolerance as it is. The tolerance as the host takes it: max(rtol ||b||, atol), squared.
extern "C" __global__ void fusec_loop_start(const double *out, double rtol, double atol, double most,
                                            double *record, fusec_copies copies, int count, unsigned int *x,
                                            long long words)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const unsigned int *lines = (const unsigned int *)(out + 4);
        double bb = out[3], tol = fmax(rtol * sqrt(bb), atol);
        bool refused = out[0] != 0.0 || out[1] != 0.0 || !isfinite(out[2]) || lines[0] != 0u || lines[2] != 0u;
        record[0] = tol * tol;
        record[1] = most;
        record[2] = 0.0;
        record[3] = refused ? 4.0 : bb <= tol * tol ? 1.0 : 0.0;
    }
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += stride) {
        x[i] = 0u;
        for (int k = 0; k < count; k++)
            copies.dst[k][i] = copies.src[k][i];
    }
}

extern "C" __global__ void fusec_survey_float32(const float *A, int n, int rows, int vector, const float *b,
                                                const float *x0, double *out, unsigned int *flags)
{ survey<float>(A, n, rows, vector, b, x0, out, flags); }

extern "C" __global__ void fusec_survey_float64(const double *A, int n, int rows, int vector, const double *b,
                                                const double *x0, double *out, unsigned int *flags)
{ survey<double>(A, n, rows, vector, b, x0, out, flags); }
"""

THREADS, MOST_BLOCKS = 256, 1024  # a survey's and a copy's launch: enough in flight to stream A
SURVEY_ROWS = 64  # as SOURCE defines it: the tallest stripe
STRIPE_ROWS = 16  # the stripe the survey takes
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
    from ..runtime.cuda import has_dependent_launch
    arch = while_graph.device_arch()
    return while_graph.Kernels(nvcc.compile_cubin(SOURCE, arch).cubin, dependent=has_dependent_launch(arch))


def _blocks(elements: int) -> int:
    """Blocks of THREADS for a grid-stride loop over ``elements``: one each, MOST_BLOCKS at most."""
    return max(1, min(MOST_BLOCKS, -(-elements // THREADS)))


def survey(arrays, A, b, x0, dtype: str) -> list[float]:
    """``[b finite, x0 finite, sum of A, ||b||^2, zero rows of A, the first (-1: none), zero
    columns, the first (-1: none)]`` (1.0 or 0.0 for the first two; x0 None counts as finite) by
    one kernel on the current stream of ``arrays`` (A read once), and one read. ``A`` None: b and
    x0 alone (A's sum 0, no zero line)."""
    return read_survey(arrays, launch_survey(arrays, A, b, x0, dtype), int(b.shape[0]))


def launch_survey(arrays, A, b, x0, dtype: str):
    """:func:`survey`'s kernel, launched and not read: the array it writes (the workspace of
    :func:`survey_workspace`, whose first HEADER_BYTES :func:`read_survey` reads)."""
    n = int(b.shape[0])
    work = survey_workspace(arrays, b, n)
    stream = arrays.stream_handle()
    while_graph.zero(arrays.address(work), HEADER_BYTES + 4 * flag_words(n), stream)  # the output, the columns' bits
    rows, blocks = stripes(n)
    pointer = lambda a: ctypes.c_void_p(arrays.address(a) if a is not None else None)  # noqa: E731
    # 16-byte loads where every row of A starts on 16 bytes
    vector = A is not None and arrays.address(A) % 16 == 0 and n % (16 // np.dtype(dtype).itemsize) == 0
    loaded().launch(f"fusec_survey_{dtype}", [pointer(A), ctypes.c_int(n), ctypes.c_int(rows), ctypes.c_int(vector),
                                              pointer(b), pointer(x0), pointer(work),
                                              ctypes.c_void_p(arrays.address(work) + HEADER_BYTES)],
                    stream, threads=THREADS, blocks=blocks)
    return work


def read_survey(arrays, work, n: int) -> list[float]:
    """:func:`survey`'s list from the array :func:`launch_survey` wrote (a read: the host waits)."""
    header = arrays.download(work[:HEADER_BYTES // 8])
    nonfinite_b, nonfinite_x0, total, bb = header[:4].tolist()
    zero_rows, after_first_row, zero_columns, first_column = header[4:].view(np.uint32)[:4].tolist()
    return [float(nonfinite_b == 0), float(nonfinite_x0 == 0), total, bb,
            zero_rows, n - after_first_row if zero_rows else -1, zero_columns, first_column if zero_columns else -1]


def stripes(n: int) -> tuple[int, int]:
    """Rows of A a block of the survey takes at a time and the blocks (MOST_BLOCKS at most, each
    then taking every gridDim-th stripe). Every block ORs its columns into every word of the
    columns' bits, so thin stripes cost contended atomics and tall ones leave blocks idle;
    STRIPE_ROWS measured best overall (experiments/results/h200-survey-cost.md)."""
    rows = min(STRIPE_ROWS, n)
    return rows, min(MOST_BLOCKS, -(-n // rows))


class _Copies(ctypes.Structure):  # struct fusec_copies
    _fields_ = [("src", ctypes.c_void_p * COPIES), ("dst", ctypes.c_void_p * COPIES)]


def _copies(arrays, pairs) -> _Copies:
    copies = _Copies()
    for k, (dst, src) in enumerate(pairs):
        copies.src[k], copies.dst[k] = arrays.address(src), arrays.address(dst)
    return copies


def copy_arrays(arrays, pairs, stream: int) -> None:
    """``dst[...] = src`` for each ``(dst, src)`` of ``pairs`` (contiguous arrays of one size in
    bytes, a multiple of 4), eight to a launch on ``stream``."""
    words = pairs[0][0].nbytes // 4
    for start in range(0, len(pairs), COPIES):
        group = pairs[start:start + COPIES]
        loaded().launch("fusec_copy_arrays", [_copies(arrays, group), ctypes.c_int(len(group)),
                                              ctypes.c_longlong(words)], stream,
                        threads=THREADS, blocks=_blocks(words), dependent=True)


def start_loop(arrays, survey, rtol: float, atol: float, most: int, record, pairs, x, stream: int) -> None:
    """Launch ``fusec_loop_start`` on ``stream``: the loop's ``record`` from the ``survey``
    (:func:`launch_survey`'s array, written before it in the stream), ``x`` zeroed and each
    ``(dst, b)`` of ``pairs`` copied (contiguous arrays of x's size, COPIES at most)."""
    if len(pairs) > COPIES:
        raise ValueError(f"fusec_loop_start copies {COPIES} arrays at most, not {len(pairs)}")
    words = x.nbytes // 4
    loaded().launch("fusec_loop_start", [ctypes.c_void_p(arrays.address(survey)), ctypes.c_double(rtol),
                                         ctypes.c_double(atol), ctypes.c_double(most),
                                         ctypes.c_void_p(arrays.address(record)), _copies(arrays, pairs),
                                         ctypes.c_int(len(pairs)), ctypes.c_void_p(arrays.address(x)),
                                         ctypes.c_longlong(words)],
                    stream, threads=THREADS, blocks=_blocks(words))


HEADER_BYTES = 64  # a survey's output: 4 doubles, then 8 unsigned ints (5 used); the columns' bits follow


def flag_words(n: int) -> int:
    """32-bit words of the survey's column bits for n columns (a warp's 32 V columns in V words)."""
    return -(-n // 32) + 4


_WORK: dict = {}  # (framework, device, thread) -> a survey's output and flags, for the largest n yet


def survey_workspace(arrays, like, n: int):
    """A float64 array of ``like``'s device: the output (HEADER_BYTES) and the columns' bits;
    kept per framework, device and thread, and replaced by a larger one when n outgrows it."""
    key = (arrays.name, str(like.device), threading.get_ident())
    doubles = HEADER_BYTES // 8 + -(-flag_words(n) // 2)
    if key not in _WORK or _WORK[key].shape[0] < doubles:
        _WORK[key] = arrays.upload(np.zeros(doubles), like)
    return _WORK[key]
