"""The cuBLAS call sequence a BLAS user writes for each script of Table 1.

Through CuPy's bindings of cuBLAS on CuPy arrays. Matrices are row-major
(C order): cuBLAS, column-major, sees an m x n row-major A as its n x m
transpose, so ``A x`` is a transposed gemv there and ``A^T x`` a plain one.
cuBLAS updates in place, so where the script keeps its inputs the sequence
first copies (the paper's "S" tag): copies are cudaMemcpyAsync, device to
device. Scalars are host values (CUBLAS_POINTER_MODE_HOST), except the dot
product's result, which stays on the device so nothing synchronises.
"""

from __future__ import annotations

import numpy as np


class Blas:
    def __init__(self, dtype):
        import cupy
        from cupy.cuda import device
        from cupy_backends.cuda.libs import cublas
        self.cupy, self.cublas = cupy, cublas
        self.handle = device.get_cublas_handle()
        self.dtype = np.dtype(dtype)
        self.t = "s" if self.dtype == np.float32 else "d"
        self._scalars = []  # host scalars must outlive the asynchronous calls

    def _s(self, value) -> int:
        scalar = np.array(value, dtype=self.dtype)
        self._scalars.append(scalar)
        if len(self._scalars) > 64:
            self._scalars.pop(0)
        return scalar.ctypes.data

    def _fn(self, name):
        return getattr(self.cublas, self.t + name)

    def copy(self, src, dst) -> None:
        self.cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                                           self.cupy.cuda.runtime.memcpyDeviceToDevice,
                                           self.cupy.cuda.get_current_stream().ptr)

    def gemv(self, alpha, A, x, beta, y, transpose=False) -> None:
        """y = alpha A x + beta y (or A^T x) for a row-major A."""
        m, n = A.shape
        op = self.cublas.CUBLAS_OP_N if transpose else self.cublas.CUBLAS_OP_T
        self._fn("gemv")(self.handle, op, n, m, self._s(alpha), A.data.ptr, n, x.data.ptr, 1,
                         self._s(beta), y.data.ptr, 1)

    def ger(self, alpha, u, v, A) -> None:
        """A += alpha u v^T for a row-major A (column-major: A^T += alpha v u^T)."""
        m, n = A.shape
        self._fn("ger")(self.handle, n, m, self._s(alpha), v.data.ptr, 1, u.data.ptr, 1, A.data.ptr, n)

    def axpy(self, alpha, x, y) -> None:
        self._fn("axpy")(self.handle, x.size, self._s(alpha), x.data.ptr, 1, y.data.ptr, 1)

    def scal(self, alpha, x) -> None:
        self._fn("scal")(self.handle, x.size, self._s(alpha), x.data.ptr, 1)

    def dot(self, x, y, out) -> None:
        self.cublas.setPointerMode(self.handle, self.cublas.CUBLAS_POINTER_MODE_DEVICE)
        try:
            self._fn("dot")(self.handle, x.size, x.data.ptr, 1, y.data.ptr, 1, out.data.ptr)
        finally:
            self.cublas.setPointerMode(self.handle, self.cublas.CUBLAS_POINTER_MODE_HOST)

    def geam(self, alpha, A, beta, B, C) -> None:
        m, n = A.shape
        op = self.cublas.CUBLAS_OP_N
        self._fn("geam")(self.handle, op, op, n, m, self._s(alpha), A.data.ptr, n, self._s(beta),
                         B.data.ptr, n, C.data.ptr, n)


def sequence(script: str, blas: Blas, inputs: dict):
    """(run, outputs): a function that runs the call sequence, and the arrays it
    writes the script's results to, in return order."""
    cp = blas.cupy
    i = inputs
    empty = lambda like: cp.empty_like(like)  # noqa: E731

    if script == "axpydot":  # z = w - alpha v; r = z . u
        z, r = empty(i["w"]), cp.empty((), blas.dtype)
        def run():
            blas.copy(i["w"], z); blas.axpy(-i["alpha"], i["v"], z); blas.dot(z, i["u"], r)
        return run, (z, r)
    if script == "atax":  # t = A x; y = A^T t
        t, y = cp.empty(i["A"].shape[0], blas.dtype), empty(i["x"])
        def run():
            blas.gemv(1, i["A"], i["x"], 0, t); blas.gemv(1, i["A"], t, 0, y, transpose=True)
        return run, (y,)
    if script == "bicgk":  # q = A p; s = A^T r
        q, s = empty(i["r"]), empty(i["p"])
        def run():
            blas.gemv(1, i["A"], i["p"], 0, q); blas.gemv(1, i["A"], i["r"], 0, s, transpose=True)
        return run, (q, s)
    if script == "sgemv":  # z = alpha A x + beta y
        z = empty(i["y"])
        def run():
            blas.copy(i["y"], z); blas.gemv(i["alpha"], i["A"], i["x"], i["beta"], z)
        return run, (z,)
    if script == "sgemvt":  # x = beta A^T y + z; w = alpha A x
        x, w = empty(i["z"]), empty(i["y"])
        def run():
            blas.copy(i["z"], x); blas.gemv(i["beta"], i["A"], i["y"], 1, x, transpose=True)
            blas.gemv(i["alpha"], i["A"], x, 0, w)
        return run, (x, w)
    if script == "sscal":  # x = alpha x, out of place
        y = empty(i["x"])
        def run():
            blas.copy(i["x"], y); blas.scal(i["alpha"], y)
        return run, (y,)
    if script == "gemver":  # B = A + u1 v1^T + u2 v2^T; x = beta B^T y + z; w = alpha B x
        B, x, w = empty(i["A"]), empty(i["z"]), empty(i["y"])
        def run():
            blas.copy(i["A"], B); blas.ger(1, i["u1"], i["v1"], B); blas.ger(1, i["u2"], i["v2"], B)
            blas.copy(i["z"], x); blas.gemv(i["beta"], B, i["y"], 1, x, transpose=True)
            blas.gemv(i["alpha"], B, x, 0, w)
        return run, (B, x, w)
    if script == "gesummv":  # y = alpha A x + beta B x
        y = cp.empty(i["A"].shape[0], blas.dtype)
        def run():
            blas.gemv(i["alpha"], i["A"], i["x"], 0, y); blas.gemv(i["beta"], i["B"], i["x"], 1, y)
        return run, (y,)
    if script == "madd":  # C = A + B
        C = empty(i["A"])
        def run():
            blas.geam(1, i["A"], 1, i["B"], C)
        return run, (C,)
    if script == "vadd":  # x = w + y + z
        x = empty(i["w"])
        def run():
            blas.copy(i["w"], x); blas.axpy(1, i["y"], x); blas.axpy(1, i["z"], x)
        return run, (x,)
    if script == "waxpby":  # w = alpha x + beta y
        w = empty(i["y"])
        def run():
            blas.copy(i["y"], w); blas.scal(i["beta"], w); blas.axpy(i["alpha"], i["x"], w)
        return run, (w,)
    raise KeyError(f"no cuBLAS sequence for {script!r}")
