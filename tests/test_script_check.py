"""Semantic checks of scripts and the DAG they produce (fake library, no GPU)."""

from __future__ import annotations

import pathlib
import warnings

import pytest
from fake_library import fake_library

from fusec.errors import (
    ArityError,
    Coord,
    DivisionByZeroError,
    DuplicateDeclarationError,
    InputAssignmentError,
    KindError,
    NestedCallError,
    ScriptError,
    ScriptLexError,
    ScriptSemanticError,
    ScriptWarning,
    SizeMismatchError,
    UnassignedNameError,
    UndefinedNameError,
    UnknownFunctionError,
)
from fusec.frontend import check, load_script, parse
from fusec.frontend.check import MAX_EXPRESSION_DEPTH
from fusec.ir import expr
from fusec.ir.dag import Call, Constant, Expression, Value
from fusec.library.model import Kind

LIB = fake_library()
F = "scripts/t.script"


def at(line: int, column: int) -> Coord:
    return Coord(F, line, column)


def compile_text(text: str, file: str = F):
    """Check ``text``; any warning fails the test unless the test expects it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return check(parse(text, file), LIB)


def error_of(text: str, kind: type[ScriptSemanticError]) -> ScriptSemanticError:
    with pytest.raises(kind) as info:
        check(parse(text, F), LIB)
    assert type(info.value) is kind
    return info.value


# -- DAGs ---------------------------------------------------------------------

BICGK = """\
# BiCGK: q = A p, s = A^T r
matrix A;
vector p, q, r, s;
input A, p, r;
q = sgemv(A, p);
s = sgemtv(A, r);
return q, s;
"""


def test_bicgk_dag():
    dag = compile_text(BICGK, "scripts/bicgk.script")
    assert (dag.name, dag.file, dag.text) == ("bicgk", "scripts/bicgk.script", BICGK)
    file = "scripts/bicgk.script"
    assert dag.values == (
        Value(0, "A", 1, Kind.MATRIX, ("A.rows", "A.cols"), Coord(file, 4, 7), None),
        Value(1, "p", 1, Kind.VECTOR, ("A.cols",), Coord(file, 4, 10), None),
        Value(2, "r", 1, Kind.VECTOR, ("A.rows",), Coord(file, 4, 13), None),
        Value(3, "q", 1, Kind.VECTOR, ("A.rows",), Coord(file, 5, 1), 0),
        Value(4, "s", 1, Kind.VECTOR, ("A.cols",), Coord(file, 6, 1), 1),
    )
    assert [v.coord for v in dag.values] == [Coord(file, 4, 7), Coord(file, 4, 10),
                                             Coord(file, 4, 13), Coord(file, 5, 1),
                                             Coord(file, 6, 1)]
    assert dag.calls == (Call(0, "sgemv", (0, 1), 3, Coord(file, 5, 1)),
                         Call(1, "sgemtv", (0, 2), 4, Coord(file, 6, 1)))
    assert [(c.coord, c.source_line) for c in dag.calls] == [
        (Coord(file, 5, 1), "q = sgemv(A, p);"), (Coord(file, 6, 1), "s = sgemtv(A, r);")]
    assert dag.inputs == (0, 1, 2) and dag.outputs == (3, 4)
    assert dag.sizes == ("A.rows", "A.cols")
    assert dag.independent(0, 1)


def test_declared_sizes_name_the_dims():
    dag = compile_text("""\
matrix A[m, n];
vector p[n], q[m], r[m], s[n];
input A, p, r;
q = sgemv(A, p);
s = sgemtv(A, r);
return q, s;
""")
    assert [v.dims for v in dag.values] == [("m", "n"), ("n",), ("m",), ("m",), ("n",)]
    assert dag.sizes == ("m", "n")


def test_unified_sizes_take_a_declared_name_wherever_it_appears():
    # Only q and s carry size names; A, p and r get them through the calls,
    # including the call after which p's size is known (sizes are final at the end).
    dag = compile_text("""\
