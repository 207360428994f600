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
interleaved (experiments.l2_policies's ``measure_variants``), every variant on the
same inputs, as a solver's repeated calls would see them. Before each
variant's runs L2 is emptied of every line, evict-last ones included
(``l2_flusher``), and three untimed runs give the variant its own steady
state: without that a variant is timed with what the one before it kept
(the first version of this bench did so, and its figures mixed variants).

- fusec: the source as generated;
- no evict-first: ``STREAM_MATRIX`` 0 in every kernel;
- keep F: evict-last for the last F of the blocks, evict-first before;
- tail F: plain loads for the last F of the blocks, evict-first before.

``--l2 polluted`` fills L2 with other dirty lines first (a buffer twice its size written), as
generating the inputs on the GPU leaves it: evict-first loads never displace those lines.

    python -m experiments.l2_keep [--n 4096] [--keep 0.3 ...] [--tail 0.3 ...] [--l2 clean|polluted ...]
                           [--rounds 4] [--repeat 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .l2_policies import measure_variants, write_table

ROOT = Path(__file__).resolve().parent.parent

STATES = ("clean", "polluted")
SEQUENCES = ("sgemv", "bicgk", "gesummv", "atax", "sgemvt", "gemver")
KEEPS = (0.3, 0.5, 0.7, 1.0)
CALL = "fusec_load16<STREAM_MATRIX>("
ANCHOR = "// One 16-byte store; STREAMING marks it evict-first"
KEEPING = r"""// experiments.l2_keep: the blocks that run last load plainly (KEEP_LAST 0) or evict-last (KEEP_LAST 1),
// so that L2 keeps their lines for the next launch, which walks the other way; the others load as
// fusec_load16 does.
template <bool EVICT_FIRST>
__device__ __forceinline__ fusec_vec fusec_load16_keep(const real* p) {
  if (EVICT_FIRST && (long long)blockIdx.x * 1000 >= (long long)gridDim.x * (1000 - KEEP_PERMILLE)) {
    if (!KEEP_LAST) return fusec_load16<false>(p);
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

# Empties L2 of every line, evict-last ones included, before each variant's runs: a variant that keeps
# lines would otherwise leave them to the next one (loads marked evict-first or plain never displace
# them), and fusec's runtime's empty_l2 writes and discards lines, which need not displace them either.
# Pass 1 claims every line of a buffer twice L2's size at evict-last priority (LRU among equals), pass 2
# discards them.
FLUSH = r"""
extern "C" __global__ void claim_l2(const int4* buffer, long long lines, int* sink) {
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  unsigned acc = 0;
  for (long long l = blockIdx.x * (long long)blockDim.x + threadIdx.x; l < lines;
       l += (long long)gridDim.x * blockDim.x) {
    unsigned w;
    asm volatile("ld.global.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(w) : "l"(buffer + l * 8), "l"(policy));
    acc ^= w;
  }
  if (acc == 0x9e3779b9u) sink[0] = 1;  // never true for a zeroed buffer; keeps the loads
}
extern "C" __global__ void discard_l2(int4* buffer, long long lines) {
  for (long long l = blockIdx.x * (long long)blockDim.x + threadIdx.x; l < lines;
       l += (long long)gridDim.x * blockDim.x)
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(buffer + l * 8) : "memory");
}
"""


def l2_flusher(cupy):
    """A function that leaves L2 empty (FLUSH), queued on CuPy's current stream."""
    module = cupy.RawModule(code=FLUSH)
    claim, discard = module.get_function("claim_l2"), module.get_function("discard_l2")
    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    buffer, sink = cupy.zeros(2 * l2 // 16, dtype=cupy.int32).reshape(-1, 4), cupy.zeros(1, cupy.int32)
    lines = cupy.int64(buffer.nbytes // 128)
    grid = (min(4096, (int(lines) + 255) // 256),)

    def flush():
        claim(grid, (256,), (buffer, lines, sink))
        discard(grid, (256,), (buffer, lines))
        cupy.cuda.runtime.deviceSynchronize()
    return flush


def variant_names(keeps, tails=()) -> tuple[str, ...]:
    return (("fusec", "no evict-first") + tuple(f"keep {k:g}" for k in keeps)
            + tuple(f"tail {k:g}" for k in tails))


def variant(source: str, name: str) -> str:
    """The generated source, rewritten as the variant ``name``."""
    assert ANCHOR in source, "support code changed: update experiments.l2_keep"
    if name == "no evict-first":
        return source.replace("#define STREAM_MATRIX 1", "#define STREAM_MATRIX 0")
    if name.startswith(("keep ", "tail ")):
        if CALL not in source:
            return source  # no matrix loads to mark
        permille = round(float(name.split()[1]) * 1000)
        if not 0 < permille <= 1000:
            raise ValueError(f"{name!r}: the fraction kept must be in (0, 1]")
        head = f"#define KEEP_PERMILLE {permille}\n#define KEEP_LAST {int(name.startswith('keep'))}\n" + KEEPING
        return source.replace(ANCHOR, head + ANCHOR, 1).replace(CALL, "fusec_load16_keep<STREAM_MATRIX>(")
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="matrix side (default: %(default)s)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--keep", type=float, action="append",
                        help=f"fraction of the blocks whose loads are evict-last (repeatable; default {KEEPS})")
    parser.add_argument("--tail", type=float, action="append", default=[],
                        help="fraction of the blocks whose loads are plain (repeatable; default none)")
    parser.add_argument("--l2", choices=STATES, action="append",
                        help="what L2 holds before each variant's runs (repeatable; default: clean):"
                             " clean, nothing; polluted, the dirty lines of a buffer twice its size just"
                             " written (as after generating the inputs on the GPU)")
    parser.add_argument("--scripts", default=",".join(SEQUENCES), help="comma-separated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-l2-keep")
    args = parser.parse_args()
    keeps, tails, states = tuple(args.keep or KEEPS), tuple(args.tail), tuple(args.l2 or ("clean",))
    for flag, fractions in (("--keep", keeps), ("--tail", tails)):
        for fraction in fractions:
            if not 0 < fraction <= 1:
                parser.error(f"{flag} {fraction}: a fraction in (0, 1]")
    scripts = args.scripts.split(",")
    for script in scripts:  # all checked before anything runs
        if not (ROOT / "scripts" / f"{script}.script").exists():
            parser.error(f"--scripts: no script {ROOT / 'scripts' / f'{script}.script'}")
    import dataclasses

    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    names = variant_names(keeps, tails)
    flush = l2_flusher(cupy)
    dirt = cupy.empty(2 * cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"] // 4, cupy.float32)

    def pollute():
        flush()
        dirt.fill(1.0)
        cupy.cuda.runtime.deviceSynchronize()
    rows = []
    for script, state in ((s, l2) for s in scripts for l2 in states):
        path = ROOT / "scripts" / f"{script}.script"
        probe = fusec.compile(path, dtype=args.dtype, tuned=False)
        sizes = {s: args.n for s in probe.dag.sizes}
        base = fusec.compile(path, dtype=args.dtype, sizes=sizes)
        inputs = device_inputs(cupy, base.dag, sizes, args.dtype, seed=5)
        nbytes = base.minimum_bytes(sizes)
        programs = {name: Program(dataclasses.replace(base.generated, source=variant(base.source, name)))
                    for name in names}
        row = {"sequence": script if states == ("clean",) else f"{script} ({state} L2)",
               "dtype": args.dtype, "size": args.n, "tuned": bool(base.tuned),
               "plan": base.generated.plan.summary(base.dag), "bytes": nbytes,
               "changed": {name: programs[name].source != base.source for name in names}}
        row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat,
                                                  before=flush if state == "clean" else pollute, warmup=3)
        for name in names:
            us = row["us"][name]
            print(f"{script:8s} {state:8s} {name:16s} {us:8.1f} us {nbytes / us / 1e3:6.0f} GB/s  "
                  f"{'' if row['changed'][name] else '(as generated) '}"
                  f"{'same results' if row['same'][name] else 'RESULTS DIFFER'}", flush=True)
        rows.append(row)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    command = (f"python -m experiments.l2_keep --n {args.n} --dtype {args.dtype}"
               + "".join(f" --keep {k:g}" for k in keeps) + "".join(f" --tail {k:g}" for k in tails)
               + "".join(f" --l2 {s}" for s in states)
               + f" --rounds {args.rounds} --repeat {args.repeat} --name {args.name}")
    write_table(args, rows, device, command, "Keeping a matrix in L2 from one call to the next",
                "GPU time, median µs of every round's runs, all variants in one process on the same inputs"
                " (as a solver's repeated calls); in brackets the variant's µs over fusec's. '=' marks a"
                " variant whose source is the generated one (nothing to rewrite). keep F: the matrix loads"
                " of the last F of the blocks evict-last, the others evict-first; tail F: the last F plain."
                " L2 before each variant's runs: emptied (clean), or emptied and then filled with the dirty"
                " lines of a buffer twice its size (polluted), then three untimed runs. Plans: the tuned ones"
                " where the tuning cache had them. Every variant's results equal the generated program's"
                " bit for bit unless marked.", names)


if __name__ == "__main__":
    main()
