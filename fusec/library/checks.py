"""The checks a parsed library must pass before anything compiles with it.

:mod:`fusec.library.loader` reads the files into :mod:`fusec.library.model` records; here
each function is checked against the rules of ``docs/library-format.md``: shapes of its
iteration space, declared elements and threads, routines a kernel will include (defined
once library-wide, never ``__syncthreads``), mappings that exist and hold their elements,
a finish and a ``stored`` triangle that mean something, and a reference the oracle can
evaluate. Every failure is a :class:`~fusec.errors.LibraryValidationError` at the line at
fault.
"""

from __future__ import annotations

import re

from ..errors import Coord, LibraryValidationError, source_line
from ..ir import geometry as geo
from . import reference
from .model import (
    IDENT,
    TRIANGLES,
    Access,
    Function,
    Geometry,
    Implementation,
    Kind,
    Param,
    SourceFile,
    Storage,
    ThreadMapping,
)

# where a routine is defined: ``__device__``, then anything but a statement's or a block's
# end, then its name and parameter list (what fusec.library.pieces splits files by, too)
ROUTINE_DEFINITION = re.compile(rf"__device__[^;{{}}()]*?\b({IDENT})\s*\(")


def _fail(message: str, coord: Coord):
    raise LibraryValidationError(message, coord, source_line(coord.file, coord.line))


def routine_homes(files: tuple[SourceFile, ...], functions: list[Function]) -> dict[str, str]:
    """Where each ``__device__`` function is defined; names must be unique library-wide."""
    homes: dict[str, str] = {}
    sources = [(f.path, f.text) for f in files] + [(fn.file, fn.source) for fn in functions]
    for path, text in sources:
        for match in ROUTINE_DEFINITION.finditer(text):
            name = match.group(1)
            if name in homes and homes[name] != path:
                line = text.count("\n", 0, match.start(1)) + 1
                col = match.start(1) - (text.rfind("\n", 0, match.start(1)) + 1) + 1
                raise LibraryValidationError(
                    f"routine {name!r} is defined twice (also in {homes[name]}); routine names are"
                    " shared by every kernel, so they must be unique in a library",
                    Coord(path, line, col), text.split("\n")[line - 1])
            homes[name] = path
    return homes


def forbid_syncthreads(path: str, text: str) -> None:
    match = re.search(r"__syncthreads\s*\(", text)
    if match:
        line = text.count("\n", 0, match.start()) + 1
        col = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
        raise LibraryValidationError(
            "use BARRIER() instead of __syncthreads(): the compiler decides which threads a barrier"
            " waits for (a horizontally fused kernel gives each part its own)",
            Coord(path, line, col), text.split("\n")[line - 1])


def _expected_element(function: Function, param: Param) -> str:
    if function.hof.geometry is Geometry.VECTOR:
        return "subvector(ELEMENT)"
    if param.kind is Kind.MATRIX:
        return "tile(TILE_ROWS,TILE_COLS)"
    return "subvector(TILE_ROWS)" if param.dims[0] == function.rows_dim else "subvector(TILE_COLS)"


