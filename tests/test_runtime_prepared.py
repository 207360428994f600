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
