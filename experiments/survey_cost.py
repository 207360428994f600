"""What does finding A's zero rows and columns cost the solvers' survey?

``fusec.solvers`` checks its arguments with one kernel and one read
(``fusec/solvers/kernels.py``: whether b and x0 are finite, the sum of A,
||b||^2, and since 2026-11-28 A's zero rows and columns). This times the
survey of each given git revision's ``kernels.py`` on the same CuPy arrays, in
one process: CUDA events around a whole ``survey`` call (the memset, the kernel
and the read of its result: what a solve waits for), median of ``--repeat``.

    python -m experiments.survey_cost --revisions cbbbc2d,74970e2,HEAD
    python -m experiments.survey_cost --revisions HEAD --rows 4,16,64   # stripe heights
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revisions", default="cbbbc2d,74970e2,HEAD",
                        help="git revisions whose fusec/solvers/kernels.py to time (comma-separated)")
    parser.add_argument("--n", default="1024,4096,16384")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rows", default="",
                        help="stripe heights (rows a block takes, at most 64) to time each revision with"
                             " (comma-separated; default: each revision's own kernels.stripes)")
    args = parser.parse_args()
    heights = [int(v) for v in args.rows.split(",") if v]
    if any(not 1 <= h <= 64 for h in heights):
        parser.error(f"--rows {args.rows}: each height from 1 to 64 (the kernel's row bits)")
    import cupy
    import numpy as np

    from fusec.solvers.arrays import CupyArrays
    modules = {}
    for rev in args.revisions.split(","):
        source = subprocess.run(["git", "show", f"{rev}:fusec/solvers/kernels.py"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        name = f"_survey_cost_{len(modules)}"
        path = ROOT / "fusec" / "solvers" / f"{name}.py"  # beside the package's: its relative imports hold
        path.write_text(source)
        try:
            modules[rev] = importlib.import_module(f"fusec.solvers.{name}")
        finally:
            path.unlink()
        if heights and not hasattr(modules[rev], "stripes"):
            parser.error(f"--rows: revision {rev}'s survey has no stripes (before the zero rows and columns)")
    arrays = CupyArrays()
    for dtype in ("float32", "float64"):
        for n in (int(v) for v in args.n.split(",")):
            A = cupy.random.random((n, n), dtype=dtype) + 0.5
            b = cupy.random.random(n, dtype=dtype)
            for (rev, module), rows in ((m, r) for m in modules.items() for r in heights or [None]):
                if rows is not None:  # the revision's stripes at this height, its grid capped as its own is
                    module.stripes = lambda n, rows=rows, module=module: (
                        min(rows, n), min(module.MOST_BLOCKS, -(-n // min(rows, n))))
                for _ in range(3):
                    module.survey(arrays, A, b, None, dtype)
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                times = []
                for _ in range(args.repeat):
                    start.record()
                    module.survey(arrays, A, b, None, dtype)
                    end.record()
                    end.synchronize()
                    times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
                us = float(np.median(times))
                height = f" rows {rows:2d}" if rows is not None else ""
                print(f"{rev:8s}{height} {dtype} n={n:5d}: {us:7.1f} us, {A.nbytes / us / 1e3:5.0f} GB/s over A",
                      flush=True)
            del A, b
            cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
