"""Calls on device arrays fusec has seen before: checks and arguments worked out once.

Everything a call works out besides its scalars' values and its outputs (the
arguments' checks, the sizes, the grids, each kernel's arguments and its
16-byte-alignment flag, the buffers) depends only on where the device arrays
are: their addresses, shapes, strides and element type, and the CUDA context.
So the first call on such a set of arrays goes the whole way and leaves a
:class:`PreparedCall`; a later call with the same *signature* checks its
scalars, allocates its outputs and launches, nothing more. At n = 4096 the
whole way costs more host time than the kernels take on the GPU.

A freed array whose memory a new one of the same shape reuses has the same
signature, rightly: the prepared arguments are exactly right for it. NumPy
arguments never take this path (their copies dominate anyway).

Where the C extension builds (:mod:`.native`), each prepared call also comes as
a ``FastCall`` (``fastcall.c``) doing the same in C: :func:`native_call` spells
the call out for it (signatures as paths of steps, the allocator as a
constructor and its arguments, each kernel's packed parameters and changing
fields by :func:`native_kernel`). A call with ``out=`` arrays comes so too, for
those ``out=`` arrays on the inputs it was prepared on; on inputs elsewhere in
memory it runs in Python (:attr:`PreparedCall.inputs`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
from typing import Any, Callable, Mapping, Sequence

from .arrays import scalar_value, unordered

# Outputs up to this many bytes in all are made one call ahead by the C extension
# (it holds them between calls, and with CuPy the last results too once the caller
# lets them go, so this is memory kept aside per warm program, twice over at most).
# Allocating on the call's way delays the first launch by several microseconds, which a
# small program notices; past this size an allocation is short beside the kernels.
SPARE_BYTES = 128 << 20


def made_ahead(output_bytes: Sequence[int]) -> tuple[bool, ...]:
    """Which outputs a warm call makes one call ahead: the smallest first, while
    their total stays within SPARE_BYTES (small ones cost the host the same
    allocation time as big ones, and hold little)."""
    ahead, total = [False] * len(output_bytes), 0
    for o in sorted(range(len(output_bytes)), key=lambda o: output_bytes[o]):
        if total + output_bytes[o] > SPARE_BYTES:
            break
        ahead[o], total = True, total + output_bytes[o]
    return tuple(ahead)


class Turns:
    """The direction each launch of a turning kernel (``Kernel.turns``) of one
    turn group walks its grid: the other one from the group's launch before,
    so that a launch starts on the tiles that launch ended on, whose lines L2
    still holds. One per group of a program; the C FastCall keeps its own."""

    def __init__(self):
        self.last = 1

    def __call__(self) -> int:
        """1 (backwards) or 0 for the next launch."""
        self.last ^= 1
        return self.last


@dataclasses.dataclass(frozen=True)
class Turn:
    """A changing field's source: the launch's direction, from its turn group's Turns."""

    group: int


def _torch_signature(tensor) -> tuple | None:
    if not tensor.is_cuda:
        return None
    return (True, tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype)


def _cupy_signature(array) -> tuple:
    return (array.data.ptr, array.shape, array.strides, array.dtype.char)


# The same signatures as paths of steps (attributes, "name()" a method called),
# one per item, which the C extension reads without a Python call.
SIGNATURE_STEPS: dict[Callable, tuple[tuple[str, ...], ...]] = {
    _cupy_signature: (("data", "ptr"), ("shape",), ("strides",), ("dtype", "char")),
    _torch_signature: (("is_cuda",), ("data_ptr()",), ("shape",), ("stride()",), ("dtype",)),
}

# Which of those items cannot change while the object lives, per item: the C
# extension reads only the others when the same object comes again (a weak
# reference tells it so). A CuPy array's data pointer, strides and dtype cannot
# be set (its strides follow its shape, which can: ``a.shape = ...`` reshapes
# in place); CuPy's private setters (``_set_shape_and_strides``) are not
# followed. Reading them costs the host a fraction of a microsecond per array
# (docs/notes/striped-fusion-measurements.md). A PyTorch tensor can change anything in place (``set_``, ``resize_``,
# ``.data =``), so every item is read every time.
SIGNATURE_STEADY: dict[Callable, tuple[bool, ...]] = {
    _cupy_signature: (True, False, True, True),
}


def _interface_signature(obj) -> tuple | None:
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None or interface.get("stream") is not None:
        return None  # one naming its producer's stream is waited for on the whole way, every call
    return (interface["data"][0], tuple(interface["shape"]), interface.get("strides"), interface["typestr"])


