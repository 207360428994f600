"""The tuning cache: the combination ``fusec tune`` measured fastest, remembered.

One JSON file per key, ``<cache>/tuning/<gpu slug>/<sha256 of the key>.json``
(``<cache>`` is ``$FUSEC_CACHE_DIR``, default ``~/.cache/fusec``). The key is
what the winner is sought by: the script's text (its sha256), the library's
name, every size, the precision, the GPU (its slug) and fusec's version; a
change to any of them is a different file.

What a plan depends on in the library is known only once its plan is read, so
it is not in the key but recorded in the entry and judged after reading it:
the library's pieces its kernels are built from (:mod:`fusec.library.pieces`:
each call's function declaration and chosen implementation, the routines,
macros and mappings those name, the prelude, the composites expanded), each
with its digest, and each call's function. An entry whose recorded pieces
differ from those its plan would be built from in the library now (one
changed, went, or is newly named) is *stale*: a quiet miss for a lookup, as
though it were not there. So a library that gains an implementation, or
changes a routine no plan of the script uses, keeps its tuned plans; one whose
code under a plan changed never runs that plan as though it were measured.

A library may ship plans tuned for it, laid out the same way in its own
``tunings/`` folder (``fusec tune --ship`` writes there): a fresh machine then
runs the tuned plans without tuning again. The user's cache is looked in
first, so a user's own tuning wins; an entry of the user's in the format before
whose library files are as they were is carried over to this format by the
lookup that finds it. A stale shipped entry is found by
:func:`previous` (``fusec tune`` measures it beside its candidates) and
deleted by ``fusec tunings --prune``. Entries of the format before (keyed on
the digest of the library files a script reads, or on the whole library's
content hash) are never found by a lookup; ``tools/rekey_tunings.py`` carries
them over where the code under their plans is unchanged.
``$FUSEC_SHIPPED_TUNINGS=0`` makes lookups ignore every library's folder (the
test suite sets it, as it points the cache at a folder of its own, so that no
test depends on what was tuned).

Files are written whole to a temporary file and renamed over the target, so
two tuners at once never corrupt an entry (the last one to finish wins) and a
reader never sees half a file. An entry is never trusted: one that does not
parse, whose key fields differ from the key looked for, whose plan does not
cover the script's calls, or that records other calls than the script's, is a
miss, with a :class:`~fusec.errors.FusecWarning` naming the file; the next
``fusec tune`` overwrites it.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import math
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from .. import validate as check
from ..cache import atomic_write_text, cache_dir
from ..errors import FusecWarning
from ..ir.plan import ProgramPlan
from ..library.digest import dag_files, file_digest
from ..library.digest import digest as files_digest
from ..library.pieces import Gone, changes, plan_pieces
from ..target import slug as gpu_slug
from ..version import __version__

# of an entry file; another format is a miss. 1: keyed on the digest of the library files its
# script reads (recorded as ``library_files``), or on the whole library's content hash
FORMAT = 2
KEYED_ON_FILES = 1
# what reading an entry that is not to be trusted may raise (JSONDecodeError and
# UnicodeDecodeError are ValueErrors; RecursionError: arrays nested 50,000 deep)
UNREADABLE = (OSError, ValueError, LookupError, TypeError, AttributeError, RecursionError, OverflowError)
SHIPPED = "tunings"  # a library's folder of plans tuned for it


@dataclasses.dataclass(frozen=True)
class TuningKey:
    script: str  # sha256 of the script's text
    library: str  # the library's name (an entry of format 1: the digest of the files it read)
    sizes: tuple[tuple[str, int], ...]  # sorted by name
    dtype: str
    gpu: str  # slug, e.g. "h100-80gb-hbm3"
    fusec: str  # version
    # not part of the key: the script's calls' functions (by call id) and the composites they
    # were expanded from, and the library the key was made with, which an entry made under it
    # records the pieces of and a lookup judges an entry by (None where read from a file)
    calls: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    composites: tuple[str, ...] = dataclasses.field(default=(), compare=False)
    source: object = dataclasses.field(default=None, compare=False, repr=False)

    def fields(self) -> dict:
        return {"script": self.script, "library": self.library, "sizes": dict(self.sizes),
                "dtype": self.dtype, "gpu": self.gpu, "fusec": self.fusec}

    @classmethod
    def from_fields(cls, fields: dict) -> TuningKey:
        """The key an entry's ``key`` object holds (its sizes checked, :func:`sizes_of`); a
        TypeError where it lacks a field or has one a key has not."""
        unknown = sorted(set(fields) - {"script", "library", "sizes", "dtype", "gpu", "fusec"})
        if unknown:
            raise TypeError(f"a key has no field {unknown[0]!r}")
        return cls(**{**fields, "sizes": sizes_of(fields)})

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def path(self) -> Path:
        """Where the user's cache files it."""
        return cache_dir("tuning", create=False) / self.gpu / f"{self.digest}.json"

    def shipped_path(self, library) -> Path:
        """Where ``library`` ships it."""
        return shipped_root(library) / self.gpu / f"{self.digest}.json"


