"""A compiled program: call it with keyword arrays, get the script's results.

NumPy in, NumPy out (copied to the GPU and back). Device arrays in (PyCUDA,
CuPy, PyTorch, anything with ``__cuda_array_interface__``), device arrays of
the same framework out, with no host copies. Arguments are checked before
anything launches. Buffers fusec needs (reduction partials and counters,
values passed between kernels, staging for NumPy) are kept per size, so
repeated calls allocate only their outputs; a repeated call on the same
device arrays also skips the checks and argument building
(:mod:`fusec.runtime.prepared`), in C where the extension builds
(:mod:`fusec.runtime.native`): the prepared calls used last, one with out=
arrays and one without, are tried first.

Kernels that run alone alternate the direction their blocks walk the grid from
one launch to the next of their turn group (``Kernel.turns``, :func:`turn_groups`;
``Program(turning=False)`` keeps them forwards): a launch starts on the tiles
the launch before ended on, while L2 still holds them. Results are the same
bit for bit either way.

On GPUs of sm_90 on, every kernel is a programmatic dependent launch
(``Program(dependent_launch=False)`` or ``$FUSEC_DEPENDENT_LAUNCH=0``: plain
launches): the driver starts it while the kernel before it in the stream still
runs, and the kernel's first statement waits for that one to end
(emit/support.cuh), so a launch's start-up overlaps the previous kernel's end.
The kernels' work and results are the same.

A kernel that waits at a grid barrier (``all_resident``) launches only where
the GPU holds all its blocks at once: that is checked before anything runs at
new sizes, and a :class:`~fusec.errors.ResidencyError` says so where it does not.

A call runs on the stream given (``stream=``), else on the current stream of its
arrays' framework (:mod:`.streams`); ``out=`` names arrays the results are
written into. With ``out=`` for every result, a warm call allocates nothing
and does not synchronise, so it can be captured in a CUDA graph.

A program compiled at one size runs at any: where its plan cannot serve a
call's sizes (a band kernel holds rows narrower than the call's), it compiles
the plan for those sizes itself, once, and runs that (:meth:`Program.plan_for`).

Calls of one program object must not overlap on different streams: they share
the reduction counters.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from .. import validate as check
from ..emit.program import GeneratedProgram
from ..errors import ArgumentError, RowWidthError
from ..ir import geometry as geo
from ..library.model import Geometry, Kind
from . import (
    cuda,  # PyCUDA itself is imported on the first call
    native,
    streams,
)
from .arrays import DEVICE, NUMPY, ArrayArg, Binding, bind, scalar_checker, scalar_limit
from .arrays import array_arg as _array_arg
from .in_place import overwrites
from .plan_text import describe, minimum_bytes
from .prepared import (
    Launch,
    PreparedCall,
    Turn,
    Turns,
    input_extents,
    input_pointers,
    native_call,
    native_kernel,
    placed_elsewhere,
    signature,
)

PREPARED_CALLS = 16  # signatures remembered per program
# C calls with out= tried first, the last used first: two, for a loop passing two sets of
# out= arrays in turn (a distributed program's stages, a solver's ping-pong states)
HOT_OUT_CALLS = 2
PLANS_FOR_SIZES = 8  # plans compiled for other sizes (its own cannot serve them, or one was tuned there)
TUNED_ANSWERS = 64  # sizes whose tuning lookup a program remembers


class CallCache(NamedTuple):
    """What a program keeps between calls (:meth:`Program.cache_info`)."""

    prepared: int  # prepared calls: signatures of device arrays whose checks and arguments are worked out
    in_c: bool  # whether a prepared call runs in C (the extension's FastCall), with out= or without
    spares: int  # outputs made one call ahead by that call
    kept_results: int  # results of the last call it keeps, to write again once the caller lets them go
    sizes: int  # sets of sizes with fusec-owned device memory (workspaces, intermediates)
    plans_for_sizes: int  # plans compiled for sizes the program's own plan could not serve


def row_width_problem(kernels, sizes: dict[str, int]) -> str | None:
    """Why a band kernel cannot serve these sizes (its rows are narrower), or None."""
    for kernel in (k for whole in kernels for k in whole.leaves()):
        if kernel.plan.geometry is not Geometry.BAND:
            continue
        widest, cols = kernel.macros()["BAND_COLS"], sizes[kernel.dims[1]]
        if cols > widest:
            return (f"kernel {kernel.name} holds whole rows of at most {widest} columns in registers, but"
                    f" {kernel.dims[1]} = {cols}")
    return None


def check_row_widths(kernels, sizes: dict[str, int]) -> None:
    """Raise :class:`~fusec.errors.RowWidthError` where a band kernel's rows are wider
    at these sizes than the rows it holds (``BAND_COLS``): it was compiled for
    narrower matrices."""
    for kernel in (k for whole in kernels for k in whole.leaves()):
        if kernel.plan.geometry is not Geometry.BAND:
            continue
        widest, cols = kernel.macros()["BAND_COLS"], sizes[kernel.dims[1]]
        if cols > widest:
            raise RowWidthError(
                f"kernel {kernel.name} holds whole rows of at most {widest} columns in registers, but"
                f" {kernel.dims[1]} = {cols}: compile the script for these sizes"
                f" (fusec.compile(..., sizes={{'{kernel.dims[1]}': {cols}}}) or fusec tune --size)")


class _Buffers:
    """fusec-owned device memory for one set of sizes."""

    def __init__(self, program: "Program", sizes: dict[str, int]):
        self.items: dict[tuple, cuda.DeviceBuffer] = {}
        itemsize = program.dtype.itemsize
        gen = program.generated
        for kernel in gen.kernels:
            for reduction in kernel.reductions:
                partials, counters = kernel.reduction_buffers(reduction, sizes)
                workspace = cuda.DeviceBuffer(partials * itemsize)
                if kernel.zeroed_workspace:  # atomics add into it; the last block clears it
                    cuda.fill_zero(workspace.pointer, workspace.nbytes)
                self.items[("ws", kernel.index, reduction.value)] = workspace
                counter = cuda.DeviceBuffer(counters * 4)
                cuda.fill_zero(counter.pointer, counter.nbytes)  # the last block resets them after use
                self.items[("cnt", kernel.index, reduction.value)] = counter
            if kernel.schedule_counters(sizes):  # a striped or held kernel's tickets, stripes or arrivals
                schedule = cuda.DeviceBuffer(kernel.schedule_counters(sizes) * 4)
                cuda.fill_zero(schedule.pointer, schedule.nbytes)  # the last block clears it after use
                self.items[("schedule", kernel.index)] = schedule
        for value in program.intermediates:
            self.items[("value", value)] = cuda.DeviceBuffer(program.value_nbytes(value, sizes))
        self._program, self._sizes = program, sizes

    def pointer(self, *key) -> int:
        return self.items[key].pointer

    def stage(self, value: int) -> int:
        """Device copy of a NumPy input or output, made on first use."""
        key = ("stage", value)
        if key not in self.items:
            self.items[key] = cuda.DeviceBuffer(self._program.value_nbytes(value, self._sizes))
        return self.items[key].pointer


def turn_groups(generated: GeneratedProgram) -> tuple[int | None, ...]:
    """Each kernel's turn group, None where it does not turn. Turning kernels
    that touch an array of the program's largest kind in common (its matrices,
    or its vectors where it has none) take turns together: one starts where L2
    holds what the other left (ATAX's two kernels, apart, walk A both ways in a
    call). Any other alternates on its own: GESUMMV's small kernel after its
    matrices' one must not hold that one to a single direction."""
    dag = generated.dag
    largest = Kind.MATRIX if any(v.kind is Kind.MATRIX for v in dag.values) else Kind.VECTOR
    root = list(range(len(generated.kernels)))

    def find(k: int) -> int:
        while root[k] != k:
            k = root[k]
        return k

    first: dict[int, int] = {}  # array -> the first turning kernel touching it
    for kernel in generated.kernels:
        if not kernel.turns:
            continue
        for arg in kernel.args:
            if arg.role in ("in", "out") and dag.value(arg.value).kind is largest:
                other = first.setdefault(arg.value, kernel.index)
                root[find(kernel.index)] = find(other)
    numbers: dict[int, int] = {}
    return tuple(numbers.setdefault(find(k.index), len(numbers)) if k.turns else None for k in generated.kernels)