def check_function(function: Function, mappings: dict[str, ThreadMapping],
                       homes: dict[str, str], shared: set[str], where: dict[str, Coord]) -> None:
    """Check one function; ``shared`` are the prelude and routine files, ``where`` the
    metadata lines of :func:`fusec.library.loader._parse_function` (errors point at the line at fault)."""
    hof = function.hof
    everything = function.params + (function.result,)
    matrices = [p for p in everything if p.kind is Kind.MATRIX]
    vectors = [p for p in everything if p.kind is Kind.VECTOR]
    result = function.result

    # Shapes of the iteration space.
    if hof.nested:
        if not matrices:
            _fail("a nested function needs a matrix parameter (its tiles are the instances)", function.coord)
        rows, cols = matrices[0].dims
        for m in matrices[1:]:
            if m.dims != (rows, cols):
                _fail(f"every matrix of a nested function must be [{rows}, {cols}]; {m.name} is"
                      f" [{', '.join(m.dims)}]", m.coord)
        for v in vectors:
            if v.dims[0] not in (rows, cols):
                _fail(f"vector {v.name} must be indexed by {rows} or {cols}", v.coord)
        if hof.reduce:
            if hof.axis not in (rows, cols):
                _fail(f"the reduction axis must be {rows} or {cols}, not {hof.axis!r}", where["axis"])
            other = cols if hof.axis == rows else rows
            if result.kind is not Kind.VECTOR or result.dims != (other,):
                _fail(f"a nested reduce over {hof.axis} returns a vector[{other}]", result.coord)
        elif result.kind is not Kind.MATRIX:
            _fail("a nested map returns a matrix", result.coord)
    else:
        if matrices:
            _fail("an unnested function works on vectors and scalars only; use 'nested' for matrices",
                  matrices[0].coord)
        if not vectors:
            _fail("an unnested function needs a vector parameter", function.coord)
        length = vectors[0].dims
        for v in vectors:
            if v.dims != length:
                _fail(f"every vector of an unnested function has the same length [{length[0]}]", v.coord)
        if hof.reduce and result.kind is not Kind.SCALAR:
            _fail("an unnested reduce returns a scalar", result.coord)
        if not hof.reduce and result.kind is not Kind.VECTOR:
            _fail("a map returns a vector", result.coord)
    input_dims = {d for p in function.params for d in p.dims}
    for d in result.dims:
        if d not in input_dims:
            _fail(f"result dimension {d!r} is not the size of any input", result.coord)

    # Element shapes and threads per instance are declared; they must match the geometry.
    for p in everything:
        if p.kind is Kind.SCALAR:
            if p.element is not None:
                _fail(f"scalar {p.name} has no element shape", where[f"element {p.name}"])
            continue
        expected = _expected_element(function, p)
        if p.element is None:
            _fail(f"{p.name} needs an 'element' line: 'element {p.name} {expected}'", p.coord)
        if p.element != expected:
            _fail(f"element of {p.name} must be {expected} in the {hof.geometry} geometry,"
                  f" not {p.element}", where[f"element {p.name}"])
    expected_threads = ("32",) if hof.geometry is Geometry.VECTOR else ("BLOCK_X", "BLOCK_Y")
    if function.threads != expected_threads:
        _fail(f"an instance of a {hof.geometry} function runs on 'threads {' x '.join(expected_threads)}'",
              where.get("threads", function.coord))

    # Finish epilogue.
    if function.finish is not None:
        if not hof.reduce:
            _fail("only a reduction has a finish routine", function.finish.coord)
        _require_routine(function.finish.routine, function, homes, shared, function.finish.coord)
        for arg in function.finish.args:
            if arg == "acc":
                continue
            try:
                p = function.param(arg)
            except KeyError:
                _fail(f"finish argument {arg!r} is not a parameter", where[f"finish {arg}"])
            if p is result or p.kind is Kind.MATRIX or (p.kind is Kind.VECTOR and p.dims != result.dims):
                _fail(f"finish argument {arg!r} must be a scalar or a vector indexed like the result",
                      where[f"finish {arg}"])

    # Routines of every implementation.
    finish_args = set(function.finish.args) if function.finish else set()
    for impl in function.implementations:
        _validate_implementation(function, impl, mappings, homes, shared, finish_args)

    _validate_stored(function, where)
    try:  # the reference must be something the oracle can evaluate
        reference.check_reference(function)
    except LibraryValidationError as exc:  # the check knows the function, not the line
        _fail(exc.message, where["reference"])
    for name, triangle in function.stored:
        if name != result.name and not reference.reads_one_triangle(function, name):
            other = "below" if triangle == "triu" else "above"
            _fail(f"'stored {name} {triangle}' says {function.name} reads only {name}'s {TRIANGLES[triangle]}"
                  f" triangle, but its reference ({function.reference}) depends on {name} {other} the diagonal",
                  where[f"stored {name}"])


