"""Compile time against script length: from script text to the first choice's
ProgramPlan, on the CPU (no GPU, no nvcc), with the peak memory of the search.

Scripts of 1 to 30 calls, generated (:func:`chain`, :func:`side_by_side`,
:func:`mixture`, :func:`with_dead_code`):

- chain: ``t1 = svadd(w, y); t2 = saxpy(alpha, t1, y); t3 = svadd(t2, w); ...``
  returning the last;
- side by side: ``xi = svadd(w, y)`` for every i, all returned (independent calls);
- mixture: BiCG-like steps on one square matrix, ``q = A p; s = A^T r; a = r . q;
  p' = alpha q + p; r' = alpha s + r``, repeated;
- dead: a chain whose every other statement computes a value nothing returned needs.

    python -m bench.compile_time [--calls 1,2,4,...] [--kinds chain,side,...] [--dtype float32]
        [--write bench/results/cpu-compile-time.md]

Each row is one fresh process (``--one KIND CALLS``), so peak memory is that script's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
import warnings

KINDS = ("chain", "side", "mixture", "dead")
CALLS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 25, 30)


def chain(calls: int) -> str:
    """A chain of vector maps, each reading the last one's result."""
    lines = ["vector w[n], y[n], " + ", ".join(f"t{i}[n]" for i in range(1, calls + 1)) + ";",
             "scalar alpha;", "input w, y, alpha;"]
    previous = "w"
    for i in range(1, calls + 1):
        lines.append(f"t{i} = " + (f"svadd({previous}, y);" if i % 3 == 1 else
                                   f"saxpy(alpha, {previous}, y);" if i % 3 == 2 else f"svadd({previous}, w);"))
        previous = f"t{i}"
    return "\n".join(lines + [f"return {previous};"]) + "\n"


def side_by_side(calls: int) -> str:
    """Independent calls, each returned: ``xi = svadd(w, y)``."""
    names = [f"x{i}" for i in range(1, calls + 1)]
    return "\n".join(["vector w[n], y[n], " + ", ".join(f"{x}[n]" for x in names) + ";", "input w, y;"]
                     + [f"{x} = svadd(w, y);" for x in names] + [f"return {', '.join(names)};"]) + "\n"


_STEP = ("q{i} = sgemv(A, p{i});", "s{i} = sgemtv(A, r{i});", "a{i} = sdot(r{i}, q{i});",
         "p{j} = saxpy(alpha, q{i}, p{i});", "r{j} = saxpy(alpha, s{i}, r{i});")


def mixture(calls: int) -> str:
    """BiCG-like steps: q = A p, s = A^T r, a dot, two vector updates, repeated
    (the last step cut to make ``calls`` calls); every dot and the last p, r, q, s returned."""
    body, returned, i = [], [], 0
    while len(body) < calls:
        for template in _STEP:
            if len(body) == calls:
                break
            body.append(template.format(i=i, j=i + 1))
        i += 1
    assigned = [line.split(" = ")[0] for line in body]
    returned = [a for a in assigned if a.startswith("a")]
    for prefix in "pqrs":  # the newest of each, when not an input
        last = next((a for a in reversed(assigned) if a.startswith(prefix)), None)
        if last is not None:
            returned.append(last)
    vectors = sorted({a for a in assigned if a[0] in "pqrs"} | {"p0", "r0"}, key=lambda v: (v[0], int(v[1:])))
    scalars = sorted({a for a in assigned if a.startswith("a")}, key=lambda v: int(v[1:]))
    head = ["matrix A[n, n];", "vector " + ", ".join(f"{v}[n]" for v in vectors) + ";",
            "scalar " + ", ".join(["alpha"] + scalars) + ";", "input A, p0, r0, alpha;"]
    return "\n".join(head + body + [f"return {', '.join(dict.fromkeys(returned))};"]) + "\n"


