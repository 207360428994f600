"""The tile family's finish as a second kernel: every output tile's sums at once, across the GPU
(timing and results).

experiments/finish_tail.py found the finish a tail: the block that ends the grid came last for
the tiles it covers and sums their partials alone, while the rest of the GPU idles (BiCGK fp32
n = 4096: 3.9 µs after the last block's end of work, of 19.8); without the finish, fence and
tickets included, BiCGK took 0.75x the time (experiments/results/h200-finish-cost-loads.md).
Here the tile kernel stores its partials and ends (no fence, no tickets: the launch boundary
orders them), and a second kernel of the same parameters, launched after it, sums them. 'fusec'
is the last block's finish (experiments.source_runs.last_block): the variant 'lines, released at
the end' is what fusec generates since, on GPUs with dependent launches (Kernel.sums_apart).

- second kernel: one block per output tile, each making the call the tile's last block made
  (``fusec_sum_partials``, same arguments): the same additions in the same order, so the
  results are compared with fusec's bit for bit;
- plain launch: the same two kernels, not as programmatic dependent launches
  (``Program(dependent_launch=False)``): what the overlap of the second launch with the first
  kernel's end gives;
- lines: one block per 128-byte line of a tile's outputs (32 fp32, 16 fp64), every thread of it
  summing a few partials: more blocks, fewer partials each; it adds in another order (the
  block's split of the partials), so it is compared with fusec's within a relative 1e-5 (fp32)
  or 1e-12 (fp64);
- no finish: experiments.finish_cost's bound (not a valid kernel: timing only).

The second kernel waits for the first (``fusec_follow_previous``, its first statement), so its
blocks may be resident early without reading a partial too soon. Programs whose kernels have
no tile finish (band, striped, held plans; a scalar's sums) are left out.

    python -m experiments.second_kernel_finish [--case float32:4096 ...] [--rounds 5] [--repeat 20] [--out DIR]
        [--name NAME]
"""

from __future__ import annotations

import dataclasses
import re

from experiments.finish_cost import FINISH
from experiments.finish_cost import variant as finish_variant
from experiments.l2_policies import write_table
from experiments.source_runs import command, device_name, parse, time_variants

VARIANTS = ("fusec", "second kernel", "plain launch", "lines", "lines, released at the end", "lines, plain launch",
            "no finish")
SEQUENCES = ("bicgk", "sgemv", "sgemvt", "gesummv")
CASES = (("float32", 2048), ("float32", 4096), ("float32", 8192), ("float32", 16384), ("float64", 4096),
         ("float64", 8192))
KERNEL = re.compile(r'extern "C" __global__ void __launch_bounds__\(BLOCK\) (\w+)\(\n.*?\n\{\n(.*?\n)\}\n#undef ITERS',
                    re.S)
# One reduction's finish in a tile kernel: its tiles' loop, the test whether this block came
# last, the tile's region of partials, their sum (with the lambda that stores an output) and discard.
TILE_FINISH = re.compile(
    r"  for \(int tile = first_(v\d+_\w+); tile < end_\1; \+\+tile\) \{\n"
    r"    if \(!fusec_last\[[^\]]+\]\) continue;[^\n]*\n"
    r"    const long long region = fusec_region\(\(long long\)(\w+) \* (\w+)\);\n"
    r"    real\* const tile_partials = ws_\1 \+ tile \* region;[^\n]*\n"
    r"    fusec_sum_partials<BLOCK>\(tile_partials - \(long long\)tile \* \3, \2, \3, \(long long\)tile \* \3, \3, "
    r"(rows|cols), smem, threadIdx\.x,\n"
    r" *(\[&\]\(long long i, real acc\) \{[^\n]*\})\);\n"
    r"    fusec_discard<[^\n]*\n"
    r"  \}\n")
INDICES_END = "  const int block_row"  # the preamble a second kernel copies ends before this line