matrix A;
vector p, r;
vector s[cols], q[rows];
input A, p, r;
q = sgemv(A, p);
s = sgemtv(A, r);
return q, s;
""")
    assert [v.dims for v in dag.values] == [
        ("rows", "cols"), ("cols",), ("rows",), ("rows",), ("cols",)]
    assert dag.sizes == ("rows", "cols")


def test_square_matrix_sizes_merge_into_the_first_declared_name():
    dag = compile_text("""\
vector x, y, z;
matrix A;
input A, x;
y = sgemv(A, x);
z = sgemv(A, y);
return z;
""")
    assert dag.values[0].dims == ("x.len", "x.len")  # A: rows = cols = len(x)
    assert {v.dims for v in dag.values[1:]} == {("x.len",)}
    assert dag.sizes == ("x.len",)


def test_sizes_of_unused_declarations_are_left_out():
    with pytest.warns(ScriptWarning):
        dag = check(parse("vector u[k], x[n], y;\ninput x;\ny = sscal(2, x);\n"
                          "return y;\n", F), LIB)
    assert dag.sizes == ("n",)


def test_reassignment_makes_new_versions():
    dag = compile_text("""\
vector x, y;
scalar alpha, d;
input alpha, x;
x = sscal(alpha, x);
x = saxpy(-0.5, x, x);
y = sscal(2e-3, x);
d = sdot(x, y);
return x, d;
""")
    summary = [(v.id, v.label, v.version, v.producer, v.coord) for v in dag.values]
    assert summary == [
        (0, "alpha", 1, None, at(3, 7)), (1, "x", 1, None, at(3, 14)),
        (2, "x#2", 2, 0, at(4, 1)), (3, "x#3", 3, 1, at(5, 1)),
        (4, "y", 1, 2, at(6, 1)), (5, "d", 1, 3, at(7, 1))]
    assert [c.args for c in dag.calls] == [
        (0, 1),
        (Constant(-0.5, "-0.5", at(5, 11)), 2, 2),
        (Constant(0.002, "2e-3", at(6, 11)), 3),
        (3, 4)]
    assert [c.args[0].coord for c in dag.calls[1:3]] == [at(5, 11), at(6, 11)]
    assert [c.result for c in dag.calls] == [2, 3, 4, 5]
    assert dag.inputs == (0, 1) and dag.outputs == (3, 5)
    assert dag.values[5].dims == () and dag.values[5].kind is Kind.SCALAR
    assert dag.sizes == ("x.len",)
    assert dag.describe().splitlines()[1] == f"{F}:5: x#3 = saxpy(-0.5, x#2, x#2)"


def test_literals_mix_with_names_in_parameter_order():
    dag = compile_text("""\
matrix A;
vector y, z, x;
scalar beta;
input beta, A, y, z;
x = sgemtv_ab(beta, A, y, 1.0, z);
return x;
""")
    (call,) = dag.calls
    assert call.args == (0, 1, 2, Constant(1.0, "1.0", at(5, 27)), 3)
    assert dag.value(call.result).dims == ("A.cols",)
    assert dag.values[3].dims == ("A.cols",) and dag.values[2].dims == ("A.rows",)


def test_inputs_statements_may_repeat_and_follow_calls():
    dag = compile_text("""\