def shipped_wanted() -> bool:
    """Whether lookups read the plans libraries ship: ``$FUSEC_SHIPPED_TUNINGS``, 1 or 0
    (default 1); anything else is an ArgumentError naming it, never quietly 1."""
    return check.environment_flag("FUSEC_SHIPPED_TUNINGS", True)


def shipped_root(library) -> Path:
    """The folder of plans ``library`` ships."""
    return Path(library.path) / SHIPPED


def key(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str) -> TuningKey:
    """The key of a script (its DAG), library, precision, sizes and GPU slug."""
    return TuningKey(hashlib.sha256(dag.text.encode()).hexdigest(), library.name,
                     tuple(sorted((str(k), int(v)) for k, v in sizes.items())), str(dtype), gpu,
                     __version__, tuple(call.function for call in dag.calls),
                     tuple(sorted({name for call in dag.calls for name in call.via})), library)


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What an entry records of the library its plan was measured with: each call's
    function (by call id), the composites the calls were expanded from, and the pieces
    (:func:`fusec.library.pieces.plan_pieces`) its kernels were built from, with digests."""

    calls: tuple[str, ...]
    composites: tuple[str, ...]
    pieces: Mapping[str, str]

    @classmethod
    def of(cls, library, calls: tuple[str, ...], composites: tuple[str, ...], plan: ProgramPlan) -> Recorded:
        """What a plan uses of ``library`` now; :class:`~fusec.library.pieces.Gone` where a
        function or implementation it names is not there, IndexError where it names a call
        beyond ``calls``."""
        return cls(calls, composites, MappingProxyType(plan_pieces(library, uses(plan, calls), composites)))

    def stale(self, library, plan: ProgramPlan) -> str:
        """Why ``plan``, recorded so, is not built from ``library`` as it was measured (its
        pieces changed, went, or others are named now), or "" where it is."""
        try:
            now = Recorded.of(library, self.calls, self.composites, plan)
        except Gone as exc:
            return str(exc)
        return ", ".join(changes(self.pieces, now.pieces, library))


def uses(plan: ProgramPlan, calls: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each call's function and the implementation ``plan`` runs it with."""
    return [(calls[c], impl) for kernel in plan.kernels for part in kernel.parts
            for c, impl in zip(part.calls, part.implementations)]


