"""The prepared-call path (fusec/runtime/prepared.py) without a GPU: what a
call's signature depends on, and when a prepared call declines; and for
kernels with dynamic shared memory and a grid barrier, what each launch
passes and the residency check before any launch. Device arrays are faked
as in test_runtime_binding, PyCUDA and the driver by stand-ins."""

from __future__ import annotations

import numpy as np
import pytest
from test_runtime_binding import POINTER, device_class

from fusec.runtime.prepared import PreparedCall, input_extents, placed_elsewhere, signature

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
    unordered = device_class("unordered_device", block_until_ready=lambda self: None)()
    unordered._cai = sgemv_device()["A"]._cai  # an array JAX may still be writing: waited for every call
    assert signature(1, sgemv_device(A=unordered), ARRAYS, SCALARS) is None


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


def test_a_prepared_call_refuses_a_float_beyond_its_precision():
    """As the whole way does: 1e39 would reach a float32 kernel as infinity."""
    import pytest

    from fusec.errors import ArgumentError
    from fusec.runtime.arrays import scalar_checker, scalar_limit
    seen = []
    call = PreparedCall(launches=((lambda values: seen.append(values), ("alpha",)),), output_shapes=(), results=(),
                        allocate=None, scalar_names=("alpha",), keep_alive=None,
                        scalar_limit=scalar_limit("float32"), scalar_value=scalar_checker("float32"))
    call({"alpha": -3.0e38})
    assert len(seen) == 1
    with pytest.raises(ArgumentError, match="outside the range of float32") as info:
        call({"alpha": 1e39})
    assert info.value.argument == "alpha" and len(seen) == 1


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


def _with_out(pointer, m=3, n=5, y=POINTER + 65536):
    """The key of an sgemv call with ``out={"y": ...}`` (as Program._key makes it)."""
    return (signature(1, sgemv_device(pointer=pointer, m=m, n=n), ARRAYS, SCALARS),
            signature(1, {"y": device((m,), pointer=y)}, ("y",), frozenset()))


def test_a_call_with_out_arrays_is_known_again_with_its_inputs_elsewhere():
    """With out= arrays, a call's key less its inputs' addresses: the same for the same shapes
    elsewhere in memory at the same 16-byte alignment (the prepared flags depend on it), not
    for other shapes, another alignment or other out= arrays; the addresses come in order,
    and the extents of the out= arrays and of the inputs in bytes."""
    placed, pointers, outs = placed_elsewhere(_with_out(POINTER), 4)
    far = POINTER + (1 << 20)
    moved, moved_pointers, _ = placed_elsewhere(_with_out(far), 4)
    assert moved == placed and pointers == (POINTER, POINTER + 4096, POINTER + 8192)
    assert moved_pointers == (far, far + 4096, far + 8192)
    assert placed_elsewhere(_with_out(POINTER + 4), 4)[0] != placed  # 4 bytes past a 16-byte boundary
    assert placed_elsewhere(_with_out(POINTER, m=4), 4)[0] != placed
    assert placed_elsewhere(_with_out(POINTER, y=POINTER + 131072), 4)[0] != placed
    assert outs == ((POINTER + 65536, POINTER + 65536 + 12),)
    assert input_extents(_with_out(POINTER), pointers, 4) == [(POINTER, POINTER + 60), (POINTER + 4096, POINTER + 4116),
                                                             (POINTER + 8192, POINTER + 8204)]


