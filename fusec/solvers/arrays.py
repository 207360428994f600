"""The few array operations a solve needs besides fusec's programs, one class per framework:
NumPy (host; the tests drive the solver loop with it), CuPy and PyTorch (the GPU).

Everything here is a copy, a matrix-vector product for the first residual, or a read of one
number; ``graph`` captures a function's launches in a CUDA graph and returns what replays it.
"""

from __future__ import annotations

import contextlib
import math


def framework_of(obj) -> str | None:
    """``"numpy"``, ``"cupy"``, ``"torch"``, or None for anything else."""
    module = type(obj).__module__.split(".")[0]
    if module == "numpy" and hasattr(obj, "__array_interface__"):
        return "numpy"
    if module == "cupy":
        return "cupy"
    if module == "torch" and hasattr(obj, "is_cuda"):
        return "torch"
    return None


class NumpyArrays:
    """Host arrays: no graphs, every read immediate."""

    name = "numpy"

    def __init__(self):
        import numpy
        self.np = numpy

    def empty_like(self, a):
        return self.np.empty_like(a)

    def scalar_like(self, a):
        return self.np.zeros((), dtype=a.dtype)

    def copy(self, a):
        return self.np.array(a, copy=True)

    def copy_into(self, dst, src) -> None:
        dst[...] = src

    def matvec(self, A, x):
        return A @ x

    def squared_norm(self, a) -> float:
        a = self.np.asarray(a, dtype=self.np.float64)
        return float(a @ a)

    def read(self, zero_d) -> float:
        return float(zero_d)

    def address(self, a) -> int:
        """Where ``a``'s data starts (what a captured graph holds)."""
        return a.__array_interface__["data"][0]

    def finite(self, a) -> bool:
        return bool(self.np.isfinite(a).all())

    def finite_sum(self, a) -> bool:
        return math.isfinite(float(self.np.sum(a, dtype=self.np.float64)))

    def zeros_like(self, a):
        return self.np.zeros_like(a)

    def graph(self, function):
        return None

    def stream(self):
        return contextlib.nullcontext()


class CupyArrays(NumpyArrays):
    """CuPy arrays; graphs by stream capture on a stream of the solve's own."""

    name = "cupy"

    def __init__(self):
        import cupy
        self.np = cupy
        self._stream = None

    def copy(self, a):
        return a.copy()

    def address(self, a) -> int:
        return a.data.ptr

    def squared_norm(self, a) -> float:
        a = a.astype(self.np.float64)
        return float(a @ a)

    def finite_sum(self, a) -> bool:
        return math.isfinite(float(self.np.sum(a, dtype=self.np.float64)))

    @contextlib.contextmanager
    def stream(self):
        """A stream of the solve's own (capture needs one other than the legacy default), after
        the caller's current stream's work and before its later work."""
        cuda = self.np.cuda
        outer = cuda.get_current_stream()
        if self._stream is None:
            self._stream = cuda.Stream(non_blocking=True)
        self._stream.wait_event(outer.record())
        try:
            with self._stream:
                yield self._stream
        finally:
            outer.wait_event(self._stream.record())

    def graph(self, function):
        stream = self.np.cuda.get_current_stream()
        if stream.ptr == 0 or not hasattr(stream, "begin_capture"):
            return None
        stream.begin_capture()
        try:
            function()
        finally:
            captured = stream.end_capture()
        return lambda: captured.launch(stream)


class TorchArrays(NumpyArrays):
    """PyTorch CUDA tensors; graphs by ``torch.cuda.graph``."""

    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        self.np = torch

    def empty_like(self, a):
        return self.torch.empty_like(a)

    def scalar_like(self, a):
        return self.torch.zeros((), dtype=a.dtype, device=a.device)

    def zeros_like(self, a):
        return self.torch.zeros_like(a)

    def copy(self, a):
        return a.clone()

    def address(self, a) -> int:
        return a.data_ptr()

    def copy_into(self, dst, src) -> None:
        dst.copy_(src)

    def squared_norm(self, a) -> float:
        a = a.double()
        return float(a @ a)

    def read(self, zero_d) -> float:
        return float(zero_d.item())

    def finite(self, a) -> bool:
        return bool(self.torch.isfinite(a).all().item())

    def finite_sum(self, a) -> bool:
        return math.isfinite(float(a.sum(dtype=self.torch.float64).item()))

    def stream(self):
        return contextlib.nullcontext()

    def graph(self, function):
        graph = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(graph):
            function()
        return graph.replay


def arrays_for(framework: str):
    return {"numpy": NumpyArrays, "cupy": CupyArrays, "torch": TorchArrays}[framework]()