vector x, y, z;
scalar a;
input x;
y = sscal(2, x);
input a;
z = sscal(a, y);
return z;
""")
    assert [dag.value(i).name for i in dag.inputs] == ["x", "a"]
    assert dag.inputs == (0, 2)


def test_load_script_reads_a_file_and_names_it_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pathlib.Path("bicgk.script").write_text(BICGK, encoding="utf-8")
    for path in ("bicgk.script", pathlib.Path("bicgk.script"), str(tmp_path / "bicgk.script")):
        dag = load_script(path, LIB)
        assert (dag.name, dag.file) == ("bicgk", str(path))
        assert dag.calls[0].coord == Coord(str(path), 5, 1)


def test_load_script_accepts_a_bom_and_reports_bad_utf8(tmp_path):
    path = tmp_path / "b.script"
    path.write_bytes(b"\xef\xbb\xbf" + BICGK.encode())
    assert load_script(path, LIB).outputs == (3, 4)
    path.write_bytes(b"vector p;\nmatrix \xffA;\n")
    with pytest.raises(ScriptLexError) as info:
        load_script(path, LIB)
    assert info.value.coord == Coord(str(path), 2, 8)
    assert "0xff" in info.value.message


def test_a_missing_script_is_a_script_error_naming_it_and_still_a_file_not_found_error(tmp_path):
    path = tmp_path / "missing.script"
    with pytest.raises(ScriptError) as info:
        load_script(path, LIB)
    assert isinstance(info.value, FileNotFoundError) and info.value.filename == str(path)
    assert str(info.value) == f"{path}: the script does not exist"



def test_a_script_that_cannot_be_read_is_a_script_error_saying_why(tmp_path):
    """Not only a missing file: one open() refuses otherwise (here a name longer than the
    file system takes) is a ScriptError naming it and the reason, not a bare OSError."""
    path = tmp_path / ("x" * 300 + ".script")
    with pytest.raises(ScriptError) as info:
        load_script(path, LIB)
    assert str(info.value).startswith(f"{path}: cannot read the script: ")
    assert "too long" in str(info.value).lower()

# -- errors -------------------------------------------------------------------

HEAD = """\
matrix A[m, n];
vector p[n], q[m], r[m], s[n];
scalar alpha;
input A, p, r, alpha;
"""  # lines 1-4; the statements under test start on line 5


@pytest.mark.parametrize("body, coord, message", [
    ("input B;\n", at(5, 7), "'B' is not declared"),
    ("q = sgemv(A, pp);\n", at(5, 14), "'pp' is not declared; did you mean 'p'?"),
    ("t = sgemv(A, p);\n", at(5, 1), "'t' is not declared"),
    ("q = sgemv(A, p);\nreturn q, zz;\n", at(6, 11), "'zz' is not declared"),
    ("q = sgemv(A, p);\nq = sgemv(A, w);\nvector w[n];\n", at(6, 14),
     "'w' is not declared (it is declared on line 7, after this use)"),
])
def test_undefined_names(body, coord, message):
    error = error_of(HEAD + body, UndefinedNameError)
    assert (error.coord, error.message) == (coord, message)


@pytest.mark.parametrize("body, coord, message", [
    ("vector x, p;\n", at(5, 11), "'p' is already declared on line 2"),
    ("scalar beta, beta;\n", at(5, 14), "'beta' is already declared on line 5"),
    ("matrix alpha;\n", at(5, 8), "'alpha' is already declared on line 3"),
    ("input s;\ninput q, s;\n", at(6, 10), "'s' is already an input (line 5)"),
    ("input r;\n", at(5, 7), "'r' is already an input (line 4)"),
    ("input s, s;\n", at(5, 10), "'s' is already an input (line 5)"),
])
def test_duplicate_declarations_and_inputs(body, coord, message):
    error = error_of(HEAD + body, DuplicateDeclarationError)
    assert (error.coord, error.message) == (coord, message)


def test_unknown_function_with_and_without_suggestion():
    error = error_of(HEAD + "q = sgemvv(A, p);\n", UnknownFunctionError)
    assert error.coord == at(5, 5)
    assert error.message == "unknown function 'sgemvv'; did you mean 'sgemv'?"
    error = error_of(HEAD + "q = zherk(A, p);\n", UnknownFunctionError)
    assert (error.coord, error.message) == (at(5, 5), "unknown function 'zherk'")


@pytest.mark.parametrize("call, given", [
    ("sgemv(A, p, r)", 3), ("sgemv(A)", 1), ("sgemv()", 0)])
def test_arity(call, given):
    error = error_of(HEAD + f"q = {call};\n", ArityError)
    assert error.coord == at(5, 5)
    assert error.message == (f"sgemv takes 2 arguments, {given} given: "
                             "sgemv(A: matrix[m, n], x: vector[n]) -> y: vector[m]")


@pytest.mark.parametrize("body, coord, message", [
    ("q = sgemv(p, p);\n", at(5, 11), "argument 1 of sgemv must be a matrix, but 'p' is a vector"),
    ("q = sgemv(A, alpha);\n", at(5, 14),
     "argument 2 of sgemv must be a vector, but 'alpha' is a scalar"),
    ("q = sgemv(A, 1.5);\n", at(5, 14),
     "argument 2 of sgemv must be a vector, but 1.5 is a number"),
    ("q = sscal(alpha, -2);\n", at(5, 18),
     "argument 2 of sscal must be a vector, but -2 is a number"),
    ("s = sscal(p, p);\n", at(5, 11), "argument 1 of sscal must be a scalar, but 'p' is a vector"),
    ("alpha = sgemv(A, p);\n", at(5, 1), "sgemv returns a vector, but 'alpha' is a scalar"),
    ("A = sdot(p, p);\n", at(5, 1), "sdot returns a scalar, but 'A' is a matrix"),
])
def test_kind_errors(body, coord, message):
    error = error_of(HEAD + body, KindError)
    assert (error.coord, error.message) == (coord, message)


@pytest.mark.parametrize("body, coord, message", [
    ("q = sgemv(A, r);\n", at(5, 14),
     "size mismatch in argument 2 of sgemv: 'r' has length m, but it must have length n"),
    ("s = sgemv(A, p);\n", at(5, 1),
     "size mismatch in the result of sgemv: 's' has length n, but it must have length m"),
    ("s = saxpy(alpha, p, r);\n", at(5, 21),
     "size mismatch in argument 3 of saxpy: 'r' has length m, but it must have length n"),
    ("matrix B[m, k];\ninput B;\nB = sger(alpha, r, p, B);\n", at(7, 23),
     "size mismatch in argument 4 of sger: 'B' has k columns, but it must have n columns"),
    ("matrix B[k, n];\nB = sger(alpha, r, p, A);\n", at(6, 1),
     "size mismatch in the result of sger: 'B' has k rows, but it must have m rows"),
    ("matrix B[n, n];\ninput B;\nq = sgemtv(B, r);\n", at(7, 15),
     "size mismatch in argument 2 of sgemtv: 'r' has length m, but it must have length n"),
])
def test_size_mismatches(body, coord, message):
    error = error_of(HEAD + body, SizeMismatchError)
    assert (error.coord, error.message) == (coord, message)


def test_size_mismatch_found_through_earlier_unification():
    # x and y are unsized, but the first call ties them to n and m.
    error = error_of("""\
