"""The fitted correction of the performance database's prices, and the predictor that applies it.

The database prices a kernel from routines timed in probes (many waves of blocks, data
past L2); kernels unlike their probes are mispriced in ways that depend on their family
(issue 49: tile kernels with few iterations priced slow, 1024-thread bands fast). A
:class:`Correction` multiplies the database's price of a kernel by ``exp(w . x)``, where
``x`` are the kernel's features (:mod:`fusec.cost.features`) and ``w`` the coefficients
fitted for its class to measured plan times (``fusec perfdb fit``,
:mod:`fusec.cost.fit`). Features are clamped to the range seen in training, so the
correction never extrapolates a power law past the data it came from.

A fitted file lives beside its database, ``perfdb/corrections/<gpu>.json``, and
names the database it corrects (GPU, library hash, the database's ``built`` stamp),
the features' version and the features it uses (``used``: a fit may leave the block
size's indicators out); it holds coefficients for those alone, and the predictor
applies those alone. A file of an older features' version whose features this version
computes alike (``features.SAME_SINCE``: version 2's eleven) is used as it is, with
those; one of any other version, or that does not parse, has a field wrong, or was
fitted to another database is reported (:class:`CorrectionWarning`) and not used:
the database's prices stand, as they do where no file exists.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import Mapping

from .. import validate as check
from ..cache import atomic_write_text
from ..errors import FusecWarning
from ..ir.dag import Dag
from .features import CLASSES, FEATURES, FEATURES_VERSION, SAME_SINCE, KernelFeatures, features

FORMAT = 1
KIND = "fusec perfdb correction"
FOLDER = "corrections"  # beside the databases: not matched by their *.json
COEFFICIENT_BOUND = 50.0  # |w| past this is a broken fit or an edited file
DISABLE = "FUSEC_CORRECTION"  # =0: the database's prices alone (the test suite sets it)


class CorrectionWarning(FusecWarning):
    """A fitted correction could not be used: the database's prices stand."""


@dataclasses.dataclass(frozen=True)
class ClassFit:
    """One class's coefficients (in the order of FEATURES; 0, with the range 0 to 0, for a
    feature its correction does not use) and the range of each feature in its training data."""

    coefficients: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    kernels: int  # kernels of the class in the training data

    def factor(self, values: tuple[float, ...]) -> float:
        return math.exp(math.fsum(w * min(max(x, lo), hi)
                                  for w, x, lo, hi in zip(self.coefficients, values, self.low, self.high)))


@dataclasses.dataclass(frozen=True)
class Correction:
    gpu: str  # the database's slug
    library: str  # the library hash the database timed
    perfdb_built: str  # the database's ``built`` stamp: the prices the correction was fitted to
    classes: tuple[tuple[str, ClassFit], ...]  # a class left out is not corrected
    fitted: Mapping[str, object] = dataclasses.field(default_factory=dict, compare=False, hash=False)
    path: str = dataclasses.field(default="", compare=False)
    used: tuple[str, ...] = FEATURES  # the features it applies, in the order of FEATURES

    def of(self, kind: str) -> ClassFit | None:
        return dict(self.classes).get(kind)

    def factor(self, kernel_features: KernelFeatures) -> float:
        """What the database's price of a kernel with these features is multiplied by: the
        features used alone count (the others' coefficients are 0)."""
        fit = self.of(kernel_features.kind)
        return fit.factor(kernel_features.values) if fit is not None else 1.0

    def to_json(self) -> str:
        def named(values):
            return {f: v for f, v in zip(FEATURES, values) if f in self.used}
        data = {
            "format": FORMAT, "kind": KIND, "gpu": self.gpu, "library": self.library,
            "perfdb_built": self.perfdb_built,
            "features": {"version": FEATURES_VERSION, "names": list(FEATURES), "used": list(self.used)},
            "classes": {kind: {"kernels": fit.kernels, "coefficients": named(fit.coefficients),
                               "low": named(fit.low), "high": named(fit.high)}
                        for kind, fit in self.classes},
            "fitted": dict(self.fitted),
        }
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, path: str = "") -> "Correction":
        """The correction ``text`` holds; :class:`ValueError` (``validate.Invalid``) naming
        the field when any is missing, of the wrong type or out of range."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("kind") != KIND or data.get("format") != FORMAT:
            raise check.Invalid(f"not a fusec perfdb correction of format {FORMAT}")
        gpu = check.text(data.get("gpu"), "gpu")
        library = check.text(data.get("library"), "library")
        built = check.text(data.get("perfdb_built"), "perfdb_built")
        used = _used(check.mapping(data.get("features"), "features"))
        classes = []
        for kind, entry in check.mapping(data.get("classes"), "classes").items():
            if kind not in CLASSES:
                raise check.Invalid(f"classes: {kind!r} is not a kernel class ({', '.join(CLASSES)})")
            entry = check.mapping(entry, f"class {kind}")
            columns = []
            for field in ("coefficients", "low", "high"):
                given = check.mapping(entry.get(field), f"class {kind} {field}")
                if sorted(given) != sorted(used):
                    raise check.Invalid(f"class {kind} {field} names {sorted(given)}, not the features used"
                                        f" {sorted(used)}")
                bound = COEFFICIENT_BOUND if field == "coefficients" else 1e6
                columns.append(tuple(float(check.number(given[f], f"class {kind} {field} {f}", low=-bound,
                                                        high=bound)) if f in used else 0.0 for f in FEATURES))
            coefficients, low, high = columns
            wrong = [f for f, lo, hi in zip(FEATURES, low, high) if lo > hi]
            if wrong:
                raise check.Invalid(f"class {kind}: low {wrong[0]} is above high")
            kernels = check.number(entry.get("kernels"), f"class {kind} kernels", low=1, integer=True)
            classes.append((kind, ClassFit(coefficients, low, high, kernels)))
        fitted = data.get("fitted", {})
        return cls(gpu, library, built, tuple(sorted(classes)),
                   fitted if isinstance(fitted, dict) else {}, path, used)


def _used(names: dict) -> tuple[str, ...]:
    """The features a file's ``features`` record says it uses, in the order of FEATURES: its
    ``used`` (this version), or all of an older version's where this one computes them alike."""
    version = check.number(names.get("version"), "features version", low=0, integer=True)
    if version != FEATURES_VERSION:
        same = SAME_SINCE.get(version)
        if same is None or names.get("names") != list(same) or "used" in names:
            raise check.Invalid(f"features of version {version} ({names.get('names')}), not this fusec's"
                                f" {FEATURES_VERSION} ({list(FEATURES)}): refit ('fusec perfdb fit')")
        return tuple(same)
    if names.get("names") != list(FEATURES):
        raise check.Invalid(f"features of version {version} named {names.get('names')}, not {list(FEATURES)}:"
                            " refit ('fusec perfdb fit')")
    used = names.get("used")
    if not isinstance(used, list) or not used or not all(isinstance(f, str) for f in used):
        raise check.Invalid("features used is not a list of feature names")
    if len(set(used)) != len(used) or not set(used) <= set(FEATURES):
        raise check.Invalid(f"features used {used}: not distinct features of {list(FEATURES)}")
    return tuple(f for f in FEATURES if f in used)


