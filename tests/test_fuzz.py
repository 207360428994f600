"""A seeded few hundred mutants of everything fusec reads (tests/fuzz): each ends in a
typed FusecError, a FusecWarning and a fallback, or a right program; never another
exception. The long run is ``python -m tests.fuzz --count 5000 --seed S``."""

from __future__ import annotations

import pytest
from fuzz import run, run_one
from fuzz.mutants import GENERATORS

pytestmark = pytest.mark.fuzz

COUNT = 300  # 50 of each generator: seconds, so the `slow` tier's
QUICK = 60  # the first 10 of each, the same mutants (one seed, the kinds in turn): the unit tier's


def _check(count: int) -> None:
    outcomes = run(count, seed=2026)
    failed = [o for o in outcomes if o.ending == "FAILED"]
    assert not failed, "\n\n".join(f"[{o.kind}] {o.mutant}\n{o.detail}" for o in failed[:5])
    kinds = {o.kind for o in outcomes}
    assert kinds == set(GENERATORS)
    # the generators reach both sides: mutants refused, and mutants fusec accepts
    endings = {(o.kind, o.ending) for o in outcomes}
    assert {("script", "error"), ("database", "warning"), ("entry", "warning"), ("api", "error")} <= endings
    assert any(e == "accepted" for _, e in endings)


def test_the_first_seeded_mutants_end_properly():
    _check(QUICK)


@pytest.mark.slow
def test_seeded_mutants_end_properly():
    _check(COUNT)


def test_the_harness_reports_a_foreign_exception(tmp_path):
    """So that the test above can fail: a KeyError is not a proper ending, a FusecError is."""
    from fusec.errors import FusecError

    def broken(workdir):
        raise KeyError("shape")

    def refused(workdir):
        raise FusecError("no")

    assert run_one("api", "broken", broken, tmp_path / "a").ending == "FAILED"
    assert run_one("api", "refused", refused, tmp_path / "b").ending == "error"
