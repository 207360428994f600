"""Lexer and parser of the script language: the tree, coordinates, syntax errors."""

from __future__ import annotations

import os
import pathlib

import pytest
from ply import yacc

import fusec.frontend.parser as parser_module
from fusec.errors import Coord, ScriptLexError, ScriptSyntaxError
from fusec.frontend import ast, parse
from fusec.frontend.lexer import tokenize
from fusec.frontend.parser import ScriptParser
from fusec.library.model import Kind

F = "t.script"


def at(line: int, column: int) -> Coord:
    return Coord(F, line, column)


def names(nodes) -> list[str]:
    return [n.text for n in nodes]


# -- tokens -------------------------------------------------------------------

def test_tokens_keywords_names_numbers_punctuation():
    tokens = tokenize("matrix A_1[m, n]; x = f(-2.5e-3, .5, 1.);", F)
    assert [t.type for t in tokens] == [
        "MATRIX", "ID", "LBRACKET", "ID", "COMMA", "ID", "RBRACKET", "SEMI",
        "ID", "EQUALS", "ID", "LPAREN", "MINUS", "NUMBER", "COMMA", "NUMBER", "COMMA",
        "NUMBER", "RPAREN", "SEMI"]
    assert [t.value for t in tokens if t.type == "NUMBER"] == ["2.5e-3", ".5", "1."]


def test_keyword_prefix_is_a_name():
    assert [t.type for t in tokenize("matrixA inputs returned", F)] == ["ID", "ID", "ID"]


def test_comments_of_both_styles_and_crlf_are_skipped():
    text = "# a comment\r\nvector x; // another $ comment\r\n  // last"
    assert [t.value for t in tokenize(text, F)] == ["vector", "x", ";"]


# -- the tree -----------------------------------------------------------------

BICGK = """\
# BiCGK: q = A p, s = A^T r
matrix A[m, n];
vector p[n], q[m], r, s;   // sizes are optional
scalar alpha, beta;
input A, p;
input r;
q = sgemv(A, p);
x = sgemtv_ab(beta, A, y, 1.0, z);
return q, s;
"""


def test_script_tree_with_coordinates():
    script = parse(BICGK, F)
    assert script.file == F and script.text == BICGK and script.coord == at(1, 1)
    decl_a, decl_v, decl_s, in1, in2, call1, call2, ret = script.statements

    assert decl_a == ast.Declaration(Kind.MATRIX, (
        ast.Declarator(ast.Name("A", at(2, 8)),
                       (ast.Name("m", at(2, 10)), ast.Name("n", at(2, 13))), at(2, 8)),
    ), at(2, 1))

    assert decl_v.kind is Kind.VECTOR and decl_v.coord == at(3, 1)
    assert [names([d.name]) for d in decl_v.declarators] == [["p"], ["q"], ["r"], ["s"]]
    assert [d.dims and names(d.dims) for d in decl_v.declarators] == [["n"], ["m"], None, None]
    assert [d.coord for d in decl_v.declarators] == [at(3, 8), at(3, 14), at(3, 20), at(3, 23)]

    assert decl_s.kind is Kind.SCALAR
    assert [(d.name.text, d.dims) for d in decl_s.declarators] == [("alpha", ()), ("beta", ())]

    assert in1 == ast.Input((ast.Name("A", at(5, 7)), ast.Name("p", at(5, 10))), at(5, 1))
    assert in2 == ast.Input((ast.Name("r", at(6, 7)),), at(6, 1))

    assert call1 == ast.Assignment(
        ast.Name("q", at(7, 1)), ast.Name("sgemv", at(7, 5)),
        (ast.Name("A", at(7, 11)), ast.Name("p", at(7, 14))), at(7, 1))

    assert call2.target.text == "x" and call2.function == ast.Name("sgemtv_ab", at(8, 5))
    assert call2.args[3] == ast.Number("1.0", 1.0, at(8, 27))
    assert names(a for a in call2.args if isinstance(a, ast.Name)) == ["beta", "A", "y", "z"]

    assert ret == ast.Return((ast.Name("q", at(9, 8)), ast.Name("s", at(9, 11))), at(9, 1))
    assert script.end == at(9, 13)


