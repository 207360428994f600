"""A CUDA graph that repeats a body until a kernel in it says stop: one conditional WHILE node
(a CUDA 12.3 driver or later) whose body is captured from a stream with
``cuStreamBeginCaptureToGraph``; a kernel of the body calls ``cudaGraphSetConditional`` on
the node's handle (passed to the body as it is captured), and the node runs the body again
while the value it set is not 0. A launch of the graph is then a whole loop with no host in it.
The rest of a body may be guarded (:class:`Guard`): an IF node, nested in the body, whose
condition a kernel before it sets, runs it or skips it.

Through the driver API by ctypes (PyCUDA, CuPy and PyTorch expose no conditional nodes), in
the context current on the calling thread; also the few calls that load a cubin and launch one
of its kernels on a raw stream, for the kernel that sets the condition. The driver resolves
``cudaGraphSetConditional`` when it loads the cubin: plain ``nvcc -cubin``, no ``-rdc``.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable, Sequence

from ..errors import DriverError

_P, _U64 = ctypes.c_void_p, ctypes.c_uint64
_NODE_CONDITIONAL, _COND_IF, _COND_WHILE, _ASSIGN_DEFAULT = 13, 0, 1, 0x1
_CAPTURE_MODE_RELAXED = 2  # as CuPy and PyTorch capture: the body's calls are theirs to vet
_FIRST_DRIVER = 12030  # conditional nodes and capture into a graph came with CUDA 12.3


class _Conditional(ctypes.Structure):
    _fields_ = [("handle", _U64), ("type", ctypes.c_int), ("size", ctypes.c_uint),
                ("phGraph_out", ctypes.POINTER(_P)), ("ctx", _P)]


class _NodeParams(ctypes.Structure):  # CUgraphNodeParams: 16 bytes, a union of 29 long longs, 8
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("conditional", _Conditional),
                ("padding", ctypes.c_byte * (29 * 8 - ctypes.sizeof(_Conditional))), ("reserved2", ctypes.c_longlong)]


@functools.lru_cache(maxsize=None)
def _driver():
    """(libcuda, None) or (None, why not)."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return None, f"no CUDA driver library ({exc})"
    version = ctypes.c_int()
    if cu.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value < _FIRST_DRIVER:
        found = f"{version.value // 1000}.{version.value % 1000 // 10}"
        return None, f"the CUDA driver is {found}: conditional graph nodes need 12.3"
    for name in ("cuGraphConditionalHandleCreate", "cuStreamBeginCaptureToGraph", "cuGraphAddNode"):
        if not hasattr(cu, name):
            return None, f"the CUDA driver has no {name}"
    return cu, None


def unsupported() -> str | None:
    """Why a :class:`WhileGraph` cannot be made here, or None where it can."""
    return _driver()[1]


def _cu():
    cu, why = _driver()
    if cu is None:
        raise DriverError(f"no conditional graph nodes: {why}")
    return cu