_SIGNERS: dict[type, Callable[[Any], tuple | None]] = {}


def _signer(kind: type) -> Callable[[Any], tuple | None]:
    """How to read an argument's signature cheaply, once per argument type:
    CuPy and PyTorch through their own attributes (PyTorch builds its
    ``__cuda_array_interface__`` in Python, slowly), others through the
    interface. NumPy arrays, arrays the host waits for every call (JAX's:
    :func:`~fusec.runtime.arrays.unordered`) and anything else have none."""
    if kind not in _SIGNERS:
        module = kind.__module__.split(".")[0]
        if module == "numpy" or unordered(kind):
            _SIGNERS[kind] = lambda obj: None
        elif module == "cupy" and hasattr(kind, "data") and hasattr(kind, "strides"):
            _SIGNERS[kind] = _cupy_signature
        elif module == "torch" and hasattr(kind, "data_ptr"):
            _SIGNERS[kind] = _torch_signature
        else:
            _SIGNERS[kind] = _interface_signature
    return _SIGNERS[kind]


def signature(context: int, arguments: Mapping[str, Any], array_names: tuple[str, ...],
              scalar_names: frozenset[str]) -> tuple | None:
    """What a call's prepared work depends on, or None when it cannot be
    prepared (a NumPy or host argument, a name that is not an input, a
    missing one: the whole way reports those)."""
    if not array_names or len(arguments) != len(array_names) + len(scalar_names):
        return None  # no device array: nothing says where results go
    key: list = [context]
    for name in array_names:
        obj = arguments.get(name)
        kind = type(obj)
        described = (_SIGNERS.get(kind) or _signer(kind))(obj)
        if described is None:
            return None
        key.append(kind)
        key.append(described)
    for name in scalar_names:
        if name not in arguments:
            return None
    return tuple(key)


# Where each signer's tuple holds the array's address (its shape follows it).
_POINTER_AT: dict[Callable, int] = {_cupy_signature: 0, _torch_signature: 1, _interface_signature: 0}


def _arrays(signature: tuple):
    """(kind, its signer's tuple, where the address is in it) of each array of a signature."""
    for kind, described in zip(signature[1::2], signature[2::2]):
        yield kind, described, _POINTER_AT[_SIGNERS[kind]]


def _extents(signature: tuple, itemsize: int) -> list[tuple[int, int]]:
    return [(described[at], described[at] + math.prod(described[at + 1]) * itemsize)
            for _, described, at in _arrays(signature)]


def input_pointers(key: tuple) -> tuple[int, ...]:
    """The inputs' addresses of a call's key, in order (what :attr:`PreparedCall.inputs` takes)."""
    return tuple(described[at] for _, described, at in _arrays(key[0]))


def placed_elsewhere(key: tuple, itemsize: int) -> tuple[tuple, tuple[int, ...], tuple[tuple[int, int], ...]]:
    """For the key of a call with ``out=`` arrays (``(inputs' signature, out='s)``): the key
    without the inputs' addresses, each input's 16-byte alignment kept instead (the prepared
    flags depend on it), the inputs' addresses in order, and the byte extents of the ``out=``
    arrays. A call prepared on other inputs' memory of the same shapes serves such a call with
    the new addresses in its launches (:attr:`PreparedCall.inputs`)."""
    signature, given = key
    stripped = [signature[0]]
    for kind, described, at in _arrays(signature):
        stripped += [kind, described[:at] + (described[at] % 16 == 0,) + described[at + 1:]]
    return (tuple(stripped), given), input_pointers(key), tuple(_extents(given, itemsize))


def input_extents(key: tuple, pointers: Sequence[int], itemsize: int) -> list[tuple[int, int]]:
    """The byte extents of the inputs of ``key`` (see :func:`placed_elsewhere`) at ``pointers``."""
    return [(pointer, pointer + end - start) for pointer, (start, end) in zip(pointers, _extents(key[0], itemsize))]


def parameter_offsets(parameter_format: str) -> tuple[int, ...]:
    """Byte offset of each kernel parameter in its packed buffer (native
    alignment, as PyCUDA packs them and the kernel's ABI lays them out)."""
    return tuple(struct.calcsize("@" + parameter_format[:i + 1]) - struct.calcsize("@" + code)
                 for i, code in enumerate(parameter_format))


