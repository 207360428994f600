"""What L2 keeps while a matrix streams through: discarded partials and evict-first loads.

Two things fusec's generated code does so that the matrix stream (1 GB at the
main sizes) does not cost more than its own bytes:

- A reduction across blocks stores each block's partials in a workspace; the
  last block to arrive sums them (fusec/codegen/support.cuh). Those stores are
  few (1-2 MB), but as dirty L2 lines their write-backs interleave with the
  matrix reads. Partials of one output tile lie in whole 128-byte lines of
  their own, and the summing block drops them with ``discard.global.L2``.
- A tile kernel that stores no matrix marks its matrix loads evict-first
  (``STREAM_MATRIX``: ``ld.global.cs``), so L2 keeps the vectors and partials
  it re-reads rather than matrix lines it never reads again.

This takes fusec's program for each sequence that has a matrix or a reduction
(the tuned plan where the tuning cache has one), rewrites its generated source
into the variants below (nothing in the library or the code generator
changes), checks each variant's results equal the generated program's bit for
bit, and times the variants in one process with ``Program.time(host=False)``
(GPU time), interleaved: ``--rounds`` rounds, each timing every variant in a
rotated order, so that no variant always runs first; median of all samples.

- fusec: the source as generated (discards; evict-first where the kernel stores no matrix);
- write-back: the discards removed, the partials going back to DRAM;
- no evict-first: ``STREAM_MATRIX`` 0 in every kernel;
- evict-first everywhere: ``STREAM_MATRIX`` 1 in every tile kernel, matrix-storing ones too.

    python -m experiments.l2_policies [--rounds 5] [--repeat 10] [--dtype float32] [--out DIR] [--name NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DISCARD = 'asm volatile("discard.global.L2 [%0], 128;" :: "l"(base + l * FUSEC_LINE) : "memory");'
VARIANTS = ("fusec", "write-back", "no evict-first", "evict-first everywhere")
SEQUENCES = ("sgemv", "gesummv", "bicgk", "atax", "sgemvt", "gemver", "madd", "axpydot")
SIZES = {"float32": 16384, "float64": 8192}  # matrix side; vectors n*n/4


def variant(source: str, name: str) -> str:
    """The generated source, rewritten as the variant ``name``."""
    assert DISCARD in source, "support code changed: update experiments.l2_policies"
    if name == "write-back":
        return source.replace(DISCARD, "(void)base;  // experiments.l2_policies: kept, written back")
    if name == "no evict-first":
        return source.replace("#define STREAM_MATRIX 1", "#define STREAM_MATRIX 0")
    if name == "evict-first everywhere":
        return source.replace("#define STREAM_MATRIX 0", "#define STREAM_MATRIX 1")
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per variant and round")
    parser.add_argument("--dtype", choices=sorted(SIZES), action="append",
                        help="precision (repeatable; default both, at n = 16384 fp32 and 8192 fp64)")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-l2-policies")
    args = parser.parse_args()
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    rows = []
    for dtype in args.dtype or sorted(SIZES):
        for script in SEQUENCES:
            path = ROOT / "scripts" / f"{script}.script"
            probe = fusec.compile(path, dtype=dtype, tuned=False)
            has_matrix = any(v.kind.value == "matrix" for v in probe.dag.values)
            n = SIZES[dtype] if has_matrix else SIZES[dtype] ** 2 // 4
            sizes = {s: n for s in probe.dag.sizes}
            base = fusec.compile(path, dtype=dtype, sizes=sizes)
            inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
            nbytes = base.minimum_bytes(sizes)
            programs = {name: Program(dataclasses.replace(base.generated, source=variant(base.source, name)))
                         for name in VARIANTS}
            row = {"sequence": script, "dtype": dtype, "size": n, "tuned": bool(base.tuned),
                   "plan": base.generated.plan.summary(base.dag), "us": {}, "same": {},
                   "changed": {name: programs[name].source != base.source for name in VARIANTS}}
            row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat)
            for name in VARIANTS:
                us = row["us"][name]
                print(f"{dtype} {script:8s} {name:24s} {us:8.1f} us {nbytes / us / 1e3:6.0f} GB/s"
                      f"  {'' if row['changed'][name] else '(as generated) '}"
                      f"{'same results' if row['same'][name] else 'RESULTS DIFFER'}", flush=True)
            rows.append(row)
            del inputs
            cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    write(args, rows, device)


def measure_variants(programs: dict, inputs: dict, rounds: int, repeat: int,
                     before=None, warmup: int = 1) -> tuple[dict, dict]:
    """({name: median GPU µs}, {name: results equal the first program's bit for bit}):
    each program run once and compared, then ``rounds`` rounds timing every program
    in a rotated order (so none always runs first), ``warmup`` untimed and ``repeat``
    timed runs each, ``before()`` (if given) ahead of each program's runs; then the
    programs' GPU memory is released."""
    import cupy
    import numpy as np

    from fusec.runtime import cuda
    names = list(programs)
    samples: dict[str, list[float]] = {name: [] for name in names}
    same = {}
    with cuda.context():
        reference = None
        for name, program in programs.items():
            results = program(**inputs)
            host = [cupy.asnumpy(r) for r in (results if isinstance(results, tuple) else (results,))]
            reference = reference or host
            same[name] = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(reference, host))
            del results
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if before is not None:
                    before()
                samples[name] += programs[name].time(inputs, warmup=warmup, repeat=repeat, host=False)
        for program in programs.values():
            program.release()
    return {name: statistics.median(samples[name]) * 1e3 for name in names}, same


def write(args, rows, device: str, command: str | None = None) -> None:
    command = command or (f"python -m experiments.l2_policies --rounds {args.rounds} --repeat {args.repeat}"
                          + "".join(f" --dtype {d}" for d in args.dtype or ()) + f" --name {args.name}")
    write_table(args, rows, device, command, "What L2 keeps while a matrix streams",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets fusec's"
                " speed-up over the variant (its µs / fusec's). '=' marks a variant whose source is the"
                " generated one (nothing to rewrite). Plans: the tuned ones where the tuning cache had them."
                " Every variant's results equal the generated program's bit for bit unless marked.", VARIANTS)


def write_table(args, rows, device: str, command: str, title: str, note: str, names, unchecked=()) -> None:
    """``args.out/args.name``.json (device, command, rows) and .md (the table of :func:`table_rows`)."""
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(
        {"device": device, "command": command, "rows": rows}, indent=1))
    lines = [f"# {title}, on {device} (`{command}`)", "", note, "",
             "| sequence | precision | size | plan | " + " | ".join(names) + " |",
             "|---|---|---:|---|" + "---:|" * len(names)]
    lines += table_rows(rows, names, unchecked)
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def table_rows(rows, names, unchecked=()) -> list[str]:
    """Markdown rows of variants' times: µs, in brackets the variant's µs over fusec's
    ('=' where its source is the generated one), DIFFERS where its results differ
    (never for the ``unchecked``), '–' where a plan has no such variant."""
    lines = []
    for row in rows:
        cells = []
        for name in names:
            if name not in row["us"]:
                cells.append("–")
                continue
            cell = f"{row['us'][name]:.1f}"
            if name != "fusec":
                cell += f" ({row['us'][name] / row['us']['fusec']:.3f}×)" if row["changed"][name] else " (=)"
            cells.append(cell + ("" if name in unchecked or row["same"][name] else " DIFFERS"))
        plan = ("tuned: " if row["tuned"] else "predicted: ") + row["plan"].replace("|", "\\|")
        lines.append(f"| {row['sequence']} | {row['dtype']} | {row['size']} | {plan} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    main()
