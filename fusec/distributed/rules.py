"""Which layouts a call of a library function may read its arguments in, and
how its result then lies: checked against the function's reference, never
taken from its name.

A function is *nested* (it has a matrix: rows R, columns C) or not. Matrices
are split by rows, so a nested call reads its matrices and its [R] vectors
split. Then

- a nested map, or a nested reduce along C (gemv), makes each row whole on
  its rank: the result is split;
- a nested reduce along R (gemv-T) sums the rank's rows only: the result is
  partial. Its [C] vectors and scalars are whole, or partial where the
  reference adds them to the sum (``y = alpha A^T x + beta y0``: were y0 whole
  on every rank, the sum over ranks would add it P times, so rank 0 carries it
  and the others pass zeros).

An unnested call (map, or reduce to a scalar) reads its vectors all split
(the result is split, or partial for a reduce), or each whole or partial (a
partial result where some argument is partial: ``x + y`` of two partials).

Every candidate is evaluated with :mod:`fusec.oracle` on small random
arguments spread over three ranks (uneven blocks, random partial terms), and
kept only when the ranks' results concatenate (split) or add up (partial) to
the function's result on the whole arguments, or all equal it (whole). So a
library function whose epilogue is not linear (a square root after a sum)
is refused rather than computed wrongly.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import zlib
from typing import Mapping

import numpy as np

from .. import oracle
from ..frontend import check, parse
from ..library.model import Function, Kind
from .layout import Layout, block

CHECK_RANKS = 3
CHECK_ROWS, CHECK_COLS, CHECK_LENGTH = 5, 4, 7  # blocks of 2, 2, 1 rows over three ranks
CHECK_TRIALS = 2
CHECK_TOLERANCE = 1e-9  # relative to the largest magnitude involved, in float64


@dataclasses.dataclass(frozen=True)
class Choice:
    """Layouts a call may read its parameters in (None for a matrix, always
    split, is never used: matrices are SPLIT) and the layout of its result."""

    args: tuple[Layout, ...]  # per parameter, in the function's order
    result: Layout


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the rules need to know of a function: nested or not, its row and
    column variables, whether it sums along the rows."""

    nested: bool
    rows: str | None  # R
    cols: str | None  # C
    sums_rows: bool  # a nested reduce along R: the result is partial


def shape_of(function: Function) -> Shape:
    rows, cols = function.rows_dim, function.cols_dim
    nested = rows is not None
    sums_rows = nested and function.hof.reduce and function.hof.axis == rows
    return Shape(nested, rows, cols, sums_rows)


def candidates(function: Function) -> list[Choice]:
    """Every combination the rules above allow, before checking."""
    shape = shape_of(function)
    if shape.nested:
        allowed = []
        for p in function.params:
            if p.kind is Kind.MATRIX or (p.kind is Kind.VECTOR and p.dims[0] == shape.rows):
                allowed.append((Layout.SPLIT,))
            elif shape.sums_rows:
                allowed.append((Layout.WHOLE, Layout.PARTIAL))
            else:
                allowed.append((Layout.WHOLE,))
        result = Layout.PARTIAL if shape.sums_rows else Layout.SPLIT
        return [Choice(tuple(c), result) for c in itertools.product(*allowed)]
    out = []
    vectors = [p.kind is Kind.VECTOR for p in function.params]
    split = tuple(Layout.SPLIT if v else Layout.WHOLE for v in vectors)
    out.append(Choice(split, Layout.PARTIAL if function.hof.reduce else Layout.SPLIT))
    for combo in itertools.product((Layout.WHOLE, Layout.PARTIAL), repeat=len(vectors)):
        result = Layout.PARTIAL if Layout.PARTIAL in combo else Layout.WHOLE
        out.append(Choice(tuple(combo), result))
    return out


@functools.lru_cache(maxsize=None)
def _one_call(function: Function, library) -> tuple:
    """A DAG of the single call ``res = f(p0, p1, ...)`` and its parameter names."""
    names = [f"p{i}" for i in range(len(function.params))]
    lines = []
    for name, p in zip(names + ["res"], function.params + (function.result,)):
        dims = f"[{', '.join(p.dims)}]" if p.dims else ""
        lines.append(f"{p.kind} {name}{dims};")
    lines.append(f"input {', '.join(names)};")
    lines.append(f"res = {function.name}({', '.join(names)});")
    lines.append("return res;")
    dag = check(parse("\n".join(lines) + "\n", f"<{function.name}>"), library)
    return dag, tuple(names)


def _extent(function: Function, var: str) -> int:
    shape = shape_of(function)
    if var == shape.rows:
        return CHECK_ROWS
    if var == shape.cols:
        return CHECK_COLS
    return CHECK_LENGTH


def holds(function: Function, library, choice: Choice) -> bool:
    """Whether the ranks' results of ``choice`` combine into the function's
    result on the whole arguments (see the module's docstring)."""
    dag, names = _one_call(function, library)
    rng = np.random.default_rng(zlib.crc32(repr((function.name, choice)).encode()))
    for _ in range(CHECK_TRIALS):
        whole = {}
        for name, p in zip(names, function.params):
            shape = tuple(_extent(function, d) for d in p.dims)
            whole[name] = rng.uniform(-1.0, 1.0, size=shape) if shape else float(rng.uniform(-1.0, 1.0))
        expected = _result(dag, library, whole)
        ranks = _spread(whole, names, choice, rng)
        results = [_result(dag, library, args) for args in ranks]
        if choice.result is Layout.SPLIT:
            combined = np.concatenate(results, axis=0)
        elif choice.result is Layout.PARTIAL:
            combined = sum(results)
        else:
            if not all(np.array_equal(results[0], r) for r in results[1:]):
                return False
            combined = results[0]
        scale = max(1.0, float(np.max(np.abs(expected))),
                    max(float(np.max(np.abs(r))) for r in results))
        if combined.shape != expected.shape or not np.all(np.abs(combined - expected) <= CHECK_TOLERANCE * scale):
            return False
    return True


def _spread(whole: Mapping, names, choice: Choice, rng) -> list[dict]:
    """Each rank's arguments: its rows of a split one, the same whole one, or
    random terms of a partial one that add up to it (rank 0 holds what the
    others leave)."""
    ranks: list[dict] = [{} for _ in range(CHECK_RANKS)]
    for name, layout in zip(names, choice.args):
        value = whole[name]
        for rank, args in enumerate(ranks):
            if layout is Layout.SPLIT:
                lo, hi = block(np.shape(value)[0], rank, CHECK_RANKS)
                args[name] = value[lo:hi]
            elif layout is Layout.WHOLE:
                args[name] = value
        if layout is Layout.PARTIAL:
            terms = [np.asarray(rng.uniform(-1.0, 1.0, size=np.shape(value))) for _ in range(CHECK_RANKS - 1)]
            terms.insert(0, value - sum(terms))
            for args, term in zip(ranks, terms):
                args[name] = term if np.shape(value) else float(term)
    return ranks


def _result(dag, library, inputs) -> np.ndarray:
    return np.asarray(oracle.evaluate(dag, library, inputs)[dag.outputs[0]])


@functools.lru_cache(maxsize=None)
def valid_choices(function: Function, library) -> tuple[Choice, ...]:
    """The candidates that hold, in the order :func:`candidates` gives them. None for a
    function of a square matrix's triangle (``square A``): which elements it reads depends
    on their global row and column, which a rank's block of rows does not keep."""
    if function.square:
        return ()
    return tuple(c for c in candidates(function) if holds(function, library, c))
