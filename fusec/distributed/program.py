"""A distributed program: each rank calls it with its blocks and gets its
results back; stages and collectives run in stream order on one stream.

A call queues, in the plan's order, each stage (an ordinary fusec program on
the rank's rows, on the call's stream), each collective (on the same stream,
watched by :mod:`.watchdog`) and each step a rank takes alone (a view of its
rows, zeros for a term rank 0 carries, its block set into zeros). Nothing
waits on the host: a scalar that a stage makes (a collective sums it) and a
later stage reads stays a one-element device array, which that stage's
kernels read from device memory (``Stage.device_scalars``). A collective that some
stages could overlap (the plan says which) runs on a second stream, joined by
an event before the stage that reads it.

Calls can be captured in a CUDA graph and replayed (:meth:`DistributedProgram.capture`):
their stages, collectives and the events between streams go into the graph; the watchdog
then watches one event after each launch instead of one after each collective.

Ranks past ``plan.active`` hold no rows: they run no stage, pass empty blocks
(or None) for split inputs, add zeros to the sums, and get the whole results
and empty blocks of the split ones.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import warnings
import weakref
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ArgumentError, FusecError, FusecWarning
from ..library.model import Kind
from ..solvers.arrays import dtype_name
from . import comm as comm_module
from . import text, watchdog
from .arrays import arrays_for, family
from .comm import Communicator, default_timeout
from .layout import Layout, Op
from .plan import DistributedPlan

POLICIES = ("exit", "raise")


@dataclasses.dataclass(frozen=True)
class StepTime:
    label: str
    kind: str  # "local" (a stage, or a rank's own step) or "collective"
    ms: float


@dataclasses.dataclass(frozen=True)
class Timings:
    """Milliseconds of each step of one call, from CUDA events on its stream."""

    steps: tuple[StepTime, ...]

    @property
    def local_ms(self) -> float:
        return sum(s.ms for s in self.steps if s.kind == "local")

    @property
    def collective_ms(self) -> float:
        return sum(s.ms for s in self.steps if s.kind == "collective")


def _takes_stream(program) -> bool:
    run = getattr(program, "run", None)
    return run is not None and "stream" in inspect.signature(run).parameters


def _flat(array):
    return array.reshape(-1)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class DistributedProgram:
    """The result of :func:`fusec.distributed.compile` on one rank."""

    def __init__(self, plan: DistributedPlan, dag, comm: Communicator | None, compile_stage: Callable, *,
                 timeout: float | None = None, on_timeout: str = "exit"):
        size = comm.size if comm is not None else 1
        if plan.ranks != size:
            raise ArgumentError("comm", f"has {size} rank(s), but the plan is for {plan.ranks}")
        if on_timeout not in POLICIES:
            raise ArgumentError("on_timeout", f"is {on_timeout!r}: pass 'exit' or 'raise'")
        timeout = default_timeout() if timeout is None else timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ArgumentError("timeout", f"is {timeout!r}: seconds, a number > 0")
        self.plan, self.dag, self.comm = plan, dag, comm
        self.rank = comm.rank if comm is not None else 0
        self.holds_rows = self.rank < plan.active
        self.timeout, self.on_timeout = float(timeout), on_timeout
        self.programs = tuple(compile_stage(stage) for stage in plan.stages) if self.holds_rows else ()
        self._streams = all(_takes_stream(p) for p in self.programs)
        self._names = {dag.value(v).name: v for v in dag.inputs}
        self._outputs = {dag.value(v).name: (v, layout) for v, layout in plan.outputs}
        self._returned = frozenset(v for v, _ in plan.outputs)
        self._kept: dict = {}  # (framework, value, layout) -> the array a call writes a value into (see _target)
        self._zeros: dict = {}
        self._helpers: dict = {}  # framework -> its helper, kept (its streams with it): a call is host work
        self._shapes = {v.id: tuple(plan.size(d) for d in v.dims) for v in dag.values}
        self._watch_text = {id(c): f"the {c.op} of {dag.value(c.value).label} ({c.bytes} bytes)"
                            for c in plan.conversions if c.collective}
        # the scalars all-reduced together (Step.together): each one's place in the step's
        # buffers, and the collective watched as one
        self._packed_at = {}
        for number, step in enumerate(plan.steps):
            if not step.together:
                continue
            members = [plan.conversions[i] for i in step.conversions]
            for slot, c in enumerate(members):
                self._packed_at[c.value, Layout.PARTIAL] = (number, "terms", slot)
                self._packed_at[c.value, Layout.WHOLE] = (number, "sums", slot)
            names = ", ".join(dag.value(c.value).label for c in members)
            self._watch_text[id(members[0])] = f"the all-reduce of {names} ({sum(c.bytes for c in members)} bytes)"
        # what a call checks each argument against, made once (a call is host work)
        self._local_shapes = {name: self._local_shape(name) for name in (*self._names, *self._outputs)}
        self._input_specs = tuple((name, value, plan.layout(value), dag.value(value).kind is Kind.SCALAR,
                                   self._local_shapes[name]) for name, value in self._names.items())
        self._side: dict = {}
        self._last_collective = None
        self._unwatched: list[str] | None = None  # while capturing: the collectives captured, not watched
        self.last_timings: Timings | None = None

    # ------------------------------------------------------------------ description
    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self._names)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self._outputs)

    def describe(self, *, sources: bool = False) -> str:
        return text.describe(self.plan, self.dag, sources=sources)

    def _value(self, name: str) -> tuple[int, Layout]:
        if name in self._names:
            value = self._names[name]
            return value, self.plan.layout(value)
        if name in self._outputs:
            return self._outputs[name]
        raise ArgumentError(name, f"is neither an input nor a result of {self.dag.file}"
                                  f" (inputs: {', '.join(self._names)}; results: {', '.join(self._outputs)})")

    def _whole_shape(self, value: int) -> tuple[int, ...]:
        return self._shapes[value]

    def rows(self, name: str, rank: int | None = None) -> tuple[int, int] | None:
        """[lo, hi) of the rows of ``name`` that ``rank`` (default: this one) holds; None where it is whole."""
        value, layout = self._value(name)
        if layout is not Layout.SPLIT:
            return None
        return self.plan.rows(self._whole_shape(value)[0], self.rank if rank is None else rank)

    def local_shape(self, name: str) -> tuple[int, ...]:
        """The shape of what this rank passes (an input) or gets (a result) for ``name``."""
        shape = self._local_shapes.get(name)
        return shape if shape is not None else self._local_shape(name)

    def _local_shape(self, name: str) -> tuple[int, ...]:
        value, _ = self._value(name)
        shape = self._whole_shape(value)
        rows = self.rows(name)
        return shape if rows is None else (rows[1] - rows[0],) + shape[1:]

    def local(self, name: str, whole):
        """This rank's part of a whole array: its rows of a split value (a view), else all of it."""
        rows = self.rows(name)
        return whole if rows is None else whole[rows[0]:rows[1]]

    # ------------------------------------------------------------------ running
    def __call__(self, **arrays):
        """Run on this rank's keyword arrays and scalars; ``stream=`` and ``out=`` as for a
        fusec program (unless the script has inputs of those names: then use ``run``)."""
        stream = None if "stream" in self._names else arrays.pop("stream", None)
        out = None if "out" in self._names else arrays.pop("out", None)
        return self.run(arrays, stream=stream, out=out)

    def run(self, arrays: Mapping[str, Any], *, stream: Any = None, timings: bool = False,
            out: Mapping[str, Any] | None = None):
        """Run on this rank's blocks. ``stream`` is a raw CUDA stream handle
        (default: the current stream of the arrays' framework); with
        ``timings`` the steps are timed with events (``last_timings``). ``out``
        maps result names to arrays of this rank's shape of each (:meth:`local_shape`)
        that the results are written into and returned as (a loop passing two sets in turn
        gives the stages the same arrays call after call, and their prepared calls with them)."""
        if self.comm is not None:
            self.comm.check()
        if self._unwatched is not None:
            self._check_capturable(timings, out)
        if self.plan.ranks == 1:
            return self._plain(arrays, stream, out)
        helper, env = self._bind(arrays)
        out = self._check_out(out, helper)
        stream = self._stream(helper, stream)
        marks: list = []
        joins: dict[int, list] = {}
        self._last_collective = None  # (stream, event) of the collective issued last
        with helper.on(stream):
            for number, step in enumerate(self.plan.steps):
                if step.stage is not None:
                    for event in joins.pop(step.stage, []):
                        helper.wait_event(stream, event)
                    if self.holds_rows:
                        self._stage(step.stage, env, helper, stream, out, marks if timings else None)
                    continue
                conversion = self.plan.conversions[step.conversion]
                if step.together:
                    self._packed_all_reduce(number, env, helper, stream, out, marks if timings else None)
                elif conversion.collective:
                    self._collective(conversion, env, helper, stream, out, joins, marks if timings else None)
                elif self.holds_rows:
                    self._local(conversion, env, helper)
            for events in joins.values():  # collectives only the return reads
                for event in events:
                    helper.wait_event(stream, event)
            results = tuple(self._result(value, layout, env, helper, out) for value, layout in self.plan.outputs)
        if timings:
            self.last_timings = self._timings(marks, helper, stream)
        return results[0] if len(results) == 1 else results

    def _plain(self, arrays, stream, out):
        """One rank: the script's own program, as fusec.compile makes it."""
        program = self.programs[0]
        if (stream is not None or out is not None) and self._streams:
            return program.run(arrays, stream=stream, out=out)
        results = program(**arrays)
        if not out:
            return results
        many = isinstance(results, tuple)  # an executor without run(out=) (the oracle's): copied
        placed = []
        for name, result in zip(self.outputs, results if many else (results,)):
            if name in out:
                self._helper_for(out[name]).copy_into(out[name], result)
                result = out[name]
            placed.append(result)
        return tuple(placed) if many else placed[0]

    def _check_out(self, out, helper) -> dict:
        """``out=`` checked, by (value, layout)."""
        if out is None:
            return {}
        if not isinstance(out, Mapping):
            raise ArgumentError("out", f"is a {type(out).__name__}: pass a mapping of result names to arrays")
        checked = {}
        for name, array in out.items():
            if name not in self._outputs:
                raise ArgumentError("out", f"names {name!r}, not a result of {self.dag.file}"
                                           f" (its results: {', '.join(self._outputs)})")
            if family(array) != helper.name:
                raise ArgumentError(name, f"(out=) is a {family(array)} array, but the inputs are {helper.name} ones")
            dtype = dtype_name(array)
            if tuple(array.shape) != self.local_shape(name) or dtype != self.plan.dtype:
                raise ArgumentError(name, f"(out=) has shape {tuple(array.shape)} and dtype {array.dtype}: this rank's"
                                          f" {name} is {self.local_shape(name)} of {self.plan.dtype}")
            checked[self._outputs[name]] = array
        return checked

    def _target(self, helper, value: int, layout: Layout, out: dict):
        """The array a step writes ``value`` in ``layout`` into: the caller's ``out=`` array for a
        result; for a value no result is made from, a buffer of the program's own, kept from
        call to call (stream order keeps a call's writes after the last call's reads, and the
        stages' prepared calls find the same arrays); None: a new array (a result's arrays are
        the caller's to keep, and a view of a kept buffer would change under them)."""
        if value in self._returned:
            return out.get((value, layout))
        if (value, layout) in self._packed_at:
            number, side, slot = self._packed_at[value, layout]
            return self._packed(helper, number, side)[1][slot]
        key = (helper.name, value, layout)
        if key not in self._kept:
            self._kept[key] = helper.empty(self._shape_in(value, layout), self.plan.dtype)
        return self._kept[key]

    def _shape_in(self, value: int, layout: Layout) -> tuple[int, ...]:
        """This rank's shape of ``value`` in ``layout``: its rows where split, else the whole."""
        return self.local_shape_of(value) if layout is Layout.SPLIT else self._whole_shape(value)

    def _stream(self, helper, stream) -> int:
        """The handle of ``stream=`` (a CuPy, PyTorch or PyCUDA stream, or a raw
        CUstream), else the current stream of the arrays' framework."""
        if stream is None:
            return helper.current_stream()
        from ..runtime.streams import given
        return given(stream)

    def _bind(self, arrays: Mapping[str, Any]):
        for name in arrays:
            if name not in self._names:
                raise ArgumentError(name, f"is not an input of {self.dag.file} (its inputs: {', '.join(self._names)})")
        families = set()
        env: dict = {}
        for name, value, layout, scalar, expected in self._input_specs:
            if name not in arrays:
                raise ArgumentError(name, f"is missing: {self.dag.file} needs {', '.join(self._names)}")
            obj = arrays[name]
            if scalar:
                if not _is_number(obj):
                    raise ArgumentError(name, "is a scalar of the script: pass a host number,"
                                              f" not {type(obj).__name__}")
                env[value, layout] = float(obj)
                continue
            if obj is None and 0 in expected:
                env[value, layout] = None  # made once the framework is known
                continue
            shape = tuple(getattr(obj, "shape", ()))
            if shape != expected:
                where = (f"rows {self.rows(name)[0]}..{self.rows(name)[1] - 1} of {name}" if layout is Layout.SPLIT
                         else f"the whole of {name}")
                raise ArgumentError(name, f"rank {self.rank} of {self.plan.ranks} passes {where}: expected shape"
                                          f" {expected}, got {shape}")
            families.add(family(obj))
            env[value, layout] = obj
        if len(families) > 1:
            raise ArgumentError(next(iter(self._names)), f"arrays of several frameworks ({', '.join(sorted(families))})"
                                                         ": pass all of one")
        chosen = families.pop() if families else (self.comm.arrays_family if self.comm else "numpy")
        if chosen == "other" or (chosen == "numpy" and self.comm is not None and self.comm.arrays_family != "numpy"):
            raise ArgumentError(next(iter(self._names)), f"is a {chosen} array: a distributed program takes device"
                                                         " arrays (CuPy, PyTorch)")
        helper = self._helper(chosen)
        for key, obj in env.items():
            if obj is None:
                env[key] = helper.empty(self.local_shape(self.dag.value(key[0]).name), self.plan.dtype)
        return helper, env

    def _mark(self, helper, stream, marks):
        return helper.event(timing=True).record(stream) if marks is not None else None

    def _stage(self, index: int, env, helper, stream, out, marks) -> None:
        stage, program = self.plan.stages[index], self.programs[index]
        args = {a.name: env[a.value, a.layout] for a in stage.inputs}  # device scalars too: no host wait
        targets = {a.name: t for a in stage.outputs if (t := self._target(helper, a.value, a.layout, out)) is not None}
        start = self._mark(helper, stream, marks)
        results = program.run(args, stream=stream, out=targets or None) if self._streams else program(**args)
        results = results if isinstance(results, tuple) else (results,)
        for arg, result in zip(stage.outputs, results):
            target = targets.get(arg.name)
            if target is not None and result is not target:  # an executor without out= (the oracle's)
                helper.copy_into(target, result)
                result = target
            env[arg.value, arg.layout] = result
        if marks is not None:
            marks.append((f"stage {index}", "local", start, helper.event(timing=True).record(stream)))

    def _counts(self, value: int) -> list[int]:
        shape = self._whole_shape(value)
        width = int(np.prod(shape[1:], dtype=np.int64))
        return [(hi - lo) * width for lo, hi in (self.plan.rows(shape[0], r) for r in range(self.plan.ranks))]

    def _zero(self, helper, shape):
        key = (helper.name, shape)
        if key not in self._zeros:
            self._zeros[key] = helper.zeros(shape, self.plan.dtype)
        return self._zeros[key]

    def _collective(self, c, env, helper, stream, out, joins, marks) -> None:
        value, comm = c.value, self.comm
        whole = self._whole_shape(value)
        on = stream
        if c.overlaps:
            if helper.name not in self._side:  # kept for the program's life: a call's helper is not
                self._side[helper.name] = helper.new_stream()
            on = self._side[helper.name].handle
            helper.wait_event(on, helper.event().record(stream))
        start = self._begin_collective(helper, on, marks)
        if c.op is Op.ALL_REDUCE:
            send = env[value, Layout.PARTIAL] if self.holds_rows else self._zero(helper, whole)
            recv = self._receive(helper, value, Layout.WHOLE, out)
            comm.all_reduce(_flat(send), _flat(recv), on)
            env[value, Layout.WHOLE] = recv
        elif c.op is Op.REDUCE_SCATTER:
            send = env[value, Layout.PARTIAL] if self.holds_rows else self._zero(helper, whole)
            recv = self._receive(helper, value, Layout.SPLIT, out)
            comm.reduce_scatter(_flat(send), _flat(recv), self._counts(value), on)
            env[value, Layout.SPLIT] = recv
        elif c.op is Op.ALL_GATHER:
            send = (env[value, Layout.SPLIT] if self.holds_rows
                    else helper.empty(self.local_shape_of(value), self.plan.dtype))
            recv = self._receive(helper, value, Layout.WHOLE, out)
            comm.all_gather(_flat(send), _flat(recv), self._counts(value), on)
            env[value, Layout.WHOLE] = recv
        else:  # BROADCAST from rank 0, which holds rows
            buffer = env[value, Layout.WHOLE] if self.rank == 0 else self._receive(helper, value, Layout.WHOLE, out)
            comm.broadcast(_flat(buffer), 0, on)
            env[value, Layout.WHOLE] = buffer
        label = f"{c.op} {self.dag.value(value).label}" if marks is not None else ""
        done = self._end_collective(helper, on, c, label, start, marks)
        if on != stream:
            joins.setdefault(c.first_use, []).append(done)

    def _packed(self, helper, number: int, side: str):
        """Step ``number``'s buffer of the scalars it all-reduces together ("terms" or "sums"),
        kept, and a one-element view of it for each (made once: the stages see the same ones)."""
        key = (helper.name, "packed", number, side)
        if key not in self._kept:
            count = len(self.plan.steps[number].conversions)
            buffer = helper.zeros((count,), self.plan.dtype)  # zeros: the terms of a rank holding no rows
            self._kept[key] = (buffer, tuple(buffer[slot:slot + 1].reshape(()) for slot in range(count)))
        return self._kept[key]

    def _packed_all_reduce(self, number: int, env, helper, stream, out, marks) -> None:
        """The scalars of step ``number`` summed by one all-reduce of their packed terms. A stage wrote
        its terms in place (:meth:`_target`); a term made otherwise is copied in. Sums no result
        is made from stay views of the step's buffer; a returned one is copied out."""
        members = [self.plan.conversions[i] for i in self.plan.steps[number].conversions]
        terms, term_views = self._packed(helper, number, "terms")
        sums, sum_views = self._packed(helper, number, "sums")
        if self.holds_rows:
            for c, view in zip(members, term_views):
                made = env[c.value, Layout.PARTIAL]
                if made is not view:
                    helper.copy_into(view, made)
        start = self._begin_collective(helper, stream, marks)
        self.comm.all_reduce(terms, sums, stream)
        for c, view in zip(members, sum_views):
            if c.value in self._returned:
                given = out.get((c.value, Layout.WHOLE))
                target = given if given is not None else helper.empty((), self.plan.dtype)
                helper.copy_into(target, view)
                view = target
            env[c.value, Layout.WHOLE] = view
        label = "all-reduce " + ", ".join(self.dag.value(c.value).label for c in members) if marks is not None else ""
        self._end_collective(helper, stream, members[0], label, start, marks)

    def _begin_collective(self, helper, on: int, marks):
        """Before a collective on stream ``on``: after the one issued last, whatever its stream (one
        communicator's collectives run one after the other, in the order issued: two in flight on
        two streams could each hold the GPU the other needs); its start event where timed."""
        if self._last_collective is not None and self._last_collective[0] != on:
            helper.wait_event(on, self._last_collective[1])
        return self._mark(helper, on, marks)

    def _end_collective(self, helper, on: int, c, label: str, start, marks):
        """After a collective (``c``, the first it does) on ``on``: its event, watched to its deadline."""
        done = helper.event(timing=marks is not None).record(on)
        self._last_collective = (on, done)
        if self._unwatched is not None:  # captured: the launch of the graph is watched (CapturedCalls)
            self._unwatched.append(self._watch_text[id(c)])
        else:
            watchdog.WATCHDOG.watch(done, self._watch_text[id(c)], self.comm, self.timeout, self.on_timeout)
        if marks is not None:
            marks.append((label, "collective", start, done))
        return done

    def _receive(self, helper, value: int, layout: Layout, out: dict):
        target = self._target(helper, value, layout, out)
        return target if target is not None else helper.empty(self._shape_in(value, layout), self.plan.dtype)

    def local_shape_of(self, value: int) -> tuple[int, ...]:
        shape = self._whole_shape(value)
        lo, hi = self.plan.rows(shape[0], self.rank)
        return (hi - lo,) + shape[1:]

    def _local(self, c, env, helper) -> None:
        value = c.value
        if c.op is Op.SLICE:
            lo, hi = self.plan.rows(self._whole_shape(value)[0], self.rank)
            env[value, Layout.SPLIT] = env[value, Layout.WHOLE][lo:hi]
        elif c.op is Op.KEEP_ON_ROOT:
            whole = env[value, Layout.WHOLE]
            if self.rank == 0:
                env[value, Layout.PARTIAL] = whole
            else:
                env[value, Layout.PARTIAL] = 0.0 if _is_number(whole) else self._zero(helper, self._whole_shape(value))
        else:  # EMBED
            length = self._whole_shape(value)[0]
            lo, _ = self.plan.rows(length, self.rank)
            env[value, Layout.PARTIAL] = helper.embed(env[value, Layout.SPLIT], lo, length)

    def _result(self, value: int, layout: Layout, env, helper, out: dict):
        given = out.get((value, layout))
        if self.holds_rows or layout is not Layout.SPLIT:
            made = env[value, layout]
            if given is None or made is given:
                return made
            helper.copy_into(given, made)  # made by a step of a rank's own (a view, zeros), or a host number
            return given
        return given if given is not None else helper.empty(self.local_shape_of(value), self.plan.dtype)

    def _timings(self, marks, helper, stream) -> Timings:
        if marks:
            watchdog.wait(marks[-1][3], "the timed call", self.comm, self.timeout, self.on_timeout)
            for *_, end in marks:
                end.synchronize()
        return Timings(tuple(StepTime(label, kind, end.ms_since(start)) for label, kind, start, end in marks))

    # ------------------------------------------------------------------ moving whole arrays
    def scatter(self, name: str, array=None, *, root: int = 0, stream: int | None = None):
        """This rank's part of ``array``, which ``root`` holds whole (the others
        pass None): its rows of a split value, else the whole of it (broadcast).
        Arrays of the communicator's framework on the other ranks."""
        value, layout = self._value(name)
        whole = self._whole_shape(value)
        helper = self._helper_for(array)
        stream = helper.current_stream() if stream is None else int(stream)
        if self.rank == root:
            if array is None or tuple(array.shape) != whole:
                raise ArgumentError(name, f"rank {root} scatters it: pass the whole array, of shape {whole}")
        if self.comm is None or self.plan.ranks == 1:
            return array
        with helper.on(stream):
            if layout is not Layout.SPLIT:
                buffer = array if self.rank == root else helper.empty(whole, self.plan.dtype)
                self.comm.broadcast(_flat(buffer), root, stream)
                out = buffer
            else:
                blocks = None
                if self.rank == root:
                    blocks = [_flat(array[lo:hi]) for lo, hi in
                              (self.plan.rows(whole[0], r) for r in range(self.plan.ranks))]
                lo, hi = self.plan.rows(whole[0], self.rank)
                out = array[lo:hi] if self.rank == root else helper.empty(self.local_shape(name), self.plan.dtype)
                self.comm.scatter(blocks, _flat(out), root, stream)
        watchdog.WATCHDOG.watch(helper.event().record(stream), f"the scatter of {name}", self.comm,
                                self.timeout, self.on_timeout)
        return out

    def gather(self, name: str, local, *, root: int = 0, stream: int | None = None):
        """The whole of a split value on ``root`` from every rank's part (None
        elsewhere); a whole value is returned as it is."""
        value, layout = self._value(name)
        if layout is not Layout.SPLIT or self.comm is None or self.plan.ranks == 1:
            return local
        whole = self._whole_shape(value)
        helper = self._helper_for(local)
        stream = helper.current_stream() if stream is None else int(stream)
        with helper.on(stream):
            out = helper.empty(whole, self.plan.dtype) if self.rank == root else None
            blocks = None
            if out is not None:
                blocks = [_flat(out[lo:hi]) for lo, hi in (self.plan.rows(whole[0], r) for r in range(self.plan.ranks))]
                lo, hi = self.plan.rows(whole[0], root)
                out[lo:hi] = local
            self.comm.gather(_flat(local), blocks, root, stream)
        watchdog.WATCHDOG.watch(helper.event().record(stream), f"the gather of {name}", self.comm,
                                self.timeout, self.on_timeout)
        return out

    def _helper_for(self, array):
        return self._helper(family(array) if array is not None else (self.comm.arrays_family if self.comm else "numpy"))

    def _helper(self, name: str):
        if name not in self._helpers:
            self._helpers[name] = arrays_for(name, self.comm.device if self.comm else None)
        return self._helpers[name]

    # ------------------------------------------------------------------ CUDA graphs
    @property
    def capturable(self) -> bool:
        """Whether :meth:`capture` may capture calls: several ranks, on a communicator whose
        collectives a CUDA graph captures (NCCL through CuPy; not torch.distributed, not thread
        ranks), and a plan whose warm calls allocate nothing: every rank holds rows (a rank
        without makes its blocks anew) and no rank sets its block into zeros (EMBED makes the
        zeros anew). An array made inside a capture is freed after it, and the graph would
        write memory that is another's by then. The same on every rank: it reads the plan."""
        return (self.comm is not None and self.plan.ranks > 1 and self.comm.capturable
                and self.plan.active == self.plan.ranks
                and not any(c.op is Op.EMBED for c in self.plan.conversions))

    def capture(self, issue: Callable[[], Any], *, stream: Any = None) -> "CapturedCalls | None":
        """The calls of this program that ``issue()`` makes, on ``stream`` (default: the current
        stream of the communicator's framework; the calls must run on it), captured in a CUDA
        graph instead of run: a :class:`CapturedCalls` to launch, or None where this program does
        not capture (:attr:`capturable`, the legacy default stream) or a rank's capture failed
        (every rank then gets None: a collective is captured on all ranks or on none).

        Every rank captures the same calls, in the same order. Nothing in a call waits on the host,
        allocates or loads code once it has run on the same arrays before (``out=`` for every
        result): make each call plainly first. A graph holds the addresses it was captured with
        and reads whatever they hold when launched; the host's part of a call (its argument
        checks) is not redone. Inside ``issue()`` the collectives are not watched; the
        launch is, by one event after it. Every rank meets the others once here (an all-reduce
        of whether its capture worked, waited for on the host), never in a launch."""
        if not self.capturable:
            return None
        self.comm.check()
        helper = self._helper(self.comm.arrays_family)
        handle = self._stream(helper, stream)
        self._unwatched = []
        failure = None
        try:
            graph = helper.capture(handle, issue)
        except (FusecError, RuntimeError, OSError) as exc:  # refused (CuPy's CUDA errors are RuntimeErrors)
            graph, failure = None, exc
        finally:
            captured, self._unwatched = self._unwatched, None
        if not self._everyone(graph is not None, helper, handle):
            if failure is not None:
                warnings.warn(FusecWarning(f"rank {self.rank}: the calls are not captured in a CUDA graph ({failure})"))
            return None
        return CapturedCalls(self, helper, graph, handle, tuple(captured))

    def _check_capturable(self, timings: bool, out) -> None:
        """A call inside a capture is untimed (its events would be read on the host) and writes every
        result into ``out=`` (an array made for a result inside the capture is freed after it)."""
        if timings:
            raise ArgumentError("timings", "is True inside a capture: a captured call cannot be timed")
        missing = [name for name in self.outputs if not out or name not in out]
        if missing:
            raise ArgumentError("out", f"lacks {', '.join(missing)}: a call inside a capture writes every result"
                                       " into an array of out=")

    def agree(self, ok: bool, *, stream: Any = None) -> bool:
        """Whether ``ok`` holds on every rank: one all-reduce of a flag on ``stream`` (default: the
        current stream of the communicator's framework), read on the host (at most the timeout).
        Every rank calls it at the same place among its collectives."""
        if self.comm is None or self.plan.ranks == 1:
            return ok
        self.comm.check()
        helper = self._helper(self.comm.arrays_family)
        return self._everyone(ok, helper, self._stream(helper, stream))

    def _everyone(self, ok: bool, helper, stream: int) -> bool:
        """Whether ``ok`` on every rank: one all-reduce of a flag, read on the host (at most the timeout)."""
        with helper.on(stream):
            failed = helper.zeros((1,), self.plan.dtype)
            if not ok:
                failed[...] = 1
            self.comm.all_reduce(failed, failed, stream)
        watchdog.wait(helper.event().record(stream), "the ranks' agreement on a captured graph", self.comm,
                      self.timeout, self.on_timeout)
        return float(helper.host(failed)[0]) == 0

    def synchronize(self, stream: int | None = None) -> None:
        """Wait on the host until the work queued on ``stream`` so far is done,
        at most the timeout (then :class:`~fusec.distributed.errors.CollectiveTimeoutError`)."""
        if self.comm is None:
            return
        helper = arrays_for(self.comm.arrays_family, self.comm.device)
        stream = helper.current_stream() if stream is None else int(stream)
        watchdog.wait(helper.event().record(stream), "synchronize()", self.comm, self.timeout, self.on_timeout)

    def __repr__(self) -> str:
        return (f"<fusec.distributed.DistributedProgram {self.dag.file} {self.plan.dtype}: rank {self.rank} of"
                f" {self.plan.ranks}, {len(self.plan.stages)} stage(s), {len(self.plan.launches)} collective(s)>")