matrix A[m, n];
vector x, y;
input A, x;
y = sgemv(A, x);
x = saxpy(1, x, y);
return x;
""", SizeMismatchError)
    assert error.coord == at(5, 17)
    assert error.message == ("size mismatch in argument 3 of saxpy: "
                             "'y' has length m, but it must have length n")


@pytest.mark.parametrize("body, coord, message", [
    ("vector t[n];\nq = sgemv(A, t);\n", at(6, 14), "'t' is used before it is assigned"),
    ("vector t[n];\nt = sscal(alpha, t);\n", at(6, 18), "'t' is used before it is assigned"),
    ("return s;\n", at(5, 8), "'s' is returned but never assigned"),
    ("q = sgemv(A, p);\nreturn q, p;\n", at(6, 11),
     "'p' is an input returned unchanged; only results of calls and expressions can be returned"),
])
def test_unassigned_names(body, coord, message):
    error = error_of(HEAD + body, UnassignedNameError)
    assert (error.coord, error.message) == (coord, message)


@pytest.mark.parametrize("body, coord, message", [
    ("q = sgemv(A, p);\nreturn q, q;\n", at(6, 11), "'q' is returned twice"),
    ("q = sgemv(A, p);\n", at(5, 17), "missing return statement at the end of the script"),
    ("q = sgemv(A, p);\n# done\n\n", at(5, 17),
     "missing return statement at the end of the script"),
    ("q = sgemv(A, p);\nreturn q;\ns = sgemtv(A, r);\n", at(7, 1),
     "statement after the return on line 6; return must be the last statement"),
    ("q = sgemv(A, p);\nreturn q;\nreturn q;\n", at(7, 1),
     "statement after the return on line 6; return must be the last statement"),
    ("q = sgemv(A, p);\nreturn q;\n  vector z;\n", at(7, 3),
     "statement after the return on line 6; return must be the last statement"),
    ("q = sgemv(A, p);\ninput q;\n", at(6, 7),
     "'q' is assigned on line 5, before it is listed as an input"),
])
def test_other_semantic_errors(body, coord, message):
    error = error_of(HEAD + body, ScriptSemanticError)
    assert (error.coord, error.message) == (coord, message)


def test_empty_script_has_no_return():
    error = error_of("", ScriptSemanticError)
    assert error.coord == at(1, 1)


def test_first_error_in_source_order_wins():
    # Line 5 has an unknown function, line 6 an undefined name.
    error_of(HEAD + "q = nope(A, p);\ns = sgemtv(A, zz);\n", UnknownFunctionError)


def test_rendered_semantic_error():
    error = error_of(HEAD + "q = sgemv(p, p);\n", KindError)
    assert str(error) == (
        f"{F}:5:11: argument 1 of sgemv must be a matrix, but 'p' is a vector\n"
        "    q = sgemv(p, p);\n"
        "              ^")
    assert error.source_line == "q = sgemv(p, p);"


# -- warnings -----------------------------------------------------------------

def messages(record) -> list[tuple[Coord, str]]:
    return [(w.message.coord, w.message.message) for w in record
            if isinstance(w.message, ScriptWarning)]


def test_dead_code_is_left_out_with_its_lines_named():
    """A chain no returned value needs: the checker names its last value as unused
    (nothing reads it) and the statements that only feed it as left out."""
    text = """\
