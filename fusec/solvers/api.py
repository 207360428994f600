"""``cg``, ``bicg`` and ``bicgstab``: SciPy's interface over fusec's compiled iterations."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from .. import validate as check
from ..errors import GPUUnavailableError
from ..target import resolve
from . import checks, device_loop, driver, kernels
from .arrays import NumpyArrays, arrays_for, framework_of
from .methods import BICG, BICGSTAB, CG, METHODS, Method
from .stepper import ProgramStepper
from .workspace import Kept, Workspaces

_KEPT = Workspaces()


def forget_kept_steppers() -> None:
    """Drop the steppers kept between solves, and the memory they hold (their state arrays, graphs
    and the copies of small matrices: :mod:`.stepper`); the next solve of each size starts afresh."""
    _KEPT.clear()


@functools.lru_cache(maxsize=16)
def program_for(name: str, dtype: str, n: int):
    """The compiled iteration of solver ``name`` (kept: compiling takes seconds, and the
    program keeps its workspaces for the next solve). The spaces of BiCG's 11 calls and
    BiCGStab's 14 are searched by the bounded search, as designed: its warning is not news
    to a solver's caller."""
    from ..api import compile
    from ..space.search import SpaceCutWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpaceCutWarning)
        return compile(METHODS[name].script, dtype=dtype, sizes={"n": n})


def _device_framework() -> str:
    """Where NumPy inputs go: CuPy if importable, else PyTorch with CUDA."""
    try:
        import cupy  # noqa: F401
        return "cupy"
    except ImportError:
        pass
    try:
        import torch
    except ImportError:
        raise GPUUnavailableError("fusec.solvers needs CuPy or PyTorch to hold NumPy inputs on the GPU") from None
    if not torch.cuda.is_available():
        raise GPUUnavailableError("fusec.solvers: PyTorch sees no CUDA device")
    return "torch"


def _to_device(framework: str, a):
    if a is None:
        return None
    if framework == "cupy":
        import cupy
        return cupy.asarray(a)
    import torch
    return torch.as_tensor(a, device="cuda")


def solve(method: Method, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None, graphs=True,
          check_finite=True, program=None, bandwidth=None, make_loop=None):
    """Solve ``A x = b`` by ``method``; returns ``(x, info)`` (see :func:`cg`). ``program``
    replaces the compiled iteration (anything called as a fusec program is); ``bandwidth``
    (bytes/s) the GPU's copy bandwidth, which the default ``check_every`` is chosen by;
    ``make_loop`` the GPU loop (:class:`.device_loop.DeviceLoop`; the tests drive one on NumPy)."""
    x, outcome = solve_with_outcome(method, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter,
                                    check_every=check_every, graphs=graphs, check_finite=check_finite,
                                    program=program, bandwidth=bandwidth, make_loop=make_loop)
    return x, outcome.info


def matrix_bytes(method: Method, n: int, dtype: str) -> int:
    """The bytes of A an iteration reads at least (its passes over A)."""
    return method.matrix_passes * n * n * np.dtype(dtype).itemsize


def default_check_every(method: Method, n: int, dtype: str, bandwidth: float) -> int:
    """``check_every`` when not given: from the time of an iteration's passes over A at the
    copy bandwidth (:func:`driver.default_check_every`)."""
    return driver.default_check_every(matrix_bytes(method, n, dtype) / bandwidth)


def _host_check_every(method: Method, problem: checks.Problem, bandwidth: float | None) -> int:
    if bandwidth is None:
        bandwidth = resolve(unknown_ok=True).copy_bandwidth  # the GPU the program is compiled for
    return default_check_every(method, problem.n, problem.dtype, bandwidth)


