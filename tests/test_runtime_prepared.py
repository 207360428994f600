"""The prepared-call path (fusec/runtime/prepared.py) without a GPU: what a
call's signature depends on, and when a prepared call declines. Device
arrays are faked as in test_runtime_binding."""

from __future__ import annotations

import numpy as np

from fusec.runtime.prepared import PreparedCall, signature
from test_runtime_binding import POINTER, device_class

FAKE = device_class()  # one framework's array type, as in real calls


def device(shape, typestr="<f4", strides=None, pointer=POINTER):
    obj = FAKE()
    obj._cai = {"shape": tuple(shape), "typestr": typestr, "data": (pointer, False),
                "strides": strides, "version": 3}
    return obj

ARRAYS = ("A", "x", "y")
SCALARS = frozenset({"alpha", "beta"})


def sgemv_device(pointer=POINTER, m=3, n=5, **override):
    args = {"A": device((m, n), pointer=pointer), "x": device((n,), pointer=pointer + 4096),
            "y": device((m,), pointer=pointer + 8192), "alpha": 0.5, "beta": -1.0}
    args.update(override)
    return args


def test_the_same_arrays_give_the_same_signature_whatever_the_scalars():
    first = signature(1, sgemv_device(), ARRAYS, SCALARS)
    again = signature(1, sgemv_device(alpha=3.0, beta=np.float32(2)), ARRAYS, SCALARS)
    assert first is not None and first == again and hash(first) == hash(again)


def test_where_the_arrays_are_is_in_the_signature():
    base = signature(1, sgemv_device(), ARRAYS, SCALARS)
    other_framework = device_class("other_device")()
    other_framework._cai = sgemv_device()["A"]._cai
    assert signature(1, sgemv_device(A=other_framework), ARRAYS, SCALARS) != base  # results' type
    assert signature(2, sgemv_device(), ARRAYS, SCALARS) != base  # another context
    assert signature(1, sgemv_device(pointer=POINTER + 256), ARRAYS, SCALARS) != base
    assert signature(1, sgemv_device(m=4), ARRAYS, SCALARS) != base
    assert signature(1, sgemv_device(x=device((5,), "<f8", pointer=POINTER + 4096)), ARRAYS, SCALARS) != base
    strided = device((3, 5), strides=(40, 8), pointer=POINTER)
    assert signature(1, sgemv_device(A=strided), ARRAYS, SCALARS) != base


def test_no_signature_for_what_only_the_whole_way_handles():
    """NumPy arrays (copied each call), missing or extra names, host objects:
    the whole way binds them and raises the errors that name them."""
    assert signature(1, sgemv_device(x=np.ones(5, np.float32)), ARRAYS, SCALARS) is None
    missing = sgemv_device()
    del missing["beta"]
    assert signature(1, missing, ARRAYS, SCALARS) is None
    del missing["x"]
    missing["z"] = 1.0  # as many names as the inputs, but the wrong ones
    assert signature(1, missing, ARRAYS, SCALARS) is None
    assert signature(1, sgemv_device(extra=1.0), ARRAYS, SCALARS) is None
    assert signature(1, sgemv_device(A=[[1.0]]), ARRAYS, SCALARS) is None
    assert signature(1, sgemv_device(A=None), ARRAYS, SCALARS) is None
    assert signature(1, {"alpha": 1.0}, (), frozenset({"alpha"})) is None  # no array at all


def test_a_prepared_call_declines_misaligned_outputs():
    """Its 16-byte-access flags assumed aligned outputs: a new output that is
    not makes it decline, before anything launches, so the whole way runs."""
    allocated = []

    def allocate(shape):
        allocated.append(shape)
        return object(), POINTER + 4  # 4 bytes past a 16-byte boundary

    call = PreparedCall(launches=(), output_shapes=((3,),), results=(0,), allocate=allocate,
                        scalar_names=("alpha",), keep_alive=None)
    assert call({"alpha": 1.0}) is None
    assert allocated == [(3,)]


def test_a_prepared_call_checks_its_scalars():
    import pytest
    from fusec.errors import ArgumentError
    call = PreparedCall(launches=(), output_shapes=(), results=(), allocate=None,
                        scalar_names=("alpha",), keep_alive=None)
    with pytest.raises(ArgumentError) as info:
        call({"alpha": "two"})
    assert info.value.argument == "alpha" and "real number" in str(info.value)


