"""Where fusec talks to the GPU: PyCUDA for contexts, memory and timing events;
launches, module loading and the occupancy calculator through fusec's C
extension (:mod:`.native`), which launches on any stream.

fusec imports, checks and generates code without PyCUDA; this module is
imported when a program first runs. Programs run in the CUDA context current
on the calling thread (``pycuda.autoinit`` makes its own). PyCUDA sees only
the contexts it pushed itself, so with none of those (where CuPy or PyTorch
ran, the runtime made the device's primary context current without PyCUDA
knowing) the whole way pushes the primary context of device ``$FUSEC_DEVICE``
(default 0) and pops it after, so device arrays of CuPy and PyTorch are usable
without copies; a prepared call asks the driver and pushes only when no
context at all is current. (Pushing and leaving it would save about a
microsecond a call, but PyCUDA aborts the process at exit when its context
stack is not empty.)
"""

from __future__ import annotations

import dataclasses
import statistics
import struct
import time
from typing import Any, Callable

import numpy as np

from ..errors import GPUUnavailableError, ResidencyError
from ..target import device_index
from . import native

NAN_PATTERN = 0x7FF80000  # a NaN as float32, and (twice) as float64


_DRIVER = None  # pycuda.driver, once initialised


def driver():
    global _DRIVER
    if _DRIVER is not None:
        return _DRIVER
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
    _DRIVER = cuda
    return cuda


def gpu_available() -> bool:
    try:
        return driver().Device.count() > 0
    except GPUUnavailableError:
        return False


_PRIMARY: dict = {}  # device index -> its primary context, retained once


def primary_context():
    """The primary context of device ``$FUSEC_DEVICE``: retained once and kept
    (retaining and releasing it on every call was a cost of every call)."""
    index = device_index()
    if index not in _PRIMARY:
        _PRIMARY[index] = driver().Device(index).retain_primary_context()
    return _PRIMARY[index]


_PRIMARY_HANDLES: dict = {}  # device index -> its primary context's CUcontext


def primary_handle() -> int:
    """The primary context's CUcontext, as an int (a prepared call pushes it
    through the driver API when no context is current)."""
    index = device_index()
    if index not in _PRIMARY_HANDLES:
        _PRIMARY_HANDLES[index] = int(primary_context().handle)
    return _PRIMARY_HANDLES[index]


class context:
    """``with context() as ctx``: the current context, or the primary one
    pushed for the block's duration. A class, not a generator: a warm program
    call enters one, and contextlib's machinery cost a microsecond of it."""

    __slots__ = ("pushed",)

    def __enter__(self):
        drv = driver()
        current = drv.Context.get_current()
        self.pushed = current is None
        if self.pushed:
            current = primary_context()
            current.push()
        return current

    def __exit__(self, *exc):
        if self.pushed:
            _DRIVER.Context.pop()


def context_key(ctx) -> int:
    """What identifies a context across calls: PyCUDA hands out a new wrapper
    object each time it is asked for the current one, so the wrapper itself
    is no key (keyed on it, every call of a program loaded its module and
    allocated its buffers again)."""
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
    return allocator(family, dtype, reference)(shape)


@dataclasses.dataclass(frozen=True)
class Allocator:
    """New device arrays of one framework: ``make(shape, *args, **kwargs)``, and
    the steps from an array to its address (attributes; ``"name()"`` calls a
    method). Spelled out, not a closure, so the C extension can make them too.

    ``sole``: the steps from an array to each object that holds its memory,
    where the framework has them (CuPy: its MemoryPointer and that one's
    Memory; a view or an array made on the same memory holds one of them).
    When nothing refers to an array and each of these is held by its parent
    alone, nothing else can reach the memory, and a warm call may write that
    result again (fastcall.c). PyTorch's views hold the storage, not the
    tensor, out of Python's sight: no steps, no writing again."""

    make: Callable
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    pointer: tuple[str, ...] = ()
    sole: tuple[tuple[str, ...], ...] = ()

    def __call__(self, shape: tuple[int, ...]) -> tuple[Any, int]:
        array = self.make(shape, *self.args, **self.kwargs)
        return array, pointer_of(array, self.pointer)


def pointer_of(array, steps: tuple[str, ...]) -> int:
    value = array
    for step in steps:
        value = getattr(value, step[:-2])() if step.endswith("()") else getattr(value, step)
    return int(value)


CUPY_HOLDERS = (("data",), ("data", "mem"))  # a cupy.ndarray's MemoryPointer, and its Memory


