"""Does a band kernel gain from one barrier per row instead of two, its row sums'
scratch alternating between two buffers?

A band kernel's row sum (band_gemv_compute: warp sums into scratch, the block's
barrier, every thread adds them up) meets the block's warps at two barriers a row:
the routine's own, and one the compiler places before it, because this row's
warps must not overwrite the scratch the last row's slower warps still read. With
two scratch buffers taken in turn (row it in buffer it & 1), that second barrier
goes: a warp writing buffer A for row it + 2 has passed row it + 1's barrier, which
every warp reaches only once done reading A for row it. ATAX needs its row sums in
the row (t feeds y = A^T t), so deferring them past the loop
(``experiments.band_deferred``) cannot serve it; this can, and BiCGK too.

This rewrites the generated source of fusec's shipped H200 plans and the
predictor's first choices (nothing in fusec changes), checks every variant's
results against the original's (bit for bit, but for the column sums' atomics), and
times them in one process (``Program.time(host=False)``):

- plain: as generated;
- two buffers: the barrier before the row sum gone, its scratch alternating;
- deferred: BiCGK's row sums deferred past the loop, for comparison in the same run.

    python -m experiments.band_double_buffer [--repeat 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from experiments.band_deferred import deferred
from experiments.source_variants import run_case, shipped_and_first

ROOT = Path(__file__).resolve().parent.parent
CASES = (("bicgk", "float32", 16384), ("atax", "float32", 16384), ("bicgk", "float64", 8192),
         ("atax", "float64", 8192), ("bicgk", "float32", 4096), ("atax", "float32", 4096))

# the barrier the compiler placed before the loop's row sum, and the row sum's call
ROW_SUM = re.compile(r"    BARRIER\(\);\n((?:    // [^\n]*\n)?    band_gemv_compute\([^;]*), smem \+ 0, c\);\n")


def two_buffers(source: str) -> str | None:
    """The source with the loop's one row sum taking its scratch from two buffers in turn
    and no barrier before it; None where the kernel has another row sum or shares its
    shared memory with anything else (the scratch is then not all of ``smem``)."""
    found = ROW_SUM.findall(source)
    declared = re.search(r"__shared__ __align__\(16\) real smem\[(\d+)\];", source)
    warps = re.search(r"#define WARPS (\d+)", source)
    rows = re.search(r"#define BAND_ROWS (\d+)", source)
    if len(found) != 1 or source.count("band_gemv_compute(") != 2 or not (declared and warps and rows):
        return None  # the routine's definition and one call
    size = int(declared.group(1))
    if size != int(warps.group(1)) * int(rows.group(1)) or source.count("smem + ") != 1:
        return None
    source = ROW_SUM.sub(lambda m: f"{m.group(1)}, smem + (it & 1) * {size}, c);"
                         "  // experiments.band_double_buffer: two buffers in turn\n", source)
    return source.replace(declared.group(0), f"__shared__ __align__(16) real smem[{2 * size}];", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-band-double-buffer")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")

    rows = []
    for script, dtype, sizes, origin, base in shipped_and_first(CASES):
        variants = {"plain": base.source}
        if (v := two_buffers(base.source)) is not None:
            variants["two buffers"] = v
        if (d := deferred(base.source)) is not None:
            variants["deferred"] = d
        if len(variants) == 1:
            print(f"{script} {dtype} {sizes['n']} {origin}: no band row sum ({base.generated.plan.summary(base.dag)})")
            continue
        rows.append(run_case(script, base, sizes, dtype, origin, variants, {}, args.repeat))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
