"""The plan :func:`fusec.compile` takes where nothing is tuned: the best-predicted combination
whose kernels compile without spilling registers (and, for a reproducible program, add no
column sums with atomics). Here rather than in :mod:`fusec.api` so that ``fusec tune`` can say
what compile would have taken without importing the API it serves."""

from __future__ import annotations

from .. import nvcc
from ..emit.program import generate
from ..ir.plan import ProgramPlan
from ..library.model import Library
from ..space.fusions import adds_with_atomics
from ..target import GpuTarget

# The predictor's register estimate is rough (fusec.cost.registers.estimate), and a kernel
# that spills runs far slower than it was priced (docs/design/optimization-space.md). So where nvcc is present
# the best-predicted combination is compiled, and while a kernel of it spills the next one
# without that kernel is taken, compiling at most this many.
SPILL_CHECKS = 8
RANKS_SEARCHED = 20000  # combinations looked at for one free of the spilling kernels


def without_spills(dag, library: Library, dtype: str, ranked, keep, best, arch: str | None, target: GpuTarget):
    """(the generated program, how it was chosen): the best-ranked combination
    ``keep`` accepts whose kernels ptxas compiles for ``arch`` without spilling
    (``best``, the first accepted, when ``arch`` is None, nvcc is missing or
    fails, or every one checked spills)."""
    if arch is None:
        return generate(dag, library, best.plan, dtype, target), "predicted (rank 1)"
    if nvcc.nvcc_path() is None:
        return generate(dag, library, best.plan, dtype, target), "predicted (rank 1; registers not checked: no nvcc)"
    spilled: dict = {}  # kernel plan -> (kernel name, bytes spilled)
    checked = 0
    for rank, combination in enumerate(ranked, start=1):
        if rank > RANKS_SEARCHED or checked == SPILL_CHECKS:
            break
        if not keep(combination.plan) or any(k in spilled for k in combination.plan.kernels):
            continue
        generated = generate(dag, library, combination.plan, dtype, target)
        try:
            compiled = nvcc.compile_cubin(generated.source, arch)
        except Exception:  # nvcc's own error comes again, whole, when the program is loaded
            return (generate(dag, library, best.plan, dtype, target),
                    "predicted (rank 1; registers not checked: nvcc failed)")
        checked += 1
        for plan, kernel in zip(combination.plan.kernels, generated.kernels):
            used = compiled.resources.get(kernel.name)
            if used is not None and used.spill_stores + used.spill_loads:
                spilled[plan] = (kernel.name, used.spill_stores + used.spill_loads)
        if not any(k in spilled for k in combination.plan.kernels):
            if not spilled:
                return generated, "predicted (rank 1)"
            names = ", ".join(f"{name} {count} bytes" for name, count in spilled.values())
            return generated, f"predicted rank {rank}: better-ranked combinations spill registers ({names})"
    return generate(dag, library, best.plan, dtype, target), "predicted (rank 1; its kernels spill registers)"


def adds_no_atomics(dag, library: Library, plan: ProgramPlan) -> bool:
    """Whether every run of ``plan`` gives the same bits: no kernel adds with atomics."""
    return not any(adds_with_atomics(dag, library, k) for k in plan.kernels)