def test_a_prepared_call_with_out_arrays_hands_each_launch_its_inputs_addresses():
    """Its changing fields -1 - i take the i-th input's address of this call."""
    seen = []
    launches = ((lambda values: seen.append(values), (-2, "alpha", -1)),)
    call = PreparedCall(launches=launches, output_shapes=((3,),), results=(0,), allocate=None,
                        scalar_names=("alpha",), keep_alive=None, given=("y",), inputs=True)
    out = {"y": "the out array"}
    assert call({"alpha": 0.5}, out, (POINTER, POINTER + 4096)) == "the out array"
    assert call({"alpha": 0.5}, out, (POINTER + 256, POINTER + 512)) == "the out array"
    assert seen == [[POINTER + 4096, 0.5, POINTER], [POINTER + 512, 0.5, POINTER + 256]]


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
    """The extension's ``launch`` stand-in: records its arguments and the
    parameter buffer's bytes at the moment of each launch."""

    def __init__(self):
        self.calls = []

    def __call__(self, function, grid, block, shared, stream, buffer, dependent):
        self.calls.append(((function, grid, block, shared, stream, dependent), bytes(buffer)))


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
    launch = Launch(fake, 0xF1, 33, 256, "PPfiq", (POINTER, 0, np.float32(1.5), 1, 1 << 40), changing=(1, 2),
                    stream=0x5000)
    launch([POINTER + 64, 0.25])
    launch([POINTER + 128, -3.0])
    (head, first), (_, second) = fake.calls
    assert head == (0xF1, 33, 256, 0, 0x5000, False)
    assert first == struct.pack("@PPfiq", POINTER, POINTER + 64, 0.25, 1, 1 << 40)
    assert second == struct.pack("@PPfiq", POINTER, POINTER + 128, -3.0, 1, 1 << 40)
    Launch(fake, 0xF1, 33, 256, "P", (POINTER,), changing=(), dependent=True)([])
    assert fake.calls[-1][0][-1] is True  # a programmatic dependent launch


def test_the_extension_is_built_with_the_package_and_needs_no_gpu_to_import():
    """fusec's launch binding comes with the package (setup.py), never built on
    first use; it imports without a GPU (the driver is opened when first used)."""
    from fusec.runtime import native
    ext = native.require()
    for name in ("load_module", "get_function", "unload_module", "launch", "wait", "synchronize",
                 "current_context", "push_context", "pop_context", "resident_blocks", "set_max_dynamic_shared",
                 "FastCall"):
        assert callable(getattr(ext, name)), name
    assert native.unavailable() is None


# -- dynamic shared memory and all blocks resident (a held kernel's grid barrier) ------

HELD_SHARED = 200 * 1024  # past the 48 KB a launch may pass without the function's leave


def test_a_bound_launch_passes_its_dynamic_shared_bytes():
    from fusec.runtime.prepared import Launch
    fake = _FakeLaunchKernel()
    Launch(fake, 0xF1, 132, 512, "Pi", (POINTER, 1), changing=(0,), shared=HELD_SHARED)([POINTER + 64])
    Launch(fake, 0xF2, 2, 256, "Pi", (POINTER, 1), changing=(0,))([POINTER + 64])
    assert [head for head, _ in fake.calls] == [(0xF1, 132, 512, HELD_SHARED, 0, False),
                                                (0xF2, 2, 256, 0, 0, False)]


def test_the_residency_check_passes_when_every_block_fits():
    from fusec.runtime.cuda import check_resident
    assert check_resident("held_0", 132, 1, 132, 512, HELD_SHARED) is None
    assert check_resident("held_0", 264, 2, 132, 256, 0) is None
    assert check_resident("held_0", 1, 1, 1, 32, 0) is None


@pytest.mark.parametrize("grid, per_sm, sms", [(133, 1, 132), (265, 2, 132), (1, 0, 132)])
def test_the_residency_check_names_the_kernel_its_grid_and_what_fits(grid, per_sm, sms):
    from fusec.errors import FusecError, ResidencyError
    from fusec.runtime.cuda import check_resident
    with pytest.raises(ResidencyError) as info:
        check_resident("held_0", grid, per_sm, sms, 512, HELD_SHARED)
    assert isinstance(info.value, FusecError)
    message = str(info.value)
    assert message.startswith(f"kernel held_0 needs all its {grid} blocks resident at once")
    assert "grid barrier" in message
    assert f"the GPU holds {per_sm * sms} at once: {per_sm} per SM x {sms} SMs" in message
    assert f"blocks of 512 threads with {HELD_SHARED} bytes of dynamic shared memory" in message
    assert "not launched" in message


