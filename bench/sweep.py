"""Measure the K best-predicted combinations of one script, beside cuBLAS.

    python -m bench.sweep bicgk --dtype float32 --size n=16384 --top 24

Shows how the predictor's ranking compares with measured times (CUDA
events, median of --repeat), and the best measured speed-up over the cuBLAS
call sequence. Programs are compiled in parallel first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--size", action="append", default=[])
    parser.add_argument("--top", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--wide", action="store_true",
                        help="search a wider grid of tile shapes (experiment)")
    parser.add_argument("--unroll", action="store_true",
                        help="also time each program with its serial loop unrolled (experiment)")
    parser.add_argument("--min-blocks", type=int, default=0, metavar="K",
                        help="also time each program with __launch_bounds__(BLOCK, K): registers capped"
                             " so K blocks fit on an SM (experiment)")
    args = parser.parse_args(argv)

    import cupy

    from bench.cublas import Blas, sequence
    from bench.fusion import _time, device_inputs
    from fusec import data, nvcc
    from fusec.cli import _sizes
    from fusec.cost.analytic import DEFAULT
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.ir.plan import HorizontalPlan, ProgramPlan
    from fusec.library.loader import load_library
    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    from fusec.space.combinations import build_space
    from fusec.space.implementations import load_phases
    library = load_library(data.LIBRARY)
    dag = load_script(ROOT / "scripts" / f"{args.script}.script", library)
    sizes = _sizes(args.size, dag.sizes)
    shapes = None
    if args.wide:
        from fusec.ir.geometry import Shape
        from fusec.library.model import Geometry
        shapes = tuple(Shape(Geometry.TILE, 32 * by, it, tr) for by, tr in ((4, 16), (8, 32), (8, 64), (16, 64))
                       for it in (1, 2, 4, 8))
    space = build_space(dag, library, args.dtype, sizes, DEFAULT, shapes)
    ranked = space.ranked()
    combos = [c for _, c in zip(range(args.top), ranked)]
    inputs = device_inputs(cupy, dag, sizes, args.dtype, seed=3)
    programs = [Program(generate(dag, library, c.plan, args.dtype)) for c in combos]
    if args.unroll:  # the same programs with '#pragma unroll' on the serial loop
        unrolled = []
        for c, p in zip(combos, programs):
            gen = p.generated
            source = gen.source.replace("  for (int it = 0;", "  #pragma unroll\n  for (int it = 0;")
            import dataclasses
            unrolled.append(Program(dataclasses.replace(gen, source=source)))
        combos, programs = combos + combos, programs + unrolled
    if args.min_blocks:  # the same programs with a register bound
        import dataclasses
        bounded = []
        for p in programs:
            gen = p.generated
            source = gen.source.replace("__launch_bounds__(BLOCK)", f"__launch_bounds__(BLOCK, {args.min_blocks})")
            bounded.append(Program(dataclasses.replace(gen, source=source)))
        combos, programs = combos + combos, programs + bounded
    with cuda.context() as ctx:
        nvcc.compile_many([p.source for p in programs], cuda.arch_of(ctx))
    run_cublas, _ = sequence(args.script, Blas(args.dtype), inputs)
    cublas = statistics.median(_time(cupy, run_cublas, args.repeat)) * 1e3
    nbytes = programs[0].minimum_bytes(sizes)
    print(f"{args.script} {args.dtype} {sizes}: cuBLAS {cublas:.1f} us")
    print(f"{'rank':>4} {'predicted':>10} {'measured':>10} {'GB/s':>6} {'vs cuBLAS':>9}  kernels")
    rows, labels = [], []
    for rank, (combo, prog) in enumerate(zip(combos, programs), 1):
        measured = statistics.median(prog.time(inputs, repeat=args.repeat)) * 1e3
        rows.append(measured)
        kernels = " | ".join(
            ProgramPlan((k,)).summary(dag) if isinstance(k, HorizontalPlan) else
            "+".join(dag.call(c).function for c in k.calls)
            + f" [{k.shape.block}t,{k.shape.iters}it" + (f",{k.shape.tile_rows}r,{k.serial}" if k.serial else "")
            + f",{load_phases(k)} load phase(s)]" for k in combo.plan.kernels)
        if (args.unroll or args.min_blocks) and rank == len(combos) // 2 + 1:
            variant = "serial loop unrolled" if args.unroll else f"__launch_bounds__(BLOCK, {args.min_blocks})"
            print("---- the same, " + variant)
        line = (f"{rank:>4} {combo.predicted * 1e6:8.1f}us {measured:8.1f}us {nbytes / measured / 1e3:6.0f}"
                f" {cublas / measured:8.2f}x  {kernels}"
                + (" variant" if (args.unroll or args.min_blocks) and rank > len(combos) // 2 else ""))
        labels.append(line)
        print(line, flush=True)
        prog.release()
    print("fastest measured:")
    for i in sorted(range(len(rows)), key=rows.__getitem__)[:10]:
        print(labels[i])
    best = min(rows)
    print(f"best measured: rank {rows.index(best) + 1}, {best:.1f} us, {cublas / best:.2f}x cuBLAS;"
          f" predicted-first {rows[0]:.1f} us ({best / rows[0] * 100:.0f}% of best)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