def path_for(gpu_slug: str, folder: Path) -> Path:
    """Where the correction of the database of ``gpu_slug`` in ``folder`` lives."""
    return Path(folder) / FOLDER / f"{gpu_slug}.json"


def save(correction: Correction, path: Path) -> None:
    atomic_write_text(Path(path), correction.to_json())


def load(path: Path, database) -> Correction | None:
    """The correction at ``path`` for ``database`` (a perfdb Database), or None with a
    :class:`CorrectionWarning` when it cannot be used (unreadable, damaged, of other
    features, or fitted to another database)."""
    try:
        correction = Correction.from_json(Path(path).read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        warnings.warn(CorrectionWarning(f"fitted correction {path} cannot be read ({exc.strerror}); not used:"
                                        " the performance database's prices stand"))
        return None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        warnings.warn(CorrectionWarning(f"fitted correction {path} is damaged ({exc}); not used: the"
                                        " performance database's prices stand (refit: 'fusec perfdb fit')"))
        return None
    wanted = (database.slug, str(database.library.get("hash")), database.built)
    if (correction.gpu, correction.library, correction.perfdb_built) != wanted:
        warnings.warn(CorrectionWarning(
            f"fitted correction {path} was fitted to the database of {correction.gpu} (library"
            f" {correction.library}, built {correction.perfdb_built}), not to {database.path or 'the one in use'}"
            f" ({wanted[0]}, library {wanted[1]}, built {wanted[2]}); not used (refit: 'fusec perfdb fit')"))
        return None
    return correction


@dataclasses.dataclass(frozen=True)
class CorrectedPredictor:
    """The performance database's predictor with each kernel's price multiplied by the
    correction fitted for its class (:class:`Correction`). The families price kernels
    with ``base`` (their terms are the database's); only the total is corrected."""

    base: object  # a PerfdbPredictor
    correction: Correction

    @property
    def name(self) -> str:
        return f"{self.base.name} + fitted correction"

    @property
    def target(self):
        return self.base.target

    @property
    def sms(self) -> int:
        return self.base.sms

    @property
    def database(self):
        return self.base.database

    @property
    def analytic(self):
        return self.base.analytic

    def kernel_seconds(self, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        return (self.base.kernel_seconds(kernel, dag, sizes)
                * self.correction.factor(features(kernel, dag, sizes, self.target)))


def corrected(base):
    """``base`` (a PerfdbPredictor) with the correction fitted to its database, where a usable
    one lies beside it and $FUSEC_CORRECTION is not 0; else ``base`` itself (today's prices)."""
    if not check.environment_flag(DISABLE, True):  # 1 or 0; anything else an ArgumentError naming it
        return base
    database = base.database
    folder = Path(database.path).parent if database.path else None
    if folder is None:
        return base
    path = path_for(database.slug, folder)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return base  # none fitted: the database alone, as before any fit
    key = (path, mtime, database.path, database.slug, str(database.library.get("hash")), database.built)
    if key not in _LOADED:  # read and checked once per file version and database
        if len(_LOADED) >= 8:
            _LOADED.clear()
        _LOADED[key] = load(path, database)
    correction = _LOADED[key]
    return CorrectedPredictor(base, correction) if correction is not None else base


_LOADED: dict[tuple, Correction | None] = {}
