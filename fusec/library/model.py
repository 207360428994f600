"""Frozen records describing a library of elementary functions.

A function is metadata plus CUDA routines (paper §4.3): one ``load`` per array
input, one ``compute``, one ``store`` per output. Metadata says which
higher-order function it implements, the kind, dimensions and element shape of
each parameter, the threads an instance uses, and the thread-to-data mapping
of every access, which the code generator needs to decide where an element
lives (registers or shared memory) and where barriers go.

The loader (:mod:`fusec.library.loader`) builds these from the files described
in ``docs/library-format.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import Coord

# the triangles a ``stored`` line may name, each with the word for it: ``triu`` on and above
# the diagonal, ``tril`` on and below it (NumPy's names, as in a reference)
TRIANGLES: Mapping[str, str] = MappingProxyType({"triu": "upper", "tril": "lower"})
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"  # a name in a library's files: function, parameter, routine, mapping


class Kind(str, enum.Enum):
    MATRIX = "matrix"
    VECTOR = "vector"
    SCALAR = "scalar"

    def __str__(self) -> str:
        return self.value


class Geometry(str, enum.Enum):
    """How instances of a function tile its data (paper §4.3.2).

    ``VECTOR``: unnested functions; an instance is one warp working on a
    sub-vector of ``ELEMENT = 32*VEC`` values, several instances per block.
    ``TILE``: nested functions; an instance is a block working on a
    ``TILE_ROWS x TILE_COLS`` tile and the matching sub-vectors.
    ``BAND``: nested functions too, in implementations that say so; an
    instance is a block working on ``BAND_ROWS`` whole rows (at most
    ``BAND_COLS`` columns), thread t holding the 16-byte pieces
    ``j * BLOCK + t`` of each, so a sum along a row is whole inside the block.
    """

    VECTOR = "vector"
    TILE = "tile"
    BAND = "band"

    def __str__(self) -> str:
        return self.value


class Storage(str, enum.Enum):
    REGISTERS = "registers"
    SHARED = "shared"

    def __str__(self) -> str:
        return self.value


class RoutineKind(str, enum.Enum):
    LOAD = "load"
    COMPUTE = "compute"
    STORE = "store"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter of a function: ``A: matrix[m, n]``.

    ``dims`` are the function's own dimension variables; the script checker
    unifies them with the sizes of the actual arguments.
    """

    name: str
    kind: Kind
    dims: tuple[str, ...]
    coord: Coord = dataclasses.field(compare=False)
    element: str | None = None  # declared element shape, e.g. "tile(TILE_ROWS, TILE_COLS)"


@dataclasses.dataclass(frozen=True)
class Hof:
    """The higher-order function: map or reduce, nested or not.

    ``axis`` is the dimension variable a nested reduce runs along (``n`` in
    ``y_i = sum_n A_in x_n``); an unnested reduce folds a whole vector to a
    scalar. ``operator`` is the associative operator (only ``+`` for now; its
    identity is 0, which is also the padding value of loads).
    """

    nested: bool
    reduce: bool
    axis: str | None = None
    operator: str = "+"

    @property
    def geometry(self) -> Geometry:
        return Geometry.TILE if self.nested else Geometry.VECTOR

    def __str__(self) -> str:
        name = ("nested " if self.nested else "") + ("reduce" if self.reduce else "map")
        if self.reduce:
            name += f"({self.operator})"
            if self.axis:
                name += f" over {self.axis}"
        return name


@dataclasses.dataclass(frozen=True)
class Access:
    """One element a routine touches, and the mapping it touches it with."""

    param: str
    mapping: str


