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

import numpy as np

from ..runtime import while_graph
from . import kernels
from .arrays import dtype_name

RUNNING, CONVERGED, NOT_FINITE, MOST_ITERATIONS = 0, 1, 2, 3


class DeviceLoop:
    """The loop of one stepper on one stream: its record (allocated by ``arrays`` beside
    ``like``, a state array, whose dtype picks the test), and the graphs captured, one for each
    set of state arrays a loop may start from."""

    def __init__(self, arrays, like, stream: int):
        self.arrays, self.stream = arrays, stream
        self.kernel = "fusec_loop_test_" + dtype_name(like)
        self.tests = kernels.loaded()
        self.record = arrays.upload(np.zeros(4), like)
        self.graphs: dict[int, while_graph.WhileGraph] = {}

    def captured(self, start: int) -> bool:
        return start in self.graphs

    def capture(self, start: int, body) -> None:
        """Capture the loop starting from set ``start``; ``body(test, copy)`` issues two
        iterations, calling ``test(squared_norm)`` after each, and copies its checkpoint by
        ``copy(pairs)`` (``(dst, src)`` arrays: one launch for them all where they are contiguous)."""
        record = ctypes.c_void_p(self.arrays.address(self.record))

        def test(squared_norm, handle) -> None:
            self.tests.launch(self.kernel, [ctypes.c_uint64(handle), ctypes.c_void_p(self.arrays.address(squared_norm)),
                                            record], self.stream)

        # captured on self.stream, the arrays' current stream (copy_pairs launches there)
        self.graphs[start] = while_graph.WhileGraph(
            self.stream, lambda handle: body(lambda rr: test(rr, handle), self.arrays.copy_pairs))

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