@pytest.mark.parametrize("literal, value", [
    ("1", 1.0), ("1.0", 1.0), ("-0.5", -0.5), ("2e-3", 0.002), ("-1.5E+2", -150.0),
    (".25", 0.25), ("3.", 3.0), ("- 2", -2.0), ("0", 0.0), ("0.5", 0.5), ("1e05", 1e5), ("0e1", 0.0),
])
def test_number_literals(literal, value):
    (statement,) = parse(f"y = sscal({literal}, x);", F).statements
    number = statement.args[0]
    assert number == ast.Number(literal.replace(" ", ""), value, at(1, 11))


def test_empty_argument_list_parses_for_the_checker_to_reject():
    (statement,) = parse("y = f();", F).statements
    assert statement.args == ()


def test_empty_script_and_comment_only_script():
    assert parse("", F).statements == ()
    script = parse("# nothing\n\n", F)
    assert script.statements == () and script.end == at(1, 1)


def test_statements_may_span_lines():
    script = parse("vector\n  x\n  [n]\n;\n", F)
    (declarator,) = script.statements[0].declarators
    assert declarator.coord == at(2, 3) and declarator.dims == (ast.Name("n", at(3, 4)),)


def test_tabs_count_as_one_column():
    (statement,) = parse("\tinput\tA;", F).statements
    assert statement.coord == at(1, 2) and statement.names[0].coord == at(1, 8)


# -- errors -------------------------------------------------------------------

def error_of(text: str, kind=ScriptSyntaxError):
    with pytest.raises(kind) as info:
        parse(text, F)
    return info.value


@pytest.mark.parametrize("text, coord, message", [
    ("vector x;\nmatrix $A;", at(2, 8), "illegal character '$'"),
    ("vector x; % y", at(1, 11), "illegal character '%'"),
    ("y = sscal(0.5, x);\ny = f(1e999);", at(2, 7), "number 1e999 is out of range"),
    ("vector p;\nvector é;", at(2, 8), "illegal character 'é'"),
    # C reads 010 as octal 8; a script refuses a leading zero rather than mean another number
    ("y = sscal(010, x);", at(1, 11), "number 010 has a leading zero: write it without (a number is decimal)"),
    ("y = sscal(-09, x);", at(1, 12), "number 09 has a leading zero: write it without (a number is decimal)"),
    ("y = sscal(00.5, x);", at(1, 11), "number 00.5 has a leading zero: write it without (a number is decimal)"),
    # numbers are ASCII digits: Python's \\d (and float()) would take an Arabic-Indic 3 as 3
    ("y = sscal(\u0663, x);", at(1, 11), "illegal character '\u0663'"),
    ("y = sscal(1.\u0665, x);", at(1, 13), "illegal character '\u0665'"),
])
def test_lex_errors(text, coord, message):
    error = error_of(text, ScriptLexError)
    assert (error.coord, error.message) == (coord, message)


@pytest.mark.parametrize("text, coord, message", [
    ("input A p;", at(1, 9), "unexpected 'p', expected ';' or ','"),
    ("matrix A[m n];", at(1, 12), "unexpected 'n', expected ','"),
    ("vector p[n, m];", at(1, 11), "unexpected ',', expected ']'"),
    ("matrix A[m];", at(1, 11), "unexpected ']', expected ','"),
    ("scalar alpha[n];", at(1, 13), "unexpected '[', expected ';' or ','"),
    ("vector x\nvector y;", at(2, 1), "unexpected 'vector', expected ';', ',' or '['"),
    ("matrix input;", at(1, 8), "unexpected 'input', expected a name"),
    ("q = sgemv(A, p;", at(1, 15), "unexpected ';', expected ',', ')', '+', '-', '*' or '/'"),
    ("q = sgemv(A,, p);", at(1, 13), "unexpected ',', expected '(', '-', a name or a number"),
    ("q = sgemv(, p);", at(1, 11), "unexpected ',', expected '(', ')', '-', a name or a number"),
    ("q = (A, p);", at(1, 7), "unexpected ',', expected ')', '+', '-', '*' or '/'"),
    ("t = a b;", at(1, 7), "unexpected 'b', expected ';', '(', '+', '-', '*' or '/'"),
    ("t = a + ;", at(1, 9), "unexpected ';', expected '(', '-', a name or a number"),
    ("t = a * / b;", at(1, 9), "unexpected '/', expected '(', '-', a name or a number"),
    ("t = (a + b;", at(1, 11), "unexpected ';', expected ')', '+', '-', '*' or '/'"),
    ("t = ;", at(1, 5), "unexpected ';', expected '(', '-', a name or a number"),
    ("q sgemv(A, p);", at(1, 3), "unexpected 'sgemv', expected '='"),
    ("return;", at(1, 7), "unexpected ';', expected a name"),
    ("1 = f(x);", at(1, 1), "unexpected '1', expected 'matrix', 'vector', 'scalar', "
                            "'input', 'return', a name or end of input"),
])
def test_syntax_errors_name_the_token_and_what_was_expected(text, coord, message):
    error = error_of(text)
    assert (error.coord, error.message) == (coord, message)


