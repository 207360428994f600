"""The driver's current context, and what PyCUDA does not give, through ctypes.

PyCUDA's ``Context.get_current()`` sees only the contexts PyCUDA pushed
itself, so where CuPy or PyTorch ran (the CUDA runtime leaves the device's
primary context current on the thread) it reports none, and the whole way
(:mod:`.cuda`) pushes and pops the primary context on every call. A prepared
call (:mod:`.prepared`) asks the driver instead (``cuCtxGetCurrent``, about
0.5 µs on the H100's host, against 0.8 to 1.3 µs for PyCUDA's push and pop)
and pushes the primary context only when there really is none.

PyCUDA hands out no CUfunction, and has no occupancy calculator: fusec's own
copy of a program's module (``cuda.Loaded.own_function``) is loaded by the C
extension, or here where that does not build, and its functions' dynamic
shared memory allowance and occupancy are set and asked for here.

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


# ------------------------------------------------------------------ fusec's own module copy
# With current_context, the same four calls as the C extension's (native.py), which loads
# the copy where it builds.

def load_module(image: bytes) -> int:
    """Load a cubin into the current context; its CUmodule as an int."""
    module = ctypes.c_void_p()
    check(_lib().cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
    return module.value or 0


def get_function(module: int, name: str) -> int:
    function = ctypes.c_void_p()
    check(_lib().cuModuleGetFunction(ctypes.byref(function), ctypes.c_void_p(module), name.encode()),
          "cuModuleGetFunction")
    return function.value or 0


def unload_module(module: int) -> None:
    check(_lib().cuModuleUnload(ctypes.c_void_p(module)), "cuModuleUnload")


MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def set_max_dynamic_shared(function: int, nbytes: int) -> None:
    """Let launches of ``function`` (a CUfunction) pass up to ``nbytes`` of
    dynamic shared memory: past 48 KB a launch fails without this leave."""
    check(_lib().cuFuncSetAttribute(ctypes.c_void_p(function), ctypes.c_int(MAX_DYNAMIC_SHARED_SIZE_BYTES),
                                    ctypes.c_int(nbytes)), "cuFuncSetAttribute")


def resident_blocks(function: int, block: int, shared: int) -> int:
    """How many blocks of ``function`` of ``block`` threads, each with ``shared``
    bytes of dynamic shared memory, one SM holds at once (the driver's occupancy
    calculator: registers, shared memory, threads and its blocks-per-SM limit)."""
    count = ctypes.c_int()
    check(_lib().cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(count), ctypes.c_void_p(function), ctypes.c_int(block), ctypes.c_size_t(shared)),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    return count.value
