"""Checks of a library's composites: functions defined by calls of its other functions.

A composite (``composite`` in a part file, ``docs/library-format.md``) is checked once,
when its library loads, the way the script checker checks a script: every call names a
function or another composite, with as many arguments as that takes, each a parameter
or an earlier call's target of the kind and sizes it needs, and the last call makes the
result, of the declared kind and sizes. No composite calls itself, directly or through
others. So the expansion of a call the script checker has checked against the signature
cannot fail, and the calls it adds read and size exactly as the composite says.
"""

from __future__ import annotations

import re
from typing import Mapping

from ..errors import Coord, LibraryValidationError, source_line
from ..ir import expr
from ..ir.sizes import Sizes, size_phrase
from ..validate import did_you_mean
from .model import TRIANGLES, Composite, CompositeCall, Function, Kind, Param

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_name(arg: str) -> bool:
    """Whether a composite's argument names a value (else it is a number)."""
    return _NAME.fullmatch(arg) is not None


def check_composites(composites: Mapping[str, Composite], functions: Mapping[str, Function]) -> None:
    """Raise a located :class:`LibraryValidationError` at the first bad composite."""
    for composite in composites.values():
        clash = functions.get(composite.name)
        if clash is not None:
            _fail(f"composite {composite.name!r} has the name of a function (in {clash.file})", composite.coord)
        reserved = expr.reserved_as(composite.name)
        if reserved is not None:
            _fail(f"{composite.name!r} is {reserved}: a composite cannot take it", composite.coord)
        _check_body(composite, functions, composites)
    _check_cycles(composites)
    for composite in composites.values():  # once no cycle can make these walks endless
        _check_triangles(composite, functions, composites)


def reads_one_triangle(callee: Function | Composite, param: str, functions: Mapping[str, Function],
                       composites: Mapping[str, Composite]) -> str | None:
    """The one triangle (``"triu"`` or ``"tril"``) of its matrix parameter ``param`` that
    ``callee`` reads alone: a function says so (``stored A triu``), a composite when every
    call it passes ``param`` to reads that same triangle. None where it reads the whole."""
    if isinstance(callee, Function):
        return callee.triangle(param)
    read = {reads_one_triangle(inner, p.name, functions, composites)
            for call in callee.calls for inner in (_called(call.function, functions, composites),)
            for p, arg in zip(inner.params, call.args) if arg == param}
    return read.pop() if len(read) == 1 else None


def makes_one_triangle(callee: Function | Composite, functions: Mapping[str, Function],
                       composites: Mapping[str, Composite]) -> str | None:
    """The one triangle ``callee``'s result holds (``"triu"`` or ``"tril"``): a function's
    that says ``stored RESULT triu`` (``tril``), a composite's whose last call makes one.
    None for a whole result."""
    if isinstance(callee, Function):
        return callee.triangle(callee.result.name)
    return makes_one_triangle(_called(callee.calls[-1].function, functions, composites), functions, composites)


def triangle_mismatch(made: str, read: str | None, where: str, arg: str) -> str:
    """Why a value ``arg`` holding only its triangle ``made`` cannot be ``where`` (``argument
    2 of sgemv``), a parameter that reads ``read`` of it (None: the whole matrix)."""
    reads = "the whole matrix" if read is None else f"only its {TRIANGLES[read]} triangle"
    return f"{where} reads {reads}, but {arg!r} holds only its {TRIANGLES[made]} triangle"


def _called(name: str, functions: Mapping[str, Function], composites: Mapping[str, Composite]) -> Function | Composite:
    """The function or composite a body's call names, once :func:`_callee` has checked the body."""
    return functions.get(name) or composites[name]


