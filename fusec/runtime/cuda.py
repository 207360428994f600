"""The only module that talks to the GPU (through PyCUDA).

fusec imports, checks and generates code without PyCUDA; this module is
imported when a program first runs. Programs run in the CUDA context current
on the calling thread (CuPy and PyTorch make the device's primary context
current; ``pycuda.autoinit`` makes its own). With none current, the primary
context of device ``$FUSEC_DEVICE`` (default 0) is retained and pushed for
the call, so device arrays of CuPy and PyTorch are usable without copies.
"""

from __future__ import annotations

import contextlib
import os
import statistics

import numpy as np

from ..errors import GPUUnavailableError

NAN_PATTERN = 0x7FF80000  # a NaN as float32, and (twice) as float64


def driver():
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise GPUUnavailableError(
            "running a program needs PyCUDA and an NVIDIA GPU: pip install -e '.[gpu]'"
            f" ({exc})") from None
    try:
        cuda.init()
    except Exception as exc:  # pycuda.driver.Error and friends
        raise GPUUnavailableError(f"CUDA could not be initialised: {exc}") from None
    return cuda


def gpu_available() -> bool:
    try:
        return driver().Device.count() > 0
    except GPUUnavailableError:
        return False


@contextlib.contextmanager
def context():
    """The context to run in: the current one, or the device's primary one."""
    cuda = driver()
    current = cuda.Context.get_current()
    if current is not None:
        yield current
        return
    device = cuda.Device(int(os.environ.get("FUSEC_DEVICE", "0")))
    primary = device.retain_primary_context()
    primary.push()
    try:
        yield primary
    finally:
        cuda.Context.pop()


def context_key(ctx) -> int:
    """What identifies a context across calls: PyCUDA hands out a new wrapper
    object each time it is asked for the current one, so the wrapper itself
    is no key (keyed on it, every call of a program loaded its module and
    allocated its buffers again: ~0.5 ms)."""
    return int(ctx.handle)


def arch_of(ctx) -> str:
    major, minor = ctx.get_device().compute_capability()
    return f"sm_{major}{minor}"


def device_name(ctx) -> str:
    return ctx.get_device().name()


class DeviceBuffer:
    """Device memory owned by fusec (workspaces, intermediates, staging)."""

    def __init__(self, nbytes: int):
        self.nbytes = max(int(nbytes), 4)
        self.allocation = driver().mem_alloc(self.nbytes)

    @property
    def pointer(self) -> int:
        return int(self.allocation)


def fill_nan(pointer: int, nbytes: int) -> None:
    driver().memset_d32(pointer, NAN_PATTERN, nbytes // 4)


def fill_zero(pointer: int, nbytes: int) -> None:
    driver().memset_d32(pointer, 0, nbytes // 4)


def upload(pointer: int, array: np.ndarray) -> None:
    driver().memcpy_htod(pointer, array)


def download(array: np.ndarray, pointer: int) -> None:
    driver().memcpy_dtoh(array, pointer)


def allocate_like(family: str, shape: tuple[int, ...], dtype: np.dtype, reference):
    """A new device array of the caller's framework; returns (array, pointer)."""
    if family == "torch":
        import torch
        tdtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[dtype]
        array = torch.empty(shape, dtype=tdtype, device=reference.device)
        return array, array.data_ptr()
    if family == "cupy":
        import cupy
        with cupy.cuda.Device(reference.device.id):
            array = cupy.empty(shape, dtype=dtype)
        return array, array.data.ptr
    import pycuda.gpuarray as gpuarray
    array = gpuarray.empty(shape, dtype)
    return array, int(array.gpudata)


class Loaded:
    """The program's kernels loaded into one context, prepared for launching."""

    def __init__(self, cubin: bytes, kernels):
        cuda = driver()
        self.module = cuda.module_from_buffer(cubin)
        self.functions = {}
        for kernel in kernels:
            function = self.module.get_function(kernel.name)
            function.prepare(parameter_format(kernel))
            self.functions[kernel.name] = function

    def launch(self, kernel, grid: int, args: list, stream=None) -> None:
        self.functions[kernel.name].prepared_async_call(
            (grid, 1, 1), (kernel.block, 1, 1), stream, *args)


def parameter_format(kernel) -> str:
    """struct-module format of the kernel's parameters, for prepared calls."""
    codes = {"in": "P", "out": "P", "workspace": "P", "counters": "P", "scalar_ptr": "P",
             "scalar": "f" if kernel.dtype == "float32" else "d", "vec_ok": "i"}
    out = []
    for arg in kernel.args:
        if arg.role == "size":
            out.append("q" if "long long" in arg.decl else "i")
        else:
            out.append(codes[arg.role])
    return "".join(out)


class Timer:
    """CUDA events around a region of the default stream; milliseconds."""

    def __init__(self):
        cuda = driver()
        self.start, self.end = cuda.Event(), cuda.Event()

    def __enter__(self):
        self.start.record()
        return self

    def __exit__(self, *exc):
        self.end.record()
        self.end.synchronize()

    @property
    def ms(self) -> float:
        return self.start.time_till(self.end)


TIMING_KERNELS = """\
extern "C" __global__ void fusec_empty() {}
extern "C" __global__ void fusec_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
"""
SPIN_CYCLES = 100_000  # ~60 us: longer than the host takes to queue what follows


class GpuClock:
    """Times launches as the GPU runs them. A spinning kernel goes first, so the
    start event fires only once the work after it is queued: the host's launch
    overhead (several microseconds from Python) is not counted."""

    def __init__(self, driver, arch: str):
        from .. import nvcc
        module = driver.module_from_buffer(nvcc.compile_cubin(TIMING_KERNELS, arch=arch).cubin)
        self.driver = driver
        self.spin = module.get_function("fusec_spin")
        self.spin.prepare("q")
        self.empty = module.get_function("fusec_empty")
        self.empty.prepare("")

    def seconds(self, launch, count: int = 1) -> float:
        """Seconds from the start of ``launch()`` (called ``count`` times) to its end."""
        start, end = self.driver.Event(), self.driver.Event()
        self.spin.prepared_call((1, 1, 1), (32, 1, 1), SPIN_CYCLES)
        start.record()
        for _ in range(count):
            launch()
        end.record()
        end.synchronize()
        return start.time_till(end) * 1e-3 / count

    def launch_seconds(self) -> float:
        """What one more kernel in a stream costs: empty kernels back to back."""
        empty = lambda: self.empty.prepared_call((1, 1, 1), (32, 1, 1))  # noqa: E731
        return statistics.median(self.seconds(empty, 10) for _ in range(20))


_CLOCKS: dict = {}


def gpu_clock(ctx) -> GpuClock:
    """The context's clock (its two kernels compiled and loaded once)."""
    key = context_key(ctx)
    if key not in _CLOCKS:
        _CLOCKS[key] = GpuClock(driver(), arch_of(ctx))
    return _CLOCKS[key]


def synchronize() -> None:
    driver().Context.synchronize()