class Launch:
    """One kernel launch with its parameters packed once into a buffer of
    its own. A call rewrites the fields that change (outputs, scalars) in
    place and launches through the extension's ``launch`` bound to the
    function, the grid, the block, the bytes of dynamic shared memory, the
    stream and the buffer. The driver copies the parameters at launch, so
    the buffer is free to rewrite for the next."""

    def __init__(self, launch: Callable, function: int, grid: int, block: int, parameter_format: str,
                 values: Sequence, changing: Sequence[int], shared: int = 0, stream: int = 0,
                 dependent: bool = False):
        self.buffer = bytearray(struct.calcsize("@" + parameter_format))
        struct.pack_into("@" + parameter_format, self.buffer, 0, *values)
        offsets = parameter_offsets(parameter_format)
        # (offset, packer) of each field a call rewrites, in the order of its values
        self.changing = tuple((offsets[i], struct.Struct("@" + parameter_format[i]).pack_into) for i in changing)
        self.launch = functools.partial(launch, function, grid, block, shared, stream, self.buffer, dependent)

    def __call__(self, values: Sequence) -> None:
        """Launch with ``values`` in the changing fields, in their order."""
        buffer = self.buffer
        for (offset, pack_into), value in zip(self.changing, values):
            pack_into(buffer, offset, value)
        self.launch()


def native_kernel(function: int, grid: int, block: int, parameter_format: str, values: Sequence,
                  changing: Sequence[int], sources: Sequence[int | str], scalar_names: Sequence[str],
                  shared: int = 0, dependent: bool = False) -> tuple:
    """One kernel as :mod:`fastcall.c` takes it: (CUfunction, grid, block, the
    parameters packed once, (offset, kind, source) of each changing field, and
    the bytes of dynamic shared memory each launch passes). A changing field's
    kind: 'P' an output's pointer (source: its position), 'f' or 'd' a scalar
    (source: its position in ``scalar_names``), 'D' the launch's direction, an
    int the FastCall alternates between the launches of a turn group (source:
    the group, a :class:`Turn`'s); then whether it is a programmatic dependent launch."""
    offsets = parameter_offsets(parameter_format)
    changes = []
    for index, source in zip(changing, sources):
        code = parameter_format[index]
        if isinstance(source, Turn):
            changes.append((offsets[index], "D", source.group))
        elif isinstance(source, str):
            changes.append((offsets[index], code, list(scalar_names).index(source)))
        else:
            changes.append((offsets[index], "P", source))
    return (function, grid, block, struct.pack("@" + parameter_format, *values), tuple(changes), shared,
            dependent)


def native_call(module, context: int, key: tuple, array_names: Sequence[str], kernels: Sequence[tuple],
                prepared: "PreparedCall", output_bytes: Sequence[int], stream: int = 0, given: tuple | None = None):
    """``prepared`` as a C ``FastCall`` of the extension ``module``, for calls
    whose signature is ``key`` (as :func:`signature` made it) in ``context``;
    with ``given`` (the signature of its ``out=`` arrays, by sorted name), for
    calls with those ``out=`` arrays and those inputs alone (their addresses
    stay packed: calls on inputs elsewhere take the Python path,
    :attr:`PreparedCall.inputs`). It makes the next call's outputs that no
    ``out=`` array holds (those :func:`made_ahead` picks from each output's
    bytes) once this call's kernels are launched (spares), so that a
    warm call's kernels wait for no allocation of theirs; where the allocator
    says who holds an array's memory (``sole``), it keeps those results and
    writes one again once the caller has let it go: the same address as the
    call before, as a framework's memory pool would give, whose lines L2 may
    still hold (at fp32 n = 4096, VADD's, WAXPBY's and AXPYDOT's results
    are 16 MB)."""
    kinds, allocate = key[1::2], prepared.allocate  # a cuda.Allocator, spelled out
    signers, steady = _native_signers(kinds)
    spares = made_ahead(output_bytes)
    out_fields = {}
    if given is not None:
        names = sorted(name for name in prepared.given if name is not None)  # as the key's (Program._key)
        by_name = dict(zip(names, zip(given[1::2], given[2::2])))
        ordered = [by_name[name] for name in prepared.given if name is not None]  # the order FastCall reads
        out_kinds = tuple(kind for kind, _ in ordered)
        out_signers, out_steady = _native_signers(out_kinds)
        out_fields = dict(given=prepared.given, out_types=out_kinds, out_signers=out_signers,
                          out_signatures=tuple(described for _, described in ordered),
                          out_steady=out_steady if any(out_steady) else None)
        spares = tuple(ahead and name is None for ahead, name in zip(spares, prepared.given))
    return module.FastCall(
        array_names=tuple(array_names), array_types=tuple(kinds), signers=signers,
        signatures=tuple(key[2::2]), scalar_names=prepared.scalar_names, scalar_value=prepared.scalar_value,
        scalar_limit=prepared.scalar_limit,
        make=allocate.make, make_args=tuple(allocate.args), make_kwargs=dict(allocate.kwargs) or None,
        pointer=tuple(allocate.pointer), output_shapes=prepared.output_shapes, results=prepared.results,
        kernels=tuple(kernels), context=context, spares=spares,
        sole=tuple(allocate.sole) or None, steady=steady if any(steady) else None, stream=stream, **out_fields)


