"""Steppers kept between solves. A solve's fixed cost is its stepper: a stream of its own,
the arrays of its state, and the CUDA graphs captured on them (a capture and instantiation
take longer than many small iterations). A solver loop that solves one system after another
of one size gets the same stepper back each time, with its graphs where ``A`` is the same
memory (:meth:`.stepper.ProgramStepper.begin`).

A stepper is taken out while a solve runs and put back after it, so two solves at once (two
threads) never share one: the second makes its own.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Hashable

MOST_KEPT = 8  # steppers kept, the least recently used dropped first


class Kept:
    """What a solve of one method, framework, device, precision and size leaves for the next:
    the framework's arrays (CuPy's holds the solve's stream) and the stepper."""

    def __init__(self, arrays):
        self.arrays = arrays
        self.stepper: Any = None


class Workspaces:
    """Steppers (or anything) kept by key, each lent to one taker at a time."""

    def __init__(self, most: int = MOST_KEPT):
        self.most = most
        self._free: dict[Hashable, object] = {}  # oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._free)

    @contextlib.contextmanager
    def take(self, key: Hashable, make: Callable[[], object]):
        """The value kept for ``key``, or ``make()``'s; kept again for the next taker when the
        block ends (a solve that raised leaves its stepper's state undefined, not its arrays:
        the next solve copies its own state in). ``make`` may give None: nothing is kept."""
        with self._lock:
            value = self._free.pop(key, None)
        if value is None:
            value = make()
        try:
            yield value
        finally:
            if value is not None:
                with self._lock:
                    self._free.pop(key, None)  # a solve beside this one may have put one back
                    while len(self._free) >= self.most:
                        del self._free[next(iter(self._free))]
                    self._free[key] = value

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