TILE_SUMS = """  {{  // {value}: each output tile's sums, one block a tile, as the tile's last block made them
    const int tiles = ({length} + {width} - 1) / {width};
    if (fusec_block < tiles) {{
      const int tile = fusec_block;
      const long long region = fusec_region((long long){arrivals} * {width});
      real* const tile_partials = ws_{value} + tile * region;
      fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * {width}, {arrivals}, {width},
                                (long long)tile * {width}, {width}, {length}, smem, threadIdx.x, {emit});
      fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);
      return;
    }}
    fusec_block -= tiles;
  }}
"""
LINE_SUMS = """  {{  // {value}: each output tile's sums, one block per 128-byte line of its outputs
    constexpr int line = FUSEC_LINE / sizeof(real), chunk = {width} < line ? {width} : line, chunks = {width} / chunk;
    static_assert({width} % chunk == 0, "a tile is whole lines or less than one");
    const int tiles = ({length} + {width} - 1) / {width};
    if (fusec_block < tiles * chunks) {{
      const int tile = fusec_block / chunks, first = fusec_block % chunks * chunk;
      const long long region = fusec_region((long long){arrivals} * {width});
      real* const tile_partials = ws_{value} + tile * region;
      fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * {width}, {arrivals}, {width},
                                (long long)tile * {width} + first, chunk, {length}, smem, threadIdx.x, {emit});
      if (chunks == 1) {{
        fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);
      }} else {{  // this block's line of each block's partials, and no other block's
        for (int p = threadIdx.x; p < {arrivals}; p += BLOCK)
          asm volatile("discard.global.L2 [%0], 128;"
                       :: "l"(tile_partials + (long long)p * {width} + first) : "memory");
      }}
      return;
    }}
    fusec_block -= tiles * chunks;
  }}
"""


@dataclasses.dataclass(frozen=True)
class Finish:
    """One reduction's finish, read from the tile kernel's source."""

    value: str  # the C name of its value, v3_q
    arrivals: str  # grid_cols or grid_rows: the blocks that store partials of a tile
    width: str  # TILE_ROWS or TILE_COLS: outputs of a tile
    length: str  # rows or cols: outputs in all
    emit: str  # the lambda that stores an output


FOLLOW = "  fusec_follow_previous();\n"
WAIT = '  asm volatile("griddepcontrol.wait;" ::: "memory");  // the launch after waits for our end\n'
RELEASE = '  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");  // our partials are stored\n'


def split(source: str, lines: bool, release_at_end: bool = False) -> tuple[str, dict[str, tuple[Finish, ...]]]:
    """The source with every tile kernel's finish moved into a second kernel ``NAME_sums`` after
    it (one block a tile, or with ``lines`` a line of outputs), and each split kernel's finishes.
    With ``release_at_end`` the tile kernel lets the second be launched once its blocks have
    stored their partials, instead of once they have started (fusec_follow_previous): the
    second's blocks then take no room while the first runs."""
    finishes: dict[str, tuple[Finish, ...]] = {}

    def rewrite(match: re.Match) -> str:
        name, body = match.group(1), match.group(2)
        tail_at = body.find(FINISH)
        tail = body[tail_at:] if tail_at >= 0 else ""
        found = tuple(Finish(*m.groups()) for m in TILE_FINISH.finditer(tail))
        if not found or tail.count("for (int tile = first_") != len(found) or "fusec_arrive" in tail \
                or "if (fusec_last[" in tail or INDICES_END not in body:
            return match.group(0)  # no tile finish, or one of another form: kept as it is
        finishes[name] = found
        signature = match.group(0)[:match.start(2) - match.start(0)]
        preamble = body[:body.index(INDICES_END)]
        template = LINE_SUMS if lines else TILE_SUMS
        sums = "".join(template.format(**dataclasses.asdict(f)) for f in found)
        first = signature + body[:tail_at] + "}\n"
        if release_at_end:
            assert first.count(FOLLOW) == 1, "the generated kernel's start changed: update this study"
            first = first.replace(FOLLOW, WAIT)[:-2] + RELEASE + "}\n"
        second = (signature.replace(f" {name}(", f" {name}_sums(", 1)
                  + preamble + "  int fusec_block = blockIdx.x;\n" + sums + "}\n")
        return first + second + "#undef ITERS"

    return KERNEL.sub(rewrite, source), finishes


