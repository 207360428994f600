"""What the studies of generated source share (finish_cost, cluster_finish, spread_finish): their
options, their cases, and one loop that builds each sequence's program, rewrites its source into
variants, checks the variants that add in another order against fusec's results, and times them
all interleaved (experiments.l2_policies.measure_variants)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from experiments.l2_policies import measure_variants

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}  # relative to the largest magnitude of a result


def case(text: str) -> tuple[str, int]:
    """``--case DTYPE:N``."""
    match = re.fullmatch(r"(float32|float64):(\d+)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected DTYPE:N, e.g. float32:4096")
    return match.group(1), int(match.group(2))


def parse(doc: str, cases: str, name: str) -> argparse.Namespace:
    """The options every such study takes: ``--case`` (``cases`` describes its default),
    ``--rounds``, ``--repeat``, ``--out`` and ``--name`` (default ``name``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--case", type=case, action="append", help=f"DTYPE:N (repeatable; default {cases})")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default=name)
    args = parser.parse_args()
    for option in ("rounds", "repeat"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} {getattr(args, option)}: 1 or more")
    return args


def command(module: str, args: argparse.Namespace) -> str:
    """The command line that ran, for the results."""
    return (f"python -m experiments.{module} --rounds {args.rounds} --repeat {args.repeat}"
            + "".join(f" --case {d}:{n}" for d, n in args.case or ()) + f" --name {args.name}")


def last_block(program, gpu: str | None = None):
    """``program`` as fusec generates it for a GPU without dependent launches: each tile
    kernel's sums made by the last block to arrive at a tile, in the grid's tail (on GPUs with
    them fusec sums apart since 2026-11-30: experiments/second_kernel_finish.py). The finish
    studies rewrite that finish. ``gpu``: the GPU the program was planned for (default: the
    one present)."""
    from fusec.emit.program import generate
    from fusec.runtime.program import Program
    from fusec.target import resolve
    target = dataclasses.replace(resolve(gpu), compute_capability="8.0")  # the same GPU without them
    generated = program.generated
    return Program(generate(generated.dag, generated.library, generated.plan, generated.dtype, target),
                   tuned=program.tuned)


def error(reference, program, inputs, runs: int = 1) -> float:
    """The largest difference between ``reference``'s results and those of ``program``'s
    ``runs``-th run (an earlier one may set up state the later ones read), relative to the
    largest magnitude."""
    import cupy

    from fusec.runtime import cuda
    with cuda.context():
        want = reference(**inputs)
        for _ in range(runs):
            got = program(**inputs)
        want, got = (r if isinstance(r, tuple) else (r,) for r in (want, got))
        return max(float(cupy.abs(a - b).max() / max(float(cupy.abs(a).max()), 1e-30)) for a, b in zip(want, got))


# a variant: its source, a whole Program (kernels of its own), or None (the program has none)
Sources = Callable[[object, dict], "dict[str, str | object | None] | str"]


def time_variants(args: argparse.Namespace, cases, scripts, sources: Sources, checked: Callable[[str], bool],
                  runs: int = 1, base_of: Callable = last_block) -> list[dict]:
    """Rows for experiments.l2_policies.write_table: for each case (``DTYPE:N``: N x N matrices,
    N*N/4 (fp32) or N*N/2 (fp64) elements for a script of vectors) and script, the program
    fusec compiles (its tuned plan where the cache has one), ``sources(program, sizes)``'s
    variants of its source or whole programs (a str instead: why the program is left out; None
    for a variant: it has none) of ``base_of(program)`` (default: its tile kernels' sums by the
    last block, :func:`last_block`), those ``checked`` names compared with that program's results
    within TOLERANCE on their ``runs``-th run (the json's 'errors'), and every variant timed."""
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    rows = []
    for dtype, side in args.case or cases:
        for script in scripts:
            path = ROOT / "scripts" / f"{script}.script"
            probe = fusec.compile(path, dtype=dtype, tuned=False)
            has_matrix = any(v.kind.value == "matrix" for v in probe.dag.values)
            n = side if has_matrix else side * side // (4 if dtype == "float32" else 2)
            sizes = {s: n for s in probe.dag.sizes}
            base = base_of(fusec.compile(path, dtype=dtype, sizes=sizes))
            plan = base.generated.plan.summary(base.dag)
            variants = sources(base, sizes)
            if isinstance(variants, str):
                print(f"{dtype} {script:8s} {n}: left out ({plan}: {variants})")
                continue
            inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
            programs = {name: source if isinstance(source, Program)
                        else Program(dataclasses.replace(base.generated, source=source))
                        for name, source in {"fusec": base.source, **variants}.items() if source is not None}
            row = {"sequence": script, "dtype": dtype, "size": n, "tuned": bool(base.tuned), "plan": plan,
                   "changed": {name: programs[name].source != base.source for name in programs}, "errors": {}}
            for name in filter(checked, programs):
                row["errors"][name] = error(programs["fusec"], programs[name], inputs, runs)
                if row["errors"][name] > TOLERANCE[dtype]:
                    raise SystemExit(f"{dtype} {script} {n}: {name} is wrong"
                                     f" (relative error {row['errors'][name]:.1e})")
            row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat)
            print(f"{dtype} {script:8s} {n:9d} " + "  ".join(
                f"{name}: {row['us'][name]:8.2f} us ({row['us'][name] / row['us']['fusec']:.3f}x)"
                for name in programs), flush=True)
            rows.append(row)
            del inputs, programs
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def device_name() -> str:
    import cupy
    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