@pytest.mark.parametrize("text, coord, message", [
    ("return q, s", at(1, 12), "unexpected end of input, expected ';' or ','"),
    ("vector p;\nq = sgemv(A, p)\n", at(2, 16), "unexpected end of input, expected ';', '+', '-', '*' or '/'"),
    # blank lines and a trailing comment do not move it: it stays after the last token
    ("q = sgemv(A, p  # unclosed\n\n  \n", at(1, 15),
     "unexpected end of input, expected ',', '(', ')', '+', '-', '*' or '/'"),
    ("matrix A[m, n", at(1, 14), "unexpected end of input, expected ']'"),
])
def test_end_of_input_is_located_after_the_last_token(text, coord, message):
    error = error_of(text)
    assert (error.coord, error.message) == (coord, message)
    assert error.source_line == text.split("\n")[coord.line - 1]


def test_rendered_error_has_location_source_line_and_caret():
    error = error_of("vector p;\ninput A p;\n")
    assert str(error) == (
        "t.script:2:9: unexpected 'p', expected ';' or ','\n"
        "    input A p;\n"
        "            ^")
    error = error_of("vector x;\n  matrix $A;", ScriptLexError)
    lines = str(error).split("\n")
    assert lines[0] == "t.script:2:10: illegal character '$'"
    assert lines[1] == "      matrix $A;"
    assert lines[2].index("^") == lines[1].index("$")


# -- how PLY is used ----------------------------------------------------------

class _Recorder(yacc.PlyLogger):
    def __init__(self):
        self.records = []

    def warning(self, msg, *args, **kwargs):
        self.records.append(("warning", msg % args))

    def error(self, msg, *args, **kwargs):
        self.records.append(("error", msg % args))

    critical = error


def test_grammar_has_no_conflicts_or_warnings():
    recorder = _Recorder()
    ScriptParser(errorlog=recorder)
    assert recorder.records == []


def test_parsing_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    package = pathlib.Path(parser_module.__file__).parent
    before = set(os.listdir(package))
    fresh = ScriptParser()  # building the tables is when PLY would write them
    fresh.parse(BICGK, F)
    parse(BICGK, F)
    with pytest.raises(ScriptSyntaxError):
        parse("input A p;", F)
    assert os.listdir(tmp_path) == []
    assert set(os.listdir(package)) - before <= {"__pycache__"}
    assert not {"parsetab.py", "parser.out", "lextab.py"} & set(os.listdir(package))


def test_parser_is_built_once_and_reused():
    assert parser_module._parser() is parser_module._parser()
    assert parse(BICGK, F) == parse(BICGK, F)
    assert parse(BICGK, "other.script").file == "other.script"


# -- scalar expressions -------------------------------------------------------

def shown(node) -> str:
    """A parsed expression with every group in parentheses: its structure, plainly."""
    if isinstance(node, (ast.Name, ast.Number)):
        return node.text
    if isinstance(node, ast.Negation):
        return f"(-{shown(node.operand)})"
    if isinstance(node, ast.Application):
        return f"{node.function.text}({', '.join(shown(a) for a in node.args)})"
    return f"({shown(node.left)} {node.op} {shown(node.right)})"


def right_side(text: str):
    (statement,) = parse(text, F).statements
    assert isinstance(statement, ast.ScalarAssignment)
    return statement.value


def test_expression_tokens():
    assert [t.type for t in tokenize("t = -a + b * c / 2;", F)] == [
        "ID", "EQUALS", "MINUS", "ID", "PLUS", "ID", "TIMES", "ID", "DIVIDE", "NUMBER", "SEMI"]