def _check(result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cu().cuGetErrorName(result, ctypes.byref(name))
        raise DriverError(f"{call} failed: {name.value.decode() if name.value else result}")


def _add_node(cu, node, graph, params, dependencies=None, count: int = 0) -> int:
    """cuGraphAddNode of the CUDA 12.4+ ABI (with edge data) where the driver has it, else 12.3's;
    ``dependencies``: a ctypes array of ``count`` nodes it follows."""
    if hasattr(cu, "cuGraphAddNode_v2"):
        return cu.cuGraphAddNode_v2(ctypes.byref(node), graph, dependencies, None, ctypes.c_size_t(count),
                                    ctypes.byref(params))
    return cu.cuGraphAddNode(ctypes.byref(node), graph, dependencies, ctypes.c_size_t(count), ctypes.byref(params))


def _conditional(cu, graph, context, kind: int, handle: int, dependencies=None, count: int = 0):
    """Add a conditional node of ``kind`` on ``handle`` to ``graph``; its body graph."""
    params = _NodeParams(type=_NODE_CONDITIONAL)
    params.conditional.handle, params.conditional.type, params.conditional.size = handle, kind, 1
    params.conditional.ctx = context
    node = _P()
    _check(_add_node(cu, node, graph, params, dependencies, count), "cuGraphAddNode")
    return params.conditional.phGraph_out[0]


class Guard:
    """The rest of a loop body, run only where a kernel of the body before it set :attr:`handle`
    non-zero (it starts at 0 each time the body runs). Calling the guard, while the body is
    captured, ends the part captured so far and captures what follows into an IF node after it."""

    def __init__(self, cu, body_graph, context, stream: int):
        self._cu, self._graph, self._context, self._stream = cu, body_graph, context, stream
        handle = _U64()
        _check(cu.cuGraphConditionalHandleCreate(ctypes.byref(handle), body_graph, context, 0, _ASSIGN_DEFAULT),
               "cuGraphConditionalHandleCreate")
        self.handle = handle.value
        self.opened = False

    def __call__(self) -> None:
        if self.opened:
            raise DriverError("a loop body's rest is guarded once")
        cu, stream = self._cu, _P(self._stream)
        status, ident, graph, frontier, count = ctypes.c_int(), _U64(), _P(), ctypes.POINTER(_P)(), ctypes.c_size_t()
        outs = (ctypes.byref(status), ctypes.byref(ident), ctypes.byref(graph), ctypes.byref(frontier))
        if hasattr(cu, "cuStreamGetCaptureInfo_v3"):  # CUDA 12.3+: with the edges' data, not needed here
            found = cu.cuStreamGetCaptureInfo_v3(stream, *outs, None, ctypes.byref(count))
        else:
            found = cu.cuStreamGetCaptureInfo_v2(stream, *outs, ctypes.byref(count))
        _check(found, "cuStreamGetCaptureInfo")
        after = (_P * max(1, count.value))(*(frontier[k] for k in range(count.value)))  # before the capture ends
        captured = _P()
        _check(cu.cuStreamEndCapture(stream, ctypes.byref(captured)), "cuStreamEndCapture")
        inner = _conditional(cu, self._graph, self._context, _COND_IF, self.handle, after, count.value)
        _check(cu.cuStreamBeginCaptureToGraph(stream, _P(inner), None, None, ctypes.c_size_t(0),
                                              _CAPTURE_MODE_RELAXED), "cuStreamBeginCaptureToGraph")
        self.opened = True


class WhileGraph:
    """``WhileGraph(stream, body)``: ``body(handle)`` issues the loop body's work on ``stream``
    (a raw ``CUstream``, not the legacy default stream) while it is captured; one of its kernels
    must set the condition through ``handle``. Every :meth:`launch` runs the body at least once
    (the condition starts at 1 on each launch), and again while the body last set it non-zero.
    ``guarded``: ``body(handle, guard)``, a :class:`Guard` the body may call once."""

    def __init__(self, stream: int, body: Callable[..., None], *, guarded: bool = False):
        cu = _cu()
        self._cu, self._graph, self._exec = cu, _P(), _P()
        context = _P()
        _check(cu.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
        _check(cu.cuGraphCreate(ctypes.byref(self._graph), 0), "cuGraphCreate")
        try:
            handle = _U64()
            _check(cu.cuGraphConditionalHandleCreate(ctypes.byref(handle), self._graph, context, 1, _ASSIGN_DEFAULT),
                   "cuGraphConditionalHandleCreate")
            inner = _conditional(cu, self._graph, context, _COND_WHILE, handle.value)
            guard = Guard(cu, inner, context, stream) if guarded else None
            _check(cu.cuStreamBeginCaptureToGraph(_P(stream), _P(inner), None, None, ctypes.c_size_t(0),
                                                  _CAPTURE_MODE_RELAXED), "cuStreamBeginCaptureToGraph")
            captured = _P()
            try:
                if guarded:
                    body(handle.value, guard)
                else:
                    body(handle.value)
            finally:
                ended = cu.cuStreamEndCapture(_P(stream), ctypes.byref(captured))
            _check(ended, "cuStreamEndCapture")
            _check(cu.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), self._graph, _U64(0)),
                   "cuGraphInstantiateWithFlags")
        except BaseException:
            self.close()
            raise

    def launch(self, stream: int) -> None:
        _check(self._cu.cuGraphLaunch(self._exec, _P(stream)), "cuGraphLaunch")

    def close(self) -> None:
        if self._exec:
            self._cu.cuGraphExecDestroy(self._exec)
            self._exec = _P()
        if self._graph:
            self._cu.cuGraphDestroy(self._graph)
            self._graph = _P()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the driver may be gone already
            pass