class SumsKernel:
    """A tile kernel's second kernel as the runtime launches it: the tile kernel's parameters
    (its direction passed as its rows, unread), a block per tile (or line) of every finish, and
    no buffers of its own: its workspace and counter arguments are the tile kernel's."""

    reductions = ()
    all_resident = False
    zeroed_workspace = False
    turns = False

    def __init__(self, tile, finishes: tuple[Finish, ...], lines: bool):
        self._tile, self._finishes, self._lines = tile, finishes, lines
        self.name = f"{tile.name}_sums"
        self.args = tuple(dataclasses.replace(a, role="size", size=tile.dims[0]) if a.role == "direction" else a
                          for a in tile.args)

    def schedule_counters(self, sizes) -> int:
        return 0

    def grid(self, sizes) -> int:
        macros, blocks = self._tile.macros(), 0
        line = 128 // (4 if self._tile.dtype == "float32" else 8)
        for f in self._finishes:
            width, length = macros[f.width], sizes[self._tile.dims[0 if f.length == "rows" else 1]]
            blocks += -(-length // width) * (width // min(width, line) if self._lines else 1)
        return blocks

    def __getattr__(self, name):
        return getattr(self._tile, name)


def two_kernels(program, lines: bool, dependent: bool, release_at_end: bool = False):
    """``program`` with its tile kernels' finishes in second kernels, or None where it has none."""
    from fusec.runtime.prepared import Turns
    from fusec.runtime.program import Program
    source, finishes = split(program.source, lines, release_at_end)
    if not finishes:
        return None
    kernels = []
    for kernel in program.generated.kernels:
        kernels.append(kernel)
        if kernel.name in finishes:
            kernels.append(SumsKernel(kernel, finishes[kernel.name], lines))
    generated = dataclasses.replace(program.generated, source=source, kernels=tuple(kernels))
    split_program = Program(generated, dependent_launch=dependent)
    # the runtime reads a kernel's turn group at its index, which a second kernel shares with its
    # tile kernel: the groups (and their turns) are the program's own
    split_program.turn_groups = program.turn_groups
    split_program._turns = tuple(Turns() for _ in set(program.turn_groups) - {None})
    return split_program


def sources(program, sizes):
    """The program's variants, or why it is left out."""
    from fusec.ir.plan import StripedPlan
    if any(isinstance(kernel, StripedPlan) for kernel in program.generated.plan.kernels):
        return "striped: its consumers wait on the finish"
    second = two_kernels(program, lines=False, dependent=True)
    if second is None:
        return "no tile kernel's finish"
    return {"second kernel": second, "plain launch": two_kernels(program, lines=False, dependent=False),
            "lines": two_kernels(program, lines=True, dependent=True),
            "lines, released at the end": two_kernels(program, lines=True, dependent=True, release_at_end=True),
            "lines, plain launch": two_kernels(program, lines=True, dependent=False),
            "no finish": finish_variant(program.source, "no finish")}


def main() -> None:
    args = parse(__doc__, "fp32 2048-16384, fp64 4096 and 8192", "h200-second-kernel-finish")
    rows = time_variants(args, CASES, SEQUENCES, sources, checked=lambda name: name.startswith("lines"))
    write_table(args, rows, device_name(), command("second_kernel_finish", args),
                "The tile family's finish as a second kernel",
                "GPU time, median µs of every round's runs, all variants in one process; in brackets the variant's"
                " µs over fusec's. 'second kernel' and 'plain launch' make the tile's last block's sums, in its"
                " order: compared with fusec's bit for bit; 'lines' adds in another order, compared within a"
                " relative 1e-5 (fp32) or 1e-12 (fp64) (the json's 'errors'); 'no finish' is not a valid kernel"
                " (timing only). Plans: the tuned ones where the tuning cache had them.", VARIANTS,
                unchecked=VARIANTS[3:])


if __name__ == "__main__":
    main()