def allocator(family: str, dtype: np.dtype, reference) -> Allocator:
    """New device arrays of the caller's framework, on the device of
    ``reference`` (an input of that framework)."""
    if family == "torch":
        import torch
        tdtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[dtype]
        return Allocator(torch.empty, kwargs={"dtype": tdtype, "device": reference.device}, pointer=("data_ptr()",))
    if family == "cupy":
        import cupy
        device_id = reference.device.id
        if cupy.cuda.runtime.getDevice() == device_id:
            # calls are prepared per context, and the context decides the current device
            return Allocator(cupy.ndarray, (dtype,), pointer=("data", "ptr"), sole=CUPY_HOLDERS)

        def on_device(shape):
            with cupy.cuda.Device(device_id):
                return cupy.ndarray(shape, dtype)
        return Allocator(on_device, pointer=("data", "ptr"), sole=CUPY_HOLDERS)
    import pycuda.gpuarray as gpuarray

    def in_a_context(shape):
        # PyCUDA allocates in the context on its own stack, which a prepared call's context
        # (current through the driver: pushed by fusec's extension, or left by CuPy or JAX) is
        # not on: without one pushed the PyCUDA way, a repeated call on arrays of another
        # framework (a bare __cuda_array_interface__) failed with "no currently active context"
        with context():
            return gpuarray.empty(shape, dtype)
    return Allocator(in_a_context, pointer=("gpudata", "__int__()"))


def check_resident(name: str, grid: int, per_sm: int, sms: int, block: int, shared: int) -> None:
    """Raise :class:`ResidencyError` unless the ``grid`` blocks of kernel ``name``
    fit on the GPU at once: ``per_sm`` blocks (of ``block`` threads and ``shared``
    bytes of dynamic shared memory, by the driver's occupancy) on each of ``sms``
    SMs. A kernel with a grid barrier launched past that never ends: the blocks
    that run wait for the others, which wait for an SM."""
    if per_sm * sms >= grid:
        return
    raise ResidencyError(
        f"kernel {name} needs all its {grid} blocks resident at once (they meet at a grid barrier),"
        f" but the GPU holds {per_sm * sms} at once: {per_sm} per SM x {sms} SMs"
        f" (blocks of {block} threads with {shared} bytes of dynamic shared memory);"
        " not launched: it would never finish")


def multiprocessor_count(ctx) -> int:
    return ctx.get_device().get_attribute(driver().device_attribute.MULTIPROCESSOR_COUNT)


def has_dependent_launch(arch: str) -> bool:
    """Whether kernels built for ``arch`` (``sm_XY``) honour programmatic dependent launches."""
    return int(arch.removeprefix("sm_").rstrip("abf")) >= 90


class Loaded:
    """The program's kernels loaded into one context (once, by the extension:
    :mod:`.native`), launched on any stream; with ``dependent``, as programmatic
    dependent launches where the driver has them (every generated kernel waits
    for the kernel before it first: support.cuh)."""

    def __init__(self, cubin: bytes, kernels, *, dependent: bool = False):
        ext = native.require()
        self.binding = ext
        self.dependent = bool(dependent) and ext.dependent_launch()
        self.context = ext.current_context()
        self.module = ext.load_module(cubin)
        self.functions: dict[str, int] = {}  # kernel name -> its CUfunction
        self.shared: dict[str, int] = {}  # kernel name -> bytes of dynamic shared memory a launch passes
        self.formats: dict[str, str] = {}  # kernel name -> its parameters' struct format
        for kernel in kernels:
            for name in kernel.function_names:  # its own, and those launched after it with its arguments
                function = ext.get_function(self.module, name)
                self.shared[name] = kernel.dynamic_shared_bytes
                if self.shared[name]:  # past 48 KB a launch fails without the function's leave
                    ext.set_max_dynamic_shared(function, self.shared[name])
                self.functions[name] = function
                self.formats[name] = "@" + parameter_format(kernel)

    def function(self, kernel, name: str | None = None) -> int:
        """The CUfunction of ``kernel``'s own function, or of its later ``name`` (Kernel.launches)."""
        return self.functions[name or kernel.name]

    def resident_blocks(self, kernel) -> int:
        """Blocks of the kernel one SM holds at once, by the driver's occupancy
        (its registers, its shared memory and the dynamic shared bytes it launches with)."""
        return self.binding.resident_blocks(self.functions[kernel.name], kernel.block, self.shared[kernel.name])

    def close(self) -> None:
        """Unload the module when its context is current (otherwise it stays until
        the context goes)."""
        if self.module and self.binding.current_context() == self.context:
            self.binding.unload_module(self.module)
        self.module, self.functions = 0, {}

    def launch(self, kernel, grid: int, args: list, stream: int = 0, function: str | None = None) -> None:
        """One launch of ``kernel`` (or of its later ``function``, Kernel.launches) on ``stream``
        (a CUstream as an int; 0 the legacy default stream)."""
        name = function or kernel.name
        self.binding.launch(self.functions[name], grid, kernel.block, self.shared[name], stream,
                            struct.pack(self.formats[name], *args), self.dependent)