@dataclasses.dataclass(frozen=True)
class TuningEntry:
    key: TuningKey
    plan: ProgramPlan
    measured_us: float  # median of the winner
    predicted_us: float
    predicted_rank: int  # the winner's place among the candidates (1 = the predictor's first choice; see tune.Row)
    top: int  # how many candidates were measured
    gpu_name: str  # as the driver says it
    date: str  # ISO 8601, UTC
    script: str = ""  # the script's name and file, for a reader
    # whether the winner's kernels alone alternate their direction (Program.turning);
    # entries from before it was measured say nothing, and turn
    turning: bool = True
    path: Path | None = dataclasses.field(default=None, compare=False)  # where it was read
    # what it records of the library: read from its file, else found from the key's library
    recorded: Recorded | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        if self.recorded is None and self.key.source is not None:
            object.__setattr__(self, "recorded", Recorded.of(self.key.source, self.key.calls,
                                                             self.key.composites, self.plan))

    def describe(self) -> str:
        """One line for plans and messages."""
        return (f"tuned on {self.gpu_name} {self.date[:10]}, K={self.top},"
                f" measured {self.measured_us:.1f} us (predicted rank {self.predicted_rank})"
                + ("" if self.turning else ", blocks always walk forwards"))

    def to_json(self) -> str:
        if self.recorded is None:
            raise ValueError("an entry records what its plan uses of the library: make its key with key()")
        return json.dumps({
            "format": FORMAT, "key": self.key.fields(), "plan": json.loads(self.plan.to_json()),
            "measured_us": self.measured_us, "predicted_us": self.predicted_us,
            "predicted_rank": self.predicted_rank, "top": self.top, "gpu_name": self.gpu_name,
            "date": self.date, "script": self.script, "turning": self.turning,
            "calls": list(self.recorded.calls), "composites": list(self.recorded.composites),
            "library_pieces": dict(self.recorded.pieces),
        }, indent=1, sort_keys=True) + "\n"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def store(entry: TuningEntry) -> Path:
    """Write ``entry`` atomically (last writer wins); OSError when the cache
    cannot be written."""
    path = cache_dir("tuning") / entry.key.gpu / f"{entry.key.digest}.json"
    atomic_write_text(path, entry.to_json())
    return path


def ship(entry: TuningEntry, library) -> Path:
    """Write ``entry`` into ``library``'s own folder, atomically, to be
    committed with it; OSError when it cannot be written."""
    path = entry.key.shipped_path(library)
    atomic_write_text(path, entry.to_json())
    return path


def lookup(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str | None) -> TuningEntry | None:
    """The entry for these, or None: the user's cache first, then the plans
    ``library`` ships. ``gpu`` is a slug or a slug's prefix (``h100`` finds
    ``h100-80gb-hbm3``); None (no GPU known) is a miss. A stale entry is a quiet
    miss; a folder that cannot be read is a miss with a warning."""
    if not gpu:
        return None
    roots = [(cache_dir("tuning", create=False), "the tuning cache")]
    if shipped_wanted():
        roots.append((shipped_root(library), "the library's tunings"))
    for order, (root, where) in enumerate(roots):
        for slug in _slugs(root, gpu, where):
            wanted = key(dag, library, dtype, sizes, slug)
            entry = read(root / slug / f"{wanted.digest}.json", wanted, calls=len(dag.calls))
            if entry is None and order == 0:
                entry = _carried_over(dag, library, root / slug, wanted)
            if entry is not None:
                return entry
    return None


def _carried_over(dag, library, folder: Path, wanted: TuningKey) -> TuningEntry | None:
    """The user's entry for ``wanted`` in the format before (keyed on the digest of the library
    files its script reads), where those files are as they were: its plan is then built from
    the same code, so it is written again under ``wanted`` (recording the pieces it uses now)
    and the old file removed; None where there is none. A user's plans outlive the change of
    format without tuning again; a cache that cannot be written still serves the plan."""
    files = dag_files(library, dag)
    was = dataclasses.replace(wanted, library=files_digest(files), source=None)
    path = folder / f"{was.digest}.json"
    if not path.is_file():
        return None
    old = read(path, was, calls=len(dag.calls), format=KEYED_ON_FILES)
    if old is None:
        return None
    try:
        entry = dataclasses.replace(old, key=wanted, path=None, recorded=None)
    except UNREADABLE as exc:  # its plan names what the library lacks (Gone is a LookupError)
        return _bad(path, f"cannot be carried over ({exc})")
    try:
        entry = dataclasses.replace(entry, path=store(entry))
        path.unlink()
    except OSError as exc:
        warnings.warn(FusecWarning(f"carried the tuning-cache entry {path} over to this fusec's format,"
                                   f" but cannot write it: {exc.strerror or exc}"))
    return entry


