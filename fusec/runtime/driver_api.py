"""The driver's current context, through ctypes.

PyCUDA's ``Context.get_current()`` sees only the contexts PyCUDA pushed
itself, so where CuPy or PyTorch ran (the CUDA runtime leaves the device's
primary context current on the thread) it reports none, and the whole way
(:mod:`.cuda`) pushes and pops the primary context on every call. A prepared
call (:mod:`.prepared`) asks the driver instead (``cuCtxGetCurrent``, about
0.5 µs on the H100's host, against 0.8 to 1.3 µs for PyCUDA's push and pop)
and pushes the primary context only when there really is none.
This module needs libcuda only when its functions run.
"""

from __future__ import annotations

import ctypes

from ..errors import DriverError, GPUUnavailableError

_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        try:
            # PyDLL: the calls are short and keep the GIL. A CDLL call releases
            # and retakes it, and where other threads want it (JAX's, PyTorch's)
            # retaking it can cost more than the call.
            _LIB = ctypes.PyDLL("libcuda.so.1")
        except OSError as exc:
            raise GPUUnavailableError(f"the CUDA driver library could not be loaded: {exc}") from None
    return _LIB


def check(result: int, call: str) -> None:
    """Raise :class:`DriverError` naming the driver's error when ``result`` is not CUDA_SUCCESS."""
    if result:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {(name.value or b'CUDA error').decode()} ({result})")


_CURRENT = ctypes.c_void_p()  # out-parameter of cuCtxGetCurrent, reused


def current_context() -> int:
    """The driver's current context on this thread (0 when none). The CUDA
    runtime makes the primary context current where CuPy or PyTorch ran, which
    PyCUDA's own ``Context.get_current()`` does not see."""
    check(_lib().cuCtxGetCurrent(ctypes.byref(_CURRENT)), "cuCtxGetCurrent")
    return _CURRENT.value or 0


def push_context(handle: int) -> None:
    check(_lib().cuCtxPushCurrent_v2(ctypes.c_void_p(handle)), "cuCtxPushCurrent")


def pop_context() -> None:
    check(_lib().cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent")
