"""Where does a whole solve's time go beyond its iterations?

bench.solvers (H200, 2026-11-28) timed CG fp32 to rtol 1e-5 at 0.51 / 1.10 / 5.55 ms for
n = 1024 / 4096 / 16384 with 18 iterations of 8.1 / 19.9 / 238.2 µs: 0.36, 0.74 and 1.25 ms a
solve are not iterations. This times a solve's steps on the host clock (each step ends with
the host holding its result, so no synchronisation is added): the argument check (the survey
of A and its read), the stepper's start, the GPU loop (its record's upload, the one graph
launch, the read), the answer's copy, against the whole solve and against the same number of
iterations replayed from a graph. Same systems as bench.solvers' to-tolerance ones.

    python -m experiments.solve_overhead [--n 1024,4096,16384] [--solvers cg,bicgstab]
                                          [--dtype float32] [--repeat 10] [--out experiments/results]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STEPS = (  # (module path, attribute path, label)
    ("fusec.solvers.checks", "check", "check (survey + read)"),
    ("fusec.solvers.arrays", "CupyArrays.survey", "survey"),
    ("fusec.solvers.stepper", "ProgramStepper.begin", "stepper start"),
    ("fusec.solvers.driver", "run", "driver"),
    ("fusec.solvers.stepper", "ProgramStepper.loop", "GPU loop (stepper)"),
    ("fusec.solvers.device_loop", "DeviceLoop.run", "GPU loop (launch + read)"),
    ("fusec.solvers.stepper", "ProgramStepper.advance", "plain chunk"),
)


def instrument(spent: dict) -> None:
    """Wrap each step so that its host time adds to ``spent[label]`` (a list per solve)."""
    import importlib
    for module_name, path, label in STEPS:
        owner = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def timed(*args, _original=original, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_label] += time.perf_counter() - start
        setattr(owner, name, timed)


def _profiled(solve, cupy, repeat: int, title: str, top: int = 40) -> str:
    """cProfile's table of ``repeat`` solves (cumulative host time, the top functions)."""
    import cProfile
    import io
    import pstats
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeat):
        solve()
        cupy.cuda.Device().synchronize()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(top)
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top // 2)  # own time: where it is spent
    return f"## {title}, {repeat} solves\n{text.getvalue()}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1024,4096,16384")
    parser.add_argument("--solvers", default="cg,bicgstab")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    parser.add_argument("--profile", action="store_true",
                        help="also profile the solves (cProfile, host time; a read waits for the GPU) and write"
                             " the functions of most cumulative time to <out>/<gpu>-solve-overhead-profile.txt")
    args = parser.parse_args(argv)

    import cupy

    import fusec.solvers as fs
    from bench.solvers import TOLERANCE, systems
    from fusec.solvers import api
    from fusec.solvers.methods import METHODS
    from fusec.target import resolve, slug

    gpu = resolve(unknown_ok=True).name
    spent: dict = collections.defaultdict(float)
    instrument(spent)
    rows, profiles = [], []
    for n in (int(v) for v in args.n.split(",")):
        _, easy, b = systems(cupy, n, args.dtype)
        for name in args.solvers.split(","):
            solve = getattr(fs, name)
            rtol = TOLERANCE[args.dtype]
            solve(easy, b, rtol=rtol)  # compile, warm, keep the stepper
            cupy.cuda.Device().synchronize()
            totals, parts = [], collections.defaultdict(list)
            for _ in range(args.repeat):
                spent.clear()
                start = time.perf_counter()
                x, outcome = api.solve_with_outcome(METHODS[name], easy, b, rtol=rtol)
                cupy.cuda.Device().synchronize()
                totals.append(time.perf_counter() - start)
                for label, seconds in spent.items():
                    parts[label].append(seconds)
            if args.profile:  # after the timed solves: the profiler's own cost is in none of them
                profiles.append(_profiled(lambda: api.solve_with_outcome(METHODS[name], easy, b, rtol=rtol),
                                          cupy, args.repeat, f"{name} {args.dtype} n={n}"))
            iterations = outcome.iterations
            # the same iterations replayed from a graph, by the stepper the solves kept
            kept = list(api._KEPT._free.values())[-1]
            stepper, samples = kept.stepper, []
            with kept.arrays.stream():
                stepper.begin(easy, METHODS[name].start(cupy.zeros_like(b), b, lambda a: a), graphs=True)
                for _ in range(args.repeat + 1):
                    cupy.cuda.Device().synchronize()
                    start = time.perf_counter()
                    stepper.advance(iterations)
                    cupy.cuda.Device().synchronize()
                    samples.append(time.perf_counter() - start)
                stepper.end()
            replay = statistics.median(samples[1:])  # the first captures the graph
            row = {"solver": name, "n": n, "dtype": args.dtype, "iterations": iterations,
                   "total_us": statistics.median(totals) * 1e6,
                   "replayed_iterations_us": replay * 1e6,
                   "steps_us": {label: statistics.median(v) * 1e6 for label, v in parts.items()}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{slug(gpu)}-solve-overhead"
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [f"# Where a solve's time goes ({gpu})", "",
             f"`python -m experiments.solve_overhead --n {args.n} --solvers {args.solvers} --dtype {args.dtype}"
             f" --repeat {args.repeat}`: host µs, medians of {args.repeat} solves with the stepper kept.", "",
             "| solver | n | iterations | whole solve | the iterations replayed | " + " | ".join(
                 label for _, _, label in STEPS) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(STEPS)]
    for r in rows:
        cells = [f"{r['steps_us'].get(label, 0.0):.1f}" for _, _, label in STEPS]
        replayed = f"{r['replayed_iterations_us']:.1f}"
        lines.append(f"| {r['solver']} | {r['n']} | {r['iterations']} | {r['total_us']:.1f} | {replayed} | "
                     + " | ".join(cells) + " |")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    if profiles:
        (out / f"{stem}-profile.txt").write_text("\n\n".join(profiles) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