def _kernel(name, **held):
    """A kernel as the runtime reads it: one output pointer, and the launch needs
    every kernel class has (:class:`fusec.ir.kernel.LaunchNeeds`); held kernels set
    ``dynamic_shared_bytes`` and ``all_resident``."""
    from types import SimpleNamespace
    needs = {"dynamic_shared_bytes": 0, "all_resident": False, "function_names": (name,), **held}
    return SimpleNamespace(name=name, block=512, dtype="float32", args=(SimpleNamespace(role="out"),), **needs)


class _FakeBinding:
    """The extension's module calls Loaded makes, in context 7."""

    def __init__(self, per_sm=1, dependent=True):
        self.per_sm, self.calls, self.dependent = per_sm, [], dependent

    def dependent_launch(self):
        return self.dependent

    def current_context(self):
        return 7

    def load_module(self, image):
        self.calls.append(("load", image))
        return 0xA000

    def get_function(self, module, name):
        self.calls.append(("get", module, name))
        return 0xF000 + len(self.calls)

    def set_max_dynamic_shared(self, function, nbytes):
        self.calls.append(("leave", function, nbytes))

    def resident_blocks(self, function, block, shared):
        self.calls.append(("occupancy", function, block, shared))
        return self.per_sm

    def launch(self, function, grid, block, shared, stream, parameters, dependent=False):
        self.calls.append(("launch", function, grid, block, shared, stream, bytes(parameters), dependent))

    def unload_module(self, module):
        self.calls.append(("unload", module))


def test_the_whole_way_launches_with_the_kernels_dynamic_shared_bytes(monkeypatch):
    """The cubin is loaded once; a kernel with dynamic shared memory gets the leave
    to take its bytes (past 48 KB a launch fails without it) before any launch, and
    each launch passes them, on the stream given; the occupancy is asked for its
    block and its bytes; closing unloads the module."""
    import struct

    from fusec.runtime import cuda, native
    fake = _FakeBinding()
    monkeypatch.setattr(native, "require", lambda: fake)
    held, plain = _kernel("held_0", dynamic_shared_bytes=HELD_SHARED, all_resident=True), _kernel("k1")
    loaded = cuda.Loaded(b"cubin", [held, plain])
    function = loaded.function(held)
    assert fake.calls == [("load", b"cubin"), ("get", 0xA000, "held_0"), ("leave", function, HELD_SHARED),
                          ("get", 0xA000, "k1")]  # no leave for a kernel without
    loaded.launch(held, 132, [POINTER], 0x5000)
    loaded.launch(plain, 3, [POINTER])
    packed = struct.pack("@P", POINTER)
    assert fake.calls[-2:] == [("launch", function, 132, 512, HELD_SHARED, 0x5000, packed, False),
                               ("launch", loaded.function(plain), 3, 512, 0, 0, packed, False)]
    assert loaded.shared == {"held_0": HELD_SHARED, "k1": 0}
    assert loaded.resident_blocks(held) == 1
    assert fake.calls[-1] == ("occupancy", function, 512, HELD_SHARED)
    loaded.close()
    assert fake.calls[-1] == ("unload", 0xA000)


class _Held:
    """One of a real program's kernels as a held kernel would be: all its blocks
    resident at once, with dynamic shared memory."""

    all_resident = True
    dynamic_shared_bytes = HELD_SHARED

    def __init__(self, kernel):
        self._kernel = kernel

    def __getattr__(self, name):
        return getattr(self._kernel, name)


class _Residency:
    """A loaded program's stand-in, with the occupancy its kernels get."""

    def __init__(self, kernels, per_sm):
        self.per_sm, self.asked, self.launched = per_sm, [], []
        self.shared = {k.name: k.dynamic_shared_bytes for k in kernels}

    def resident_blocks(self, kernel):
        self.asked.append(kernel.name)
        return self.per_sm

    def launch(self, kernel, grid, args, stream=None, function=None):
        self.launched.append(function or kernel.name)


