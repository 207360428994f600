"""Reading and writing performance databases: ``perfdb/<gpu slug>.json``.

A database records the GPU (name, SMs, compute capability, driver, nvcc),
the library it timed (name, content hash, the hash of each of its files, and
the digest of what each routine's timings measured), the launch cost, and for
every routine key the seconds one block spends on the routine per serial
iteration (per block for routines outside the loop) at each number of blocks
per SM it was run with. A file that does not parse, has the
wrong format, or timed another version of the library is reported
(:class:`PerfdbWarning`) and not used; writes are atomic.

A routine's timings hold while the code they measured is unchanged: the
library's pieces the routine is built from (:func:`fusec.library.pieces.routine_pieces`:
its definition, the routines and macros its code names, the rest of their
files, the prelude, the metadata lines calling it and their mappings), whose
digest the database records per routine (``library.routines``). Where any of
them changed, that routine's timings are left out (:func:`stale_routines`), so
it is priced as a new one (by the analytic model) until ``fusec perfdb build
--missing`` times it again; a new implementation, a new routine, a changed
routine elsewhere, or a library that only gained files, leave the others as
they are. A database that records no routine digests (built before them) is
judged by its files: usable less the routines of the function files that
changed, where no shared file did.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ... import data
from ... import validate as check
from ...cache import atomic_write_text
from ...errors import FusecWarning
from ...library.model import Library
from ...library.pieces import routine_digest
from ...target import slug
from .probes import RoutineKey

FORMAT = 1
BUNDLED = data.PERFDB


class PerfdbWarning(FusecWarning):
    """A performance database could not be used."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """One routine key: seconds per block and iteration at each blocks-per-SM level."""

    key: RoutineKey
    kind: str  # load | compute | store
    seconds: Mapping[int, float]  # blocks per SM -> seconds
    registers: int
    max_blocks: int  # blocks per SM the probe itself can run (registers, threads)

    def at(self, blocks: float) -> float:
        """Seconds at ``blocks`` per SM: linear between measured levels; below the
        lowest, the lowest; past the highest, growing as between the last two (a
        routine that saturates memory takes longer in proportion to its blocks)."""
        levels = sorted(self.seconds)
        s = self.seconds
        if blocks <= levels[0]:
            return s[levels[0]]
        if blocks >= levels[-1]:
            if len(levels) == 1:
                return s[levels[-1]]
            growth = max((s[levels[-1]] - s[levels[-2]]) / (levels[-1] - levels[-2]), 0.0)
            return s[levels[-1]] + growth * (blocks - levels[-1])
        for lo, hi in zip(levels, levels[1:]):
            if lo <= blocks <= hi:
                f = (blocks - lo) / (hi - lo)
                return s[lo] * (1 - f) + s[hi] * f
        raise AssertionError("unreachable")

    @property
    def memory_share(self) -> float:
        """Seconds per block of the memory system's time: what the routine costs
        when it saturates memory, the time at the most blocks per SM measured,
        per block. Routines running side by side add these up."""
        top = max(self.seconds)
        return self.seconds[top] / top


@dataclasses.dataclass(frozen=True)
class Database:
    device: Mapping[str, object]  # name, slug, sms, compute_capability, cuda_driver, nvcc
    library: Mapping[str, object]  # name, hash, files (file -> its hash; see timed)
    fusec: str
    built: str
    launch: float  # seconds: an empty kernel's launch to completion
    bench_sizes: Mapping[str, int]
    timings: Mapping[RoutineKey, Timing] = dataclasses.field(repr=False)
    path: str = ""

    @property
    def slug(self) -> str:
        return str(self.device["slug"])

    @property
    def sms(self) -> int:
        return int(self.device["sms"])

    def to_json(self) -> str:
        data = {
            "format": FORMAT, "device": dict(self.device), "library": dict(self.library),
            "fusec": self.fusec, "built": self.built, "launch_seconds": self.launch,
            "bench_sizes": dict(self.bench_sizes),
            "routines": [{**t.key.to_json(), "kind": t.kind, "registers": t.registers,
                          "max_blocks_per_sm": t.max_blocks,
                          "seconds": {str(k): v for k, v in sorted(t.seconds.items())}}
                         for t in sorted(self.timings.values(), key=lambda t: t.key)],
        }
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, path: str = "") -> "Database":
        """The database ``text`` holds; :class:`ValueError` (``validate.Invalid``)
        naming the field when any field is missing, of the wrong type or out of range."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a fusec performance database of format {FORMAT}")
        device = check.mapping(data.get("device"), "device")
        for field in ("name", "slug"):
            check.text(device.get(field), f"device {field}")
        if slug(device["slug"]) != device["slug"]:  # it names the files beside it (corrections/<slug>.json)
            raise check.Invalid(f"device slug {device['slug']!r} is not a GPU's slug (such as 'h100-80gb-hbm3')")
        check.number(device.get("sms"), "device sms", low=1, high=100_000, integer=True)
        library = check.mapping(data.get("library"), "library")
        check.text(library.get("hash"), "library hash")
        if "files" in library:  # absent in databases built before it was recorded
            for name, digest in check.mapping(library["files"], "library files").items():
                check.text(name, "a library file")
                check.text(digest, f"library file {name}")
        if "routines" in library:  # absent in databases built before it was recorded
            for name, digest in check.mapping(library["routines"], "library routines").items():
                check.text(name, "a routine")
                check.text(digest, f"library routine {name}")
        launch = check.number(data.get("launch_seconds"), "launch_seconds", low=0, high=1.0)
        bench_sizes = check.mapping(data.get("bench_sizes", {}), "bench_sizes")
        routines = data.get("routines")
        if not isinstance(routines, list):
            raise check.Invalid("routines is not a list")
        timings = {}
        for entry in routines:
            entry = check.mapping(entry, "a routine")
            key = RoutineKey(
                check.text(entry.get("routine"), "routine"), check.text(entry.get("section"), "section"),
                check.text(entry.get("geometry"), "geometry"),
                check.number(entry.get("block"), "block", low=1, high=4096, integer=True),
                check.number(entry.get("iters"), "iters", low=1, high=1 << 20, integer=True),
                (None if entry.get("tile_rows") is None else
                 check.number(entry.get("tile_rows"), "tile_rows", low=0, high=1 << 20, integer=True)),
                None if entry.get("serial") is None else check.text(entry.get("serial"), "serial"),
                check.text(entry.get("dtype"), "dtype"))
            where = f"routine {key.routine}"
            seconds = {}
            for level, value in check.mapping(entry.get("seconds"), f"{where}: seconds").items():
                if not (isinstance(level, str) and level.isdigit() and 1 <= int(level) <= 1024):
                    raise check.Invalid(f"{where}: {level!r} is not a number of blocks per SM (1 to 1024)")
                # seconds per block and iteration: positive, and far below a second
                seconds[int(level)] = float(check.number(value, f"{where}: seconds at {level} blocks per SM",
                                                         low=0, above=True, high=1.0))
            if not seconds:
                raise ValueError(f"{where}: no positive timings")
            timings[key] = Timing(key, check.text(entry.get("kind"), f"{where}: kind"), seconds,
                                  check.number(entry.get("registers"), f"{where}: registers", low=0,
                                               high=65536, integer=True),
                                  check.number(entry.get("max_blocks_per_sm"), f"{where}: max_blocks_per_sm",
                                               low=1, high=1024, integer=True))
        return cls(device, library, str(data.get("fusec", "?")), str(data.get("built", "?")),
                   float(launch), bench_sizes, timings, path)