class Kernels:
    """A cubin loaded into the current context; :meth:`launch` runs one of its kernels on a raw
    stream (one block of one thread by default: what a loop's test needs). ``dependent``: its
    kernels wait for the kernel before them (``griddepcontrol.wait``), so they may be launched
    as programmatic dependent launches."""

    def __init__(self, cubin: bytes, *, dependent: bool = False):
        self.dependent = dependent  # its kernels wait for the one before them: dependent launches allowed
        self._cu, self._module = _cu(), _P()
        self._cubin = ctypes.create_string_buffer(cubin, len(cubin))
        _check(self._cu.cuModuleLoadData(ctypes.byref(self._module), self._cubin), "cuModuleLoadData")
        self._functions: dict[str, _P] = {}

    def launch(self, name: str, args: Sequence, stream: int, threads: int = 1, blocks: int = 1, *,
               dependent: bool = False) -> None:
        """``args``: ctypes values in the kernel's parameter order. ``dependent``: as a
        programmatic dependent launch (the driver may start it while the kernel before it in
        the stream still runs; the kernel must wait for that one first, ``griddepcontrol.wait``)
        where fusec's C extension and the driver launch them, else as a plain launch."""
        function = self._functions.get(name)
        if function is None:
            function = _P()
            _check(self._cu.cuModuleGetFunction(ctypes.byref(function), self._module, name.encode()),
                   f"cuModuleGetFunction({name})")
            self._functions[name] = function
        if dependent and self.dependent and _dependent_launcher() is not None:
            packed = _parameters(tuple(type(a) for a in args))(*args)
            _dependent_launcher()(function.value, blocks, threads, 0, stream, bytes(packed), True)
            return
        pointers = (_P * len(args))(*(ctypes.cast(ctypes.pointer(a), _P) for a in args))
        _check(self._cu.cuLaunchKernel(function, blocks, 1, 1, threads, 1, 1, 0, _P(stream), pointers, None),
               f"cuLaunchKernel({name})")


@functools.lru_cache(maxsize=None)
def _parameters(types: tuple) -> type:
    """A ctypes structure of fields of ``types``: a kernel's parameters packed as its ABI lays
    them out (natural alignment). Made once per list of types: making a class costs the host."""
    return type("Parameters", (ctypes.Structure,), {"_fields_": [(f"p{k}", t) for k, t in enumerate(types)]})


@functools.lru_cache(maxsize=None)
def _dependent_launcher():
    """fusec's C extension's ``launch`` where it is built and the driver launches programmatic
    dependent launches (CUDA 12.3: captured into graphs as programmatic edges), else None."""
    from . import native
    extension = native.fastcall()
    return extension.launch if extension is not None and extension.dependent_launch() else None


def zero(pointer: int, nbytes: int, stream: int) -> None:
    """Set ``nbytes`` (a multiple of 4) at device address ``pointer`` to 0, in ``stream``'s order."""
    _check(_cu().cuMemsetD32Async(_U64(pointer), 0, ctypes.c_size_t(nbytes // 4), _P(stream)), "cuMemsetD32Async")


def current_context() -> int:
    """The CUcontext current on the calling thread, as an int (0: none)."""
    context = _P()
    _check(_cu().cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    return context.value or 0


def device_arch() -> str:
    """``sm_XY`` of the current context's device."""
    cu, device = _cu(), ctypes.c_int()
    _check(cu.cuCtxGetDevice(ctypes.byref(device)), "cuCtxGetDevice")
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(cu.cuDeviceGetAttribute(ctypes.byref(major), 75, device), "cuDeviceGetAttribute")
    _check(cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, device), "cuDeviceGetAttribute")
    return f"sm_{major.value}{minor.value}"
