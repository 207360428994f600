"""Which inputs' memory an ``out=`` array of a result may be.

Two ways, decided once per program from its kernels (:class:`Overwrites`):

- **After the reads.** No kernel reads the input once the kernel writing the result has
  started: the result may overlap it in any way (GESUMMV's y over x where its plan has two
  kernels).
- **In place**, as BLAS's ``A := A + alpha x y^T``. The kernel writing the result B still
  reads the matrix A, but only through a chain of calls, in one part of that kernel, each a
  nested map that reads its matrix argument pointwise (:func:`fusec.library.reference.reads_pointwise`),
  from A to B: ``B1 = sger(A, u1, v1); B = sger(B1, u2, v2)``. The block that reads
  A(i, j) then computes B(i, j) from it and stores it afterwards, and nothing reads A(i, j)
  again: no other call of that kernel reads A, no later kernel does. The out= array must then
  be A's memory exactly, not part of it.
"""

from __future__ import annotations

import dataclasses

from ..emit.program import GeneratedProgram
from ..library.model import Kind
from ..library.reference import reads_pointwise


@dataclasses.dataclass(frozen=True)
class Overwrites:
    """(result, input) pairs of value ids whose memory the result may share."""

    after_reads: frozenset[tuple[int, int]]  # in any overlap
    in_place: frozenset[tuple[int, int]]  # the input's own memory exactly


def overwrites(generated: GeneratedProgram) -> Overwrites:
    """What every result of ``generated`` may overwrite (see the module's docstring)."""
    writer = {a.value: k.index for k in generated.kernels for a in k.args if a.role == "out"}
    last_reader: dict[int, int] = {}
    for kernel in generated.kernels:
        for arg in kernel.args:
            if arg.role in ("in", "scalar_ptr"):
                last_reader[arg.value] = kernel.index
    after_reads, in_place = set(), set()
    for result in generated.dag.outputs:
        k = writer.get(result, 0)  # a result no kernel writes: as if the first did
        for given in generated.dag.inputs:
            if last_reader.get(given, -1) < k:
                after_reads.add((result, given))
            elif last_reader[given] == k and _pointwise_chain(generated, k, given, result):
                in_place.add((result, given))
    return Overwrites(frozenset(after_reads), frozenset(in_place))


def _pointwise_chain(generated: GeneratedProgram, k: int, given: int, result: int) -> bool:
    """Whether kernel ``k`` reads the matrix ``given`` in one call alone, and ``result`` comes
    from it through pointwise nested maps, all in the part of the kernel that call is in."""
    dag, library = generated.dag, generated.library
    if dag.value(given).kind is not Kind.MATRIX or dag.value(result).dims != dag.value(given).dims:
        return False
    plan = generated.kernels[k].plan
    readers = [c for c in plan.calls if given in dag.call(c).value_args()]
    if len(readers) != 1:
        return False
    part = plan.part_of(readers[0]).calls

    def pointwise_in(call: int, value: int) -> bool:
        made = dag.call(call)
        function = library.function(made.function)
        names = [p.name for p, a in zip(function.params, made.args) if a == value]
        return bool(names) and all(reads_pointwise(function, n) for n in names)

    reached, frontier = {given}, [given]
    while frontier:
        value = frontier.pop()
        for call in part:
            made = dag.call(call).result
            if made not in reached and value in dag.call(call).value_args() and pointwise_in(call, value):
                if made == result:
                    return True
                reached.add(made)
                frontier.append(made)
    return False
