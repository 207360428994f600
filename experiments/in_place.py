"""Does writing an update's result over its matrix cost time? (GPU)

    python -m experiments.in_place [--n 8192,16384] [--repeat 50] [--rounds 1] [--scripts gemver,...]
                                   [--dtypes float32,float64]

An out= array may be the memory of the matrix a result is computed from pointwise
(fusec.runtime.in_place): GEMVER's B over A, MADD's C over A, ssyr2's B over A. The bytes are
the same either way, so the time should be too; one thing could differ: the result's lines
are already in L2 (the kernel just read them) when it stores over A. This times each program,
fp32 and fp64, with out= a separate array and with out= the matrix itself, on the same
stream with CUDA events (median of --repeat calls after 5 warm ones; L2 not flushed between
calls, as in a loop), and prints both and their ratio (a Markdown table).

Answer (one H200, 2026-11-29; experiments/results/h200-in-place.md): nothing for MADD and ssyr2
(0.996-1.008x); GEMVER 0.987x at n = 8192; at n = 16384 fp32 0.999x (the 1.084x of a first run
was a drift of 5 % between rounds); fp64 1.050x in five rounds of one sitting, but 0.915x in a
later one, where ncu showed the kernel in place reading 5 % fewer DRAM bytes (2.83 against
2.98 GB) and running 1.46 against 1.56 ms: writing in place costs nothing.
"""
from __future__ import annotations

import argparse

import numpy as np

CASES = [("gemver", "B", "A"), ("madd", "C", "A"), ("triangle/syr2", "B", "A")]


def _time(cupy, call, repeat: int) -> float:
    for _ in range(5):
        call()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="8192,16384", help="matrix sides (square), comma-separated")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the two, in turn (each cell: every round's median; the ratio of the least)")
    parser.add_argument("--scripts", default=",".join(s for s, _, _ in CASES), help="of the cases, comma-separated")
    parser.add_argument("--dtypes", default="float32,float64")
    args = parser.parse_args()
    import cupy

    import fusec
    from fusec import oracle

    print("| script | dtype | n | out= another array (µs) | out= the matrix (µs) | ratio of the least |")
    print("|---|---|---:|---:|---:|---:|")
    for script, result, given in (c for c in CASES if c[0] in args.scripts.split(",")):
        for dtype in args.dtypes.split(","):
            prog = fusec.compile(f"scripts/{script}.script", dtype=dtype)
            for n in (int(v) for v in args.n.split(",")):
                sizes = {s: n for s in prog.dag.sizes}
                inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(0))
                device = {k: cupy.asarray(v) if np.ndim(v) else v for k, v in inputs.items()}
                out_apart = {result: cupy.empty_like(device[given])}
                out_place = {result: device[given]}
                apart, place = [], []
                for _ in range(args.rounds):  # in turn, so that a drift of the clocks shows as one
                    apart.append(_time(cupy, lambda: prog.run(device, out=out_apart), args.repeat))
                    place.append(_time(cupy, lambda: prog.run(device, out=out_place), args.repeat))
                t_apart, t_place = min(apart), min(place)
                print(f"| {script} | {dtype} | {n} | {' / '.join(f'{t:.1f}' for t in apart)}"
                      f" | {' / '.join(f'{t:.1f}' for t in place)} | {t_place / t_apart:.3f} |", flush=True)
                prog.release()


if __name__ == "__main__":
    main()
