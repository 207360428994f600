"""What a distributed program does with arrays between stages, in the caller's
framework: make empty and zero arrays, take a rank's rows (a view), set a block
into zeros, copy to the host, and events and streams for ordering and timing.

NumPy (the in-process ranks of :mod:`.threads`), CuPy and PyTorch; a device
array keeps its framework: CuPy in, CuPy out. Streams are raw CUDA handles
(ints), so that one stream can order fusec's kernels, CuPy's or PyTorch's
copies and NCCL's collectives.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime.streams import cupy_stream

_FAMILIES: dict[type, str] = {}  # an array type -> its framework: a call asks for every argument


def family(array: Any) -> str:
    kind = type(array)
    found = _FAMILIES.get(kind)
    if found is None:
        module = kind.__module__.split(".")[0]
        found = module if module in ("cupy", "torch") else "numpy" if issubclass(kind, np.ndarray) else "other"
        if len(_FAMILIES) < 64:
            _FAMILIES[kind] = found
    return found


@dataclass(frozen=True)
class SideStream:
    """A stream of a program's own: its handle, and the framework's object that owns it (the
    stream is destroyed with that object, so whoever keeps the handle keeps this)."""

    handle: int
    owner: Any


class DoneEvent:
    """An event of work that has finished when it is recorded (the host's own)."""

    def record(self, stream=None) -> "DoneEvent":
        return self

    def done(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def ms_since(self, start: "DoneEvent") -> float:
        return 0.0


class NumpyArrays:
    name = "numpy"

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def copy_into(self, dst, src) -> None:
        dst[...] = src

    def embed(self, block, lo: int, length: int):
        out = np.zeros((length,) + block.shape[1:], block.dtype)
        out[lo:lo + block.shape[0]] = block
        return out

    def host(self, array) -> np.ndarray:
        return np.asarray(array)

    def current_stream(self) -> int:
        return 0

    def on(self, stream: int):
        return contextlib.nullcontext()

    def event(self, timing: bool = False) -> DoneEvent:
        return DoneEvent()

    def wait_event(self, stream: int, event) -> None:
        pass

    def new_stream(self) -> "SideStream":
        return SideStream(0, None)

    def capture(self, stream: int, issue):
        """The work ``issue()`` queues on ``stream`` captured in a CUDA graph: what launches it
        (``launch(stream)``), or None where this framework does not capture (NumPy runs everything
        at once; PyTorch's streams are left alone)."""
        return None


class CupyArrays:
    """CuPy arrays on one device."""

    name = "cupy"

    def __init__(self, device: int):
        import cupy
        self.cupy, self.device = cupy, device
        self._streams: dict = {}  # handle -> its CuPy stream (made once: every event and wait asks)

    def empty(self, shape, dtype):
        with self.cupy.cuda.Device(self.device):
            return self.cupy.empty(shape, dtype)

    def zeros(self, shape, dtype):
        with self.cupy.cuda.Device(self.device):
            return self.cupy.zeros(shape, dtype)

    def copy_into(self, dst, src) -> None:
        dst[...] = src  # on the current stream (the call's: see on())

    def embed(self, block, lo: int, length: int):
        out = self.zeros((length,) + tuple(block.shape[1:]), block.dtype)
        out[lo:lo + block.shape[0]] = block
        return out

    def host(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def current_stream(self) -> int:
        return int(self.cupy.cuda.get_current_stream().ptr)

    def stream(self, handle: int):
        if not handle:
            return self.cupy.cuda.Stream.null
        stream = self._streams.get(handle)
        if stream is None:
            stream = self._streams[handle] = cupy_stream(self.cupy, handle, self.device)
        return stream

    def on(self, stream: int):
        return self.stream(stream)

    def event(self, timing: bool = False) -> "CupyEvent":
        """An event; ``timing``: one ``ms_since`` may measure from (an event only waited on or
        watched is made without, which CUDA records for less)."""
        return CupyEvent(self, timing)

    def wait_event(self, stream: int, event: "CupyEvent") -> None:
        self.stream(stream).wait_event(event.event)

    def new_stream(self) -> "SideStream":
        with self.cupy.cuda.Device(self.device):
            stream = self.cupy.cuda.Stream(non_blocking=True)
        return SideStream(int(stream.ptr), stream)

    def capture(self, stream: int, issue):
        """:meth:`NumpyArrays.capture` by CuPy's stream capture (relaxed mode: the watchdog's
        thread keeps polling its events meanwhile); None on the legacy default stream, which
        cannot capture. A capture that fails raises once it has ended (the stream is usable again)."""
        if not stream:
            return None
        on = self.stream(stream)
        on.begin_capture()
        try:
            issue()
        except BaseException:
            try:
                on.end_capture()
            except Exception:  # the capture was invalidated by the error raised below: nothing to add
                pass
            raise
        return CupyGraph(on.end_capture(), self)


class CupyEvent:
    def __init__(self, arrays: CupyArrays, timing: bool = False):
        with arrays.cupy.cuda.Device(arrays.device):
            self.event = arrays.cupy.cuda.Event(disable_timing=not timing)
        self.arrays = arrays

    def record(self, stream: int) -> "CupyEvent":
        self.event.record(self.arrays.stream(stream))
        return self

    def done(self) -> bool:
        with self.arrays.cupy.cuda.Device(self.arrays.device):  # a watchdog thread has no device of its own
            return bool(self.event.done)

    def synchronize(self) -> None:
        self.event.synchronize()

    def ms_since(self, start: "CupyEvent") -> float:
        return float(self.arrays.cupy.cuda.get_elapsed_time(start.event, self.event))


class CupyGraph:
    """A captured graph; ``launch(stream)`` queues it on a raw stream handle."""

    def __init__(self, graph, arrays: CupyArrays):
        self.graph, self.arrays = graph, arrays

    def launch(self, stream: int) -> None:
        self.graph.launch(self.arrays.stream(stream))


class TorchArrays:
    """PyTorch tensors on one device."""

    name = "torch"

    def __init__(self, device: int):
        import torch
        self.torch, self.device = torch, device
        self.where = torch.device("cuda", device)

    def _dtype(self, dtype):
        return {np.dtype(np.float32): self.torch.float32, np.dtype(np.float64): self.torch.float64}[np.dtype(dtype)]

    def empty(self, shape, dtype):
        return self.torch.empty(shape, dtype=self._dtype(dtype), device=self.where)

    def zeros(self, shape, dtype):
        return self.torch.zeros(shape, dtype=self._dtype(dtype), device=self.where)

    def copy_into(self, dst, src) -> None:
        if self.torch.is_tensor(src):
            dst.copy_(src)
        else:  # a host number
            dst.fill_(src)

    def embed(self, block, lo: int, length: int):
        out = self.torch.zeros((length,) + tuple(block.shape[1:]), dtype=block.dtype, device=self.where)
        out[lo:lo + block.shape[0]] = block
        return out

    def host(self, array) -> np.ndarray:
        return array.detach().cpu().numpy()

    def current_stream(self) -> int:
        return int(self.torch.cuda.current_stream(self.where).cuda_stream)

    def stream(self, handle: int):
        if not handle:
            return self.torch.cuda.default_stream(self.where)
        return self.torch.cuda.ExternalStream(handle, device=self.where)

    def on(self, stream: int):
        return self.torch.cuda.stream(self.stream(stream))

    def event(self, timing: bool = False) -> "TorchEvent":
        return TorchEvent(self, timing)

    def wait_event(self, stream: int, event: "TorchEvent") -> None:
        self.stream(stream).wait_event(event.event)

    def new_stream(self) -> "SideStream":
        stream = self.torch.cuda.Stream(device=self.where)
        return SideStream(int(stream.cuda_stream), stream)

    def capture(self, stream: int, issue):
        return None  # torch.distributed's collectives are not captured here (see program.capture)


class TorchEvent:
    def __init__(self, arrays: TorchArrays, timing: bool = False):
        self.event = arrays.torch.cuda.Event(enable_timing=timing)
        self.arrays = arrays

    def record(self, stream: int) -> "TorchEvent":
        self.event.record(self.arrays.stream(stream))
        return self

    def done(self) -> bool:
        return bool(self.event.query())

    def synchronize(self) -> None:
        self.event.synchronize()

    def ms_since(self, start: "TorchEvent") -> float:
        return float(start.event.elapsed_time(self.event))


def arrays_for(name: str, device: int | None):
    """The helper of framework ``name`` on ``device``."""
    if name == "numpy":
        return NumpyArrays()
    if name == "cupy":
        return CupyArrays(device or 0)
    if name == "torch":
        return TorchArrays(device or 0)
    raise ValueError(name)
