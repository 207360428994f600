"""Would a solver iteration gain from a dot of a gemv's rows joining the gemv's band kernel (a
fusion across nesting depths: CG's ``pq = p . q`` in the kernel making ``q = A p``, 4 -> 3 kernels)?

The fusion is not in fusec (the answer below was no); ``experiments/cross_depth.patch`` adds it
(band implementations of ``sdot``, the fusion rule across depths, its lowering and the band
finish of a whole-vector sum). On a GPU machine, in a copy of the tree with the patch applied
(``patch -p1 < experiments/cross_depth.patch``), then in this tree::

    python -m experiments.cross_depth with --top 40 --wide 1000 --out with.json [--cases CASES]
    python -m experiments.cross_depth without --top 16 --out without.json [--cases CASES]

``with``: the best-predicted plan holding each distinct cross-depth kernel (of every cover that
offers one, the first ``--wide`` of each slot's), the first ``--top`` of them; ``without``: what
``fusec tune --top K --layouts K`` measures (K: ``--top``), and the plan tuned or shipped for the
size. Each plan is checked against the float64 oracle and timed as ``fusec tune`` times a
candidate. CASES: comma-separated ``script-dtype-n`` (default:
every one of ``CASES`` below). The perfdb's staleness is bypassed in ``with`` (the patch changes
``sdot.cu`` and shared library files; its band kernels price from bytes, not from timings).

Answer (one H200, 2026-11-30): no -- experiments/results/h200-cross-depth.md.
"""

import argparse
import json
import pathlib
import warnings

from experiments import script_cases

CASES = ("cg-float32-1024", "cg-float64-1024", "cg-float32-4096", "cg-float32-16384",
         "bicgstab-float32-1024", "bicgstab-float32-4096", "bicg-float32-1024")


def is_cross(library, plan, dag) -> bool:
    """Whether ``plan`` is a kernel of calls of both nesting depths (a gemv and a dot)."""
    return (type(plan).__name__ == "KernelPlan"
            and len({library.functions[dag.call(c).function].hof.nested for c in plan.calls}) == 2)


def cross_candidates(space, dag, wide: int) -> list:
    """The best-priced combination holding each cross-depth kernel the space offers (the first
    ``wide`` of each slot), the others' slots at their best plain option; by predicted time."""
    def first_plain(column):
        return next((k for k, (p, _, _) in enumerate(column) if not is_cross(space.library, p, dag)), 0)

    found = {}
    for cover in space.covers:
        columns = [space.options[slot] for slot in cover]
        if not all(columns):
            continue
        for position, column in enumerate(columns):
            crossing = [i for i, (p, _, _) in enumerate(column) if is_cross(space.library, p, dag)]
            for i in crossing[:wide]:
                index = tuple(i if j == position else first_plain(c) for j, c in enumerate(columns))
                combo = space._picked(columns, index)
                kernel = column[i][0]
                if kernel not in found or combo.predicted < found[kernel].predicted:
                    found[kernel] = combo
    return sorted(found.values(), key=lambda c: c.predicted)


def _arguments():
    parser = argparse.ArgumentParser(prog="python -m experiments.cross_depth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("with", "without"))
    parser.add_argument("--top", type=int, default=16, help="plans measured (default: 16)")
    parser.add_argument("--wide", type=int, default=6, help="cross-depth options of a slot looked at (default: 6)")
    parser.add_argument("--out", default="cross-depth.json", help="JSON of the records (default: cross-depth.json)")
    parser.add_argument("--cases", default=",".join(CASES), help="script-dtype-n, comma-separated")
    args = parser.parse_args()
    for name in ("top", "wide"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: 1 or more")
    return args, script_cases(parser, args.cases, ("cg", "bicg", "bicgstab"))


def main() -> None:
    args, cases = _arguments()
    import fusec
    from fusec.cost.perfdb import predictor_for, store
    from fusec.frontend import check, parse
    from fusec.library.loader import load_library
    from fusec.space.combinations import build_space
    from fusec.tune.search import GpuMeasurer, _measure_all, tune

    # the patch changes sdot.cu and shared files; its band kernels price from bytes, not timings
    store.stale_routines = lambda database, library: frozenset()
    warnings.simplefilter("ignore")
    library = load_library(pathlib.Path(fusec.__file__).parent / "data" / "blas")
    records = []
    for name, dtype, n in cases:
        path = pathlib.Path(fusec.__file__).parent / "data" / "solvers" / f"{name}.script"
        dag = check(parse(path.read_text(), str(path)), library)
        sizes = {"n": n}
        predictor = predictor_for(library, "h200")
        if args.mode == "with":
            chosen = cross_candidates(build_space(dag, library, dtype, sizes, predictor), dag, args.wide)[:args.top]
            with GpuMeasurer(dag, library, dtype, sizes, repeat=30, warmup=5) as measurer:
                rows, _ = _measure_all(measurer, dag, library, dtype, sizes, chosen, False)
                gpu = measurer.gpu_name
        else:
            result = tune(dag, library, dtype, sizes, top=args.top, layouts=args.top, predictor=predictor,
                          repeat=30, warmup=5, progress=False, store=False)
            rows, gpu = list(result.rows), result.gpu_name
        passed = [r for r in rows if r.passed]
        best = min(passed, key=lambda r: r.measured) if passed else None
        record = {"mode": args.mode, "script": name, "dtype": dtype, "n": n, "gpu": gpu, "measured": len(rows),
                  "passed": len(passed), "best_us": best.measured * 1e6 if best else None,
                  "best_kernels": len(best.plan.kernels) if best else None,
                  "best_cover": [list(k.calls) for k in best.plan.kernels] if best else None,
                  "failures": [r.measurement.reason[:300] for r in rows if not r.passed][:3]}
        print(json.dumps(record), flush=True)
        records.append(record)
    pathlib.Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
