"""Would splitting a matrix by columns make a distributed program's local work faster than
splitting it by rows (issue 47: "split by rows (and, where it pays, by columns)")?

For BiCGK, GEMVER and SGEMVT a column split needs one collective a call, as the row split does
(an all-reduce of an [m] result instead of an [n] one), and each rank's work is the whole script
on its m x n/P block: BiCGK's ``s = A^T r`` and GEMVER's and SGEMVT's ``x`` become whole on their
rank, and only the last gemv's result is partial. So the question is only whether the local
work is faster, which one GPU answers: per case, the stages of fusec's row-split plan
(``fusec.distributed.plan``, each at rank 0's block) and the script on an m x n/P block, each
tuned as ``fusec tune --top K --layouts L`` tunes (the float64 oracle checks every plan; nothing
stored), side by side in one process. ATAX is left out: its ``A^T (A x)`` would need a whole
``A x`` before the second pass, a collective between two passes over the block.

    python -m experiments.column_split --out column-split.json [--cases CASES] [--top K --layouts L]

CASES: comma-separated ``script-dtype-n`` (default: ``CASES`` below); P = 2.

Answer (one H200, 2026-11-30): no -- the column block's work was 2-3 % faster for BiCGK, level
for SGEMVT and 2-5 % slower for GEMVER (experiments/results/h200-column-split.md).
"""

import argparse
import json
import pathlib
import warnings

from experiments import script_cases

CASES = ("bicgk-float32-16384", "gemver-float32-16384", "sgemvt-float32-16384",
         "bicgk-float64-16384", "gemver-float64-16384", "sgemvt-float64-16384")
SCRIPTS = ("bicgk", "gemver", "sgemvt")
RANKS = 2


def _arguments(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.column_split", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="column-split.json", help="JSON of the records (default: column-split.json)")
    parser.add_argument("--cases", default=",".join(CASES), help="script-dtype-n, comma-separated")
    parser.add_argument("--top", type=int, default=6, help="best-predicted plans tuned (default: 6)")
    parser.add_argument("--layouts", type=int, default=8, help="layouts tuned besides (default: 8)")
    args = parser.parse_args(argv)
    for name in ("top", "layouts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: 1 or more")
    return args, script_cases(parser, args.cases, SCRIPTS, least=RANKS)


def _tuned(dag, library, dtype, sizes, top, layouts) -> dict:
    from fusec.tune.search import tune
    result = tune(dag, library, dtype, sizes, top=top, layouts=layouts, progress=False, store=False)
    if result.winner is None:
        raise SystemExit(f"{dag.name} at {sizes}: no candidate passed")
    return {"sizes": dict(sizes), "us": result.winner.measured * 1e6, "plan": result.winner.plan.summary(dag),
            "measured": len(result.rows), "bytes": result.winner.nbytes, "gpu": result.gpu_name}


def run_case(script: str, dtype: str, n: int, top: int, layouts: int) -> dict:
    from fusec import distributed
    from fusec.api import resolve_library, script_dag
    library = resolve_library(None)
    path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / f"{script}.script"
    plan = distributed.plan(str(path), ranks=RANKS, sizes={"m": n, "n": n}, dtype=dtype)
    stages, by_source = [], {}
    for stage in plan.stages:
        if stage.source not in by_source:
            dag = script_dag(None, stage.source, stage.name, library)
            by_source[stage.source] = _tuned(dag, library, dtype, dict(stage.sizes), top, layouts)
        stages.append(dict(by_source[stage.source], stage=stage.name))
    whole = script_dag(str(path), None, path.name, library)
    columns = _tuned(whole, library, dtype, {"m": n, "n": -(-n // RANKS)}, top, layouts)
    rows_us = sum(s["us"] for s in stages)
    return {"script": script, "dtype": dtype, "n": n, "ranks": RANKS, "rows_stages": stages, "rows_us": rows_us,
            "columns": columns, "columns_over_rows": columns["us"] / rows_us}


def table(records) -> str:
    lines = ["| sequence | dtype | n | row split: stages µs | column split: block µs | columns / rows |"
             " plans measured (rows; columns) |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in records:
        stages = " + ".join(f"{s['us']:.1f}" for s in r["rows_stages"])
        stages = f"{r['rows_us']:.1f}" + (f" ({stages})" if len(r["rows_stages"]) > 1 else "")
        lines.append(f"| {r['script']} | {r['dtype']} | {r['n']} | {stages} | {r['columns']['us']:.1f} |"
                     f" {r['columns_over_rows']:.3f} |"
                     f" {', '.join(str(s['measured']) for s in r['rows_stages'])}; {r['columns']['measured']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args, cases = _arguments(argv)
    warnings.simplefilter("ignore")
    records = []
    for script, dtype, n in cases:
        records.append(run_case(script, dtype, n, args.top, args.layouts))
        pathlib.Path(args.out).write_text(json.dumps(records, indent=1), encoding="utf-8")
        print(table(records[-1:]).splitlines()[-1], flush=True)
    print(table(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