vector w, y, a, b, x;
scalar alpha;
input w, y, alpha;
a = saxpy(alpha, w, y);
b = saxpy(alpha, a, y);
x = saxpy(alpha, w, y);
return x;
"""
    with pytest.warns(ScriptWarning) as record:
        dag = check(parse(text, F), LIB)
    assert [dag.value(c.result).name for c in dag.calls] == ["x"]
    assert [v.name for v in dag.values] == ["w", "y", "alpha", "x"] and dag.outputs == (3,)
    assert messages(record) == [
        (at(5, 1), "'b' is assigned but never used"),
        (at(4, 1), "2 statements that no returned value depends on (lines 4, 5) left out"),
    ]


def test_clean_script_warns_nothing():
    compile_text(BICGK)  # warnings are errors in compile_text


def test_unused_input_declaration_and_value_warn():
    text = """\
matrix A;
vector p, q, r, s, t;
scalar beta;
input A, p, r;
q = sgemv(A, p);
s = sgemtv(A, q);
s = sgemtv(A, q);
return q;
"""
    with pytest.warns(ScriptWarning) as record:
        dag = check(parse(text, F), LIB)
    assert len(dag.calls) == 1  # the two that compute s are dead code, left out
    assert messages(record) == [
        (at(2, 20), "'t' is declared but never used"),
        (at(3, 8), "'beta' is declared but never used"),
        (at(4, 13), "input 'r' is never used"),
        (at(6, 1), "'s' is assigned here but reassigned before it is used"),
        (at(7, 1), "'s' is assigned but never used"),
        (at(6, 1), "2 statements that no returned value depends on (lines 6, 7) left out"),
    ]
    warning = record[0].message
    assert str(warning).startswith(f"{F}:2:20: 't' is declared but never used\n")
    assert warning.source_line == "vector p, q, r, s, t;"


def test_overwritten_input_warns():
    text = "matrix A;\nvector p, q;\ninput A, p, q;\nq = sgemv(A, p);\nreturn q;\n"
    with pytest.warns(ScriptWarning) as record:
        check(parse(text, F), LIB)
    assert messages(record) == [(at(3, 13), "input 'q' is never used")]


def test_no_warnings_when_the_check_fails():
    text = "vector unused, p;\ninput p;\nreturn p;\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnassignedNameError):
            check(parse(text, F), LIB)


# -- scalar expressions -------------------------------------------------------

SCALARS = """\
vector x[n], y[n], z[n];
scalar a, rho, pq, alpha, beta, t;
input x, y, a;
rho = sdot(x, y);
"""  # lines 1-4; the statements under test start on line 5


def quietly(text: str):
    """Check ``text``, ignoring the warnings about names SCALARS declares and a test leaves unused."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ScriptWarning)
        return check(parse(text, F), LIB)


