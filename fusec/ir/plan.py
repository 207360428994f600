"""Points of the optimization space: frozen, ordered, hashable records.

A :class:`KernelPlan` is a *fusion implementation* (paper §4.2): which calls
share a kernel, which implementation of each function, the calling order of
their routines, the block shape and the serial iterations. A
:class:`HorizontalPlan` runs independent kernel plans side by side in one
kernel, each on its own threads of every block (HFuse). A
:class:`StripedPlan` runs a kernel and one that needs its reductions' results
in one launch, stripe by stripe (cuSync, KTILER); a :class:`HeldPlan` runs
them in one launch of resident blocks with one grid barrier between them, the
producer's matrix tiles held on chip across it. A :class:`ProgramPlan` is
a *combination*: kernels that cover every call, in an order that respects
the DAG. They print, sort, hash into cache keys and serialise to JSON. A
:class:`ScalarPlan` is the one kernel no search picks: it stores the scalar
expressions a script returns.
"""

from __future__ import annotations

import dataclasses
import json

from ..library.model import Geometry, RoutineKind
from .geometry import Shape

ROWS, COLS = "rows", "cols"  # the axes serial iterations can walk in the tile geometry

# What a vector kernel's full 16-byte accesses tell L2 (its ``l2`` field): nothing,
# evict-first loads, or evict-first (streaming) stores. Where a call's vectors fit in
# L2 beside each other, keeping its inputs there and streaming the rest out pays:
# fp32 n = 2^22 on the H100, VADD 0.93x with evict-first loads, WAXPBY 0.75x with
# streaming stores; past L2 the hints cost 3-5 % (experiments/results/h100-cache-hints.md).
# The space offers all three; `fusec tune` measures which one a size wants.
L2_PLAIN, L2_EVICT_LOADS, L2_STREAM_STORES = 0, 1, 2
L2_NAMES = {L2_PLAIN: "plain", L2_EVICT_LOADS: "ld.cs", L2_STREAM_STORES: "st.cs"}


@dataclasses.dataclass(frozen=True, order=True)
class Step:
    """One routine call: the load of ``param`` of ``call``, its compute, or its store."""

    call: int
    kind: RoutineKind
    param: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}({self.call}{', ' + self.param if self.param else ''})"


class Plan:
    """What every kernel plan answers, whatever its family: the calls it covers,
    the kernel plans it is made of (itself alone for one), which family builds
    it (:mod:`fusec.families`), and its JSON form."""

    # each plan class gives ``parts``: the kernel plans it is made of (itself, for one)
    family: str  # the name its family is registered under
    across_barrier = False  # a producer and a consumer of its reductions in one launch
    serial: str | None = None  # the axis a block's serial iterations walk (a kernel plan's own)

    @property
    def composite(self) -> bool:
        """Whether it fuses several kernel plans (a horizontal, striped or held fusion)."""
        return True

    def part_of(self, call: int) -> "KernelPlan":
        return next(p for p in self.parts if call in p.calls)

    def traffic(self) -> "Plan":
        """Its :meth:`layout` less what changes its code but not the bytes it moves (a horizontal
        fusion's register bound): plans equal here are variants of one memory layout."""
        return self.layout()

    def implementation_of(self, call: int) -> str:
        return self.part_of(call).implementation_of(call)


