"""Checking a call's arguments against the program, before anything launches.

Accepted: NumPy arrays (copied to the GPU and back), any device array
with ``__cuda_array_interface__`` (PyCUDA ``GPUArray``, CuPy, PyTorch), used
in place, and device arrays that offer only ``__dlpack__``, read
through CuPy (or PyTorch) without a copy. Scalars are host numbers, but those
a program reads from device memory (``device_scalars``): device arrays of one
element. Every mistake raises :class:`~fusec.errors.ArgumentError` naming the argument.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np

from .. import validate
from ..errors import ArgumentError
from ..ir.dag import Dag
from ..library.model import Kind
from .streams import interface_stream

NUMPY, DEVICE = "numpy", "device"


@dataclasses.dataclass(frozen=True)
class ArrayArg:
    name: str
    value: int  # DAG value id
    obj: Any = dataclasses.field(repr=False)
    where: str  # NUMPY or DEVICE
    family: str  # numpy, cupy, torch, pycuda or cuda (another __cuda_array_interface__)
    shape: tuple[int, ...]
    pointer: int | None  # device address; None for NumPy
    stream: int | None = None  # the stream its __cuda_array_interface__ says to wait for, if any


@dataclasses.dataclass(frozen=True)
class Binding:
    sizes: dict[str, int]
    arrays: dict[int, ArrayArg]  # value id -> array
    scalars: dict[int, float]  # value id -> number

    @property
    def family(self) -> str:
        """Where results go: NumPy unless some input lives on the device."""
        device = [a.family for a in self.arrays.values() if a.where == DEVICE]
        for preferred in ("torch", "cupy", "pycuda"):
            if preferred in device:
                return preferred
        return device[0] if device else "numpy"


def _family(obj: Any) -> str:
    module = type(obj).__module__.split(".")[0]
    if module in ("torch", "cupy"):
        return module
    if module == "pycuda" or hasattr(obj, "gpudata"):
        return "pycuda"
    return "cuda"


def _describe(obj: Any) -> str:
    shape = getattr(obj, "shape", None)
    return f"{type(obj).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def scalar_value(name: str, obj: Any) -> float:
    """A scalar argument as a float, or the ArgumentError that names it."""
    if isinstance(obj, np.ndarray) and obj.ndim == 0:
        obj = obj[()]
    if isinstance(obj, (bool, np.bool_)) or not isinstance(obj, (numbers.Real, np.floating, np.integer)):
        if hasattr(obj, "__cuda_array_interface__"):
            raise ArgumentError(name, "is a scalar of the script: pass a host number, not a device array")
        raise ArgumentError(name, f"is a scalar of the script: expected a real number, got {_describe(obj)}")
    try:
        value = float(obj)
    except OverflowError:  # an int past a double's range, 10**400
        raise ArgumentError(name, f"is {str(obj)[:30]}..., too large for any float") from None
    if not math.isfinite(value) and not validate.environment_flag("FUSEC_NONFINITE_SCALARS", False):
        raise ArgumentError(name, f"is {value}: a scalar must be finite (set FUSEC_NONFINITE_SCALARS=1"
                                  " to pass NaN and infinities on to the kernels)")
    return value


def scalar_limit(dtype) -> float:
    """The largest scalar a program of ``dtype`` takes: past it a float32 kernel would see infinity."""
    return float(np.finfo(dtype).max)


@functools.lru_cache(maxsize=None)
def scalar_checker(dtype) -> Callable[[str, Any], float]:
    """``scalar_value`` that also refuses a finite number outside ``dtype``'s range."""
    limit, name_of = scalar_limit(dtype), np.dtype(dtype).name

    def checked(name: str, obj: Any) -> float:
        value = scalar_value(name, obj)
        if math.isfinite(value) and abs(value) > limit:
            raise ArgumentError(name, f"is {value:g}, outside the range of {name_of}")
        return value
    return checked


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=64)
def _typestr_dtype(typestr: str) -> np.dtype:
    """np.dtype of an array interface's typestr, once per typestr (binding runs on every call)."""
    return np.dtype(typestr)


def array_arg(name: str, value: int, kind: Kind, obj: Any, dtype: np.dtype) -> ArrayArg:
    """One array argument, checked (an input, or an ``out=`` array)."""
    return _array(name, value, kind, obj, dtype)


def _array(name: str, value: int, kind: Kind, obj: Any, dtype: np.dtype) -> ArrayArg:
    ndim = {Kind.MATRIX: 2, Kind.VECTOR: 1}.get(kind, 0)
    what = {Kind.MATRIX: "a matrix (2-D array)", Kind.VECTOR: "a vector (1-D array)"}.get(kind, "a 0-d array")
    return _checked_array(name, value, obj, dtype, what, (ndim,))


DEVICE_SCALAR = "a device array of one element (shape () or (1,))"


