"""Which CUDA stream a call runs on, and ordering it after its inputs' producers.

A call runs on the stream it is given (``stream=``: a CuPy stream, a
``torch.cuda.Stream``, a PyCUDA stream, or a raw ``CUstream`` as an int),
else on the current stream of its arrays' framework (CuPy's current stream,
``torch.cuda.current_stream()``), else on the legacy default stream (0).
Results are allocated by that framework with that stream current, so its
memory pool orders them on it. An input whose ``__cuda_array_interface__``
names a stream (version 3) that is not the call's is waited for on the GPU
first (an event), as the interface's specification asks of a consumer.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import ArgumentError

LEGACY, PER_THREAD = 0, 2  # CU_STREAM_LEGACY is the null handle here; CU_STREAM_PER_THREAD is 0x2


def given(stream: Any) -> int:
    """The CUstream handle of a ``stream=`` argument, or the ArgumentError naming it."""
    if isinstance(stream, bool):
        raise ArgumentError("stream", f"is {stream!r}: pass a CuPy, PyTorch or PyCUDA stream, or a CUstream as an int")
    if isinstance(stream, int):
        if stream < 0:
            raise ArgumentError("stream", f"is {stream}: a CUstream handle is not negative")
        return stream
    for attribute in ("ptr", "cuda_stream", "handle"):  # CuPy, PyTorch, PyCUDA
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int) and not isinstance(handle, bool):
            return handle
    raise ArgumentError("stream", f"is a {type(stream).__name__}: pass a CuPy, PyTorch or PyCUDA stream,"
                                  " or a CUstream as an int")


def current_getter(family: str, reference: Any):
    """A function returning the current stream of ``family`` for arrays like
    ``reference`` (cheap: a warm call asks it every time)."""
    if family == "cupy":
        import cupy
        raw = getattr(cupy.cuda.stream, "get_current_stream_ptr", None)  # C, where CuPy has it
        if raw is not None:
            return raw
        get = cupy.cuda.get_current_stream
        return lambda: get().ptr
    if family == "torch":
        import torch
        device = reference.device
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # C; current_stream() builds an object
        if raw is not None:
            index = device.index if device.index is not None else torch.cuda.current_device()
            return lambda: raw(index)
        get = torch.cuda.current_stream
        return lambda: get(device).cuda_stream
    return lambda: LEGACY


def interface_stream(cai: dict) -> int | None:
    """The stream an array's ``__cuda_array_interface__`` says its data is ordered on, as a
    handle (None: no synchronisation asked). 1 is the legacy default stream, 2 the per-thread one."""
    stream = cai.get("stream") if isinstance(cai, dict) else None
    if stream is None or isinstance(stream, bool) or not isinstance(stream, int) or stream <= 0:
        return None  # 0 is disallowed by the specification; nothing to wait for
    return LEGACY if stream == 1 else stream


class _Handle:
    """A raw CUstream offered through the CUDA stream protocol (``__cuda_stream__``)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def cupy_stream(cupy, handle: int, device: int | None = None):
    """A CuPy stream object for a raw handle made on ``device`` (None: unknown).
    ``Stream.from_external`` where CuPy has it (its ``ExternalStream`` is deprecated there);
    that records no device, so the caller uses the stream on the device it was made on, as
    fusec's callers do."""
    if hasattr(cupy.cuda.Stream, "from_external"):
        return cupy.cuda.Stream.from_external(_Handle(handle))
    return cupy.cuda.ExternalStream(handle, -1 if device is None else device)


@contextlib.contextmanager
def current(family: str, reference: Any, handle: int):
    """Make ``handle`` the current stream of ``family`` while results are allocated."""
    if family == "cupy":
        import cupy
        if cupy.cuda.get_current_stream().ptr != handle:
            with cupy.cuda.Stream.null if handle == LEGACY else cupy_stream(cupy, handle):
                yield
            return
    elif family == "torch":
        import torch
        device = reference.device
        if torch.cuda.current_stream(device).cuda_stream != handle:
            stream = (torch.cuda.default_stream(device) if handle == LEGACY
                      else torch.cuda.ExternalStream(handle, device=device))
            with torch.cuda.stream(stream):
                yield
            return
    yield