def _check_triangles(composite: Composite, functions: Mapping[str, Function],
                     composites: Mapping[str, Composite]) -> None:
    """No call of the body reads more of a target that holds one stored triangle than that
    triangle: the whole matrix, or the other triangle."""
    triangles: dict[str, tuple[str, str]] = {}  # target -> its triangle and the function that made it
    for call in composite.calls:
        callee = _called(call.function, functions, composites)
        for index, (param, arg, coord) in enumerate(zip(callee.params, call.args, call.arg_coords), start=1):
            if arg not in triangles:
                continue
            made, maker = triangles[arg]
            read = reads_one_triangle(callee, param.name, functions, composites)
            if read != made:
                outside = "below" if made == "triu" else "above"
                problem = triangle_mismatch(made, read, f"argument {index} of {callee.name}", arg)
                _fail(f"{problem} (made by {maker}): {outside} the"
                      " diagonal it holds whatever its array held", coord)
        made = makes_one_triangle(callee, functions, composites)
        if made is not None:
            triangles[call.target] = (made, callee.name)


def _check_body(composite: Composite, functions: Mapping[str, Function],
                composites: Mapping[str, Composite]) -> None:
    if not composite.calls:
        _fail(f"composite {composite.name!r} has no 'call' lines", composite.coord)
    sizes = Sizes()
    values: dict[str, tuple[Kind, tuple[int, ...], Coord]] = {
        p.name: (p.kind, tuple(sizes.symbol(d) for d in composite.dims_of(p)), p.coord) for p in composite.params}
    read: set[str] = set()
    for call in composite.calls:
        callee = _callee(composite, call, functions, composites)
        fresh = {var: sizes.variable("?") for p in (*callee.params, callee.result) for var in p.dims}
        for index, (param, arg, coord) in enumerate(zip(callee.params, call.args, call.arg_coords), start=1):
            _argument(callee, index, param, arg, coord, values, sizes, fresh)
            read.add(arg)
        for index, (param, arg, coord) in enumerate(zip(callee.params, call.args, call.arg_coords), start=1):
            if param.name in callee.square and sizes.unify(*(fresh[v] for v in param.dims)) is not None:
                shape = ", ".join(sizes.name(node) for node in values[arg][1])
                _fail(f"argument {index} of {callee.name} must be a square matrix, but {arg!r} is [{shape}]:"
                      f" say 'square {arg}' under the composite line", coord)
        if call.target in values:
            first = values[call.target][2]
            what = "a parameter" if call.target in {p.name for p in composite.params} else "assigned"
            _fail(f"{call.target!r} is {what} already (line {first.line}): each call makes a new value",
                  call.target_coord)
        values[call.target] = (callee.result.kind, tuple(fresh[d] for d in callee.result.dims), call.target_coord)
    _check_result(composite, values, sizes)
    for call in composite.calls[:-1]:
        if call.target not in read:
            _fail(f"{call.target!r} is read by no later call (only the last call's target, the result, is"
                  " not read)", call.target_coord)
    for p in composite.params:
        if p.name not in read:
            _fail(f"parameter {p.name!r} is passed to no call", p.coord)


def _callee(composite: Composite, call: CompositeCall, functions: Mapping[str, Function],
            composites: Mapping[str, Composite]) -> Function | Composite:
    if call.function == composite.name:
        _fail(f"composite {composite.name!r} calls itself", call.coord)
    callee = functions.get(call.function) or composites.get(call.function)
    if callee is None:
        _fail(f"unknown function {call.function!r}: the library has no function or composite of that"
              f" name{did_you_mean(call.function, [*functions, *composites])}", call.coord)
    if len(call.args) != len(callee.params):
        wanted = len(callee.params)
        _fail(f"{callee.name} takes {wanted} argument{'s' if wanted != 1 else ''}, {len(call.args)} given:"
              f" {callee.signature()}", call.coord)
    return callee


