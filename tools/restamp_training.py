"""Carry a GPU's training points over to its database after `fusec perfdb build --missing`.

    python tools/restamp_training.py --gpu h200 --was REV [--scripts DIR ...] [--dry-run]

A training point (fusec/data/training/<gpu>.json) records the stamp of the database that
priced its plans (the library hash and the ``built`` time); `fusec perfdb fit` fits only
points whose stamp is the database's. `perfdb build --missing` adds the timings of routine
keys the database lacked and keeps every other timing, but stamps the file anew, so every
point falls out of the fit although its prices need not have changed. This moves a point
stamped as the database at git revision REV to the database's stamp now when:

- every timing of the database at REV is in the database now, unchanged, on the same GPU —
  but those of routines whose code changed since (``store.stale_routines``: the
  database at REV no longer serves them, and ``--missing`` timed them again); and
- each of the point's plans, generated again from its JSON, has as many kernels as recorded,
  and the database now prices each kernel as recorded (within the relative PRICE_TOLERANCE
  the training data is matched by).

Its prices are then the database's now, so the fit sees the same numbers under the new
stamp. Points that fail keep their stamp and are named; the file is rewritten atomically.
Refit the correction afterwards: `fusec perfdb fit --gpu GPU`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fusec.cost.perfdb import predictor_for, store  # noqa: E402
from fusec.cost.training import read, write  # noqa: E402
from fusec.frontend import load_script  # noqa: E402
from fusec.ir.plan import ProgramPlan  # noqa: E402
from fusec.library.loader import load_library  # noqa: E402
from fusec.tune.plans import PRICE_TOLERANCE, generate_all, kernel_records, script_folders, script_path  # noqa: E402

DATA = ROOT / "fusec" / "data"
SCRIPTS = script_folders(ROOT / "scripts")  # where training points' scripts are


def _timing_key(entry: dict) -> str:
    return json.dumps({k: v for k, v in entry.items() if k != "seconds"}, sort_keys=True)


def restamp(gpu: str, was: dict, now: dict, training, library, scripts: Sequence[Path]):
    """``training`` with its points stamped as ``was`` moved to ``now``'s stamp where their
    prices are the same; the number moved, and a line for each point left. A point's script is
    ``<name>.script`` in the first of the folders ``scripts`` that holds it."""
    if not was["device"]["slug"] == now["device"]["slug"] == gpu:
        raise SystemExit(f"the databases are of {was['device']['slug']} and {now['device']['slug']}, not {gpu}")
    stale = store.stale_routines(store.Database.from_json(json.dumps(was)), library)
    if stale is None:
        raise SystemExit("the database at --was does not serve the library as it is now (a shared file changed)")
    before = {_timing_key(e): e["seconds"] for e in was["routines"] if e["routine"] not in stale}
    after = {_timing_key(e): e["seconds"] for e in now["routines"]}
    changed = [k for k, seconds in before.items() if after.get(k) != seconds]
    if changed:
        raise SystemExit(f"{len(changed)} timings of the database at --was are not in it now unchanged,"
                         f" e.g. {changed[0]}")
    predictor = predictor_for(library, gpu, corrected=False)
    old = (was["library"]["hash"], was["built"])
    points, left = [], []
    for point in training.points:
        if (point.library, point.perfdb_built) != old:
            left.append(f"{point.label}: stamped {point.library} {point.perfdb_built}, not as the database at --was")
        elif (path := script_path(point.script, scripts)) is None:
            left.append(f"{point.label}: no {point.script}.script in {', '.join(str(s) for s in scripts)}")
        elif why := _repriced_differently(point, load_script(path, library), library, predictor):
            left.append(f"{point.label}: {why}")
        else:
            point = dataclasses.replace(point, library=now["library"]["hash"], perfdb_built=now["built"])
        points.append(point)
    moved = sum(1 for a, b in zip(points, training.points) if a is not b)
    return dataclasses.replace(training, points=tuple(points)), moved, left


def _repriced_differently(point, dag, library, predictor) -> str | None:
    """Why the database now prices one of ``point``'s kernels otherwise than recorded, or None."""
    sizes = dict(point.sizes)
    for number, record in enumerate(point.plans, 1):
        if not record.kernels:
            continue
        generated = generate_all(dag, library, point.dtype, [ProgramPlan.from_json(record.plan)], predictor.target)[0]
        if isinstance(generated, str) or len(generated.kernels) != len(record.kernels):
            return f"plan {number} ({record.summary}) does not generate its {len(record.kernels)} kernels again"
        for kernel, priced in zip(record.kernels, kernel_records(predictor, dag, sizes, generated)):
            if abs(priced.predicted - kernel.predicted) > PRICE_TOLERANCE * kernel.predicted:
                return (f"plan {number} ({record.summary}): a kernel priced {priced.predicted * 1e6:.4f} us now,"
                        f" {kernel.predicted * 1e6:.4f} us when recorded")
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--was", required=True, help="git revision of the database before the --missing build")
    parser.add_argument("--scripts", type=Path, nargs="+", default=list(SCRIPTS),
                        help="folders the training points' scripts are in, first match wins (default: scripts, then"
                        " the solvers' bundled iterations)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    database = DATA / "perfdb" / f"{args.gpu}.json"
    path = DATA / "training" / f"{args.gpu}.json"
    for needed in (database, path):
        if not needed.is_file():
            raise SystemExit(f"restamp_training: --gpu {args.gpu}: no {needed.relative_to(ROOT)}")
    relative = database.relative_to(ROOT)
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.was}:{relative}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"restamp_training: --was {args.was}: git has no {relative} there ({shown.stderr.strip()})")
    was = json.loads(shown.stdout)
    now = json.loads(database.read_text(encoding="utf-8"))
    training = read(path)
    restamped, moved, left = restamp(args.gpu, was, now, training, load_library(DATA / "blas"), args.scripts)
    for line in left:
        print(f"left: {line}")
    print(f"{moved} of {len(training.points)} points {'would move' if args.dry_run else 'moved'} to the"
          f" database of library {now['library']['hash']} built {now['built']}")
    if moved and not args.dry_run:
        write(restamped, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
