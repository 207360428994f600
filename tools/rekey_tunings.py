"""Carry a library's shipped tuned plans over a change that their scripts do not see.

    python tools/rekey_tunings.py --was REV [--library fusec/data/blas] [--scripts scripts] [--dry-run]

A shipped plan is keyed on the library's content hash, so any change to the library, even a
function added that no tuned script calls, leaves every shipped plan stale (docs/tuning.md).
This re-keys a stale entry to the library as it is now when nothing its script is built from
changed: REV is a git revision at which the library had the hash the entry is keyed on, and the
entry moves only when

- its key's library hash is the library's content hash at REV,
- a script under --scripts has the text whose sha256 its key holds, and its key's fusec version
  is this one, and
- every file that script's kernels are built from (library.fusec, the prelude and routine files,
  the files of the functions it calls) is byte for byte the same at REV and now;

the plan then generates the same code as when it was measured (the header's library hash
aside). The entry is written under the key of the library now and the stale file deleted. Every
other entry stays as it is, with the reason printed.
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
from fusec.library.loader import load_library  # noqa: E402
from fusec.tune import store as tuning  # noqa: E402


def library_at(revision: str, library: Path, into: Path):
    """The library folder as it was at git ``revision``, loaded from a copy in ``into``."""
    relative = library.resolve().relative_to(ROOT)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, str(relative)],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return load_library(into / relative)


def built_from(library, functions) -> set[str]:
    """The library files a script calling ``functions`` is built from."""
    function_files = {Path(f.file).name for f in library.functions.values()}
    shared = {name for name in library.files if name not in function_files}
    return shared | {Path(library.functions[name].file).name for name in functions}


def rekey(library, was, scripts: Path, dry_run: bool = False) -> tuple[list[Path], list[str]]:
    """(the entries written under the new key, a reason for each entry left as it is)."""
    by_text = {}
    for path in sorted(scripts.rglob("*.script")):
        dag = load_script(path, library)
        by_text[hashlib.sha256(dag.text.encode()).hexdigest()] = dag
    moved, left = [], []
    for path in sorted(tuning.shipped_root(library).glob("*/*.json")):
        fields = json.loads(path.read_text(encoding="utf-8"))["key"]
        old = tuning.TuningKey(**{**fields, "sizes": tuning.sizes_of(fields)})
        dag = by_text.get(old.script)
        why = None
        if old.library == library.content_hash:
            why = "keyed on the library as it is"
        elif old.library != was.content_hash:
            why = f"keyed on library {old.library}, not the one at the revision given ({was.content_hash})"
        elif dag is None:
            why = "no script has the text its key holds"
        elif any(c.function not in was.functions for c in dag.calls):
            why = "its script calls a function the library at the revision given lacks"
        else:
            files = built_from(library, {c.function for c in dag.calls})
            changed = sorted(n for n in files | built_from(was, {c.function for c in dag.calls})
                             if was.files.get(n) != library.files.get(n))
            if changed:
                why = f"its script is built from files that changed: {', '.join(changed)}"
        new = None if why else tuning.key(dag, library, old.dtype, dict(old.sizes), old.gpu)
        if new is not None and dataclasses.replace(new, library=old.library) != old:
            why = f"made by fusec {old.fusec}, this is {new.fusec}"
        entry = None if why else tuning.read(path, old, calls=len(dag.calls))
        if why or entry is None:
            left.append(f"{path.name}: {why or 'does not read back'}")
            continue
        if not dry_run:
            tuning.ship(dataclasses.replace(entry, key=new), library)
            path.unlink()
        moved.append(new.shipped_path(library))
    return moved, left


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--was", required=True, help="a git revision with the library the stale plans were tuned on")
    parser.add_argument("--library", default=str(ROOT / "fusec" / "data" / "blas"))
    parser.add_argument("--scripts", default=str(ROOT / "scripts"), help="the folder of the tuned scripts")
    parser.add_argument("--dry-run", action="store_true", help="say what would move, move nothing")
    args = parser.parse_args(argv)
    library = load_library(args.library)
    with tempfile.TemporaryDirectory() as folder:
        was = library_at(args.was, Path(args.library), Path(folder))
    moved, left = rekey(library, was, Path(args.scripts), args.dry_run)
    verb = "would re-key" if args.dry_run else "re-keyed"
    print(f"{verb} {len(moved)} shipped plan(s) from library {was.content_hash} to {library.content_hash}")
    for reason in left:
        print(f"  left: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
