"""What a reduction's finish across blocks costs: fusec's kernels with it taken out (timing only).

A reduction across blocks ends every block the same way (fusec/codegen/kernel.py,
support.cuh): the block stores its partials, meets at a barrier, thread 0 fences
(``__threadfence``) and takes a ticket on the output tile's counter, and the
last block to arrive sums the tile's partials in a fixed order. This takes
fusec's program for each sequence with a reduction (the tuned plan where the
tuning cache has one), rewrites its generated source, and times the variants
interleaved in one process (experiments.l2_policies.measure_variants):

- fusec: as generated;
- fence per warp: fusec's earlier order, every thread fencing before the
  barrier (a valid kernel: its results are compared);
- no fence: the ``__threadfence`` dropped, ticket and finish kept;
- no finish: everything after the partials' stores dropped (fence, tickets,
  sums): what no protocol can beat, the bytes and the partials' stores staying.

The last two are not valid kernels (without the fence the last block may sum
stale partials; without the finish the reductions' outputs are never written),
so their results are not compared; they bound what a cheaper finish (flags
carried with the partials, say) could win. Striped plans are left out: their
consumers wait on the finish.

    python -m experiments.finish_cost [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

``--case DTYPE:N`` (repeatable): matrices N x N, vectors N*N/4 (fp32) or N*N/2
(fp64) elements; default fp32 4096, fp32 16384 and fp64 8192.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from experiments.l2_policies import measure_variants, write_table

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("fusec", "fence per warp", "no fence", "no finish")
SEQUENCES = ("sgemv", "bicgk", "gesummv", "atax", "sgemvt", "gemver", "axpydot")
CASES = (("float32", 4096), ("float32", 16384), ("float64", 8192))
FINISH = "  // every partial of this block must be visible to the block that finishes it: the\n"
FENCE = re.compile(r"  BARRIER\(\);\n  if \((threadIdx\.x|tid) == 0\) __threadfence\(\);\n")
END = "#undef ITERS"  # the first line after a kernel's (or a horizontal part's) closing brace


def variant(source: str, name: str) -> str:
    """The generated source, rewritten as the variant ``name``."""
    assert source.count(FINISH) == len(FENCE.findall(source)), "support code changed: update experiments.finish_cost"
    if name == "fence per warp":
        return FENCE.sub("  __threadfence();\n  BARRIER();\n", source)
    if name == "no fence":
        return FENCE.sub("  BARRIER();\n", source)
    if name == "no finish":
        pieces, position = [], 0
        while (start := source.find(FINISH, position)) >= 0:
            pieces.append(source[position:start] + "}\n")  # closes the function the finish ended
            position = source.index(END, start)
        return "".join(pieces) + source[position:]
    return source


def why_left_out(program) -> str | None:
    """Why a program's variants are not timed, or None: a striped kernel's consumers wait on
    the finish (without it they would wait forever); a program without a reduction across
    blocks has nothing to take out."""
    from fusec.ir.plan import StripedPlan
    if any(isinstance(kernel, StripedPlan) for kernel in program.generated.plan.kernels):
        return "striped: its consumers wait on the finish"
    if FINISH not in program.source:
        return "no reduction across blocks"
    return None


def case(text: str) -> tuple[str, int]:
    match = re.fullmatch(r"(float32|float64):(\d+)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected DTYPE:N, e.g. float32:4096")
    return match.group(1), int(match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", type=case, action="append",
                        help="DTYPE:N (repeatable; default float32:4096, float32:16384, float64:8192)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-finish-cost")
    args = parser.parse_args()
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    rows = []
    for dtype, side in args.case or CASES:
        for script in SEQUENCES:
            path = ROOT / "scripts" / f"{script}.script"
            probe = fusec.compile(path, dtype=dtype, tuned=False)
            has_matrix = any(v.kind.value == "matrix" for v in probe.dag.values)
            n = side if has_matrix else side * side // (4 if dtype == "float32" else 2)
            sizes = {s: n for s in probe.dag.sizes}
            base = fusec.compile(path, dtype=dtype, sizes=sizes)
            plan = base.generated.plan.summary(base.dag)
            if reason := why_left_out(base):
                print(f"{dtype} {script:8s} {n}: left out ({plan}: {reason})")
                continue
            inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
            programs = {name: Program(dataclasses.replace(base.generated, source=variant(base.source, name)))
                        for name in VARIANTS}
            row = {"sequence": script, "dtype": dtype, "size": n, "tuned": bool(base.tuned), "plan": plan,
                   "changed": {name: programs[name].source != base.source for name in VARIANTS}}
            row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat)
            print(f"{dtype} {script:8s} {n:9d} " + "  ".join(
                f"{name}: {row['us'][name]:8.2f} us ({row['us'][name] / row['us']['fusec']:.3f}x)"
                for name in VARIANTS), flush=True)
            rows.append(row)
            del inputs, programs
            cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    command = (f"python -m experiments.finish_cost --rounds {args.rounds} --repeat {args.repeat}"
               + "".join(f" --case {d}:{n}" for d, n in args.case or ()) + f" --name {args.name}")
    write_table(args, rows, device, command, "What a reduction's finish across blocks costs",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets the variant's"
                " µs over fusec's (below 1: the part taken out cost that much). 'fence per warp' (fusec's earlier"
                " order) is checked bit for bit against fusec; 'no fence' and 'no finish' are not valid kernels:"
                " their results are not compared (timing only). Plans: the tuned ones where the tuning cache had"
                " them; striped plans left out.", VARIANTS, unchecked=VARIANTS[2:])


if __name__ == "__main__":
    main()
