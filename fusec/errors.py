"""One error hierarchy for everything a user can get wrong.

Every error that points into a file carries a :class:`Coord` and prints as
``file:line:col: message`` followed by the source line and a caret, the way
compilers do. Errors about run-time arguments name the argument instead.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import warnings
from pathlib import Path


@dataclasses.dataclass(frozen=True, order=True)
class Coord:
    """A position in a source file: 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


def column_of(text: str, offset: int) -> int:
    """1-based column of character ``offset`` in ``text`` (PLY gives lexpos)."""
    return offset - (text.rfind("\n", 0, offset) + 1) + 1


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def coord_at(file: str, text: str, offset: int) -> Coord:
    return Coord(file, line_of(text, offset), column_of(text, offset))


class FusecError(Exception):
    """Base of every error fusec reports to a user."""

    def __init__(self, message: str, coord: Coord | None = None,
                 source_line: str | None = None):
        self.message = message
        self.coord = coord
        self.source_line = source_line
        super().__init__(self.render())

    def render(self) -> str:
        if self.coord is None:
            return self.message
        text = f"{self.coord}: {self.message}"
        if self.source_line is not None:
            line, column = clip(self.source_line.rstrip(), self.coord.column)
            shown = [visible(c) for c in line]  # a NUL or an escape code would reach the terminal as it is
            under = "".join(c if c == "\t" else " " * len(c) for c in shown[:column - 1])  # a tab moves as far
            under += " " * (column - 1 - len(shown[:column - 1]))  # past the end (trailing blanks)
            text += f"\n    {''.join(shown)}\n    {under}^"
        return text


SHOWN_WIDTH = 120  # characters of a source line shown under a message


def visible(char: str) -> str:
    """A character of a shown source line as a terminal should get it: a control
    character other than a tab (NUL, ESC, ...) as its escape, ``\\x00``."""
    return char if char == "\t" or char.isprintable() else char.encode("unicode_escape").decode("ascii")


def clip(line: str, column: int, width: int = SHOWN_WIDTH) -> tuple[str, int]:
    """``line`` cut to ``width`` characters around ``column`` (``...`` where cut), and
    the column in what is left: a 200 KB line is shown as a window, not whole."""
    if len(line) <= width:
        return line, column
    start = max(0, min(column - 1 - width // 2, len(line) - width))
    shown = line[start:start + width]
    prefix = "..." if start else ""
    return prefix + shown + ("..." if start + width < len(line) else ""), column - start + len(prefix)


class ScriptError(FusecError):
    """Something is wrong in a script."""


class ScriptNotFoundError(ScriptError, FileNotFoundError):
    """No file at a script's path: a fusec error, and the FileNotFoundError open() raised."""

    def __init__(self, path: str):
        super().__init__(f"{path}: the script does not exist")
        self.errno, self.strerror, self.filename = errno.ENOENT, os.strerror(errno.ENOENT), path

    def __str__(self) -> str:  # the message, not OSError's "[Errno 2] ..."
        return self.render()


class ScriptLexError(ScriptError):
    """A character that no token can start with."""


class ScriptSyntaxError(ScriptError):
    """A token (or the end of input) where the grammar does not allow it."""


class ScriptSemanticError(ScriptError):
    """A well-formed script that means nothing: names, kinds, sizes, arity."""


class UndefinedNameError(ScriptSemanticError):
    pass


class DuplicateDeclarationError(ScriptSemanticError):
    pass


class KindError(ScriptSemanticError):
    """A vector where a matrix is expected, and the like."""


class TriangleError(KindError):
    """A matrix of which one triangle is stored (a result its function declares ``stored B
    triu``) passed where the callee reads the whole matrix: below its diagonal it holds
    whatever its array held, never values the script computed."""


class ArityError(ScriptSemanticError):
    pass


class UnknownFunctionError(ScriptSemanticError):
    pass


class SizeMismatchError(ScriptSemanticError):
    pass


class UnassignedNameError(ScriptSemanticError):
    """A name read or returned that nothing assigns."""


class DivisionByZeroError(ScriptSemanticError):
    """A scalar expression that divides by a constant zero (``a / 0``, ``a / (1 - 1)``)."""


class InputAssignmentError(ScriptSemanticError):
    """A scalar expression assigned to an input: an input's name keeps the caller's value."""


class NestedCallError(ScriptSemanticError):
    """A library function called inside a scalar expression: a call is a statement of its own."""


class LibraryError(FusecError):
    """Something is wrong in an elementary-function library."""


class LibraryFormatError(LibraryError):
    """A metadata line that does not parse."""


def source_line(file: str, line: int) -> str | None:
    """Line ``line`` (from 1) of the UTF-8 text file ``file``, for an error to quote; None
    where it cannot be read."""
    try:
        return Path(file).read_text(encoding="utf-8-sig").split("\n")[line - 1]  # without a byte-order mark
    except (OSError, IndexError):
        return None


class LibraryValidationError(LibraryError):
    """Metadata that parses but contradicts itself or the routines."""


class PlanError(FusecError):
    """A point of the optimization space that cannot be built."""


class ArgumentError(FusecError):
    """A bad argument at run time; the message names the argument."""

    def __init__(self, argument: str, message: str):
        self.argument = argument
        super().__init__(f"argument {argument!r}: {message}")


class CompileError(FusecError):
    """nvcc rejected generated code (a fusec bug or a broken library)."""


class ToolError(FusecError):
    """A program fusec runs (nvcc, the C compiler) is missing or does not work."""


class GPUUnavailableError(FusecError):
    """A GPU, a CUDA driver or PyCUDA is needed and missing."""


class DriverError(FusecError):
    """A CUDA driver call fusec made itself (not through PyCUDA) failed."""


class ResidencyError(FusecError):
    """A kernel that waits at a grid-wide barrier has more blocks than the GPU
    holds at once: launched, its resident blocks would wait for the others for ever."""


class RowWidthError(FusecError):
    """A band kernel (whole rows per block, held in registers) was compiled for rows
    of at most so many columns, and the matrix has more."""


class CacheError(FusecError):
    pass


class FusecWarning(UserWarning):
    """Something suspicious that still has a meaning (e.g. an unused input)."""


class ScriptWarning(FusecWarning):
    def __init__(self, message: str, coord: Coord | None = None,
                 source_line: str | None = None):
        self.coord = coord
        self.message = message
        self.source_line = source_line
        super().__init__(FusecError(message, coord, source_line).render())


def warn(warning: FusecWarning) -> None:
    warnings.warn(warning, stacklevel=3)