def test_expression_dag():
    dag = quietly(SCALARS + "pq = sdot(x, x);\nalpha = -(rho + 2.5) / abs(pq);\n"
                                 "z = saxpy(alpha, x, y);\nreturn z, alpha;\n")
    x, y, a, rho, pq, alpha, z = range(7)
    assert dag.value(alpha) == Value(alpha, "alpha", 1, Kind.SCALAR, (), at(6, 1), None)
    assert dag.expressions == (Expression(alpha, expr.Binary(
        "/", expr.Negate(expr.Binary("+", expr.Ref(rho, at(6, 11)), Constant(2.5, "2.5", at(6, 17)), at(6, 15)),
                         at(6, 9)),
        expr.Apply("abs", expr.Ref(pq, at(6, 28)), at(6, 24)), at(6, 22)), at(6, 1)),)
    assert dag.expressions[0].source_line == "alpha = -(rho + 2.5) / abs(pq);"
    assert dag.expression(alpha) is dag.expressions[0] and dag.expression(rho) is None
    assert dag.expression_text(alpha) == "-(rho + 2.5) / abs(pq)"
    assert dag.calls[2] == Call(2, "saxpy", (alpha, x, y), z, at(7, 1))
    assert [dag.is_input(v) for v in range(7)] == [True, True, True, False, False, False, False]
    # calls that read an expression depend on what it reads
    assert dag.leaves(alpha) == (rho, pq) and dag.leaves(x) == (x,)
    assert dag.reads(2) == (rho, pq, x, y)
    assert dag.predecessors(2) == (0, 1) and dag.reaches(0, 2) and dag.reaches(1, 2)
    assert dag.consumers(rho) == (2,) and dag.consumers(alpha) == ()
    assert dag.outputs == (z, alpha)
    assert dag.describe().split("\n")[2:] == [f"{F}:6: alpha = -(rho + 2.5) / abs(pq)",
                                              f"{F}:7: z = saxpy(alpha, x, y)"]


def test_expressions_read_expressions_and_a_scalar_may_be_reassigned():
    dag = quietly(SCALARS + "alpha = rho * 2;\nalpha = alpha - a;\nbeta = alpha / rho;\n"
                                 "z = sscal(beta, x);\nreturn z;\n")
    first, second, beta = (e.value for e in dag.expressions)
    assert [dag.value(v).label for v in (first, second, beta)] == ["alpha", "alpha#2", "beta"]
    assert expr.refs(dag.expression(second).tree) == (first, 2)  # alpha#2 reads alpha, then a
    assert dag.leaves(beta) == (3, 2)  # rho, a: through alpha#2 and alpha
    assert dag.needed_expressions([beta]) == (first, second, beta)
    assert dag.needed_expressions([3, 0]) == ()


def test_a_returned_expression_may_read_inputs_only_beside_calls():
    dag = quietly(SCALARS + "t = sqrt(a * a + 1);\nreturn rho, t;\n")
    assert dag.leaves(dag.outputs[1]) == (2,)


