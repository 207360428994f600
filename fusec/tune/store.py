"""The tuning cache: the combination ``fusec tune`` measured fastest, remembered.

One JSON file per key, ``<cache>/tuning/<gpu slug>/<sha256 of the key>.json``
(``<cache>`` is ``$FUSEC_CACHE_DIR``, default ``~/.cache/fusec``). The key is
what the winner depends on: the script's text (its sha256), the library files
the script's kernels are built from (the digest of their digests,
:func:`fusec.library.digest.library_digest`), every size, the precision, the
GPU (its slug) and fusec's version; a change to any of them is a different
file, never a stale hit. A file of the library that the script does not read
(a function it does not call) is not in its key, so a library that only gains
files keeps its tuned plans. An entry records those files with their digests
(``library_files``), so that ``fusec tunings`` can judge it without its script.

A library may ship plans tuned for it, laid out the same way in its own
``tunings/`` folder (``fusec tune --ship`` writes there): a fresh machine then
runs the tuned plans without tuning again. The user's cache is looked in
first, so a user's own tuning wins. No script reads the folder, and an entry
keyed on files that have changed since never matches: it is *stale*,
and ``fusec tunings --prune`` deletes it (an entry that does not record its
files, keyed as fusec keyed tunings before, on the whole library's content
hash, cannot be judged and is kept). ``$FUSEC_SHIPPED_TUNINGS=0`` makes
lookups ignore every library's folder (the test suite sets it, as it points the
cache at a folder of its own, so that no test depends on what was tuned).

Files are written whole to a temporary file and renamed over the target, so
two tuners at once never corrupt an entry (the last one to finish wins) and a
reader never sees half a file. An entry is never trusted: one that does not
parse, whose key fields differ from the key looked for, or whose plan does not
cover the script's calls is a miss, with a :class:`~fusec.errors.FusecWarning`
naming the file; the next ``fusec tune`` overwrites it.
"""

from __future__ import annotations

import dataclasses
import datetime
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
from ..version import __version__

FORMAT = 1  # of an entry file; another format is a miss
# what reading an entry that is not to be trusted may raise (JSONDecodeError and
# UnicodeDecodeError are ValueErrors; RecursionError: arrays nested 50,000 deep)
UNREADABLE = (OSError, ValueError, LookupError, TypeError, AttributeError, RecursionError, OverflowError)
SHIPPED = "tunings"  # a library's folder of plans tuned for it


@dataclasses.dataclass(frozen=True)
class TuningKey:
    script: str  # sha256 of the script's text
    library: str  # the digest of the library files the script's kernels are built from
    sizes: tuple[tuple[str, int], ...]  # sorted by name
    dtype: str
    gpu: str  # slug, e.g. "h100-80gb-hbm3"
    fusec: str  # version
    # those files with their digests, what ``library`` is the digest of: recorded in an
    # entry, not part of the key (empty where the key was read from a file)
    files: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}), compare=False)

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
    files = dag_files(library, dag)
    return TuningKey(hashlib.sha256(dag.text.encode()).hexdigest(), files_digest(files),
                     tuple(sorted((str(k), int(v)) for k, v in sizes.items())), str(dtype), gpu,
                     __version__, MappingProxyType(files))


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

    def describe(self) -> str:
        """One line for plans and messages."""
        return (f"tuned on {self.gpu_name} {self.date[:10]}, K={self.top},"
                f" measured {self.measured_us:.1f} us (predicted rank {self.predicted_rank})"
                + ("" if self.turning else ", blocks always walk forwards"))

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "key": self.key.fields(), "plan": json.loads(self.plan.to_json()),
            "measured_us": self.measured_us, "predicted_us": self.predicted_us,
            "predicted_rank": self.predicted_rank, "top": self.top, "gpu_name": self.gpu_name,
            "date": self.date, "script": self.script, "turning": self.turning,
            "library_files": dict(self.key.files),
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
    ``h100-80gb-hbm3``); None (no GPU known) is a miss. A folder that cannot be
    read is a miss with a warning."""
    if not gpu:
        return None
    roots = [(cache_dir("tuning", create=False), "the tuning cache")]
    if shipped_wanted():
        roots.append((shipped_root(library), "the library's tunings"))
    for root, where in roots:
        for slug in _slugs(root, gpu, where):
            wanted = key(dag, library, dtype, sizes, slug)
            entry = read(root / slug / f"{wanted.digest}.json", wanted, calls=len(dag.calls))
            if entry is not None:
                return entry
    return None


def previous(dag, library, dtype: str, sizes: Mapping[str, int], gpu: str | None) -> TuningEntry | None:
    """The plan ``library`` shipped for these when it was another version (a stale
    file: keyed on the files the script reads as they were, or on the whole library's
    content hash, as fusec keyed tunings before), or None. ``fusec tune`` measures it
    beside its candidates, so that tuning again after a library change never loses the
    plan tuned before it where that plan still builds and still wins."""
    if not gpu:
        return None
    root = shipped_root(library)
    for slug in _slugs(root, gpu, "the library's tunings"):
        now = key(dag, library, dtype, sizes, slug)
        for path in sorted((root / slug).glob("*.json")):
            try:
                fields = json.loads(path.read_text(encoding="utf-8"))["key"]
            except UNREADABLE:
                continue  # `fusec tunings` reports what does not parse
            if not isinstance(fields, dict) or fields.get("library") == now.library:
                continue
            was = dataclasses.replace(now, library=str(fields.get("library")))
            if fields == was.fields():
                return read(path, was, calls=len(dag.calls))
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


def read(path: Path, wanted: TuningKey, calls: int | None = None) -> TuningEntry | None:
    """The entry in ``path`` if it is whole and is the one for ``wanted``;
    a missing file is a quiet miss, anything else wrong a miss with a warning.
    ``calls``: the script's number of calls, which the plan must cover."""
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
        if data.get("format") != FORMAT:
            return _bad(path, f"has format {data.get('format')!r}, not {FORMAT}")
        if data.get("key") != wanted.fields():
            return _bad(path, "is filed under a key its fields do not match")
        entry, covered = _entry(data, wanted, path)
    except UNREADABLE as exc:
        return _bad(path, f"does not parse ({type(exc).__name__}: {str(exc)[:200]})")
    if calls is not None and covered != list(range(calls)):
        return _bad(path, "holds a plan that does not cover the script's calls")
    return entry


