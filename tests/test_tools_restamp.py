"""tools/restamp_training.py: training points carried over to a database extended by
`fusec perfdb build --missing` only where every old timing is kept and each point's plans are
priced as recorded; the H200's shipped database and training data as the case."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest

from fusec import data
from fusec.cost.training import read
from tests.helpers import library
from tools.restamp_training import SCRIPTS, main, restamp

GPU = "h200"
TRAINING = data.TRAINING / f"{GPU}.json"


def _now():
    return json.loads((data.PERFDB / f"{GPU}.json").read_text())


def _before(now, routines=None):
    """The database as it was before an extension: other stamps, fewer timings."""
    return {**now, "library": {**now["library"], "hash": "0123456789abcdef"}, "built": "2026-01-01T00:00:00+00:00",
            "routines": now["routines"] if routines is None else routines}


def _stamped_before(training, was):
    return dataclasses.replace(training, points=tuple(
        dataclasses.replace(p, library=was["library"]["hash"], perfdb_built=was["built"]) for p in training.points))


@functools.cache
def _priced_as_recorded():
    """The points today's model prices as their file records: a change of the model since
    they were measured (8b4478a priced a one-block vector kernel's finish anew) leaves the
    others where they are, as the tool should, whatever the database."""
    training, now = read(TRAINING), _now()
    moved_data, _, _ = restamp(GPU, _before(now), now, _stamped_before(training, _before(now)), library(), SCRIPTS)
    kept = tuple(p for p in moved_data.points if p.perfdb_built == now["built"])
    assert len(kept) >= 0.8 * len(training.points)  # else the file no longer tests the tool
    return dataclasses.replace(training, points=kept)


def test_points_priced_alike_move_to_the_extended_database():
    now = _now()
    was = _before(now, [e for e in now["routines"] if not e["routine"].startswith(("tri", "strict", "syr"))])
    training = _stamped_before(_priced_as_recorded(), was)
    moved_data, moved, left = restamp(GPU, was, now, training, library(), SCRIPTS)
    assert moved == len(training.points) > 0 and not left
    assert {(p.library, p.perfdb_built) for p in moved_data.points} == {(now["library"]["hash"], now["built"])}


def test_a_point_whose_script_is_in_no_folder_stays_and_is_named():
    now = _now()
    was = _before(now)
    training = _stamped_before(read(TRAINING), was)
    solvers = [p for p in training.points if p.script in ("bicg", "bicgstab", "cg")]
    assert solvers  # the solvers' iterations are training points too, from scripts/solvers
    moved_data, moved, left = restamp(GPU, was, now, training, library(), SCRIPTS[:1])
    assert moved == len(training.points) - len(solvers) and len(left) == len(solvers)
    assert all(f"no {p.script}.script in {SCRIPTS[0]}" in line for p, line in zip(solvers, left))


def test_a_point_whose_price_differs_stays():
    now = _now()
    was = _before(now)
    training = _stamped_before(_priced_as_recorded(), was)
    first = training.points[0]
    plan = next(p for p in first.plans if p.kernels)
    kernel = dataclasses.replace(plan.kernels[0], predicted=plan.kernels[0].predicted * 1.01)
    changed = dataclasses.replace(plan, kernels=(kernel,) + plan.kernels[1:])
    altered = dataclasses.replace(first, plans=tuple(changed if p is plan else p for p in first.plans))
    training = dataclasses.replace(training, points=(altered,) + training.points[1:])
    moved_data, moved, left = restamp(GPU, was, now, training, library(), SCRIPTS)
    assert moved == len(training.points) - 1
    assert len(left) == 1 and left[0].startswith(first.label) and "priced" in left[0]
    assert moved_data.points[0] is altered


def test_a_changed_timing_refuses_everything():
    now = _now()
    routines = [dict(e) for e in now["routines"]]
    routines[0]["seconds"] = {k: v * 2 for k, v in routines[0]["seconds"].items()}
    with pytest.raises(SystemExit, match="1 timings of the database at --was are not in it now unchanged"):
        restamp(GPU, _before(now, routines), now, read(TRAINING), library(), SCRIPTS)


def test_timings_of_routines_the_library_redefined_may_change():
    """Routines (here syr_compute and syr2_compute) whose code changed since the database at
    --was timed them: their timings (timed again by --missing) are not the ones compared."""
    from fusec.cost.perfdb import store
    now = _now()
    was = _before(now)
    changed = {"syr_compute": "0" * 16, "syr2_compute": "0" * 16}
    was["library"] = {**was["library"], "routines": {**was["library"]["routines"], **changed}}
    stale = store.stale_routines(store.Database.from_json(json.dumps(was)), library())
    assert stale == set(changed)
    retimed = [dict(e, seconds={k: v * 2 for k, v in e["seconds"].items()}) if e["routine"] in stale else e
               for e in now["routines"]]
    assert retimed != now["routines"]
    training = _stamped_before(_priced_as_recorded(), was)
    _, moved, left = restamp(GPU, was, {**now, "routines": retimed}, training, library(), SCRIPTS)
    assert moved == len(training.points) and not left


def test_a_gpu_without_a_database_or_a_revision_git_lacks_is_named():
    with pytest.raises(SystemExit, match="--gpu no-such-gpu: no fusec/data/perfdb/no-such-gpu.json"):
        main(["--gpu", "no-such-gpu", "--was", "HEAD"])
    from tools.restamp_training import DATA
    if not (DATA / "perfdb" / f"{GPU}.json").is_file():
        pytest.skip("a checkout's tool: its data is not beside it here (an installed wheel's tests)")
    with pytest.raises(SystemExit, match="--was no-such-revision: git has no fusec/data/perfdb/h200.json there"):
        main(["--gpu", GPU, "--was", "no-such-revision", "--dry-run"])
