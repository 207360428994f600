"""Measured plan times, what a correction is fitted to: ``training/<gpu>.json``.

``fusec perfdb measure-plans`` (:mod:`fusec.tune.plans`) writes one *point* per
script, precision and sizes: every candidate it measured there, each with its plan,
the groups it was chosen by, and per kernel the class, the features
(:mod:`fusec.cost.features`) and the performance database's price, beside the
measured time (the median, as ``fusec tune`` measures) or why it failed. A point
records the library and the database (its ``built`` stamp) whose prices it holds and
the features' version, so a fit takes only points priced by the database in use.

The file is JSON with one point per line (diffs stay readable), rewritten atomically
after each point. A file that does not parse or has a field wrong is a
:class:`~fusec.errors.FusecError` naming the file and the field: it holds GPU time,
so it is never overwritten.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Mapping

from .. import data
from .. import validate as check
from ..cache import atomic_write_text, locked
from ..errors import FusecError
from .features import CLASSES, FEATURES, FEATURES_VERSION

FORMAT = 1
KIND = "fusec plan timings"
BUNDLED = data.TRAINING
MAX_FEATURES = 64  # of a point of another features' version, kept as read


@dataclasses.dataclass(frozen=True)
class KernelRecord:
    kind: str  # one of features.CLASSES
    predicted: float  # seconds: the performance database's price
    values: tuple[float, ...]  # in the order of features.FEATURES

    def to_json(self) -> dict:
        return {"class": self.kind, "predicted_us": microseconds(self.predicted), "features": list(stored(self.values))}


def microseconds(seconds: float) -> float:
    """Seconds as a training file keeps them: microseconds to 1e-9, so that a file read and
    written again is the same text (seconds times 1e6 alone moved the last bit each time)."""
    return round(seconds * 1e6, 9)


def stored(values) -> tuple[float, ...]:
    """Feature values as a training file keeps them (6 decimals)."""
    return tuple(round(v, 6) for v in values)


@dataclasses.dataclass(frozen=True)
class PlanRecord:
    plan: str  # the ProgramPlan's JSON
    summary: str
    groups: tuple[str, ...]  # why it was measured: top, layout, class, first, ...
    kernels: tuple[KernelRecord, ...]
    verdict: str  # "ok", or why it was not timed (tune.search's verdicts, "not measured")
    measured: float | None = None  # seconds, the median; None unless it passed
    fastest: float | None = None  # None where only the median was kept (a draw's rows)
    slowest: float | None = None

    @property
    def predicted(self) -> float:
        """The database's price of the plan: its kernels' summed."""
        return math.fsum(k.predicted for k in self.kernels)

    def to_json(self) -> dict:
        out = {"summary": self.summary, "groups": list(self.groups), "verdict": self.verdict,
               "measured_us": None if self.measured is None else microseconds(self.measured),
               "kernels": [k.to_json() for k in self.kernels], "plan": json.loads(self.plan)}
        if self.measured is not None and self.fastest is not None:
            out.update(fastest_us=microseconds(self.fastest), slowest_us=microseconds(self.slowest))
        return out


@dataclasses.dataclass(frozen=True)
class PointRecord:
    script: str  # the script's name (its file's stem)
    dtype: str
    sizes: tuple[tuple[str, int], ...]
    library: str  # hash
    perfdb_built: str  # the database whose prices the kernels hold
    features_version: int
    seed: int
    draw: int
    when: str
    seconds: float  # the point took, compiling included
    complete: bool  # False: the budget ended it before every candidate was measured
    plans: tuple[PlanRecord, ...]

    @property
    def key(self) -> tuple:
        return self.script, self.dtype, self.sizes

    @property
    def label(self) -> str:
        return f"{self.script} {self.dtype} " + ",".join(f"{k}={v}" for k, v in self.sizes)

    def to_json(self) -> dict:
        return {"script": self.script, "dtype": self.dtype, "sizes": dict(self.sizes), "library": self.library,
                "perfdb_built": self.perfdb_built, "features_version": self.features_version,
                "seed": self.seed, "draw": self.draw, "when": self.when, "seconds": round(self.seconds, 2),
                "complete": self.complete, "plans": [p.to_json() for p in self.plans]}


@dataclasses.dataclass(frozen=True)
class TrainingData:
    gpu: Mapping[str, object]  # name, slug
    points: tuple[PointRecord, ...] = ()
    path: str = dataclasses.field(default="", compare=False)

    def with_point(self, point: PointRecord) -> "TrainingData":
        """These points and ``point``, which replaces one of the same key where it stands (else
        comes last)."""
        if any(p.key == point.key for p in self.points):
            return dataclasses.replace(self, points=tuple(point if p.key == point.key else p for p in self.points))
        return dataclasses.replace(self, points=self.points + (point,))

    def to_text(self) -> str:
        head = {"format": FORMAT, "kind": KIND, "gpu": dict(self.gpu), "features": list(FEATURES)}
        lines = [json.dumps(p.to_json(), separators=(",", ":")) for p in self.points]
        return (json.dumps(head)[:-1] + ', "points": [\n' + ",\n".join(lines) + ("\n" if lines else "") + "]}\n")

    @classmethod
    def from_text(cls, text: str, path: str = "") -> "TrainingData":
        """The data ``text`` holds; :class:`ValueError` (``validate.Invalid``) naming the field
        when any is missing, of the wrong type or out of range."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("kind") != KIND or raw.get("format") != FORMAT:
            raise check.Invalid(f"not a file of fusec plan timings of format {FORMAT}")
        gpu = check.mapping(raw.get("gpu"), "gpu")
        check.text(gpu.get("slug"), "gpu slug")
        points = raw.get("points")
        if not isinstance(points, list):
            raise check.Invalid("points is not a list")
        return cls(gpu, tuple(_point(p, i) for i, p in enumerate(points)), path)


