"""Can L2 keep a matrix from one call to the next? Evict-last for the walk's end.

At fp32 n = 4096 a matrix is 64 MiB against the H100's 50 MB of L2. A solver
calls the same sequence on the same matrix again and again, and fusec's
kernels alternate the direction their blocks walk the grid from one launch to
the next (``turning``), so that a launch starts on the tiles the launch before
ended on. But a tile kernel that stores no matrix marks its matrix loads
evict-first (``STREAM_MATRIX``), and the H100 keeps little of them: BiCGK at
n = 4096 runs at 83 % of the copy bandwidth, SGEMV at 92 %.

This rewrites the generated source of each sequence's program (the tuned plan
where the tuning cache has one) so that the matrix loads of the blocks that
run last, the last ``f`` of the grid, are marked evict-last
(``createpolicy.fractional.L2::evict_last`` and ``ld.global.L2::cache_hint``)
and the others stay evict-first; checks each variant's results equal the
generated program's bit for bit; and times the variants in one process,
interleaved (bench.l2_policies's ``measure_variants``), every variant on the
same inputs, as a solver's repeated calls would see them.

- fusec: the source as generated;
- no evict-first: ``STREAM_MATRIX`` 0 in every kernel;
- keep F: evict-last for the last F of the blocks, evict-first before.

    python -m bench.l2_keep [--n 4096] [--keep 0.3 --keep 0.5 ...] [--rounds 4] [--repeat 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .l2_policies import measure_variants, write_table

ROOT = Path(__file__).resolve().parent.parent

SEQUENCES = ("sgemv", "bicgk", "gesummv", "atax", "sgemvt", "gemver")
KEEPS = (0.3, 0.5, 0.7, 1.0)
CALL = "fusec_load16<STREAM_MATRIX>("
ANCHOR = "// One 16-byte store; STREAMING marks it evict-first"
KEEPING = r"""// bench.l2_keep: the blocks that run last mark their loads evict-last (L2 keeps them for the
// next launch, which walks the other way), the others as fusec_load16 does.
template <bool EVICT_FIRST>
__device__ __forceinline__ fusec_vec fusec_load16_keep(const real* p) {
  if (EVICT_FIRST && (long long)blockIdx.x * 1000 >= (long long)gridDim.x * (1000 - KEEP_PERMILLE)) {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    unsigned w[4];  // 16 bytes, whatever `real` is
    asm volatile("ld.global.L2::cache_hint.v4.b32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p), "l"(policy));
    fusec_vec v;
    memcpy(&v, w, 16);
    return v;
  }
  return fusec_load16<EVICT_FIRST>(p);
}

"""


def variant_names(keeps) -> tuple[str, ...]:
    return ("fusec", "no evict-first") + tuple(f"keep {k:g}" for k in keeps)


def variant(source: str, name: str) -> str:
    """The generated source, rewritten as the variant ``name``."""
    assert ANCHOR in source, "support code changed: update bench.l2_keep"
    if name == "no evict-first":
        return source.replace("#define STREAM_MATRIX 1", "#define STREAM_MATRIX 0")
    if name.startswith("keep "):
        if CALL not in source:
            return source  # no matrix loads to mark
        permille = round(float(name.split()[1]) * 1000)
        if not 0 < permille <= 1000:
            raise ValueError(f"{name!r}: the fraction kept must be in (0, 1]")
        head = f"#define KEEP_PERMILLE {permille}\n" + KEEPING
        return source.replace(ANCHOR, head + ANCHOR, 1).replace(CALL, "fusec_load16_keep<STREAM_MATRIX>(")
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="matrix side (default: %(default)s)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--keep", type=float, action="append",
                        help=f"fraction of the blocks whose loads are evict-last (repeatable; default {KEEPS})")
    parser.add_argument("--scripts", default=",".join(SEQUENCES), help="comma-separated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="h100-l2-keep")
    args = parser.parse_args()
    keeps = tuple(args.keep or KEEPS)
    for keep in keeps:
        if not 0 < keep <= 1:
            parser.error(f"--keep {keep}: a fraction in (0, 1]")
    scripts = args.scripts.split(",")
    for script in scripts:  # all checked before anything runs
        if not (ROOT / "scripts" / f"{script}.script").exists():
            parser.error(f"--scripts: no script {ROOT / 'scripts' / f'{script}.script'}")
    import dataclasses
    import cupy
    import fusec
    from fusec.runtime.program import Program
    from bench.fusion import device_inputs
    names = variant_names(keeps)
    rows = []
    for script in scripts:
        path = ROOT / "scripts" / f"{script}.script"
        probe = fusec.compile(path, dtype=args.dtype, tuned=False)
        sizes = {s: args.n for s in probe.dag.sizes}
        base = fusec.compile(path, dtype=args.dtype, sizes=sizes)
        inputs = device_inputs(cupy, base.dag, sizes, args.dtype, seed=5)
        nbytes = base.minimum_bytes(sizes)
        programs = {name: Program(dataclasses.replace(base.generated, source=variant(base.source, name)))
                    for name in names}
        row = {"sequence": script, "dtype": args.dtype, "size": args.n, "tuned": bool(base.tuned),
               "plan": base.generated.plan.summary(base.dag), "bytes": nbytes,
               "changed": {name: programs[name].source != base.source for name in names}}
        row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat)
        for name in names:
            us = row["us"][name]
            print(f"{script:8s} {name:16s} {us:8.1f} us {nbytes / us / 1e3:6.0f} GB/s  "
                  f"{'' if row['changed'][name] else '(as generated) '}"
                  f"{'same results' if row['same'][name] else 'RESULTS DIFFER'}", flush=True)
        rows.append(row)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    command = (f"python -m bench.l2_keep --n {args.n} --dtype {args.dtype}"
               + "".join(f" --keep {k:g}" for k in keeps)
               + f" --rounds {args.rounds} --repeat {args.repeat} --name {args.name}")
    write_table(args, rows, device, command, "Keeping a matrix in L2 from one call to the next",
                "GPU time, median µs of every round's runs, all variants in one process on the same inputs"
                " (as a solver's repeated calls); in brackets the variant's µs over fusec's. '=' marks a"
                " variant whose source is the generated one (nothing to rewrite). keep F: the matrix loads"
                " of the last F of the blocks evict-last, the others evict-first. Plans: the tuned ones"
                " where the tuning cache had them. Every variant's results equal the generated program's"
                " bit for bit unless marked.", names)


if __name__ == "__main__":
    main()