def device_scalar_arg(name: str, value: int, obj: Any, dtype: np.dtype) -> ArrayArg:
    """A scalar input the program reads from device memory (``Value.on_device``): a
    device array of one element of the program's dtype, never a host number or a
    NumPy array (a copy to the device would make the host wait, which is what
    passing it on the device avoids)."""
    if isinstance(obj, np.ndarray) or isinstance(obj, (numbers.Number, np.generic)):
        got = "a NumPy array" if isinstance(obj, np.ndarray) else f"the host number {obj!r}"
        raise ArgumentError(name, f"is read from device memory (compiled with device_scalars): pass {DEVICE_SCALAR},"
                                  f" not {got}")
    on_host = not hasattr(obj, "__cuda_array_interface__") and not _dlpack_on_gpu(obj)  # a CPU tensor too
    if on_host:
        raise ArgumentError(name, f"is read from device memory (compiled with device_scalars): pass {DEVICE_SCALAR},"
                                  f" got {_describe(obj)}")
    array = _checked_array(name, value, obj, dtype, DEVICE_SCALAR, (0, 1))
    if array.shape not in ((), (1,)):
        raise ArgumentError(name, f"is read from device memory (compiled with device_scalars): pass {DEVICE_SCALAR},"
                                  f" got shape {array.shape}")
    return array


def _dlpack_on_gpu(obj: Any) -> bool:
    try:
        device = obj.__dlpack_device__()
    except Exception:  # noqa: BLE001 - no DLPack, or a foreign method that fails: not a GPU array
        return False
    return isinstance(device, tuple) and len(device) == 2 and device[0] in (DLPACK_CUDA, DLPACK_MANAGED)


def _checked_array(name: str, value: int, obj: Any, dtype: np.dtype, what: str, ndims: tuple[int, ...]) -> ArrayArg:
    """An array argument of ``dtype`` with one of ``ndims`` dimensions, C-contiguous and not
    empty (``what`` says what was wanted, in messages)."""
    stream = None
    if not isinstance(obj, np.ndarray) and not hasattr(obj, "__cuda_array_interface__") and hasattr(obj, "__dlpack__"):
        obj = from_dlpack(name, obj)
    if isinstance(obj, np.ndarray):
        shape, got_dtype, pointer, where, family = obj.shape, obj.dtype, None, NUMPY, "numpy"
        contiguous = obj.flags.c_contiguous
    elif hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        shape, pointer, typestr, strides = _interface(name, cai)
        try:
            got_dtype = _typestr_dtype(typestr)
        except (TypeError, ValueError):
            raise ArgumentError(name, f"has an element type {typestr!r} that is not a real number") from None
        if strides is not None and (len(strides) != len(shape)
                                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in strides)):
            raise ArgumentError(name, f"__cuda_array_interface__ has strides {strides!r}:"
                                      " not one whole number per axis")
        if pointer == 0 and 0 not in shape:
            raise ArgumentError(name, "__cuda_array_interface__ has a null data pointer for a non-empty array")
        contiguous = strides is None or 0 in shape or all(  # an axis of extent 1 may have any stride
            extent == 1 or s == c for extent, s, c in zip(shape, strides, _c_strides(shape, got_dtype.itemsize)))
        where, family, stream = DEVICE, _family(obj), interface_stream(cai)
        if stream is None and unordered(obj):
            obj.block_until_ready()
    else:
        raise ArgumentError(name, f"must be {what}: a NumPy array or a device array with"
                                  f" __cuda_array_interface__, got {_describe(obj)}")
    if len(shape) not in ndims:
        raise ArgumentError(name, f"must be {what}, got {len(shape)} dimension(s) {tuple(shape)}")
    if got_dtype != dtype:
        advice = (f"convert it, or compile with dtype={got_dtype.name!r}"
                  if got_dtype.name in ("float32", "float64") else "convert it")
        raise ArgumentError(name, f"has dtype {got_dtype}, but the program was compiled for {dtype} ({advice})")
    if not contiguous:
        raise ArgumentError(name, "is not C-contiguous (row-major, no gaps); pass a contiguous copy,"
                                  " e.g. numpy.ascontiguousarray(x) or x.copy()")
    if 0 in shape:
        raise ArgumentError(name, f"is empty {tuple(shape)}; every size must be at least 1")
    return ArrayArg(name, value, obj, where, family, tuple(int(s) for s in shape), pointer, stream)


def unordered(obj: Any) -> bool:
    """Whether ``obj`` may still be being written when its ``__cuda_array_interface__`` is read.

    JAX hands out its arrays' interface (version 2, no stream) before the computation
    that makes them has ended, so a kernel launched at once read a half-written (all-zero)
    matrix under load; such an array offers ``block_until_ready``, which the host calls
    before each call that reads it (:func:`_checked_array`; never a prepared call)."""
    return callable(getattr(obj, "block_until_ready", None))


DLPACK_CUDA, DLPACK_MANAGED = 2, 13  # kDLCUDA, kDLCUDAManaged


