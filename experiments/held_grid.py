"""GEMVER's held plan with its counts and options varied, on the GPU: what
fusec.cost.analytic's pricing of held stores after the barrier (STORES_AFTER_EXPOSED)
and fusec.space's tie rule for held plans (by_time) were fitted to.

    python -m experiments.held_grid [--case float32:4096] [--case float64:2048]
                              [--registers 0,2,3] [--shared 0,3,5,7] [--pairs 40]
                              [--repeat 20] [--rounds 3] [--out experiments/results] [--name h100-held-grid]

Two tables per case (DTYPE:N, GEMVER with every size N; default float32:4096
and float64:2048):

- the grid: fusec's plan for the case (the tuned plan the library ships; it
  must be a held band plan), with each count of instances held in registers
  (--registers) and in shared memory (--shared), each with the held stores
  before and after the barrier (``stores_after``), as measured and predicted,
  and what storing after gained. A count the plan cannot take is listed with
  why (fusec.families.held.why_not_held).
- load phases: the --pairs best-predicted held options of the space's
  two-kernel cover that have twins differing only in routine order (one load
  phase, or one per call), each timed: the one-phase plan's time over the
  other's.

Every plan is measured as ``fusec tune`` measures a candidate
(fusec.tune.search.GpuMeasurer: checked against the float64 oracle, then the median
of --repeat runs from an empty L2), in --rounds interleaved rounds, whose
median counts. Writes <out>/<name>.md and <name>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("float32:4096", "float64:2048")
SCRIPT = "gemver"


def parse_case(text: str) -> tuple[str, int]:
    dtype, _, n = text.partition(":")
    if dtype not in ("float32", "float64") or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"bad case {text!r}: expected float32:N or float64:N")
    return dtype, int(n)


def parse_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(c) for c in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"bad counts {text!r}: expected numbers like 0,3,5,7")
    return counts


def _context(dtype: str, n: int):
    from fusec.api import resolve_library
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    library = resolve_library(None)
    dag = load_script(ROOT / "scripts" / f"{SCRIPT}.script", library)
    return dag, library, {s: n for s in dag.sizes}, predictor_for(library)


def grid_plans(dtype: str, n: int, registers, shared) -> tuple:
    """(dag, library, sizes, predictor, base, rows): fusec's held plan for the case and,
    per (registers, shared, stores_after), the plan (None where it cannot be) and why not."""
    import fusec
    from fusec.families.held import why_not_held
    from fusec.ir.plan import HeldPlan
    from fusec.library.model import Geometry
    dag, library, sizes, predictor = _context(dtype, n)
    program = fusec.compile(ROOT / "scripts" / f"{SCRIPT}.script", library, dtype, sizes=sizes)
    base = program.generated.plan.kernels[0]
    if not isinstance(base, HeldPlan) or base.producer.geometry is not Geometry.BAND:
        raise SystemExit(f"experiments.held_grid: fusec's plan for {SCRIPT} {dtype} n = {n} is not a held band plan"
                         f" ({program.generated.plan.summary(dag)})")
    rows = []
    for r in registers:
        for s in shared:
            for after in (False, True):
                plan = dataclasses.replace(base, registers=r, shared=s, stores_after=after)
                why = why_not_held(dag, plan)
                if why is None:
                    why = _why_not_generated(dag, library, plan, dtype)
                rows.append((r, s, after, None if why else plan, why))
    return dag, library, sizes, predictor, base, rows


def _why_not_generated(dag, library, plan, dtype: str) -> str | None:
    from fusec.emit.program import generate
    from fusec.errors import FusecError
    from fusec.ir.plan import ProgramPlan
    try:
        generate(dag, library, ProgramPlan((plan,)), dtype)
    except FusecError as exc:
        return str(exc).splitlines()[0]
    return None


def phase_pairs(dtype: str, n: int, count: int) -> tuple:
    """(dag, library, sizes, predictor, groups): the ``count`` best-predicted held options of
    the two-kernel cover whose twins (the same plan but its routine order) differ in load
    phases, each group as [(plan, predicted seconds)], fewest phases first."""
    from fusec.ir.plan import HeldPlan
    from fusec.space.combinations import build_space
    from fusec.space.implementations import load_phases
    from fusec.space.striped import StripedFusion
    dag, library, sizes, predictor = _context(dtype, n)
    space = build_space(dag, library, dtype, sizes, predictor, horizontal=False)
    everything = len(dag.calls)
    groups: dict = {}
    for slot, options in space.options.items():
        if isinstance(slot, StripedFusion) and len(slot.calls) == everything:
            for plan, _, seconds in options:
                if isinstance(plan, HeldPlan):
                    key = dataclasses.replace(plan, producer=plan.producer.layout(), consumer=plan.consumer.layout())
                    groups.setdefault(key, []).append((plan, seconds))
    phases = lambda plan: sum(load_phases(p) for p in plan.parts)  # noqa: E731
    twins = [sorted(g, key=lambda o: (phases(o[0]), o[1])) for g in groups.values()
             if len({phases(p) for p, _ in g}) > 1]
    twins.sort(key=lambda g: min(s for _, s in g))
    return dag, library, sizes, predictor, twins[:count]


def predicted(dag, library, sizes, predictor, plan, dtype: str) -> float:
    from fusec.emit.program import generate
    from fusec.ir.plan import ProgramPlan
    generated = generate(dag, library, ProgramPlan((plan,)), dtype)
    return sum(predictor.kernel_seconds(k, dag, sizes) for k in generated.kernels)


def measure_all(dag, library, sizes, dtype: str, plans: list, repeat: int, rounds: int) -> list:
    """Per plan: (median µs of the rounds, or None) and why it failed ("" if it passed)."""
    from fusec.emit.program import generate
    from fusec.ir.plan import ProgramPlan
    from fusec.runtime.program import Program
    from fusec.tune.search import GpuMeasurer
    with GpuMeasurer(dag, library, dtype, sizes, repeat=repeat) as measurer:
        programs = [Program(generate(dag, library, ProgramPlan((p,)), dtype)) for p in plans]
        errors = measurer.compile(programs, lambda i: None)
        times: list[list[float]] = [[] for _ in plans]
        failed = list(errors)
        for _ in range(rounds):
            for i, program in enumerate(programs):
                if failed[i]:
                    continue
                result = measurer.measure(program)
                if result.passed:
                    times[i].append(result.seconds * 1e6)
                else:
                    failed[i] = f"{result.verdict}: {result.reason}"
    return [(statistics.median(t) if t and not f else None, f) for t, f in zip(times, failed)]


def run_case(dtype: str, n: int, args) -> dict:
    from fusec.ir.plan import ProgramPlan
    from fusec.space.implementations import load_phases
    dag, library, sizes, predictor, base, rows = grid_plans(dtype, n, args.registers, args.shared)
    *_, groups = phase_pairs(dtype, n, args.pairs)
    grid_plans_ok = [plan for *_, plan, _ in rows if plan is not None]
    pair_plans = [plan for g in groups for plan, _ in g]
    measured = measure_all(dag, library, sizes, dtype, grid_plans_ok + pair_plans, args.repeat, args.rounds)
    by_plan = dict(zip(grid_plans_ok + pair_plans, measured))
    grid = []
    for r, s, after, plan, why in rows:
        row = {"registers": r, "shared": s, "stores_after": after, "why_not": why}
        if plan is not None:
            us, failed = by_plan[plan]
            kernel = _kernel(dag, library, plan, dtype)
            row.update(held=kernel.held_fraction(), us=us, failed=failed,
                       predicted_us=predictor.kernel_seconds(kernel, dag, sizes) * 1e6)
        grid.append(row)
    pairs = []
    for group in groups:
        entries = [{"plan": ProgramPlan((p,)).summary(dag), "phases": sum(load_phases(x) for x in p.parts),
                    "predicted_us": seconds * 1e6, "us": by_plan[p][0], "failed": by_plan[p][1]}
                   for p, seconds in group]
        pairs.append(entries)
    return {"dtype": dtype, "n": n, "base": ProgramPlan((base,)).summary(dag), "grid": grid, "pairs": pairs}


def _kernel(dag, library, plan, dtype: str):
    from fusec.emit.program import generate
    from fusec.ir.plan import ProgramPlan
    return generate(dag, library, ProgramPlan((plan,)), dtype).kernels[0]


def phase_ratios(case: dict) -> list[float]:
    """One load phase's time over the most phases', per pair both of which ran."""
    out = []
    for entries in case["pairs"]:
        one, most = entries[0], max(entries, key=lambda e: e["phases"])
        if one["us"] and most["us"]:
            out.append(one["us"] / most["us"])
    return out


def report(cases: list[dict], command: str, when: str, gpu: str) -> str:
    lines = [f"# GEMVER's held plan varied, on {gpu}", "",
             f"{when}; `{command}`. GPU µs as `fusec tune` measures a candidate (checked against the"
             " float64 oracle, then the median of the runs from an empty L2), the median of the rounds."
             " Predicted: fusec.cost.analytic with this GPU's performance database.", ""]
    for case in cases:
        lines += [f"## {case['dtype']}, n = {case['n']}", "", f"fusec's plan: {case['base']}", "",
                  "| in registers | in shared | held | µs, stored before | µs, stored after | gain µs"
                  " | predicted before | predicted after |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        cells = {(r["registers"], r["shared"], r["stores_after"]): r for r in case["grid"]}
        for r, s in dict.fromkeys((r["registers"], r["shared"]) for r in case["grid"]):
            before, after = cells[(r, s, False)], cells[(r, s, True)]
            if before.get("us") is None and after.get("us") is None:
                lines.append(f"| {r} | {s} | — | {before.get('failed') or before['why_not']} | "
                             f"{after.get('failed') or after['why_not']} | | | |")
                continue
            held = before.get("held", after.get("held"))
            gain = (f"{before['us'] - after['us']:.1f}" if before.get("us") and after.get("us") else "")
            lines.append(f"| {r} | {s} | {held:.0%} | {_cell(before)} | {_cell(after)} | {gain} |"
                         f" {_predicted(before)} | {_predicted(after)} |")
        ratios = phase_ratios(case)
        lines += ["", f"Load phases: {len(case['pairs'])} held options with twins differing only in routine order"
                  + (f"; one load phase over the most, median {statistics.median(ratios):.3f}"
                     f" (min {min(ratios):.3f}, max {max(ratios):.3f}, {sum(r < 1 for r in ratios)} of"
                     f" {len(ratios)} faster)." if ratios else "."), "",
                  "| plan | load phases | predicted µs | µs |", "|---|---:|---:|---:|"]
        for entries in case["pairs"]:
            for e in entries:
                lines.append(f"| {e['plan']} | {e['phases']} | {e['predicted_us']:.1f} |"
                             f" {e['us']:.1f} |" if e["us"] else f"| {e['plan']} | {e['phases']} |"
                             f" {e['predicted_us']:.1f} | {e['failed']} |")
        lines.append("")
    return "\n".join(lines)


def _cell(row: dict) -> str:
    if row.get("us") is not None:
        return f"{row['us']:.1f}"
    return row.get("failed") or row.get("why_not") or "—"


def _predicted(row: dict) -> str:
    return f"{row['predicted_us']:.1f}" if "predicted_us" in row else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.held_grid", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", action="append", type=parse_case, metavar="DTYPE:N",
                        help=f"default: {' and '.join(CASES)}")
    parser.add_argument("--registers", type=parse_counts, default=(0, 2, 3), metavar="R,R,...",
                        help="instances held in registers (default: 0,2,3)")
    parser.add_argument("--shared", type=parse_counts, default=(0, 3, 5, 7), metavar="S,S,...",
                        help="instances held in shared memory (default: 0,3,5,7)")
    parser.add_argument("--pairs", type=int, default=40, help="held options with load-phase twins (default: 40)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-held-grid")
    args = parser.parse_args(argv)
    if args.pairs < 0 or args.repeat < 1 or args.rounds < 1:
        parser.error("--pairs must be at least 0, --repeat and --rounds at least 1")
    cases = [run_case(dtype, n, args) for dtype, n in (args.case or [parse_case(c) for c in CASES])]
    from fusec.runtime import cuda
    with cuda.context() as ctx:
        gpu = cuda.device_name(ctx)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m experiments.held_grid " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text(report(cases, command.strip(), when, gpu), encoding="utf-8")
    (args.out / f"{args.name}.json").write_text(json.dumps({"gpu": gpu, "when": when, "command": command.strip(),
                                                            "cases": cases}, indent=1), encoding="utf-8")
    print(report(cases, command.strip(), when, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