@pytest.mark.parametrize("body, kind, coord, message", [
    ("t = x + 1;\n", KindError, at(5, 5), "'x' is a vector, but an expression takes scalars and numbers"),
    ("z = rho * 2;\n", KindError, at(5, 1),
     "'z' is a vector, but an expression makes a scalar (a vector or matrix is the result of a call)"),
    ("t = rho / 0;\n", DivisionByZeroError, at(5, 9), "division by zero: the divisor 0 is a constant 0"),
    ("t = 1 + rho / (2 - 2.0) * a;\n", DivisionByZeroError, at(5, 13),
     "division by zero: the divisor 2 - 2.0 is a constant 0"),
    ("t = rho / -0.0;\n", DivisionByZeroError, at(5, 9), "division by zero: the divisor -0.0 is a constant 0"),
    ("t = rho + w;\n", UndefinedNameError, at(5, 11), "'w' is not declared"),
    ("t = rhoo;\n", UndefinedNameError, at(5, 5), "'rhoo' is not declared; did you mean 'rho'?"),
    ("w = rho;\n", UndefinedNameError, at(5, 1), "'w' is not declared"),
    ("t = 1 + exp(rho);\n", UnknownFunctionError, at(5, 9),
     "unknown function 'exp' in an expression (its functions are sqrt and abs)"),
    ("t = exp(rho);\n", UnknownFunctionError, at(5, 5), "unknown function 'exp'"),  # a call of the library
    ("t = 2 * sqr(rho);\n", UnknownFunctionError, at(5, 9),
     "unknown function 'sqr' in an expression (its functions are sqrt and abs); did you mean 'sqrt'?"),
    ("t = sqr(rho);\n", UnknownFunctionError, at(5, 5), "unknown function 'sqr'; did you mean 'sqrt'?"),
    ("t = 2 * sdot(x, y);\n", NestedCallError, at(5, 9),
     "sdot is a library function: call it in an assignment of its own (t = sdot(...);) and use t here"),
    ("t = sqrt(rho, a);\n", ArityError, at(5, 5), "sqrt takes 1 argument, 2 given"),
    ("t = abs();\n", ArityError, at(5, 5), "abs takes 1 argument, 0 given"),
    ("t = pq * 2;\n", UnassignedNameError, at(5, 5), "'pq' is used before it is assigned"),
    ("t = t + 1;\n", UnassignedNameError, at(5, 5), "'t' is used before it is assigned"),
    ("a = rho * 2;\n", InputAssignmentError, at(5, 1),
     "'a' is an input: an expression cannot assign it (an input's name keeps the caller's value;"
     " declare another scalar)"),
])
def test_expression_errors(body, kind, coord, message):
    error = error_of(SCALARS + body + "return rho;\n", kind)
    assert (error.coord, error.message) == (coord, message)
    assert error.source_line == body.rstrip("\n")


DEEP = MAX_EXPRESSION_DEPTH


@pytest.mark.parametrize("body, column", [
    ("t = rho" + " + a" * DEEP + ";\n", 5),  # the tree is deepest at its first operand
    ("t = rho" + " * (a" * DEEP + ")" * DEEP + ";\n", 7 + 5 * (DEEP - 1)),  # the innermost a * a's left a
    ("t = " + "-" * DEEP + "rho;\n", 5 + DEEP),
    ("t = " + "sqrt(" * DEEP + "rho" + ")" * DEEP + ";\n", 5 + 5 * DEEP),
])
def test_an_expression_nested_too_deep_is_an_error_at_the_level_past_the_limit(body, column):
    error = error_of(SCALARS + body + "return t;\n", ScriptSemanticError)  # not a RecursionError
    assert error.coord == at(5, column)
    assert error.message.startswith(f"expression nested more than {DEEP} levels deep")


def test_an_expression_nested_as_deep_as_the_limit_is_checked():
    dag = quietly(SCALARS + "t = rho" + " + a" * (DEEP - 1) + ";\nreturn t;\n")
    assert len(dag.expressions) == 1


def test_expression_error_renders_with_a_caret_under_the_operator():
    error = error_of(SCALARS + "t = rho / (1 - 1);\nreturn t;\n", DivisionByZeroError)
    assert str(error) == (f"{F}:5:9: division by zero: the divisor 1 - 1 is a constant 0\n"
                          "    t = rho / (1 - 1);\n"
                          "            ^")


