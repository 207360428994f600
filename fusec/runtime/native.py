"""fusec's launch binding: the C extension ``fusec.runtime._fastcall`` (``fastcall.c``).

PyCUDA launches only on streams PyCUDA made, so a kernel could not follow a
CuPy or PyTorch stream, nor be captured in their CUDA graphs, through it. The
extension launches on any stream (``cuLaunchKernel`` with the packed
parameters), loads each program's cubin once, asks the driver's occupancy
calculator, pushes and pops contexts, and orders one stream after another;
its ``FastCall`` is a warm program call done in C (:mod:`.prepared`).

It is built with the package (``pip install .`` or ``pip install -e .``; from a
bare source tree, ``python setup.py build_ext --inplace``) and needs no CUDA to
build or import: it opens the driver with dlopen when a program first runs.
"""

from __future__ import annotations

import functools
import importlib

from ..errors import DriverError, GPUUnavailableError

HOW_TO_BUILD = ("fusec's C extension (fusec.runtime._fastcall) is not built: install the package"
                " (pip install . or pip install -e .), or run python setup.py build_ext --inplace in the source tree")


@functools.lru_cache(maxsize=None)
def _load():
    try:
        _fastcall = importlib.import_module(f"{__package__}._fastcall")
    except ImportError as exc:
        return None, f"{HOW_TO_BUILD} ({exc})"
    _fastcall.set_error_class(DriverError)
    return _fastcall, None


def fastcall():
    """The extension module, or None where it is not built (see :func:`unavailable`)."""
    return _load()[0]


def unavailable() -> str | None:
    """Why :func:`fastcall` returns None; None when it does not."""
    return _load()[1]


def require():
    """The extension module; :class:`~fusec.errors.GPUUnavailableError` saying how to build it where it is not."""
    module, reason = _load()
    if module is None:
        raise GPUUnavailableError(reason)
    return module