def solve_with_outcome(method: Method, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None,
                       graphs=True, check_finite=True, program=None, bandwidth=None, make_loop=None) -> tuple:
    """:func:`solve`, returning ``(x, driver.Outcome)``: the iterations the solve ran too (the
    benchmark reports them)."""
    bandwidth = checks.bandwidth(bandwidth)
    graphs = check.flag("graphs", graphs)
    check_finite = check.flag("check_finite", check_finite)
    found = framework_of(A)
    host_arrays = arrays_for(found) if found else NumpyArrays()
    problem = checks.arguments(host_arrays, A, b, x0, rtol, atol, maxiter, check_every)
    if x0 is None and graphs and problem.check_every is None and host_arrays.contiguous(b):
        started = _solve_started(method, problem, program, check_finite, bandwidth)
        if started is not None:
            return started
    problem = checks.surveyed(host_arrays, problem, check_finite)
    where = problem.framework
    if where == "numpy" and program is None:
        where = _device_framework()
        A, b, x0 = (_to_device(where, a) for a in (problem.A, problem.b, problem.x0))
    key = _kept_key(method, where, problem, A, program)
    if program is None:
        program = program_for(method.name, problem.dtype, problem.n)
    if make_loop is None and where != "numpy" and kernels.unsupported() is None:
        guarded = device_loop.guards(matrix_bytes(method, problem.n, problem.dtype))
        make_loop = functools.partial(device_loop.DeviceLoop, guarded=guarded)
    on_device = make_loop is not None and problem.check_every is None and graphs  # a given check_every: the host's
    with _KEPT.take(key, lambda: Kept(arrays_for(where))) as kept:
        arrays = kept.arrays
        with arrays.stream():
            bb = problem.b_squared_norm
            if x0 is None:
                x0, r0, rr0 = arrays.zeros_like(b), b, bb  # r0 = b: no read
            else:
                r0 = b - arrays.matvec(A, x0)
                rr0 = None  # read below
            tol = max(problem.rtol * math.sqrt(bb), problem.atol)
            start = method.start(x0, r0, lambda a: a)  # the stepper copies them into its own arrays
            if kept.stepper is None or kept.stepper.program is not program:
                kept.stepper = ProgramStepper(program, method, arrays, A, start, graphs=graphs, make_loop=make_loop)
            else:
                kept.stepper.begin(A, start, graphs=graphs, make_loop=make_loop)
            stepper = kept.stepper
            every = problem.check_every
            if every is None:  # found only where the host loops (finding the GPU's bandwidth is a measurement)
                every = functools.partial(_host_check_every, method, problem, bandwidth)
            try:
                rr0 = arrays.squared_norm(r0) if rr0 is None else rr0
                per_launch = driver.most_per_launch(matrix_bytes(method, problem.n, problem.dtype))
                outcome = driver.run(stepper, rr0, tol, problem.maxiter, every, on_device=on_device,
                                     most_per_launch=per_launch)
                x = arrays.copy(stepper.x())  # the stepper's arrays serve the next solve
            finally:
                stepper.end()
    if problem.framework == "numpy" and where != "numpy":
        x = x.get() if where == "cupy" else x.cpu().numpy()
    return x, outcome


def _kept_key(method: Method, where: str, problem: checks.Problem, A, program) -> tuple:
    """Which kept stepper a solve takes: one per method, framework, precision, size and device,
    and per program given (None: the method's own, :func:`program_for`)."""
    return (method.name, where, problem.dtype, problem.n, str(getattr(A, "device", "")),
            None if program is None else id(program))