class CapturedCalls:
    """Calls of a :class:`DistributedProgram` captured in a CUDA graph (:meth:`DistributedProgram.capture`)."""

    def __init__(self, program: DistributedProgram, helper, graph, stream: int, collectives: tuple[str, ...]):
        self.program, self.helper, self.graph, self.stream = program, helper, graph, stream
        self.collectives = collectives  # what each captured collective is, in the order issued
        first = f": {collectives[0]} first" if collectives else ""
        self._what = f"a CUDA graph of {len(collectives)} collective(s){first}"
        _CAPTURED.add(self)

    def launch(self) -> None:
        """Queue the graph on the stream it was captured on, watched by one event after it (a
        launch is a collective of every rank that captured it: every rank launches its own)."""
        program = self.program
        program.comm.check()
        if self.graph is None:
            raise FusecError(f"{self._what} was released (the process is exiting): capture the calls again")
        self.graph.launch(self.stream)
        watchdog.WATCHDOG.watch(self.helper.event().record(self.stream), self._what, program.comm, program.timeout,
                                program.on_timeout)

    def release(self) -> None:
        """Destroy the graph now (a launch after it is an error)."""
        self.graph = None


_CAPTURED: "weakref.WeakSet[CapturedCalls]" = weakref.WeakSet()  # the graphs not yet gone


def _release_captured() -> None:
    """At exit, before the communicators fusec made are destroyed (NCCL's destroy waits for
    every graph holding their collectives): the graphs still held, by a solver's kept stepper or
    by a caller, go."""
    for calls in list(_CAPTURED):
        calls.release()


comm_module.before_closing(_release_captured)
