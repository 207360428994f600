"""Would row-resident striped kernels beat fusec's striped fusion? Hand-written ones, timed beside it.

fusec's striped plans (docs/design/striped-fusion.md) run GEMVER's and SGEMVT's second
pass in the same launch as the first, and the consumer blocks re-read the
matrix tiles from L2. GEMVER's stays at 1.31x its floor (fp32 n = 16384). A
*row-resident* kernel would read or write the matrix only once: each block
owns a band of rows for the whole launch, walks the column stripes, keeps its
tiles of the last few stripes in shared memory, and computes its rows of
``w = alpha B x`` from there once x's stripe is summed across blocks
(experiments/resident.cu). This times three such kernels, which differ in how the
blocks meet once per stripe (see the .cu), over a grid of shapes, beside
fusec's tuned plans of the same scripts, in one process on the same inputs.

Every result is checked against float64 CuPy first (relative error at most
1e-5 in fp32, 1e-12 in fp64), and again after the timed runs. GPU time as in
bench.peers: a spinning kernel first, then events around one call; median of
--repeat. The floor is minimum bytes (GEMVER: A read and B written once;
SGEMVT: A once; plus the vectors) over the copy bandwidth measured in the same
run. A shape whose blocks cannot all be resident at once is left out and said
so (these kernels need every block running).

    python -m experiments.resident [--dtype float32|float64|both] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy; fusec's rows need its runtime (PyCUDA) and are skipped without it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from .gemv_patterns import Timer

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(__file__).with_suffix(".cu")
SIZES = {"float32": 16384, "float64": 8192}
# (kernel, BLOCK, WL lanes per row, ITERS, LAG, PREF); resident_ll is float only.
SHAPES = {
    "float32": (("resident_elected", 512, 32, 8, 1, 1), ("resident_elected", 512, 16, 4, 1, 2),
                ("resident_fixed", 256, 16, 8, 2, 2), ("resident_fixed", 512, 16, 4, 2, 2),
                ("resident_fixed", 512, 16, 4, 3, 2), ("resident_fixed", 128, 8, 8, 2, 2),
                ("resident_ll", 256, 16, 8, 2, 2), ("resident_ll", 256, 16, 8, 3, 2)),
    "float64": (("resident_elected", 512, 32, 4, 1, 2), ("resident_fixed", 256, 32, 8, 2, 2),
                ("resident_fixed", 512, 32, 4, 2, 2), ("resident_fixed", 256, 16, 4, 2, 2)),
}
MAX_SHARED = 227 * 1024  # bytes a block may have on sm_90


def instantiation(kernel: str, ctype: str, shape: tuple, gemver: bool) -> str:
    typed = "" if kernel == "resident_ll" else f"{ctype},"
    return f"{kernel}<{typed}{','.join(map(str, shape))},{str(gemver).lower()}>"


def layout(dtype: str, shape: tuple, n: int) -> tuple[int, int, int] | str:
    """(blocks, stripes, shared bytes) of a kernel shape at size n, or why it cannot run there."""
    block, lanes, iters, lag, pref = shape
    vec, size = (4, 4) if dtype == "float32" else (2, 8)
    per_block, width = block // lanes * iters, lanes * vec
    if n % per_block or n % width:
        return f"does not tile n = {n}"
    shared = ((lag + 1 + pref) * iters * block * vec + block // lanes * width) * size
    if shared > MAX_SHARED:
        return f"{shared} bytes of shared memory"
    return n // per_block, n // width, shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=("float32", "float64", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-resident")
    args = parser.parse_args()
    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    rows, copies = [], {}
    for dtype in dtypes:
        copies[dtype] = measure(dtype, args.repeat, rows)
    write(args, rows, copies)


class Case:
    """GEMVER's and SGEMVT's inputs at one size, their float64 answers, the copy
    bandwidth and a timer: what every contender is measured against (also used
    by experiments.cluster_resident)."""

    def __init__(self, dtype: str, n: int, repeat: int, spin, rows: list):
        import cupy as cp

        from bench.fusion import copy_bandwidth
        self.cp, self.dtype, self.n, self.rows = cp, dtype, n, rows
        self.np_dtype = np.dtype(dtype)
        self.size = self.np_dtype.itemsize
        self.timer = Timer(cp, spin, repeat)
        # bench.peers' measure (a 1 GiB copy), before this case's arrays exist: a copy of A itself
        # at n = 4096 (64 MB, about L2's size) measured 2806 GB/s where bench.peers measured 3012.
        self.bandwidth = copy_bandwidth(cp) / 1e9  # GB/s
        print(f"{dtype} n = {n}: copy bandwidth {self.bandwidth:.0f} GB/s", flush=True)
        rng = cp.random.default_rng(11)
        self.A = rng.standard_normal((n, n), dtype=np.float32).astype(self.np_dtype)
        self.vectors = tuple(rng.standard_normal(n, dtype=np.float32).astype(self.np_dtype) for _ in range(6))
        self.alpha, self.beta = 1.5, 0.75
        self.B = cp.empty_like(self.A)
        u1, v1, u2, v2, y, z = (v.astype(cp.float64) for v in self.vectors)
        A64 = self.A.astype(cp.float64)
        self.expected = {}
        for gemver in (True, False):  # GEMVER's answers: x, w and the matrix B
            M = A64 + cp.outer(u1, v1) + cp.outer(u2, v2) if gemver else A64
            x = self.beta * (M.T @ y) + z
            self.expected[gemver] = (x, self.alpha * (M @ x)) + ((M,) if gemver else ())
        del A64, M
        self.tolerance = 1e-5 if dtype == "float32" else 1e-12
        self.with_host = False  # also time each checked contender with the host's launching

    def error(self, got, want) -> float:
        cp = self.cp
        return float(cp.max(cp.abs(got.astype(cp.float64) - want)) / cp.max(cp.abs(want)))

    def add(self, script: str, contender: str, detail: str, gemver: bool, call, results, checked: bool = True):
        """Time ``call`` (GPU time, median); ``results()`` (x, w, and GEMVER's B) must
        match float64 before and after the timed runs, unless ``checked`` is off (a
        diagnostic that gives up correctness, marked so in the row)."""
        cp = self.cp
        call()
        cp.cuda.runtime.deviceSynchronize()
        errors = [self.error(g, w) for g, w in zip(results(), self.expected[gemver])]
        if checked and not max(errors) <= self.tolerance:
            raise SystemExit(f"{script} {contender}: wrong result (relative errors {errors})")
        gpu = self.timer.gpu(call)
        again = [self.error(g, w) for g, w in zip(results(), self.expected[gemver])]
        if checked and not max(again) <= self.tolerance:
            raise SystemExit(f"{script} {contender}: wrong after the timed runs (relative errors {again})")
        floor = ((2 if gemver else 1) * self.A.nbytes + 8 * self.n * self.size) / self.bandwidth / 1e3
        host = self.timer.host(call) if self.with_host and checked else None
        self.rows.append({"script": script, "dtype": self.dtype, "n": self.n, "contender": contender,
                          "detail": detail if checked else detail + " (unchecked: results wrong by design)",
                          "gpu_us": gpu, "floor_us": floor, "of_floor": gpu / floor, "host_us": host,
                          "error": max(errors) if checked else None})
        print(f"  {script:7s} {contender:48s} {gpu:8.1f} us  {gpu / floor:5.2f}x floor"
              + (f"  (with host {host:.1f} us)" if host else ""), flush=True)

    def fusec_rows(self) -> None:
        """fusec's plans of both scripts (tuned where the cache has them), on the same inputs."""
        try:
            import fusec
        except ImportError as exc:
            print(f"  fusec skipped: {exc}")
            return
        u1, v1, u2, v2, y, z = self.vectors
        for script, gemver in (("gemver", True), ("sgemvt", False)):
            from fusec import data
            program = fusec.compile(ROOT / "scripts" / f"{script}.script", data.LIBRARY, self.dtype,
                                    sizes={"m": self.n, "n": self.n})
            inputs = {"A": self.A, "y": y, "z": z, "alpha": self.alpha, "beta": self.beta}
            if gemver:
                inputs.update(u1=u1, v1=v1, u2=u2, v2=v2)
            out = {}

            def call(program=program, inputs=inputs, out=out):
                out["r"] = program(**inputs)

            def results(out=out, gemver=gemver):
                r = out["r"]
                if isinstance(r, dict):
                    return (r["x"], r["w"]) + ((r["B"],) if gemver else ())
                return (r[1], r[2], r[0]) if gemver else (r[0], r[1])
            self.add(script, "fusec" + (" (tuned)" if program.tuned else ""),
                     program.generated.plan.summary(program.dag), gemver, call, results)


def measure(dtype: str, repeat: int, rows: list) -> float:
    import cupy as cp
    n = SIZES[dtype]
    ctype = "float" if dtype == "float32" else "double"
    names = {instantiation(k, ctype, shape, g): (k, shape, g) for k, *shape in SHAPES[dtype] for g in (True, False)}
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",), name_expressions=list(names) + ["spin"])
    module.compile()
    case = Case(dtype, n, repeat, module.get_function("spin"), rows)
    A, B, np_dtype = case.A, case.B, case.np_dtype
    u1, v1, u2, v2, y, z = case.vectors
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    for name, (kernel, shape, gemver) in names.items():
        script = "gemver" if gemver else "sgemvt"
        block, _, _, lag, pref = shape
        fits = layout(dtype, shape, n)
        if isinstance(fits, str):
            print(f"  {name}: {fits}, left out")
            continue
        grid, stripes, shared = fits
        per_block, width = n // grid, n // stripes
        function = module.get_function(name)
        function.max_dynamic_shared_size_bytes = shared
        resident = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function.kernel.ptr, block, shared)
        if resident * sms < grid:
            print(f"  {name}: {grid} blocks, only {resident} x {sms} resident at once: left out")
            continue
        partials = cp.zeros(stripes * grid * width, np_dtype)
        w = cp.zeros(n, np_dtype)
        scalars = (np_dtype.type(case.alpha), np_dtype.type(case.beta), np.int32(n), partials)
        if kernel == "resident_ll":
            words, counters, epoch = cp.zeros(n, cp.uint64), cp.zeros(stripes, cp.uint32), [0]

            def call(f=function, g=grid, b=block, s=shared, words=words, counters=counters, epoch=epoch, w=w,
                     scalars=scalars):
                epoch[0] += 1
                f((g,), (b,), (A, B, u1, v1, u2, v2, y, z, words, w) + scalars + (counters, np.uint32(epoch[0])),
                  shared_mem=s)

            def results(words=words, w=w):
                return (words & cp.uint64(0xFFFFFFFF)).astype(cp.uint32).view(cp.float32), w, B
        else:
            x, schedule = cp.zeros(n, np_dtype), cp.zeros(2 * stripes + 1, cp.uint32)

            def call(f=function, g=grid, b=block, s=shared, x=x, w=w, schedule=schedule, scalars=scalars):
                f((g,), (b,), (A, B, u1, v1, u2, v2, y, z, x, w) + scalars + (schedule,), shared_mem=s)

            def results(x=x, w=w):
                return x, w, B
        detail = (f"{block} threads, {per_block} rows x {width} columns per stripe, lag {lag}, "
                  f"{pref} stripe(s) prefetched; {grid} blocks, {shared // 1024} KiB shared")
        case.add(script, name, detail, gemver, call, results)
    case.fusec_rows()
    return case.bandwidth


