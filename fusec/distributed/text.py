"""The plan text of a distributed program: how each value lies over the ranks,
what each rank passes and gets back, and the steps in order (stages with their
calls, collectives with their bytes and what could overlap them)."""

from __future__ import annotations

from pathlib import Path

from ..emit.writer import call_text
from ..ir.dag import Dag
from .layout import Layout, Op, blocks
from .plan import DistributedPlan
from .stages import evaluated_before

WHAT = {
    Op.ALL_REDUCE: "the ranks' terms summed, whole on every rank",
    Op.REDUCE_SCATTER: "the ranks' terms summed, each rank getting its rows",
    Op.ALL_GATHER: "the ranks' blocks gathered, whole on every rank",
    Op.BROADCAST: "rank 0's copy sent to the ranks that hold no rows",
    Op.SLICE: "each rank takes its rows of it (a view; nothing moves)",
    Op.KEEP_ON_ROOT: "rank 0 passes it, the others zeros, so the sum over ranks adds it once",
    Op.EMBED: "each rank's block in place in zeros, so the sum over ranks is the whole",
}


def _held(dag: Dag, plan: DistributedPlan, value: int, layout: Layout) -> str:
    v = dag.value(value)
    if layout is Layout.SPLIT:
        lo, hi = plan.rows(plan.size(v.dims[0]), 0)
        rest = "".join(f" x {plan.size(d)}" for d in v.dims[1:])
        return f"its rows ({hi - lo}{rest} on rank 0)"
    if layout is Layout.PARTIAL:
        return "a term (the value is the sum over ranks)"
    return "whole"


def describe(plan: DistributedPlan, dag: Dag, *, sources: bool = False) -> str:
    sizes = ", ".join(f"{k}={v}" for k, v in plan.sizes)
    lines = [f"distributed program {dag.name} ({dag.file}), {plan.dtype}, {plan.ranks} rank(s),"
             f" {plan.active} holding rows"]
    lines.append(f"sizes:   {sizes}")
    for symbol, _ in plan.split or ():
        parts = [hi - lo for lo, hi in blocks(plan.size(symbol), plan.ranks, plan.active)]
        lines.append(f"rows:    {symbol} in blocks of {', '.join(map(str, parts))} (rank 0 first)")
    by_layout: dict[Layout, list[str]] = {}
    for value, layout in plan.layouts:
        by_layout.setdefault(layout, []).append(dag.value(value).label)
    lines.append("layouts: " + "; ".join(f"{layout}: {', '.join(names)}" for layout, names in by_layout.items()))
    lines.append("each rank passes: " + ", ".join(
        f"{dag.value(v).name}: {_held(dag, plan, v, plan.layout(v))}" for v in dag.inputs))
    lines.append("each rank gets:   " + ", ".join(
        f"{dag.value(v).label}: {_held(dag, plan, v, layout)}" for v, layout in plan.outputs))
    lines.append("")
    for number, step in enumerate(plan.steps, start=1):
        if step.stage is not None:
            stage = plan.stages[step.stage]
            compiled = ", ".join(f"{k}={v}" for k, v in stage.sizes)
            lines.append(f"step {number}  stage {stage.index} ({stage.name}), compiled for {compiled}:")
            if stage.device_scalars:
                lines.append(f"          reads {', '.join(stage.device_scalars)} from device memory (no host wait)")
            for c, before in evaluated_before(dag, stage.calls).items():  # on every rank, before the call
                for v in before:
                    coord = dag.expression(v).coord
                    lines.append(f"          {Path(coord.file).name}:{coord.line}  {dag.value(v).label} ="
                                 f" {dag.expression_text(v)}  (every rank)")
                lines.append(f"          {call_text(dag, c)}")
            if sources:
                lines += [f"          | {line}" for line in stage.source.rstrip("\n").split("\n")]
            continue
        together = [plan.conversions[i] for i in step.conversions]
        c = together[0]
        name = ", ".join(dag.value(t.value).label + (f"[{', '.join(dag.value(t.value).dims)}]"
                                                      if dag.value(t.value).dims else "") for t in together)
        where = "before stage 0" if c.after < 0 else f"after stage {c.after}"
        readers = sorted({t.first_use for t in together if t.first_use is not None})
        reader = ", ".join(f"stage {r}" for r in readers) or "the return"
        line = f"step {number}  {c.op} {name} ({c.source} -> {c.target}): {WHAT[c.op]}"
        if len(together) > 1:
            line += f"; one collective of {sum(t.bytes for t in together)} bytes (the {len(together)} packed)"
            line += f", {where}, for {reader}"
        elif c.collective:
            line += f"; {c.bytes} bytes, {where}, for {reader}"
            line += (f"; overlaps stage(s) {', '.join(map(str, c.overlaps))}" if c.overlaps
                     else "; nothing to overlap (the next step needs it, or nothing follows)")
        lines.append(line)
    total = sum(c.bytes for c in plan.collectives)
    lines.append("")
    packed = f" ({len(plan.collectives)} values)" if len(plan.launches) != len(plan.collectives) else ""
    lines.append(f"collectives: {len(plan.launches)} a call{packed}, {total} bytes of payload")
    return "\n".join(lines)
