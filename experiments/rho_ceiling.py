"""How high can a predictor's rho go? Two measurements of the same plans against each other (GPU)

    python -m experiments.rho_ceiling [--seed N] [--scripts atax,...] [--dtype both] [--budget 300]
                                      [--repeat 20]

QUESTION (issue 49). The target asks Spearman's rho >= 0.8 between a predictor's times and the
measured ones over each point's wide tune; the corrected model reached a mean of 0.74-0.75 over
the H200's last draws (bench/results/h200-prediction-draw.md). Part of any rho below 1 is the
measurement's own: plans within a few per cent of each other change places from one measurement
to the next, and no model can rank them better than a second measurement does. How far below 1
is that ceiling?

METHOD. Points drawn as ``bench.prediction --draw`` draws them (fusec.tune.plans.draw_sizes,
--seed), in its order; at each, the corrected predictor's wide tune
(fusec.tune.plans.wide_candidates: top 4, the best of the 8 best layouts, the best of every
layout class) measured twice, one pass after the other (fusec.tune.plans.measure: checked
against the oracle, median of --repeat from an empty L2, as ``fusec tune``). Over the plans
both passes measured: rho(pass 1, pass 2), rho(model, pass 1), rho(model, pass 2), and the
median relative difference of a plan's two times. Points are started while --budget seconds
last.
"""
import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="seed of the draw (default: a new one, printed)")
    parser.add_argument("--scripts", default=None, help="comma-separated (default: all eleven)")
    parser.add_argument("--dtype", default="both", choices=("float32", "float64", "both"))
    parser.add_argument("--budget", type=float, default=300.0, help="seconds to start points in (default: 300)")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    from bench.prediction import SCRIPTS
    scripts = SCRIPTS if args.scripts is None else [s for s in args.scripts.split(",") if s]
    unknown = [s for s in scripts if s not in SCRIPTS]
    if unknown:
        parser.error(f"--scripts: no sequence {unknown[0]!r} (known: {', '.join(SCRIPTS)})")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed {args.seed}: 0 or more")
    if not args.budget > 0:
        parser.error(f"--budget {args.budget:g}: seconds, more than 0")
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")

    from bench import peers
    from bench.prediction_draw import draw_points, new_seed
    from fusec import data
    from fusec.cost.fit import spearman
    from fusec.cost.perfdb import predictor_for
    from fusec.library.loader import load_library
    from fusec.space.combinations import build_space
    from fusec.target import present
    from fusec.tune import plans
    from fusec.tune.search import GpuMeasurer
    info = present()
    if info is None:
        parser.error("this measures plans on the GPU, and PyCUDA to reach it: none is here")
    seed = new_seed() if args.seed is None else args.seed
    library = load_library(data.LIBRARY)
    predictor = predictor_for(library, info.slug)
    print(f"GPU: {info.name}; seed {seed}; predictor {predictor.name}\n")
    print("| sequence | dtype | sizes | plans | rho(pass 1, pass 2) | rho(model, pass 1) | rho(model, pass 2) |"
          " median difference of a plan's two times |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    began, found = time.monotonic(), []
    for script, dtype, dag, sizes in draw_points(scripts, peers.dtypes_of(args.dtype), seed, library):
        if time.monotonic() - began > args.budget:
            break
        candidates = plans.wide_candidates(build_space(dag, library, dtype, sizes, predictor))
        generated = plans.generate_all(dag, library, dtype, [c.plan for c in candidates], predictor.target)
        with GpuMeasurer(dag, library, dtype, sizes, repeat=args.repeat, warmup=3, seed=seed) as measurer:
            passes = [plans.measure(measurer, generated) for _ in range(2)]
        both = [(g, a.seconds, b.seconds) for g, a, b in zip(generated, *passes) if a.passed and b.passed]
        if len(both) < 3:
            continue
        model = [plans.plan_seconds(predictor, dag, sizes, g) for g, _, _ in both]
        first, second = [t for _, t, _ in both], [t for _, _, t in both]
        row = (spearman(first, second), spearman(model, first), spearman(model, second),
               statistics.median(abs(a - b) / min(a, b) for a, b in zip(first, second)))
        found.append(row)
        label = ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
        print(f"| {script} | {dtype} | {label} | {len(both)} | {row[0]:.2f} | {row[1]:.2f} | {row[2]:.2f} |"
              f" {row[3] * 100:.1f} % |", flush=True)
    if found:
        means = [statistics.fmean(r[k] for r in found) for k in range(4)]
        print(f"| mean of {len(found)} | | | | {means[0]:.2f} | {means[1]:.2f} | {means[2]:.2f} |"
              f" {means[3] * 100:.1f} % |")


if __name__ == "__main__":
    main()
