"""Fuzzing fusec as a hostile user would (TESTING.md, "Hostile data").

:mod:`.mutants` makes mutants of scripts, libraries, performance databases, tuning
entries, command lines and API arguments; :func:`run` feeds each to fusec and checks how
it ends. A proper ending is one of: accepted (and then right: literals emitted as their
values, tuned plans offered by the space, predictions finite), a :class:`FusecError`
(which renders), or a :class:`FusecWarning` with a fallback. Any other exception, and
any warning that is not fusec's, is a failure, reported with the mutant that caused it.

A seeded few hundred run in the test suite (``tests/test_fuzz.py``); a long run is
``python -m tests.fuzz --count 5000 --seed 7``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import traceback
import warnings
from pathlib import Path

from .mutants import GENERATORS

BENIGN = (DeprecationWarning, PendingDeprecationWarning, ResourceWarning)


@dataclasses.dataclass
class Outcome:
    kind: str  # the generator
    mutant: str
    ending: str  # accepted | error | warning | FAILED
    detail: str = ""


def run_one(kind: str, name: str, mutant, workdir: Path) -> Outcome:
    from fusec.errors import FusecError, FusecWarning
    workdir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mutant(workdir)
            ending, detail = "accepted", ""
        except FusecError as exc:
            try:
                ending, detail = "error", str(exc).splitlines()[0][:200]
            except Exception:  # an error that does not render is a failure too
                ending, detail = "FAILED", traceback.format_exc()
        except Exception:
            ending, detail = "FAILED", traceback.format_exc()
    foreign = [w for w in caught if not issubclass(w.category, (FusecWarning,) + BENIGN)]
    if foreign and ending != "FAILED":
        ending, detail = "FAILED", "; ".join(f"{w.category.__name__}: {w.message}" for w in foreign)
    elif ending == "accepted" and caught:
        ending, detail = "warning", str(caught[0].message).splitlines()[0][:200]
    return Outcome(kind, name, ending, detail)


def run(count: int, seed: int, kinds: list[str] | None = None, log=None) -> list[Outcome]:
    """``count`` mutants, spread over ``kinds`` (all generators by default), from ``seed``."""
    kinds = kinds or sorted(GENERATORS)
    rng = random.Random(seed)
    streams = {k: GENERATORS[k](random.Random(rng.random())) for k in kinds}
    saved = {k: os.environ.get(k) for k in ("FUSEC_CACHE_DIR", "FUSEC_SHIPPED_TUNINGS", "FUSEC_GPU")}
    root = Path(tempfile.mkdtemp(prefix="fusec-fuzz-"))
    os.environ["FUSEC_CACHE_DIR"] = str(root / "cache")
    os.environ["FUSEC_SHIPPED_TUNINGS"] = "0"
    os.environ.pop("FUSEC_GPU", None)
    outcomes = []
    try:
        for i in range(count):
            kind = kinds[i % len(kinds)]
            name, mutant = next(streams[kind])
            outcome = run_one(kind, name, mutant, root / f"m{i}")
            shutil.rmtree(root / f"m{i}", ignore_errors=True)
            outcomes.append(outcome)
            if log is not None:
                log(outcome)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)
    return outcomes
