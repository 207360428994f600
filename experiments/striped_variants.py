"""What limits a striped kernel: its generated source rewritten, one thing at a time.

A striped kernel (fusec/codegen/striped.py, docs/design/striped-fusion.md) runs a
producer and the consumer of its reductions in one launch, a consumer block
waiting for its stripe's producer blocks and then re-reading their matrix
tiles from L2. This takes fusec's program for GEMVER, SGEMVT and ATAX (the
tuned plan; a sequence whose plan has no striped kernel is skipped), rewrites
its source into the variants below (nothing in the library or the code
generator changes), and times them in one process, interleaved
(:func:`experiments.l2_policies.measure_variants`: rotated rounds, median GPU time).

- fusec: the source as generated;
- lag 1 ... lag 4: the producer that many stripes ahead ('=' where that is the plan's);
- no wait: consumers do not wait. Its results are not checked (a consumer may
  read a previous run's values, which equal this run's): it shows what the
  waits cost at most, not a kernel one could use;
- STREAM_MATRIX flipped: either part's evict-first matrix loads turned on
  where they are off (GEMVER's producer streams A: off is plain) or off where on;
- evict-last: the producer's matrix loads, or its matrix stores (GEMVER's B),
  with an L2 evict-last policy (``createpolicy`` + ``.L2::cache_hint``).

    python -m experiments.striped_variants [--rounds 3] [--repeat 10] [--out DIR] [--name NAME]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from experiments.l2_policies import measure_variants, write_table

ROOT = Path(__file__).resolve().parent.parent
CASES = (("gemver", "float32", 16384), ("sgemvt", "float32", 16384), ("atax", "float32", 16384),
         ("gemver", "float64", 8192), ("sgemvt", "float64", 8192), ("atax", "float64", 8192))
LAGS = (1, 2, 3, 4)
UNCHECKED = ("no wait",)
TICKET = re.compile(r"fusec_stripe_ticket\(fusec_schedule, stripes, n0, n1, (\d+)\)")
WAIT = "fusec_stripe_wait(stripe_done, n0);"
STORE = "*reinterpret_cast<fusec_vec*>(p + (long long)k * BLOCK_Y * c.cols) = v;"
ANCHOR = "// Where an instance of an unnested function is"
# 16-byte accesses with an L2 evict-last policy, beside fusec_load16 in the support code
EVICT_LAST = r'''// experiments.striped_variants: 16-byte accesses with an L2 evict-last policy
__device__ __forceinline__ unsigned long long bench_policy_last() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ fusec_vec bench_load16_last(const real* p) {
  fusec_vec v;
  if constexpr (sizeof(real) == 4) {
    float* f = reinterpret_cast<float*>(&v);
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                 : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3]) : "l"(p), "l"(bench_policy_last()));
  } else {
    double* d = reinterpret_cast<double*>(&v);
    asm volatile("ld.global.L2::cache_hint.v2.f64 {%0,%1}, [%2], %3;"
                 : "=d"(d[0]), "=d"(d[1]) : "l"(p), "l"(bench_policy_last()));
  }
  return v;
}
__device__ __forceinline__ void bench_store16_last(real* p, const fusec_vec& v) {
  if constexpr (sizeof(real) == 4) {
    const float* f = reinterpret_cast<const float*>(&v);
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, %5;"
                 :: "l"(p), "f"(f[0]), "f"(f[1]), "f"(f[2]), "f"(f[3]), "l"(bench_policy_last()) : "memory");
  } else {
    const double* d = reinterpret_cast<const double*>(&v);
    asm volatile("st.global.L2::cache_hint.v2.f64 [%0], {%1,%2}, %3;"
                 :: "l"(p), "d"(d[0]), "d"(d[1]), "l"(bench_policy_last()) : "memory");
  }
}
'''


def parts(source: str) -> tuple[int, int, int]:
    """Where the striped kernel's producer namespace, its consumer namespace and
    the kernel itself start."""
    producer = re.search(r"const int stripes = (k\d+p0_\w+)::stripes", source).group(1)
    consumer = re.search(r"n1 = (k\d+p1_\w+)::across", source).group(1)
    first, second = source.index(f"namespace {producer} {{"), source.index(f"namespace {consumer} {{")
    return first, second, source.index('extern "C" __global__', second)


def _flip_stream(section: str) -> str:
    now = 1 if "#define STREAM_MATRIX 1" in section else 0
    return section.replace(f"#define STREAM_MATRIX {now}", f"#define STREAM_MATRIX {1 - now}")


def variants(source: str) -> dict[str, str]:
    """The striped program's source as each variant, by name ('fusec' first)."""
    match = TICKET.search(source)
    assert match and WAIT in source and ANCHOR in source, "support code changed: update experiments.striped_variants"
    out = {"fusec": source}
    for lag in LAGS:
        out[f"lag {lag}"] = source.replace(match.group(0), match.group(0)[:-len(match.group(1)) - 1] + f"{lag})")
    out["no wait"] = source.replace(WAIT, "// experiments.striped_variants: no wait")
    p0, p1, kernel = parts(source)
    producer, consumer = source[p0:p1], source[p1:kernel]
    out["producer STREAM_MATRIX flipped"] = source[:p0] + _flip_stream(producer) + source[p1:]
    out["consumer STREAM_MATRIX flipped"] = source[:p1] + _flip_stream(consumer) + source[kernel:]
    helped = source.replace(ANCHOR, EVICT_LAST + ANCHOR, 1)
    p0, p1, _ = parts(helped)
    producer = helped[p0:p1]
    out["producer loads evict-last"] = (helped[:p0] + producer.replace("fusec_load16<STREAM_MATRIX>(",
                                                                       "bench_load16_last(") + helped[p1:])
    if re.search(r"^\s*tile_store\(r_", producer, re.M):  # it stores a matrix (GEMVER's B)
        out["producer stores evict-last"] = (helped[:p0] + producer.replace(
            STORE, "bench_store16_last(p + (long long)k * BLOCK_Y * c.cols, v);") + helped[p1:])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every variant, in rotated order")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per variant and round")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-striped-variants")
    args = parser.parse_args()
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    rows = []
    for script, dtype, n in CASES:
        path = ROOT / "scripts" / f"{script}.script"
        probe = fusec.compile(path, dtype=dtype, tuned=False)
        sizes = {s: n for s in probe.dag.sizes}
        base = fusec.compile(path, dtype=dtype, sizes=sizes)
        if "fusec_stripe_ticket(" not in base.source:
            print(f"{dtype} {script}: no striped kernel in its plan, skipped", flush=True)
            continue
        inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
        sources = variants(base.source)
        programs = {name: Program(dataclasses.replace(base.generated, source=text)) for name, text in sources.items()}
        us, same = measure_variants(programs, inputs, args.rounds, args.repeat)
        nbytes = base.minimum_bytes(sizes)
        row = {"sequence": script, "dtype": dtype, "size": n, "tuned": bool(base.tuned),
               "plan": base.generated.plan.summary(base.dag), "us": us, "same": same, "gbps": {},
               "changed": {name: text != base.source for name, text in sources.items()}}
        for name in programs:
            row["gbps"][name] = nbytes / us[name] / 1e3
            verdict = "unchecked" if name in UNCHECKED else ("same results" if same[name] else "RESULTS DIFFER")
            print(f"{dtype} {script:7s} {name:28s} {us[name]:8.1f} us {row['gbps'][name]:6.0f} GB/s  {verdict}",
                  flush=True)
        rows.append(row)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    write(args, rows, device)


def write(args, rows, device: str) -> None:
    command = f"python -m experiments.striped_variants --rounds {args.rounds} --repeat {args.repeat} --name {args.name}"
    names = list(dict.fromkeys(name for row in rows for name in row["us"]))
    write_table(args, rows, device, command, "What limits a striped kernel",
                "GPU time, median µs of every round's runs, all variants of a sequence in one process; in"
                " brackets the variant's time over fusec's (above 1×: slower; '–': nothing to rewrite in that"
                " plan). '=' marks a variant whose source is the generated one. Plans: the tuned ones. Every"
                " variant's results equal the generated program's bit for bit unless marked, except"
                " 'no wait', which is not checked (see experiments/striped_variants.py).", names, UNCHECKED)


if __name__ == "__main__":
    main()
