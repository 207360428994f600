"""When to use fewer GPUs than there are ranks.

Spreading rows over more GPUs divides the local work, but every collective
costs about the same few microseconds whatever its size at these sizes, so
below some size fewer GPUs are faster. The rule: for each count of ranks
holding rows, a = 1 .. P, predict

    seconds(a) = sum over the stages of (the stage's local seconds on rank 0 + launch)
               + sum over the collectives of their measured latency at their bytes (P ranks take part)

and take the a with the least (the fewest on a tie). A stage's local seconds are
what fusec's performance model predicts for the best plan of the stage's script
at rank 0's block (:func:`modelled`), the same model that picks the stage's
kernels: one rank holding every row runs the whole script as one stage, and
where a call needs a reduction over all the rows before another call reads the
same matrix (SGEMVT, ATAX's second product) that stage passes over the matrix
more than once, which only the model knows; with more ranks the reduction is a
collective between two stages of one pass each. Without a model a stage is
priced at its floor, the bytes it must move at the copy bandwidth
(:func:`stage_bytes`). The collective part and the launch cost come from a
table ``bench/distributed.py`` measures on the machine (:class:`Latency`).
Without a table the rule is not applied: every rank holds rows.

Every rank gets the whole results, so with fewer ranks holding rows the
others still take part in a collective (a broadcast in place of the
all-reduce): the planner's choice weighs the local work saved against the
difference between them. Whether to start fewer processes at all (the
others needing nothing) is the same sum without those broadcasts
(``idle_results=False``): bench/distributed.py reports both.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import warnings
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np

from ..ir.dag import Dag
from ..library.model import Library
from .layout import Op
from .plan import DistributedPlan, Stage
from .stages import dims_of


@dataclasses.dataclass(frozen=True)
class Latency:
    """Measured seconds of collectives: (operation, ranks, bytes, seconds) points,
    and the cost of one more stage (a launch from the host) on that machine."""

    gpu: str
    points: tuple[tuple[str, int, int, float], ...]
    launch_seconds: float = 0.0

    def seconds(self, op: str, ranks: int, nbytes: int) -> float | None:
        """Interpolated linearly in bytes between the measured sizes (the smallest
        size's time below it, the last two's slope past the largest); the
        nearest measured rank count; None where the operation was not measured."""
        counts = sorted({r for o, r, _, _ in self.points if o == op})
        if not counts:
            return None
        nearest = min(counts, key=lambda r: (abs(r - ranks), -r))
        table = sorted((b, s) for o, r, b, s in self.points if o == op and r == nearest)
        sizes = [b for b, _ in table]
        i = bisect.bisect_left(sizes, nbytes)
        if i == 0:
            return table[0][1]
        if i == len(table):
            i -= 1
        (b0, s0), (b1, s1) = table[i - 1], table[i]
        return max(table[0][1], s0 + (s1 - s0) * (nbytes - b0) / (b1 - b0))

    def to_json(self) -> str:
        return json.dumps({"gpu": self.gpu, "launch_seconds": self.launch_seconds,
                           "points": [list(p) for p in self.points]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Latency":
        data = json.loads(text)
        points = tuple((str(o), int(r), int(b), float(s)) for o, r, b, s in data["points"])
        return cls(str(data["gpu"]), points, float(data.get("launch_seconds", 0.0)))

    @classmethod
    def load(cls, path: str | Path) -> "Latency":
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def shipped(gpu_slug: str | None) -> Latency | None:
    """The table fusec ships for this GPU (``fusec/data/collectives/<slug>.json``), if any."""
    if not gpu_slug:
        return None
    folder = resources.files("fusec.data").joinpath("collectives")
    if not folder.is_dir():
        return None
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        stem = entry.name[:-5]
        if entry.name.endswith(".json") and (stem.startswith(gpu_slug) or gpu_slug.startswith(stem)):
            return Latency.from_json(entry.read_text(encoding="utf-8"))
    return None


def stage_bytes(plan: DistributedPlan, dag: Dag) -> list[int]:
    """Bytes each stage must move on rank 0 (the largest block): each array it
    reads once, each it returns once."""
    out = []
    for stage in plan.stages:
        local = dict(stage.sizes)
        split = dict(plan.split)
        total = 0
        for arg in stage.inputs + stage.outputs:
            if plan.active == 1:
                dims = dag.value(arg.value).dims
            else:
                dims = dims_of(dag, arg.value, arg.layout, split)
            total += int(np.prod([local[d] for d in dims], dtype=np.int64)) * plan.itemsize
        out.append(total)
    return out


StageSeconds = Callable[[Stage], float]  # a stage's local seconds on rank 0's block


def modelled(library: Library, dtype: str, predictor) -> StageSeconds:
    """A stage's local seconds as ``predictor`` prices the best plan of its script at
    its sizes (kept by the stage's text and sizes: the rule asks again for each count)."""
    from ..frontend import check, parse
    from ..space.combinations import build_space
    from ..space.search import SpaceCutWarning
    known: dict[tuple, float] = {}

    def seconds(stage: Stage) -> float:
        key = (stage.source, stage.sizes)
        if key not in known:
            dag = check(parse(stage.source, stage.name), library)
            with warnings.catch_warnings():  # the stage's compile says it, where it is compiled
                warnings.simplefilter("ignore", SpaceCutWarning)
                space = build_space(dag, library, dtype, dict(stage.sizes), predictor)
            known[key] = space.best().predicted
        return known[key]
    return seconds


def predicted_seconds(plan: DistributedPlan, dag: Dag, latency: Latency, bandwidth: float, *,
                      idle_results: bool = True, stage_seconds: StageSeconds | None = None) -> float:
    """The plan's predicted seconds a call; without ``idle_results``, as if the
    ranks holding no rows were not there (no broadcasts to them). ``stage_seconds``:
    each stage's local seconds (:func:`modelled`); without it, its bytes at ``bandwidth``."""
    if stage_seconds is None:
        local = sum(b / bandwidth + latency.launch_seconds for b in stage_bytes(plan, dag))
    else:
        local = sum(stage_seconds(stage) + latency.launch_seconds for stage in plan.stages)
    collectives = 0.0
    for launch in plan.launches:  # scalars packed into one all-reduce: one latency
        c = launch[0]
        if not idle_results and c.op is Op.BROADCAST:
            continue
        measured = latency.seconds(str(c.op), plan.ranks, sum(t.bytes for t in launch))
        collectives += measured if measured is not None else 0.0
    return local + collectives


def active_ranks(ranks: int, seconds: Callable[[int], float]) -> int:
    """The count of ranks holding rows, 1 .. ``ranks``, whose predicted seconds are least."""
    return min(range(1, ranks + 1), key=lambda a: (seconds(a), a))

