"""Semantic checks of a parsed script, and the DAG they produce.

One pass over the statements in source order, so the first error reported is
the first one in the text. Each name gets a new :class:`~fusec.ir.dag.Value` at
every input or assignment (versions 1, 2, ...); a read sees the newest one. An
assignment of a scalar expression makes a value and an
:class:`~fusec.ir.expr.Expression` whose tree refers to the values it read.

Sizes are unified with union-find: a declared size symbol (``m`` in
``vector q[m]``) is one fixed node wherever it appears, a size left out
(``matrix A;``) is a node of its own, and every call gets fresh copies of the
function's dimension variables. Unifying two different declared symbols is a
:class:`~fusec.errors.SizeMismatchError`. Symbols are named once everything is
unified, so a value's dims are final even if a later call pins them.

Warnings (:class:`~fusec.errors.ScriptWarning`) are issued only once the
whole script has checked clean, sorted by position.
"""

from __future__ import annotations

import dataclasses
import pathlib
import warnings
from typing import Mapping, Protocol

from ..errors import (
    ArityError,
    Coord,
    DivisionByZeroError,
    DuplicateDeclarationError,
    InputAssignmentError,
    KindError,
    NestedCallError,
    ScriptSemanticError,
    ScriptWarning,
    SizeMismatchError,
    TriangleError,
    UnassignedNameError,
    UndefinedNameError,
    UnknownFunctionError,
)
from ..ir import expr
from ..ir.dag import Argument, Call, Constant, Dag, Expression, Value, without_dead_calls
from ..ir.sizes import Sizes, size_phrase
from ..library.composite import is_name, makes_one_triangle, reads_one_triangle, triangle_mismatch
from ..library.model import TRIANGLES, Composite, Function, Kind, Param, Signed
from ..validate import did_you_mean
from . import ast

MAX_WARNINGS = 20  # warnings shown for one script; the rest are counted
# Levels of a scalar expression's tree (a name or number is one level, each operator or
# function one more). The checks below and every later stage walk the tree recursively
# (expr.constants two frames a level): called from the top level, fusec.compile reached
# Python's limit of 1000 frames at 500 levels, and a deeper caller leaves it fewer.
MAX_EXPRESSION_DEPTH = 200


class LibraryLike(Protocol):
    functions: Mapping[str, Function]
    composites: Mapping[str, Composite]


@dataclasses.dataclass
class _Declared:
    kind: Kind
    dims: tuple[int, ...]  # size nodes
    coord: Coord
    used: bool = False


@dataclasses.dataclass
class _Pending:
    """A value before its sizes are final."""

    name: str
    version: int
    kind: Kind
    dims: tuple[int, ...]
    coord: Coord
    producer: int | None
    read: bool = False
    returned: bool = False
    expression: bool = False  # made by a scalar expression (producer None)