def test_a_prepared_call_hands_each_launch_its_outputs_and_scalars():
    """Each launch gets, in its changing slots' order, the new outputs'
    pointers and the call's scalars (as floats); the results come back in
    the script's order."""
    seen = []
    pointers = iter([POINTER + 1024, POINTER + 2048])

    def allocate(shape):
        pointer = next(pointers)
        return ("array", shape, pointer), pointer

    launches = ((lambda values: seen.append(("k0", values)), (0, "alpha")),
                (lambda values: seen.append(("k1", values)), ("beta", 1, 0)))
    call = PreparedCall(launches=launches, output_shapes=((3,), ()), results=(1, 0), allocate=allocate,
                        scalar_names=("alpha", "beta"), keep_alive=None)
    results = call({"alpha": np.float32(0.5), "beta": 2, "x": None})
    assert seen == [("k0", [POINTER + 1024, 0.5]), ("k1", [2.0, POINTER + 2048, POINTER + 1024])]
    assert results == (("array", (), POINTER + 2048), ("array", (3,), POINTER + 1024))


def test_turning_launches_alternate_their_direction_within_their_group():
    """A Turn takes its group's next direction at each launch that has it: the
    launches of a group walk opposite ways one after another, call after call;
    another group's launches do not count."""
    from fusec.runtime.prepared import Turn, Turns
    seen = []
    launches = ((lambda values: seen.append(("k0", values)), (0, Turn(0))),
                (lambda values: seen.append(("k1", values)), (0, Turn(1))),
                (lambda values: seen.append(("k2", values)), (Turn(0), "alpha")))
    call = PreparedCall(launches=launches, output_shapes=((3,),), results=(0,),
                        allocate=lambda shape: ("array", POINTER), scalar_names=("alpha",),
                        keep_alive=None, turns=(Turns(), Turns()))
    call({"alpha": 1.0})
    call({"alpha": 1.0})
    assert seen == [("k0", [POINTER, 0]), ("k1", [POINTER, 0]), ("k2", [1, 1.0]),
                    ("k0", [POINTER, 0]), ("k1", [POINTER, 1]), ("k2", [1, 1.0])]


class _FakeLaunchKernel:
    """PyCUDA's ``Function._launch_kernel`` stand-in: records its arguments
    and the parameter buffer's bytes at the moment of each launch."""

    def __init__(self):
        self.calls = []

    def __call__(self, grid, block, buffer, shared, stream):
        self.calls.append(((grid, block, shared, stream), bytes(buffer)))


def test_parameter_offsets_follow_native_alignment():
    from fusec.runtime.prepared import parameter_offsets
    assert parameter_offsets("PPfi") == (0, 8, 16, 20)
    assert parameter_offsets("PfPiq") == (0, 8, 16, 24, 32)  # a pointer after a float is 8-aligned
    assert parameter_offsets("d") == (0,)


def test_a_bound_launch_rewrites_only_its_changing_parameters():
    """A call packs its values where the kernel expects them, over the buffer
    packed once; the other parameters stay as first packed."""
    import struct
    from fusec.runtime.prepared import Launch
    fake = _FakeLaunchKernel()
    launch = Launch(fake, 33, 256, "PPfiq", (POINTER, 0, np.float32(1.5), 1, 1 << 40), changing=(1, 2))
    launch([POINTER + 64, 0.25])
    launch([POINTER + 128, -3.0])
    (head, first), (_, second) = fake.calls
    assert head == ((33, 1, 1), (256, 1, 1), 0, None)
    assert first == struct.pack("@PPfiq", POINTER, POINTER + 64, 0.25, 1, 1 << 40)
    assert second == struct.pack("@PPfiq", POINTER, POINTER + 128, -3.0, 1, 1 << 40)


def test_a_failed_driver_call_raises_driver_error_naming_the_error(monkeypatch):
    import ctypes
    import pytest
    from fusec.errors import DriverError
    from fusec.runtime import driver_api

    class FakeDriver:
        def cuGetErrorName(self, code, name):
            ctypes.cast(name, ctypes.POINTER(ctypes.c_char_p))[0] = b"CUDA_ERROR_INVALID_CONTEXT"
            return 0

        def cuCtxGetCurrent(self, out):
            return 201

    monkeypatch.setattr(driver_api, "_LIB", FakeDriver())
    with pytest.raises(DriverError) as info:
        driver_api.current_context()
    assert "cuCtxGetCurrent failed: CUDA_ERROR_INVALID_CONTEXT (201)" in str(info.value)