def test_the_caret_under_a_line_indented_with_tabs_keeps_its_tabs():
    error = error_of(SCALARS + "\tt = rho / 0;\nreturn t;\n", DivisionByZeroError)
    assert error.coord == at(5, 10)  # a tab is one column
    assert str(error).splitlines()[1:] == ["    \tt = rho / 0;", "    \t        ^"]  # aligned as a terminal shows it



def test_a_control_character_in_a_shown_line_is_escaped_and_the_caret_stays_under_the_token():
    """A NUL or an escape code in a bad script reaches the terminal escaped (``\\x00``), and
    the caret moves past what the escape adds."""
    error = ScriptLexError("illegal character '@'", Coord("t.script", 1, 11), "\x1b[2J\x00 q = @;")
    line, caret = str(error).splitlines()[1:]
    assert line == "    \\x1b[2J\\x00 q = @;"
    assert caret.index("^") == line.index("@")

def test_the_target_is_checked_before_the_expression():
    error = error_of(SCALARS + "z = w * 2;\nreturn z;\n", KindError)
    assert error.coord == at(5, 1)


def test_a_script_must_call_the_library():
    text = "scalar a, t;\ninput a;\nt = a * 2;\nreturn t;\n"
    error = error_of(text, ScriptSemanticError)
    assert (error.coord, error.message) == (at(4, 1), (
        "no returned value depends on a call of the library: a script computes with calls"
        " (scalar expressions of inputs alone are the caller's to compute)"))


def test_unused_and_dead_expressions_warn():
    text = SCALARS + "alpha = rho * 2;\nbeta = alpha + 1;\nt = beta * a;\nreturn rho;\n"
    with pytest.warns(ScriptWarning) as record:
        dag = check(parse(text, F), LIB)
    assert dag.expressions == () and [v.name for v in dag.values] == ["x", "y", "a", "rho"]
    assert [m for m in messages(record) if m[0].line >= 5] == [
        (at(7, 1), "'t' is assigned but never used"),
        (at(5, 1), "3 statements that no returned value depends on (lines 5, 6, 7) left out"),
    ]


def test_dead_code_left_out_renumbers_expressions():
    text = SCALARS + "z = sscal(a, y);\nalpha = rho / a;\nz = sscal(alpha, x);\nreturn z, alpha;\n"
    with pytest.warns(ScriptWarning):
        dag = check(parse(text, F), LIB)
    assert [v.label for v in dag.values] == ["x", "y", "a", "rho", "alpha", "z#2"]
    (alpha,) = dag.expressions
    assert alpha.value == 4 and expr.refs(alpha.tree) == (3, 2)
    assert dag.outputs == (5, 4) and dag.calls[1].args == (4, 0)


def test_a_long_script_checks():
    """Every call and expression quotes its source line, and Script.line split the whole
    text for each: 40,000 expressions took 72 s to check. Now the text is split once (no
    timed assertion here: TESTING.md; the suite's --durations shows a regression)."""
    n = 20_000
    text = ("vector x[n], y[n];\nscalar " + ", ".join(f"s{i}" for i in range(n)) + ";\ninput x, s0;\n"
            + "".join(f"s{i} = s{i - 1} * 2;\n" for i in range(1, n)) + f"y = sscal(s{n - 1}, x);\nreturn y;\n")
    script = parse(text, F)
    dag = compile_text(text)
    assert len(dag.expressions) == n - 1 and script.line(n + 2) == f"s{n - 1} = s{n - 2} * 2;"
    assert script.lines is script.lines  # split once, then kept


def test_a_script_with_an_error_warns_of_nothing():
    """Warnings come only from a script that compiles: one whose only fault is found after
    the statements (no returned value depends on a call) has unused names, and says nothing
    of them, just its error."""
    text = "scalar a, b, c, d;\ninput a, c;\nb = a * 2;\nreturn b;\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        error = error_of(text, ScriptSemanticError)
    assert error.coord == at(4, 1) and "no returned value depends on a call" in error.message
    assert caught == []
