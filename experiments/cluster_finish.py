"""Fewer partials for the tile family's column sums: clusters of blocks that add theirs in
distributed shared memory before one store (timing and results).

experiments/finish_cost.py showed BiCGK's tile kernels losing 23-32 % at n = 2048-8192 on
the H200 to the finish of their reductions across blocks, 13-23 % of it in the last blocks'
sums: every block of a column of tiles stores its column sums (64-128 partials a column),
and the block that arrives last adds them all. Here K consecutive blocks of a column of tiles
run as one thread-block cluster (``__cluster_dims__(K, 1, 1)``, K = 2, 4, 8): each keeps its
column sums in its own shared memory, the cluster meets (``cluster.sync()``), and its first
block adds the K blocks' sums through distributed shared memory and stores one partial. A
column then has K times fewer partials, tickets and fences, and its last block sums K times
fewer; in return every block waits at two cluster barriers, and the cluster's blocks are
scheduled together.

Variants, on the tuned plan of each sequence with a tile kernel's column sums:

- fusec: as generated;
- cluster K: the rewrite above (valid: results compared with fusec's within a relative
  1e-5 (fp32) or 1e-12 (fp64), the cluster adding in another order); '–' where the grid's
  rows of blocks do not split into clusters of K;
- no sums, no finish: experiments.finish_cost's bounds (not valid kernels, timing only).

    python -m experiments.cluster_finish [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

``--case DTYPE:N`` (repeatable): matrices N x N; default fp32 2048, 4096 and 8192, fp64
2048, 4096 and 8192.
"""

from __future__ import annotations

import re

from experiments.finish_cost import FINISH
from experiments.finish_cost import variant as finish_variant
from experiments.l2_policies import write_table
from experiments.source_runs import command, device_name, parse, time_variants

SIZES = (2, 4, 8)
VARIANTS = ("fusec", *(f"cluster {k}" for k in SIZES), "no sums", "no finish")
SEQUENCES = ("bicgk", "sgemvt")
CASES = tuple((dtype, n) for dtype in ("float32", "float64") for n in (2048, 4096, 8192))

KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\(BLOCK\) (\w+)\(')
GRID = re.compile(r"const int block_row = fusec_item / grid_cols;\n( *)const int block_col = fusec_item % grid_cols;")
TILE_START = ("  c.full = c.vec_ok && c.row0 + TILE_ROWS <= rows && c.col0 + TILE_COLS <= cols;"
              "  // no guards needed in this tile\n")
# The tile family's store of a block's column sums (fusec/data/blas/tile.cuh), at this block's slot.
COLUMN_STORE = re.compile(r"cols_partial_store\((r_v\d+_\w+), (ws_v(\d+_\w+)) \+ \(long long\)\(c\.col0 / TILE_COLS\)"
                          r" \* fusec_region\(\(long long\)grid_rows \* TILE_COLS\) \+ \(long long\)block_row"
                          r" \* TILE_COLS - c\.col0, (smem \+ \d+), c\);")
DEFINE = re.compile(r"^#define (ITERS|TILE_ROWS|BLOCK) (\d+)$", re.M)

# cols_partial_store (tile.cuh) with the block's column sums kept in shared memory instead.
STASH = """
// The block's column sums into shared memory `stash` (cols_partial_store's order), for
// the cluster's first block to add (experiments/cluster_finish.py).
__device__ __forceinline__ void cols_partial_stash(const real* e, real* stash, real* scratch, const fusec_tile& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) scratch[c.ty * TILE_COLS + v * BLOCK_X + c.tx] = e[v];
  BARRIER();
  for (int p = c.ty * BLOCK_X + c.tx; p < TILE_COLS; p += BLOCK) {
    real s = real(0);
    #pragma unroll
    for (int r = 0; r < BLOCK_Y; ++r) s += scratch[r * TILE_COLS + p];
    stash[p] = s;
  }
}
"""

# After the loop: the cluster's first block adds its K blocks' column sums in rank order
# (block_row order) and stores them at the cluster's slot; the second barrier keeps every
# block's shared memory alive until they are read.
CLUSTER_SUM = """  {{
    cooperative_groups::cluster_group fusec_cl = cooperative_groups::this_cluster();
    fusec_cl.sync();
    if (fusec_cluster_rank == 0) {{
      const int tiles = min({tiles}, (cols - fusec_col00 + TILE_COLS - 1) / TILE_COLS);
      for (int i = threadIdx.x; i < tiles * TILE_COLS; i += BLOCK) {{
        real s = real(0);
        #pragma unroll
        for (int r = 0; r < {k}; ++r) s += fusec_cl.map_shared_rank(fusec_stash, r)[i];
        const int col0 = fusec_col00 + i / TILE_COLS * TILE_COLS, p = i % TILE_COLS;
        const int col = col0 + (p % BLOCK_X) * VEC + p / BLOCK_X;
        if (col < cols) {ws}[(long long)(col0 / TILE_COLS) * fusec_region((long long)grid_rows * TILE_COLS)
                              + (long long)(block_row / {k}) * TILE_COLS - col0 + col] = s;
      }}
    }}
    fusec_cl.sync();
  }}
"""


def clustered(source: str, k: int, rows: int, registers: dict[str, int] | None = None) -> str | None:
    """The generated source with its tile kernel's column sums added by clusters of ``k``
    blocks, or None where it has no such kernel or its rows of blocks do not split into
    clusters of ``k`` at ``rows`` rows. ``registers`` (kernel name: ptxas's count for the
    generated source) keeps the rewritten kernel at the generated one's blocks per SM,
    so that the cluster's code does not also change the occupancy."""
    stores = COLUMN_STORE.findall(source)
    if len(stores) != 1:
        return None
    defines = {}
    start = source.index(COLUMN_STORE.search(source).group(0))
    for name, value in DEFINE.findall(source[:start]):
        defines[name] = int(value)  # the last definitions before the store: its kernel's
    along_columns = "each block walks ITERS tiles along the columns" in source[:start]
    row_tiles = -(-rows // defines["TILE_ROWS"])
    grid_rows = row_tiles if along_columns else -(-row_tiles // defines["ITERS"])
    if grid_rows % k:
        return None
    _, ws, counter, scratch = stores[0]
    kernel_start = source.rfind('extern "C" __global__', 0, start)
    if kernel_start < 0 or not KERNEL.match(source, kernel_start):
        return None  # a part of a horizontal kernel: not rewritten
    kernel_end = source.index("#undef ITERS", start)
    head, kernel, tail = source[:kernel_start], source[kernel_start:kernel_end], source[kernel_end:]
    name = KERNEL.match(kernel).group(1)
    bounds = "BLOCK"
    if registers and name in registers:  # registers go to warps in sets of 8 each, 64 K a SM
        bounds += f", {65536 // (-(-registers[name] // 8) * 8 * defines['BLOCK'])}"
    kernel = KERNEL.sub(rf'extern "C" __global__ void __launch_bounds__({bounds}) __cluster_dims__({k}, 1, 1) \1(',
                        kernel, count=1)
    kernel, n = GRID.subn(
        rf"const int fusec_cluster_rank = (int)cooperative_groups::this_cluster().block_rank();\n"
        rf"\1const int block_row = fusec_item / {k} / grid_cols * {k} + fusec_cluster_rank;\n"
        rf"\1const int block_col = fusec_item / {k} % grid_cols;", kernel)
    assert n == 1, "the tile family's grid changed: update experiments.cluster_finish"
    tiles = "ITERS" if along_columns else "1"
    kernel = kernel.replace(TILE_START, TILE_START + "  const int fusec_col00 = c.col0;\n"
                            f"  __shared__ real fusec_stash[{tiles} * TILE_COLS];\n", 1)
    kernel = COLUMN_STORE.sub(r"cols_partial_stash(\1, fusec_stash + (c.col0 - fusec_col00) / TILE_COLS * TILE_COLS,"
                              r" \4, c);", kernel)
    assert FINISH in kernel, "the finish changed: update experiments.cluster_finish"
    kernel = kernel.replace(FINISH, CLUSTER_SUM.format(tiles=tiles, k=k, ws=ws) + "\n" + FINISH, 1)
    # one ticket a cluster (its first block's), so a column's last block sums grid_rows / k partials
    kernel, tickets = re.subn(rf"atomicAdd\(cnt_v{counter}([^,]*), 1u\)",
                              rf"(fusec_cluster_rank == 0 ? atomicAdd(cnt_v{counter}\1, 1u) : 0u)", kernel)
    kernel, lasts = re.subn(rf"fusec_came_last\(cnt_v{counter}([^,]*), ([^,]*), grid_rows\)",
                            rf"(fusec_cluster_rank == 0 && fusec_came_last(cnt_v{counter}\1, \2, grid_rows / {k}))",
                            kernel)
    kernel, sums = re.subn(r"(fusec_sum_partials<BLOCK>\(tile_partials - \(long long\)tile \* TILE_COLS), grid_rows,",
                           rf"\1, grid_rows / {k},", kernel)
    assert tickets == lasts == sums == 1, "the finish changed: update experiments.cluster_finish"
    routines_end = head.rindex("}  // namespace")  # the kernel's routines, where tile.cuh's are
    head = "#include <cooperative_groups.h>\n" + head[:routines_end] + STASH.lstrip("\n") + head[routines_end:]
    return head + kernel + tail


def sources(program, sizes) -> dict[str, str | None] | str:
    """The program's variants, or why it is left out."""
    from fusec.nvcc import compile_cubin
    registers = {name: r.registers for name, r in compile_cubin(program.source).resources.items()}
    variants = {f"cluster {k}": clustered(program.source, k, sizes.get("m", 0), registers) for k in SIZES}
    if all(source is None for source in variants.values()):
        return "no tile kernel's column sums to cluster"
    return variants | {name: finish_variant(program.source, name) for name in ("no sums", "no finish")}


def main() -> None:
    args = parse(__doc__, "fp32 and fp64 at 2048, 4096 and 8192", "h200-cluster-finish")
    rows = time_variants(args, CASES, SEQUENCES, sources, checked=lambda name: name.startswith("cluster"))
    write_table(args, rows, device_name(), command("cluster_finish", args), "Column sums added by clusters of blocks",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets the variant's"
                " µs over fusec's. 'cluster K' adds in another order than fusec: its results are compared within"
                " a relative 1e-5 (fp32) or 1e-12 (fp64) (the json's 'errors'), not bit for bit; 'no sums' and"
                " 'no finish' are not valid kernels (timing only). Plans: the tuned ones where the tuning cache"
                " had them.", VARIANTS, unchecked=VARIANTS[1:])


if __name__ == "__main__":
    main()