def previous(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str | None) -> TuningEntry | None:
    """The plan ``library`` shipped for these when it was another version (a stale
    entry: what its plan is built from changed since; or one keyed as fusec keyed
    tunings before, format 1), or None. ``fusec tune`` measures it beside its
    candidates, so that tuning again after a library change never loses the plan
    tuned before it where that plan still builds and still wins."""
    if not gpu:
        return None
    root = shipped_root(library)
    for slug in _slugs(root, gpu, "the library's tunings"):
        now = key(dag, library, dtype, sizes, slug)
        entry = read(root / slug / f"{now.digest}.json", now, calls=len(dag.calls), stale=True)
        if entry is not None:
            return entry
        for path in sorted((root / slug).glob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                fields = data["key"]
            except UNREADABLE:
                continue  # `fusec tunings` reports what does not parse
            if not isinstance(fields, dict) or data.get("format") != KEYED_ON_FILES:
                continue
            was = dataclasses.replace(now, library=str(fields.get("library")), source=None)
            if fields == was.fields():
                entry = read(path, was, calls=len(dag.calls), format=KEYED_ON_FILES)
                if entry is not None:
                    return entry
    return None


def sibling(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str | None) -> TuningEntry | None:
    """The plan ``library`` ships for this very key on another GPU of the same compute
    capability (by the figures fusec knows, fusec/data/gpus.json), or None. ``fusec
    tune`` measures it beside its candidates, so that a new GPU of a known chip (the
    H200 beside the H100: the same SMs, registers and shared memory) starts from the
    plans tuned there, kept only where they win on it too."""
    from ..target import by_name
    mine = by_name(gpu) if gpu else None
    if mine is None:
        return None
    root = shipped_root(library)
    try:
        folders = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    except OSError:
        return None  # lookup has warned about the folder
    for other in folders:
        theirs = by_name(other)
        if other.startswith(gpu) or theirs is None or theirs.compute_capability != mine.compute_capability:
            continue
        wanted = key(dag, library, dtype, sizes, other)
        entry = read(root / other / f"{wanted.digest}.json", wanted, calls=len(dag.calls))
        if entry is not None:
            return entry
    return None


# A plan tuned at one size is usually faster a little way off than the predictor's first
# choice there (bench/results/h100-nearby*.md). So an untuned size borrows the plan of the
# nearest tuned one, within this factor of every size (fusec.api: only where this size's
# space offers that same plan).
NEARBY_FACTOR = 2.0


def nearby(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str | None) -> list[TuningEntry]:
    """Entries for the same script, library, precision, GPU and fusec at other sizes,
    each within NEARBY_FACTOR of every one of ``sizes``: nearest first (the largest
    factor, then their product), the user's cache before the library's folder."""
    if not gpu:
        return []
    wanted = {str(k): int(v) for k, v in sizes.items()}
    found = []
    roots = [cache_dir("tuning", create=False)]
    if shipped_wanted():
        roots.append(shipped_root(library))
    for order, root in enumerate(roots):
        where = "the tuning cache" if order == 0 else "the library's tunings"
        for slug in _slugs(root, gpu, where):
            same = key(dag, library, dtype, wanted, slug).fields()
            for path in sorted((root / slug).glob("*.json")):
                try:
                    fields = json.loads(path.read_text(encoding="utf-8"))["key"]
                    theirs = dict(sizes_of(fields))
                except UNREADABLE:
                    continue  # lookup and `fusec tunings` report what does not parse
                if ({k: v for k, v in fields.items() if k != "sizes"} != {k: v for k, v in same.items() if k != "sizes"}
                        or theirs.keys() != wanted.keys() or theirs == wanted
                        or min(list(theirs.values()) + list(wanted.values())) < 1):
                    continue
                factors = [max(theirs[k], wanted[k]) / min(theirs[k], wanted[k]) for k in wanted]
                if max(factors) > NEARBY_FACTOR:
                    continue
                entry = read(path, key(dag, library, dtype, theirs, slug), calls=len(dag.calls))
                if entry is not None:
                    found.append(((max(factors), math.prod(factors), order, str(path)), entry))
    return [entry for _, entry in sorted(found, key=lambda f: f[0])]


def _slugs(root: Path, gpu: str, where: str) -> list[str]:
    """The GPU folders under ``root`` that ``gpu`` names, an exact name first."""
    try:
        if not root.is_dir():
            return []
        slugs = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(gpu))
    except OSError as exc:
        warnings.warn(FusecWarning(f"cannot read {where} {root}: {exc.strerror or exc}"))
        return []
    if gpu in slugs:
        slugs.remove(gpu)
        slugs.insert(0, gpu)
    return slugs


