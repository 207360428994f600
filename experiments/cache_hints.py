"""Do cache hints on 16-byte loads and stores move the bandwidth-bound sequences?

torch.compile (Triton) marks loads used once ``evict_first``; fusec's routines
use plain loads and stores. This takes fusec's best-predicted program for each
sequence, rewrites its 16-byte accesses in the generated source (nothing in
the library changes), checks each variant's results equal the original's
bit for bit, and times them all in one process with ``Program.time(host=False)``:

- plain: the source as generated;
- ld.cs: loads ``__ldcs`` (cache streaming: evict first, in L1 and L2);
- st.cs: stores ``__stcs``;
- ld.cs+st.cs: both;
- ld.nc: loads ``__ldg`` (the read-only path).

    python -m experiments.cache_hints [--repeat 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from experiments.source_variants import run_variant

ROOT = Path(__file__).resolve().parent.parent

HELPERS = """
// experiments.cache_hints: 16-byte accesses with cache hints (bit copies through float4)
__device__ __forceinline__ fusec_vec fusec_hint_load(const real* p) {
  const float4 t = HINT_LOAD(reinterpret_cast<const float4*>(p));
  fusec_vec v;
  *reinterpret_cast<float4*>(&v) = t;
  return v;
}
struct fusec_hint_ref {
  real* p;
  __device__ __forceinline__ void operator=(const fusec_vec& v) {
    HINT_STORE(reinterpret_cast<float4*>(p), *reinterpret_cast<const float4*>(&v));
  }
};
__device__ __forceinline__ fusec_hint_ref fusec_hint_store(real* p) { return fusec_hint_ref{p}; }
"""
PLAIN_LOAD = "*reinterpret_cast<const fusec_vec*>"
PLAIN_STORE = "*reinterpret_cast<fusec_vec*>"
VARIANTS = {  # name: (load intrinsic or None, store intrinsic or None)
    "plain": (None, None),
    "ld.cs": ("__ldcs", None),
    "st.cs": (None, "__stcs"),
    "ld.cs+st.cs": ("__ldcs", "__stcs"),
    "ld.nc": ("__ldg", None),
}
SEQUENCES = ("vadd", "waxpby", "axpydot", "madd", "sgemv", "gesummv", "bicgk", "atax")


def with_hints(source: str, load: str | None, store: str | None) -> str:
    """The source with its 16-byte loads and/or stores through the intrinsics."""
    if load is None and store is None:
        return source
    anchor = "struct __align__(16) fusec_vec { real v[VEC]; };"
    assert anchor in source, "support code changed: update experiments.cache_hints"
    helpers = (f"#define HINT_LOAD {load or '*'}\n#define HINT_STORE(p, v) "
               + (f"{store}(p, v)" if store else "(*(p) = (v))") + HELPERS)
    source = source.replace(anchor, anchor + "\n" + helpers, 1)
    if load:
        source = source.replace(PLAIN_LOAD, "fusec_hint_load")
    if store:
        source = source.replace(PLAIN_STORE, "fusec_hint_store")
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--n", type=int, default=16384, help="matrix side (vectors: n*n/4)")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-cache-hints")
    args = parser.parse_args()
    import cupy

    import fusec
    from bench.fusion import device_inputs
    rows = []
    for script in SEQUENCES:
        path = ROOT / "scripts" / f"{script}.script"
        probe = fusec.compile(path, dtype="float32", tuned=False)
        has_matrix = any(v.kind.value == "matrix" for v in probe.dag.values)
        n = args.n if has_matrix else args.n * args.n // 4
        sizes = {s: n for s in probe.dag.sizes}
        base = fusec.compile(path, dtype="float32", sizes=sizes, tuned=False)
        inputs = device_inputs(cupy, base.dag, sizes, "float32", seed=5)
        nbytes = base.minimum_bytes(sizes)
        reference: list = []
        row = {"sequence": script, "size": n, "plan": base.generated.plan.summary(base.dag), "us": {}}
        for name, (load, store) in VARIANTS.items():
            outcome = run_variant(base, with_hints(base.source, load, store), inputs, args.repeat, reference)
            us = row["us"][name] = outcome.us
            same = outcome.check == "same bits"
            print(f"{script:8s} {name:12s} {us:8.1f} us {nbytes / us / 1e3:6.0f} GB/s"
                  f"  {'same results' if same else 'RESULTS DIFFER'}", flush=True)
        rows.append(row)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    lines = ["# Cache hints on fusec's 16-byte accesses (`python -m experiments.cache_hints`)", "",
             "fp32, best-predicted plans, GPU time (median µs); ratio to plain in brackets.", "",
             "| sequence | size | " + " | ".join(VARIANTS) + " |", "|---|---:|" + "---:|" * len(VARIANTS)]
    for row in rows:
        plain = row["us"]["plain"]
        cells = [f"{row['us'][v]:.1f} ({plain / row['us'][v]:.3f}×)" for v in VARIANTS]
        lines.append(f"| {row['sequence']} | {row['size']} | " + " | ".join(cells) + " |")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
