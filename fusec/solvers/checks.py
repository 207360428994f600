"""The arguments of a solve, checked before anything runs: each mistake an
:class:`~fusec.errors.ArgumentError` naming the argument."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from .. import validate
from ..errors import ArgumentError
from .arrays import dtype_name, framework_of

DTYPES = ("float32", "float64")


@dataclasses.dataclass(frozen=True)
class Problem:
    """A checked solve: arrays of one framework and dtype, tolerances as numbers."""

    A: Any
    b: Any
    x0: Any  # None: zeros
    framework: str
    dtype: str
    n: int
    rtol: float
    atol: float
    maxiter: int
    check_every: int | None  # None: the solve chooses it from the iteration's cost
    b_squared_norm: float | None  # ||b||^2 in float64, read with the survey (None: not surveyed yet)


def _array(name: str, obj, framework: str | None = None):
    found = framework_of(obj)
    if found is None:
        raise ArgumentError(name, f"is a {type(obj).__name__}: pass a NumPy or CuPy array or a PyTorch CUDA tensor")
    if found == "torch" and not obj.is_cuda:
        raise ArgumentError(name, "is a PyTorch tensor on the host: pass a CUDA tensor or a NumPy array")
    if framework is not None and found != framework:
        raise ArgumentError(name, f"is a {found} array, but A is a {framework} array: pass both of one framework")
    return found


def tolerance(name: str, value) -> float:
    """``rtol`` or ``atol``: a finite real number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(name, f"is {value!r}: pass a real number")
    number = validate.finite_real(value)
    if number is None or number < 0:
        raise ArgumentError(name, f"is {validate.brief(value)}: it must be finite and >= 0")
    return number


def bandwidth(value) -> float | None:
    """A copy bandwidth in bytes/s (None: the GPU's), checked."""
    if value is None:
        return None
    number = validate.finite_real(value)
    if number is None or number <= 0:
        raise ArgumentError("bandwidth", f"is {validate.brief(value)}: pass bytes per second, a finite number > 0")
    return number


def _count(name: str, value, default: int | None) -> int | None:
    return default if value is None else validate.count(name, value, 1)


def check(arrays, A, b, x0, rtol, atol, maxiter, check_every, check_finite: bool = True) -> Problem:
    """The checked problem: :func:`arguments`, then :func:`surveyed`."""
    return surveyed(arrays, arguments(arrays, A, b, x0, rtol, atol, maxiter, check_every), check_finite)


def arguments(arrays, A, b, x0, rtol, atol, maxiter, check_every) -> Problem:
    """The problem with everything checked that the host sees without reading the arrays:
    types, shapes, dtypes, layout, tolerances, counts (``b_squared_norm`` None)."""
    framework = _array("A", A)
    if len(A.shape) != 2 or A.shape[0] != A.shape[1] or A.shape[0] == 0:
        raise ArgumentError("A", f"has shape {tuple(A.shape)}: pass a square matrix (n, n), n >= 1")
    dtype = dtype_name(A)
    if dtype not in DTYPES:
        raise ArgumentError("A", f"has dtype {dtype}: pass float32 or float64")
    if not arrays.contiguous(A):
        raise ArgumentError("A", "is not C-contiguous: pass a C-contiguous copy")
    n = int(A.shape[0])
    for name, v in (("b", b), ("x0", x0)):
        if v is None and name == "x0":
            continue
        _array(name, v, framework)
        if tuple(v.shape) != (n,):
            raise ArgumentError(name, f"has shape {tuple(v.shape)}: pass a vector of length {n} (A is {n} x {n})")
        if dtype_name(v) != dtype:
            raise ArgumentError(name, f"has dtype {dtype_name(v)}, but A is {dtype}: pass {dtype}")
        if framework == "torch" and v.device != A.device:
            raise ArgumentError(name, f"is on {v.device}, but A is on {A.device}")
        if framework == "cupy" and v.device.id != A.device.id:
            raise ArgumentError(name, f"is on GPU {v.device.id}, but A is on GPU {A.device.id}: pass both on one GPU")
    rtol, atol = tolerance("rtol", rtol), tolerance("atol", atol)
    if rtol >= 1:
        raise ArgumentError("rtol", f"is {rtol!r}: it must be below 1 (||r|| <= rtol ||b|| holds for x = 0 at 1)")
    maxiter = _count("maxiter", maxiter, 10 * n)
    check_every = _count("check_every", check_every, None)
    return Problem(A, b, x0, framework, dtype, n, rtol, atol, maxiter, check_every, None)


def surveyed(arrays, problem: Problem, check_finite: bool = True) -> Problem:
    """``problem`` with ``||b||^2``, its arrays surveyed and judged (:func:`judge`).
    ``arrays.survey`` (:mod:`.arrays` for A's framework) finds whether ``b`` and ``x0`` are
    finite, the sum of ``A`` (NaN and infinities make it not finite), the rows and columns of
    ``A`` that are all zeros (each makes A singular) and ``||b||^2``: one pass over A, no
    temporary of its size, read together (on a GPU: one wait). Without ``check_finite``,
    ``b`` and ``x0`` alone (``arrays.survey_vectors``): A is not read."""
    A, b, x0 = problem.A, problem.b, problem.x0
    survey = arrays.survey(A, b, x0) if check_finite else arrays.survey_vectors(b, x0)
    judge(survey)
    return dataclasses.replace(problem, b_squared_norm=survey.bb)


def judge(survey) -> None:
    """Raise the :class:`~fusec.errors.ArgumentError` a survey (:class:`.arrays.Survey`) calls
    for, if any."""
    for name, finite in (("b", survey.b_finite), ("x0", survey.x0_finite)):
        if not finite:
            raise ArgumentError(name, "contains NaN or infinity")
    if not math.isfinite(survey.A_sum):
        raise ArgumentError("A", "contains NaN or infinity (its sum is not finite)")
    if survey.zero_rows or survey.zero_columns:
        raise ArgumentError("A", _zero_lines(survey))


def _zero_lines(survey) -> str:
    """'row 17 is zero: A is singular', 'row 0 is the first of 3 zero rows; column 2 is zero: ...'
    (indices from 0, as A[17] is row 17)."""
    said = []
    for line, count, first in (("row", survey.zero_rows, survey.first_zero_row),
                               ("column", survey.zero_columns, survey.first_zero_column)):
        if count == 1:
            said.append(f"{line} {first} is zero")
        elif count:
            said.append(f"{line} {first} is the first of {count} zero {line}s")
    return "; ".join(said) + ": A is singular"
