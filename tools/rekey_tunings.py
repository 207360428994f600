"""Carry shipped tuned plans keyed on a whole library's content hash over to the key fusec uses now.

    python tools/rekey_tunings.py [--was REV] [--library fusec/data/blas] [--scripts scripts]
                                  [--partial] [--dry-run]

fusec once keyed a tuned plan on the library's content hash, over every file of its folder, so
any change to the library, even a function added that no tuned script calls, left every shipped
plan stale. It now keys one on the digest of the library files its script's kernels are built
from (fusec.library.digest), and records those files in the entry (docs/tuning.md). This moves
an entry keyed the old way to the key of the library now when nothing its script reads changed:

- its key's library hash is the content hash of the library at git revision REV (without
  --was: of the library as it is),
- a script under --scripts has the text whose sha256 its key holds, and its key's fusec version
  is this one, and
- the files that script's kernels are built from (fusec.library.digest.files_read) are the same
  files, byte for byte, at REV and now;

the plan then generates the same code as when it was measured (the header's library hash aside).
The entry is written under the new key and the old file deleted. Entries that record their files
are keyed the new way already and stay as they are. Any other entry is reported with its reason,
and then nothing moves (exit status 1) unless --partial is given.
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

from fusec.frontend import load_script  # noqa: E402
from fusec.library.digest import files_read  # noqa: E402
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


def rekey(library, was, scripts: Path, dry_run: bool = False, partial: bool = False) -> Outcome:
    """Move the shipped entries of ``library`` keyed on ``was``'s content hash to their key now."""
    by_text = {}
    for path in sorted(scripts.rglob("*.script")):
        dag = load_script(path, library)
        by_text[hashlib.sha256(dag.text.encode()).hexdigest()] = dag
    outcome, moves = Outcome([], [], []), []
    for path in sorted(tuning.shipped_root(library).glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            old = tuning.TuningKey.from_fields(data["key"])
            keyed_anew = "library_files" in data
        except tuning.UNREADABLE as exc:
            outcome.left.append(f"{path.name}: does not parse ({type(exc).__name__})")
            continue
        if keyed_anew:
            outcome.current.append(path)
            continue
        dag = by_text.get(old.script)
        functions = {c.function for c in dag.calls} if dag else set()
        why = None
        if old.library != was.content_hash:
            why = f"keyed on library {old.library}, not the one at the revision given ({was.content_hash})"
        elif dag is None:
            why = "no script has the text its key holds"
        elif not functions <= set(was.functions):
            why = "its script calls a function the library at the revision given lacks"
        else:
            before, now = files_read(was, functions), files_read(library, functions)
            changed = sorted(n for n in before.keys() | now.keys() if before.get(n) != now.get(n))
            if changed:
                why = f"its script is built from files that changed: {', '.join(changed)}"
        new = None if why else tuning.key(dag, library, old.dtype, dict(old.sizes), old.gpu)
        if new is not None and dataclasses.replace(new, library=old.library) != old:
            why = f"made by fusec {old.fusec}, this is {new.fusec}"
        entry = None if why else tuning.read(path, old, calls=len(dag.calls))
        if why or entry is None:
            outcome.left.append(f"{path.name}: {why or 'does not read back'}")
            continue
        moves.append((path, dataclasses.replace(entry, key=new)))
        outcome.moved.append(new.shipped_path(library))
    outcome.refused = bool(outcome.left) and not partial
    if not dry_run and not outcome.refused:
        for path, entry in moves:
            tuning.ship(entry, library)
            path.unlink()
    return outcome


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--was", default=None,
                        help="a git revision with the library the plans were keyed on (default: the library as it is)")
    parser.add_argument("--library", default=str(ROOT / "fusec" / "data" / "blas"))
    parser.add_argument("--scripts", default=str(ROOT / "scripts"), help="the folder of the tuned scripts")
    parser.add_argument("--partial", action="store_true", help="move what can move even where some cannot")
    parser.add_argument("--dry-run", action="store_true", help="say what would move, move nothing")
    args = parser.parse_args(argv)
    library = load_library(args.library)
    if args.was is None:
        was = library
    else:
        with tempfile.TemporaryDirectory() as folder:
            was = library_at(args.was, Path(args.library), Path(folder))
    outcome = rekey(library, was, Path(args.scripts), args.dry_run, args.partial)
    verb = "would re-key" if args.dry_run or outcome.refused else "re-keyed"
    print(f"{verb} {len(outcome.moved)} shipped plan(s) keyed on library {was.content_hash}"
          f" to the files their scripts read; {len(outcome.current)} keyed so already")
    for reason in outcome.left:
        print(f"  left: {reason}")
    if outcome.refused:
        print(f"refused: {len(outcome.left)} plan(s) cannot move, so none moved (--partial moves the rest)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
