"""The distributed plan: frozen data, made by :mod:`.planner`, printed by
:mod:`.text`, run by :mod:`.program`.

A plan is a sequence of steps: *stages* (sub-scripts of the script that each
rank compiles and runs as an ordinary fusec program on its rows) and the
*conversions* between them (collectives, and the steps a rank takes alone:
slicing its rows out of a whole vector, zeros in place of a term that rank 0
carries, its block set into zeros). Values are named by their DAG value id.
"""

from __future__ import annotations

import dataclasses

from .layout import Layout, Op, block


@dataclasses.dataclass(frozen=True)
class StageArg:
    """A value as a stage program reads or returns it: its name in the stage's script."""

    name: str
    value: int
    layout: Layout


@dataclasses.dataclass(frozen=True)
class Stage:
    """A sub-script every rank that holds rows compiles and runs on its block."""

    index: int
    name: str  # names the stage's script in messages: "bicgk.script#0"
    calls: tuple[int, ...]  # call ids of the script, in order
    source: str  # the stage's script text
    inputs: tuple[StageArg, ...]  # in the order of its input statement
    outputs: tuple[StageArg, ...]  # in the order of its return statement
    sizes: tuple[tuple[str, int], ...]  # the sizes it is compiled for: a split size is rank 0's block
    # its scalar inputs that arrive as one-element device arrays (made by a stage or a
    # collective, never copied to the host): compiled as fusec.compile's device_scalars
    device_scalars: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Conversion:
    """A change of a value's layout between stages."""

    op: Op
    value: int
    source: Layout
    target: Layout
    after: int  # runs after this stage (-1: before the first)
    first_use: int | None  # the stage that first reads the result; None: only the return does
    count: int  # elements of the whole value
    bytes: int  # count x the element size: the payload of a collective

    @property
    def collective(self) -> bool:
        return self.op.collective

    @property
    def overlaps(self) -> tuple[int, ...]:
        """Stages that may run while the collective is in flight: those between
        it and the first stage that reads its result."""
        if not self.collective or self.first_use is None:
            return ()
        return tuple(range(self.after + 1, self.first_use))


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a call: a stage (``stage`` set) or a conversion (``conversion`` set).
    ``together``: further conversions done by the same collective (all-reduces of scalars
    after one stage, packed into one buffer: one collective's latency, not one each)."""

    stage: int | None = None
    conversion: int | None = None
    together: tuple[int, ...] = ()

    @property
    def conversions(self) -> tuple[int, ...]:
        return () if self.conversion is None else (self.conversion,) + self.together


@dataclasses.dataclass(frozen=True)
class DistributedPlan:
    script: str  # the script's file, as given
    name: str  # its stem
    dtype: str
    ranks: int  # processes in the communicator
    active: int  # the first ``active`` ranks hold rows; the others only take part in collectives
    sizes: tuple[tuple[str, int], ...]  # global sizes
    split: tuple[tuple[str, str], ...]  # split size -> its name in stage scripts (rows of one rank)
    layouts: tuple[tuple[int, Layout], ...]  # every value's layout as it is made (inputs: as passed)
    outputs: tuple[tuple[int, Layout], ...]  # each returned value and the layout a rank gets it in
    stages: tuple[Stage, ...]
    conversions: tuple[Conversion, ...]
    steps: tuple[Step, ...]
    itemsize: int

    def layout(self, value: int) -> Layout:
        return dict(self.layouts)[value]

    def size(self, symbol: str) -> int:
        return dict(self.sizes)[symbol]

    @property
    def collectives(self) -> tuple[Conversion, ...]:
        """Every conversion a collective does (one a value; see :attr:`launches`)."""
        return tuple(c for c in self.conversions if c.collective)

    @property
    def launches(self) -> tuple[tuple[Conversion, ...], ...]:
        """The collectives a call issues, in order, each with the conversions it does."""
        return tuple(tuple(self.conversions[i] for i in step.conversions) for step in self.steps
                     if step.conversion is not None and self.conversions[step.conversion].collective)

    def rows(self, length: int, rank: int) -> tuple[int, int]:
        """[lo, hi) of a split value of ``length`` rows that ``rank`` holds."""
        return block(length, rank, self.active)