def _native_signers(kinds: Sequence[type]) -> tuple[tuple, tuple]:
    """Each array kind's signer as the FastCall reads it (steps where there are) and its steady items."""
    python_signers = tuple(map(_signer, kinds))
    return (tuple(SIGNATURE_STEPS.get(signer, signer) for signer in python_signers),
            tuple(SIGNATURE_STEADY.get(signer) for signer in python_signers))


@dataclasses.dataclass(frozen=True)
class PreparedCall:
    """A program call on one signature of device arrays, ready to launch."""

    # each kernel's Launch (or anything called with the values of its
    # changing parameters) with where those values come from: an
    # output's position in output_shapes (its pointer), a scalar's name, or
    # a Turn (the launch's direction, from its group's ``turns``)
    launches: tuple[tuple[Callable, tuple[int | str | Turn, ...]], ...]
    output_shapes: tuple[tuple[int, ...], ...]  # of every distinct output value, in order
    results: tuple[int, ...]  # the script's returns, as positions in output_shapes
    allocate: Callable[[tuple[int, ...]], tuple[Any, int]]  # shape -> (array, pointer); a cuda.Allocator
    scalar_names: tuple[str, ...]
    keep_alive: Any  # the buffers and loaded module the arguments point into
    native: Any = None  # the same call as the C extension's FastCall, where it is built
    turns: tuple[Callable[[], int], ...] = ()  # the program's, one per turn group
    given: tuple[str | None, ...] = ()  # per output: the result name whose out= array it is, or None
    # where its launches go: the prepared call's stream, its framework's current one or, where
    # out= arrays hold every result (nothing is allocated), any
    stream: int = 0
    current_stream: Callable[[], int] = lambda: 0  # that framework's current stream now
    scalar_limit: float = float("inf")  # a float beyond it (or not finite) goes to scalar_value
    scalar_value: Callable[[str, Any], float] = scalar_value  # the cold path's check (arrays.scalar_checker)
    # with out= arrays: the launches take the inputs' addresses at each call (a changing field's
    # source -1 - i is the address of the i-th input array), so the call serves the same shapes
    # elsewhere in memory; the addresses come from the call's key (placed_elsewhere)
    inputs: bool = False

    def __call__(self, arguments: Mapping[str, Any], out: Mapping[str, Any] | None = None,
                 pointers: Sequence[int] = ()):
        """Outputs of the program on ``arguments`` (its input arrays at ``pointers`` where the
        call takes them: :attr:`inputs`); None when a new output is not 16-byte aligned, which
        the prepared flags assumed (the caller then goes the whole way). Written for speed:
        this is all a warm call does."""
        values: dict[int | str, Any] = {}
        for position, pointer in enumerate(pointers):
            values[-1 - position] = pointer
        for name in self.scalar_names:
            value = arguments[name]
            values[name] = (value if type(value) is float and -self.scalar_limit <= value <= self.scalar_limit
                            else self.scalar_value(name, value))  # NaN fails both comparisons
        if self.given:  # the out= arrays (their addresses are packed already), the others made
            outputs = [(out[name], None) if name is not None else self.allocate(shape)
                       for name, shape in zip(self.given, self.output_shapes)]
        else:
            outputs = [self.allocate(shape) for shape in self.output_shapes]
        for position, (_, pointer) in enumerate(outputs):
            if pointer is None:
                continue
            if pointer % 16:
                return None
            values[position] = pointer
        for launch, sources in self.launches:
            launch([self.turns[source.group]() if type(source) is Turn else values[source] for source in sources])
        if len(self.results) == 1:
            return outputs[self.results[0]][0]
        return tuple(outputs[position][0] for position in self.results)
