"""Runs iterations of a solver's script: one program call per iteration, its results written
with ``out=`` into the other of two sets of state arrays (a result may not overlap an input the
program still reads, so the sets take turns), ``k`` iterations captured once in a CUDA graph and
replayed after that.

Each replay of ``k`` iterations first copies the state it starts from into a checkpoint set, so
that when the number read afterwards is not finite (a breakdown, or an exact zero residual
divided by) the driver can go back and redo those iterations one at a time. A method's
half-step results (BiCGStab's ``h`` and ``s``) are written every iteration into one set of
arrays of their own, read only there: after the iteration that ended non-finite.

A stepper serves one solve after another (:meth:`ProgramStepper.begin`): its arrays, and the
graphs captured on them, are kept; a graph holds the addresses (and strides) it was captured
with, so the graphs are kept only while ``A`` is the same memory read with the same strides (a
graph reads whatever that memory holds when it is replayed). Another ``A`` of the same shape is
captured on at once: the sets stay warm (the program's modules are loaded and its buffers made
for these sizes, and every result goes to a state array, so a call on the new ``A`` loads and
allocates nothing). From the second change of matrix on, an ``A`` of at most OWN_MATRIX_BYTES
is copied into a matrix of the stepper's own instead, the graphs captured on that once, and
every later solve copies its ``A`` in and replays: a solver called on new matrices of one shape
(a Newton method's) pays a copy, not a capture.

Where the driver can loop on the GPU (:mod:`.device_loop`), :meth:`ProgramStepper.loop` runs
the whole loop as one launch of a graph whose body is two iterations with a test after each;
once that loop is captured, :meth:`ProgramStepper.start_on_device` starts the next solve from
x = 0 on the GPU too (the arguments' survey, the first state and the loop's record, then the
loop, read once).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from ..errors import FusecError, FusecWarning
from .methods import Method

OWN_MATRIX_BYTES = 64 << 20  # an A this small is copied into the stepper's own matrix from the second new one on


class ProgramStepper:
    """Iterations of ``method`` by ``program`` (anything called as
    ``program(**inputs, out={result: array})``) on the arrays of ``arrays``
    (:mod:`.arrays`); ``graphs=False`` never captures. ``make_loop(arrays, like, stream)``
    makes the GPU loop (:class:`.device_loop.DeviceLoop`; the tests give one that runs on NumPy),
    None where the GPU cannot loop."""

    def __init__(self, program: Callable, method: Method, arrays: Any, A, start: dict, *, graphs: bool = True,
                 make_loop: Callable | None = None):
        self.program, self.method, self.arrays = program, method, arrays
        self.A, self.A_placement = A, arrays.placement(A)
        self.own_matrix = None  # A's values copied here (small A, from the second new matrix on), or None
        self.changes = 0  # times A came on memory other than the graphs were captured on
        self.fixed = {name: arrays.copy(start[name]) for name in method.fixed}
        first = {name: arrays.copy(start[name]) for name in method.state}  # its own: start may share arrays
        second = {name: arrays.empty_like(first[name]) for name in method.state}
        self.sets = (first, second)
        self.norms = (arrays.scalar_like(start["x"]), arrays.scalar_like(start["x"]))
        self.checkpoint = {name: arrays.empty_like(first[name]) for name in method.state}
        self.half = {name: arrays.empty_like(start["x"]) for name in method.half_step or ()}
        self.current = 0  # which set holds the state
        self.saved_from: int | None = None
        self.capture_works = True  # until a capture is refused (then plain calls for good)
        self.graphs_allowed = graphs
        self.graphs: dict[tuple[int, int], Callable] = {}  # (first set, iterations) -> replay
        self.warm: set[int] = set()  # sets an iteration has started from outside a capture
        self.make_loop = make_loop
        self.gpu_loop = None  # made at the first loop
        self.loop_refused = False  # a capture of the loop failed here: the host loops from then on

    def begin(self, A, start: dict, *, graphs: bool = True, make_loop: Callable | None = None) -> None:
        """Start another solve from ``start`` (copied into this stepper's arrays). The graphs
        captured before are replayed again where ``A`` is the same memory as the last solve's or
        is copied into the stepper's own matrix; a matrix elsewhere drops them and captures anew
        on it (:meth:`_take_matrix`), with no plain calls first (the sets stay warm: only the
        addresses the launches carry change). ``make_loop``,
        where given, is kept for the loops to come (unless a loop was refused here)."""
        self._take_matrix(A)
        for name in self.method.fixed:
            self.arrays.copy_into(self.fixed[name], start[name])
        for name in self.method.state:  # one framework copy each: one launch for all measured no faster
            self.arrays.copy_into(self.sets[0][name], start[name])
        self.current, self.saved_from = 0, None
        self.graphs_allowed = graphs and self.capture_works
        self.make_loop = make_loop or self.make_loop

    def _take_matrix(self, A) -> None:
        """Make the iterations read ``A``: as it is where it is the memory the graphs were
        captured on. A matrix on other memory drops the graphs, to be captured on it, the
        first time; from the second such change on (a solver given new matrices, as a Newton
        method's), where ``A`` is at most OWN_MATRIX_BYTES, it is copied into the stepper's own
        matrix, which the graphs are captured on once and replayed from then on: every later
        solve copies its A in (microseconds, where graphs captured anew on a new address cost
        about a millisecond of the host's; a caller who changed matrices once and keeps the
        second pays no copy)."""
        placement = self.arrays.placement(A)
        if self.own_matrix is None and placement != self.A_placement:
            self.changes += 1
            if self.changes >= 2 and A.nbytes <= OWN_MATRIX_BYTES:
                self.own_matrix = self.arrays.empty_like(A)
        if self.own_matrix is not None:
            self.arrays.copy_into(self.own_matrix, A)
            A, placement = self.own_matrix, self.arrays.placement(self.own_matrix)
        if placement != self.A_placement:
            self.graphs.clear()
            if self.gpu_loop is not None:
                self.gpu_loop.forget()
        self.A, self.A_placement = A, placement

    def end(self) -> None:
        """Let go of the solve's ``A`` (a kept stepper must not keep a caller's matrix alive);
        its address stays, for :meth:`begin` to know it again."""
        self.A = None

    # -- what the driver sees
    def x(self):
        return self.sets[self.current]["x"]

    def squared_norm(self) -> float:
        """The squared norm of the residual after the last iteration (a read: the host waits)."""
        return self.arrays.read(self.norms[self.current])

    def half_step_norm(self) -> float | None:
        """The squared norm of the half-step residual of the last iteration (a read: the host
        waits), or None for a method without a half step."""
        if self.method.half_step is None:
            return None
        return self.arrays.squared_norm(self.half[self.method.half_step[1]])

    def finish_at_half_step(self) -> None:
        """Make the last iteration's half-step iterate the answer :meth:`x` returns."""
        self.arrays.copy_into(self.x(), self.half[self.method.half_step[0]])

    def advance(self, iterations: int) -> None:
        """Run ``iterations`` iterations from the current state, saving it first."""
        start = self.current
        key = (start, iterations)
        replay = self.graphs.get(key)
        if replay is None and self.graphs_allowed and iterations > 1 and self.warm >= {0, 1}:
            replay = self.arrays.graph(lambda: self._iterate(start, iterations))
            if replay is None:
                self.graphs_allowed = self.capture_works = False  # no capture here: plain calls from now on
            else:
                self.graphs[key] = replay
        if replay is None:
            self._iterate(start, iterations)
            self.warm.update({start, 1 - start} if iterations > 1 else {start})
        else:
            replay()
        self.saved_from = start
        self.current = (start + iterations) % 2

    def loops_on_device(self) -> bool:
        """Whether :meth:`loop` may run the solve's loop on the GPU (graphs allowed, a loop made
        or makeable, no capture refused)."""
        return self.graphs_allowed and self.make_loop is not None and not self.loop_refused

    def loop(self, squared_tolerance: float, most: int) -> tuple[int, int, int] | None:
        """Iterate on the GPU until the squared residual norm is within ``squared_tolerance``,
        is not finite, or ``most`` iterations are done: ``(iterations done, why they stopped,
        iterations done where the checkpoint was saved)`` (:mod:`.device_loop`'s codes; after
        a non-finite one :meth:`restore` goes back to the checkpoint). None where it cannot
        loop yet: before plain calls have warmed both sets of arrays (a capture cannot load a
        module or allocate), or where the capture was refused (then never again)."""
        if not self.warm >= {0, 1}:
            return None
        start = self.current
        stream = self.arrays.stream_handle()
        try:
            if self.gpu_loop is None or self.gpu_loop.stream != stream:
                if self.gpu_loop is not None:
                    self.gpu_loop.forget()
                self.gpu_loop = self.make_loop(self.arrays, self.sets[0]["x"], stream)
            if not self.gpu_loop.captured(start):
                self.gpu_loop.capture(start, lambda test, copy: self._iterate(start, 2, after_each=test, copy=copy))
        except (FusecError, RuntimeError, OSError) as exc:  # the driver, nvcc or the framework refused
            warnings.warn(FusecWarning(f"the solve loops on the host from here on: no loop on the GPU ({exc})"))
            self.loop_refused, self.gpu_loop = True, None
            return None
        done, why = self.gpu_loop.run(start, squared_tolerance, most)
        return self._looped(start, done, why)

    def _looped(self, start: int, done: int, why: int) -> tuple[int, int, int]:
        """After a launch of the loop from set ``start``: where the state is, and what
        :meth:`loop` answers (``(done, why, iterations done where the checkpoint was saved)``)."""
        self.saved_from = start
        self.current = (start + done) % 2  # an odd count stopped inside a body: the set its first iteration wrote
        return done, why, (done - 1) // 2 * 2

    def can_start_on_device(self, A) -> bool:
        """Whether a solve on ``A`` from x = 0 may start on the GPU (:meth:`start_on_device`): its
        loop captured from the first set on the current stream, on ``A``'s memory or on the
        stepper's own matrix (which ``A`` is copied into)."""
        return (self.loops_on_device() and self.gpu_loop is not None and self.gpu_loop.captured(0)
                and self.gpu_loop.stream == self.arrays.stream_handle()
                and (self.own_matrix is not None or self.arrays.placement(A) == self.A_placement))

    def start_on_device(self, A, b, survey, rtol: float, atol: float, most: int) -> tuple[float, tuple[int, int, int]]:
        """Start a solve of ``A x = b`` from x = 0 and launch its loop, the host reading once:
        the record and the first state written on the GPU from ``survey`` (the arguments'
        survey launched before, :meth:`.device_loop.DeviceLoop.start`), then the loop from
        the first set. ``(the squared tolerance, (iterations done, why, iterations done where
        the checkpoint was saved))`` as :meth:`loop`; no iterations done where the survey
        refused the arguments (REFUSED) or ``b`` met the tolerance (CONVERGED), the state then
        undefined. Only where :meth:`can_start_on_device`."""
        self._take_matrix(A)
        pairs = [(self.fixed[name], b) for name in self.method.fixed]
        pairs += [(self.sets[0][name], b) for name in self.method.state if name != "x"]
        self.gpu_loop.start(survey, rtol, atol, most, pairs, self.sets[0]["x"])
        limit, done, why = self.gpu_loop.launch(0)
        return limit, self._looped(0, done, why)

    def restore(self) -> None:
        """Back to the state the last :meth:`advance` started from."""
        start = self.saved_from
        for name, saved in self.checkpoint.items():
            self.arrays.copy_into(self.sets[start][name], saved)
        self.current = start

    # -- the calls (captured, or run)
    def _iterate(self, start: int, iterations: int, after_each: Callable | None = None,
                 copy: Callable | None = None) -> None:
        """``iterations`` iterations from set ``start``, its state first copied to the
        checkpoint (by ``copy(pairs)`` of ``(dst, src)`` where given: the GPU loop's one launch);
        ``after_each(squared_norm)`` is called after each with the array holding the new squared
        residual norm (the GPU loop's test)."""
        pairs = [(saved, self.sets[start][name]) for name, saved in self.checkpoint.items()]
        if copy is not None:
            copy(pairs)
        else:
            for dst, src in pairs:
                self.arrays.copy_into(dst, src)
        at = start
        for _ in range(iterations):
            self._one(at)
            at = 1 - at
            if after_each is not None:
                after_each(self.norms[at])

    def _one(self, at: int) -> None:
        source, target = self.sets[at], self.sets[1 - at]
        out = {f"{name}1": target[name] for name in self.method.state}
        out["rr1"] = self.norms[1 - at]
        out.update(self.half)
        self.program(A=self.A, **self.fixed, **source, out=out)
