"""The solver loop: run ``check_every`` iterations, read the squared residual norm once, stop
when ``||r|| <= tol``; where the number read is not finite, go back and redo those iterations
one at a time to find the first that broke down. There, a method with a half step (BiCGStab:
``s = r - alpha A p`` exactly zero makes ``omega = 0 / 0``) is converged when the half step's
residual meets the tolerance, as SciPy's is, and the answer is the half-step iterate; else it
is a breakdown, and the answer the iterate before it.

The stepper is anything with ``advance(k)``, ``restore()``, ``squared_norm()``, ``x()``,
``half_step_norm()`` (None without a half step) and ``finish_at_half_step()``, and, to loop
on the GPU, ``loops_on_device()`` and ``loop(squared_tolerance, most)``
(:class:`.stepper.ProgramStepper` on the GPU; the tests drive this loop on NumPy arrays).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from . import device_loop

MOST_PER_CHECK = 16  # iterations between two reads at most: the default for a small A
CHUNK_SECONDS = 1e-3  # by default, at most this much GPU work between two reads (see below)
LAUNCH_SECONDS = 0.25  # the GPU's loop: about this much work a launch at most, then the host reads


def default_check_every(seconds_per_iteration: float) -> int:
    """The largest power of two up to MOST_PER_CHECK whose iterations take at most CHUNK_SECONDS,
    at least 1. A solve runs up to ``check_every - 1`` iterations past the first that meets the
    rule, so a long iteration makes that overshoot the larger cost; a read idles the GPU for the
    host's wait and its next launch, a cost far below 1 ms. Powers of two: an even
    ``check_every`` captures one graph, not two (one from each set of state arrays)."""
    every = MOST_PER_CHECK
    while every > 1 and every * seconds_per_iteration > CHUNK_SECONDS:
        every //= 2
    return every


def most_per_launch(matrix_bytes: float) -> int:
    """Iterations a launch of the GPU's loop runs at most: LAUNCH_SECONDS of them, each priced
    conservatively (its passes over A at 2 TB/s, and at least 10 us: a small iteration is its
    launches), so a solve that does not converge still returns to the host (and to Ctrl-C)
    about every LAUNCH_SECONDS; at least 16."""
    return max(16, int(LAUNCH_SECONDS / max(matrix_bytes / 2e12, 10e-6)))


@dataclasses.dataclass(frozen=True)
class Outcome:
    """``info`` as SciPy's: 0 converged, ``> 0`` the iterations done without converging,
    ``< 0`` broke down at iteration ``-info`` (1-based); ``iterations`` done in the answer (an
    answer from a half step counts that iteration)."""

    info: int
    iterations: int


def run(stepper, first_squared_norm: float, tol: float, maxiter: int, check_every: int | Callable[[], int], *,
        on_device: bool = False, most_per_launch: int | None = None) -> Outcome:
    """Iterate until ``||r|| <= tol`` or ``maxiter`` iterations; the answer is ``stepper.x()``.
    ``on_device``: loop on the GPU where the stepper can (``stepper.loop``: one launch, one
    read, the rule tested after every iteration, at most ``most_per_launch`` iterations a
    launch, so that the host, and Ctrl-C, get a turn now and then; the first two iterations are
    plain calls read by the host, which warm both sets of arrays), else every ``check_every``
    iterations here (a function giving it: called only then)."""
    limit = tol * tol
    if first_squared_norm <= limit:
        return Outcome(0, 0)
    return _iterate(stepper, limit, maxiter, check_every, on_device, most_per_launch)


def resume(stepper, limit: float, maxiter: int, looped: tuple[int, int, int], check_every: int | Callable[[], int], *,
           most_per_launch: int | None = None) -> Outcome:
    """:func:`run` on the GPU after its first launch of the loop was made with the solve's
    start (``stepper.start_on_device``: ``looped`` its result, at least one iteration done;
    ``limit`` the squared tolerance that start computed)."""
    return _iterate(stepper, limit, maxiter, check_every, True, most_per_launch, looped)


def _iterate(stepper, limit: float, maxiter: int, check_every, on_device: bool, most_per_launch: int | None,
             looped: tuple[int, int, int] | None = None) -> Outcome:
    """The loop of :func:`run` from the first iteration (``looped``: the first launch's result, made)."""
    done, first = 0, looped
    while done < maxiter:
        if first is not None:
            looped, first = first, None
        else:
            looping = on_device and stepper.loops_on_device()
            most = min(maxiter - done, most_per_launch or maxiter)
            looped = stepper.loop(limit, most) if looping else None
        if looped is not None:
            ran, why, saved_at = looped
            if why == device_loop.CONVERGED:
                return Outcome(0, done + ran)
            if why == device_loop.MOST_ITERATIONS:
                done += ran
                continue
            stepper.restore()  # not finite at iteration done + ran: redo from the checkpoint
            done += saved_at
            chunk = ran - saved_at
        else:
            warming = on_device and stepper.loops_on_device()  # not warm yet: two plain iterations
            if not warming and callable(check_every):
                check_every = check_every()
            chunk = min(2 if warming else check_every, maxiter - done)
            stepper.advance(chunk)
            rr = stepper.squared_norm()
            if math.isfinite(rr):
                done += chunk
                if rr <= limit:
                    return Outcome(0, done)
                continue
            stepper.restore()
        outcome = _one_at_a_time(stepper, done, chunk, limit)
        if outcome is not None:
            return outcome
        done += chunk  # finite one at a time: the chunk's reduction order differed; carry on
    return Outcome(maxiter, maxiter)


def _one_at_a_time(stepper, done: int, chunk: int, limit: float) -> Outcome | None:
    """Redo the ``chunk`` iterations after ``done`` one at a time, from the state restored, to
    find the first that ends non-finite or meets the rule; None where none does."""
    for step in range(chunk):
        stepper.advance(1)
        rr = stepper.squared_norm()
        if not math.isfinite(rr):
            half = stepper.half_step_norm()  # the one extra read, on this rare path only
            if half is not None and half <= limit:  # (NaN <= limit is false)
                stepper.finish_at_half_step()
                return Outcome(0, done + step + 1)
            stepper.restore()
            return Outcome(-(done + step + 1), done + step)
        if rr <= limit:
            return Outcome(0, done + step + 1)
    return None