@dataclasses.dataclass(frozen=True)
class Routine:
    """A CUDA ``__device__`` function of the library and how it is called.

    Calling conventions (``c`` is the instance context, ``fusec_tile`` or
    ``fusec_chunk``):

    - load:    ``name(const real* global, real* element, const CTX& c)``
    - compute: ``name(<args in declared order>, real* out, const CTX& c)``,
      arrays as ``const real*`` elements, scalars as ``real`` values
    - store:   ``name(const real* element, real* global, const CTX& c)``

    ``threads`` lets a routine run on fewer threads than the instance has
    (the compiler reduces parallelism and recomputes indices, Algorithm 2);
    ``scratch`` is shared memory (in reals) the routine needs for the duration
    of the call; ``sync`` says it calls ``BARRIER()`` inside, so every thread
    of the instance must call it.
    """

    kind: RoutineKind
    name: str
    param: str | None  # the loaded or stored parameter
    reads: tuple[Access | str, ...]  # compute: arrays as Access, scalars as names
    writes: Access | None  # load: the element loaded; compute: its output
    threads: tuple[str, ...] | None = None
    scratch: str | None = None
    sync: bool = False
    coord: Coord = dataclasses.field(default=None, compare=False)

    @property
    def accesses(self) -> tuple[Access, ...]:
        out = [a for a in self.reads if isinstance(a, Access)]
        if self.writes is not None:
            out.append(self.writes)
        return tuple(out)


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One way to implement a function: a load per input, a compute, a store."""

    name: str
    loads: tuple[Routine, ...]
    compute: Routine
    store: Routine
    coord: Coord = dataclasses.field(compare=False)
    geometry: Geometry | None = None  # None: the function's own (Hof.geometry); BAND: a band implementation

    def load_of(self, param: str) -> Routine | None:
        for routine in self.loads:
            if routine.param == param:
                return routine
        return None

    def mapping_of(self, param: str) -> str | None:
        """The mapping the compute routine reads (or writes) ``param`` with."""
        for access in self.compute.accesses:
            if access.param == param:
                return access.mapping
        return None


@dataclasses.dataclass(frozen=True)
class Finish:
    """Scalar epilogue of a reduction: ``out_i = name(acc_i, args...)``.

    Arguments are ``acc`` (the fully reduced value) or parameter names:
    scalars, or vectors indexed like the output (read at the same index).
    """

    routine: str
    args: tuple[str, ...]
    coord: Coord = dataclasses.field(compare=False)


class Signed:
    """What a function and a composite share: a name, typed parameters, a result, and
    ``square`` matrices; the script checker checks a call of either by these alone."""

    name: str
    params: tuple[Param, ...]
    result: Param
    square: tuple[str, ...]

    def param(self, name: str) -> Param:
        if name == self.result.name:
            return self.result
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def dim(self, var: str) -> str:
        """A dimension variable as a script calling this function must size it: a square
        matrix's column variable is its row variable (``strmv``'s n is its m)."""
        for p in self.params:
            if p.name in self.square and var == p.dims[1]:
                return p.dims[0]
        return var

    def dims_of(self, param: Param) -> tuple[str, ...]:
        """``param``'s dimension variables, each as :meth:`dim` gives it (``A: matrix[m, n]``
        of ``strmv`` is [m, m])."""
        return tuple(self.dim(d) for d in param.dims)

    def signature(self) -> str:
        def show(p: Param) -> str:
            dims = f"[{', '.join(p.dims)}]" if p.dims else ""
            return f"{p.name}: {p.kind}{dims}"
        args = ", ".join(show(p) for p in self.params)
        return f"{self.name}({args}) -> {show(self.result)}"


@dataclasses.dataclass(frozen=True)
class Function(Signed):
    name: str
    params: tuple[Param, ...]  # in call order
    result: Param
    hof: Hof
    threads: tuple[str, ...]
    reference: str  # NumPy expression over the parameter names (the oracle)
    implementations: tuple[Implementation, ...]
    finish: Finish | None
    summary: str
    file: str
    source: str = dataclasses.field(repr=False)  # the CUDA text, metadata removed
    coord: Coord = dataclasses.field(compare=False)
    # matrices whose two dimensions must be one size (``square A``): a triangle of a
    # matrix[m, n] is a triangle only when m == n; the script checker enforces it at a call
    square: tuple[str, ...] = ()
    # matrices of which one triangle is stored, each with its triangle (``stored A triu``:
    # ("A", "triu"); ``stored A tril``: ("A", "tril")): a parameter the function reads on and
    # above (below) its diagonal alone, a result it writes there alone (the rest is not written)
    stored: tuple[tuple[str, str], ...] = ()

    def triangle(self, name: str) -> str | None:
        """The triangle (``"triu"`` or ``"tril"``) a ``stored`` line names of the parameter
        or result ``name``; None where none does (the function reads or writes it whole)."""
        return dict(self.stored).get(name)

    def implementation(self, name: str) -> Implementation:
        """The implementation of that name (a KeyError if none)."""
        return self._implementations[name]

    @functools.cached_property
    def _implementations(self) -> dict[str, Implementation]:
        # looked up for every routine of every plan the space builds and prices
        return {i.name: i for i in self.implementations}

    def geometry_of(self, implementation: str) -> Geometry:
        """The geometry an implementation runs in: its own, else the function's."""
        return self.implementation(implementation).geometry or self.hof.geometry

    @property
    def array_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind is not Kind.SCALAR)

    @property
    def finish_only(self) -> tuple[str, ...]:
        """Inputs read only by the finish epilogue, never loaded by routines."""
        loaded = {r.param for impl in self.implementations for r in impl.loads}
        used = set(self.finish.args) if self.finish else set()
        return tuple(p.name for p in self.array_params
                     if p.name in used and p.name not in loaded)

    @property
    def rows_dim(self) -> str | None:
        """Row dimension variable of a nested function's iteration space."""
        for p in self.params + (self.result,):
            if p.kind is Kind.MATRIX:
                return p.dims[0]
        return None

    @property
    def cols_dim(self) -> str | None:
        for p in self.params + (self.result,):
            if p.kind is Kind.MATRIX:
                return p.dims[1]
        return None