def _point(raw, index: int) -> PointRecord:
    where = f"point {index + 1}"
    raw = check.mapping(raw, where)
    sizes = check.mapping(raw.get("sizes"), f"{where}: sizes")
    plans = raw.get("plans")
    if not isinstance(plans, list):
        raise check.Invalid(f"{where}: plans is not a list")
    version = check.number(raw.get("features_version"), f"{where}: features_version", low=0, integer=True)
    # a point of other features' version keeps its values as they are, for a fit to leave out or
    # to recompute from the plans (fusec.tune.plans.refeatured); this version's are checked whole
    count = len(FEATURES) if version == FEATURES_VERSION else None
    return PointRecord(
        check.text(raw.get("script"), f"{where}: script"), check.text(raw.get("dtype"), f"{where}: dtype"),
        tuple(sorted((check.text(k, f"{where}: a size name"),
                      check.number(v, f"{where}: size {k}", low=1, high=check.MAX_EXTENT, integer=True))
                     for k, v in sizes.items())),
        check.text(raw.get("library"), f"{where}: library"),
        check.text(raw.get("perfdb_built"), f"{where}: perfdb_built"),
        version,
        check.number(raw.get("seed"), f"{where}: seed", low=0, integer=True),
        check.number(raw.get("draw"), f"{where}: draw", low=0, integer=True),
        check.text(raw.get("when"), f"{where}: when"),
        float(check.number(raw.get("seconds"), f"{where}: seconds", low=0)),
        bool(raw.get("complete", False)),
        tuple(_plan(p, f"{where} plan {j + 1}", count) for j, p in enumerate(plans)))


def _plan(raw, where: str, count: int | None) -> PlanRecord:
    raw = check.mapping(raw, where)
    kernels = raw.get("kernels")
    if not isinstance(kernels, list) or (not kernels and raw.get("measured_us") is not None):
        raise check.Invalid(f"{where}: kernels is not a list of kernels")  # (none: a plan not generated)
    groups = raw.get("groups")
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise check.Invalid(f"{where}: groups is not a list of names")
    measured = raw.get("measured_us")
    times = [None, None, None]
    if measured is not None:  # the spread is optional (a draw keeps the median alone), but both or neither
        spread = ("fastest_us", "slowest_us") if "fastest_us" in raw or "slowest_us" in raw else ()
        times = [float(check.number(raw.get(f), f"{where}: {f}", low=0, above=True, high=1e9)) * 1e-6
                 for f in ("measured_us", *spread)] + [None] * (2 - len(spread))
    if not isinstance(raw.get("plan"), list) or not raw["plan"]:
        raise check.Invalid(f"{where}: plan is not a list of kernel plans")
    return PlanRecord(json.dumps(raw["plan"], separators=(",", ":")),
                      check.text(raw.get("summary"), f"{where}: summary"), tuple(groups),
                      tuple(_kernel(k, f"{where} kernel {i + 1}", count) for i, k in enumerate(kernels)),
                      check.text(raw.get("verdict"), f"{where}: verdict"), *times)


def _kernel(raw, where: str, count: int | None) -> KernelRecord:
    """A kernel's record; ``count``: how many features it must have (None: of another
    version, any number up to MAX_FEATURES)."""
    raw = check.mapping(raw, where)
    kind = check.text(raw.get("class"), f"{where}: class")
    if kind not in CLASSES:
        raise check.Invalid(f"{where}: class {kind!r} is not one of {', '.join(CLASSES)}")
    values = raw.get("features")
    if count is not None and (not isinstance(values, list) or len(values) != count):
        raise check.Invalid(f"{where}: features is not a list of {len(FEATURES)} numbers ({', '.join(FEATURES)})")
    if not isinstance(values, list) or len(values) > MAX_FEATURES:
        raise check.Invalid(f"{where}: features is not a list of at most {MAX_FEATURES} numbers")
    return KernelRecord(kind, float(check.number(raw.get("predicted_us"), f"{where}: predicted_us", low=0,
                                                 above=True, high=1e9)) * 1e-6,
                        tuple(float(check.number(v, f"{where}: {name}", low=-1e6, high=1e6))
                              for v, name in zip(values, [*FEATURES, *range(len(FEATURES), len(values))])))


def directory() -> Path:
    """Where training files live: $FUSEC_TRAINING, else the bundled ones (fusec/data/training)."""
    return Path(os.environ.get("FUSEC_TRAINING") or BUNDLED)


def path_for(gpu_slug: str, folder: Path | None = None) -> Path:
    return (folder or directory()) / f"{gpu_slug}.json"


def read(path: Path) -> TrainingData:
    """The training data at ``path``; a FusecError naming the file when it cannot be read or
    does not validate."""
    try:
        return TrainingData.from_text(Path(path).read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise FusecError(f"training data {path} cannot be read ({exc.strerror})") from None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        raise FusecError(f"training data {path} is damaged ({exc}): fix it or move it away") from None


def write(training: TrainingData, path: Path) -> None:
    atomic_write_text(Path(path), training.to_text())


def add_point(path: Path, point: PointRecord, gpu: Mapping[str, str]) -> TrainingData:
    """The training data at ``path`` with ``point`` (replacing one of its key), written back
    under an exclusive lock on ``<path>.lock``, the file read again inside it: two
    ``fusec perfdb measure-plans`` runs writing one file each keep the other's points (each
    writing what it read at its start, the last to write lost the other's). A new file is
    made for ``gpu``. The data written."""
    path = Path(path)
    with locked(path):
        now = read(path) if path.is_file() else TrainingData(dict(gpu), (), str(path))
        merged = now.with_point(point)
        write(merged, path)
    return merged