def _validate_stored(function: Function, where: dict[str, Coord]) -> None:
    """``stored`` names matrices, square ones: a parameter listed on the ``square`` line, or
    the result with the dimensions of one (a triangle of a matrix[m, n] is one only when
    m == n)."""
    for name, triangle in function.stored:
        coord = where[f"stored {name}"]
        try:
            param = function.param(name)
        except KeyError:
            _fail(f"'stored' names {name!r}, which is not a parameter nor the result", coord)
        if param.kind is not Kind.MATRIX:
            _fail(f"'stored' names {name!r}, which is a {param.kind}: one triangle is stored of a matrix", coord)
        if param is function.result:
            rows, cols = function.dims_of(param)
            if rows != cols:
                _fail(f"'stored {name} {triangle}' needs {name} square: its dimensions [{', '.join(param.dims)}] must"
                      " be those of a 'square' matrix parameter", coord)
        elif name not in function.square:
            _fail(f"'stored {name} {triangle}' needs {name} square: say 'square {name}' too", coord)


def _require_routine(name: str, function: Function, homes: dict[str, str], shared: set[str],
                     coord: Coord) -> None:
    # A kernel includes its functions' own files and the shared files, never another function's.
    if homes.get(name) not in shared | {function.file}:
        elsewhere = f" (only in {homes[name]}, which this function's kernels do not include)" \
            if name in homes else ""
        _fail(f"routine {name!r} is not defined in {function.file} nor in the library's prelude"
              f" or routine files{elsewhere}", coord)


def _validate_implementation(function: Function, impl: Implementation,
                             mappings: dict[str, ThreadMapping], homes: dict[str, str],
                             shared: set[str], finish_args: set[str]) -> None:
    arrays = {p.name: p for p in function.array_params}
    scalars = {p.name for p in function.params if p.kind is Kind.SCALAR}
    compute = impl.compute
    geometry = impl.geometry or function.hof.geometry
    if geometry is Geometry.BAND and not function.hof.nested:
        _fail(f"implementation {impl.name!r} is a band implementation, but the band geometry is for"
              " nested functions only", impl.coord)
    result = function.result
    used_arrays = set()
    for routine in impl.loads + (compute, impl.store):
        _require_routine(routine.name, function, homes, shared, routine.coord)
        for access in routine.accesses:
            if access.mapping not in mappings:
                _fail(f"unknown mapping {access.mapping!r} (library.fusec and its part files declare"
                      f" {', '.join(sorted(mappings))})", routine.coord)
            mapping = mappings[access.mapping]
            try:
                geo.evaluate(mapping.size, geo.sample_macros(geometry))
            except geo.ExpressionError as exc:
                _fail(f"mapping {mapping.name!r} does not fit the {geometry} geometry: {exc}",
                      routine.coord)
        if routine.threads is not None:
            if routine.sync:
                _fail("a 'sync' routine runs on every thread; it cannot also reduce 'threads'", routine.coord)
            if geometry is Geometry.BAND:
                _fail("a band routine runs on every thread of the block ('threads' is for the tile and"
                      " vector geometries)", routine.coord)
            want = 1 if geometry is Geometry.VECTOR else 2
            if len(routine.threads) != want:
                _fail(f"'threads' of a {geometry} routine takes {want} number(s)", routine.coord)
            for expr in routine.threads:
                try:
                    geo.evaluate(expr, geo.sample_macros(geometry))
                except geo.ExpressionError as exc:
                    _fail(f"'threads' of a {geometry} routine: {exc}", routine.coord)
    seen_loads = set()
    for load in impl.loads:
        if load.param not in arrays:
            _fail(f"'load {load.param}': {load.param!r} is not an array input of {function.name}",
                  load.coord)
        if load.param in seen_loads:
            _fail(f"{load.param!r} is loaded twice", load.coord)
        seen_loads.add(load.param)
    for arg in compute.reads:
        if isinstance(arg, Access):
            if arg.param not in arrays:
                _fail(f"compute argument {arg.param!r} is not an array input", compute.coord)
            if arg.param not in seen_loads:
                _fail(f"compute reads {arg.param!r} but the implementation has no 'load {arg.param}'",
                      compute.coord)
            load = impl.load_of(arg.param)
            if mappings[load.writes.mapping].storage is not mappings[arg.mapping].storage:
                _fail(f"{arg.param!r} is loaded into {mappings[load.writes.mapping].storage} but read from"
                      f" {mappings[arg.mapping].storage}", compute.coord)
            _same_registers(arg.param, load.writes.mapping, arg.mapping, mappings, compute.coord)
            used_arrays.add(arg.param)
        elif arg not in scalars:
            _fail(f"compute argument {arg!r} needs a mapping ('{arg}:MAPPING') unless it is a scalar",
                  compute.coord)
    if compute.writes.param != result.name:
        _fail(f"compute must write the result {result.name!r}", compute.coord)
    if impl.store.param != result.name:
        _fail(f"the store routine must store the result {result.name!r}", impl.store.coord)
    if mappings[impl.store.reads[0].mapping].storage is not mappings[compute.writes.mapping].storage:
        _fail("the result is stored from another storage than compute writes it", impl.store.coord)
    _same_registers(result.name, compute.writes.mapping, impl.store.reads[0].mapping, mappings,
                    impl.store.coord)
    for name in arrays:
        if name not in used_arrays and name not in finish_args:
            _fail(f"array input {name!r} is neither read by compute nor by the finish routine",
                  compute.coord)
        if name in seen_loads and name not in used_arrays:
            _fail(f"{name!r} is loaded but compute does not read it", impl.load_of(name).coord)
    read_scalars = {arg for arg in compute.reads if isinstance(arg, str)}
    for name in sorted(scalars - read_scalars - finish_args):
        _fail(f"scalar input {name!r} is neither read by compute nor by the finish routine",
              compute.coord)
    for routine in impl.loads + (compute, impl.store):  # last: the checks above say more
        for access in routine.accesses:
            mapping = mappings[access.mapping]
            size = geo.evaluate(mapping.size, geo.sample_macros(geometry))
            _check_mapping_size(function, access, mapping, size, geometry, routine.coord)