def _solve_started(method: Method, problem: checks.Problem, program, check_finite: bool,
                   bandwidth: float | None) -> tuple | None:
    """:func:`solve_with_outcome` from x = 0 on a kept stepper whose GPU loop is captured on
    ``problem.A``, started on the GPU: the arguments' survey, then one launch writing the loop's
    record and the first state from it, then the loop, and one read for them all (the checks'
    own read, the tolerance computed from it by the host and the start's copies each cost the
    host a wait or a launch). The survey's verdict comes with the loop's: where it refuses the
    arguments the loop did not iterate, and the survey is read to raise the checks' error.
    None where no kept stepper can start so (the solve then goes the host's way)."""
    key = _kept_key(method, problem.framework, problem, problem.A, program)
    with _KEPT.take(key, lambda: None) as kept:  # none kept: nothing is made
        if kept is None or kept.stepper is None:
            return None
        stepper, arrays, A, b = kept.stepper, kept.arrays, problem.A, problem.b
        with arrays.stream():
            if not stepper.can_start_on_device(A):
                return None
            try:
                survey = arrays.launch_survey(A if check_finite else None, b)
                per_launch = driver.most_per_launch(matrix_bytes(method, problem.n, problem.dtype))
                limit, looped = stepper.start_on_device(A, b, survey, problem.rtol, problem.atol,
                                                        min(problem.maxiter, per_launch))
                done, why, _ = looped
                if why == device_loop.REFUSED:
                    checks.judge(arrays.read_survey(survey, problem.n))
                    return None  # refused on the GPU, not on the host: the host's way decides
                if done == 0:  # b within the tolerance: x0, zeros
                    return arrays.zeros_like(b), driver.Outcome(0, 0)
                every = functools.partial(_host_check_every, method, problem, bandwidth)
                outcome = driver.resume(stepper, limit, problem.maxiter, looped, every, most_per_launch=per_launch)
                return arrays.copy(stepper.x()), outcome
            finally:
                stepper.end()


_ARGS = """
    ``A`` is a square dense matrix (C-contiguous, float32 or float64) and ``b`` a vector, NumPy
    or CuPy arrays or PyTorch CUDA tensors, all of one framework and dtype; NumPy inputs are
    solved on the GPU (through CuPy if importable, else PyTorch) and ``x`` comes back as NumPy.
    ``x0``: the first iterate (default zeros). Stops when ``||r|| <= max(rtol ||b||, atol)``
    (``r`` the residual the iteration updates), or after ``maxiter`` iterations (default
    ``10 n``). Without ``check_every`` the loop runs on the GPU (a CUDA 12.3+ driver), the rule
    tested after every iteration; with it, or where the GPU cannot loop, the host reads ``||r||``
    every ``check_every`` iterations (default there 16, fewer where an iteration is long: the
    largest power of two up to 16 whose passes over A take at most 1 ms at the GPU's copy
    bandwidth). ``info``: 0 converged;
    ``> 0`` the iterations done without converging; ``< 0`` broke down at iteration ``-info``
    (a zero denominator), ``x`` then being the iterate before. ``graphs=False`` makes plain
    calls instead of replaying CUDA graphs. Bad arguments raise
    :class:`fusec.ArgumentError` naming the argument, before the solve iterates (a solve the GPU
    starts reads the check with its loop, which then stops before its first iteration counts;
    nothing of the caller's is written): NaN or infinity in ``A``, ``b`` or ``x0``, a row or
    column of ``A`` that is all zeros (found in one pass over ``A`` on the GPU).
    ``check_finite=False`` (as SciPy's ``scipy.linalg`` functions) leaves that pass over ``A``
    out, a saving worth an iteration where ``A`` is large; such an ``A`` then ends the solve in
    a breakdown or without converging instead. ``b`` and ``x0`` are checked either way."""


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None, graphs=True, check_finite=True):
    return solve(CG, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, check_every=check_every, graphs=graphs,
                 check_finite=check_finite)


def bicg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None, graphs=True, check_finite=True):
    return solve(BICG, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, check_every=check_every, graphs=graphs,
                 check_finite=check_finite)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=None, graphs=True, check_finite=True):
    return solve(BICGSTAB, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, check_every=check_every, graphs=graphs,
                 check_finite=check_finite)


cg.__doc__ = "Conjugate gradients for a symmetric positive definite ``A``: ``x, info = cg(A, b)``.\n" + _ARGS
bicg.__doc__ = ("Biconjugate gradients for a general square ``A`` (each iteration reads A once for A p and"
                " A^T p~): ``x, info = bicg(A, b)``.\n" + _ARGS)
bicgstab.__doc__ = "BiCGStab for a general square ``A``: ``x, info = bicgstab(A, b)``.\n" + _ARGS