def _held_sgemv(monkeypatch, per_sm, sms=132):
    import dataclasses
    from types import SimpleNamespace

    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    from tests.helpers import program
    generated = program("sgemv", "float32").generated
    held = Program(dataclasses.replace(generated, kernels=tuple(_Held(k) for k in generated.kernels)))
    loaded = _Residency(held.kernels, per_sm)

    class Context:  # the current context, as cuda.context() gives it
        def __enter__(self):
            return SimpleNamespace(handle=1)

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(cuda, "context", Context)
    monkeypatch.setattr(cuda, "multiprocessor_count", lambda ctx: sms)
    monkeypatch.setattr(held, "_load", lambda ctx: loaded)
    return held, loaded


def test_a_kernel_that_cannot_be_all_resident_is_never_launched(monkeypatch):
    """The check runs before anything is allocated or launched at new sizes: a
    failing one raises, and leaves no buffers and no prepared call behind (so
    no warm call, in Python or in C, can launch it either)."""
    from test_runtime_binding import sgemv_args

    from fusec.errors import ResidencyError
    held, loaded = _held_sgemv(monkeypatch, per_sm=0)
    with pytest.raises(ResidencyError, match=f"kernel {held.kernels[0].name} needs all its"):
        held.run(sgemv_args(m=300, n=200))
    cache = held.cache_info()
    assert loaded.launched == [] and cache.sizes == 0 and cache.prepared == 0 and not cache.in_c


def test_the_residency_check_asks_for_each_held_kernel_at_its_grid(monkeypatch):
    """Each held kernel's occupancy, asked of the loaded module (the extension),
    against its grid at these sizes: one SM short of the largest grid fails."""
    from types import SimpleNamespace

    from fusec.errors import ResidencyError
    from fusec.runtime import cuda
    held, loaded = _held_sgemv(monkeypatch, per_sm=1, sms=10_000)
    sizes = {"m": 300, "n": 200}
    assert held._check_resident(SimpleNamespace(handle=1), sizes) is None
    assert loaded.asked == [k.name for k in held.kernels]
    grid = max(k.grid(sizes) for k in held.kernels)
    monkeypatch.setattr(cuda, "multiprocessor_count", lambda ctx: grid - 1)
    with pytest.raises(ResidencyError, match=f"all its {grid} blocks"):
        held._check_resident(SimpleNamespace(handle=1), sizes)


def test_a_program_without_held_kernels_asks_nothing(monkeypatch):
    from types import SimpleNamespace

    from fusec.runtime import cuda
    from tests.helpers import program
    plain = program("sgemv", "float32")

    def unwanted(*args):
        raise AssertionError("asked the GPU")

    monkeypatch.setattr(cuda, "multiprocessor_count", unwanted)
    monkeypatch.setattr(plain, "_load", unwanted)
    assert plain._check_resident(SimpleNamespace(handle=1), {"m": 300, "n": 200}) is None


# -- programmatic dependent launches ---------------------------------------------------

@pytest.mark.parametrize(("asked", "driver_has", "launched"), [(True, True, True), (True, False, False),
                                                               (False, True, False)])
def test_kernels_are_dependent_launches_where_asked_and_the_driver_has_them(monkeypatch, asked, driver_has,
                                                                           launched):
    from fusec.runtime import cuda, native
    fake = _FakeBinding(dependent=driver_has)
    monkeypatch.setattr(native, "require", lambda: fake)
    plain = _kernel("k1")
    loaded = cuda.Loaded(b"cubin", [plain], dependent=asked)
    loaded.launch(plain, 3, [POINTER])
    assert loaded.dependent is launched and fake.calls[-1][-1] is launched