def with_dead_code(calls: int) -> str:
    """A chain of ``calls - calls // 2`` live calls with a dead statement
    (``d = svadd(w, y)``, never returned) after each of ``calls // 2`` of them."""
    live = calls - calls // 2
    lines = ["vector w[n], y[n], d[n], " + ", ".join(f"t{i}[n]" for i in range(1, live + 1)) + ";",
             "input w, y;"]
    previous, dead = "w", calls // 2
    for i in range(1, live + 1):
        lines.append(f"t{i} = svadd({previous}, y);")
        previous = f"t{i}"
        if dead:
            lines.append("d = svadd(w, y);")
            dead -= 1
    return "\n".join(lines + [f"return {previous};"]) + "\n"


GENERATORS = {"chain": chain, "side": side_by_side, "mixture": mixture, "dead": with_dead_code}


def first_choice(text: str, dtype: str = "float32", gpu: str = "h100-80gb-hbm3"):
    """(the first choice's ProgramPlan, its predicted seconds, the DAG): script text to plan."""
    from fusec.api import default_sizes, resolve_library
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import check, parse
    from fusec.space.combinations import build_space
    library = resolve_library(None)
    dag = check(parse(text, "<bench>"), library)
    space = build_space(dag, library, dtype, default_sizes(dag, None), predictor_for(library, gpu))
    best = space.best()
    return best.plan, best.predicted, dag


def one(kind: str, calls: int, dtype: str) -> dict:
    """Time one script in this process; the library and predictor are loaded first
    (they are the same for every script)."""
    from fusec.api import resolve_library
    from fusec.cost.perfdb import predictor_for
    warnings.simplefilter("ignore")
    predictor_for(resolve_library(None), "h100-80gb-hbm3")
    text = GENERATORS[kind](calls)
    start = time.perf_counter()  # untraced: tracemalloc slows the search several times over
    plan, predicted, dag = first_choice(text, dtype)
    seconds = time.perf_counter() - start
    tracemalloc.start()  # the same search again, for its peak of Python allocations
    first_choice(text, dtype)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"kind": kind, "calls": len(dag.calls), "written": calls, "seconds": seconds,
            "peak_mb": peak / 2**20, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "kernels": len(plan.kernels), "predicted_us": predicted * 1e6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compile_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default=",".join(map(str, CALLS)))
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one script may take")
    parser.add_argument("--write", metavar="PATH", help="also write the table (markdown) here")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.dtype)))
        return 0
    rows = []
    header = ("| script | calls | compile s | peak MB (tracemalloc) | max RSS MB | kernels | predicted us |\n"
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(header, flush=True)
    for kind in args.kinds.split(","):
        for calls in map(int, args.calls.split(",")):
            try:
                out = subprocess.run([sys.executable, "-m", "bench.compile_time", "--one", kind, str(calls),
                                      "--dtype", args.dtype], capture_output=True, text=True,
                                     timeout=args.timeout, check=True)
                r = json.loads(out.stdout.splitlines()[-1])
                row = (f"| {kind} | {calls}" + (f" ({r['calls']} live)" if r["calls"] != calls else "")
                       + f" | {r['seconds']:.2f} | {r['peak_mb']:.1f} | {r['rss_mb']:.0f} | {r['kernels']}"
                       f" | {r['predicted_us']:.1f} |")
            except subprocess.TimeoutExpired:
                row = f"| {kind} | {calls} | > {args.timeout:.0f} (stopped) | | | | |"
            except subprocess.CalledProcessError as exc:
                row = f"| {kind} | {calls} | failed: {exc.stderr.strip().splitlines()[-1][:80]} | | | | |"
            rows.append(row)
            print(row, flush=True)
    if args.write:
        from fusec.cost.correction import DISABLE
        corrected = " without its fitted correction" if os.environ.get(DISABLE) == "0" else " and its fitted correction"
        machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs,"
                   f" Python {platform.python_version()}")
        text = (f"# Compile time against script length (CPU only)\n\n"
                f"`python -m bench.compile_time` on {machine}, {args.dtype}, sizes 8192, the H100 performance"
                f" database{corrected}; time from script text to the"
                f" first choice's ProgramPlan, one fresh process per row.\n\n" + header + "\n" + "\n".join(rows) + "\n")
        with open(args.write, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
