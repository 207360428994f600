"""The tile family's column sums spread over the grid's last blocks instead of each column of
tiles' last one (timing and results).

experiments/finish_tail.py found the last blocks' sums a tail: the block that ends the grid came
last for every column of tiles it covers and sums their partials alone (BiCGK fp32 n = 4096:
3.9 µs after the last block's end of work, of 19.8). Here the column sums leave the tickets:
every block counts itself in once its partials are fenced (one counter for the grid, a
``__device__`` pair of the module, reset by the last finisher), the last F blocks to count in
wait until every block has, then share every column of tiles' sums, each a chunk of a tile's
columns narrow enough that a thread sums at most 16 partials (one round of fp32 loads). The waiting blocks are at most F
of the grid's last ones, fewer than fit on the GPU at once, so every block they wait for runs.
The row sums keep their tickets.

Variants: fusec; spread over F = 32, 64 or 128 blocks (valid: results compared with fusec's
within a relative 1e-5 (fp32) or 1e-12 (fp64): the chunks add in another order); 'no sums' of
experiments.finish_cost (timing only). Plans: the tuned ones; programs without a tile kernel's
column sums are left out.

    python -m experiments.spread_finish [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]
"""

from __future__ import annotations

import re

from experiments.finish_cost import variant as finish_variant
from experiments.l2_policies import write_table
from experiments.source_runs import command, device_name, parse, time_variants

FINISHERS = (32, 64, 128)
VARIANTS = ("fusec", *(f"spread over {f}" for f in FINISHERS), "no sums")
CASES = (("float32", 2048), ("float32", 4096), ("float32", 8192), ("float64", 4096), ("float64", 8192))
# A tile kernel's column sums: their ticket, its answer, and the loop of the last block's sums.
TICKET = re.compile(r"(got\[[^\]]+\]) = (?:[^;]*\? )?atomicAdd\((cnt_v\d+_\w+) \+ first_v\d+_\w+[^;]*;")
LAST = re.compile(r"(fusec_last\[[^\]]+\]) = [^;]*fusec_came_last\((cnt_v\d+_\w+)[^;]*, grid_rows\);")
COLUMN_SUMS = re.compile(
    r"  for \(int tile = first_(v\d+_\w+); tile < end_\1; \+\+tile\) \{\n"
    r"    if \(!fusec_last\[[^\]]+\]\) continue;[^\n]*\n"
    r"    const long long region = fusec_region\(\(long long\)grid_rows \* TILE_COLS\);\n"
    r"    real\* const tile_partials = ws_\1 \+ tile \* region;[^\n]*\n"
    r"    fusec_sum_partials<BLOCK>\(tile_partials - \(long long\)tile \* TILE_COLS, grid_rows, TILE_COLS, "
    r"\(long long\)tile \* TILE_COLS, TILE_COLS, cols, smem, threadIdx\.x,\n"
    r"( *\[&\]\(long long i, real acc\) \{[^\n]*\}\);)\n"
    r"    fusec_discard<[^\n]*\n"
    r"  \}\n")
DONE = "__device__ unsigned fusec_done[2];  // blocks counted in, finishers through; reset by the last finisher\n"

SPREAD = """  // the last {f} blocks to count in sum every column of tiles, a chunk of columns each
  __shared__ int fusec_finisher;
  if (threadIdx.x == 0) {{
    const unsigned total = gridDim.x, finishers = min(total, {f}u);
    const unsigned d = atomicAdd(fusec_done, 1u);  // after the fence above
    fusec_finisher = d >= total - finishers ? (int)(d - (total - finishers)) : -1;
    if (fusec_finisher >= 0) {{
      while (*(volatile unsigned*)fusec_done < total) __nanosleep(32);
      __threadfence();
      if (atomicAdd(fusec_done + 1, 1u) == finishers - 1) {{ fusec_done[0] = 0; fusec_done[1] = 0; }}
    }}
  }}
  BARRIER();
  if (fusec_finisher >= 0) {{
    int width = TILE_COLS;  // a thread sums at most 16 partials (fp32's LOADS)
    while (width > 1 && (long long)grid_rows * width > 16LL * BLOCK) width /= 2;
    const int chunks = col_tiles * (TILE_COLS / width);
    for (int chunk = fusec_finisher; chunk < chunks; chunk += min((int)gridDim.x, {f})) {{
      const int tile = chunk / (TILE_COLS / width), first = chunk % (TILE_COLS / width) * width;
      real* const tile_partials = ws_{value} + tile * fusec_region((long long)grid_rows * TILE_COLS);
      fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * TILE_COLS, grid_rows, TILE_COLS,
                                (long long)tile * TILE_COLS + first, width, cols, smem, threadIdx.x,
{emit}
    }}
  }}
"""


def spread(source: str, finishers: int) -> str | None:
    """The generated source with its tile kernel's column sums spread over the grid's last
    ``finishers`` blocks, or None where it has no such sums (or more than one kernel)."""
    loops = COLUMN_SUMS.findall(source)
    if len(loops) != 1 or source.count('extern "C" __global__') != 1:
        return None
    (value, emit), = loops
    # the column sums' ticket goes: every block counts itself in once instead
    source = TICKET.sub(lambda m: f"{m.group(1)} = 0u;" if m.group(2) == f"cnt_{value}" else m.group(0), source)
    source = LAST.sub(lambda m: f"{m.group(1)} = false;" if m.group(2) == f"cnt_{value}" else m.group(0), source)
    assert f"atomicAdd(cnt_{value}" not in source and f"fusec_came_last(cnt_{value}" not in source, \
        "the tile family's tickets changed: update experiments.spread_finish"
    source = COLUMN_SUMS.sub(lambda m: SPREAD.format(f=finishers, value=value, emit=emit), source)
    return DONE + source


def sources(program, sizes) -> dict[str, str | None] | str:
    """The program's variants, or why it is left out."""
    variants = {f"spread over {f}": spread(program.source, f) for f in FINISHERS}
    if variants["spread over 32"] is None:
        return "no single tile kernel's column sums"
    return variants | {"no sums": finish_variant(program.source, "no sums")}


def main() -> None:
    args = parse(__doc__, "fp32 2048, 4096 and 8192, fp64 4096 and 8192", "h200-spread-finish")
    # compared on the second run, which finds the counters the first one reset
    rows = time_variants(args, CASES, ("bicgk", "sgemvt"), sources, checked=lambda name: name.startswith("spread"),
                         runs=2)
    write_table(args, rows, device_name(), command("spread_finish", args),
                "Column sums spread over the grid's last blocks",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets the variant's"
                " µs over fusec's. 'spread over F' adds in another order than fusec: its results are compared"
                " within a relative 1e-5 (fp32) or 1e-12 (fp64) on its second run (the json's 'errors'), not bit"
                " for bit; 'no sums' is not a valid kernel (timing only). Plans: the tuned ones where the tuning"
                " cache had them.", VARIANTS, unchecked=VARIANTS[1:])


if __name__ == "__main__":
    main()