def test_dependent_launches_from_sm_90_on():
    from fusec.runtime.cuda import has_dependent_launch
    assert [has_dependent_launch(a) for a in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120")] \
        == [False, False, False, True, True, True, True]


def test_a_program_takes_dependent_launch_as_a_bool():
    from helpers import ROOT

    from fusec import compile as fusec_compile
    from fusec.runtime.program import Program
    program = fusec_compile(ROOT / "scripts" / "bicgk.script", gpu="h100")
    assert program.dependent_launch is True
    assert Program(program.generated, dependent_launch=False).dependent_launch is False
    with pytest.raises(TypeError, match="dependent_launch must be True or False"):
        Program(program.generated, dependent_launch="no")


def test_results_made_by_pycuda_are_made_in_a_context_pycuda_knows(monkeypatch):
    """A prepared call runs with a context current through the driver only (pushed by the
    extension, or left by CuPy or JAX), which PyCUDA's own context stack does not hold: its
    results for arrays of no framework fusec knows are made inside ``cuda.context()``, which
    pushes one the PyCUDA way where none is on that stack."""
    import sys
    import types

    from fusec.runtime import cuda
    events = []

    class Recording:
        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

    def empty(shape, dtype):
        events.append(("empty", shape, dtype))
        return types.SimpleNamespace(gpudata=4096)

    gpuarray = types.ModuleType("pycuda.gpuarray")
    gpuarray.empty = empty
    monkeypatch.setitem(sys.modules, "pycuda", types.ModuleType("pycuda"))
    monkeypatch.setitem(sys.modules, "pycuda.gpuarray", gpuarray)
    monkeypatch.setattr(cuda, "context", Recording)
    array, pointer = cuda.allocator("cuda", np.dtype(np.float32), None)((3, 5))
    assert pointer == 4096 and events == ["enter", ("empty", (3, 5), np.dtype(np.float32)), "exit"]


class _Native:
    """A FastCall stand-in that records when it lets go of what it made ahead."""

    def __init__(self, name):
        self.name, self.dropped = name, 0

    def drop_spares(self):
        self.dropped += 1

    def held_spares(self):
        return 0

    def held_results(self):
        return 0


def test_the_last_two_calls_with_out_arrays_are_kept_hot_and_the_one_without_apart():
    """Calls with out= keep the last two C calls tried (a loop may pass two sets in turn); a
    third pushes the oldest out, which lets go of what it made ahead. The call without out= is
    kept apart, and releasing the program forgets every one."""
    from tests.helpers import program
    prog = program("sgemv", "float32")
    prog.release()
    first, second, third, plain = (_Native(name) for name in ("first", "second", "third", "plain"))
    for native in (first, second, first):  # the first used again: to the front, nothing dropped
        prog._make_hot(native, lambda: 0, given=True)
    assert [call.name for call, _ in prog._hot_out] == ["first", "second"] and second.dropped == 0
    prog._make_hot(plain, lambda: 0)
    prog._make_hot(third, lambda: 0, given=True)
    assert [call.name for call, _ in prog._hot_out] == ["third", "first"]
    assert (second.dropped, first.dropped, plain.dropped) == (1, 0, 0)
    assert prog.cache_info().in_c
    prog.release()
    assert prog._hot_out == [] and prog.cache_info().in_c is False
    assert (third.dropped, first.dropped, plain.dropped) == (1, 1, 1)


def test_a_kernel_whose_sums_run_apart_launches_twice_on_one_list_of_arguments(monkeypatch):
    """BiCGK's tile kernel on the reference GPU (dependent launches): its own function, then its
    sums, both on the same argument list, worked out once a call: the direction of its walk is
    taken once (each take alternates it), and the sums read the kernel's workspaces."""
    from types import SimpleNamespace

    from tests.helpers import tile_program
    prog = tile_program("bicgk", "float32")
    (kernel,) = prog.kernels
    assert kernel.sums_apart
    worked_out = []
    monkeypatch.setattr(prog, "_kernel_args", lambda k, buffers, pointers, binding: worked_out.append(k) or [0])
    sizes = {"m": 1000, "n": 3000}
    launches = prog._launches(None, None, SimpleNamespace(sizes=sizes))
    assert [(function, grid) for _, function, grid, _ in launches] == list(kernel.launches(sizes))
    assert [function for _, function, _, _ in launches] == [kernel.name, f"{kernel.name}_sums"]
    assert worked_out == [kernel] and launches[0][3] is launches[1][3]