@dataclasses.dataclass(frozen=True)
class CompositeCall:
    """One line of a composite's body, ``call y1 = strmv(A, x)``: ``args`` as written,
    each a name (a parameter or an earlier call's target) or a number (for a scalar
    parameter); ``coord`` is the callee's name, ``arg_coords`` each argument's."""

    target: str
    function: str
    args: tuple[str, ...]
    coord: Coord = dataclasses.field(compare=False)
    arg_coords: tuple[Coord, ...] = dataclasses.field(default=(), compare=False)
    target_coord: Coord = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class Composite(Signed):
    """A function a library defines by calls of its other functions (``composite`` in a
    part file): typed like a :class:`Function`, checked at a call like one, and expanded
    by the script checker into its calls, so the compiler sees only elementary calls.

    ``calls`` run in order; each reads parameters and earlier targets, and the one whose
    target is ``result.name`` makes the result."""

    name: str
    params: tuple[Param, ...]
    result: Param
    calls: tuple[CompositeCall, ...]
    summary: str
    file: str
    coord: Coord = dataclasses.field(compare=False)
    square: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ThreadMapping:
    """A named thread-to-data mapping (paper §3.2.3).

    ``registers``: each thread holds ``size`` slots of the element, indexed
    with compile-time constants. ``shared``: the element lives in a block-wide
    shared array of ``size`` reals; the name still tells which thread touches
    which words, so two accesses with different names need a barrier.
    """

    name: str
    storage: Storage
    size: str  # C expression over geometry macros
    doc: str
    coord: Coord = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class SourceFile:
    path: str
    text: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Library:
    name: str
    path: str
    summary: str
    prelude: tuple[SourceFile, ...]  # emitted once, before every kernel
    routine_files: tuple[SourceFile, ...]  # shared routines, copied per kernel
    mappings: Mapping[str, ThreadMapping] = dataclasses.field(compare=False)
    functions: Mapping[str, Function] = dataclasses.field(compare=False)
    content_hash: str = ""
    routine_homes: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}), compare=False)  # routine -> file
    # file (relative to the library's folder) -> the first 16 hex digits of its sha256, for
    # every file the content hash covers: what a performance database records it timed, so
    # that a library that only gained files keeps its database (fusec.cost.perfdb.store)
    files: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}), compare=False)
    composites: Mapping[str, Composite] = dataclasses.field(
        default_factory=lambda: MappingProxyType({}), compare=False)

    def function(self, name: str) -> Function | None:
        return self.functions.get(name)

    def file_name(self, path: str) -> str:
        """One of the library's files named as :attr:`files` names it: relative to its folder."""
        return str(Path(path).relative_to(self.path))
