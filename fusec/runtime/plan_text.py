"""The plan text of a generated program: where the plan came from, its inputs and
outputs, and each kernel as its family describes it."""

from __future__ import annotations

from typing import Mapping

from ..emit.plan_text import minimum_bytes
from ..families import family_of
from .in_place import overwrites

__all__ = ["describe", "minimum_bytes"]


def describe(generated, sizes: Mapping[str, int] | None = None, resources=None, origin: str | None = None,
             turning: bool = True) -> str:
    dag = generated.dag
    lines = [f"program {dag.name} ({dag.file}), {generated.dtype}, library {generated.library.name}"
             f" (hash {generated.library.content_hash})"]
    if origin:  # where the plan came from: tuned, or how the predictor chose it
        lines.append(f"plan: {origin}")
    if not generated.reproducible:
        lines.append("bits: two runs may differ in the last bits (a band kernel adds its column sums with"
                     " atomics; --reproducible / reproducible=True leaves such kernels out)")

    def show(value: int) -> str:
        v = dag.value(value)
        return f"{v.name}: {v.kind}" + (f"[{', '.join(v.dims)}]" if v.dims else "")
    lines.append("inputs:  " + ", ".join(show(v) for v in dag.inputs))
    lines.append("outputs: " + ", ".join(show(v) for v in dag.outputs))
    in_place = sorted(overwrites(generated).in_place)
    if in_place:  # out= arrays a caller may give over an input, which a plan decides
        lines.append("in place: " + " or ".join(f"out={{'{dag.value(r).name}': {dag.value(g).name}}}"
                                              for r, g in in_place)
                     + ": a result may take the memory of the matrix it is computed from")
    if dag.device_scalars:  # how they arrive, not what the kernels do: the plan is the same
        lines.append("device:  " + ", ".join(dag.value(v).name for v in dag.device_scalars)
                     + " read from device memory (each call passes a one-element device array)")
    if sizes:
        lines.append("sizes:   " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    for kernel in generated.kernels:
        lines.append("")
        lines.append(f"kernel {kernel.index}: {kernel.name}")
        lines += family_of(kernel.plan).plan_text(generated, kernel, sizes, resources, turning)
    return "\n".join(lines)
