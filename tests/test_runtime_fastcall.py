"""The C extension's warm call (fusec/runtime/fastcall.c) without a GPU: it is
built with the C compiler and Python's headers, and a FastCall made with a hook
hands the hook each kernel's parameter bytes and dynamic shared bytes instead
of launching. Checked against what the Python path (PreparedCall and Launch)
packs and returns, and for every case where it must decline. Device arrays
are faked as in test_runtime_prepared. One GPU test launches probes that
report their dynamic shared memory through each way (whole, prepared, C)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from test_runtime_binding import POINTER
from test_runtime_prepared import ARRAYS, HELD_SHARED, SCALARS, device, sgemv_device

from fusec.errors import ArgumentError
from fusec.runtime import native
from fusec.runtime.arrays import scalar_value
from fusec.runtime.prepared import Turn, _signer, native_kernel, parameter_offsets, signature


@pytest.fixture(scope="module")
def extension():
    return native.require()  # built with the package: never skipped


class Out:
    """An output array stand-in: where it is, as CuPy says it (``.data.ptr``)."""

    class Memory:
        def __init__(self, ptr):
            self.ptr = ptr

    def __init__(self, shape, dtype, pointer):
        self.shape, self.dtype, self.data = shape, dtype, Out.Memory(pointer)

    def __eq__(self, other):
        return isinstance(other, Out) and (self.shape, self.data.ptr) == (other.shape, other.data.ptr)

    def __repr__(self):
        return f"Out({self.shape}, {self.data.ptr:#x})"


class Outputs:
    """A make(shape, dtype) stand-in: Out arrays 1 KiB apart, each remembered."""

    def __init__(self, first=POINTER + (1 << 20), step=1024):
        self.next, self.step, self.made = first, step, []

    def __call__(self, shape, dtype, **kwargs):
        assert dtype == "float32" and kwargs == {"stream": None}
        pointer, self.next = self.next, self.next + self.step
        self.made.append(Out(shape, dtype, pointer))
        return self.made[-1]


def make_fields(outputs):
    return dict(make=outputs, make_args=("float32",), make_kwargs={"stream": None}, pointer=("data", "ptr"))


# sgemv's one kernel: (A, x, y, z, alpha, beta, n, m); z is the output, alpha and beta change
FORMAT = "PPPPffii"
VALUES = (POINTER, POINTER + 4096, POINTER + 8192, 0, np.float32(1), np.float32(1), 5, 3)
CHANGING, SOURCES = (3, 4, 5), (0, "alpha", "beta")


def fast_sgemv(extension, outputs, launched, scalar_names=("alpha", "beta"), results=(0,), shapes=((3,),),
               kernels=None, shared=None):
    """sgemv's FastCall; its hook records (kernel index, parameter bytes) of each
    launch in ``launched``, and the launch's dynamic shared bytes in ``shared``."""
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    if kernels is None:
        kernels = (native_kernel(0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, scalar_names),)

    def hook(index, parameters, shared_bytes):
        launched.append((index, parameters))
        if shared is not None:
            shared.append(shared_bytes)

    return extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=scalar_names, scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=shapes, results=results, kernels=kernels, context=7, hook=hook)