def directory() -> Path:
    """Where databases live: $FUSEC_PERFDB, else the bundled ones (fusec/data/perfdb)."""
    return Path(os.environ.get("FUSEC_PERFDB") or BUNDLED)


def path_for(gpu_slug: str, folder: Path | None = None) -> Path:
    return (folder or directory()) / f"{slug(gpu_slug)}.json"


def find(gpu: str, folder: Path | None = None) -> Path | None:
    """The database file of a GPU given by slug or slug prefix (``h100``)."""
    folder = folder or directory()
    wanted = slug(gpu)
    exact = folder / f"{wanted}.json"
    if exact.is_file():
        return exact
    matches = sorted(p for p in folder.glob("*.json") if p.stem.startswith(wanted))
    if len(matches) > 1:
        warnings.warn(PerfdbWarning(f"the GPU name {gpu!r} matches several databases in {folder}:"
                                    f" {', '.join(p.name for p in matches)}; using {matches[0].name}"))
    return matches[0] if matches else None


def load(path: Path, library: Library | None = None) -> Database | None:
    """The database at ``path``, or None with a warning when it cannot be used
    (unreadable, corrupt, or timed for another version of ``library``)."""
    try:
        database = Database.from_json(Path(path).read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        warnings.warn(PerfdbWarning(f"performance database {path} cannot be read ({exc.strerror});"
                                    " not used"))
        return None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
        warnings.warn(PerfdbWarning(f"performance database {path} is damaged ({exc}); not used"
                                    " (run 'fusec perfdb build' to replace it)"))
        return None
    if library is None:
        return database
    stale = stale_routines(database, library)
    if stale is None:
        warnings.warn(PerfdbWarning(
            f"performance database {path} timed library {database.library.get('name')!r} with hash"
            f" {database.library.get('hash')}, not {library.name!r} as it is now ({library.content_hash});"
            " not used (run 'fusec perfdb build' to re-time it)"))
        return None
    if stale:
        kept = {key: timing for key, timing in database.timings.items() if key.routine not in stale}
        database = dataclasses.replace(database, timings=MappingProxyType(kept))
    return database


def timed(database: Database, library: Library) -> bool:
    """Whether ``database`` serves ``library`` as it is, wholly or less the routines of
    function files that changed (:func:`stale_routines`)."""
    return stale_routines(database, library) is not None


def stale_routines(database: Database, library: Library) -> frozenset[str] | None:
    """The routines whose timings in ``database`` no longer time ``library``: none when it
    has the same content hash; else, where it records each routine's digest, those whose
    pieces (:func:`~fusec.library.pieces.routine_digest`) changed or went, or that it
    records no digest of. A database of before routine digests is judged by the files it
    recorded: none stale when each is in the library unchanged (the library only gained
    files); the routines defined in the function files that changed, when only function
    files did (a routine name is defined once in a library, so the others are compiled
    from the files they were); None, the database not timing the library at all, when a
    shared file (``library.fusec``, a part, the prelude, a routine file) changed or went,
    a function file went, or it recorded no files."""
    if database.library.get("hash") == library.content_hash:
        return frozenset()
    routines = database.library.get("routines")
    if routines:
        timed = {key.routine for key in database.timings}
        return frozenset(r for r in timed if routines.get(r) is None or routines[r] != routine_digest(library, r))
    files = database.library.get("files")
    if not files:
        return None
    function_files = {library.file_name(function.file) for function in library.functions.values()}
    changed = {name for name, digest in files.items() if library.files.get(name) != digest}
    if not changed <= function_files:
        return None
    return frozenset(routine for routine, home in library.routine_homes.items()
                     if library.file_name(home) in changed)


def routine_digests(library: Library, routines) -> dict[str, str]:
    """What a database records of ``routines`` timed with ``library`` as it is: each
    one's digest (:func:`~fusec.library.pieces.routine_digest`), sorted by name."""
    found = {routine: routine_digest(library, routine) for routine in set(routines)}
    return {routine: digest for routine, digest in sorted(found.items()) if digest is not None}




def save(database: Database, path: Path) -> None:
    atomic_write_text(Path(path), database.to_json())
