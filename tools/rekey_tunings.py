"""Carry shipped tuned plans keyed the ways fusec keyed them before over to the key and record of now.

    python tools/rekey_tunings.py [--was REV] [--library fusec/data/blas] [--scripts scripts ...]
                                  [--partial] [--dry-run]

fusec keyed a tuned plan first on the library's content hash, over every file of its folder, then
on the digest of the library files its script's kernels are built from (format 1, recording those
files as library_files), so any change to such a file, even a new implementation of a function
the plan does not run, left the plan stale. It now keys a plan on the script, sizes, precision,
GPU, fusec version and the library's name, and records the library's pieces the plan's kernels
are built from (fusec.library.pieces; format 2, docs/tuning.md), which a lookup judges it by.
This moves an entry of either format before to the key and record of now when the code under
its plan is unchanged:

- it was usable with the library at git revision REV (without --was: the library as it is): its
  key's library hash is the digest of the files its script reads there, each recorded with the
  digest it has there (format 1), or that library's content hash (recording no files);
- a script under one of the --scripts folders has the text whose sha256 its key holds, and its
  key's fusec version is this one; and
- the pieces its plan is built from (fusec.library.pieces.plan_pieces) are the same, with the
  same digests, at REV and now;

the plan then generates the same code as when it was measured. The entry is written under the
new key, recording those pieces, and the old file deleted. Entries of the format of now stay as
they are. Any other entry is reported with its reason, and then nothing moves (exit status 1)
unless --partial is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fusec.errors import FusecError  # noqa: E402
from fusec.frontend import load_script  # noqa: E402
from fusec.library.digest import dag_files, digest  # noqa: E402
from fusec.library.loader import load_library  # noqa: E402
from fusec.tune import store as tuning  # noqa: E402


@dataclasses.dataclass
class Outcome:
    moved: list[Path]  # where the entries moved to (would move to, on a dry run or a refusal)
    current: list[Path]  # entries keyed the new way already
    left: list[str]  # "<file>: <why it cannot move>"
    refused: bool = False  # nothing moved because something was left (no --partial)


def library_at(revision: str, library: Path, into: Path):
    """The library folder as it was at git ``revision``, loaded from a copy in ``into``."""
    relative = library.resolve().relative_to(ROOT)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, str(relative)],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return load_library(into / relative)


def rekey(library, was, scripts, dry_run: bool = False, partial: bool = False) -> Outcome:
    """Move the shipped entries of ``library`` keyed as fusec keyed them before, usable with
    ``was``, to their key and record now. ``scripts``: a folder, or several, of the scripts."""
    by_text = {}
    for folder in [scripts] if isinstance(scripts, (str, Path)) else scripts:
        for path in sorted(Path(folder).rglob("*.script")):
            dag = load_script(path, library)
            by_text[hashlib.sha256(dag.text.encode()).hexdigest()] = path
    outcome, moves = Outcome([], [], []), []
    for path in sorted(tuning.shipped_root(library).glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            old = tuning.TuningKey.from_fields(data["key"])
            files = tuning.recorded_files(data)
            format = data.get("format")
        except tuning.UNREADABLE as exc:
            outcome.left.append(f"{path.name}: does not parse ({type(exc).__name__})")
            continue
        if format == tuning.FORMAT:
            outcome.current.append(path)
            continue
        why, entry = _carried(path, old, files, format, library, was, by_text)
        if why:
            outcome.left.append(f"{path.name}: {why}")
            continue
        moves.append((path, entry))
        outcome.moved.append(entry.key.shipped_path(library))
    outcome.refused = bool(outcome.left) and not partial
    if not dry_run and not outcome.refused:
        for path, entry in moves:
            tuning.ship(entry, library)
            if path != entry.key.shipped_path(library):
                path.unlink()
    return outcome


def _carried(path: Path, old, files, format, library, was, by_text: dict):
    """(why the entry at ``path`` cannot move, or ""; the entry under its key now)."""
    if format != tuning.KEYED_ON_FILES:
        return f"format {format!r}, neither of before nor of now", None
    script = by_text.get(old.script)
    if script is None:
        return "no script has the text its key holds", None
    try:
        then, now = load_script(script, was), load_script(script, library)
    except FusecError as exc:
        return f"its script does not check with the library at the revision given ({exc})", None
    if files is None and old.library != was.content_hash:
        return f"keyed on library {old.library}, not the one at the revision given ({was.content_hash})", None
    if files is not None and (old.library != digest(files) or files != dag_files(was, then)):
        return (f"keyed on library files {old.library}, not those its script reads at the revision given"
                f" ({digest(dag_files(was, then))})"), None
    new = tuning.key(now, library, old.dtype, dict(old.sizes), old.gpu)
    if old.fusec != new.fusec:
        return f"made by fusec {old.fusec}, this is {new.fusec}", None
    entry = tuning.read(path, old, calls=len(now.calls), format=tuning.KEYED_ON_FILES)
    if entry is None:
        return "does not read back", None
    calls = tuple(call.function for call in then.calls)
    composites = tuple(sorted({name for call in then.calls for name in call.via}))
    try:
        before = tuning.Recorded.of(was, calls, composites, entry.plan)
        moved = dataclasses.replace(entry, key=new, recorded=None, path=None)  # records the pieces now
    except LookupError as exc:  # a function or implementation its plan runs is gone
        return str(exc), None
    if (before.calls, before.composites) != (moved.recorded.calls, moved.recorded.composites):
        return "its script makes other calls now", None
    differ = [piece for piece in sorted(before.pieces.keys() | moved.recorded.pieces.keys())
              if before.pieces.get(piece) != moved.recorded.pieces.get(piece)]
    if differ:
        return f"its plan is built from pieces that changed: {', '.join(differ)}", None
    return "", moved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--was", default=None,
                        help="a git revision with the library the plans were keyed on (default: the library as it is)")
    parser.add_argument("--library", default=str(ROOT / "fusec" / "data" / "blas"))
    parser.add_argument("--scripts", nargs="+", default=[str(ROOT / "scripts")],
                        help="the folders of the tuned scripts (every *.script under them)")
    parser.add_argument("--partial", action="store_true", help="move what can move even where some cannot")
    parser.add_argument("--dry-run", action="store_true", help="say what would move, move nothing")
    args = parser.parse_args(argv)
    library = load_library(args.library)
    if args.was is None:
        was = library
    else:
        with tempfile.TemporaryDirectory() as folder:
            was = library_at(args.was, Path(args.library), Path(folder))
    outcome = rekey(library, was, [Path(folder) for folder in args.scripts], args.dry_run, args.partial)
    verb = "would re-key" if args.dry_run or outcome.refused else "re-keyed"
    print(f"{verb} {len(outcome.moved)} shipped plan(s) usable with library {was.content_hash}"
          f" to the pieces their plans are built from; {len(outcome.current)} keyed so already")
    for reason in outcome.left:
        print(f"  left: {reason}")
    if outcome.refused:
        print(f"refused: {len(outcome.left)} plan(s) cannot move, so none moved (--partial moves the rest)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