def test_native_kernel_names_each_changing_field_by_offset_kind_and_source():
    function, grid, block, parameters, changes, shared, dependent = native_kernel(
        0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"))
    offsets = parameter_offsets(FORMAT)
    assert (function, grid, block, shared, dependent) == (0xF00, 2, 256, 0, False)
    assert native_kernel(0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"), dependent=True)[6]
    assert parameters == struct.pack("@" + FORMAT, *VALUES)
    assert changes == ((offsets[3], "P", 0), (offsets[4], "f", 0), (offsets[5], "f", 1))
    doubles = native_kernel(1, 1, 32, "Pdd", (0, 1.0, 2.0), (0, 2), (0, "beta"), ("alpha", "beta"))
    assert doubles[4] == ((0, "P", 0), (16, "d", 1))


def test_a_warm_call_packs_what_the_python_path_packs(extension):
    outputs, launched = Outputs(), []
    call = fast_sgemv(extension, outputs, launched)
    result = call(sgemv_device(alpha=0.25, beta=np.float64(-2.0)))
    pointer = POINTER + (1 << 20)
    assert result == Out((3,), "float32", pointer) and result is outputs.made[0]
    expected = struct.pack("@" + FORMAT, POINTER, POINTER + 4096, POINTER + 8192, pointer,
                           0.25, -2.0, 5, 3)
    assert launched == [(0, expected)]
    call(sgemv_device(alpha=3.0, beta=1))  # the next call's fields overwrite the last's
    assert launched[1] == (0, struct.pack("@" + FORMAT, POINTER, POINTER + 4096, POINTER + 8192,
                                          pointer + 1024, 3.0, 1.0, 5, 3))


def test_turning_launches_alternate_their_direction_within_their_group(extension):
    """A 'D' field gets the other direction from the launch of its turn group
    before: with one turning kernel each call walks the other way; two of one
    group walk opposite ways in a call; another group turns on its own."""
    outputs, launched = Outputs(), []
    turning = native_kernel(1, 1, 32, "Pi", (0, 0), (0, 1), (0, Turn(0)), ("alpha", "beta"))
    assert turning[4][1] == (8, "D", 0)
    call = fast_sgemv(extension, outputs, launched, kernels=(turning,))
    for _ in range(3):
        call(sgemv_device())
    assert [struct.unpack("@Pi", p)[1] for _, p in launched] == [1, 0, 1]
    launched.clear()
    other = native_kernel(2, 1, 32, "Pi", (0, 0), (0, 1), (0, Turn(5)), ("alpha", "beta"))
    assert other[4][1] == (8, "D", 5)
    call = fast_sgemv(extension, Outputs(), launched, kernels=(turning, other, turning))
    call(sgemv_device())
    call(sgemv_device())
    directions = [(k, struct.unpack("@Pi", p)[1]) for k, p in launched]
    assert directions == [(0, 1), (1, 1), (2, 0), (0, 1), (1, 0), (2, 0)]


def test_native_kernel_carries_the_dynamic_shared_bytes():
    held = native_kernel(1, 132, 512, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"), HELD_SHARED)
    assert held[5] == HELD_SHARED
    assert held[:5] == native_kernel(1, 132, 512, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"))[:5]


def test_each_launch_passes_its_kernels_dynamic_shared_bytes(extension):
    """What cuLaunchKernel would get as its shared memory size: the kernel's own
    bytes, every call; 0 for a kernel without, also where its description
    leaves the item out (as descriptions made before it was added do)."""
    outputs, launched, shared = Outputs(), [], []
    held = native_kernel(1, 132, 512, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"), HELD_SHARED)
    plain = native_kernel(2, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"))
    call = fast_sgemv(extension, outputs, launched, kernels=(held, plain, plain[:5]), shared=shared)
    call(sgemv_device())
    call(sgemv_device(alpha=2.0))
    assert shared == [HELD_SHARED, 0, 0] * 2
    assert [index for index, _ in launched] == [0, 1, 2] * 2


def test_a_direction_field_out_of_its_buffer_is_refused(extension):
    for change in ((12, "D", 0), (8, "D", 64), (8, "D", -1)):  # past the buffer, past the groups
        bad = (1, 1, 32, struct.pack("@Pi", 0, 0), (change,))
        with pytest.raises(ValueError, match="bad change"):
            fast_sgemv(extension, Outputs(), [], kernels=(bad,))


def test_several_kernels_and_results_in_the_scripts_order(extension):
    outputs, launched = Outputs(), []
    kernels = (native_kernel(1, 1, 32, "Pd", (0, 0.0), (0, 1), (1, "beta"), ("alpha", "beta")),
               native_kernel(2, 3, 64, "PPd", (0, 0, 0.0), (0, 1, 2), (0, 1, "alpha"), ("alpha", "beta")))
    call = fast_sgemv(extension, outputs, launched, results=(1, 0), shapes=((3,), ()), kernels=kernels)
    first, second = call(sgemv_device(alpha=0.5, beta=2.0))
    low, high = POINTER + (1 << 20), POINTER + (1 << 20) + 1024
    assert (first, second) == (Out((), "float32", high), Out((3,), "float32", low))
    assert launched == [(0, struct.pack("@Pd", high, 2.0)), (1, struct.pack("@PPd", low, high, 0.5))]


@pytest.mark.parametrize("change", ["pointer", "shape", "missing", "extra", "type", "not a dict"])
def test_other_arrays_or_names_decline_before_anything_launches(extension, change):
    """None tells the Python path to decide (a new signature, or an error that names the argument)."""
    outputs, launched = Outputs(), []
    call = fast_sgemv(extension, outputs, launched)
    args = sgemv_device()
    if change == "pointer":
        args = sgemv_device(pointer=POINTER + 256)
    elif change == "shape":
        args = sgemv_device(m=4)
    elif change == "missing":
        del args["beta"]
    elif change == "extra":
        args["gamma"] = 1.0
    elif change == "type":
        args["x"] = np.ones(5, np.float32)
    else:
        args = list(args.items())
    assert call(args) is None
    assert launched == [] and outputs.made == []


def test_the_pointer_steps_may_call_methods(extension):
    """PyTorch's tensors give their address by ``data_ptr()``."""
    class Tensor:
        def __init__(self, shape, pointer):
            self.shape, self.pointer = shape, pointer

        def data_ptr(self):
            return self.pointer

    made = []

    def empty(shape, dtype=None, device=None):
        made.append(Tensor(shape, POINTER + (1 << 20) * (1 + len(made))))
        return made[-1]

    launched = []
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        make=empty, make_args=(), make_kwargs={"dtype": "f4", "device": "cuda:0"}, pointer=("data_ptr()",),
        output_shapes=((3,),), results=(0,),
        kernels=(native_kernel(1, 1, 32, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta")),),
        context=7, hook=lambda index, parameters, shared: launched.append(parameters))
    assert call(sgemv_device()) is made[0]
    assert struct.unpack_from("@P", launched[0], parameter_offsets(FORMAT)[3]) == (POINTER + (1 << 20),)


def test_the_python_allocator_spells_out_what_the_extension_does():
    from fusec.runtime.cuda import Allocator
    outputs = Outputs()
    array, pointer = Allocator(outputs, ("float32",), {"stream": None}, ("data", "ptr"))((4, 2))
    assert array is outputs.made[0] and pointer == POINTER + (1 << 20)


def test_a_misaligned_output_declines_and_launches_nothing(extension):
    outputs, launched = Outputs(first=POINTER + 8), []
    assert fast_sgemv(extension, outputs, launched)(sgemv_device()) is None
    assert launched == [] and len(outputs.made) == 1  # made, then dropped


def test_a_bad_scalar_raises_the_argument_error_that_names_it(extension):
    outputs, launched = Outputs(), []
    call = fast_sgemv(extension, outputs, launched)
    with pytest.raises(ArgumentError, match="beta"):
        call(sgemv_device(beta="two"))
    with pytest.raises(ArgumentError, match="alpha"):
        call(sgemv_device(alpha=device((1,))))
    assert launched == [] and outputs.made == []


def test_a_float_beyond_float32_is_refused_on_the_warm_call_too(extension):
    """A float32 program's warm call takes a Python float as it is only within float32's
    range: 1e39 would reach the kernel as infinity. NaN goes the checked way as before."""
    from fusec.runtime.arrays import scalar_checker, scalar_limit
    outputs, launched = Outputs(), []
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_checker("float32"),
        scalar_limit=scalar_limit("float32"), **make_fields(outputs), output_shapes=((3,),), results=(0,),
        kernels=(native_kernel(0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta")),),
        context=7, hook=lambda index, parameters, shared: launched.append(parameters))
    call(sgemv_device(alpha=3.0e38, beta=-3.0e38))  # inside the range
    assert len(launched) == 1
    for bad, phrase in ((1e39, "outside the range of float32"), (-1e39, "outside the range of float32"),
                        (float("nan"), "must be finite")):
        with pytest.raises(ArgumentError, match=phrase) as info:
            call(sgemv_device(alpha=bad))
        assert info.value.argument == "alpha"
    assert len(launched) == 1


def test_a_failing_hook_or_allocator_propagates_its_error(extension):
    def broken(shape, dtype, stream):
        raise MemoryError("out of device memory")

    with pytest.raises(MemoryError):
        fast_sgemv(extension, broken, [])(sgemv_device())

    def refuses(index, parameters, shared):
        raise RuntimeError("launch failed")

    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(Outputs()), output_shapes=((3,),), results=(0,),
        kernels=(native_kernel(1, 1, 32, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta")),),
        context=7, hook=refuses)
    with pytest.raises(RuntimeError, match="launch failed"):
        call(sgemv_device())


@pytest.mark.parametrize("bad", [
    {"kernels": ((1, 1, 32, b"\0" * 8, ((4, "P", 0),)),)},  # the field runs past the buffer
    {"kernels": ((1, 1, 32, b"\0" * 8, ((0, "x", 0),)),)},  # no such kind
    {"kernels": ((1, 1, 32, b"\0" * 8, ((0, "P", 3),)),)},  # no such output
    {"results": (2,)},
    {"results": ()},
    {"signers": ()},
    {"pointer": ("data", 3)},
    {"make_kwargs": ["stream"]},
    {"output_shapes": ((3,),) * 65, "results": (0,)},  # a call keeps at most 64 on its stack
])
def test_a_malformed_description_is_refused(extension, bad):
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    fields = dict(array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
                  signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
                  **make_fields(Outputs()), output_shapes=((3,),), results=(0,), kernels=(), context=7,
                  hook=lambda *a: None)
    fields.update(bad)
    with pytest.raises((ValueError, TypeError)):
        extension.FastCall(**fields)


def test_a_missing_extension_says_how_to_build_it(monkeypatch):
    import sys

    from fusec.errors import GPUUnavailableError
    monkeypatch.setitem(sys.modules, "fusec.runtime._fastcall", None)  # its import now fails
    native._load.cache_clear()
    try:
        assert native.fastcall() is None
        with pytest.raises(GPUUnavailableError, match="not built.*pip install"):
            native.require()
    finally:
        native._load.cache_clear()


def test_a_call_on_another_stream_declines_before_anything_launches(extension):
    """A FastCall launches on the stream it was prepared on; a call on another
    stream goes the Python path, which prepares for that one."""
    outputs, launched = Outputs(), []
    call = fast_sgemv(extension, outputs, launched)  # prepared on the legacy default stream (0)
    assert call(sgemv_device(), 0x5000) is None and launched == [] and outputs.made == []
    assert call(sgemv_device(), 0) is not None and len(launched) == 1
    assert call(sgemv_device()) is not None and len(launched) == 2  # no stream said: its own



# sgemv with out=: z's address is packed (not changing); alpha and beta change
OUT_AT = POINTER + (2 << 20)
OUT_VALUES = VALUES[:3] + (OUT_AT,) + VALUES[4:]


def fast_sgemv_out(extension, outputs, launched, kernels=None, shapes=((3,),), results=(0,), given=("z",),
                   out=None, spares=True):
    """sgemv's FastCall prepared with out= arrays ``out`` (default: z at OUT_AT)."""
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    out = out if out is not None else {"z": device((3,), pointer=OUT_AT)}
    names = sorted(out)
    out_key = signature(7, out, tuple(names), frozenset())
    by_name = dict(zip(names, zip(out_key[1::2], out_key[2::2])))
    ordered = [by_name[name] for name in given if name is not None]
    if kernels is None:
        kernels = (native_kernel(0xF00, 2, 256, FORMAT, OUT_VALUES, (4, 5), ("alpha", "beta"), ("alpha", "beta")),)
    kinds = key[1::2]
    return extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=shapes, results=results, kernels=kernels, context=7,
        spares=spares, hook=lambda index, parameters, shared: launched.append((index, parameters)),
        given=given, out_types=tuple(kind for kind, _ in ordered),
        out_signers=tuple(_signer(kind) for kind, _ in ordered),
        out_signatures=tuple(described for _, described in ordered))


def test_a_call_with_out_arrays_packs_what_the_python_path_packs_and_returns_them(extension):
    """The out= array's address stays as packed, the scalars change; the result is that array,
    and nothing is allocated (nor made ahead for the next call)."""
    outputs, launched = Outputs(), []
    call = fast_sgemv_out(extension, outputs, launched)
    z = device((3,), pointer=OUT_AT)
    assert call(sgemv_device(alpha=0.25, beta=-2.0), None, {"z": z}) is z
    again = device((3,), pointer=OUT_AT)  # another object on the same memory: the same signature
    assert call(sgemv_device(alpha=3.0, beta=1.0), None, {"z": again}) is again
    assert launched == [(0, struct.pack("@" + FORMAT, *VALUES[:3], OUT_AT, 0.25, -2.0, 5, 3)),
                        (0, struct.pack("@" + FORMAT, *VALUES[:3], OUT_AT, 3.0, 1.0, 5, 3))]
    assert outputs.made == []


def test_an_output_no_out_array_holds_is_made_as_without(extension):
    """Two outputs, the second given: the first is allocated (made ahead where asked), the
    second is the out= array; results in the script's order."""
    outputs, launched = Outputs(), []
    kernel = native_kernel(1, 1, 32, "PPd", (0, OUT_AT, 0.0), (0, 2), (0, "alpha"), ("alpha", "beta"))
    call = fast_sgemv_out(extension, outputs, launched, kernels=(kernel,), shapes=((3,), (5,)), results=(1, 0),
                          given=(None, "w"), out={"w": device((5,), pointer=OUT_AT)}, spares=(True, True))
    w = device((5,), pointer=OUT_AT)
    first, second = call(sgemv_device(alpha=0.5), None, {"w": w})
    low = POINTER + (1 << 20)
    assert first is w and second == Out((3,), "float32", low)
    assert launched == [(0, struct.pack("@PPd", low, OUT_AT, 0.5))]
    assert [made.shape for made in outputs.made] == [(3,), (3,)]  # the result, and the next call's spare
    assert call.held_spares() == 1


@pytest.mark.parametrize("change", ["none", "empty", "pointer", "shape", "extra", "missing", "type", "not a dict"])
def test_other_out_arrays_decline_before_anything_launches(extension, change):
    outputs, launched = Outputs(), []
    call = fast_sgemv_out(extension, outputs, launched)
    out = {"z": device((3,), pointer=OUT_AT)}
    if change == "none":
        out = None
    elif change == "empty":
        out = {}
    elif change == "pointer":
        out = {"z": device((3,), pointer=OUT_AT + 256)}
    elif change == "shape":
        out = {"z": device((4,), pointer=OUT_AT)}
    elif change == "extra":
        out["w"] = device((3,), pointer=OUT_AT + 4096)
    elif change == "missing":
        out = {"w": out["z"]}
    elif change == "type":
        out = {"z": np.ones(3, np.float32)}
    else:
        out = list(out.items())
    assert call(sgemv_device(), None, out) is None
    assert launched == [] and outputs.made == []


def test_a_call_made_without_out_arrays_declines_a_call_with_them(extension):
    outputs, launched = Outputs(), []
    call = fast_sgemv(extension, outputs, launched)
    assert call(sgemv_device(), None, {"z": device((3,), pointer=OUT_AT)}) is None
    assert launched == [] and outputs.made == []
    assert call(sgemv_device(), None, {}) is not None and len(launched) == 1  # no out= array at all


@pytest.mark.parametrize("given,shapes", [
    (("z", "z"), ((3,), (3,))),  # a name twice
    ((None,), ((3,),)),  # no name at all
    (("z", None), ((3,),)),  # not one per output
    ((3,), ((3,),)),  # not a name
])
def test_malformed_out_names_are_refused(extension, given, shapes):
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    out_key = signature(7, {"z": device((3,), pointer=OUT_AT)}, ("z",), frozenset())
    with pytest.raises((ValueError, TypeError)):
        extension.FastCall(
            array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
            signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
            **make_fields(Outputs()), output_shapes=shapes, results=(0,), kernels=(), context=7,
            hook=lambda *a: None, given=given, out_types=(out_key[1],), out_signers=(_signer(out_key[1]),),
            out_signatures=(out_key[2],))

class CupyLike:
    """The attributes CuPy's signature reads."""

    class Memory:
        def __init__(self, ptr):
            self.ptr = ptr

    class Dtype:
        char = "f"

    def __init__(self, pointer, shape):
        self.data, self.shape, self.dtype = CupyLike.Memory(pointer), shape, CupyLike.Dtype()
        self.strides = tuple(4 * s for s in shape[1:]) + (4,)


class TorchLike:
    """The attributes and methods PyTorch's signature reads."""

    is_cuda = True
    dtype = "torch.float32"

    def __init__(self, pointer, shape):
        self.pointer, self.shape = pointer, shape

    def data_ptr(self):
        return self.pointer

    def stride(self):
        return tuple(1 for _ in self.shape)


@pytest.mark.parametrize("signer, kind", [("_cupy_signature", CupyLike), ("_torch_signature", TorchLike)])
def test_signature_steps_read_what_the_python_signers_read(extension, signer, kind):
    """CuPy's and PyTorch's signatures are read in C by paths of steps: the
    same items as the Python signer, so a prepared call keyed by one is found
    by the other, and a different array is told apart."""
    from fusec.runtime import prepared as P
    python_signer = getattr(P, signer)
    steps = P.SIGNATURE_STEPS[python_signer]
    same = kind(POINTER, (3, 5))
    expected = python_signer(same)
    assert len(steps) == len(expected)
    made, launched = [], []
    call = extension.FastCall(
        array_names=("A",), array_types=(kind,), signers=(steps,), signatures=(expected,), scalar_names=(),
        scalar_value=scalar_value, make=lambda shape: made.append(Out(shape, "f", POINTER)) or made[-1],
        make_args=(), make_kwargs=None, pointer=("data", "ptr"), output_shapes=((3,),), results=(0,),
        kernels=(), context=7, hook=lambda *a: launched.append(a))
    assert call({"A": same}) is made[0]
    assert call({"A": kind(POINTER, (3, 5))}) is made[1]  # another object, the same array
    assert call({"A": kind(POINTER + 64, (3, 5))}) is None
    assert call({"A": kind(POINTER, (5, 3))}) is None
    assert len(made) == 2


class CountedCupy:
    """A CuPy-like array that counts every read of its signature's attributes."""

    reads: list[str] = []

    class Dtype:
        char = "f"

    def __init__(self, pointer, shape):
        self._data, self._shape, self._dtype = CupyLike.Memory(pointer), shape, CountedCupy.Dtype()

    def _read(self, name, value):
        CountedCupy.reads.append(name)
        return value

    data = property(lambda self: self._read("data", self._data))
    dtype = property(lambda self: self._read("dtype", self._dtype))
    strides = property(lambda self: self._read("strides", tuple(4 * s for s in self._shape[1:]) + (4,)))

    @property
    def shape(self):
        return self._read("shape", self._shape)

    @shape.setter
    def shape(self, shape):  # CuPy reshapes in place
        self._shape = shape


def fast_counted(extension, steady=(True, False, True, True)):
    """A FastCall on one CountedCupy argument "A" of shape (3, 5) at POINTER, its
    results made by ``made``; steady as SIGNATURE_STEADY gives CuPy's."""
    from fusec.runtime import prepared as P
    made = []
    expected = P._cupy_signature(CupyLike(POINTER, (3, 5)))
    call = extension.FastCall(
        array_names=("A",), array_types=(CountedCupy,), signers=(P.SIGNATURE_STEPS[P._cupy_signature],),
        signatures=(expected,), scalar_names=(), scalar_value=scalar_value,
        make=lambda shape: made.append(Out(shape, "f", POINTER)) or made[-1], make_args=(), make_kwargs=None,
        pointer=("data", "ptr"), output_shapes=((3,),), results=(0,), kernels=(), context=7,
        hook=lambda *a: None, steady=None if steady is None else (steady,))
    return call, made


def test_the_same_cupy_array_again_reads_only_what_can_change(extension):
    """Where the same object comes again (a weak reference says so), its steady
    items (CuPy's data pointer, strides and dtype) are not read again; its shape
    is, as CuPy reshapes in place. Another object, even an equal one, is read whole."""
    call, made = fast_counted(extension)
    array = CountedCupy(POINTER, (3, 5))
    CountedCupy.reads.clear()
    assert call({"A": array}) is made[-1]
    assert sorted(CountedCupy.reads) == ["data", "dtype", "shape", "strides"]
    CountedCupy.reads.clear()
    assert call({"A": array}) is made[-1] and CountedCupy.reads == ["shape"]
    array.shape = (5, 3)
    assert call({"A": array}) is None and len(made) == 2  # declined, nothing made
    array.shape = (3, 5)
    assert call({"A": array}) is made[-1] and len(made) == 3
    CountedCupy.reads.clear()
    other = CountedCupy(POINTER, (3, 5))
    assert call({"A": other}) is made[-1]
    assert sorted(CountedCupy.reads) == ["data", "dtype", "shape", "strides"]
    CountedCupy.reads.clear()
    del other  # its weak reference dies with it: the next object is read whole
    assert call({"A": CountedCupy(POINTER, (3, 5))}) is made[-1]
    assert sorted(CountedCupy.reads) == ["data", "dtype", "shape", "strides"]
    assert call({"A": CountedCupy(POINTER + 64, (3, 5))}) is None


def test_without_steady_items_every_call_reads_the_whole_signature(extension):
    call, made = fast_counted(extension, steady=None)
    array = CountedCupy(POINTER, (3, 5))
    for _ in range(2):
        CountedCupy.reads.clear()
        assert call({"A": array}) is made[-1]
        assert sorted(CountedCupy.reads) == ["data", "dtype", "shape", "strides"]


def test_an_array_that_takes_no_weak_reference_is_read_whole_each_time(extension):
    class NoWeak:
        __slots__ = ("data", "shape", "strides", "dtype")

    from fusec.runtime import prepared as P
    expected = P._cupy_signature(CupyLike(POINTER, (3, 5)))
    array = NoWeak()
    array.data, array.shape, array.strides, array.dtype = CupyLike.Memory(POINTER), (3, 5), (20, 4), CupyLike.Dtype()
    made = []
    call = extension.FastCall(
        array_names=("A",), array_types=(NoWeak,), signers=(P.SIGNATURE_STEPS[P._cupy_signature],),
        signatures=(expected,), scalar_names=(), scalar_value=scalar_value,
        make=lambda shape: made.append(Out(shape, "f", POINTER)) or made[-1], make_args=(), make_kwargs=None,
        pointer=("data", "ptr"), output_shapes=((3,),), results=(0,), kernels=(), context=7,
        hook=lambda *a: None, steady=((True, False, True, True),))
    assert call({"A": array}) is made[-1] and call({"A": array}) is made[-1]
    array.data = CupyLike.Memory(POINTER + 64)  # read whole again: the change is seen
    assert call({"A": array}) is None


@pytest.mark.parametrize("steady, message", [
    (((True, False),), "one truth value per path"),
    (((True, False, True, True), None), "one item per array"),
])
def test_steady_items_that_do_not_match_the_signer_are_refused(extension, steady, message):
    from fusec.runtime import prepared as P
    with pytest.raises((ValueError, TypeError), match=message):
        extension.FastCall(
            array_names=("A",), array_types=(CupyLike,), signers=(P.SIGNATURE_STEPS[P._cupy_signature],),
            signatures=(P._cupy_signature(CupyLike(POINTER, (3, 5))),), scalar_names=(), scalar_value=scalar_value,
            make=lambda shape: None, make_args=(), make_kwargs=None, pointer=("data", "ptr"),
            output_shapes=((3,),), results=(0,), kernels=(), context=7, hook=lambda *a: None, steady=steady)


def test_steady_items_are_named_for_cupys_signature_only():
    """One truth value per item of CuPy's signature; PyTorch's can all change in place."""
    from fusec.runtime import prepared as P
    assert set(P.SIGNATURE_STEADY) == {P._cupy_signature}
    steps, steady = P.SIGNATURE_STEPS[P._cupy_signature], P.SIGNATURE_STEADY[P._cupy_signature]
    assert len(steady) == len(steps)
    assert [s for s, keep in zip(steps, steady) if not keep] == [("shape",)]


def test_spares_are_the_next_calls_outputs_made_after_the_launches(extension):
    """With spares, a call's outputs were made by the call before, after its
    launches; each is handed out once, and drop_spares lets them go."""
    events = []

    class Recording(Outputs):
        def __call__(self, shape, dtype, **kwargs):
            events.append("make")
            return super().__call__(shape, dtype, **kwargs)

    outputs = Recording()
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=((3,),), results=(0,),
        kernels=(native_kernel(1, 1, 32, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta")),),
        context=7, spares=True, hook=lambda index, parameters, shared: events.append(
            ("launch", struct.unpack_from("@P", parameters, parameter_offsets(FORMAT)[3])[0])))
    first = call(sgemv_device())
    assert events == ["make", ("launch", first.data.ptr), "make"] and call.held_spares() == 1
    second = call(sgemv_device())
    assert second is outputs.made[1] and second is not first
    assert events[3:] == [("launch", second.data.ptr), "make"]
    assert call(sgemv_device(pointer=POINTER + 64)) is None and call.held_spares() == 1  # declined: kept
    call.drop_spares()
    assert call.held_spares() == 0
    third = call(sgemv_device())
    assert third is outputs.made[3] and events[5:] == ["make", ("launch", third.data.ptr), "make"]


def test_a_spare_that_cannot_be_made_is_no_error(extension):
    """Out of memory making a spare: the call's results stand, and the next
    call allocates its own (raising then, if it still cannot)."""
    made, fail = [], [False]

    def make(shape, dtype, stream=None):
        if fail[0]:
            raise MemoryError("out of device memory")
        made.append(Out(shape, dtype, POINTER + 1024 * len(made)))
        return made[-1]

    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        make=make, make_args=("float32",), make_kwargs=None, pointer=("data", "ptr"), output_shapes=((3,),),
        results=(0,), kernels=(), context=7, spares=True, hook=lambda *a: None)
    assert call(sgemv_device()) is made[0] and call.held_spares() == 1
    fail[0] = True
    assert call(sgemv_device()) is made[1] and call.held_spares() == 0
    with pytest.raises(MemoryError):
        call(sgemv_device())


def test_spares_can_be_picked_per_output(extension):
    """spares=(True, False): the first output is made one call ahead, the second
    by each call on its way; a tuple of the wrong length names the rule."""
    outputs = Outputs()
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    fields = dict(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=((3,), (5,)), results=(0, 1), kernels=(), context=7,
        hook=lambda *a: None)
    call = extension.FastCall(**fields, spares=(True, False))
    first = call(sgemv_device())
    assert [o.shape for o in outputs.made] == [(3,), (5,), (3,)] and call.held_spares() == 1
    second = call(sgemv_device())
    assert second[0] is outputs.made[2] and second[1] is outputs.made[3]
    assert [o.shape for o in outputs.made[3:]] == [(5,), (3,)] and first[0] is not second[0]
    with pytest.raises(ValueError, match="one truth value per output"):
        extension.FastCall(**fields, spares=(True,))


class Forgetful(Outputs):
    """Outputs that keeps only where it put each array (what a memory pool knows), so
    that the caller and the FastCall are the arrays' only holders."""

    def __call__(self, shape, dtype, **kwargs):
        array = super().__call__(shape, dtype, **kwargs)
        self.made[-1] = array.data.ptr
        return array


def test_a_result_the_caller_let_go_is_written_again(extension):
    """With sole paths, the call keeps the result it returned; the next call writes
    it again when nothing else refers to it or to what holds its memory (the same
    address, no spare taken, nothing made), and takes the spare otherwise: the
    caller still holds the result, or its memory object (as a CuPy view does), or
    passes it in again."""
    outputs, launched = Forgetful(), []
    made = outputs.made  # addresses, in the order made
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=((3,),), results=(0,),
        kernels=(native_kernel(1, 1, 32, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta")),),
        context=7, spares=True, sole=(("data",),), hook=lambda index, parameters, shared: launched.append(
            struct.unpack_from("@P", parameters, parameter_offsets(FORMAT)[3])[0]))
    first = call(sgemv_device())
    assert first.data.ptr == made[0] and len(made) == 2  # made on the way, and the spare after
    assert call.held_results() == call.held_spares() == 1
    del first
    again = call(sgemv_device())
    assert again.data.ptr == made[0] and launched == [made[0]] * 2 and len(made) == 2
    held = call(sgemv_device())  # `again` is still the caller's: the spare
    assert held.data.ptr == made[1] and launched[2] == made[1] and len(made) == 3
    del again
    memory = held.data  # what a view of a CuPy array holds
    del held
    assert call(sgemv_device()).data.ptr == made[2] and len(made) == 4
    del memory
    last = call(sgemv_device())  # the one before was let go, with nothing holding its memory
    assert last.data.ptr == made[2] and len(made) == 4
    arguments = sgemv_device()
    arguments["z"] = last  # passed in again (by a script that names it): an argument holds it
    del last
    extra = extension.FastCall(
        array_names=ARRAYS + ("z",), array_types=tuple(kinds) + (Out,), signers=tuple(_signer(k) for k in kinds)
        + (lambda obj: None,), signatures=tuple(key[2::2]) + (None,), scalar_names=("alpha", "beta"),
        scalar_value=scalar_value, **make_fields(outputs), output_shapes=((3,),), results=(0,), kernels=(),
        context=7, spares=True, sole=(("data",),), hook=lambda *a: None)
    before = extra(arguments)
    arguments["z"] = before
    del before
    assert extra(arguments).data.ptr != arguments["z"].data.ptr
    call.drop_spares()
    assert call.held_results() == call.held_spares() == 0


def test_without_sole_paths_no_result_is_kept(extension):
    outputs = Outputs()
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    call = extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=((3,),), results=(0,), kernels=(), context=7, spares=True,
        hook=lambda *a: None)
    first_pointer = call(sgemv_device()).data.ptr
    assert call.held_results() == 0
    assert call(sgemv_device()).data.ptr != first_pointer  # the spare, though the first was let go


@pytest.mark.parametrize("sizes, ahead", [
    ((1 << 20, 64 << 20, 1 << 20), (True, True, True)),       # GEMVER at fp32 n = 4096: x, B, w
    ((1 << 20, 1 << 30, 1 << 20), (True, False, True)),       # at n = 16384: B is allocated per call
    ((100 << 20, 100 << 20), (True, False)),                  # the first of two that do not fit together
    ((), ()),
])
def test_the_smallest_outputs_are_made_ahead_within_spare_bytes(sizes, ahead):
    from fusec.runtime.prepared import SPARE_BYTES, made_ahead
    assert SPARE_BYTES == 128 << 20
    assert made_ahead(sizes) == ahead


@pytest.mark.parametrize("sole, error, message", [
    (["data"], TypeError, "sole"),                 # not a tuple of paths
    ((("data", 3),), TypeError, "a step must be a str"),
    (("data",), TypeError, "a path of steps must be a tuple of str"),
])
def test_sole_paths_that_are_not_paths_name_the_rule(extension, sole, error, message):
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    with pytest.raises(error, match=message):
        extension.FastCall(
            array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
            signatures=tuple(key[2::2]), scalar_names=("alpha", "beta"), scalar_value=scalar_value,
            **make_fields(Outputs()), output_shapes=((3,),), results=(0,), kernels=(), context=7, spares=True,
            sole=sole, hook=lambda *a: None)


# Each kernel writes, per block, the dynamic shared memory its launch passed (the
# %dynamic_smem_size register); the held one touches its last word too.
PROBES = r"""
extern "C" __global__ void fusec_probe_held(unsigned* out) {
  extern __shared__ unsigned held[];
  unsigned size;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  if (threadIdx.x == 0 && size >= 4) held[size / 4 - 1] = size;
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = size >= 4 ? held[size / 4 - 1] : size;
}
extern "C" __global__ void fusec_probe_plain(unsigned* out) {
  unsigned size;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
  if (threadIdx.x == 0) out[blockIdx.x] = size;
}
"""


@pytest.mark.gpu
def test_on_the_gpu_each_way_launches_with_the_kernels_dynamic_shared_bytes(extension):
    """The whole way, a prepared Launch and a C FastCall each launch the held
    probe with its 200 KB (past the 48 KB default: the leave was given) and the
    plain one with none; the driver's occupancy of the held one, through either
    loader of fusec's own copy, decides the residency check."""
    import pycuda.gpuarray as gpuarray
    from test_runtime_prepared import _kernel

    from fusec import nvcc
    from fusec.errors import ResidencyError
    from fusec.runtime import cuda, driver_api
    from fusec.runtime.prepared import Launch
    held, plain = _kernel("fusec_probe_held", dynamic_shared_bytes=HELD_SHARED, all_resident=True), \
        _kernel("fusec_probe_plain")
    with cuda.context() as ctx:
        loaded = cuda.Loaded(nvcc.compile_cubin(PROBES, arch=cuda.arch_of(ctx)).cubin, [held, plain])
        attribute = cuda.driver().function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES
        assert loaded.function(held).get_attribute(attribute) == HELD_SHARED
        whole, prepared = gpuarray.zeros(4, np.uint32), gpuarray.zeros(4, np.uint32)
        loaded.launch(held, 2, [int(whole.gpudata)])
        loaded.launch(plain, 2, [int(whole.gpudata) + 8])
        Launch(loaded.function(held)._launch_kernel, 2, 512, "P", (int(prepared.gpudata),), (), HELD_SHARED)([])
        Launch(loaded.function(plain)._launch_kernel, 2, 512, "P", (int(prepared.gpudata) + 8,), ())([])
        signer = _signer(type(whole))
        call = extension.FastCall(
            array_names=("A",), array_types=(type(whole),), signers=(signer,), signatures=(signer(whole),),
            scalar_names=(), scalar_value=scalar_value, make=gpuarray.empty, make_args=(np.uint32,),
            make_kwargs=None, pointer=("gpudata", "__int__()"), output_shapes=((2,), (2,)), results=(0, 1),
            kernels=tuple(native_kernel(loaded.own_function(k, extension), 2, 512, "P", (0,), (0,), (o,), (),
                                        loaded.shared[k.name]) for o, k in enumerate((held, plain))),
            context=driver_api.current_context())
        native_held, native_plain = call({"A": whole})
        expected = [HELD_SHARED, HELD_SHARED, 0, 0]
        assert list(whole.get()) == list(prepared.get()) == expected
        assert list(native_held.get()) + list(native_plain.get()) == expected
        sms = cuda.multiprocessor_count(ctx)
        per_sm = loaded.resident_blocks(held, extension)
        assert per_sm >= 1
        cuda.check_resident(held.name, per_sm * sms, per_sm, sms, held.block, HELD_SHARED)
        with pytest.raises(ResidencyError):
            cuda.check_resident(held.name, per_sm * sms + 1, per_sm, sms, held.block, HELD_SHARED)
        alone = cuda.Loaded(loaded.cubin, [held, plain])  # where the extension does not build
        assert alone.resident_blocks(held, driver_api) == per_sm
        assert alone.resident_blocks(plain, driver_api) >= per_sm
        alone.close()
        loaded.close()


def test_native_call_names_steady_items_for_cupy_arrays_only():
    """A prepared call hands the FastCall CuPy's steady items for each CuPy array,
    and none for the other kinds (a PyTorch-like tensor here)."""
    import types

    from fusec.runtime import prepared as P
    from fusec.runtime.cuda import Allocator

    CupyArray = type("ndarray", (CupyLike,), {"__module__": "cupy._core.core", "data": None, "strides": None})
    TorchTensor = type("Tensor", (TorchLike,), {"__module__": "torch"})
    captured = {}
    module = types.SimpleNamespace(FastCall=lambda **fields: captured.update(fields) or "fast call")
    call = P.PreparedCall(launches=(), output_shapes=((3,),), results=(0,),
                          allocate=Allocator(lambda shape: None, pointer=("data", "ptr")),
                          scalar_names=(), keep_alive=None)
    arrays = {"A": CupyArray(POINTER, (3, 5)), "x": TorchTensor(POINTER + 4096, (5,))}
    key = P.signature(7, arrays, ("A", "x"), frozenset())
    assert P.native_call(module, 7, key, ("A", "x"), (), call, (12,)) == "fast call"
    assert captured["steady"] == (P.SIGNATURE_STEADY[P._cupy_signature], None)
    torch_only = {"x": arrays["x"]}
    P.native_call(module, 7, P.signature(7, torch_only, ("x",), frozenset()), ("x",), (), call, (12,))
    assert captured["steady"] is None
