"""The syntax tree of a script: what was written, where, and nothing more.

Every node is a frozen dataclass with the :class:`~fusec.errors.Coord` of its
first character (an operator's node: the operator's), so the checker can point
at any name, number, operator or statement.
Meaning (declared or not, kinds, sizes) is the checker's business
(:mod:`fusec.frontend.check`).
"""

from __future__ import annotations

import dataclasses
import functools

from ..errors import Coord
from ..library.model import Kind


def source_line(text: str, line: int) -> str:
    """Line ``line`` (1-based) of ``text`` without its line break; "" past the end.

    Lines are split on ``\\n`` only, the way :func:`fusec.errors.line_of`
    counts them.
    """
    return _line_in(text.split("\n"), line)


def _line_in(lines: list[str], line: int) -> str:
    return lines[line - 1].rstrip("\r") if 1 <= line <= len(lines) else ""


@dataclasses.dataclass(frozen=True)
class Name:
    """An identifier where it is written: a variable, a function or a size."""

    text: str
    coord: Coord


@dataclasses.dataclass(frozen=True)
class Number:
    """A number literal, sign included (``-0.5``); only scalars take one."""

    text: str
    value: float
    coord: Coord


Argument = Name | Number


@dataclasses.dataclass(frozen=True)
class Negation:
    """``-x`` in a scalar expression: ``coord`` is the minus sign's."""

    operand: "Expression"
    coord: Coord


@dataclasses.dataclass(frozen=True)
class BinaryOperation:
    """``a + b``, ``a - b``, ``a * b``, ``a / b``: ``coord`` is the operator's."""

    op: str
    left: "Expression"
    right: "Expression"
    coord: Coord


@dataclasses.dataclass(frozen=True)
class Application:
    """``f(a, ...)`` inside a scalar expression (``sqrt(rr)``): ``coord`` is the name's.
    A whole right-hand side ``f(...)`` with ``f`` other than ``sqrt`` or ``abs``
    is a call, an :class:`Assignment`, instead."""

    function: Name
    args: tuple["Expression", ...]
    coord: Coord


Expression = Name | Number | Negation | BinaryOperation | Application


@dataclasses.dataclass(frozen=True)
class Declarator:
    """One name of a declaration, with its size symbols if given.

    ``dims`` is None when no sizes are written (``matrix A;``); otherwise it
    holds two names for a matrix and one for a vector (the grammar enforces it).
    """

    name: Name
    dims: tuple[Name, ...] | None
    coord: Coord  # the name's


@dataclasses.dataclass(frozen=True)
class Declaration:
    """``matrix A[m, n], B;``: ``coord`` is the keyword's."""

    kind: Kind
    declarators: tuple[Declarator, ...]
    coord: Coord


@dataclasses.dataclass(frozen=True)
class Input:
    """``input A, p;``: ``coord`` is the keyword's."""

    names: tuple[Name, ...]
    coord: Coord


@dataclasses.dataclass(frozen=True)
class Assignment:
    """``q = sgemv(A, p);``: ``coord`` is the target's, which starts the statement."""

    target: Name
    function: Name
    args: tuple[Argument, ...]
    coord: Coord


@dataclasses.dataclass(frozen=True)
class Return:
    """``return q, s;``: ``coord`` is the keyword's."""

    names: tuple[Name, ...]
    coord: Coord


@dataclasses.dataclass(frozen=True)
class ScalarAssignment:
    """``alpha = rho / pq;``: ``coord`` is the target's, which starts the statement."""

    target: Name
    value: Expression
    coord: Coord


Statement = Declaration | Input | Assignment | ScalarAssignment | Return


@dataclasses.dataclass(frozen=True)
class Script:
    """A parsed script.

    ``end`` is where the input ends for messages about something missing:
    just past the last token (line 1, column 1 when there is none).
    """

    file: str
    text: str = dataclasses.field(repr=False)
    statements: tuple[Statement, ...]
    end: Coord
    coord: Coord

    def line(self, number: int) -> str:
        """The source text of line ``number``, for error messages (as :func:`source_line`)."""
        return _line_in(self.lines, number)

    @functools.cached_property
    def lines(self) -> list[str]:
        """The text split once: every call and expression quotes its line."""
        return self.text.split("\n")
