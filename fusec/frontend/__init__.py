"""The script front end: text -> tokens -> syntax tree -> checked DAG.

``lexer`` (tokens), ``parser`` (the PLY grammar, building ``ast`` nodes),
``check`` (names, kinds, sizes; builds a :class:`fusec.ir.dag.Dag`). The language
is described in ``docs/script-language.md``.
"""

from __future__ import annotations

import os

from ..errors import ScriptError, ScriptLexError, ScriptNotFoundError, coord_at
from ..ir.dag import Dag
from ..validate import printable, regular_file, shown
from . import ast
from .ast import source_line
from .check import LibraryLike, check
from .parser import parse

__all__ = ["ast", "parse", "check", "load_script"]


def load_script(path: str | os.PathLike, library: LibraryLike) -> Dag:
    """Read (UTF-8, optional BOM), parse and check the script at ``path``.

    Coordinates name the path as given. A missing file is a :class:`ScriptNotFoundError`
    (a FileNotFoundError too); a file that cannot be read otherwise (permissions, a name
    too long) a :class:`ScriptError` saying why.
    """
    file = os.fsdecode(path)
    if not printable(file):  # the generated code and every message name the script by its path
        raise ScriptError(f"{shown(file)}: the script's path is not UTF-8 printable text (the generated"
                          " code names it): rename the file")
    regular_file(file, "script")  # a FIFO would block for ever, a device never end
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ScriptNotFoundError(file) from None
    except OSError as error:
        raise ScriptError(f"{file}: cannot read the script: {error.strerror or error}") from error
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        # Point at the bad byte: decode what comes before it to find line and column.
        # (The error's object is the data without its BOM, if any.)
        bad = error.object
        before = bad[:error.start].decode("utf-8")
        coord = coord_at(file, before, len(before))
        raise ScriptLexError(f"invalid UTF-8 byte 0x{bad[error.start]:02x}", coord,
                             source_line(bad.decode("utf-8", errors="replace"), coord.line)
                             ) from error
    return check(parse(text, file), library)
