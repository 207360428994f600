"""Write the local stages of a distributed program as scripts, and the ``fusec tune`` command
of each, so that the stages can be tuned like any script.

A rank compiles each stage of a distributed program with ``fusec.compile`` from the stage's
text (``fusec.distributed.fusec_executor``); a tuned plan is looked up by that text and the
stage's sizes, so a stage tuned from the file written here (with ``--ship``) is found by
every rank that runs it. ``--solver`` writes the stages of the iteration a distributed solver
runs (``fusec.distributed.solvers.iteration_plan``: its state passed in the layouts the solver
chooses) instead of a script's. Without a GPU this only writes and prints::

    python tools/stage_scripts.py scripts/bicgk.script --ranks 2 --n 16384 --out /tmp/stages
    python tools/stage_scripts.py --solver cg --ranks 2 --n 16384 --out /tmp/stages
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, installed or not

from fusec import distributed  # noqa: E402
from fusec.distributed.solvers import iteration_plan  # noqa: E402
from fusec.errors import FusecError  # noqa: E402


def write(script: str, ranks: int, sizes: dict, dtype: str, out: Path, solver: str | None = None
          ) -> list[tuple[Path, dict]]:
    """The stage scripts of ``script`` (or of ``solver``'s iteration) over ``ranks`` ranks at
    ``sizes``, each written once (stages of the same text share a file), with the sizes rank 0
    compiles it for."""
    if solver is not None:
        plan, script = iteration_plan(solver, sizes["n"], ranks, dtype), f"{solver}.script"
    else:
        plan = distributed.plan(script, ranks=ranks, sizes=sizes, dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    written: list[tuple[Path, dict]] = []
    seen: set[str] = set()
    for number, stage in enumerate(plan.stages):
        if stage.source in seen:
            continue
        seen.add(stage.source)
        path = out / f"{Path(script).stem}-p{ranks}-stage{number}.script"
        path.write_text(stage.source, encoding="utf-8")
        written.append((path, dict(stage.sizes)))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("script", nargs="?", help="the script (not with --solver)")
    parser.add_argument("--solver", choices=("cg", "bicg", "bicgstab"),
                        help="the iteration of fusec.distributed.solvers' solver of that name instead of a script")
    parser.add_argument("--ranks", type=int, required=True, help="processes of the distributed program")
    parser.add_argument("--n", type=int, required=True, help="the whole problem's size (every size of the script)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--out", required=True, help="folder for the stage scripts")
    args = parser.parse_args(argv)
    if (args.script is None) == (args.solver is None):
        parser.error("pass a script or --solver (one of them, not both)")
    try:
        written = write(args.script, args.ranks, {"n": args.n}, args.dtype, Path(args.out), args.solver)
    except FusecError as exc:
        print(f"stage_scripts: {exc}", file=sys.stderr)
        return 2
    for path, stage_sizes in written:
        size_args = " ".join(f"--size {k}={v}" for k, v in stage_sizes.items())
        print(f"python -m fusec.cli tune {shlex.quote(str(path))} {size_args} --dtype {args.dtype}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