@pytest.mark.parametrize("text, structure", [
    ("a + b * c", "(a + (b * c))"),
    ("a * b + c", "((a * b) + c)"),
    ("a - b - c", "((a - b) - c)"),
    ("a / b / c", "((a / b) / c)"),
    ("a / b * c", "((a / b) * c)"),
    ("a - b + c", "((a - b) + c)"),
    ("(a + b) * c", "((a + b) * c)"),
    ("a / (b * c)", "(a / (b * c))"),
    ("-a * b", "((-a) * b)"),
    ("-(a * b)", "(-(a * b))"),
    ("a * -b", "(a * (-b))"),
    ("- - a", "(-(-a))"),
    ("a - -2.5", "(a - (-2.5))"),
    ("sqrt(abs(a) + 1)", "sqrt((abs(a) + 1))"),
    ("-(a + 2.5) * abs(b)", "((-(a + 2.5)) * abs(b))"),
    ("((rho))", "rho"),
    ("2", "2"),
])
def test_expression_precedence_and_grouping(text, structure):
    """Unary minus binds tightest, then * and /, then + and -; binary operators group to the left."""
    assert shown(right_side(f"t = {text};")) == structure


def test_expression_nodes_carry_coordinates():
    (statement,) = parse("alpha = rho / sqrt(pq);", F).statements
    assert statement == ast.ScalarAssignment(
        ast.Name("alpha", at(1, 1)),
        ast.BinaryOperation("/", ast.Name("rho", at(1, 9)),
                            ast.Application(ast.Name("sqrt", at(1, 15)), (ast.Name("pq", at(1, 20)),), at(1, 15)),
                            at(1, 13)),
        at(1, 1))
    negation = parse("t = -2;", F).statements[0].value
    assert negation == ast.Negation(ast.Number("2", 2.0, at(1, 6)), at(1, 5))


def test_a_whole_right_side_call_is_a_library_call_unless_sqrt_or_abs():
    call, root, size, nested = parse("y = sscal(-2, x);\nn = sqrt(rr);\nm = abs(a);\nt = 2 * sdot(x, y);",
                                     F).statements
    assert call == ast.Assignment(ast.Name("y", at(1, 1)), ast.Name("sscal", at(1, 5)),
                                  (ast.Number("-2", -2.0, at(1, 11)), ast.Name("x", at(1, 15))), at(1, 1))
    assert isinstance(root, ast.ScalarAssignment) and shown(root.value) == "sqrt(rr)"
    assert isinstance(size, ast.ScalarAssignment) and shown(size.value) == "abs(a)"
    # a library function inside an expression parses; the checker says what is wrong with it
    assert isinstance(nested, ast.ScalarAssignment) and shown(nested.value) == "(2 * sdot(x, y))"


@pytest.mark.parametrize("text, coord", [
    ("q = sgemv(A, -p);", at(1, 14)),
    ("y = sscal(2 * a, x);", at(1, 13)),
    ("y = sscal(sqrt(a), x);", at(1, 11)),
    ("y = sscal(-(-2), x);", at(1, 11)),
    ("y = sscal((a), (x + 1));", at(1, 19)),
])
def test_a_call_argument_is_a_name_or_a_number(text, coord):
    """Calls take names and numbers only: an expression is assigned to a scalar first."""
    error = error_of(text)
    function = text.split("=")[1].split("(")[0].strip()
    assert (error.coord, error.message) == (coord, (
        f"an argument of {function} is a name or a number, not an expression:"
        " assign the expression to a scalar first (e.g. nalpha = -alpha;)"))
    assert error.source_line == text


def test_slash_divides_and_two_slashes_start_a_comment():
    assert shown(right_side("t = a / b; // a / b")) == "(a / b)"
    error = error_of("t = a // b;\n")
    assert (error.coord, error.message) == (
        at(1, 6), "unexpected end of input, expected ';', '(', '+', '-', '*' or '/'")


def test_a_long_script_parses():
    """Lists grew by tuple concatenation, a copy per item, and each token's coordinate
    counted the line breaks before it: 80,000 statements (about a megabyte) took 86 s to
    parse, and 80,000 names in one declaration 30 s. Linear now, a second or two each (no
    timed assertion here: TESTING.md; the suite's --durations shows a regression)."""
    n = 60_000
    script = parse("".join(f"scalar s{i};\n" for i in range(n)), F)
    (declaration,) = parse("vector " + ", ".join(f"v{i}" for i in range(n)) + ";", F).statements
    assert len(script.statements) == n and len(declaration.declarators) == n
    assert script.statements[-1].coord == Coord(F, n, 1)  # found by bisection in the lines' starts
