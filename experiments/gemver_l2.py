"""Can GEMVER's second pass find B in L2 where the matrix is a little past L2's size?

At fp32 n = 4096 (A and B 64 MB each, L2 50 MB) the tuned GEMVER plan is its two
kernels apart: kernel 0 reads A and writes B (and sums x), kernel 1 reads B again
for w = alpha B x. If L2 kept the part of B written last, kernel 1 walking B
backwards (the program alternating directions, README) would read that part from
L2 and GEMVER would move towards its two-pass floor. This rewrites the generated
source into variants (nothing in the library or code generator changes):

- fusec: as generated;
- A evict-first: kernel 0's matrix loads ``ld.global.cs`` (``STREAM_MATRIX`` 1), so
  L2 would rather drop A than B;
- B stores evict-last: B's stores carry an L2 evict-last policy
  (``createpolicy.fractional.L2::evict_last`` and ``st.global.L2::cache_hint``);
- both;

each forwards and alternating, with L2's persisting set-aside
(``cudaLimitPersistingL2CacheSize``, which evict-last lines may occupy) at 0, half
and all of the most the device allows. Every variant's results must equal the
generated program's bit for bit; times as experiments.l2_policies (GPU time,
interleaved rounds). The set-aside is given back (0) at the end.

    python -m experiments.gemver_l2 [--n 4096] [--rounds 4] [--repeat 20] [--out DIR] [--name NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .l2_policies import measure_variants, write_table

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("fusec", "A evict-first", "B stores evict-last", "both")
PLAIN_STORE = "    *reinterpret_cast<fusec_vec*>(x + i) = v;\n"
EVICT_LAST_STORE = (
    "    const float4 f = *reinterpret_cast<const float4*>(&v);  // experiments.gemver_l2: evict-last\n"
    "    asm volatile(\"{\\n\\t.reg .b64 p;\\n\\tcreatepolicy.fractional.L2::evict_last.b64 p, 1.0;\\n\\t\"\n"
    "                 \"st.global.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, p;\\n\\t}\"\n"
    "                 :: \"l\"(x + i), \"f\"(f.x), \"f\"(f.y), \"f\"(f.z), \"f\"(f.w) : \"memory\");\n")
PERSISTING_L2_LIMIT = 0x06  # cudaLimitPersistingL2CacheSize
MAX_PERSISTING_L2 = 108  # cudaDevAttrMaxPersistingL2CacheSize


def variant(source: str, name: str) -> str:
    """The generated two-kernel source, rewritten as the variant ``name``."""
    assert source.count(PLAIN_STORE) == 1, "store routine changed: update experiments.gemver_l2"
    if name in ("A evict-first", "both"):
        first = source.index("#define STREAM_MATRIX 0")  # kernel 0's, which stores B
        source = source[:first] + "#define STREAM_MATRIX 1" + source[first + len("#define STREAM_MATRIX 0"):]
    if name in ("B stores evict-last", "both"):
        source = source.replace(PLAIN_STORE, EVICT_LAST_STORE)
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="matrix side (fp32)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-gemver-l2")
    args = parser.parse_args()
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    sizes = {"m": args.n, "n": args.n}
    base = fusec.compile(ROOT / "scripts" / "gemver.script", dtype="float32", sizes=sizes)
    if len(base.generated.kernels) != 2:
        raise SystemExit(f"the plan at n = {args.n} is not two kernels apart: {base.generated.plan.summary(base.dag)}")
    inputs = device_inputs(cupy, base.dag, sizes, "float32", seed=3)
    most = cupy.cuda.runtime.deviceGetAttribute(MAX_PERSISTING_L2, 0)
    rows = []
    try:
        for set_aside in (0, most // 2, most):
            cupy.cuda.runtime.deviceSetLimit(PERSISTING_L2_LIMIT, set_aside)
            granted = cupy.cuda.runtime.deviceGetLimit(PERSISTING_L2_LIMIT)
            for turning in (False, True):
                programs = {name: Program(dataclasses.replace(base.generated, source=variant(base.source, name)),
                                          turning=turning) for name in VARIANTS}
                walk = "alternating" if turning else "forwards"
                row = {"sequence": f"gemver, {walk}, persisting L2 set-aside {granted / 2**20:.1f} MiB",
                       "dtype": "float32", "size": args.n, "tuned": bool(base.tuned),
                       "plan": base.generated.plan.summary(base.dag),
                       "changed": {name: name != "fusec" for name in VARIANTS}}
                row["us"], row["same"] = measure_variants(programs, inputs, args.rounds, args.repeat)
                print(row["sequence"], {k: round(v, 1) for k, v in row["us"].items()},
                      "" if all(row["same"].values()) else "RESULTS DIFFER", flush=True)
                rows.append(row)
    finally:
        cupy.cuda.runtime.deviceSetLimit(PERSISTING_L2_LIMIT, 0)
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    command = f"python -m experiments.gemver_l2 --n {args.n} --rounds {args.rounds} --repeat {args.repeat}"
    write_table(args, rows, device, command, "GEMVER's second pass and L2",
                "GPU time, median µs of every round's runs, all variants of a row in one process; in brackets"
                " the variant's µs over fusec's in the same row. Set-aside: L2's persisting set-aside granted"
                f" (the device allows at most {most / 2**20:.1f} MiB of its L2). Every variant's results equal"
                " the generated program's bit for bit unless marked.", VARIANTS)


if __name__ == "__main__":
    main()
