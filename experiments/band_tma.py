"""Do bulk copies (TMA) of whole rows into shared memory bring the band kernels of BiCGK
and ATAX to the copy floor on the H200?

The band kernels run one 512-thread block per SM, their registers held by a row of A,
the vector it is multiplied by and the column sums; Nsight Compute saw DRAM 71-81 %
busy (experiments/results/h200-band-deferred.md). Staging rows through shared memory by
per-thread 16-byte ``cp.async`` cost 11-21 % there. Hopper's bulk copy needs no thread
per 16 bytes: one thread asks the copy engine for a whole row, an mbarrier counts its
bytes in, and the block reads the row from shared memory while the next S - 1 rows are
on their way, however long the block's warps spend meeting at its barriers. This
rewrites the generated source of fusec's shipped plan (the predictor's first choice
where the shipped plan has no band kernel; nothing in the library changes), checks
each variant's results against the original's, and times them in one process with
``Program.time(host=False)``:

- plain: the source as generated;
- tma S: the band kernel's rows of A copied by ``cp.async.bulk`` into a ring of S rows
  of shared memory; the row's slot is refilled with row it + S right after the loop's
  first barrier, once every thread holds row it in registers;
- deferred, deferred+tma S: the same with BiCGK's row sums of q deferred past the loop
  (experiments.band_deferred), a barrier per row kept for the slot's refill.

Whole rows of whole 16-byte pieces only (the sizes this study runs).

    python -m experiments.band_tma [--repeat 20] [--out DIR] [--name NAME]

Answer (two H200s, 2026-11-30, experiments/results/h200-band-tma.md): 0.4-3 % faster, no more
than deferring the row sums; the kernels stay at 0.96-0.97 of the copy figure with rows always
in flight. Not built.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from experiments.band_deferred import STAGE_READ, deferred
from experiments.source_variants import run_case

ROOT = Path(__file__).resolve().parent.parent
CASES = (("bicgk", "float32", 16384), ("atax", "float32", 16384), ("bicgk", "float64", 8192),
         ("atax", "float64", 8192))
STAGES = (2, 3)
CHUNK = 16384  # bytes a bulk copy asks for: a row is several, on one mbarrier

TMA_HELPERS = """
// experiments.band_tma: rows of A brought into shared memory by bulk copies (the copy
// engine, one thread asking), counted in by an mbarrier per slot
__device__ __forceinline__ unsigned tma_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tma_init(unsigned long long* bars, int slots) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(tma_smem(bars + s)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
}
// thread 0: row `row` of A into `slot`, its bytes counted by `bar`
__device__ __forceinline__ void tma_issue(const real* __restrict__ A, long long row, int cols, real* slot,
                                          unsigned long long* bar) {
  const unsigned bytes = (unsigned)cols * sizeof(real);
  const char* src = reinterpret_cast<const char*>(A + row * cols);
  const unsigned b = tma_smem(bar), d = tma_smem(slot);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the block's reads of the slot first
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
  for (unsigned o = 0; o < bytes; o += CHUNK_BYTES) {
    const unsigned n = bytes - o < CHUNK_BYTES ? bytes - o : CHUNK_BYTES;
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(d + o), "l"(src + o), "r"(n), "r"(b) : "memory");
  }
}
__device__ __forceinline__ void tma_wait(unsigned long long* bar, unsigned parity) {
  asm volatile("{\\n .reg .pred p;\\n TMA_WAIT:\\n"
               " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n"
               " @!p bra TMA_WAIT;\\n}" :: "r"(tma_smem(bar)), "r"(parity) : "memory");
}
""" + STAGE_READ


def tma(source: str | None, stages: int) -> str | None:
    """The band kernel's rows of A through a ring of ``stages`` rows of shared memory filled
    by bulk copies; None where the kernel is not a one-row band kernel."""
    load = re.search(r"\n(    band_load\((g_v\d+_\w+), (r_v\d+_\w+), c\);\n)", source or "")
    if load is None or "#define BAND_ROWS 1\n" not in source:
        return None
    A, a = load.group(2), load.group(3)
    read = (f"    tma_wait(fusec_bars + it % {stages}, (it / {stages}) & 1);  // experiments.band_tma\n"
            f"    band_stage_read(fusec_stages + (it % {stages}) * BAND_COLS, {a}, c);\n")
    source = source[:load.start(1)] + read + source[load.end(1):]
    loop = source.index("  for (int it = 0; it < ITERS", source.index("#define BAND_ROWS"))
    barrier = source.index("    BARRIER();\n", loop) + len("    BARRIER();\n")
    refill = (f"    if (threadIdx.x == 0 && it + {stages} < ITERS && fusec_row0 + it + {stages} < rows)"
              "  // every thread holds row it: its slot takes row it + S\n"
              f"      tma_issue({A}, fusec_row0 + it + {stages}, cols, fusec_stages + (it % {stages}) * BAND_COLS,"
              f" fusec_bars + it % {stages});\n")
    source = source[:barrier] + refill + source[barrier:]
    band = source.index("#define BAND_ROWS")
    end = source.index("}  // namespace", band)
    source = source[:end] + TMA_HELPERS.lstrip("\n").replace("CHUNK_BYTES", str(CHUNK)) + "\n" + source[end:]
    first = (f"  extern __shared__ __align__(128) real fusec_stages[];  // {stages} rows of A\n"
             f"  __shared__ __align__(8) unsigned long long fusec_bars[{stages}];\n"
             "  const long long fusec_row0 = (long long)fusec_item * ITERS;\n"
             f"  tma_init(fusec_bars, {stages});\n"
             f"  if (threadIdx.x == 0)  // the first rows leave before the loop\n"
             f"    for (int s = 0; s < {stages} && s < ITERS && fusec_row0 + s < rows; ++s)\n"
             f"      tma_issue({A}, fusec_row0 + s, cols, fusec_stages + s * BAND_COLS, fusec_bars + s);\n")
    loop = source.index("  for (int it = 0; it < ITERS", band)
    return source[:loop] + first + source[loop:]


def with_barrier(source: str | None) -> str | None:
    """A deferred kernel lost its barrier per row; the slot's refill needs one back."""
    if source is None:
        return None
    return source.replace("    band_gemv_defer(", "    BARRIER();\n    band_gemv_defer(", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-band-tma")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")
    import numpy as np

    import fusec
    rows = []
    for script, dtype, n in CASES:
        path = ROOT / "scripts" / f"{script}.script"
        sizes = {"m": n, "n": n}
        itemsize = np.dtype(dtype).itemsize
        for origin, tuned in (("shipped", True), ("first choice", False)):
            base = fusec.compile(path, dtype=dtype, sizes=sizes, tuned=tuned)
            if tuned and tma(base.source, 2) is None:
                continue  # no band kernel shipped here: the first choice's
            if not tuned and rows and rows[-1]["origin"] == "shipped" and rows[-1]["sequence"] == script \
                    and rows[-1]["dtype"] == dtype:
                continue  # the shipped plan was a band kernel: that is the one studied
            variants, shared = {"plain": base.source}, {}
            d = deferred(base.source)
            if d is not None:
                variants["deferred"] = d
            for stages in STAGES:
                for label, src in ((f"tma {stages}", base.source),
                                   (f"deferred+tma {stages}", with_barrier(d) if stages == 3 else None)):
                    if (v := tma(src, stages)) is not None:
                        variants[label] = v
                        shared[label] = stages * n * itemsize
            rows.append(run_case(script, base, sizes, dtype, origin, variants, shared, args.repeat))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
