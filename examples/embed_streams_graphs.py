"""A compiled fusec program inside a CuPy application: its stream, out= arrays, a CUDA graph.

    python examples/embed_streams_graphs.py [--n 4096] [--dtype float32|float64]

BiCGK (q = A p, s = A^T r, scripts/bicgk.script) is compiled once and called the
ways an application that owns its streams and memory needs (docs/python-api.md,
"Streams, out= and CUDA graphs"):

1. on the application's own non-blocking stream, given as stream=;
2. on CuPy's current stream (inside ``with stream:``), the results written into
   arrays allocated once, with out=;
3. captured into a CUDA graph on that stream and replayed, new inputs copied into
   the same arrays before each replay (a graph keeps the addresses it captured).

Every time, the input arrays get new values first, the out= arrays are filled
with NaN (so an element no kernel wrote fails), and q and s are checked against
NumPy in float64 by the reference BLAS test ratio |got - want| / (eps |A| |x|)
(Reference-LAPACK's SMVCH), which must stay below 16 sqrt(n) for sums of n terms.
Exits with status 1 and says which check failed where one does.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bicgk.script"
REPLAYS = 3


def worst_ratios(values: dict, q, s, dtype) -> dict[str, float]:
    """The largest test ratio of q = A p and of s = A^T r against float64 NumPy (NaN stays NaN)."""
    A, p, r = (values[name].astype(np.float64) for name in ("A", "p", "r"))
    eps = np.finfo(dtype).eps
    ratios = {}
    for name, got, want, gauge in (("q", q, A @ p, np.abs(A) @ np.abs(p)),
                                   ("s", s, A.T @ r, np.abs(A).T @ np.abs(r))):
        ratios[name] = float(np.max(np.abs(got.astype(np.float64) - want) / (eps * gauge)))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="A is n x n (default %(default)s)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args()
    if args.n < 1:
        parser.error(f"argument --n: must be a whole number >= 1, got {args.n}")
    n, dtype = args.n, np.dtype(args.dtype)

    import cupy as cp  # here, not above: --help needs no GPU framework

    import fusec

    prog = fusec.compile(SCRIPT, dtype=args.dtype, sizes={"n": n})  # m, not given, takes n's value
    rng = np.random.default_rng(0)
    limit = 16 * math.sqrt(n)
    failures = []

    stream = cp.cuda.Stream(non_blocking=True)  # the application's: it does not wait for the legacy stream
    with stream:  # allocated on the stream: CuPy's memory pool orders them there
        inputs = {"A": cp.empty((n, n), dtype), "p": cp.empty(n, dtype), "r": cp.empty(n, dtype)}
        out = {"q": cp.empty(n, dtype), "s": cp.empty(n, dtype)}

    def new_values() -> dict:
        """New host values, copied into the same device arrays on the stream (the graph reads them there)."""
        values = {name: rng.uniform(-0.5, 0.5, a.shape).astype(dtype) for name, a in inputs.items()}
        for name, a in inputs.items():
            a.set(values[name], stream=stream)
        with stream:
            for a in out.values():
                a.fill(np.nan)
        return values

    def check(what: str, values: dict, q, s) -> None:
        stream.synchronize()  # the results are ready once the stream's work is
        ratios = worst_ratios(values, cp.asnumpy(q), cp.asnumpy(s), dtype)
        passed = all(ratio < limit for ratio in ratios.values())  # NaN fails
        print(f"{what}: q ratio {ratios['q']:.2f}, s ratio {ratios['s']:.2f} (limit {limit:.0f}):"
              f" {'ok' if passed else 'FAILED'}")
        if not passed:
            failures.append(what.strip())

    print(f"BiCGK, n = {n}, {dtype}: {len(prog.kernels)} kernel(s), on a stream of our own")

    values = new_values()
    q, s = prog(**inputs, stream=stream)  # new result arrays, allocated on the stream
    check("1. stream=stream, new result arrays", values, q, s)

    with stream:
        values = new_values()
        q, s = prog(**inputs, out=out)  # on the current stream; fusec's workspaces now exist
        if q is not out["q"] or s is not out["s"]:
            failures.append("out=: the results are not the out= arrays")
        check("2. the current stream, out= arrays", values, q, s)

        # a call with out= for every result allocates nothing and does not synchronise: capturable
        stream.begin_capture()
        prog(**inputs, out=out)
        graph = stream.end_capture()
    print("3. captured one call into a CUDA graph")

    for replay in range(1, REPLAYS + 1):
        values = new_values()
        graph.launch(stream)
        check(f"   replay {replay} on new inputs", values, out["q"], out["s"])

    if failures:
        raise SystemExit("FAILED: " + "; ".join(failures))
    print(f"all {2 + REPLAYS} checks passed")


if __name__ == "__main__":
    main()
