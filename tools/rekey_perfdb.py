"""Record, in performance databases built before they were recorded, each routine's digest.

    python tools/rekey_perfdb.py [--library fusec/data/blas] [--perfdb fusec/data/perfdb] [--dry-run]

A database now keeps a routine's timings while the library's pieces that routine is built from
are unchanged (fusec.library.pieces.routine_digest, recorded per routine as library.routines;
fusec/cost/perfdb/store.py); one that records no such digests is judged by the files it
recorded, and any change to a shared file (library.fusec, the prelude, a routine file) makes all
of it unusable. Nothing can be timed again here, so this records the digests only where it is
proven that the database timed the code as it is now: every file it recorded is in the library
with the same digest (or it has the library's content hash), so each routine's pieces now are
those it timed. Any other database is left as it is, with the files that differ named.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fusec.cache import atomic_write_text  # noqa: E402
from fusec.cost.perfdb import store  # noqa: E402
from fusec.errors import FusecError  # noqa: E402
from fusec.library.loader import load_library  # noqa: E402


def rekey(path: Path, library, dry_run: bool = False) -> str:
    """Record the routine digests in the database at ``path`` where it timed ``library`` as
    it is; what was done, or why not (a file that cannot be read or is no whole database:
    ``ValueError``/``OSError``, which :func:`main` reports)."""
    text = path.read_text(encoding="utf-8")
    store.Database.from_json(text, str(path))  # whole, or this raises
    data = json.loads(text)
    recorded = data["library"]
    if "routines" in recorded:
        return f"{path.name}: records routine digests already"
    files = recorded.get("files") or {}
    differ = sorted(name for name, digest in files.items() if library.files.get(name) != digest)
    if recorded.get("hash") != library.content_hash and (not files or differ):
        why = f"files differ: {', '.join(differ)}" if differ else "it records no files"
        return f"{path.name}: not proven to time the library as it is ({why}); left as it is"
    routines = store.routine_digests(library, {entry["routine"] for entry in data["routines"]})
    missing = sorted({entry["routine"] for entry in data["routines"]} - set(routines))
    if missing:
        return f"{path.name}: times routines the library does not define ({', '.join(missing)}); left as it is"
    recorded["routines"] = routines
    if not dry_run:
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    return f"{path.name}: {'would record' if dry_run else 'recorded'} the digests of {len(routines)} routines"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", default=str(ROOT / "fusec" / "data" / "blas"),
                        help="the library the databases timed")
    parser.add_argument("--perfdb", default=str(ROOT / "fusec" / "data" / "perfdb"), help="the databases' folder")
    parser.add_argument("--dry-run", action="store_true", help="say what would be recorded, write nothing")
    args = parser.parse_args(argv)
    if not Path(args.perfdb).is_dir():
        parser.error(f"--perfdb {args.perfdb}: not a folder")
    try:
        library = load_library(args.library)
    except FusecError as exc:
        parser.error(f"--library {args.library}: {exc}")
    status = 0
    for path in sorted(Path(args.perfdb).glob("*.json")):
        try:
            print(rekey(path, library, args.dry_run))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
            print(f"{path.name}: cannot be read as a performance database ({type(exc).__name__}: {exc});"
                  " left as it is")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
