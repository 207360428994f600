"""The few array operations a solve needs besides fusec's programs, one class per framework:
NumPy (host; the tests drive the solver loop with it), CuPy and PyTorch (the GPU).

Everything here is a copy, a matrix-vector product for the first residual, or a read of one
number; ``graph`` captures a function's launches in a CUDA graph and returns what replays it.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

BLOCK_ELEMENTS = 1 << 22  # entries of A in a block of rows the framework's survey compares with 0 at once


class Survey(NamedTuple):
    """What the argument checks read of a solve's arrays, at once."""

    b_finite: float  # 1.0 or 0.0
    x0_finite: float  # 1.0 or 0.0; x0 None is finite
    A_sum: float  # float64: not finite where A holds NaN or infinity
    bb: float  # ||b||^2 in float64
    zero_rows: int  # rows of A whose entries are all 0 (NaN is not 0)
    first_zero_row: int  # -1: none
    zero_columns: int
    first_zero_column: int  # -1: none


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


_DTYPE_NAMES: dict = {}  # a dtype object -> its name (NumPy's str() of a dtype takes microseconds)


def dtype_name(a) -> str:
    """``"float32"``, ``"float64"``...: NumPy's and CuPy's name of ``a``'s dtype (PyTorch's without ``torch.``)."""
    dtype = a.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


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

    def copy_pairs(self, pairs) -> None:
        """``dst[...] = src`` for each ``(dst, src)`` of ``pairs``."""
        for dst, src in pairs:
            self.copy_into(dst, src)

    def matvec(self, A, x):
        return A @ x

    def squared_norm(self, a) -> float:
        """``a @ a`` in float64 (a read: the host waits)."""
        return self.read_all([self.squared_norm_here(a)])[0]

    def squared_norm_here(self, a):
        """``a @ a`` in float64, as a 0-d array where ``a`` is (not read)."""
        a = self.np.asarray(a, dtype=self.np.float64)
        return a @ a

    def sum_here(self, a):
        """The float64 sum of ``a``, as a 0-d array where ``a`` is (not read)."""
        return self.np.sum(a, dtype=self.np.float64)

    def all_finite_here(self, a):
        """Whether every element of ``a`` is finite, as a 0-d array where ``a`` is (not read)."""
        return self.np.isfinite(a).all()

    def read_all(self, values) -> list[float]:
        """The 0-d arrays ``values`` as floats, in one read (the host waits once)."""
        return [float(v) for v in values]

    def survey(self, A, b, x0) -> Survey:
        """The :class:`Survey` of a solve's arrays by the framework's reductions: the numbers in
        one read, then whether each row and column of A has a non-zero entry (two more reads
        of n flags on a GPU)."""
        values = [self.all_finite_here(b), self.all_finite_here(b if x0 is None else x0),
                  self.sum_here(A), self.squared_norm_here(b)]
        numbers = self.read_all(values)
        rows, columns = (self.download(flags) for flags in self.nonzero_lines_here(A))
        return Survey(*numbers, *_zeros(rows), *_zeros(columns))

    def survey_vectors(self, b, x0) -> Survey:
        """The :class:`Survey` of ``b`` and ``x0`` alone, in one read (``check_finite=False``): A
        is not read, so its sum counts as finite and none of its lines as zero."""
        b_finite, x0_finite, bb = self.read_all([self.all_finite_here(b), self.all_finite_here(b if x0 is None else x0),
                                                 self.squared_norm_here(b)])
        return Survey(b_finite, x0_finite, 0.0, bb, 0, -1, 0, -1)

    def launch_survey(self, A, b):
        """The survey of a solve from x = 0 (``A`` None: of ``b`` alone), not read where that
        can wait: what :meth:`read_survey` reads and a GPU loop's start takes
        (:meth:`.device_loop.DeviceLoop.start`). On the host, the :class:`Survey` itself."""
        return self.survey(A, b, None) if A is not None else self.survey_vectors(b, None)

    def read_survey(self, surveyed, n: int) -> Survey:
        """The :class:`Survey` of what :meth:`launch_survey` gave (a read on a GPU)."""
        return surveyed

    def nonzero_lines_here(self, A):
        """Whether each row and each column of A has an entry that is not 0 (NaN is not), two
        boolean vectors where A is: by blocks of rows, so that no temporary is of A's size."""
        n = A.shape[0]
        step = max(1, BLOCK_ELEMENTS // n)
        rows, columns = [], None
        for top in range(0, n, step):
            nonzero = A[top:top + step] != 0
            rows.append(nonzero.any(1))
            columns = nonzero.any(0) if columns is None else columns | nonzero.any(0)
        return self.concatenate(rows), columns

    def concatenate(self, parts):
        return self.np.concatenate(parts)

    def contiguous(self, a) -> bool:
        return bool(a.flags.c_contiguous)

    def read(self, zero_d) -> float:
        return float(zero_d)

    def address(self, a) -> int:
        """Where ``a``'s data starts (what a captured graph holds)."""
        return a.__array_interface__["data"][0]

    def placement(self, a) -> tuple:
        """Where ``a``'s data starts and its strides: what a graph captured on it holds of it
        (the same memory read with other strides is another matrix to the graph)."""
        return self.address(a), tuple(a.strides)

    def zeros_like(self, a):
        return self.np.zeros_like(a)

    def graph(self, function):
        return None

    def stream(self):
        return contextlib.nullcontext()

    def stream_handle(self) -> int:
        """The raw CUstream the solve's work goes to (0 on the host)."""
        return 0

    def upload(self, values, like):
        """A new array on ``like``'s device holding the NumPy array ``values``."""
        return self.np.array(values, copy=True)

    def upload_into(self, dst, values) -> None:
        """Copy the NumPy array ``values`` into ``dst``, in the solve's stream order."""
        dst[...] = values

    def download(self, a):
        """``a`` as a NumPy array (a read: the host waits for the stream)."""
        return self.np.array(a, copy=True)


def _zeros(nonzero) -> tuple[int, int]:
    """How many of the host booleans ``nonzero`` are False, and the first (-1: none)."""
    zero = ~nonzero
    count = int(zero.sum())
    return count, int(zero.argmax()) if count else -1


class _DeviceArrays(NumpyArrays):
    """What CuPy's and PyTorch's arrays share: the survey by one kernel of :mod:`.kernels`."""

    def survey(self, A, b, x0) -> Survey:
        """:meth:`NumpyArrays.survey` by one kernel and one read, where the kernels run here
        and the vectors are contiguous."""
        if self._by_kernel(b, x0):
            from . import kernels
            return Survey(*kernels.survey(self, A, b, x0, dtype_name(b)))
        return super().survey(A, b, x0)

    def survey_vectors(self, b, x0) -> Survey:
        """:meth:`NumpyArrays.survey_vectors` by the survey's kernel without A (one launch, one
        read: the framework's reductions took longer than the whole survey at n = 1024)."""
        if self._by_kernel(b, x0):
            from . import kernels
            return Survey(*kernels.survey(self, None, b, x0, dtype_name(b)))
        return super().survey_vectors(b, x0)

    def launch_survey(self, A, b):
        """The survey's kernel launched, unread: its output array (``b`` contiguous, the
        kernels running here, as wherever a GPU loop runs)."""
        from . import kernels
        return kernels.launch_survey(self, A, b, None, dtype_name(b))

    def read_survey(self, surveyed, n: int) -> Survey:
        from . import kernels
        return Survey(*kernels.read_survey(self, surveyed, n))

    def _by_kernel(self, b, x0) -> bool:
        """Whether the survey's kernel can read ``b`` and ``x0``: contiguous, the kernels running here."""
        from . import kernels
        return self.contiguous(b) and (x0 is None or self.contiguous(x0)) and kernels.unsupported() is None


    def copy_pairs(self, pairs) -> None:
        """:meth:`NumpyArrays.copy_pairs` in one launch on the current stream where the arrays
        are contiguous and of one size (a solve's state vectors), each copy costing the host
        some microseconds otherwise."""
        from . import kernels
        if (len(pairs) > 1 and len({dst.nbytes for dst, _ in pairs}) == 1 and kernels.unsupported() is None
                and all(self.contiguous(a) for pair in pairs for a in pair)):
            kernels.copy_arrays(self, pairs, self.stream_handle())
        else:
            super().copy_pairs(pairs)


class CupyArrays(_DeviceArrays):
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

    def squared_norm_here(self, a):
        a = a.astype(self.np.float64)
        return a @ a

    def read_all(self, values) -> list[float]:
        return self.np.stack([self.np.asarray(v, dtype=self.np.float64) for v in values]).get().tolist()

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

    def stream_handle(self) -> int:
        return self.np.cuda.get_current_stream().ptr

    def upload(self, values, like):
        with like.device:
            return self.np.asarray(values)

    def upload_into(self, dst, values) -> None:
        dst.set(values, stream=self.np.cuda.get_current_stream())

    def download(self, a):
        return a.get()

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


class TorchArrays(_DeviceArrays):
    """PyTorch CUDA tensors; graphs by ``torch.cuda.graph``."""

    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        self.np = torch
        self._stream = None

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

    def placement(self, a) -> tuple:
        return a.data_ptr(), tuple(a.stride())

    def copy_into(self, dst, src) -> None:
        dst.copy_(src)

    def squared_norm_here(self, a):
        a = a.double()
        return a @ a

    def sum_here(self, a):
        return a.sum(dtype=self.torch.float64)

    def all_finite_here(self, a):
        return self.torch.isfinite(a).all()

    def concatenate(self, parts):
        return self.torch.cat(parts)

    def read_all(self, values) -> list[float]:
        return self.torch.stack([v.to(self.torch.float64) for v in values]).cpu().tolist()

    def contiguous(self, a) -> bool:
        return bool(a.is_contiguous())

    def read(self, zero_d) -> float:
        return float(zero_d.item())

    @contextlib.contextmanager
    def stream(self):
        """A stream of the solve's own (a graph cannot be captured on the legacy default
        stream), after the caller's current stream's work and before its later work."""
        cuda = self.torch.cuda
        outer = cuda.current_stream()
        if self._stream is None:
            self._stream = cuda.Stream()
        self._stream.wait_stream(outer)
        try:
            with cuda.stream(self._stream):
                yield self._stream
        finally:
            outer.wait_stream(self._stream)

    def stream_handle(self) -> int:
        return self.torch.cuda.current_stream().cuda_stream

    def upload(self, values, like):
        return self.torch.as_tensor(values, device=like.device)

    def upload_into(self, dst, values) -> None:
        dst.copy_(self.torch.from_numpy(values), non_blocking=False)

    def download(self, a):
        return a.cpu().numpy()

    def graph(self, function):
        graph = self.torch.cuda.CUDAGraph()
        with self.torch.cuda.graph(graph):
            function()
        return graph.replay


def arrays_for(framework: str):
    return {"numpy": NumpyArrays, "cupy": CupyArrays, "torch": TorchArrays}[framework]()
