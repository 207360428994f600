"""A whole solve in one graph launch: the iterations, and after each a one-thread test that
counts it and decides on the GPU whether the loop goes on (:mod:`fusec.runtime.while_graph`).
The host launches once and reads once: how many iterations ran and why they stopped.

The loop's body is two iterations (the state arrays take turns, so two bring them back to the
set they started from), the state of the first copied to the checkpoint beforehand, and a test
after each. A test that stops the loop after the first lets the second run all the same (a
graph cannot skip it); that iteration writes only the other set, and the answer is read from
the set the first wrote. Once a test has stopped the loop, the next leaves the record alone.

The record is four doubles: the squared tolerance and the most iterations (written by the host
before a launch), the iterations done and why the loop stopped (written by the tests).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from ..runtime import while_graph

RUNNING, CONVERGED, NOT_FINITE, MOST_ITERATIONS = 0, 1, 2, 3

TEST_SOURCE = r"""
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
"""


def unsupported() -> str | None:
    """Why solves cannot loop on the GPU here (then the host loops), or None."""
    why = while_graph.unsupported()
    if why is None:
        from .. import nvcc
        if nvcc.nvcc_path() is None:
            why = "nvcc is not on PATH (the loop's test kernel is compiled once)"
    return why


@functools.lru_cache(maxsize=None)
def _tests(context: int) -> while_graph.Kernels:
    """The test kernels, loaded once per context (a graph holding them outlives any solve)."""
    from .. import nvcc
    return while_graph.Kernels(nvcc.compile_cubin(TEST_SOURCE, while_graph.device_arch()).cubin)


class DeviceLoop:
    """The loop of one stepper on one stream: its record (allocated by ``arrays`` beside
    ``like``, a state array, whose dtype picks the test), and the graphs captured, one for each
    set of state arrays a loop may start from."""

    def __init__(self, arrays, like, stream: int):
        self.arrays, self.stream = arrays, stream
        self.kernel = "fusec_loop_test_" + str(like.dtype).replace("torch.", "")
        self.tests = _tests(while_graph.current_context())
        self.record = arrays.upload(np.zeros(4), like)
        self.graphs: dict[int, while_graph.WhileGraph] = {}

    def captured(self, start: int) -> bool:
        return start in self.graphs

    def capture(self, start: int, body) -> None:
        """Capture the loop starting from set ``start``; ``body(test)`` issues two iterations,
        calling ``test(squared_norm)`` after each."""
        record = ctypes.c_void_p(self.arrays.address(self.record))

        def test(squared_norm, handle) -> None:
            self.tests.launch(self.kernel, [ctypes.c_uint64(handle), ctypes.c_void_p(self.arrays.address(squared_norm)),
                                            record], self.stream)

        self.graphs[start] = while_graph.WhileGraph(self.stream, lambda handle: body(lambda rr: test(rr, handle)))

    def run(self, start: int, squared_tolerance: float, most: int) -> tuple[int, int]:
        """Launch the loop from set ``start``; ``(iterations done, why it stopped)`` (one read)."""
        self.arrays.upload_into(self.record, np.array([squared_tolerance, most, 0.0, 0.0]))
        self.graphs[start].launch(self.stream)
        done, why = self.arrays.download(self.record)[2:]
        return int(done), int(why)

    def forget(self) -> None:
        """Drop the graphs (they hold the addresses of the matrix they were captured with)."""
        for graph in self.graphs.values():
            graph.close()
        self.graphs.clear()