def parameter_format(kernel) -> str:
    """struct-module format of the kernel's parameters, for prepared calls."""
    codes = {"in": "P", "out": "P", "workspace": "P", "counters": "P", "schedule": "P", "scalar_ptr": "P",
             "scalar": "f" if kernel.dtype == "float32" else "d", "aligned": "i", "direction": "i"}
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
// Writes every 128-byte line of the buffer, so each takes an L2 line from whatever held
// it, then drops the line without writing it back: L2 is left holding nothing.
extern "C" __global__ void fusec_empty_l2(int4* buffer, long long lines) {
  for (long long l = blockIdx.x * (long long)blockDim.x + threadIdx.x; l < lines;
       l += (long long)gridDim.x * blockDim.x) {
    int4* line = buffer + l * 8;
    for (int i = 0; i < 8; ++i) line[i] = make_int4(0, 0, 0, 0);
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(line) : "memory");
  }
}
"""
SPIN_CYCLES = 100_000  # ~60 us: longer than the host takes to queue what follows
RETAKES = 3  # a sample queued after its spin ended is taken again, this many times at most
L2_SWEEP = 2  # the buffer that empties L2 is this many times its size


class GpuClock:
    """Times launches as the GPU runs them. A spinning kernel goes first, so the
    start event fires only once the work after it is queued: the host's launch
    overhead (several microseconds from Python) is not counted.

    That holds only while the host queues the work before the spin ends. A
    host stalled longer (another process on the CPU, a garbage collection)
    leaves the GPU idle after the start event, and the sample counts the
    stall (on a busy host, samples a hundred times the median). So each sample
    also times the spin, a sample the host queued for longer is *late* and
    taken again (``RETAKES``), and one still late then is kept and counted in
    ``late_samples``, for the caller to report."""

    def __init__(self, driver, arch: str):
        from .. import nvcc
        module = driver.module_from_buffer(nvcc.compile_cubin(TIMING_KERNELS, arch=arch).cubin)
        self.driver = driver
        self.spin = module.get_function("fusec_spin")
        self.spin.prepare("q")
        self.empty = module.get_function("fusec_empty")
        self.empty.prepare("")
        self.empty_l2_kernel = module.get_function("fusec_empty_l2")
        self.empty_l2_kernel.prepare("Pq")
        self.l2_bytes = driver.Context.get_device().get_attribute(driver.device_attribute.L2_CACHE_SIZE)
        self._sweep: DeviceBuffer | None = None
        self.late_samples = 0

    def seconds(self, launch, count: int = 1) -> float:
        """Seconds from the start of ``launch()`` (called ``count`` times) to its
        end, taken again while it was late (at most ``RETAKES`` times)."""
        for _ in range(RETAKES + 1):
            seconds, late = self._sample(launch, count)
            if not late:
                return seconds
        self.late_samples += 1
        return seconds

    def _sample(self, launch, count: int) -> tuple[float, bool]:
        """(seconds of the work, whether the host took longer to queue it than the
        GPU took to spin). The host's time runs from before the spin's launch, so
        a sample is called late a little early, never too late."""
        spun, start, end = self.driver.Event(), self.driver.Event(), self.driver.Event()
        began = time.perf_counter()
        spun.record()
        self.spin.prepared_call((1, 1, 1), (32, 1, 1), SPIN_CYCLES)
        start.record()
        for _ in range(count):
            launch()
        end.record()
        queued = time.perf_counter() - began
        end.synchronize()
        return start.time_till(end) * 1e-3 / count, queued > spun.time_till(start) * 1e-3

    def empty_l2(self) -> None:
        """Leave L2 holding nothing, so what runs next starts as it would after
        unrelated work, not with lines an earlier program left: lines loaded
        evict-first never displace those, so a program could keep another's and
        time faster than it runs alone. Queued on the default stream; not timed."""
        if self._sweep is None:
            self._sweep = DeviceBuffer(L2_SWEEP * self.l2_bytes)
        lines = self._sweep.nbytes // 128
        self.empty_l2_kernel.prepared_call((min(4096, (lines + 255) // 256), 1, 1), (256, 1, 1),
                                           self._sweep.pointer, lines)

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


def late_samples() -> int:
    """Samples every clock so far kept late (``GpuClock``): a caller that times
    takes the difference around its timing, to report it."""
    return sum(clock.late_samples for clock in _CLOCKS.values())


def synchronize() -> None:
    driver().Context.synchronize()