@dataclasses.dataclass(frozen=True, order=True)
class KernelPlan(Plan):
    calls: tuple[int, ...]  # DAG call ids, in DAG order
    implementations: tuple[str, ...]  # implementation name per call
    steps: tuple[Step, ...]  # routine calling order
    shape: Shape
    serial: str | None = None  # tile geometry: ROWS or COLS; band geometry: ROWS
    l2: int = L2_PLAIN  # vector geometry: one of L2_NAMES (tile kernels set STREAM_MATRIX by rule)
    # band geometry: the loop's loads of the next instance of rows are issued before this
    # instance's computes (a second copy of what it loads in registers)
    ahead: bool = False

    @property
    def geometry(self) -> Geometry:
        return self.shape.geometry

    @property
    def block(self) -> int:
        return self.shape.block

    @property
    def family(self) -> str:
        return "band" if self.shape.geometry is Geometry.BAND else "tile"

    @property
    def parts(self) -> tuple["KernelPlan", ...]:
        return (self,)

    @property
    def composite(self) -> bool:
        return False

    def implementation_of(self, call: int) -> str:
        return self.implementations[self.calls.index(call)]

    def summary(self, dag) -> str:
        return _kernel_summary(dag, self)

    def relabelled(self, mapping: dict[int, int]) -> "KernelPlan":
        """The same plan over other calls (``mapping``: old call id -> new)."""
        return dataclasses.replace(self, calls=tuple(mapping[c] for c in self.calls),
                                   steps=tuple(dataclasses.replace(s, call=mapping[s.call]) for s in self.steps))

    def layout(self) -> "KernelPlan":
        """This plan without its routine order: the calls, implementations,
        shape and serial axis, which set how the kernel moves its bytes."""
        return dataclasses.replace(self, steps=())

    def to_json(self) -> dict:
        return {
            "calls": list(self.calls), "implementations": list(self.implementations),
            "steps": [[s.call, s.kind.value, s.param] for s in self.steps],
            "shape": {"geometry": self.shape.geometry.value, "block": self.shape.block,
                      "iters": self.shape.iters, "tile_rows": self.shape.tile_rows,
                      **({"pieces": self.shape.pieces} if self.shape.pieces else {})},
            "serial": self.serial,
            **({"l2": L2_NAMES[self.l2]} if self.l2 != L2_PLAIN else {}),
            **({"ahead": True} if self.ahead else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> "KernelPlan":
        shape = data["shape"]
        return cls(tuple(data["calls"]), tuple(data["implementations"]),
                   tuple(Step(c, RoutineKind(k), p) for c, k, p in data["steps"]),
                   Shape(Geometry(shape["geometry"]), shape["block"], shape["iters"], shape["tile_rows"],
                         shape.get("pieces", 0)),
                   data["serial"], _l2_code(data.get("l2", "plain")), bool(data.get("ahead", False)))


@dataclasses.dataclass(frozen=True, order=True)
class HorizontalPlan(Plan):
    """Independent kernel plans fused horizontally (HFuse): one kernel whose
    block is the parts' blocks side by side, part 0 on the first threads. Each
    part keeps its own shape (the split of the thread space is the parts'
    block sizes, whole warps), recomputes its own thread and block indices,
    syncs on its own named barrier, and skips the blocks past its own grid.

    ``bound``: at most this many registers per thread (``__maxnreg__``), the
    register bound of HFuse's Fig. 6; 0 for none (``__launch_bounds__`` of the
    whole block only).
    """

    parts: tuple[KernelPlan, ...]
    bound: int = 0
    family = "horizontal"

    @property
    def calls(self) -> tuple[int, ...]:
        """Every call of every part, in DAG order."""
        return tuple(sorted(c for p in self.parts for c in p.calls))

    @property
    def block(self) -> int:
        return sum(p.shape.block for p in self.parts)

    def layout(self) -> "HorizontalPlan":
        return dataclasses.replace(self, parts=tuple(p.layout() for p in self.parts))

    def traffic(self) -> "HorizontalPlan":
        return dataclasses.replace(self.layout(), bound=0)

    def summary(self, dag) -> str:
        bound = f", <={self.bound} regs" if self.bound else ""
        return "H{" + " || ".join(p.summary(dag) for p in self.parts) + f"{bound}}}"

    def relabelled(self, mapping: dict[int, int]) -> "HorizontalPlan":
        return dataclasses.replace(self, parts=tuple(p.relabelled(mapping) for p in self.parts))

    def offsets(self) -> tuple[int, ...]:
        """The first thread of each part."""
        out, first = [], 0
        for part in self.parts:
            out.append(first)
            first += part.shape.block
        return tuple(out)

    def to_json(self) -> dict:
        return {"horizontal": [p.to_json() for p in self.parts], "bound": self.bound}

    @classmethod
    def from_json(cls, data: dict) -> "HorizontalPlan":
        return cls(tuple(KernelPlan.from_json(p) for p in data["horizontal"]), int(data.get("bound") or 0))


LAGS = (1, 2, 3, 4)  # stripes the producer runs ahead of the consumer (the space searches these)


@dataclasses.dataclass(frozen=True, order=True)
class TwoPartPlan(Plan):
    """A producer and a consumer that needs its reductions' results, in one launch
    across the global barrier between them (a striped or a held fusion)."""

    producer: KernelPlan
    consumer: KernelPlan
    across_barrier = True

    @property
    def parts(self) -> tuple[KernelPlan, KernelPlan]:
        return (self.producer, self.consumer)

    @property
    def calls(self) -> tuple[int, ...]:
        return tuple(sorted(self.producer.calls + self.consumer.calls))

    @property
    def block(self) -> int:
        return self.producer.shape.block

    def layout(self):
        return dataclasses.replace(self, producer=self.producer.layout(), consumer=self.consumer.layout())

    def relabelled(self, mapping: dict[int, int]):
        return dataclasses.replace(self, producer=self.producer.relabelled(mapping),
                                   consumer=self.consumer.relabelled(mapping))


@dataclasses.dataclass(frozen=True, order=True)
class StripedPlan(TwoPartPlan):
    """Two dependent kernel plans in one launch, across the global barrier
    between them (cuSync's tile semaphores, KTILER's L2 reuse).

    The consumer reads results of the producer's reductions, vectors along one
    axis (the *stripe axis*); a stripe is one tile of that axis, every tile
    along the other. Blocks take tickets in the order: the producer's first
    ``lag`` stripes, then for each stripe J the producer's stripe J + lag and
    the consumer's stripe J. A consumer block waits until the producer's blocks
    of its stripe have finished (their reductions included), so it reads the
    matrix tiles they just read or wrote from L2, not from DRAM; it waits only
    for blocks with earlier tickets, which are running, so it cannot deadlock.
    """

    lag: int = 1
    family = "striped"

    def summary(self, dag) -> str:
        return "S{" + " -> ".join(p.summary(dag) for p in self.parts) + f"; lag {self.lag}}}"

    def to_json(self) -> dict:
        return {"striped": [p.to_json() for p in self.parts], "lag": self.lag}

    @classmethod
    def from_json(cls, data: dict) -> "StripedPlan":
        producer, consumer = (KernelPlan.from_json(p) for p in data["striped"])
        return cls(producer, consumer, int(data["lag"]))


@dataclasses.dataclass(frozen=True, order=True)
class HeldPlan(TwoPartPlan):
    """Two dependent kernel plans of the same tiles in one launch whose blocks
    are all resident at once, with one grid barrier between them: every block
    runs the producer on its tiles, waits at the barrier (the producer's
    reductions are then finished everywhere), and runs the consumer on the
    same tiles, in the same order. The first ``registers`` tiles of a block
    that the consumer reads again stay in registers across the barrier, the
    next ``shared`` in shared memory; the rest are re-read from memory (L2,
    where they were the last ones touched). Both parts have the same shape
    and serial axis, so a block's n-th tile is the same in both. ``per_sm``:
    the blocks each SM must hold at once (the grid over the SMs, rounded up),
    which divides an SM's registers and shared memory between them.
    ``stores_after``: the producer leaves the held tiles of a matrix it
    computes unstored, and the consumer stores them from chip as it takes
    them, evict-first (band parts only; bench/one_barrier.cu's DEFER): the
    producer's pass then writes only the tiles the consumer re-reads, which
    L2 keeps, and the held tiles' writes overlap the consumer's re-reads.
    ``finish_after``: the producer's column sums (band parts: GEMVER's x) are
    added into the half of a doubled accumulator that the launch's round
    picks and finished after the barrier by every block for its own columns,
    instead of by the last block to arrive before it (no tickets; the launch
    clears the other half for the next one)."""

    registers: int = 0  # tiles per block held in registers
    shared: int = 0  # tiles per block held in shared memory, after those
    per_sm: int = 1  # blocks resident on each SM
    stores_after: bool = False  # the held tiles of a computed matrix stored after the barrier
    finish_after: bool = False  # the producer's column sums finished after the barrier
    family = "held"

    def summary(self, dag) -> str:
        return ("B{" + " -> ".join(p.summary(dag) for p in self.parts)
                + f"; held {self.registers} in registers, {self.shared} in shared, {self.per_sm}/SM"
                + ("; stored after" if self.stores_after else "")
                + ("; finished after" if self.finish_after else "") + "}")

    def to_json(self) -> dict:
        data = {"held": [p.to_json() for p in self.parts], "registers": self.registers, "shared": self.shared,
                "per_sm": self.per_sm}
        for option in ("stores_after", "finish_after"):  # absent from plans made before the options existed
            if getattr(self, option):
                data[option] = True
        return data

    @classmethod
    def from_json(cls, data: dict) -> "HeldPlan":
        producer, consumer = (KernelPlan.from_json(p) for p in data["held"])
        return cls(producer, consumer, int(data["registers"]), int(data["shared"]), int(data["per_sm"]),
                   bool(data.get("stores_after", False)), bool(data.get("finish_after", False)))


@dataclasses.dataclass(frozen=True, order=True)
class ScalarPlan(Plan):
    """The kernel that computes and stores the scalar expressions a script returns
    (``values``, value ids): one thread, launched after every other kernel, so
    that the results of calls it reads are final. It is not a point of the space:
    every plan of a script that returns an expression has the same one, so
    :func:`fusec.emit.program.generate` appends it to the plan's kernels. An
    expression that only calls read is evaluated by those calls' kernels instead
    (:attr:`fusec.ir.kernel.Kernel.expressions`)."""

    values: tuple[int, ...]
    family = "scalar"
    calls = ()  # it covers no call
    parts = ()  # nor any kernel plan

    @property
    def composite(self) -> bool:
        return False

    def summary(self, dag) -> str:
        return "+".join(dag.value(v).label for v in self.values) + " [1 thread]"


def kernel_plan_from_json(data: dict) -> Plan:
    if "horizontal" in data:
        return HorizontalPlan.from_json(data)
    if "striped" in data:
        return StripedPlan.from_json(data)
    if "held" in data:
        return HeldPlan.from_json(data)
    return KernelPlan.from_json(data)


@dataclasses.dataclass(frozen=True, order=True)
class ProgramPlan:
    kernels: tuple[Plan, ...]

    def to_json(self) -> str:
        return json.dumps([k.to_json() for k in self.kernels], sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ProgramPlan":
        """The plan ``text`` holds; a TypeError, not a plan that fails later in a lookup, where a
        field holds a list in place of a number or a name (a plan is hashed and compared)."""
        plan = cls(tuple(kernel_plan_from_json(k) for k in json.loads(text)))
        hash(plan)
        return plan

    @property
    def uses_band(self) -> bool:
        """Whether a kernel of the plan, or a part of a held fusion, is in the band
        geometry (band kernels are never parts of horizontal or striped fusions)."""
        return any(part.geometry is Geometry.BAND for whole in self.kernels for part in whole.parts)

    def summary(self, dag) -> str:
        """One line: each kernel's calls (with their implementation where the
        function has several) and shape, and for a fusion the order of its
        computes and how many groups of loads wait for memory, e.g.
        ``q=sgemv(registers)+s=sgemtv [256t,8it,16r,rows; q>s, 1 load phase]``."""
        return " | ".join(k.summary(dag) for k in self.kernels)


def _l2_code(name: str) -> int:
    codes = {v: k for k, v in L2_NAMES.items()}
    if name not in codes:
        raise ValueError(f"unknown L2 policy {name!r} (expected one of {', '.join(codes)})")
    return codes[name]


def _kernel_summary(dag, kernel: KernelPlan) -> str:
    def label(call: int) -> str:
        return dag.value(dag.call(call).result).label
    calls = "+".join(f"{label(c)}={dag.call(c).function}" + (f"({i})" if i != "default" else "")
                     for c, i in zip(kernel.calls, kernel.implementations))
    shape = f"{kernel.shape.block}t,{kernel.shape.iters}it"
    if kernel.geometry is Geometry.BAND:
        shape = f"band {kernel.shape.block}t,{kernel.shape.tile_rows}r,{kernel.shape.pieces}p,{kernel.shape.iters}it"
        shape += ",ahead" if kernel.ahead else ""
    elif kernel.serial:
        shape += f",{kernel.shape.tile_rows}r,{kernel.serial}"
    if kernel.l2 != L2_PLAIN:
        shape += f",{L2_NAMES[kernel.l2]}"
    if len(kernel.calls) > 1:
        computes = [s.call for s in kernel.steps if s.kind is RoutineKind.COMPUTE]
        phases = sum(1 for s, before in zip(kernel.steps, (None,) + kernel.steps)
                     if s.kind is RoutineKind.LOAD and (before is None or before.kind is not RoutineKind.LOAD))
        shape += f"; {'>'.join(label(c) for c in computes)}, {phases} load phase{'s' if phases > 1 else ''}"
    return f"{calls} [{shape}]"
