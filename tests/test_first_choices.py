"""The first choice of each script in ``scripts/`` (Table 1's 11 and the two of
``scripts/horizontal/``) stays what it was before the
search over combinations became bounded (issue 50): the best-predicted
combination's summary, for both precisions, at the default size with the
bundled H100 performance database, at the sizes ``test_space`` uses with the
analytic model, and at ``test_choice``'s n = 6000 with the database.

``tests/data/first_choices.json`` was written by this module
(``PYTHONPATH=. python3 -m tests.test_first_choices --write``) from the
exhaustive enumeration (commit e48d50f), before the search changed: a
regression guard for the search, not a statement that these plans are best.
Since then one change of the model moved predicted times, not choices: a vector kernel of
one block is priced without the ticket and sum of a grid's finish (it has none since
7b02d0f), so AXPYDOT's analytic entries (one block of 1024 threads at n = 4096) are 1.5 µs lower.
Then a tile kernel alone whose sums run apart (Kernel.sums_apart) was priced as such, from
1.35 µs and its partials (AnalyticPredictor.sums_seconds), where the last block's finish had
been priced: 15 first choices of BiCGK, GESUMMV, SGEMV and the two horizontal scripts became
other plans, every one priced lower than the plan it replaced (0.2-19 %), and three SGEMV
prices moved with their plans the same.
"""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from tests.helpers import DTYPES, ROOT, library, script_names

DATA = ROOT / "tests" / "data" / "first_choices.json"
GPU = "h100-80gb-hbm3"  # the bundled performance database's
TEST_SIZES = {"m": 4096, "n": 2048}  # test_space.SIZES, the rest 4096
CASES = ("default-perfdb", "tests-analytic", "6000-perfdb")


def _script_paths() -> dict[str, str]:
    paths = {p.stem: p for p in sorted((ROOT / "scripts").glob("*.script"))}
    paths.update({f"horizontal/{p.stem}": p for p in sorted((ROOT / "scripts" / "horizontal").glob("*.script"))})
    return paths


def _setting(case: str, dag):
    from fusec.cost.analytic import DEFAULT
    from fusec.cost.perfdb import predictor_for
    if case == "default-perfdb":
        return {s: 8192 for s in dag.sizes}, predictor_for(library(), GPU)
    if case == "tests-analytic":
        return {s: TEST_SIZES.get(s, 4096) for s in dag.sizes}, DEFAULT
    return {s: 6000 for s in dag.sizes}, predictor_for(library(), GPU)


def first_choice(name: str, dtype: str, case: str) -> dict:
    from fusec.frontend import load_script
    from fusec.space.combinations import build_space
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dag = load_script(_script_paths()[name], library())
        sizes, predictor = _setting(case, dag)
        best = build_space(dag, library(), dtype, sizes, predictor).best()
    return {"summary": best.plan.summary(dag), "predicted": best.predicted}


def _keys() -> list[tuple[str, str, str]]:
    return [(name, dtype, case) for name in _script_paths() for dtype in DTYPES for case in CASES]


def _cases() -> list:
    """Every key; the quick tier keeps the first setting (what fusec.compile does by default
    with the bundled database), the other two build 52 more whole spaces and are `slow`."""
    return [pytest.param(*key, marks=() if key[2] == CASES[0] else pytest.mark.slow) for key in _keys()]


@pytest.mark.parametrize("name,dtype,case", _cases())
def test_first_choice_is_unchanged(name, dtype, case):
    expected = json.loads(DATA.read_text())[f"{name} {dtype} {case}"]
    found = first_choice(name, dtype, case)
    assert found["summary"] == expected["summary"]
    assert found["predicted"] == pytest.approx(expected["predicted"], rel=1e-9)


def test_the_pinned_scripts_are_every_script():
    assert len(script_names()) == 11  # Table 1's sequences
    assert set(_script_paths()) == set(script_names()) | {"horizontal/gemv_dot", "horizontal/two_gemv"}


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    table = {f"{n} {d} {c}": first_choice(n, d, c) for n, d, c in _keys()}
    DATA.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(table)} first choices to {DATA}")
