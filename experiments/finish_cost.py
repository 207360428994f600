"""What a reduction's finish across blocks costs: fusec's kernels with it taken out (timing only).

A reduction across blocks ends every block the same way (fusec/codegen/kernel.py,
support.cuh): the block stores its partials, meets at a barrier, thread 0 fences
(``__threadfence``) and takes a ticket on the output tile's counter, and the
last block to arrive sums the tile's partials in a fixed order. This takes
fusec's program for each sequence with a reduction (the tuned plan where the
tuning cache has one), rewrites its generated source, and times the variants
interleaved in one process (experiments.l2_policies.measure_variants):

- fusec: as generated;
- fence per warp: fusec's earlier order, every thread fencing before the
  barrier (a valid kernel: its results are compared);
- 8 loads in flight, 32 loads in flight: the last block's sums with 8 or 32 partials a
  thread in flight instead of 64 bytes' worth (``fusec_sum_partials``'s LOADS: 16 fp32, 8
  fp64; until 2026-11-30 the sums were a loop unrolled 8 deep, and unrolled 32 deep nvcc
  issued its loads one at a time; valid: compared);
- sums out of line: ``fusec_sum_partials`` a function of its own (``__noinline__``)
  instead of inlined into the kernel, whose code it doubles (valid: compared);
- no discard: the partials kept in L2 after their sums (no ``discard.global.L2``), to be
  written back to DRAM (valid: compared);
- columns first: the tile family's grid walked down each column of tiles before the next
  (block_row = item % grid_rows) instead of along each row: a column of tiles then
  finishes its column sums while the grid still runs, where along the rows every column's
  last block is in the grid's last row, and all their sums wait for the end; the row sums'
  finishes (fewer partials each) move to the end instead (valid: compared);
- accumulated: the tile family's blocks add their partials with atomics into one
  accumulator per output tile (kept zero between launches), and the last block to
  arrive reads that one partial and zeroes it, instead of summing every block's:
  a prototype of a cheaper, not bit-reproducible finish (its results are compared
  with fusec's within a relative 1e-5 (fp32) or 1e-12 (fp64) on its second run,
  the first having zeroed what it reads; programs without a tile kernel's
  reduction have no such variant);
- no fence: the ``__threadfence`` dropped, ticket and finish kept;
- no sums: fence and tickets kept, the last block to arrive sums nothing: what
  the tail's sums cost, apart from each block's wait for its tickets;
- sums never run: the sums' code kept, but every block skips it (a test of a kernel
  parameter, ``backwards >= 0``, that the compiler cannot fold; the tile family's kernels
  only): whether the sums cost by running, or by their code's presence in the kernel
  (its registers, its schedule);
- no finish: everything after the partials' stores dropped (fence, tickets,
  sums): what no protocol can beat, the bytes and the partials' stores staying.

The last four are not valid kernels (without the fence the last block may sum
stale partials; without the finish the reductions' outputs are never written),
so their results are not compared; they bound what a cheaper finish (flags
carried with the partials, say) could win. Striped plans are left out: their
consumers wait on the finish.

    python -m experiments.finish_cost [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR] [--name NAME]

``--case DTYPE:N`` (repeatable): matrices N x N, vectors N*N/4 (fp32) or N*N/2
(fp64) elements; default fp32 4096, fp32 16384 and fp64 8192.
"""

from __future__ import annotations

import re

from experiments.l2_policies import write_table
from experiments.source_runs import command, device_name, parse, time_variants

VARIANTS = ("fusec", "fence per warp", "8 loads in flight", "32 loads in flight", "sums out of line", "no discard",
            "columns first", "accumulated", "no fence", "no sums", "sums never run", "no finish")
SEQUENCES = ("sgemv", "bicgk", "gesummv", "atax", "sgemvt", "gemver", "axpydot")
CASES = (("float32", 4096), ("float32", 16384), ("float64", 8192))
FINISH = "  // every partial of this block must be visible to the block that finishes it: the\n"
# One fence by the thread that takes the tickets, after the block's barrier; where a kernel
# may run as one block (the vector family) it sits in the branch for several blocks.
FENCE = re.compile(r"^ *if \((threadIdx\.x|tid) == 0\) __threadfence\(\);\n", re.M)
BARRIER = "  BARRIER();\n"  # the block's barrier right after the FINISH comment
# The last block's sums (a call may run over two lines, ending in its lambda's `});`) and discard.
SUMS = re.compile(r"^ *fusec_(sum_partials|discard)<[^;]*(;[^;\n]*\}\))?;.*\n", re.M)
SKIP = re.compile(r"^( *)if \(!fusec_last\[([^\]]*)\]\) continue;", re.M)  # a finish's test: did this block come last?
LOADS = "int LOADS = 64 / sizeof(real), class Emit>"  # fusec_sum_partials's default: 16 fp32, 8 fp64
INLINE_SUMS = "__device__ __forceinline__ void fusec_sum_partials("
DISCARD = re.compile(r"^ *fusec_discard<.*\n", re.M)
END = "#undef ITERS"  # the first line after a kernel's (or a horizontal part's) closing brace


# The tile family's stores of a block's partials (fusec/data/blas/tile.cuh), their calls'
# offsets of this block's slot, and each finish's sum over the blocks and its discard.
PARTIAL_STORES = ("if (c.tx % LANES == 0 && row < c.rows) y[row] = s;", "if (col < c.cols) y[col] = s;")
SLOT = re.compile(r"(_partial_store\(.*) \+ \(long long\)block_(row|col) \* TILE_(ROWS|COLS)(.*\n)")
TILE_SUM = re.compile(r"(fusec_sum_partials<BLOCK>\(tile_partials[^,]*), grid_(?:cols|rows), (TILE_ROWS|TILE_COLS)"
                      r"(, .*?\}\);\n *)fusec_discard<BLOCK>\(tile_partials, region, threadIdx\.x\);[^\n]*\n", re.S)


