"""The two ways instances are laid over data, and the macros routines see.

Library routines are written once against prescribed macro names (paper
§4.3.1); the compiler gives them values per kernel, so nvcc can unroll:

======================  ======================================================
``VEC``                 reals per 16-byte access: 4 (float) or 2 (double)
``ITERS``               serial iterations of the kernel's loop
``BLOCK``               threads per block
vector geometry         (unnested functions)
``ELEMENT``             reals per instance: one warp, ``32*VEC``
``INSTANCES``           instances per block, ``BLOCK/32``
``STREAM_LOADS``        1 when full chunks' loads are evict-first, and
``STREAM_STORES``       1 when their stores are: the kernel plan's L2 policy
tile geometry           (nested functions: one instance per block)
``TILE_ROWS``           rows of a matrix tile
``TILE_COLS``           columns of a tile: one warp of 16-byte accesses, ``32*VEC``
``BLOCK_X``             32: a warp spans a tile row
``BLOCK_Y``             ``BLOCK/32`` rows of threads
``STREAM_MATRIX``       1 when the kernel stores no matrix (matrix loads may be
                        evict-first); set per kernel by the code generator
band geometry           (nested functions' band implementations: one instance
                        per block and serial iteration, whole rows)
``BAND_ROWS``           rows of the band an instance works on at once
``PIECES``              16-byte pieces of a row each thread holds: thread t
                        holds pieces ``j * BLOCK + t``, ``j < PIECES``
``BAND_COLS``           the most columns a row may have, ``PIECES*BLOCK*VEC``
``WARPS``               ``BLOCK/32``, warps whose sums make a row's
``STREAM_MATRIX``       as in the tile geometry
======================  ======================================================
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import operator
import threading

import numpy as np

from ..library.model import Geometry

VEC_BYTES = 16
WARP = 32

DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
C_TYPES = {"float32": "float", "float64": "double"}


def dtype_name(dtype) -> str:
    """Normalise 'float32', np.float32, np.dtype('f4') ... to 'float32'/'float64'."""
    if isinstance(dtype, str) and dtype in DTYPES:  # the common case, on every launch: no NumPy
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}: use float32 or float64")
    return name


def vec(dtype) -> int:
    return VEC_BYTES // DTYPES[dtype_name(dtype)].itemsize


@dataclasses.dataclass(frozen=True, order=True)
class Shape:
    """Block size, tile rows and serial iterations of one kernel."""

    geometry: Geometry
    block: int
    iters: int
    tile_rows: int = 0  # tile geometry: rows of a tile; band geometry: BAND_ROWS
    pieces: int = 0  # band geometry only: PIECES, which sets the widest row (BAND_COLS)

    def macros(self, dtype) -> dict[str, int]:
        return dict(_macros(self, dtype_name(dtype)))  # a copy: callers may add to it

    def _macros(self, dtype: str) -> dict[str, int]:
        v = vec(dtype)
        out = {"VEC": v, "ITERS": self.iters, "BLOCK": self.block}
        if self.geometry is Geometry.VECTOR:
            out.update(ELEMENT=WARP * v, INSTANCES=self.block // WARP)
        elif self.geometry is Geometry.BAND:
            out.update(BAND_ROWS=self.tile_rows, PIECES=self.pieces, BAND_COLS=self.pieces * self.block * v,
                       WARPS=self.block // WARP)
        else:
            out.update(TILE_ROWS=self.tile_rows, TILE_COLS=WARP * v,
                       BLOCK_X=WARP, BLOCK_Y=self.block // WARP)
        return out

    def describe(self, dtype) -> str:
        m = self.macros(dtype)
        if self.geometry is Geometry.VECTOR:
            return (f"{self.block} threads ({m['INSTANCES']} instances of {m['ELEMENT']} values),"
                    f" {self.iters} serial iterations")
        if self.geometry is Geometry.BAND:
            return (f"band of {self.tile_rows} row{'s' if self.tile_rows > 1 else ''} x up to {m['BAND_COLS']}"
                    f" columns, {self.block} threads of {self.pieces} pieces, {self.iters} serial iterations")
        return (f"tile {self.tile_rows}x{m['TILE_COLS']}, block {WARP}x{m['BLOCK_Y']},"
                f" {self.iters} serial iterations")


def sample_macros(geometry: Geometry, dtype="float32") -> dict[str, int]:
    """Macro values used to validate library expressions without a kernel."""
    tile_rows = {Geometry.TILE: 32, Geometry.BAND: 2}.get(geometry, 0)
    shape = Shape(geometry, 256, 4, tile_rows, 4 if geometry is Geometry.BAND else 0)
    return shape.macros(dtype)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


class ExpressionError(ValueError):
    pass


AST_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1024)
def _parse(expression: str) -> ast.Expression:
    """The expression's tree, parsed once. Under a lock: CPython 3.11's parser is not
    safe to call from two threads at once (it fails with "AST constructor recursion
    depth mismatch"), and spaces are built in threads (the tests, nvcc batches)."""
    with AST_LOCK:
        try:
            return ast.parse(expression, mode="eval")
        except SyntaxError as exc:
            raise ExpressionError(f"not an integer expression: {expression!r}") from exc


def evaluate(expression: str, macros: dict[str, int]) -> int:
    """Evaluate a C integer expression over macro names (``TILE_ROWS/BLOCK_Y*VEC``).

    ``/`` is integer division, as in C for positive operands.
    """
    tree = _parse(expression.strip())

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:  # not True or False
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in macros:
                raise ExpressionError(f"unknown macro {node.id!r} in {expression!r}"
                                      f" (known here: {', '.join(sorted(macros))})")
            return macros[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            right = walk(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Div, ast.Mod)) and right == 0:
                raise ExpressionError(f"division by zero in {expression!r}")
            return _BINARY[type(node.op)](walk(node.left), right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ExpressionError(f"not an integer expression: {expression!r}")

    return walk(tree)


@functools.lru_cache(maxsize=None)
def _macros(shape: Shape, dtype: str) -> dict[str, int]:
    """Shape.macros, worked out once per shape and precision (runtime launches ask often)."""
    return shape._macros(dtype)
