"""The C extension's warm call (fusec/runtime/fastcall.c) without a GPU: it is
built with the C compiler and Python's headers, and a FastCall made with a hook
hands the hook each kernel's parameter bytes instead of launching. Checked
against what the Python path (PreparedCall and Launch) packs and returns, and
for every case where it must decline. Device arrays are faked as in
test_runtime_prepared."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from fusec.errors import ArgumentError
from fusec.runtime import native
from fusec.runtime.arrays import scalar_value
from fusec.runtime.prepared import Turn, _signer, native_kernel, parameter_offsets, signature
from test_runtime_binding import POINTER
from test_runtime_prepared import ARRAYS, SCALARS, device, sgemv_device


@pytest.fixture(scope="module")
def extension(tmp_path_factory):
    import os
    saved = os.environ.get("FUSEC_CACHE_DIR")
    os.environ["FUSEC_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    native._load.cache_clear()
    try:
        module = native.fastcall()
        if module is None:
            pytest.skip(f"no C extension here: {native.unavailable()}")
        yield module
    finally:
        if saved is None:
            os.environ.pop("FUSEC_CACHE_DIR", None)
        else:
            os.environ["FUSEC_CACHE_DIR"] = saved
        native._load.cache_clear()


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
               kernels=None):
    key = signature(7, sgemv_device(), ARRAYS, SCALARS)
    kinds = key[1::2]
    if kernels is None:
        kernels = (native_kernel(0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, scalar_names),)
    return extension.FastCall(
        array_names=ARRAYS, array_types=tuple(kinds), signers=tuple(_signer(k) for k in kinds),
        signatures=tuple(key[2::2]), scalar_names=scalar_names, scalar_value=scalar_value,
        **make_fields(outputs), output_shapes=shapes, results=results, kernels=kernels, context=7,
        hook=lambda index, parameters: launched.append((index, parameters)))


def test_native_kernel_names_each_changing_field_by_offset_kind_and_source():
    function, grid, block, parameters, changes = native_kernel(
        0xF00, 2, 256, FORMAT, VALUES, CHANGING, SOURCES, ("alpha", "beta"))
    offsets = parameter_offsets(FORMAT)
    assert (function, grid, block) == (0xF00, 2, 256)
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
        context=7, hook=lambda index, parameters: launched.append(parameters))
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


def test_a_failing_hook_or_allocator_propagates_its_error(extension):
    def broken(shape, dtype, stream):
        raise MemoryError("out of device memory")

    with pytest.raises(MemoryError):
        fast_sgemv(extension, broken, [])(sgemv_device())

    def refuses(index, parameters):
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


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("FUSEC_FASTCALL", "0")
    native._load.cache_clear()
    try:
        assert native.fastcall() is None
        assert "FUSEC_FASTCALL=0" in native.unavailable()
    finally:
        native._load.cache_clear()


def test_a_compiler_that_fails_is_reported_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    native._load.cache_clear()
    try:
        assert native.fastcall() is None
        assert "could not be built" in native.unavailable()
    finally:
        native._load.cache_clear()


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
        context=7, spares=True, hook=lambda index, parameters: events.append(
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
        context=7, spares=True, sole=(("data",),), hook=lambda index, parameters: launched.append(
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
