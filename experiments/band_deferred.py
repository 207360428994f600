"""Does a band kernel lose bandwidth to its per-row barrier, and does register
occupancy hold back the tile kernels, on the H200?

BiCGK's band kernel (q = A p and s = A^T r in one pass, one block of 512 threads
per SM) meets its warps at a barrier on every row to finish q's row sum, so an
SM's loads drain before the next row's start. Where the row sum is only stored
(BiCGK's q, not ATAX's t, which the same row's A^T t needs), the warps' sums can
wait in shared memory, one slot per row, and be added up after the loop: no
barrier inside it. This takes fusec's shipped H200 plans and the predictor's first
choices of BiCGK and ATAX, rewrites the generated source (nothing in the library
changes), checks each variant's results equal the original's bit for bit, and
times them in one process with ``Program.time(host=False)``:

- plain: the source as generated;
- deferred: the band kernel's row sums deferred past the loop (band kernels that
  only store them);
- prefetch D: the band kernel asks L2 for the rows D instances ahead before loading
  its own (``prefetch.global.L2``, one 128-byte line per thread and step), so DRAM
  keeps streaming while the block's warps meet (any band kernel);
- staged S: the band kernel's rows of A copied by ``cp.async`` into a ring of S rows in
  shared memory, S - 1 rows in flight while one computes, no registers held by them;
- bounds K: ``__launch_bounds__(BLOCK, K)``, K blocks per SM (tile kernels whose
  registers allow it; ptxas's spills are printed).

    python -m experiments.band_deferred [--repeat 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from experiments.source_variants import run_case, shipped_and_first

ROOT = Path(__file__).resolve().parent.parent
CASES = (("bicgk", "float32", 16384), ("bicgk", "float64", 8192), ("atax", "float32", 16384),
         ("atax", "float64", 8192), ("bicgk", "float32", 4096))

DEFER_HELPER = """
// experiments.band_deferred: this row's warp sums into its own slots (no barrier)
__device__ __forceinline__ void band_gemv_defer(const real* a, const real* x, real* slots, const fusec_band& c) {
  real d = real(0);
  #pragma unroll
  for (int s = 0; s < PIECES * VEC; ++s) d += a[s] * x[s];
  d = warp_sum(d);
  if (c.t % 32 == 0) slots[c.t / 32] = d;
}"""

LOOP = re.compile(
    r"    BARRIER\(\);\n(    // [^\n]*\n)"
    r"    band_gemv_compute\((r_v\d+_\w+), (r_v\d+_\w+), (r_v\d+_\w+), smem \+ 0, c\);\n"
    r"(    // [^\n]*\n)    band_rows_store\(\4, (g_v\d+_\w+), c\);\n")


def deferred(source: str) -> str | None:
    """The source with the band kernel's row sums deferred, or None where it cannot be."""
    m = LOOP.search(source)
    if m is None or "BAND_ROWS 1\n" not in source:
        return None
    a, x, q, out = m.group(2), m.group(3), m.group(4), m.group(6)
    if re.search(rf"\b{q}\b", source[m.end():].split("band_cols_partial_store")[0]):
        return None  # a later call of the row reads the row sum: the barrier stays
    body = (f"{m.group(1)}    band_gemv_defer({a}, {x}, fusec_rowsums + it * WARPS, c);\n")
    source = source[:m.start()] + body + source[m.end():]
    band = source.index("#define BAND_ROWS")
    end = source.index("}  // namespace", band)  # the band kernel's routines end here
    source = source[:end] + DEFER_HELPER.lstrip("\n") + "\n" + source[end:]
    source = source.replace("  __shared__ bool fusec_last[1];",
                            "  __shared__ real fusec_rowsums[ITERS * WARPS];\n  __shared__ bool fusec_last[1];", 1)
    finish = (
        "  BARRIER();\n"
        "  for (int i = threadIdx.x; i < ITERS; i += BLOCK) {  // the block's rows, summed in the original order\n"
        "    const long long row = (long long)fusec_item * ITERS + i;\n"
        "    if (row >= rows) break;\n"
        "    real s = real(0);\n"
        "    for (int w = 0; w < WARPS; ++w) s += fusec_rowsums[i * WARPS + w];\n"
        f"    {out}[row] = real(0) + s;\n"
        "  }\n")
    anchor = "  // after the loop: the block's column sums, into their accumulators\n"
    return source.replace(anchor, finish + anchor, 1) if anchor in source else None


def prefetched(source: str | None, ahead: int) -> str | None:
    """The band kernel asking L2 for the rows ``ahead`` instances on before it loads its own:
    each thread one 128-byte line per step (``prefetch.global.L2``), no registers held."""
    load = re.search(r"\n(    band_load\((g_v\d+_\w+), (r_v\d+_\w+), c\);\n)", source or "")
    if load is None:
        return None
    A = load.group(2)
    ask = (f"    if (c.row0 + {ahead} * BAND_ROWS < rows) {{  // experiments.band_deferred: L2, {ahead} ahead\n"
           f"      const char* next = reinterpret_cast<const char*>(\n"
           f"          {A} + (long long)(c.row0 + {ahead} * BAND_ROWS) * cols);\n"
           "      const long long bytes = (long long)cols * BAND_ROWS * sizeof(real);\n"
           "      for (long long o = (long long)threadIdx.x * 128; o < bytes; o += (long long)BLOCK * 128)\n"
           '        asm volatile("prefetch.global.L2 [%0];" :: "l"(next + o));\n'
           "    }\n")
    return source[:load.start(1)] + ask + source[load.start(1):]


