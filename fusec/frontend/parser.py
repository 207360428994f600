"""The grammar of the script language (PLY, LALR).

All rules live in :class:`ScriptParser`, one alternative per ``p_`` method,
numbered ``_1``, ``_2``... where a rule has several. The tables are built in
memory once per process (``write_tables=False``, ``debug=False``): nothing is
ever written to disk, least of all into the user's working directory.

There is no error recovery: the first unexpected token (or the end of input)
is a :class:`~fusec.errors.ScriptSyntaxError` that names what the LR tables
would have accepted there.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
import threading

from ply import lex, yacc

from ..errors import Coord, ScriptSyntaxError
from ..ir.expr import FUNCTIONS
from ..library.model import Kind
from . import ast
from .lexer import KEYWORDS, PUNCTUATION, ScriptLexer, new_lexer

# How a token type reads in "expected ..." lists, in the order they are listed.
_SHOWN = {
    **{kind: f"'{text}'" for kind, text in PUNCTUATION.items()},
    **{kind: f"'{word}'" for word, kind in KEYWORDS.items()},
    "ID": "a name",
    "NUMBER": "a number",
    "$end": "end of input",
}


def _one_of(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " or " + items[-1]


@dataclasses.dataclass
class _Context:
    """The state of one parse: the text, and the last token read."""

    file: str
    text: str
    lexer: lex.Lexer
    last: lex.LexToken | None = None
    starts: list[int] | None = None  # offsets at which the text's lines start

    def next_token(self) -> lex.LexToken | None:
        token = self.lexer.token()
        if token is not None:
            self.last = token
        return token

    def coord(self, offset: int) -> Coord:
        """coord_at's, found by bisection in the lines' starts (coord_at counts the
        line breaks before ``offset``: once per token, quadratic in a long script)."""
        if self.starts is None:
            self.starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self.starts, offset)
        return Coord(self.file, line, offset - self.starts[line - 1] + 1)

    def end(self) -> Coord:
        """Just past the last token: where something missing would go."""
        if self.last is None:
            return Coord(self.file, 1, 1)
        return self.coord(self.last.lexpos + len(self.last.value))


class ScriptParser:
    """Builds an :class:`ast.Script` from text; reusable, one parse at a time."""

    tokens = ScriptLexer.tokens
    start = "script"

    def __init__(self, errorlog: yacc.PlyLogger | yacc.NullLogger | None = None):
        self._context: _Context | None = None
        self._lock = threading.Lock()
        self.parser = yacc.yacc(
            module=self, start=self.start, write_tables=False, debug=False,
            optimize=False,
            errorlog=errorlog if errorlog is not None else yacc.NullLogger())

    def parse(self, text: str, file: str) -> ast.Script:
        with self._lock:
            context = _Context(file, text, new_lexer(text, file))
            self._context = context
            try:
                statements = self.parser.parse(lexer=context.lexer,
                                               tokenfunc=context.next_token)
            finally:
                self._context = None
        return ast.Script(file, text, tuple(statements), context.end(), Coord(file, 1, 1))

    # -- helpers for the rules ------------------------------------------------

    def _coord(self, p, n: int) -> Coord:
        return self._context.coord(p.lexpos(n))

    def _name(self, p, n: int) -> ast.Name:
        return ast.Name(p[n], self._coord(p, n))

    def _expected(self) -> str:
        return _one_of([shown for kind, shown in _SHOWN.items() if self._accepts(kind)])

    def _accepts(self, kind: str) -> bool:
        """Whether a token of ``kind`` would be shifted next, after the reductions it
        causes. A state's action table alone over-states it: LALR merges the
        lookaheads of states alike (after ``p`` in ``q = sgemv(A, p)`` it lists
        ',' and ')' wherever an argument may end), so the automaton is run on a
        copy of the stack until it shifts or fails."""
        action, goto, productions = self.parser.action, self.parser.goto, self.parser.productions
        stack = list(self.parser.statestack)
        while True:
            step = action[stack[-1]].get(kind)
            if step is None:
                return False
            if step >= 0:  # a shift, or accept
                return True
            production = productions[-step]
            if production.len:
                del stack[-production.len:]
            stack.append(goto[stack[-1]][production.name])

    # -- statements -----------------------------------------------------------

    def p_script(self, p):
        """script : statements"""
        p[0] = p[1]

    # Lists grow in place (a tuple concatenated per item copies it: quadratic), and are
    # made tuples where a node keeps them.

    def p_statements_1(self, p):
        """statements : statements statement"""
        p[1].append(p[2])
        p[0] = p[1]

    def p_statements_2(self, p):
        """statements : """
        p[0] = []

    def p_statement_1(self, p):
        """statement : declaration"""
        p[0] = p[1]

    def p_statement_2(self, p):
        """statement : input_statement"""
        p[0] = p[1]

    def p_statement_3(self, p):
        """statement : assignment"""
        p[0] = p[1]

    def p_statement_4(self, p):
        """statement : return_statement"""
        p[0] = p[1]

    # -- declarations ---------------------------------------------------------

    def p_declaration_1(self, p):
        """declaration : MATRIX matrix_declarators SEMI"""
        p[0] = ast.Declaration(Kind.MATRIX, tuple(p[2]), self._coord(p, 1))

    def p_declaration_2(self, p):
        """declaration : VECTOR vector_declarators SEMI"""
        p[0] = ast.Declaration(Kind.VECTOR, tuple(p[2]), self._coord(p, 1))

    def p_declaration_3(self, p):
        """declaration : SCALAR names SEMI"""
        declarators = tuple(ast.Declarator(name, (), name.coord) for name in p[2])
        p[0] = ast.Declaration(Kind.SCALAR, declarators, self._coord(p, 1))

    def p_matrix_declarators_1(self, p):
        """matrix_declarators : matrix_declarator"""
        p[0] = [p[1]]

    def p_matrix_declarators_2(self, p):
        """matrix_declarators : matrix_declarators COMMA matrix_declarator"""
        p[1].append(p[3])
        p[0] = p[1]

    def p_matrix_declarator_1(self, p):
        """matrix_declarator : ID"""
        name = self._name(p, 1)
        p[0] = ast.Declarator(name, None, name.coord)

    def p_matrix_declarator_2(self, p):
        """matrix_declarator : ID LBRACKET ID COMMA ID RBRACKET"""
        name = self._name(p, 1)
        p[0] = ast.Declarator(name, (self._name(p, 3), self._name(p, 5)), name.coord)

    def p_vector_declarators_1(self, p):
        """vector_declarators : vector_declarator"""
        p[0] = [p[1]]

    def p_vector_declarators_2(self, p):
        """vector_declarators : vector_declarators COMMA vector_declarator"""
        p[1].append(p[3])
        p[0] = p[1]

    def p_vector_declarator_1(self, p):
        """vector_declarator : ID"""
        name = self._name(p, 1)
        p[0] = ast.Declarator(name, None, name.coord)

    def p_vector_declarator_2(self, p):
        """vector_declarator : ID LBRACKET ID RBRACKET"""
        name = self._name(p, 1)
        p[0] = ast.Declarator(name, (self._name(p, 3),), name.coord)

    # -- input, return --------------------------------------------------------

    def p_input_statement(self, p):
        """input_statement : INPUT names SEMI"""
        p[0] = ast.Input(tuple(p[2]), self._coord(p, 1))

    def p_return_statement(self, p):
        """return_statement : RETURN names SEMI"""
        p[0] = ast.Return(tuple(p[2]), self._coord(p, 1))

    def p_names_1(self, p):
        """names : ID"""
        p[0] = [self._name(p, 1)]

    def p_names_2(self, p):
        """names : names COMMA ID"""
        p[1].append(self._name(p, 3))
        p[0] = p[1]

    # -- assignments ----------------------------------------------------------
    # One rule: the right-hand side is an expression. A whole right-hand side
    # ``f(...)`` with ``f`` not a function of expressions (sqrt, abs) is a call
    # of the library, whose arguments are names and numbers; anything else is
    # a scalar expression, which the checker turns into an Expression of the DAG.

    def p_assignment(self, p):
        """assignment : ID EQUALS expression SEMI"""
        target = self._name(p, 1)
        value = p[3]
        if isinstance(value, ast.Application) and value.function.text not in FUNCTIONS:
            args = tuple(self._call_argument(value.function, arg) for arg in value.args)
            p[0] = ast.Assignment(target, value.function, args, target.coord)
        else:
            p[0] = ast.ScalarAssignment(target, value, target.coord)

    def _call_argument(self, function: ast.Name, arg) -> ast.Argument:
        """A call's argument: a name, a number, or a negated number (``-0.5``)."""
        if isinstance(arg, (ast.Name, ast.Number)):
            return arg
        if isinstance(arg, ast.Negation) and isinstance(arg.operand, ast.Number):
            number = arg.operand
            return ast.Number("-" + number.text, -number.value, arg.coord)
        raise ScriptSyntaxError(
            f"an argument of {function.text} is a name or a number, not an expression:"
            " assign the expression to a scalar first (e.g. nalpha = -alpha;)",
            arg.coord, ast.source_line(self._context.text, arg.coord.line))

    # -- scalar expressions ---------------------------------------------------
    # Usual precedence: unary minus binds tightest, then * and /, then + and -;
    # binary operators group to the left (a - b - c is (a - b) - c).

    precedence = (
        ("left", "PLUS", "MINUS"),
        ("left", "TIMES", "DIVIDE"),
        ("right", "UMINUS"),
    )

    def p_expression_1(self, p):
        """expression : expression PLUS expression
                      | expression MINUS expression
                      | expression TIMES expression
                      | expression DIVIDE expression"""
        p[0] = ast.BinaryOperation(p[2], p[1], p[3], self._coord(p, 2))

    def p_expression_2(self, p):
        """expression : MINUS expression %prec UMINUS"""
        p[0] = ast.Negation(p[2], self._coord(p, 1))

    def p_expression_3(self, p):
        """expression : LPAREN expression RPAREN"""
        p[0] = p[2]

    def p_expression_4(self, p):
        """expression : ID LPAREN arguments RPAREN"""
        name = self._name(p, 1)
        p[0] = ast.Application(name, tuple(p[3]), name.coord)

    def p_expression_5(self, p):
        """expression : ID LPAREN RPAREN"""
        # No function takes no argument, but the checker says so better.
        name = self._name(p, 1)
        p[0] = ast.Application(name, (), name.coord)

    def p_expression_6(self, p):
        """expression : ID"""
        p[0] = self._name(p, 1)

    def p_expression_7(self, p):
        """expression : NUMBER"""
        p[0] = ast.Number(p[1], float(p[1]), self._coord(p, 1))

    def p_arguments_1(self, p):
        """arguments : expression"""
        p[0] = [p[1]]

    def p_arguments_2(self, p):
        """arguments : arguments COMMA expression"""
        p[1].append(p[3])
        p[0] = p[1]

    # -- errors ---------------------------------------------------------------

    def p_error(self, token):
        context = self._context
        if token is None:
            message = "unexpected end of input"
            coord = context.end()
        else:
            message = f"unexpected '{token.value}'"
            coord = context.coord(token.lexpos)
        expected = self._expected()
        if expected:
            message += f", expected {expected}"
        raise ScriptSyntaxError(message, coord, ast.source_line(context.text, coord.line))


@functools.cache
def _parser() -> ScriptParser:
    return ScriptParser()


def parse(text: str, file: str) -> ast.Script:
    """Parse a whole script; raises ScriptLexError or ScriptSyntaxError."""
    return _parser().parse(text, file)