class _Checker:
    def __init__(self, script: ast.Script, library: LibraryLike):
        self.script = script
        self.functions = library.functions
        self.composites = library.composites
        self.sizes = Sizes()
        self.declared: dict[str, _Declared] = {}
        self.declared_on: dict[str, int] = {}  # first declaration line, for hints
        for statement in script.statements:
            if isinstance(statement, ast.Declaration):
                for d in statement.declarators:
                    self.declared_on.setdefault(d.name.text, d.coord.line)
        self.inputs: dict[str, Coord] = {}
        self.values: list[_Pending] = []
        self.current: dict[str, int] = {}  # name -> newest value id
        self.calls: list[Call] = []
        self.expressions: list[Expression] = []
        self.input_ids: list[int] = []
        self.output_ids: list[int] = []
        self.returned: ast.Return | None = None

    def fail(self, error: type[ScriptSemanticError], message: str, coord: Coord):
        raise error(message, coord, self.script.line(coord.line))

    # -- statements -----------------------------------------------------------

    def run(self) -> Dag:
        handlers = {ast.Declaration: self.declaration, ast.Input: self.input,
                    ast.Assignment: self.assignment, ast.ScalarAssignment: self.scalar_assignment,
                    ast.Return: self.return_}
        for statement in self.script.statements:
            if self.returned is not None:
                self.fail(ScriptSemanticError,
                          f"statement after the return on line {self.returned.coord.line}; "
                          "return must be the last statement", statement.coord)
            handlers[type(statement)](statement)
        if self.returned is None:
            self.fail(ScriptSemanticError, "missing return statement at the end of the script",
                      self.script.end)
        dag, dead = without_dead_calls(self.dag())
        if not dag.calls:  # scalars of inputs only: nothing for a GPU kernel to stream
            self.fail(ScriptSemanticError, "no returned value depends on a call of the library: a script"
                      " computes with calls (scalar expressions of inputs alone are the caller's to compute)",
                      self.returned.coord)
        self.warn_unused()  # only once the script has no error: a failing script warns of nothing
        if dead:  # the lines whose result is never read were named above; these are all left out
            # (the calls a composite expands to are one statement, at the script's call)
            statements = list(dict.fromkeys(c.coord for c in dead))
            lines = ", ".join(str(coord.line) for coord in statements)
            many = len(statements) > 1
            warnings.warn(ScriptWarning(f"{len(statements)} statement{'s' if many else ''} that no returned value"
                                        f" depends on (line{'s' if many else ''} {lines}) left out",
                                        dead[0].coord, self.script.line(dead[0].coord.line)), stacklevel=3)
        return dag

    def declaration(self, statement: ast.Declaration) -> None:
        for d in statement.declarators:
            name = d.name.text
            if name in self.declared:
                self.fail(DuplicateDeclarationError,
                          f"'{name}' is already declared on line {self.declared[name].coord.line}",
                          d.coord)
            if statement.kind is Kind.SCALAR:
                dims = ()
            elif d.dims is None:
                labels = (f"{name}.rows", f"{name}.cols") if statement.kind is Kind.MATRIX \
                    else (f"{name}.len",)
                dims = tuple(self.sizes.anonymous(label) for label in labels)
            else:
                dims = tuple(self.sizes.symbol(size.text) for size in d.dims)
            self.declared[name] = _Declared(statement.kind, dims, d.coord)

    def input(self, statement: ast.Input) -> None:
        for name in statement.names:
            declared = self.lookup(name)
            if name.text in self.inputs:
                self.fail(DuplicateDeclarationError,
                          f"'{name.text}' is already an input (line {self.inputs[name.text].line})",
                          name.coord)
            if name.text in self.current:
                line = self.values[self.current[name.text]].coord.line
                self.fail(ScriptSemanticError,
                          f"'{name.text}' is assigned on line {line}, "
                          "before it is listed as an input",
                          name.coord)
            self.inputs[name.text] = name.coord
            self.input_ids.append(self.new_value(name, declared, producer=None))

    def assignment(self, statement: ast.Assignment) -> None:
        target = self.lookup(statement.target)
        function = self.function(statement)
        fresh = {var: self.sizes.variable(f"{function.name}.{var}")
                 for p in function.params + (function.result,) for var in p.dims}
        args = tuple(self.argument(function, index, param, arg, fresh)
                     for index, (param, arg)
                     in enumerate(zip(function.params, statement.args), start=1))
        for index, (param, arg) in enumerate(zip(function.params, statement.args), start=1):
            if param.name in function.square:
                self.square(function, index, param, arg, fresh)
        result = function.result
        if target.kind is not result.kind:
            self.fail(KindError, f"{function.name} returns a {result.kind}, "
                      f"but '{statement.target.text}' is a {target.kind}", statement.target.coord)
        self.unify(f"the result of {function.name}", result, fresh, target, statement.target)

        def make(producer: int) -> int:
            return self.new_value(statement.target, target, producer=producer)
        if isinstance(function, Composite):
            self.expand(function, args, statement, (function.name,), make)
        else:
            self.calls.append(Call(len(self.calls), function.name, args, make(len(self.calls)), statement.coord,
                                   self.script.line(statement.coord.line)))

    def expand(self, composite: Composite, args: tuple[Argument, ...], statement: ast.Assignment,
               via: tuple[str, ...], make) -> int:
        """The calls of ``composite`` (called with ``args``, checked against its signature) in
        place of the call ``statement``; ``make(producer)`` makes its result's value, and each
        other call's a value of its own, named ``COMPOSITE_TARGET`` (fresh against every name
        the script declares). The library checked the body (:mod:`fusec.library.composite`),
        so its sizes unify; they are unified here to size the values it makes."""
        local: dict[str, Argument] = {p.name: arg for p, arg in zip(composite.params, args)}
        for body in composite.calls:
            callee = self.functions.get(body.function) or self.composites[body.function]
            inner = tuple(local[a] if is_name(a) else Constant(float(a), a, statement.coord) for a in body.args)
            fresh = {var: self.sizes.variable(f"{callee.name}.{var}")
                     for p in callee.params + (callee.result,) for var in p.dims}
            for param, arg in zip(callee.params, inner):
                if isinstance(arg, int):
                    self.values[arg].read = True
                    for var, node in zip(param.dims, self.values[arg].dims):
                        self.sizes.unify(fresh[var], node)
                if param.name in callee.square:
                    self.sizes.unify(*(fresh[var] for var in param.dims))
            if body.target == composite.result.name:
                made = make
            else:
                dims = tuple(fresh[var] for var in callee.result.dims)

                def made(producer: int, name=f"{composite.name}_{body.target}", kind=callee.result.kind,
                         dims=dims) -> int:
                    return self.intermediate(name, kind, dims, statement.coord, producer)
            if isinstance(callee, Composite):
                local[body.target] = self.expand(callee, inner, statement, via + (callee.name,), made)
            else:
                call_id = len(self.calls)
                local[body.target] = made(call_id)
                self.calls.append(Call(call_id, callee.name, inner, local[body.target], statement.coord,
                                       self.script.line(statement.coord.line), via))
        return local[composite.result.name]

    def intermediate(self, name: str, kind: Kind, dims: tuple[int, ...], coord: Coord, producer: int) -> int:
        """A value an expansion makes and reads: ``name``, or ``name_`` ... where the script
        declares that name, so it never reads as (or is reassigned like) the user's."""
        while name in self.declared_on:
            name += "_"
        return self.push(name, kind, dims, coord, producer)

    def scalar_assignment(self, statement: ast.ScalarAssignment) -> None:
        """``t = <expression>;``: the target, then the expression from left to right."""
        name = statement.target
        target = self.lookup(name)
        if target.kind is not Kind.SCALAR:
            self.fail(KindError, f"'{name.text}' is a {target.kind}, but an expression makes a scalar"
                      " (a vector or matrix is the result of a call)", name.coord)
        if name.text in self.inputs:
            self.fail(InputAssignmentError, f"'{name.text}' is an input: an expression cannot assign it"
                      " (an input's name keeps the caller's value; declare another scalar)", name.coord)
        self.shallow(statement.value)
        tree = self.expression(statement.value)
        value_id = self.new_value(name, target, producer=None)
        self.values[value_id].expression = True
        self.expressions.append(Expression(value_id, tree, statement.coord, self.script.line(statement.coord.line)))

    def shallow(self, root: ast.Expression) -> None:
        """Fail at the first node of ``root`` deeper than MAX_EXPRESSION_DEPTH, walking
        without recursion (the checks below recurse)."""
        stack = [(root, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_EXPRESSION_DEPTH:
                self.fail(ScriptSemanticError, f"expression nested more than {MAX_EXPRESSION_DEPTH} levels deep:"
                          " split it into assignments of its own (t1 = ...; t = t1 + ...;)", node.coord)
            if isinstance(node, ast.Negation):
                stack.append((node.operand, depth + 1))
            elif isinstance(node, ast.BinaryOperation):
                stack += [(node.right, depth + 1), (node.left, depth + 1)]
            elif isinstance(node, ast.Application):
                stack += [(arg, depth + 1) for arg in reversed(node.args)]

    def expression(self, node: ast.Expression) -> expr.Expr:
        """The DAG's tree of a scalar expression, checked: scalars that hold a value,
        sqrt and abs of one argument, no division by a constant zero."""
        if isinstance(node, ast.Number):
            return Constant(node.value, node.text, node.coord)
        if isinstance(node, ast.Name):
            declared = self.lookup(node)
            if declared.kind is not Kind.SCALAR:
                self.fail(KindError, f"'{node.text}' is a {declared.kind}, but an expression"
                          " takes scalars and numbers", node.coord)
            if node.text not in self.current:
                self.fail(UnassignedNameError, f"'{node.text}' is used before it is assigned", node.coord)
            value_id = self.current[node.text]
            self.values[value_id].read = True
            return expr.Ref(value_id, node.coord)
        if isinstance(node, ast.Negation):
            return expr.Negate(self.expression(node.operand), node.coord)
        if isinstance(node, ast.BinaryOperation):
            left, right = self.expression(node.left), self.expression(node.right)
            if node.op == "/" and expr.folded(right) == 0:
                self.fail(DivisionByZeroError, f"division by zero: the divisor"
                          f" {expr.text(right, lambda v: self.values[v].name)} is a constant 0", node.coord)
            return expr.Binary(node.op, left, right, node.coord)
        function = node.function
        if function.text not in expr.FUNCTIONS:
            if function.text in self.functions or function.text in self.composites:
                self.fail(NestedCallError, f"{function.text} is a library function: call it in an assignment"
                          f" of its own (t = {function.text}(...);) and use t here", function.coord)
            self.fail(UnknownFunctionError, f"unknown function '{function.text}' in an expression (its"
                      f" functions are {' and '.join(expr.FUNCTIONS)}){did_you_mean(function.text, expr.FUNCTIONS)}",
                      function.coord)
        if len(node.args) != 1:
            self.fail(ArityError, f"{function.text} takes 1 argument, {len(node.args)} given", function.coord)
        return expr.Apply(function.text, self.expression(node.args[0]), function.coord)

    def return_(self, statement: ast.Return) -> None:
        self.returned = statement
        seen: set[str] = set()
        for name in statement.names:
            self.lookup(name)
            if name.text in seen:
                self.fail(ScriptSemanticError, f"'{name.text}' is returned twice", name.coord)
            seen.add(name.text)
            if name.text not in self.current:
                self.fail(UnassignedNameError,
                          f"'{name.text}' is returned but never assigned", name.coord)
            value = self.values[self.current[name.text]]
            if value.producer is None and not value.expression:
                self.fail(UnassignedNameError,
                          f"'{name.text}' is an input returned unchanged; "
                          "only results of calls and expressions can be returned", name.coord)
            value.returned = True
            self.output_ids.append(self.current[name.text])

    # -- pieces ---------------------------------------------------------------

    def lookup(self, name: ast.Name) -> _Declared:
        """The declaration of ``name``, marked used; UndefinedNameError if none."""
        declared = self.declared.get(name.text)
        if declared is None:
            later = self.declared_on.get(name.text)
            hint = (f" (it is declared on line {later}, after this use)" if later
                    else did_you_mean(name.text, self.declared))
            self.fail(UndefinedNameError, f"'{name.text}' is not declared{hint}", name.coord)
        declared.used = True
        return declared

    def function(self, statement: ast.Assignment) -> Signed:
        """The function or composite the statement calls, given as many arguments as it takes."""
        name = statement.function
        function = self.functions.get(name.text) or self.composites.get(name.text)
        if function is None:
            known = [*self.functions, *self.composites, *expr.FUNCTIONS]
            self.fail(UnknownFunctionError, f"unknown function '{name.text}'{did_you_mean(name.text, known)}",
                      name.coord)
        wanted, given = len(function.params), len(statement.args)
        if wanted != given:
            plural = "s" if wanted != 1 else ""
            self.fail(ArityError, f"{name.text} takes {wanted} argument{plural}, {given} given: "
                      f"{function.signature()}", name.coord)
        return function

    def argument(self, function: Signed, index: int, param: Param,
                 arg: ast.Argument, fresh: dict[str, int]) -> Argument:
        where = f"argument {index} of {function.name}"
        if isinstance(arg, ast.Number):
            if param.kind is not Kind.SCALAR:
                self.fail(KindError, f"{where} must be a {param.kind}, "
                          f"but {arg.text} is a number", arg.coord)
            return Constant(arg.value, arg.text, arg.coord)
        declared = self.lookup(arg)
        if declared.kind is not param.kind:
            self.fail(KindError, f"{where} must be a {param.kind}, "
                      f"but '{arg.text}' is a {declared.kind}", arg.coord)
        if arg.text not in self.current:
            self.fail(UnassignedNameError, f"'{arg.text}' is used before it is assigned",
                      arg.coord)
        self.unify(where, param, fresh, declared, arg)
        value_id = self.current[arg.text]
        self.values[value_id].read = True
        self.triangle(function, where, param, arg, value_id)
        return value_id

    def triangle(self, function: Signed, where: str, param: Param, arg: ast.Name, value_id: int) -> None:
        """A value of one stored triangle (made by a function that says ``stored B triu`` or
        ``stored B tril``) goes only where the callee reads that same triangle alone: outside
        it the value holds whatever its array held, never what the script computed."""
        producer = self.values[value_id].producer
        if producer is None:
            return
        call = self.calls[producer]
        maker = self.functions[call.function]
        made = makes_one_triangle(maker, self.functions, self.composites)
        read = reads_one_triangle(function, param.name, self.functions, self.composites)
        if made is None or read == made:
            return
        readers = sorted(name for name, f in {**self.functions, **self.composites}.items()
                         if any(reads_one_triangle(f, p.name, self.functions, self.composites) == made
                                for p in f.params if p.kind is Kind.MATRIX))
        problem = triangle_mismatch(made, read, where, arg.text)
        outside = "below" if made == "triu" else "above"
        self.fail(TriangleError, f"{problem} ({maker.name} on line {call.coord.line} stores no more); {outside} the"
                  f" diagonal it holds whatever its array held. Functions that read one stored"
                  f" {TRIANGLES[made]} triangle: {', '.join(readers)}", arg.coord)

    def square(self, function: Signed, index: int, param: Param, arg: ast.Name,
               fresh: dict[str, int]) -> None:
        """A matrix the function needs square (``square A``): its two sizes are one."""
        rows, cols = (fresh[var] for var in param.dims)
        if self.sizes.unify(rows, cols) is not None:
            have = [self.sizes.name(rows), self.sizes.name(cols)]
            self.fail(SizeMismatchError,
                      f"argument {index} of {function.name} must be a square matrix, but '{arg.text}' is"
                      f" [{', '.join(have)}]: declare it with one size for both (matrix {arg.text}[{have[0]},"
                      f" {have[0]}])", arg.coord)

    def unify(self, where: str, param: Param, fresh: dict[str, int],
              declared: _Declared, name: ast.Name) -> None:
        for axis, (var, node) in enumerate(zip(param.dims, declared.dims)):
            conflict = self.sizes.unify(fresh[var], node)
            if conflict is not None:
                want, have = conflict
                self.fail(SizeMismatchError,
                          f"size mismatch in {where}: '{name.text}' has "
                          f"{size_phrase(declared.kind, axis, have)}, but it must have "
                          f"{size_phrase(declared.kind, axis, want)}", name.coord)

    def new_value(self, name: ast.Name, declared: _Declared, producer: int | None) -> int:
        return self.push(name.text, declared.kind, declared.dims, name.coord, producer)

    def push(self, name: str, kind: Kind, dims: tuple[int, ...], coord: Coord, producer: int | None) -> int:
        """A new version of the value ``name``, current from here on."""
        previous = self.current.get(name)
        version = 1 if previous is None else self.values[previous].version + 1
        self.values.append(_Pending(name, version, kind, dims, coord, producer))
        self.current[name] = len(self.values) - 1
        return len(self.values) - 1

    # -- results --------------------------------------------------------------

    def warn_unused(self) -> None:
        found: list[tuple[Coord, str]] = []
        for value_id, value in enumerate(self.values):
            if value.read or value.returned:
                continue
            if value.producer is None and not value.expression:
                found.append((value.coord, f"input '{value.name}' is never used"))
            elif self.current[value.name] != value_id:
                found.append((value.coord,
                              f"'{value.name}' is assigned here but reassigned before it is used"))
            else:
                found.append((value.coord, f"'{value.name}' is assigned but never used"))
        for name, declared in self.declared.items():
            if not declared.used:
                found.append((declared.coord, f"'{name}' is declared but never used"))
        shown_lines: set[int] = set()
        found.sort()
        for coord, message in found[:MAX_WARNINGS]:
            # the source line once per line: 2,000 names declared on one line are not
            # 2,000 copies of it
            line = None if coord.line in shown_lines else self.script.line(coord.line)
            shown_lines.add(coord.line)
            warnings.warn(ScriptWarning(message, coord, line), stacklevel=4)
        if len(found) > MAX_WARNINGS:
            warnings.warn(ScriptWarning(f"{len(found) - MAX_WARNINGS} more warning(s) like these not shown"
                                        f" (unused names; the first {MAX_WARNINGS} are above)"),
                          stacklevel=4)

    def dag(self) -> Dag:
        values = tuple(
            Value(value_id, v.name, v.version, v.kind,
                  tuple(self.sizes.name(node) for node in v.dims), v.coord, v.producer)
            for value_id, v in enumerate(self.values))
        used = {size for v in values for size in v.dims}
        sizes = [size for size in self.sizes.declared_order() if size in used]
        sizes += [size for v in values for size in v.dims if size not in sizes]
        return Dag(name=pathlib.PurePath(self.script.file).stem, file=self.script.file,
                   text=self.script.text, values=values, calls=tuple(self.calls),
                   expressions=tuple(self.expressions),
                   inputs=tuple(self.input_ids), outputs=tuple(self.output_ids),
                   sizes=tuple(dict.fromkeys(sizes)))


def check(script: ast.Script, library: LibraryLike) -> Dag:
    """Check ``script`` against ``library`` and build its DAG.

    Raises a :class:`~fusec.errors.ScriptSemanticError` subclass at the first
    problem; warns :class:`~fusec.errors.ScriptWarning` for unused names.
    """
    return _Checker(script, library).run()