def copy_triangle(target: np.ndarray, source: np.ndarray, triangle: str) -> None:
    """``target``'s values on and above its diagonal (``triangle`` ``"triu"``), or on and
    below it (``"tril"``), become ``source``'s; the others stay."""
    if triangle not in ("triu", "tril"):
        raise ValueError(f"a triangle is 'triu' or 'tril', not {triangle!r}")
    inside = np.ones(target.shape, dtype=bool)
    np.copyto(target, source, where=np.triu(inside) if triangle == "triu" else np.tril(inside))


class Program:
    """The result of :func:`fusec.compile`."""

    def __init__(self, generated: GeneratedProgram, *, tuned: str | None = None, turning: bool = True,
                 dependent_launch: bool = True,
                 predicted: str | None = None, nearby: str | None = None,
                 replan: Callable[[dict[str, int]], "Program"] | None = None,
                 tuned_at: Callable[[dict[str, int]], bool] | None = None):
        self.generated = generated
        # sizes -> the program compiled for them (fusec.compile's choice); None: such sizes raise RowWidthError
        self.replan = replan
        # sizes -> whether a plan was tuned for them, other than the sizes this program was
        # compiled for: a call there runs replan's program (None: never asked)
        self.tuned_at = tuned_at
        self._tuned_answers: collections.OrderedDict = collections.OrderedDict()
        self._for_sizes: collections.OrderedDict = collections.OrderedDict()
        if not isinstance(turning, bool):
            raise TypeError(f"turning must be True or False, not {turning!r}")
        self._turning = turning  # fixed: prepared calls take it in
        if not isinstance(dependent_launch, bool):
            raise TypeError(f"dependent_launch must be True or False, not {dependent_launch!r}")
        # launch each kernel while the one before still runs, where the GPU can (sm_90 on):
        # fixed, as the kernels are loaded with it
        self.dependent_launch = dependent_launch
        self.turn_groups = turn_groups(generated)
        self._turns = tuple(Turns() for _ in set(self.turn_groups) - {None})
        self.dtype = geo.DTYPES[generated.dtype]
        self.tuned = tuned  # where the plan came from, when a tuning cache supplied it
        self.predicted = predicted  # how the predictor's plan was chosen, when it was
        self.nearby = nearby  # the tuning of another size that lent its plan, when one did
        dag = generated.dag
        # values that pass through memory without being results: between kernels, or
        # inside a striped kernel from its producer to its consumer
        in_memory = {a.value for k in generated.kernels for a in k.args if a.role in ("in", "out", "scalar_ptr")}
        self.intermediates = tuple(v.id for v in dag.values if v.producer is not None
                                   and v.id not in dag.outputs and v.id in in_memory)
        # results written in one triangle alone, each with it: on and above their diagonal
        # (``stored B triu``: "triu"), or on and below it (``stored B tril``: "tril")
        self.triangle_results = MappingProxyType({a.value: a.triangle for k in generated.kernels for a in k.args
                                                  if a.role == "out" and a.triangle})
        self._loaded: dict[Any, Any] = {}
        self._buffers: collections.OrderedDict = collections.OrderedDict()
        self._prepared: collections.OrderedDict = collections.OrderedDict()
        # calls with out= arrays by their key less the inputs' addresses (prepared.placed_elsewhere)
        self._placed: collections.OrderedDict = collections.OrderedDict()
        self._hot = None  # the C FastCall of the prepared call without out= used last: tried first
        self._hot_stream = None  # the current stream of its arrays' framework, asked on each call
        self._hot_out: list = []  # (FastCall, current stream) of the prepared calls with out= used last
        inputs = [dag.value(v) for v in dag.inputs]
        # a scalar read from device memory is an array to the call: its address is packed once
        self._array_names = tuple(v.name for v in inputs if v.kind is not Kind.SCALAR or v.on_device)
        self._scalar_names = frozenset(v.name for v in inputs if v.kind is Kind.SCALAR and not v.on_device)
        # out= and stream= are the call's options, unless the script has inputs of those names
        self._call_options = not {"out", "stream"} & {v.name for v in inputs}
        # which inputs' memory an out= array of each result may be (after their reads, or in place)
        self._overwrites = overwrites(generated)

    # ------------------------------------------------------------------ description
    @property
    def turning(self) -> bool:
        """Whether the turning kernels alternate their direction (else always forwards)."""
        return self._turning

    @property
    def dag(self):
        return self.generated.dag

    @property
    def source(self) -> str:
        return self.generated.source

    @property
    def kernels(self):
        return self.generated.kernels

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.dag.value(v).name for v in self.dag.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.dag.value(v).name for v in self.dag.outputs)

    def describe(self, sizes: Mapping[str, int] | None = None, resources=None) -> str:
        """The plan text; at ``sizes`` its launches there, and where this program's
        plan cannot serve them, the plan that runs instead (:meth:`plan_for`)."""
        if sizes is not None:
            sizes = check.script_sizes(self.dag.sizes, sizes)
            other = self._plan_for(sizes)
            if other is not self:
                problem = row_width_problem(self.kernels, sizes)
                why = problem if problem is not None else "a plan was tuned for them"
                return (f"# at these sizes this program runs the plan compiled for them: {why}\n"
                        + other.describe(sizes, resources))
        return describe(self.generated, sizes, resources, origin=self.origin, turning=self.turning)

    def plan_for(self, sizes: Mapping[str, int]) -> "Program":
        """The program that runs a call at ``sizes``: this one where its plan serves
        them and no other plan was tuned for them, else the one compiled for them (once;
        kept for the next calls): the plan ``fusec.compile`` chooses at those sizes."""
        return self._plan_for(check.script_sizes(self.dag.sizes, sizes))

    def _plan_for(self, sizes: dict[str, int]) -> "Program":
        """:meth:`plan_for` of sizes already checked (a call's, bound from its arrays)."""
        problem = row_width_problem(self.kernels, sizes)
        if problem is None and not self._tuned_there(sizes):
            return self
        if self.replan is None:
            raise RowWidthError(f"{problem}: compile the script for these sizes"
                                f" (fusec.compile(..., sizes={sizes!r}) or fusec tune --size)")
        key = tuple(sorted(sizes.items()))
        if key not in self._for_sizes:
            self._for_sizes[key] = self.replan(sizes)
            while len(self._for_sizes) > PLANS_FOR_SIZES:
                self._for_sizes.popitem(last=False).release()
        self._for_sizes.move_to_end(key)
        return self._for_sizes[key]

    def _tuned_there(self, sizes: dict[str, int]) -> bool:
        """Whether a plan was tuned for ``sizes`` (not this program's own): asked once per
        sizes, as a call's binding comes this way every time."""
        if self.tuned_at is None:
            return False
        key = tuple(sorted(sizes.items()))
        if key not in self._tuned_answers:
            self._tuned_answers[key] = bool(self.tuned_at(sizes))
            while len(self._tuned_answers) > TUNED_ANSWERS:
                self._tuned_answers.popitem(last=False)
        return self._tuned_answers[key]

    def cache_info(self) -> CallCache:
        """What the program keeps between calls (prepared calls, results made ahead,
        device memory per set of sizes, plans for other sizes)."""
        hot = self._hot
        return CallCache(len(self._prepared), hot is not None or bool(self._hot_out),
                         hot.held_spares() if hot is not None else 0,
                         hot.held_results() if hot is not None else 0, len(self._buffers), len(self._for_sizes))

    @property
    def origin(self) -> str | None:
        """Where the plan came from: tuned here, tuned nearby, or how it was predicted."""
        return self.tuned or self.nearby or self.predicted

    def minimum_bytes(self, sizes: Mapping[str, int]) -> int:
        """Bytes any implementation must move: each input read once, each output written once."""
        return minimum_bytes(self.dag, self.dtype, check.script_sizes(self.dag.sizes, sizes))

    def value_nbytes(self, value: int, sizes: Mapping[str, int]) -> int:
        v = self.dag.value(value)
        return int(np.prod([sizes[d] for d in v.dims], dtype=np.int64)) * self.dtype.itemsize

    def __repr__(self) -> str:
        return (f"<fusec.Program {self.dag.file} {self.generated.dtype}: "
                f"{', '.join(self.inputs)} -> {', '.join(self.outputs)}, {len(self.kernels)} kernel(s)>")

    def release(self) -> None:
        """Free the device memory fusec holds for this program (workspaces,
        intermediates, staging, results made ahead for the next warm call or
        kept to be written again)
        and drop its loaded kernels; a later call allocates and loads again.
        Call it in the context the program ran in."""
        self._forget_hot()
        self._prepared.clear()
        self._placed.clear()
        self._buffers.clear()
        for loaded in self._loaded.values():
            loaded.close()
        self._loaded.clear()
        for other in self._for_sizes.values():
            other.release()
        self._for_sizes.clear()

    # ------------------------------------------------------------------ running
    def __call__(self, **arrays):
        """Run on keyword arrays and scalars; ``out={name: array}`` and ``stream=``
        as for :meth:`run` (where the script has inputs of those names, use :meth:`run`)."""
        out = stream = None
        if self._call_options:
            out, stream = arrays.pop("out", None), arrays.pop("stream", None)
        hot = self._hot
        if hot is not None and out is None and stream is None:  # the C extension's warm call
            results = hot(arrays, self._hot_stream())
            if results is not None:  # None when it declines
                return results
        return self.run(arrays, out=out, stream=stream)

    def bind(self, arrays: Mapping[str, Any]) -> Binding:
        """Check arguments and infer sizes without launching anything (the host waits only for a
        JAX input's producer: :func:`fusec.runtime.arrays.unordered`)."""
        return bind(self.dag, self.dtype, arrays)

    def run(self, arrays: Mapping[str, Any], *, out: Mapping[str, Any] | None = None, stream: Any = None,
            poison: bool = False):
        """Run the program on ``arrays`` (input name -> array or scalar).

        ``out`` maps result names to arrays the results are written into (of the
        arrays' framework, or NumPy arrays for NumPy inputs; the right shape and
        dtype, C-contiguous); those results are returned as these arrays. An
        ``out`` array may be an input's where no kernel reads that input once
        the kernel writing the result has started, or, exactly, where the result
        is computed from it pointwise (in place: :mod:`.in_place`; :meth:`check_out`).
        ``stream`` is the stream to run on (:mod:`.streams`). ``poison`` fills
        outputs and every fusec buffer with NaN first, so an element no kernel
        writes shows up (tests use it)."""
        handle = None if stream is None else streams.given(stream)
        if out is not None and not poison:  # the C extension's warm calls
            for hot, current_stream in self._hot_out:
                results = hot(arrays, handle if handle is not None else current_stream(), out)
                if results is not None:  # None when it declines
                    return results
        if self._prepared and not poison:
            results = self._run_prepared(arrays, handle, out)
            if results is not None:
                return results
        binding = self.bind(arrays)
        outputs = self.check_out(binding, out)
        other = self._plan_for(binding.sizes)
        if other is not self:
            return other.run(arrays, out=out, stream=stream, poison=poison)
        reference = next((a.obj for a in binding.arrays.values() if a.family == binding.family), None)
        current = streams.current_getter(binding.family, reference)()
        on = current if handle is None else handle
        with cuda.context() as ctx:
            loaded = self._load(ctx)
            buffers = self._buffers_for(ctx, binding.sizes)
            for array in binding.arrays.values():
                if array.stream is not None and array.stream != on:  # its producer's stream, by its interface
                    loaded.binding.wait(on, array.stream)
            with streams.current(binding.family, reference, on):
                pointers, results = self._place(binding, buffers, outputs)
            if poison:
                cuda.synchronize()  # the fills go on the legacy stream; a non-blocking one would not wait
                spared = {o[0] for o in self._over_inputs(binding, outputs)}  # out= arrays holding inputs
                self._poison(pointers, buffers, binding.sizes, spared)
            launches = self._launches(buffers, pointers, binding)
            for kernel, function, grid, args in launches:
                loaded.launch(kernel, grid, args, on, function)
            # prepared calls on the framework's own current stream, where they allocate, or on
            # any stream where out= arrays hold every result and they allocate nothing
            allocates = len(outputs) < len(set(self.dag.outputs))
            key = (None if poison or (on != current and allocates)
                   else self._key(cuda.context_key(ctx), arrays, out))
            if key is not None:
                self._remember(key, self._prepare(loaded, buffers, launches, binding, key, on, outputs))
            return self._collect(results, pointers, binding, on)

    def _key(self, context: int, arrays: Mapping[str, Any], out: Mapping[str, Any] | None) -> tuple | None:
        """A prepared call's key: the arguments' signature, and the out= arrays' where given."""
        key = signature(context, arrays, self._array_names, self._scalar_names)
        if key is None or out is None:
            return None if key is None else (key, None)
        if not isinstance(out, Mapping):
            return None
        given = signature(context, out, tuple(sorted(out)), frozenset())
        return None if given is None else (key, given)

    def _run_prepared(self, arrays: Mapping[str, Any], handle: int | None, out: Mapping[str, Any] | None = None):
        """The results of a prepared call for these arguments, or None when
        there is none (or it declines): the whole way then runs. The context
        is the driver's current one (where CuPy or PyTorch ran, the runtime
        left the primary context current), or the primary one pushed."""
        ext = native.require()
        context = ext.current_context()
        pushed = not context
        if pushed:
            context = cuda.primary_handle()
            ext.push_context(context)
        try:
            key = self._key(context, arrays, out)
            prepared = self._prepared.get(key) if key is not None else None
            made_here = prepared is not None  # on these very inputs, which its C call serves alone
            pointers = ()
            if key is not None and key[1] is not None:  # out= arrays: the inputs' addresses go in at each call
                if prepared is None:  # one prepared for these shapes on other inputs' memory may serve
                    placed, pointers, outs = placed_elsewhere(key, self.dtype.itemsize)
                    prepared = self._placed.get(placed)
                    ins = input_extents(key, pointers, self.dtype.itemsize) if prepared is not None else ()
                    if any(start < other_end and other_start < end
                           for start, end in outs for other_start, other_end in ins):
                        prepared = None  # the whole way decides whether an out= array may overlap an input
                else:
                    pointers = input_pointers(key)
            if prepared is None or (handle if handle is not None else prepared.current_stream()) != prepared.stream:
                return None  # prepared on another stream: the whole way prepares for this one
            if prepared.native is not None and made_here:
                self._make_hot(prepared.native, prepared.current_stream, given=prepared.inputs)
            return prepared(arrays, out, pointers)
        finally:
            if pushed:
                ext.pop_context()

    def check_out(self, binding: Binding, out: Mapping[str, Any] | None) -> dict[int, ArrayArg]:
        """The ``out=`` arrays by result value, checked: names of results, arrays of
        the inputs' framework with the results' shapes and dtype, no two overlapping,
        none overlapping an input the program reads after it starts writing there
        (but an update's result may be its matrix's own memory: :mod:`.in_place`)."""
        if out is None:
            return {}
        if not isinstance(out, Mapping):
            raise ArgumentError("out", f"is a {type(out).__name__}: pass a mapping of result names to arrays")
        results = {self.dag.value(v).name: self.dag.value(v) for v in self.dag.outputs}
        chosen: dict[int, ArrayArg] = {}
        for name, obj in out.items():
            if name not in results:
                raise ArgumentError("out", f"names {name!r}, which is not a result of {self.dag.file}"
                                           f" (its results: {', '.join(results)})")
            value = results[name]
            array = _array_arg(f"out[{name!r}]", value.id, value.kind, obj, self.dtype)
            shape = tuple(binding.sizes[d] for d in value.dims)
            if array.shape != shape:
                raise ArgumentError(f"out[{name!r}]", f"has shape {array.shape}, but {name} has {shape} at these sizes")
            if (array.where == NUMPY) != (binding.family == NUMPY):
                raise ArgumentError(f"out[{name!r}]", f"is a {array.family} array, but the inputs' results are"
                                                      f" {binding.family} arrays: pass one of those")
            chosen[value.id] = array
        self._check_out_overlaps(binding, chosen)
        return chosen

    def _check_out_overlaps(self, binding: Binding, chosen: dict[int, ArrayArg]) -> None:
        outs = [(value, array, *self._extent(array)) for value, array in chosen.items()]
        for i, (value, array, start, end) in enumerate(outs):
            for _, other, other_start, other_end in outs[i + 1:]:
                if start < other_end and other_start < end:
                    raise ArgumentError(array.name, f"overlaps {other.name}: two results cannot share memory")
        for value, array, input_value, given, exact in self._over_inputs(binding, chosen):
            pair = (value, input_value)
            if pair in self._overwrites.after_reads or (pair in self._overwrites.in_place and exact):
                continue
            if pair in self._overwrites.in_place:
                raise ArgumentError(array.name, f"overlaps part of the input {given.name!r}: it may be"
                                                f" {given.name!r} itself (in place), not part of it")
            raise ArgumentError(
                array.name,
                f"overlaps the input {given.name!r}, which the program still reads once it starts writing"
                f" {self.dag.value(value).name}: pass another array (two arrays in turn, in a loop)")

    def _extent(self, array: ArrayArg) -> tuple[int, int]:
        start = array.pointer if array.pointer is not None else array.obj.__array_interface__["data"][0]
        return start, start + math.prod(array.shape) * self.dtype.itemsize

    def _over_inputs(self, binding: Binding, chosen: dict[int, ArrayArg]):
        """(result, its out= array, input, the input's array, whether the memory is the same
        exactly) for every out= array overlapping an input of its kind of memory."""
        for value, array in chosen.items():
            start, end = self._extent(array)
            for input_value, given in binding.arrays.items():
                other_start, other_end = self._extent(given)
                if given.where == array.where and start < other_end and other_start < end:
                    yield value, array, input_value, given, (start, end) == (other_start, other_end)

    def _prepare(self, loaded, buffers: "_Buffers", launches, binding: Binding, key: tuple,
                 stream: int, given: Mapping[int, ArrayArg]) -> PreparedCall:
        """What a call on the same device arrays needs to redo: scalars, outputs.
        Its kernels' residency was checked when ``buffers`` were made for these
        sizes in this context (:meth:`_buffers_for`), before any launch, and the
        prepared call goes with them."""
        outputs = tuple(dict.fromkeys(self.dag.outputs))
        scalar_name = {v: self.dag.value(v).name for v in binding.scalars}
        scalar_names = tuple(sorted(self._scalar_names))
        extension = native.require()
        # with out= arrays, the inputs' addresses are changing fields too (PreparedCall.inputs)
        position = {value: self._array_names.index(array.name) for value, array in binding.arrays.items()
                    if array.where == DEVICE} if given else {}
        prepared, natives = [], []
        for kernel, function_name, grid, args in launches:
            changing, sources = [], []
            own = function_name == kernel.name  # a later function of the kernel reads no direction
            for index, arg in enumerate(kernel.args):
                if arg.role in ("in", "out", "scalar_ptr") and arg.value in outputs and arg.value not in given:
                    changing.append(index)  # later kernels read outputs too (an out= array's stays put)
                    sources.append(outputs.index(arg.value))
                elif arg.role in ("in", "scalar_ptr") and arg.value in position:
                    changing.append(index)
                    sources.append(-1 - position[arg.value])
                elif arg.role == "scalar":
                    changing.append(index)
                    sources.append(scalar_name[arg.value])
                elif arg.role == "direction" and self.turning and own:
                    changing.append(index)
                    sources.append(Turn(self.turn_groups[kernel.index]))
            parameter_format, shared = cuda.parameter_format(kernel), loaded.shared[function_name]
            function = loaded.function(kernel, function_name)
            launch = Launch(loaded.binding.launch, function, grid, kernel.block,
                            parameter_format, args, changing, shared, stream, loaded.dependent)
            prepared.append((launch, tuple(sources)))
            # the C call serves these inputs alone: their addresses stay as packed
            fixed = [(i, source) for i, source in zip(changing, sources) if not (type(source) is int and source < 0)]
            natives.append(native_kernel(function, grid, kernel.block, parameter_format, args,
                                         [i for i, _ in fixed], [source for _, source in fixed], scalar_names,
                                         shared, loaded.dependent))
        reference = next(a.obj for a in binding.arrays.values() if a.family == binding.family)
        shapes = tuple(tuple(binding.sizes[d] for d in self.dag.value(v).dims) for v in outputs)
        call = PreparedCall(tuple(prepared), shapes, tuple(outputs.index(v) for v in self.dag.outputs),
                            cuda.allocator(binding.family, self.dtype, reference),
                            scalar_names, keep_alive=(loaded, buffers), turns=self._turns,
                            given=tuple(self.dag.value(v).name if v in given else None for v in outputs),
                            stream=stream, current_stream=streams.current_getter(binding.family, reference),
                            scalar_limit=scalar_limit(self.dtype), scalar_value=scalar_checker(self.dtype),
                            inputs=bool(given))
        output_bytes = tuple(self.value_nbytes(v, binding.sizes) for v in outputs)
        return dataclasses.replace(call, native=native_call(extension, key[0][0], key[0], self._array_names,
                                                            natives, call, output_bytes, stream, key[1]))

    def _make_hot(self, native_call, current_stream=None, given: bool = False) -> None:
        """Try ``native_call`` first from now on (on the stream ``current_stream()``
        says), for calls with out= arrays where ``given`` (among the last
        HOT_OUT_CALLS of those), else for calls without; a call no longer tried
        lets go of the outputs it made ahead (only the hot calls hold any)."""
        if given:
            kept = [(call, stream) for call, stream in self._hot_out if call is not native_call]
            self._hot_out = [(native_call, current_stream)] + kept[:HOT_OUT_CALLS - 1]
            for call, _ in kept[HOT_OUT_CALLS - 1:]:
                call.drop_spares()
            return
        if self._hot is not None and self._hot is not native_call:
            self._hot.drop_spares()
        self._hot, self._hot_stream = native_call, current_stream

    def _forget_hot(self) -> None:
        """Try no C call first any more; each lets go of the outputs it made ahead."""
        for call in [self._hot] + [call for call, _ in self._hot_out]:
            if call is not None:
                call.drop_spares()
        self._hot, self._hot_stream, self._hot_out = None, None, []

    def _remember(self, key: tuple, prepared: PreparedCall) -> None:
        self._prepared[key] = prepared
        if prepared.native is not None:
            self._make_hot(prepared.native, prepared.current_stream, given=prepared.inputs)
        while len(self._prepared) > PREPARED_CALLS:
            self._prepared.popitem(last=False)
        if prepared.inputs:  # it serves the same shapes on other inputs' memory too
            self._placed[placed_elsewhere(key, self.dtype.itemsize)[0]] = prepared
            while len(self._placed) > PREPARED_CALLS:
                self._placed.popitem(last=False)

    def _load(self, ctx):
        from .. import nvcc
        key = cuda.context_key(ctx)
        if key not in self._loaded:
            arch = cuda.arch_of(ctx)
            compiled = nvcc.compile_cubin(self.source, arch=arch)
            dependent = (self.dependent_launch and cuda.has_dependent_launch(arch)
                         and check.environment_flag("FUSEC_DEPENDENT_LAUNCH", True))
            self._loaded[key] = cuda.Loaded(compiled.cubin, self.kernels, dependent=dependent)
        return self._loaded[key]

    def _buffers_for(self, ctx, sizes: dict[str, int]) -> _Buffers:
        """fusec's memory for these sizes in this context; made on first use, once
        the kernels are known to fit (:meth:`_check_resident`). Every way a
        launch goes (the whole way, prepared calls in Python and in C, timing)
        takes its buffers from here first."""
        key = (cuda.context_key(ctx), tuple(sorted(sizes.items())))
        if key not in self._buffers:
            check_row_widths(self.kernels, sizes)  # the caller picked the plan for these sizes (plan_for)
            self._check_resident(ctx, sizes)
            self._buffers[key] = _Buffers(self, sizes)
            while len(self._buffers) > 2:  # keep the memory of the last sizes only
                _, evicted = self._buffers.popitem(last=False)
                self._forget_hot()
                for calls in (self._prepared, self._placed):
                    for call_key in [k for k, p in calls.items() if p.keep_alive[1] is evicted]:
                        del calls[call_key]
        self._buffers.move_to_end(key)
        return self._buffers[key]

    def _check_resident(self, ctx, sizes: dict[str, int]) -> None:
        """Raise :class:`~fusec.errors.ResidencyError` where a kernel that waits
        at a grid barrier has more blocks at these sizes than the GPU of ``ctx``
        holds at once (the driver's occupancy for its block and dynamic shared
        memory, on fusec's own copy of its function): launched, it would hang."""
        waiting = [kernel for kernel in self.kernels if kernel.all_resident]
        if not waiting:
            return
        loaded = self._load(ctx)
        sms = cuda.multiprocessor_count(ctx)
        for kernel in waiting:
            cuda.check_resident(kernel.name, kernel.grid(sizes), loaded.resident_blocks(kernel), sms,
                                kernel.block, loaded.shared[kernel.name])

    def _place(self, binding: Binding, buffers: _Buffers, outputs: Mapping[int, ArrayArg] | None = None):
        """Device pointers of every value; NumPy inputs are uploaded; results go
        to the ``out=`` arrays where given (``outputs``), else to new arrays."""
        pointers: dict[int, int] = {}
        for value, array in binding.arrays.items():
            if array.where == DEVICE:
                pointers[value] = array.pointer
            else:
                pointers[value] = buffers.stage(value)
                cuda.upload(pointers[value], array.obj)
        for value in self.intermediates:
            pointers[value] = buffers.pointer("value", value)
        family = binding.family
        reference = next((a.obj for a in binding.arrays.values() if a.family == family), None)
        results: dict[int, Any] = {}
        for value in dict.fromkeys(self.dag.outputs):
            shape = tuple(binding.sizes[d] for d in self.dag.value(value).dims)
            given = (outputs or {}).get(value)
            if given is not None:
                results[value] = given.obj
                pointers[value] = buffers.stage(value) if given.where == NUMPY else given.pointer
            elif family == NUMPY:
                pointers[value] = buffers.stage(value)
            else:
                results[value], pointers[value] = cuda.allocate_like(family, shape, self.dtype, reference)
        return pointers, results

    def _poison(self, pointers, buffers: _Buffers, sizes, spared=frozenset()) -> None:
        for value in list(self.intermediates) + list(self.dag.outputs):
            if value in spared:
                continue
            cuda.fill_nan(pointers[value], self.value_nbytes(value, sizes) or self.dtype.itemsize)
        zeroed = {k.index for k in self.kernels if k.zeroed_workspace}
        for key, buffer in buffers.items.items():
            if key[0] == "ws" and key[1] not in zeroed:  # an accumulator's zeros are state, kept between launches
                cuda.fill_nan(buffer.pointer, buffer.nbytes)

    def _kernel_args(self, kernel, buffers: _Buffers, pointers, binding: Binding) -> list:
        args = []
        for arg in kernel.args:
            if arg.role in ("in", "out", "scalar_ptr"):
                args.append(pointers[arg.value])
            elif arg.role == "workspace":
                args.append(buffers.pointer("ws", kernel.index, arg.value))
            elif arg.role == "counters":
                args.append(buffers.pointer("cnt", kernel.index, arg.value))
            elif arg.role == "schedule":
                args.append(buffers.pointer("schedule", kernel.index))
            elif arg.role == "scalar":
                args.append(self.dtype.type(binding.scalars[arg.value]))
            elif arg.role == "size":
                args.append(binding.sizes[arg.size])
            elif arg.role == "direction":
                args.append(self._turns[self.turn_groups[kernel.index]]() if self.turning else 0)
            else:  # aligned, of the kernel or of the part of a horizontal fusion it is for
                args.append(int(self._aligned(kernel.owner(arg), pointers, binding)))
        return args

    def _aligned(self, kernel, pointers, binding: Binding) -> bool:
        """Whether every array a kernel touches has a 16-byte aligned base: its vectors
        may then move in 16-byte accesses (the kernel works out itself, from the row
        width, whether its matrices' rows may too: ``c.vec_ok``)."""
        return all(pointers[a.value] % geo.VEC_BYTES == 0 for a in kernel.args
                   if a.role in ("in", "out"))  # a scalar_ptr is read alone: its alignment does not matter

    def _launches(self, buffers: _Buffers, pointers, binding: Binding) -> list[tuple]:
        """(kernel, function, grid, arguments) of every launch, in order: worked out once
        when the same arrays run many times (timing). A kernel's launches share one list
        of its arguments."""
        launches = []
        for kernel in self.kernels:
            args = self._kernel_args(kernel, buffers, pointers, binding)
            launches += [(kernel, function, grid, args) for function, grid in kernel.launches(binding.sizes)]
        return launches

    def _collect(self, results, pointers, binding: Binding, stream: int = 0):
        out, synchronized = [], False
        for value in self.dag.outputs:
            given = results.get(value)
            if value not in results or isinstance(given, np.ndarray):  # NumPy: copy back
                if not synchronized:  # the copy goes on the legacy stream, which may not wait for ours
                    native.require().synchronize(stream)
                    synchronized = True
                shape = tuple(binding.sizes[d] for d in self.dag.value(value).dims)
                host = given if isinstance(given, np.ndarray) else np.empty(shape, self.dtype)
                if given is not None and value in self.triangle_results:
                    # nothing was written outside the triangle: the out= array keeps its values there
                    copied = np.empty(shape, self.dtype)
                    cuda.download(copied, pointers[value])
                    copy_triangle(host, copied, self.triangle_results[value])
                else:
                    cuda.download(host, pointers[value])
                results[value] = host if shape else host[()]
            out.append(results[value])
        return out[0] if len(out) == 1 else tuple(out)

    # ------------------------------------------------------------------ timing
    def time(self, arrays: Mapping[str, Any], *, warmup: int = 3, repeat: int = 20,
             host: bool = True) -> list[float]:
        """Milliseconds of each of ``repeat`` runs of the whole program, with CUDA
        events. With ``host`` (the default) the events bracket whole calls
        ``program(**arrays)`` as a caller makes them: checking, allocating the
        outputs, launching (and NumPy arguments' copies): at small sizes the
        host's share shows. Without, the arrays are placed and the launches
        worked out once, and a spinning kernel goes first so the start event
        fires only once the program's kernels are queued: the GPU's time
        alone, which is what tells two implementations apart (``fusec tune``
        ranks on it)."""
        warmup, repeat = check.count("warmup", warmup, 0), check.count("repeat", repeat, 1)
        if check.flag("host", host):
            times = []
            with cuda.context():  # the events need one current
                for _ in range(warmup):
                    self(**arrays)
                for _ in range(repeat):
                    with cuda.Timer() as timer:
                        results = self(**arrays)
                    times.append(timer.ms)
                    del results  # after the timer waited for the kernels writing them
            return times
        binding = self.bind(arrays)
        with cuda.context() as ctx:
            loaded = self._load(ctx)
            buffers = self._buffers_for(ctx, binding.sizes)
            # the outputs allocated here must outlive the launches: a freed output
            # of a device framework is unmapped memory the kernels would write to
            pointers, outputs = self._place(binding, buffers)
            launches = self._launches(buffers, pointers, binding)
            turning = [(args, i, self._turns[self.turn_groups[kernel.index]])
                       for kernel, function, _, args in launches if self.turning and function == kernel.name
                       for i, arg in enumerate(kernel.args) if arg.role == "direction"]

            def launch():
                for args, i, turns in turning:  # as calls alternate them: once a kernel
                    args[i] = turns()
                for kernel, function, grid, args in launches:
                    loaded.launch(kernel, grid, args, 0, function)

            for _ in range(warmup):
                launch()
            clock = cuda.gpu_clock(ctx)
            times = [clock.seconds(launch) * 1e3 for _ in range(repeat)]
            del outputs  # the last launch is done (the clock waited for it)
            return times