def _entry(data: dict, wanted: TuningKey, path: Path) -> tuple[TuningEntry, list[int]]:
    """The entry the fields of ``data`` hold, filed under ``wanted``, and the calls its plan
    covers, sorted; one of UNREADABLE where a field is missing or wrong. What a lookup
    reads, and what `fusec tunings` checks before it calls an entry usable."""
    recorded_files(data)  # what `fusec tunings` judges it by: whole, or no entry
    if not isinstance(data["plan"], list) or not data["plan"]:
        raise check.Invalid("plan is not a list of kernel plans")
    plan = ProgramPlan.from_json(json.dumps(data["plan"]))
    entry = TuningEntry(wanted, plan,
                        float(check.number(data["measured_us"], "measured_us", low=0)),
                        float(check.number(data["predicted_us"], "predicted_us", low=0)),
                        check.number(data["predicted_rank"], "predicted_rank", low=1, integer=True),
                        check.number(data["top"], "top", low=0, integer=True), str(data["gpu_name"]),
                        str(data["date"]), str(data.get("script", "")), _flag(data, "turning"), path)
    return entry, sorted(c for k in plan.kernels for c in k.calls)  # a TypeError where calls are not numbers


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
    other_library: bool = False  # keyed on library files that differ from the library's now
    # whether it can be told if the entry suits the library: not where it records no files
    # (keyed on the whole library's content hash, as fusec keyed tunings before it recorded
    # them) or records files its key is not the digest of
    judged: bool = True

    @property
    def stale(self) -> bool:
        """A shipped file keyed on files the library has changed since: no fusec
        can use it with the library as it is. (The cache holds other libraries'
        entries, and another fusec version's entries serve that version.)"""
        return self.shipped and self.other_library


def filed(library, gpu: str | None = None) -> list[Filed]:
    """Every entry file of the user's cache and of ``library``'s folder (only
    under GPU folders that ``gpu`` names, when given), cache first, each
    folder's by script, precision and sizes."""
    found = []
    for root, shipped in ((cache_dir("tuning", create=False), False), (shipped_root(library), True)):
        where = "the library's tunings" if shipped else "the tuning cache"
        for slug in _slugs(root, gpu or "", where):
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
        library_hash, made_by = str(fields["library"]), str(fields["fusec"])
        files = recorded_files(data)
    except UNREADABLE as exc:
        return Filed(path, shipped, slug, "?", "?", (), None, "", f"does not parse ({type(exc).__name__})")
    why, other_library, judged = _judge(library, library_hash, files, shipped)
    if why:  # the library first: a file keyed on changed files is stale whoever made it
        return Filed(path, shipped, slug, script, dtype, sizes, measured, date, why, other_library, judged)
    if made_by != __version__:
        why = f"made by fusec {made_by}, this is {__version__}"
    elif data.get("format") != FORMAT:
        why = f"format {data.get('format')!r}, not {FORMAT}"
    elif path.stem != digest:
        why = "filed under a key its fields do not match"
    else:
        try:  # what a lookup reads of it: a field it ignores the entry for is no usable entry
            _entry(data, stored, path)
        except UNREADABLE as exc:
            why = f"does not parse ({type(exc).__name__})"
    return Filed(path, shipped, slug, script, dtype, sizes, measured, date, why, other_library, judged)


def recorded_files(data: dict) -> dict[str, str] | None:
    """The library files an entry records its plan read, with their digests; None where
    it records none (made before fusec recorded them)."""
    if "library_files" not in data:
        return None
    files = check.mapping(data["library_files"], "library_files")
    return {check.text(name, "a library file's name"): check.text(digest, f"library_files[{name!r}]")
            for name, digest in files.items()}


def _judge(library, keyed_on: str, files: dict[str, str] | None, shipped: bool) -> tuple[str, bool, bool]:
    """(why an entry keyed on library digest ``keyed_on``, recording ``files``, does not
    suit ``library``, or ""; whether it is keyed on files the library has changed since;
    whether that can be told). Without its script at hand, an entry is judged by the files
    it records (what its key's digest is over), compared with the library's now."""
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
        return "", False, True
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
