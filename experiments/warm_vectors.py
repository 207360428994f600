"""Does `fusec tune`'s timing from an empty L2 pick the vector plans that run fastest
when called again and again on the same arrays, as `bench.peers` (and a solver) calls them?

At fp32 n = 4096 `bench.peers` gives the vector sequences 4M-element vectors: 16 MB
each, so a call's inputs and outputs fit in the H200's 60 MB L2 and the next call finds
some of them there. `fusec tune` times every candidate from an empty L2
(`GpuClock.empty_l2`), so that none inherits what the one before left; it never sees
which plans leave the next call more to find. SSCAL's shipped plan streams its stores
(`st.cs`: evict first) and trailed PyTorch by 0.1-0.2 µs in `bench.peers`
(bench/results/h200-peers-4096.md).

For each vector sequence this times every plan of a wide tune's candidates (the top 10
with twins, the best of 40 layouts, the best of each layout class) twice, in one process:
from an empty L2 as `fusec tune` does, and warm as `bench.peers` does (`Program.time(host=False)`
on the same arrays, after 3 warm-ups), each checked against the oracle first.

    python -m experiments.warm_vectors [--scripts sscal,vadd,waxpby,axpydot] [--n 4194304] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("sscal", "vadd", "waxpby", "axpydot")


def study(script: str, library, dtype: str, n: int, predictor, repeat: int) -> dict:
    from fusec.api import default_sizes
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.runtime.program import Program
    from fusec.space.combinations import build_space
    from fusec.tune.plans import wide_candidates
    from fusec.tune.search import GpuMeasurer

    dag = load_script(ROOT / "scripts" / f"{script}.script", library)
    sizes = default_sizes(dag, {s: n for s in dag.sizes})
    space = build_space(dag, library, dtype, sizes, predictor)
    candidates = wide_candidates(space, top=10, layouts=40)
    rows = []
    with GpuMeasurer(dag, library, dtype, sizes, repeat=repeat, warmup=3) as measurer:
        programs = [Program(generate(dag, library, c.plan, dtype)) for c in candidates]
        errors = measurer.compile(programs, lambda _: None)
        for candidate, program, error in zip(candidates, programs, errors):
            row = {"plan": candidate.plan.summary(dag), "groups": list(candidate.groups)}
            if error:
                rows.append({**row, "error": error[:300]})
                continue
            cold = measurer.measure(program)  # checked, then timed from an empty L2; releases
            if not cold.passed:
                rows.append({**row, "error": cold.reason[:300]})
                continue
            warm = program.time(measurer.device, warmup=3, repeat=repeat, host=False)
            program.release()
            rows.append({**row, "cold_us": cold.seconds * 1e6, "warm_us": statistics.median(warm) * 1e3})
            print(f"{script:8s} {row['plan'][:60]:60s} cold {rows[-1]['cold_us']:7.2f}"
                  f" warm {rows[-1]['warm_us']:7.2f}", flush=True)
        gpu = measurer.gpu_name
    ok = [r for r in rows if "cold_us" in r]
    cold_best = min(ok, key=lambda r: r["cold_us"])
    warm_best = min(ok, key=lambda r: r["warm_us"])
    return {"script": script, "dtype": dtype, "sizes": sizes, "gpu": gpu, "rows": rows,
            "cold_best": cold_best["plan"], "warm_best": warm_best["plan"],
            "cold_best_warm_us": cold_best["warm_us"], "warm_best_warm_us": warm_best["warm_us"]}


def check_arguments(parser: argparse.ArgumentParser, args) -> None:
    """--repeat, --n and --scripts (names of scripts/*.script), before anything touches the GPU."""
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")
    if args.n < 1:
        parser.error(f"--n {args.n}: 1 or more")
    for script in args.scripts.split(","):
        if not (ROOT / "scripts" / f"{script}.script").is_file():
            parser.error(f"--scripts: no sequence {script!r} in scripts/")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=",".join(SCRIPTS))
    parser.add_argument("--n", type=int, default=4194304, help="vector length (default: %(default)s)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-warm-vectors")
    args = parser.parse_args()
    check_arguments(parser, args)

    from fusec import data
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    library = load_library(data.LIBRARY)
    predictor = predictor_for(library, None)
    results = []
    for script in args.scripts.split(","):
        r = study(script, library, args.dtype, args.n, predictor, args.repeat)
        print(f"{script}: best from an empty L2 {r['cold_best']} ({r['cold_best_warm_us']:.2f} us warm);"
              f" best warm {r['warm_best']} ({r['warm_best_warm_us']:.2f} us)", flush=True)
        results.append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