def _element_reals(function: Function, param: Param, geometry: Geometry, macros: dict[str, int]) -> int:
    """Reals in one element of ``param`` (its declared shape) in ``geometry``."""
    if geometry is Geometry.VECTOR:
        return macros["ELEMENT"]
    rows, cols = ("BAND_ROWS", "BAND_COLS") if geometry is Geometry.BAND else ("TILE_ROWS", "TILE_COLS")
    if param.kind is Kind.MATRIX:
        return macros[rows] * macros[cols]
    return macros[rows] if param.dims[0] == function.rows_dim else macros[cols]


def _check_mapping_size(function: Function, access: Access, mapping: ThreadMapping, size: int,
                        geometry: Geometry, coord: Coord) -> None:
    """A mapping must hold the element it maps: in registers each of the instance's
    threads holds its share (the element's reals over the threads, at least one), in
    shared memory the block holds it whole. A smaller SIZE makes routines index past
    the array's end (``registers 1`` for a tile: ``r[1]``, indexed up to 15)."""
    try:
        param = function.param(access.param)
    except KeyError:
        return  # reported by the checks of the routine's parameters
    if param.kind is Kind.SCALAR:
        return
    macros = geo.sample_macros(geometry)
    reals = _element_reals(function, param, geometry, macros)
    threads = 32 if geometry is Geometry.VECTOR else macros["BLOCK"]
    need = max(1, -(-reals // threads)) if mapping.storage is Storage.REGISTERS else reals
    if size < need:
        shape = f"{reals} reals over {threads} threads" if mapping.storage is Storage.REGISTERS else f"{reals} reals"
        _fail(f"mapping {mapping.name!r} ({mapping.storage} {mapping.size}) holds {size} reals, but"
              f" {access.param!r} is an element of {shape} in the {geometry} geometry: it needs at least"
              f" {need} (checked at {', '.join(f'{k}={v}' for k, v in macros.items())})", coord)


def _same_registers(param: str, first: str, then: str, mappings: dict[str, ThreadMapping],
                    coord: Coord) -> None:
    """Registers are private to a thread: an element held in them has one mapping."""
    if mappings[first].storage is Storage.REGISTERS and first != then:
        _fail(f"{param!r} is written with mapping {first!r} and read with {then!r}; an element in"
              " registers keeps one mapping (use a shared mapping to change threads)", coord)