def _argument(callee, index: int, param: Param, arg: str, coord: Coord,
              values: dict[str, tuple[Kind, tuple[int, ...], Coord]], sizes: Sizes, fresh: dict[str, int]) -> None:
    where = f"argument {index} of {callee.name}"
    if not is_name(arg):
        if param.kind is not Kind.SCALAR:
            _fail(f"{where} must be a {param.kind}, but {arg} is a number", coord)
        return
    if arg not in values:
        _fail(f"{arg!r} is neither a parameter of the composite nor the target of an earlier call", coord)
    kind, dims, _ = values[arg]
    if kind is not param.kind:
        _fail(f"{where} must be a {param.kind}, but {arg!r} is a {kind}", coord)
    for axis, (var, node) in enumerate(zip(param.dims, dims)):
        conflict = sizes.unify(node, fresh[var])
        if conflict is not None:
            have, want = conflict
            _fail(f"size mismatch in {where}: {arg!r} has {size_phrase(kind, axis, have)}, but it must have"
                  f" {size_phrase(kind, axis, want)}", coord)


def _check_result(composite: Composite, values, sizes: Sizes) -> None:
    last = composite.calls[-1]
    result = composite.result
    if last.target != result.name:
        _fail(f"the last call makes the composite's result: its target must be {result.name!r}",
              last.target_coord)
    kind, dims, _ = values[result.name]
    if kind is not result.kind:
        _fail(f"{last.function} returns a {kind}, but the result {result.name!r} is a {result.kind}",
              last.target_coord)
    for axis, (var, node) in enumerate(zip(composite.dims_of(result), dims)):
        conflict = sizes.unify(node, sizes.symbol(var))
        if conflict is not None:
            have, want = conflict
            _fail(f"the result {result.name!r} is declared with {size_phrase(kind, axis, want)}, but"
                  f" {last.function} makes it with {size_phrase(kind, axis, have)}", last.target_coord)


MAX_NESTING = 100  # composites calling composites: the script checker expands them recursively
MAX_EXPANSION = 1000  # calls of functions one composite stands for (two calls a level double it)


def _check_cycles(composites: Mapping[str, Composite]) -> None:
    """No composite reaches itself through the composites it calls (it could not be
    expanded), reported at the call that closes the cycle; none nests more than
    MAX_NESTING deep, reported at the call that goes past, nor stands for more than
    MAX_EXPANSION calls of functions, at the composite. A walk without recursion: a
    chain of composites may be long."""
    done: dict[str, tuple[int, int]] = {}  # composite -> (levels it nests, calls it stands for)
    for root in composites:
        if root in done:  # measured as another's callee
            continue
        path, pending = [root], [iter(composites[root].calls)]
        while path:
            name = path[-1]
            call = next(pending[-1], None)
            if call is None:
                done[name] = _measure(composites[name], composites, done)
                path.pop()
                pending.pop()
            elif call.function in composites and call.function not in done:
                if call.function in path:
                    cycle = path[path.index(call.function):] + [call.function]
                    _fail("composites call each other in a cycle: " + " -> ".join(cycle), call.coord)
                path.append(call.function)
                pending.append(iter(composites[call.function].calls))


def _measure(composite: Composite, composites: Mapping[str, Composite],
             done: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """How deep ``composite`` nests and how many calls of functions it stands for, its
    callees measured (``done``); a located error past the bounds."""
    levels, calls = 1, 0
    for call in composite.calls:
        inner_levels, inner_calls = done.get(call.function, (0, 1))
        if inner_levels + 1 > MAX_NESTING:
            _fail(f"composites nest more than {MAX_NESTING} deep: {composite.name!r} calls {call.function!r},"
                  f" which nests {inner_levels} deep", call.coord)
        levels, calls = max(levels, inner_levels + 1), calls + inner_calls
    if calls > MAX_EXPANSION:
        _fail(f"composite {composite.name!r} stands for {calls} calls of functions, more than {MAX_EXPANSION}:"
              " a script's call of it expands to them all", composite.coord)
    return levels, calls


def _fail(message: str, coord: Coord):
    raise LibraryValidationError(message, coord, source_line(coord.file, coord.line))
