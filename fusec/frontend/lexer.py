"""Tokens of the script language (PLY).

The lexer is built once per process (:func:`new_lexer` clones it per parse).
Token values are the matched text; positions are PLY's ``lexpos``, turned into
columns with :func:`fusec.errors.coord_at` where needed. A character no token
starts with is a :class:`~fusec.errors.ScriptLexError` at that character.
"""

from __future__ import annotations

import functools
import math
import threading

from ply import lex

from ..errors import ScriptLexError, coord_at
from ..ir import expr
from .ast import source_line

KEYWORDS = {word: word.upper() for word in expr.KEYWORDS}  # each its own token

PUNCTUATION = {
    "SEMI": ";",
    "COMMA": ",",
    "LBRACKET": "[",
    "RBRACKET": "]",
    "LPAREN": "(",
    "RPAREN": ")",
    "EQUALS": "=",
    "PLUS": "+",
    "MINUS": "-",
    "TIMES": "*",
    "DIVIDE": "/",
}


class ScriptLexer:
    """The token rules; PLY reads them from this class."""

    tokens = ("ID", "NUMBER") + tuple(PUNCTUATION) + tuple(KEYWORDS.values())

    t_ignore = " \t\r\f"
    t_ignore_COMMENT = r"(\#|//)[^\n]*"

    t_SEMI = r";"
    t_COMMA = r","
    t_LBRACKET = r"\["
    t_RBRACKET = r"\]"
    t_LPAREN = r"\("
    t_RPAREN = r"\)"
    t_EQUALS = r"="
    t_PLUS = r"\+"
    t_MINUS = r"-"
    t_TIMES = r"\*"
    t_DIVIDE = r"/"  # "//" starts a comment: PLY tries the longer t_ignore_COMMENT first

    # Function rules match before string rules, in the order written here.

    def t_newline(self, t):
        r"\n+"
        t.lexer.lineno += len(t.value)

    def t_NUMBER(self, t):
        r"([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?"  # ASCII: \d is any Unicode digit
        if len(t.value) > 1 and t.value[0] == "0" and t.value[1].isdigit():
            # C reads 010 as octal 8, Python refuses it; a script refuses it too
            _fail(t, f"number {t.value} has a leading zero: write it without (a number is decimal)")
        if not math.isfinite(float(t.value)):
            _fail(t, f"number {t.value} is out of range")
        return t

    def t_ID(self, t):
        r"[A-Za-z_][A-Za-z0-9_]*"
        t.type = KEYWORDS.get(t.value, "ID")
        return t

    def t_error(self, t):
        _fail(t, f"illegal character {t.value[0]!r}")


def _fail(t: lex.LexToken, message: str):
    text = t.lexer.lexdata
    coord = coord_at(t.lexer.fusec_file, text, t.lexpos)
    raise ScriptLexError(message, coord, source_line(text, coord.line))


_lock = threading.Lock()


@functools.cache
def _base_lexer() -> lex.Lexer:
    return lex.lex(module=ScriptLexer(), optimize=False)


def new_lexer(text: str, file: str) -> lex.Lexer:
    """A fresh lexer over ``text``; errors name ``file``."""
    with _lock:
        lexer = _base_lexer().clone()
    lexer.fusec_file = file
    lexer.input(text)
    return lexer


def tokenize(text: str, file: str) -> list[lex.LexToken]:
    """All tokens of ``text`` (for tests and debugging)."""
    lexer = new_lexer(text, file)
    return list(iter(lexer.token, None))