def read(path: Path, wanted: TuningKey, calls: int | None = None, stale: bool = False,
         format: int = FORMAT) -> TuningEntry | None:
    """The entry in ``path`` if it is whole, is the one for ``wanted`` and, judged by the
    library ``wanted`` was made with, is current (with ``stale``: is stale); a missing file,
    or one current where a stale one is wanted or the other way round, is a quiet miss,
    anything else wrong a miss with a warning. ``calls``: the script's number of calls,
    which the plan must cover. ``format``: :data:`KEYED_ON_FILES` reads an entry of the
    format before, unjudged."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        return _bad(path, f"cannot be read ({exc})")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            return _bad(path, "is not a JSON object")
        if data.get("format") != format:
            return _bad(path, f"has format {data.get('format')!r}, not {format}")
        if data.get("key") != wanted.fields():
            return _bad(path, "is filed under a key its fields do not match")
        entry, covered = _entry(data, wanted, path)
        if calls is not None and covered != list(range(calls)):
            return _bad(path, "holds a plan that does not cover the script's calls")
        why = entry.recorded.stale(wanted.source, entry.plan) if entry.recorded and wanted.source else ""
    except UNREADABLE as exc:
        return _bad(path, f"does not parse ({type(exc).__name__}: {str(exc)[:200]})")
    if bool(why) != stale:
        return None
    if entry.recorded is not None and wanted.source is not None and (
            entry.recorded.calls, entry.recorded.composites) != (wanted.calls, wanted.composites):
        return _bad(path, "records other calls than its script makes")
    return entry


def _entry(data: dict, wanted: TuningKey, path: Path) -> tuple[TuningEntry, list[int]]:
    """The entry the fields of ``data`` hold, filed under ``wanted``, and the calls its plan
    covers, sorted; one of UNREADABLE where a field is missing or wrong. What a lookup
    reads, and what `fusec tunings` checks before it calls an entry usable."""
    recorded = _recorded(data) if data.get("format") == FORMAT else None
    if data.get("format") != FORMAT:
        recorded_files(data)  # what `fusec tunings` judges it by: whole, or no entry
    if not isinstance(data["plan"], list) or not data["plan"]:
        raise check.Invalid("plan is not a list of kernel plans")
    plan = ProgramPlan.from_json(json.dumps(data["plan"]))
    entry = TuningEntry(wanted, plan,
                        float(check.number(data["measured_us"], "measured_us", low=0)),
                        float(check.number(data["predicted_us"], "predicted_us", low=0)),
                        check.number(data["predicted_rank"], "predicted_rank", low=1, integer=True),
                        check.number(data["top"], "top", low=0, integer=True), str(data["gpu_name"]),
                        str(data["date"]), str(data.get("script", "")), _flag(data, "turning"), path, recorded)
    covered = sorted(c for k in plan.kernels for c in k.calls)  # a TypeError where calls are not numbers
    if recorded is not None and covered and not 0 <= covered[-1] < len(recorded.calls):
        raise check.Invalid("the plan runs a call the entry records no function of")
    return entry, covered


def _recorded(data: dict) -> Recorded:
    """What an entry of this format records of the library (:class:`Recorded`)."""
    calls = data["calls"]
    composites = data["composites"]
    if not isinstance(calls, list) or not isinstance(composites, list):
        raise check.Invalid("calls and composites are lists of names")
    pieces = check.mapping(data["library_pieces"], "library_pieces")
    return Recorded(tuple(check.text(c, "a call's function") for c in calls),
                    tuple(check.text(c, "a composite") for c in composites),
                    MappingProxyType({check.text(name, "a library piece's name"):
                                      check.text(digest, f"library_pieces[{name!r}]")
                                      for name, digest in pieces.items()}))


def sizes_of(fields: dict) -> tuple[tuple[str, int], ...]:
    """The sizes of an entry's key, sorted by name: whole numbers from 1 to 2**31 - 1
    (``Infinity``, 1.5 or a string is :class:`~fusec.validate.Invalid`)."""
    sizes = check.mapping(fields["sizes"], "sizes")
    return tuple(sorted((str(k), check.number(v, f"size {k}", low=1, high=check.MAX_EXTENT, integer=True))
                        for k, v in sizes.items()))


def _flag(data: dict, name: str) -> bool:
    """A true/false field, true when missing; anything else does not parse."""
    value = data.get(name, True)
    if not isinstance(value, bool):
        raise TypeError(f"{name} is {value!r}, not true or false")
    return value


def _bad(path: Path, why: str) -> None:
    warnings.warn(FusecWarning(f"ignoring the tuning-cache entry {path}: it {why}"))
    return None


@dataclasses.dataclass(frozen=True)
class Filed:
    """An entry file as ``fusec tunings`` lists it, read without trusting it."""
    path: Path
    shipped: bool  # in the library's folder, else in the user's cache
    gpu: str  # its folder
    script: str
    dtype: str
    sizes: tuple[tuple[str, int], ...]
    measured_us: float | None
    date: str
    why_unused: str  # why no lookup with this library and this fusec finds it; "" when one can
    other_library: bool = False  # built from library pieces that differ from the library's now
    # whether it can be told if the entry suits the library: not where it is of the format
    # before and records no files (keyed on the whole library's content hash) or records
    # files its key is not the digest of
    judged: bool = True

    @property
    def stale(self) -> bool:
        """A shipped file whose plan is built from pieces the library has changed since:
        no fusec can use it with the library as it is. (The cache holds other libraries'
        entries, and another fusec version's entries serve that version.)"""
        return self.shipped and self.other_library


def filed(library, gpu: str | None = None) -> list[Filed]:
    """Every entry file of the user's cache and of ``library``'s folder (only
    under GPU folders that ``gpu`` names, when given), cache first, each
    folder's by script, precision and sizes."""
    found = []
    for root, shipped in ((cache_dir("tuning", create=False), False), (shipped_root(library), True)):
        where = "the library's tunings" if shipped else "the tuning cache"
        for slug in _slugs(root, gpu_slug(gpu) if gpu else "", where):  # 'H100', 'NVIDIA H100 80GB HBM3' alike
            entries = (_filed(path, shipped, slug, library) for path in (root / slug).glob("*.json"))
            found.extend(sorted(entries, key=lambda e: (e.script, e.dtype, e.sizes, e.path.name)))
    return found


def _filed(path: Path, shipped: bool, slug: str, library) -> Filed:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        fields = check.mapping(data["key"], "key")
        stored = TuningKey.from_fields(fields)
        sizes, digest = stored.sizes, stored.digest
        measured = float(check.number(data["measured_us"], "measured_us"))
        script, dtype, date = str(data.get("script", "")), str(fields["dtype"]), str(data.get("date", ""))
        made_by = str(fields["fusec"])
        entry = _entry(data, stored, path)[0] if data.get("format") == FORMAT else None
        files = None if entry is not None else recorded_files(data)
    except UNREADABLE as exc:
        return Filed(path, shipped, slug, "?", "?", (), None, "", f"does not parse ({type(exc).__name__})")
    listed = functools.partial(Filed, path, shipped, slug, script, dtype, sizes, measured, date)
    if entry is None:  # the format before: keyed on files, or on the whole library
        return listed(*_judge_files(library, stored.library, files, shipped, data.get("format")))
    try:
        why = entry.recorded.stale(library, entry.plan)
    except UNREADABLE as exc:  # a call of its plan the entry records no function of
        return listed(f"does not parse ({type(exc).__name__})")
    if why:  # the library first: an entry built from changed pieces is stale whoever made it
        where = "the library as it was" if shipped else "another library, or this one as it was"
        return listed(f"built from {where}: {why}", True)
    if stored.library != library.name:
        return listed(f"tuned with library {stored.library!r}, this is {library.name!r}", True)
    if made_by != __version__:
        return listed(f"made by fusec {made_by}, this is {__version__}")
    if path.stem != digest:
        return listed("filed under a key its fields do not match")
    return listed("")


def recorded_files(data: dict) -> dict[str, str] | None:
    """The library files an entry of the format before records its plan read, with their
    digests; None where it records none (keyed on the whole library's content hash)."""
    if "library_files" not in data:
        return None
    files = check.mapping(data["library_files"], "library_files")
    return {check.text(name, "a library file's name"): check.text(digest, f"library_files[{name!r}]")
            for name, digest in files.items()}


def _judge_files(library, keyed_on: str, files: dict[str, str] | None, shipped: bool,
                 format) -> tuple[str, bool, bool]:
    """(why an entry of the format before, keyed on library digest ``keyed_on`` and
    recording ``files``, is not used; whether it is keyed on files the library has
    changed since; whether that can be told). No lookup uses such an entry as it is: where
    its files are as they were, ``tools/rekey_tunings.py`` carries a shipped one over, and
    the lookup that finds a user's (:func:`_carried_over`)."""
    carry = "; python tools/rekey_tunings.py carries it over" if shipped else "; the next lookup carries it over"
    if format != KEYED_ON_FILES:
        return f"format {format!r}, not {FORMAT}", False, True
    if files is None:
        return (f"records no library files (keyed on a whole library's hash, {keyed_on}, as fusec"
                " once keyed tunings): cannot tell whether it suits this one"
                + ("; python tools/rekey_tunings.py carries it over" if shipped else ""), False, False)
    if files_digest(files) != keyed_on:
        return (f"the library files it records are not what its key's hash ({keyed_on}) is of:"
                " cannot tell whether it suits this library", False, False)
    now = {name: file_digest(library, name) for name in files}
    changed = [name + (" changed" if name in library.files else " is gone")
               for name in files if now[name] != files[name]]
    if not changed:
        return f"keyed on the library files its script reads (hash {keyed_on}), as fusec once keyed tunings" + carry, \
            False, True
    if shipped:
        why = f"keyed on the library as it was: {', '.join(changed)} (hash {keyed_on}, now {files_digest(now)})"
    else:
        why = f"keyed on another library, or this one as it was: {', '.join(changed)} (hash {keyed_on})"
    return why, True, True


def prune(library) -> list[Path]:
    """Delete the stale files of ``library``'s folder (:attr:`Filed.stale`);
    the paths deleted."""
    gone = []
    for entry in filed(library):
        if entry.stale:
            entry.path.unlink()
            gone.append(entry.path)
    return gone