def write(args, rows: list, copies: dict, command: str | None = None,
          title: str = "Row-resident striped kernels", kernels: str = "experiments/resident.cu") -> None:
    import cupy as cp
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    command = command or f"python -m experiments.resident --dtype {args.dtype} --repeat {args.repeat}"
    (args.out / f"{args.name}.json").write_text(json.dumps(
        {"device": device, "when": when, "command": command, "copy_gbs": copies, "rows": rows}, indent=1))
    lines = [f"# {title} against fusec's striped fusion on {device}", "",
             f"{when}; `{command}`. GPU µs, median of {args.repeat} (a spinning kernel first, then events"
             " around one call). × floor: minimum bytes (GEMVER: A read and B written once; SGEMVT: A read"
             " once; vectors) over the copy bandwidth measured in the same run ("
             + ", ".join(f"{d}: {bw:.0f} GB/s" for d, bw in copies.items()) + ")."
             " vs fusec: this row's µs over fusec's (above 1: slower). Kernels: " + kernels + ";"
             " every result checked against float64 before and after timing, but in rows marked unchecked."
             + (" With host µs: CUDA events around one whole call from an idle GPU, the host's launching"
                " included (a hand-written kernel launched through CuPy, fusec through its program call)."
                if any(r.get("host_us") for r in rows) else ""), ""]
    for dtype, n in dict.fromkeys((r["dtype"], r["n"]) for r in rows):
        for script in ("gemver", "sgemvt"):
            mine = [r for r in rows if (r["dtype"], r["n"]) == (dtype, n) and r["script"] == script]
            ours = next((r for r in mine if r["contender"].startswith("fusec")), None)
            if not mine:
                continue
            host = any(r.get("host_us") for r in mine)
            lines += [f"## {script.upper()}, {dtype}, n = {mine[0]['n']}", "",
                      "| contender | shape | GPU µs | × floor | vs fusec |" + (" with host µs |" if host else ""),
                      "|---|---|---:|---:|---:|" + ("---:|" if host else "")]
            for r in sorted(mine, key=lambda r: r["gpu_us"]):
                ratio = f"{r['gpu_us'] / ours['gpu_us']:.2f}" if ours else ""
                lines.append(f"| {r['contender']} | {r['detail']} | {r['gpu_us']:.1f} | {r['of_floor']:.2f}"
                             f" | {ratio} |" + (f" {r['host_us']:.1f} |" if r.get("host_us") else " |" if host else ""))
            lines.append("")
    (args.out / f"{args.name}.md").write_text("\n".join(lines))
    print(f"wrote {args.out / args.name}.md")


if __name__ == "__main__":
    main()