ROW_MAJOR = re.compile(r"const int block_row = (\S+) / grid_cols;\n( *)const int block_col = \1 % grid_cols;")


def accumulated(source: str) -> str | None:
    """The source with the tile family's partials added into one accumulator per output tile,
    or None where it has no tile kernel's reduction to rewrite."""
    if not SLOT.search(source):
        return None
    for store in PARTIAL_STORES:
        assert store in source, "the tile family's partial stores changed: update experiments.finish_cost"
        target = store.split(") ")[-1]  # y[row] = s;
        index = target[2:target.index("]")]
        source = source.replace(store, store.replace(target, f"atomicAdd(y + {index}, s);"))
    source = SLOT.sub(r"\1\4", source)
    source, sums = TILE_SUM.subn(
        r"\1, 1, \2\3for (int i = threadIdx.x; i < \2; i += BLOCK) tile_partials[i] = real(0);  // kept zero\n", source)
    assert sums == source.count("fusec_sum_partials<BLOCK>(tile_partials"), \
        "the finish changed: update experiments.finish_cost"
    return source


def variant(source: str, name: str) -> str | None:
    """The generated source, rewritten as the variant ``name`` (None: the program has none)."""
    assert source.count(FINISH) == len(FENCE.findall(source)), "support code changed: update experiments.finish_cost"
    if name == "fence per warp":  # every thread fences before the block's barrier instead
        for start in reversed([m.start() for m in re.finditer(re.escape(FINISH), source)]):
            barrier = source.index(BARRIER, start)
            source = source[:barrier] + "  __threadfence();\n" + source[barrier:]
        return FENCE.sub("", source)
    if name.endswith(" loads in flight"):
        assert source.count(LOADS) == 1, "support code changed: update experiments.finish_cost"
        return source.replace(LOADS, LOADS.replace("64 / sizeof(real)", name.split()[0]))
    if name == "sums out of line":
        assert source.count(INLINE_SUMS) == 1, "support code changed: update experiments.finish_cost"
        return source.replace(INLINE_SUMS, "__device__ __noinline__ void fusec_sum_partials(")
    if name == "no discard":
        assert DISCARD.search(source), "support code changed: update experiments.finish_cost"
        return DISCARD.sub("", source)
    if name == "columns first":
        rewritten = ROW_MAJOR.sub(r"const int block_row = \1 % grid_rows;\n"
                                  r"\2const int block_col = \1 / grid_rows;", source)
        return rewritten if rewritten != source else None
    if name == "accumulated":
        return accumulated(source)
    if name == "no fence":
        return FENCE.sub("", source)
    if name == "no sums":
        assert SUMS.search(source), "support code changed: update experiments.finish_cost"
        return SUMS.sub("", source)
    if name == "sums never run":  # a kernel parameter's test: ptxas folds any constant, even one from asm
        if "const int backwards)" not in source:
            return None
        rewritten = SKIP.sub(r"\1if (!fusec_last[\2] || backwards >= 0) continue;", source)
        return rewritten if rewritten != source else None
    if name == "no finish":
        pieces, position = [], 0
        while (start := source.find(FINISH, position)) >= 0:
            pieces.append(source[position:start] + "}\n")  # closes the function the finish ended
            position = source.index(END, start)
        return "".join(pieces) + source[position:]
    return source


def why_left_out(program) -> str | None:
    """Why a program's variants are not timed, or None: a striped kernel's consumers wait on
    the finish (without it they would wait forever); a program without a reduction across
    blocks has nothing to take out."""
    from fusec.ir.plan import StripedPlan
    if any(isinstance(kernel, StripedPlan) for kernel in program.generated.plan.kernels):
        return "striped: its consumers wait on the finish"
    if FINISH not in program.source:
        return "no reduction across blocks"
    return None


def sources(program, sizes) -> dict[str, str | None] | str:
    """The program's variants, or why it is left out."""
    if reason := why_left_out(program):
        return reason
    return {name: variant(program.source, name) for name in VARIANTS[1:]}


def main() -> None:
    args = parse(__doc__, "float32:4096, float32:16384, float64:8192", "h100-finish-cost")
    # the accumulated variant's first run zeroed what its second reads
    rows = time_variants(args, CASES, SEQUENCES, sources, checked=lambda name: name == "accumulated", runs=2)
    write_table(args, rows, device_name(), command("finish_cost", args),
                "What a reduction's finish across blocks costs",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets the variant's"
                " µs over fusec's (below 1: the part taken out cost that much). 'fence per warp' (fusec's earlier"
                " order), '8 loads in flight', '32 loads in flight', 'sums out of line', 'no discard' and"
                " 'columns first' are checked bit for bit against fusec;"
                " 'accumulated' adds in another order, and is checked on its second run within a relative"
                " 1e-5 (fp32) or 1e-12 (fp64),"
                " '–' where the plan has no tile kernel's reduction; 'no fence', 'no sums', 'sums never run' and"
                " 'no finish' are not valid kernels: their results are not compared (timing only). Plans: the"
                " tuned ones where the tuning cache had them; striped plans left out.", VARIANTS,
                unchecked=VARIANTS[7:])


if __name__ == "__main__":
    main()
