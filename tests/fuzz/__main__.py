"""python -m tests.fuzz [--count N] [--seed S] [--kind K ...] [-v]: the long fuzz run."""

from __future__ import annotations

import argparse
import collections
import sys
import time

from . import run
from .mutants import GENERATORS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="mutants to run (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--kind", action="append", choices=sorted(GENERATORS),
                        help="only these generators (repeatable; default all)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every mutant's ending")
    args = parser.parse_args(argv)
    start = time.perf_counter()

    def log(outcome):
        if args.verbose or outcome.ending == "FAILED":
            print(f"[{outcome.kind}] {outcome.ending}: {outcome.mutant}\n    {outcome.detail}", flush=True)

    outcomes = run(args.count, args.seed, args.kind, log)
    counts = collections.Counter((o.kind, o.ending) for o in outcomes)
    for kind in sorted({o.kind for o in outcomes}):
        print(f"{kind:9s} " + ", ".join(f"{e} {counts[kind, e]}" for e in ("accepted", "warning", "error", "FAILED")
                                        if counts[kind, e]))
    failed = sum(o.ending == "FAILED" for o in outcomes)
    print(f"{len(outcomes)} mutants in {time.perf_counter() - start:.1f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
