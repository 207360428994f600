"""The few CUDA driver calls a warm program call makes, through ctypes.

A prepared call (:mod:`.prepared`) launches through here rather than PyCUDA.
PyCUDA's launch converts its grid, its block and a packed argument buffer from
Python objects on every call, about 4 µs from Python on the H100's host. A
``cuLaunchKernel`` bound once, whose argument slots stay where they are and
are rewritten in place, costs about half a microsecond of Python on top of
the driver's own time. At n = 4096 that host time is most of a call.

Everything else (loading for the whole way, memory, events) stays with PyCUDA
(:mod:`.cuda`). This module needs libcuda only when its functions run.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Callable, Sequence

from ..errors import GPUUnavailableError, LaunchError

_LIB = None


def _lib():
    global _LIB
    if _LIB is None:
        try:
            _LIB = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise GPUUnavailableError(f"the CUDA driver library could not be loaded: {exc}") from None
    return _LIB


def check(result: int, call: str) -> None:
    """Raise :class:`LaunchError` naming the driver's error when ``result`` is not CUDA_SUCCESS."""
    if result:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(result, ctypes.byref(name))
        raise LaunchError(f"{call} failed: {(name.value or b'CUDA error').decode()} ({result})")


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


class Module:
    """A cubin loaded into the current context through the driver API, for its
    function handles (PyCUDA's modules do not expose theirs)."""

    def __init__(self, cubin: bytes):
        handle = ctypes.c_void_p()
        check(_lib().cuModuleLoadData(ctypes.byref(handle), cubin), "cuModuleLoadData")
        self.handle, self.context = handle, current_context()

    def function(self, name: str) -> ctypes.c_void_p:
        function = ctypes.c_void_p()
        check(_lib().cuModuleGetFunction(ctypes.byref(function), self.handle, name.encode()),
              f"cuModuleGetFunction({name})")
        return function

    def __del__(self):
        # In its own context; at interpreter exit the context may be gone
        # already, and an unload that fails then has nothing left to free.
        try:
            push_context(self.context)
            _lib().cuModuleUnload(self.handle)
            pop_context()
        except Exception:  # noqa: BLE001  (a destructor must not raise)
            pass


SLOT_BYTES = 8  # every kernel parameter fusec generates fits in 8 bytes

# struct codes of PyCUDA's parameter formats (cuda.parameter_format), little-endian, unpadded
_SLOT_CODE = {"P": "<Q", "q": "<q", "i": "<i", "f": "<f", "d": "<d"}


class Launch:
    """One kernel launch bound once: ``cuLaunchKernel`` with its function,
    grid and block fixed, and a parameter array pointing into ``SLOT_BYTES``
    slots of one buffer. A call rewrites the slots that change (outputs,
    scalars) and launches. The driver copies the parameters at launch, so the
    slots are free to rewrite for the next one."""

    def __init__(self, function, grid: int, block: int, parameter_format: str, values: Sequence,
                 changing: Sequence[int], launch: Callable | None = None):
        count = len(parameter_format)
        self.slots = (ctypes.c_uint64 * max(count, 1))()
        base = ctypes.addressof(self.slots)
        self.parameters = (ctypes.c_void_p * max(count, 1))(*[base + SLOT_BYTES * i for i in range(count)])
        self.packers = [struct.Struct(_SLOT_CODE[code]) for code in parameter_format]
        for index, value in enumerate(values):
            self.write(index, value)
        # (offset, packer) of each slot a call rewrites, in the order of its values
        self.changing = tuple((SLOT_BYTES * i, self.packers[i].pack_into) for i in changing)
        # without argtypes ctypes converts the ints as C ints (grid and block
        # fit) and passes the arrays by address, its cheapest call
        self.launch = functools.partial(launch or _lib().cuLaunchKernel, function, grid, 1, 1, block, 1, 1,
                                        0, None, self.parameters, None)

    def write(self, index: int, value) -> None:
        self.packers[index].pack_into(self.slots, SLOT_BYTES * index, value)

    def __call__(self, values: Sequence) -> None:
        """Launch with ``values`` in the changing slots, in their order."""
        slots = self.slots
        for (offset, pack_into), value in zip(self.changing, values):
            pack_into(slots, offset, value)
        result = self.launch()
        if result:
            check(result, "cuLaunchKernel")
