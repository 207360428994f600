"""Shared-memory reuse and barrier placement for one kernel (paper §4.3.3).

The kernel is a straight sequence of routine calls in three sections: before
the serial loop, its body, and after it. Each call touches elements with a
named thread-to-data mapping. Only shared-memory accesses can race; registers
are private to a thread.

Barrier before call r when, since the last barrier,

1. r touches an element that another call touched with a different mapping,
   at least one of the two writing (different threads own the words), or
2. r writes a shared region that overlaps another element touched since
   (its memory is being reused under someone still using it).

Nowhere else. A routine that synchronises inside (``sync``) orders everything
before it against everything after it.

The loop body runs many times, so hazards wrap around: the body is scanned
again, starting from the state its end leaves, until no new barrier appears.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable

PRE, LOOP, POST = "pre", "loop", "post"
SECTIONS = (PRE, LOOP, POST)


class Mode(enum.Enum):
    READ = "read"
    WRITE = "write"
    UPDATE = "update"  # read-modify-write: an accumulating reduction

    @property
    def writes(self) -> bool:
        return self is not Mode.READ


@dataclasses.dataclass(frozen=True)
class Touch:
    """An access to an on-chip element (or a routine's scratch) by one call."""

    element: str
    mode: Mode
    mapping: str
    shared: bool


@dataclasses.dataclass(frozen=True)
class Event:
    section: str
    touches: tuple[Touch, ...]
    sync: bool = False  # the routine has a barrier inside


@dataclasses.dataclass(frozen=True)
class Region:
    """Shared memory of an element, in reals: [offset, offset + size)."""

    offset: int
    size: int

    def overlaps(self, other: "Region") -> bool:
        return self.offset < other.offset + other.size and other.offset < self.offset + self.size


# --------------------------------------------------------------------------- allocation

def lifetimes(events: list[Event]) -> dict[str, tuple[int, int]]:
    """Live interval of every shared element, in event positions.

    An element touched both inside and outside the loop, or read in the body
    before the body writes it, carries across iterations, so it lives over the
    whole loop."""
    loop = [i for i, e in enumerate(events) if e.section == LOOP]
    start, end = (loop[0], loop[-1]) if loop else (None, None)
    spans: dict[str, list[int]] = {}
    sections: dict[str, set[str]] = {}
    first_mode: dict[str, Mode] = {}
    for i, event in enumerate(events):
        for t in event.touches:
            if not t.shared:
                continue
            span = spans.setdefault(t.element, [i, i])
            span[1] = i
            sections.setdefault(t.element, set()).add(event.section)
            if event.section == LOOP:
                first_mode.setdefault(t.element, t.mode)
    out = {}
    for element, (a, b) in spans.items():
        carried = LOOP in sections[element] and (
            len(sections[element]) > 1 or first_mode[element] is not Mode.WRITE)
        if carried:
            a, b = min(a, start), max(b, end)
        out[element] = (a, b)
    return out


def allocate(sizes: dict[str, int], events: list[Event], align: int) -> tuple[dict[str, Region], int]:
    """First-fit offsets for shared elements whose lifetimes may not overlap.

    Elements live at the same time never share memory; others may. Returns
    the regions and the total size in reals. Offsets are multiples of
    ``align`` reals so routines can use 16-byte accesses."""
    live = lifetimes(events)
    order = sorted(sizes, key=lambda e: (live.get(e, (0, 0))[0], -sizes[e], e))
    placed: dict[str, Region] = {}
    for element in order:
        a, b = live.get(element, (0, len(events)))
        busy = sorted((placed[o].offset, placed[o].offset + placed[o].size)
                      for o in placed
                      if not (live.get(o, (0, 0))[1] < a or b < live.get(o, (0, 0))[0]))
        offset = 0
        for lo, hi in busy:
            if offset + sizes[element] <= lo:
                break
            offset = max(offset, -(-hi // align) * align)
        placed[element] = Region(offset, sizes[element])
    total = max((r.offset + r.size for r in placed.values()), default=0)
    return placed, total


# --------------------------------------------------------------------------- barriers

def _conflict(touch: Touch, seen: Iterable[Touch], regions: dict[str, Region]) -> bool:
    if not touch.shared:
        return False
    for other in seen:
        if not other.shared:
            continue
        if other.element == touch.element:
            if other.mapping != touch.mapping and (other.mode.writes or touch.mode.writes):
                return True  # rule 1
        elif touch.mode.writes and regions[touch.element].overlaps(regions[other.element]):
            return True  # rule 2
    return False


def _scan(events: list[tuple[int, Event]], state: list[Touch], barriers: set[int],
          regions: dict[str, Region]) -> list[Touch]:
    for index, event in events:
        if index in barriers or any(_conflict(t, state, regions) for t in event.touches):
            barriers.add(index)
            state = []
        if event.sync:
            state = []  # its inner barrier orders all that came before
        state = state + list(event.touches)
    return state


def place_barriers(events: list[Event], regions: dict[str, Region]) -> set[int]:
    """Positions (indices into ``events``) that need a barrier before them."""
    barriers: set[int] = set()
    indexed = list(enumerate(events))
    pre = [x for x in indexed if x[1].section == PRE]
    body = [x for x in indexed if x[1].section == LOOP]
    post = [x for x in indexed if x[1].section == POST]
    state = _scan(pre, [], barriers, regions)
    end = _scan(body, state, barriers, regions)  # the first iteration
    while True:  # later iterations start from the state the previous one left
        before = set(barriers)
        end = _scan(body, end, barriers, regions)
        if barriers == before:
            break
    # After the loop: what the last iteration left (or, with no iteration, the prologue).
    _scan(post, end + state, barriers, regions)
    return barriers
