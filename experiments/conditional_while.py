"""Does a CUDA conditional WHILE graph node work from Python here, with no -rdc?

Question (2026-11-28): a kernel calling cudaGraphSetConditional compiles with plain
``nvcc -cubin`` to a cubin with cudaGraphSetConditional undefined; does the driver resolve it at
load, and can a WHILE node whose body is captured from a CuPy stream (cuStreamBeginCaptureToGraph)
loop until a device-side test stops it? Prints what it saw and the time of one launch that
loops N times against N replays of a plain graph. Run on a GPU machine with CuPy:
``python experiments/conditional_while.py``.

Answer (one H200, driver 580.159.04, nvcc 13.0, 2026-11-28): yes. The cubin loads (the driver
resolves cudaGraphSetConditional), the body captured from a CuPy stream (a raw kernel and a
CuPy kernel; an allocation inside the capture is refused, as in any capture) runs exactly
stop_at times for 1, 5, 18 and 1000, and one launch looping 18 times took 115.7 us launch to
synchronised (1000 times: 5.85 ms, 5.8 us a body of three kernels). fusec.solvers now loops
this way (fusec/runtime/while_graph.py, fusec/solvers/device_loop.py).
"""
import ctypes
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cupy
import numpy as np

SOURCE = r"""
#include <cuda_runtime.h>
extern "C" __global__ void step(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" __global__ void test(cudaGraphConditionalHandle loop, unsigned int *count, unsigned int stop_at)
{
    unsigned int done = count[0] + 1;
    count[0] = done;
    cudaGraphSetConditional(loop, done < stop_at);
}
"""

cu = ctypes.CDLL("libcuda.so.1")
P, U64 = ctypes.c_void_p, ctypes.c_uint64


def ok(result, what):
    if result != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{what}: {name.value.decode()}")


class Conditional(ctypes.Structure):
    _fields_ = [("handle", U64), ("type", ctypes.c_int), ("size", ctypes.c_uint),
                ("phGraph_out", ctypes.POINTER(P)), ("ctx", P)]


class NodeParams(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3),
                ("conditional", Conditional), ("pad", ctypes.c_byte * (29 * 8 - ctypes.sizeof(Conditional))),
                ("reserved2", ctypes.c_longlong)]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        src.write_text(SOURCE)
        subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", f"{tmp}/k.cubin", str(src)], check=True)
        cubin = Path(f"{tmp}/k.cubin").read_bytes()
    cupy.zeros(1).sum()  # a context
    module = P()
    ok(cu.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData (cudaGraphSetConditional unresolved?)")
    print("module loaded: the driver resolved cudaGraphSetConditional")
    step, test = P(), P()
    ok(cu.cuModuleGetFunction(ctypes.byref(step), module, b"step"), "step")
    ok(cu.cuModuleGetFunction(ctypes.byref(test), module, b"test"), "test")
    ctx = P()
    ok(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "ctx")

    x = cupy.zeros(32, dtype=cupy.float32)
    count = cupy.zeros(1, dtype=cupy.uint32)
    stream = cupy.cuda.Stream(non_blocking=True)
    for stop_at in (1, 5, 18, 1000):
        graph = P()
        ok(cu.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        handle = U64()
        ok(cu.cuGraphConditionalHandleCreate(ctypes.byref(handle), graph, ctx, 1, 1), "handle")
        params = NodeParams()
        params.type = 13
        params.conditional.handle, params.conditional.type, params.conditional.size = handle.value, 1, 1
        params.conditional.ctx = ctx
        node = P()
        ok(cu.cuGraphAddNode_v2(ctypes.byref(node), graph, None, None, ctypes.c_size_t(0), ctypes.byref(params)),
           "add node")
        body = params.conditional.phGraph_out[0]
        ok(cu.cuStreamBeginCaptureToGraph(P(stream.ptr), P(body), None, None, ctypes.c_size_t(0), 0), "capture")
        x_ptr = P(x.data.ptr)
        args1 = (P * 1)(ctypes.cast(ctypes.pointer(x_ptr), P))
        ok(cu.cuLaunchKernel(step, 1, 1, 1, 32, 1, 1, 0, P(stream.ptr), args1, None), "step launch")
        with stream:
            cupy.multiply(x, 1.0, out=x)  # a CuPy kernel inside the body (no allocation: capture forbids it)
        h, c, s = U64(handle.value), P(count.data.ptr), ctypes.c_uint(stop_at)
        args2 = (P * 3)(*(ctypes.cast(ctypes.pointer(v), P) for v in (h, c, s)))
        ok(cu.cuLaunchKernel(test, 1, 1, 1, 1, 1, 1, 0, P(stream.ptr), args2, None), "test launch")
        captured = P()
        ok(cu.cuStreamEndCapture(P(stream.ptr), ctypes.byref(captured)), "end capture")
        exe = P()
        ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, U64(0)), "instantiate")
        x.fill(0), count.fill(0)
        cupy.cuda.Device().synchronize()
        ok(cu.cuGraphLaunch(exe, P(stream.ptr)), "launch")
        stream.synchronize()
        print(f"stop_at={stop_at}: count {int(count.get()[0])}, x[0] {float(x.get()[0])}")
        times = []
        for _ in range(20):
            count.fill(0)
            cupy.cuda.Device().synchronize()
            t = time.perf_counter()
            ok(cu.cuGraphLaunch(exe, P(stream.ptr)), "launch")
            stream.synchronize()
            times.append(time.perf_counter() - t)
        print(f"  one launch looping {stop_at} times: {np.median(times) * 1e6:.1f} us (launch to synchronised)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
