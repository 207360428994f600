"""Tune every point bench.peers measures, and ship the winners with the library.

    python -m bench.retune [--scripts atax,...] [--dtype float32|float64|both] [--size n=16384 ...]
                           [--vector-size N] [--top 10] [--layouts 60] [--again] [--no-ship]
                           [--budget SECONDS] [--out bench/results] [--name h100-retune]

bench.peers runs the plan the tuning cache or the library holds for each point
(else the predictor's first choice). The cache is the machine's own and goes
with it; a plan shipped in the library's tunings/ folder (``fusec tune --ship``)
travels with the repository. This command tunes each point of bench.peers
(the same sizes: n = 16384 for float32 and 8192 for float64, the vector
sequences' vectors n*n/4 or n*n/2, unless --size / --vector-size say; --size
may be given again, as for bench.sweeps's points: --scripts bicgk,gemver
--size n=512 --size n=1024 ...) as
``fusec tune --top K --layouts L --ship`` does, and ships the winner.

A point that already has a usable plan (in the cache or the library: keyed on
the library as it is and this fusec) is not tuned again unless --again; one
the cache holds but the library does not (or holds another plan for) is
shipped as it is. --budget stops
before starting a point (the first excepted) once that many seconds have gone, so that a run under
a time limit ends cleanly and the next run carries on where it stopped; a
tuned point is shipped as soon as it is done.

Each point's outcome goes into <out>/<name>.json (merged with what the file
holds from earlier runs, a point tuned again replacing its row) and a table in
<out>/<name>.md: the winner's time, its predicted rank, and what the
predictor's first choice measured, which is how far an untuned compile is from
the tuned one. Exits 1 if a point had no candidate pass.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

from bench import peers as P

COLUMNS = ("script", "dtype", "sizes", "winner µs", "GB/s", "predicted rank", "first choice µs",
           "first / winner", "candidates", "tuned s", "when", "library")


def points(scripts, dtypes, ns: list[int], vector_given: int | None, library):
    """(script, dtype, dag, sizes) for every point, as bench.peers sizes them
    (each n of ``ns``; none given: bench.peers's default n for the precision)."""
    from fusec.frontend import load_script
    for dtype in dtypes:
        for n in ns or [P.DEFAULT_N[dtype]]:
            vector = vector_given or P.default_vector_size(n, dtype)
            for script in scripts:
                dag = load_script(P.ROOT / "scripts" / f"{script}.script", library)
                yield script, dtype, dag, P.script_sizes(dag, n, vector)


def row_of(script: str, result, library) -> dict:
    """One point's outcome, for the JSON."""
    winner, first = result.winner, result.first
    return {
        "script": script, "dtype": result.dtype, "sizes": dict(result.sizes), "gpu": result.gpu_name,
        "library": library.content_hash,
        "winner_us": winner.measured * 1e6 if winner else None,
        "gbps": winner.gbps if winner else None,
        "predicted_rank": winner.rank if winner else None,
        "first_choice_us": first.measured * 1e6 if first is not None and first.passed else None,
        "candidates": len(result.rows), "seconds": result.seconds,
        "plan": winner.plan.summary(result.dag) if winner else None,
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def merge(old_rows: list[dict], new_rows: list[dict]) -> list[dict]:
    """Earlier rows, each replaced by a newer one of the same point, in point order."""
    def point(row):
        return row["script"], row["dtype"], tuple(sorted(row["sizes"].items()))
    merged = {point(r): r for r in old_rows}
    merged.update((point(r), r) for r in new_rows)
    return sorted(merged.values(), key=lambda r: (r["dtype"], r["script"], point(r)[2]))


def markdown(report: dict) -> str:
    lines = [f"# `fusec tune` of every bench.peers point on {report['device']}", "",
             f"`{report['command']}` (last run); library hash {report['library']} (a row tuned with"
             " the library as it was says so). Each point is"
             + (" tuned as `fusec tune --ship` does; the winner is shipped in the library's tunings/"
                " folder." if report.get("shipped", True) else
                " tuned as `fusec tune` does (--no-ship: nothing shipped; the candidates include the"
                " plan the library already ships for the point).")
             + " first / winner: what the predictor's first choice measured, over the"
             " winner's time (1.00: the predictor chose right).", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in report["rows"]:
        sizes = ",".join(f"{k}={v}" for k, v in sorted(r["sizes"].items()))
        win, first = r["winner_us"], r["first_choice_us"]
        cells = [r["script"], r["dtype"], sizes, f"{win:.1f}" if win else "none passed",
                 f"{r['gbps']:.0f}" if r["gbps"] else "", str(r["predicted_rank"] or ""),
                 f"{first:.1f}" if first else "failed",
                 f"{first / win:.2f}" if first and win else "", str(r["candidates"]), f"{r['seconds']:.0f}",
                 r["when"], r["library"] + ("" if r["library"] == report["library"] else " (as it was)")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None, tune=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scripts", default=",".join(P.SCRIPTS), help="comma-separated (default: all eleven)")
    parser.add_argument("--dtype", default="both", choices=("float32", "float64", "both"))
    parser.add_argument("--size", action="append", default=[], metavar="n=VALUE",
                        help="matrices n x n; repeatable, each n a point of every script (default: 16384"
                             " for float32, 8192 for float64)")
    parser.add_argument("--vector-size", type=int, default=None,
                        help="length of the vector sequences' vectors (default: n*n/4 float32, n*n/2 float64)")
    parser.add_argument("--top", type=int, default=10, metavar="K", help="as 'fusec tune --top' (default: 10)")
    parser.add_argument("--layouts", type=int, default=60, metavar="L",
                        help="as 'fusec tune --layouts' (default: 60)")
    parser.add_argument("--again", action="store_true", help="tune points that already have a usable plan too")
    parser.add_argument("--no-ship", action="store_true",
                        help="leave the winners in the tuning cache only, not in the library's tunings/")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="start no point after this many seconds, the first excepted (default: no limit)")
    parser.add_argument("--library", metavar="DIR", default=None, help="default: the bundled fusec/data/blas")
    parser.add_argument("--out", default=str(P.ROOT / "bench" / "results"))
    parser.add_argument("--name", default=None, help="file name without extension (default: <gpu>-retune)")
    args = parser.parse_args(argv)
    scripts = [s for s in args.scripts.split(",") if s]
    unknown = [s for s in scripts if s not in P.SCRIPTS]
    if unknown:
        parser.error(f"--scripts: no sequence {unknown[0]!r} (known: {', '.join(P.SCRIPTS)})")
    if args.top < 1 or args.layouts < 0:
        parser.error("--top must be at least 1 and --layouts at least 0")
    if args.budget is not None and args.budget < 0:
        parser.error(f"--budget {args.budget:g}: seconds, 0 or more")
    if args.vector_size is not None and args.vector_size < 1:
        parser.error(f"--vector-size {args.vector_size}: a length, at least 1")
    try:
        ns = [P.parse_size([item]) for item in args.size]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))

    from fusec.api import resolve_library
    from fusec.target import slug
    from fusec.tune import store as tuning
    library = resolve_library(args.library)
    if tune is None:
        from fusec.target import present
        from fusec.tune.search import tune
        info = present()
        if info is None:
            parser.error("tuning needs a GPU, and PyCUDA to reach it: none is here")
        device = info.name
    else:  # a test's fake
        device = tune.device
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    start, rows, failed, left = time.perf_counter(), [], [], []
    for script, dtype, dag, sizes in points(scripts, P.dtypes_of(args.dtype), ns, args.vector_size, library):
        label = f"{script} {dtype} " + ",".join(f"{k}={v}" for k, v in sorted(sizes.items()))
        usable = None if args.again else tuning.lookup(dag, library, dtype, sizes, slug(device))
        if usable is not None:
            shipped = usable.key.shipped_path(library)
            if not args.no_ship and not (shipped.is_file() and shipped.read_bytes() == usable.path.read_bytes()):
                log(f"{label}: the tuning cache's plan, shipped: {tuning.ship(usable, library)}")
            else:
                log(f"{label}: has a usable plan, skipped (--again tunes it anew)")
            continue
        if args.budget is not None and rows and time.perf_counter() - start > args.budget:  # the first always runs
            left.append(label)
            continue
        log(f"{label}: tuning ...")
        result = tune(dag, library, dtype, sizes, top=args.top, layouts=args.layouts, progress=False)
        rows.append(row_of(script, result, library))
        if result.entry is None:
            failed.append(label)
            log(f"{label}: no candidate passed")
            continue
        shipped = "" if args.no_ship else f", shipped: {tuning.ship(result.entry, library)}"
        log(f"{label}: {result.winner.measured * 1e6:.1f} us (predicted rank {result.winner.rank}"
            f" of {len(result.rows)}) in {result.seconds:.0f} s{shipped}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or P.default_name(device, "retune")
    path = out / f"{name}.json"
    old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"rows": []}
    report = {"device": device, "command": P.command_line("bench.retune", argv),
              "library": library.content_hash, "shipped": not args.no_ship, "rows": merge(old["rows"], rows)}
    if rows:
        path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        (out / f"{name}.md").write_text(markdown(report), encoding="utf-8")
        print(markdown(report))
    if left:
        log(f"the budget ran out: {len(left)} point(s) left for the next run: " + "; ".join(left))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
