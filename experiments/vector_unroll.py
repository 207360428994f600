"""Would a vector kernel's serial loop, unrolled so that every iteration's loads leave
before the first store, reach PyTorch's SSCAL at fp32 n = 4096 (4194304 elements)?

A vector kernel's thread loads one 16-byte piece an iteration, computes and stores it
before the next iteration's load (nvcc keeps the loop rolled), so a thread has one load in
flight. SSCAL's best plan (512 threads, 1 iteration) ran at 7.65-7.71 µs against PyTorch's
7.54 on one H200 (experiments/results/h200-warm-vectors.md), PyTorch's element-wise kernels
giving each thread several 16-byte pieces at once. This rewrites the generated source of the
space's 4- and 16-iteration plans (``#pragma unroll`` on the serial loop: nothing in fusec
changes), checks the results equal the original's bit for bit, and times plain and unrolled
in one process (``Program.time(host=False)``, median of ``--repeat``).

    python -m experiments.vector_unroll [--scripts sscal,vadd,waxpby] [--n 4194304] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.source_variants import run_case
from experiments.warm_vectors import check_arguments

ROOT = Path(__file__).resolve().parent.parent
LOOP = "  for (int it = 0; it < ITERS && base < n; ++it, base += chunk, c.i += chunk) {"


def unrolled(source: str) -> str | None:
    """The source with the vector kernel's serial loop unrolled; None where there is none."""
    if source.count(LOOP) != 1:
        return None
    return source.replace(LOOP, "  #pragma unroll  // experiments.vector_unroll\n" + LOOP, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default="sscal,vadd,waxpby")
    parser.add_argument("--n", type=int, default=4194304)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-vector-unroll")
    args = parser.parse_args()
    check_arguments(parser, args)

    import fusec
    from fusec.api import default_sizes
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    from fusec.library.loader import load_library
    from fusec.space.combinations import build_space
    library = load_library(fusec.data.LIBRARY)
    predictor = predictor_for(library, None)
    rows = []
    for script in args.scripts.split(","):
        path = ROOT / "scripts" / f"{script}.script"
        dag = load_script(path, library)
        sizes = default_sizes(dag, {s: args.n for s in dag.sizes})
        space = build_space(dag, library, "float32", sizes, predictor)
        # the best-predicted plan of each block size and serial iterations, streaming stores
        best: dict = {}
        for combination in space.layouts(200):
            kernel = combination.plan.kernels[0]
            key = (kernel.block, kernel.shape.iters)
            if len(combination.plan.kernels) == 1 and "st.cs" in combination.plan.summary(dag):
                best.setdefault(key, combination.plan)
        for (block, iters), plan in sorted(best.items()):
            base = fusec.compile(path, dtype="float32", sizes=sizes, plan=plan)
            variants = {"plain": base.source}
            if iters > 1 and (u := unrolled(base.source)) is not None:
                variants["unrolled"] = u
            rows.append(run_case(script, base, sizes, "float32", f"{block}t {iters}it", variants, {}, args.repeat))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
