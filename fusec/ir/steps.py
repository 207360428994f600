"""Which routines a set of calls in one kernel needs, and in which valid orders.

Inside a kernel an element produced by one call and read by another stays on
chip: its store and the consumer's load are not called (paper Fig. 3). An
element that several calls read is loaded once. A result leaves the kernel
only when the script returns it or a call in another kernel reads it.
"""

from __future__ import annotations

from ..library.model import Function, Kind, Library, RoutineKind
from .dag import Dag
from .plan import Step


def function_of(dag: Dag, library: Library, call: int) -> Function:
    return library.functions[dag.call(call).function]


def call_dims(dag: Dag, library: Library, call: int) -> dict[str, str]:
    """The function's dimension variables bound to the script's size symbols."""
    function = function_of(dag, library, call)
    bound: dict[str, str] = {}
    record = dag.call(call)
    for param, arg in zip(function.params, record.args):
        if isinstance(arg, int):
            bound.update(zip(param.dims, dag.value(arg).dims))
    bound.update(zip(function.result.dims, dag.value(record.result).dims))
    return bound


def array_args(dag: Dag, library: Library, call: int) -> list[tuple[str, int]]:
    """(param name, value id) of the array inputs that routines load or read."""
    function = function_of(dag, library, call)
    finish_only = set(function.finish_only)
    return [(p.name, arg) for p, arg in zip(function.params, dag.call(call).args)
            if p.kind is not Kind.SCALAR and p.name not in finish_only]


def leaves_kernel(dag: Dag, library: Library, call: int, kernel: frozenset[int]) -> bool:
    """Whether a call's result must be stored: a reduction always (its final value
    is made from stored partials), a map when returned or read elsewhere."""
    if function_of(dag, library, call).hof.reduce:
        return True
    result = dag.call(call).result
    return dag.is_output(result) or any(c not in kernel for c in dag.consumers(result))


def loads(dag: Dag, library: Library, calls: tuple[int, ...]) -> list[Step]:
    """One load per element that comes from outside the kernel, by its first reader."""
    kernel = frozenset(calls)
    seen: set[int] = set()
    out = []
    for call in calls:
        for param, value in array_args(dag, library, call):
            if value in seen or dag.producer(value) in kernel:
                continue
            seen.add(value)
            out.append(Step(call, RoutineKind.LOAD, param))
    return out


def canonical_steps(dag: Dag, library: Library, calls: tuple[int, ...]) -> tuple[Step, ...]:
    """The simplest valid calling order: each call's loads, compute, then store."""
    kernel = frozenset(calls)
    pending = {s.call: [] for s in loads(dag, library, calls)}
    for step in loads(dag, library, calls):
        pending[step.call].append(step)
    out: list[Step] = []
    for call in calls:
        out.extend(pending.get(call, ()))
        out.append(Step(call, RoutineKind.COMPUTE))
        if leaves_kernel(dag, library, call, kernel):
            out.append(Step(call, RoutineKind.STORE, function_of(dag, library, call).result.name))
    return tuple(out)


def valid_order(dag: Dag, library: Library, calls: tuple[int, ...], steps: tuple[Step, ...]) -> bool:
    """Loads before the computes that read them, producers before consumers,
    each store after its compute; exactly the needed steps, once each."""
    if sorted(steps) != sorted(canonical_steps(dag, library, calls)):
        return False
    done: set[tuple[int, str | None]] = set()  # (call, kind) markers
    loaded: set[int] = set()  # values on chip
    kernel = frozenset(calls)
    for step in steps:
        record = dag.call(step.call)
        if step.kind is RoutineKind.LOAD:
            loaded.add(dict(array_args(dag, library, step.call))[step.param])
        elif step.kind is RoutineKind.COMPUTE:
            for _, value in array_args(dag, library, step.call):
                producer = dag.producer(value)
                if producer in kernel and (producer, "compute") not in done:
                    return False
                if producer not in kernel and value not in loaded:
                    return False
            done.add((step.call, "compute"))
            loaded.add(record.result)
        elif (step.call, "compute") not in done:
            return False
    return True
