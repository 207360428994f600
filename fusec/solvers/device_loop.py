"""A whole solve in one graph launch: the iterations, and after each a one-thread test that
counts it and decides on the GPU whether the loop goes on (:mod:`fusec.runtime.while_graph`).
The host launches once and reads once: how many iterations ran and why they stopped.

The loop's body is two iterations (the state arrays take turns, so two bring them back to the
set they started from), the state of the first copied to the checkpoint beforehand, and a test
after each. A test that stops the loop after the first iteration lets the second run all the
same (a graph cannot skip it); that iteration writes only the other set, the answer is read
from the set the first wrote, and once a test has stopped the loop the next leaves the record
alone. Where an iteration is long, the second iteration and its test are guarded instead (an IF
node nested in the body, :class:`~fusec.runtime.while_graph.Guard`): the test after the first
runs them only while the loop goes on, so a solve stopping after an odd number of iterations
does not pay for one more. The IF node's cost a body a short iteration cannot repay
(experiments/results/h200-loop-guard.md): bodies are guarded where an
iteration reads at least GUARD_BYTES of A; where the driver refuses the nested node, unguarded.

The record is four doubles: the squared tolerance and the most iterations (written by the host
before a launch), the iterations done and why the loop stopped (written by the tests). A solve
started on the GPU (:meth:`DeviceLoop.start`) has the record written by a kernel instead, from
the survey of its arguments, so that the host's one read after the launch answers both.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..errors import DriverError
from ..runtime import while_graph
from . import kernels
from .arrays import dtype_name

RUNNING, CONVERGED, NOT_FINITE, MOST_ITERATIONS, REFUSED = 0, 1, 2, 3, 4  # REFUSED: by the start's survey
GUARD_BYTES = 1 << 30  # an iteration reading this much of A, or more, guards its loop's second iterations


def guards(matrix_bytes: int) -> bool:
    """Whether the loop of an iteration reading ``matrix_bytes`` of A guards its bodies' second
    iterations."""
    return matrix_bytes >= GUARD_BYTES


class DeviceLoop:
    """The loop of one stepper on one stream: its record (allocated by ``arrays`` beside
    ``like``, a state array, whose dtype picks the test), and the graphs captured, one for each
    set of state arrays a loop may start from; ``guarded``: each body's second iteration runs
    only while the loop goes on."""

    def __init__(self, arrays, like, stream: int, *, guarded: bool = False):
        self.arrays, self.stream = arrays, stream
        self.kernel = "fusec_loop_test_" + dtype_name(like)
        self.first_kernel = "fusec_loop_test_first_" + dtype_name(like)  # sets the guard of the second too
        self.guarded = guarded  # until the driver refuses a guard (then unguarded bodies for good)
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

        def issue(handle: int, guard: while_graph.Guard | None = None) -> None:
            tested = []

            def test(squared_norm) -> None:
                rr = ctypes.c_void_p(self.arrays.address(squared_norm))
                # dependent launches: a test starts while the iteration's last kernel ends, and
                # waits for it; the next iteration's first kernel does the same after the test
                if guard is not None and not tested:  # after the first iteration: it decides on the second
                    self.tests.launch(self.first_kernel, [ctypes.c_uint64(handle), ctypes.c_uint64(guard.handle), rr,
                                                          record], self.stream, dependent=True)
                    guard()
                else:
                    self.tests.launch(self.kernel, [ctypes.c_uint64(handle), rr, record], self.stream, dependent=True)
                tested.append(squared_norm)

            body(test, self.arrays.copy_pairs)

        # captured on self.stream, the arrays' current stream (copy_pairs launches there)
        if self.guarded:
            try:
                self.graphs[start] = while_graph.WhileGraph(self.stream, issue, guarded=True)
                return
            except DriverError:
                self.guarded = False
        self.graphs[start] = while_graph.WhileGraph(self.stream, issue)

    def run(self, start: int, squared_tolerance: float, most: int) -> tuple[int, int]:
        """Launch the loop from set ``start``; ``(iterations done, why it stopped)`` (one read)."""
        self.arrays.upload_into(self.record, np.array([squared_tolerance, most, 0.0, 0.0]))
        _, done, why = self.launch(start)
        return done, why

    def start(self, survey, rtol: float, atol: float, most: int, pairs, x) -> None:
        """Write the record on the GPU from ``survey`` (the array ``arrays.launch_survey`` gave,
        written before this in the stream): the squared tolerance ``max(rtol ||b||, atol)^2``, ``most``,
        and REFUSED or CONVERGED as the reason where the loop must not iterate; and the first
        state (``x`` zeroed, each ``(dst, b)`` of ``pairs`` copied), in one launch. Then
        :meth:`launch`."""
        kernels.start_loop(self.arrays, survey, rtol, atol, most, self.record, pairs, x, self.stream)

    def launch(self, start: int) -> tuple[float, int, int]:
        """Launch the loop from set ``start`` on the record as it stands; ``(the squared tolerance,
        iterations done, why it stopped)``, read at once."""
        self.graphs[start].launch(self.stream)
        limit, _, done, why = self.arrays.download(self.record).tolist()
        return limit, int(done), int(why)

    def forget(self) -> None:
        """Drop the graphs (they hold the addresses of the matrix they were captured with)."""
        for graph in self.graphs.values():
            graph.close()
        self.graphs.clear()
