"""Regression tests of issue 50: input a hostile user gives fusec (scripts, libraries,
databases, tuning entries, caches, flags, arguments) ends in a typed, located error, or
a warning and a fallback, or a correct program; never a traceback, never a program
that means something else."""

from __future__ import annotations

from pathlib import Path

import pytest

import fusec
from fusec.errors import Coord, FusecError, ScriptLexError, ScriptWarning
from fusec.script.check import MAX_WARNINGS
from fusec.space import unfused_plan
from fusec.script import load_script
from helpers import library


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


SCAL = "vector x[n], y[n];\ninput x;\ny = sscal({}, x);\nreturn y;\n"


# -- numbers are values -------------------------------------------------------

@pytest.mark.parametrize("text, literal", [
    ("10", "real(10.0)"), ("1.0", "real(1.0)"), (".5", "real(0.5)"), ("-2e-3", "real(-0.002)"),
    ("1.5E+2", "real(150.0)"), ("123456789.123456789", "real(123456789.12345679)"),
    ("1e-300", "real(1e-300)"),
])
def test_constants_are_emitted_as_their_value(tmp_path, text, literal):
    path = write(tmp_path, "scal.script", SCAL.format(text))
    dag = load_script(path, library())
    source = fusec.compile(path, library(), "float64", plan=unfused_plan(dag, library())).source
    assert literal in source
    assert float(literal[5:-1]) == float(text)  # round-trip exact


@pytest.mark.parametrize("text, column", [("010", 11), ("09", 11), ("-007.5", 12)])
def test_a_leading_zero_is_a_located_error(tmp_path, text, column):
    path = write(tmp_path, "scal.script", SCAL.format(text))
    with pytest.raises(ScriptLexError) as info:
        load_script(path, library())
    assert info.value.coord.line == 3 and info.value.coord.column == column
    assert "leading zero" in info.value.message


# -- warnings stay small ------------------------------------------------------

def test_thousands_of_unused_names_give_a_few_short_warnings(tmp_path):
    names = [f"v{i}" for i in range(2000)]
    text = ("vector x[n], y[n], " + ", ".join(f"{v}[n]" for v in names) + ";\n"
            "input x;\ny = sscal(2.0, x);\nreturn y;\n")
    path = write(tmp_path, "many.script", text)
    with pytest.warns(ScriptWarning) as caught:
        load_script(path, library())
    messages = [str(w.message) for w in caught]
    assert len(messages) == MAX_WARNINGS + 1
    assert "1980 more warning(s)" in messages[-1]
    assert sum(len(m) for m in messages) < 20 * 400  # the 17 KB line shows once, clipped
    assert sum(m.count("\n") for m in messages) == 2  # one line each; the source line (and caret) once


def test_a_long_line_is_shown_as_a_window_around_the_column():
    line = "x" * 5000 + "$" + "y" * 5000
    text = FusecError("bad", Coord("f", 1, 5001), line).render()
    shown, caret = text.split("\n")[1:]
    assert len(shown) < 140 and shown[caret.index("^")] == "$"