# a row of A in shared memory into the thread's registers (mapping `band`)
STAGE_READ = """__device__ __forceinline__ void band_stage_read(const real* stage, real* a, const fusec_band& c) {
  #pragma unroll
  for (int j = 0; j < PIECES; ++j) {
    const fusec_vec v = *reinterpret_cast<const fusec_vec*>(stage + band_col(j, c));
    #pragma unroll
    for (int k = 0; k < VEC; ++k) a[j * VEC + k] = v.v[k];
  }
}"""

STAGE_HELPERS = """
// experiments.band_deferred: rows staged in shared memory by cp.async, each thread copying
// and later reading only its own pieces (its own wait_group suffices: no block barrier)
__device__ __forceinline__ void band_stage_issue(const real* __restrict__ A, real* stage, long long row,
                                                 const fusec_band& c) {
  const real* src = A + row * c.cols;
  #pragma unroll
  for (int j = 0; j < PIECES; ++j) {
    const long long col = band_col(j, c);
    const unsigned dst = (unsigned)__cvta_generic_to_shared(stage + col);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src + col));
  }
}
""" + STAGE_READ


def staged(source: str | None, stages: int) -> str | None:
    """The band kernel's rows of A through a ring of ``stages`` rows in shared memory
    (cp.async), ``stages - 1`` rows in flight beyond the one computed; whole rows only
    (the sizes this study runs: BAND_COLS columns, no guards)."""
    load = re.search(r"\n(    band_load\((g_v\d+_\w+), (r_v\d+_\w+), c\);\n)", source or "")
    if load is None or "#define BAND_ROWS 1\n" not in source:
        return None
    A, a = load.group(2), load.group(3)
    step = (f"    {{  // experiments.band_deferred: row it + {stages - 1} leaves, row it is read from its stage\n"
            f"      const int ahead = it + {stages - 1};\n"
            "      const long long row = (long long)fusec_item * ITERS + ahead;\n"
            "      if (ahead < ITERS && row < rows)\n"
            f"        band_stage_issue({A}, fusec_stages + (ahead % {stages}) * BAND_COLS, row, c);\n"
            '      asm volatile("cp.async.commit_group;");\n'
            f'      asm volatile("cp.async.wait_group {stages - 1};");\n'
            f"      band_stage_read(fusec_stages + (it % {stages}) * BAND_COLS, {a}, c);\n"
            "    }\n")
    source = source[:load.start(1)] + step + source[load.end(1):]
    band = source.index("#define BAND_ROWS")
    end = source.index("}  // namespace", band)
    source = source[:end] + STAGE_HELPERS.lstrip("\n") + "\n" + source[end:]
    first = (f"  extern __shared__ __align__(16) real fusec_stages[];  // {stages} rows of A\n"
             f"  for (int s = 0; s < {stages - 1}; ++s) {{  // the first rows leave before the loop\n"
             "    const long long row = (long long)fusec_item * ITERS + s;\n"
             f"    if (s < ITERS && row < rows) band_stage_issue({A}, fusec_stages + s * BAND_COLS, row, c);\n"
             '    asm volatile("cp.async.commit_group;");\n'
             "  }\n")
    loop = source.index("  for (int it = 0; it < ITERS", band)
    return source[:loop] + first + source[loop:]


def stage_bytes(source: str, stages: int, itemsize: int) -> int:
    cols = int(re.search(r"#define BAND_COLS (\d+)", source).group(1))
    return stages * cols * itemsize


def bounded(source: str, k: int) -> str:
    return source.replace("__launch_bounds__(BLOCK)", f"__launch_bounds__(BLOCK, {k})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-band-deferred")
    args = parser.parse_args()
    import numpy as np

    rows = []
    for script, dtype, sizes, origin, base in shipped_and_first(CASES):
        variants = {"plain": base.source}
        if (d := deferred(base.source)) is not None:
            variants["deferred"] = d
            variants["deferred+prefetch 1"] = prefetched(d, 1)
        shared = {}
        for stages in (2, 3):
            for label, src in ((f"staged {stages}", base.source), (f"deferred+staged {stages}", d)):
                if (v := staged(src, stages)) is not None:
                    variants[label] = v
                    shared[label] = stage_bytes(v, stages, np.dtype(dtype).itemsize)
        for ahead in (1, 2):
            if (f := prefetched(base.source, ahead)) is not None:
                variants[f"prefetch {ahead}"] = f
        if "#define BAND_ROWS" not in base.source:
            for k in (2, 3):
                variants[f"bounds {k}"] = bounded(base.source, k)
        rows.append(run_case(script, base, sizes, dtype, origin, variants, shared, args.repeat))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