def from_dlpack(name: str, obj: Any) -> Any:
    """A device array that offers only ``__dlpack__``, as a CuPy array
    (else a PyTorch tensor) on the same memory: no copy."""
    try:
        device = obj.__dlpack_device__()
    except Exception as exc:  # noqa: BLE001 - any failure of a foreign protocol method
        raise ArgumentError(name, f"has __dlpack__ but its __dlpack_device__ failed: {exc}") from None
    if not (isinstance(device, tuple) and len(device) == 2 and device[0] in (DLPACK_CUDA, DLPACK_MANAGED)):
        raise ArgumentError(name, f"is a DLPack array on device {device!r}, not on a CUDA GPU: move it to"
                                  " the GPU, or pass a NumPy array")
    try:
        import cupy
        return cupy.from_dlpack(obj)
    except ImportError:
        pass
    try:
        import torch
        return torch.from_dlpack(obj)
    except ImportError:
        raise ArgumentError(name, "offers only __dlpack__, and reading it needs CuPy or PyTorch") from None


def _interface(name: str, cai: Any) -> tuple[tuple[int, ...], int, str, tuple | None]:
    """(shape, pointer, typestr, strides) of a ``__cuda_array_interface__``, each checked
    for its type (a missing or malformed field names the argument, never a KeyError)."""
    def bad(why: str):
        raise ArgumentError(name, f"__cuda_array_interface__ {why}")
    if not isinstance(cai, dict):
        bad(f"is a {type(cai).__name__}, not a dict")
    for field in ("shape", "data", "typestr"):
        if field not in cai:
            bad(f"has no {field!r}")
    shape, data, typestr, strides = cai["shape"], cai["data"], cai["typestr"], cai.get("strides")
    if not isinstance(shape, (tuple, list)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in shape):
        bad(f"has shape {shape!r}: not a tuple of whole numbers")
    if any(x < 0 for x in shape):
        bad(f"has a negative extent in its shape {tuple(shape)}")
    if (not isinstance(data, (tuple, list)) or len(data) != 2 or isinstance(data[0], bool)
            or not isinstance(data[0], int) or data[0] < 0):
        bad(f"has data {data!r}: not (pointer, read-only flag)")
    if not isinstance(typestr, str):
        bad(f"has typestr {typestr!r}: not a string")
    if strides is not None and not isinstance(strides, (tuple, list)):
        bad(f"has strides {strides!r}: not a tuple")
    return tuple(shape), int(data[0]), typestr, None if strides is None else tuple(strides)


def bind(dag: Dag, dtype: np.dtype, arguments: Mapping[str, Any]) -> Binding:
    """Match keyword arguments to the script's inputs and infer the sizes."""
    if not isinstance(arguments, Mapping):
        raise ArgumentError("arrays", f"is a {type(arguments).__name__}: pass a mapping of the script's"
                                      " input names to arrays and scalars")
    inputs = {dag.value(v).name: dag.value(v) for v in dag.inputs}
    for name in arguments:
        if name not in inputs:
            raise ArgumentError(name, f"is not an input of {dag.file} (its inputs: {', '.join(inputs)})")
    for name in inputs:
        if name not in arguments:
            raise ArgumentError(name, f"is missing: {dag.file} needs {', '.join(inputs)}")
    sizes: dict[str, int] = {}
    source: dict[str, str] = {}
    arrays: dict[int, ArrayArg] = {}
    scalars: dict[int, float] = {}
    for name, value in inputs.items():
        obj = arguments[name]
        if value.on_device:
            arrays[value.id] = device_scalar_arg(name, value.id, obj, dtype)
            continue
        if value.kind is Kind.SCALAR:
            scalars[value.id] = scalar_checker(dtype)(name, obj)
            continue
        array = _array(name, value.id, value.kind, obj, dtype)
        for axis, (symbol, extent) in enumerate(zip(value.dims, array.shape)):
            if symbol in sizes and sizes[symbol] != extent:
                raise ArgumentError(name, f"has size {extent} along axis {axis}, but {source[symbol]}"
                                          f" gives {symbol} = {sizes[symbol]}")
            if symbol not in sizes:
                sizes[symbol], source[symbol] = extent, f"{name!r} (axis {axis})"
        arrays[value.id] = array
    _check_device_scalar_families(dag, arrays)
    for symbol in dag.sizes:
        if symbol in sizes and sizes[symbol] >= 2 ** 31:
            raise ArgumentError(source[symbol].split("'")[1],
                                f"size {symbol} = {sizes[symbol]} is too large (limit 2**31 - 1)")
    return Binding(sizes, arrays, scalars)


def _check_device_scalar_families(dag: Dag, arrays: dict[int, ArrayArg]) -> None:
    """A scalar read from device memory is an array of the framework of the call's other
    arrays: results go to that framework, and it runs on that framework's stream."""
    others = {a.family for v, a in arrays.items() if not dag.value(v).on_device}
    for value in dag.device_scalars:
        array = arrays[value]
        if others == {"numpy"}:
            raise ArgumentError(array.name, "is read from device memory (compiled with device_scalars), but the"
                                            " other arrays are NumPy arrays: pass them as device arrays too, or"
                                            " compile without device_scalars")
        if others and array.family not in others:
            raise ArgumentError(array.name, f"is a {array.family} array, but the other arrays are"
                                            f" {' and '.join(sorted(others))} arrays: pass one of those")
