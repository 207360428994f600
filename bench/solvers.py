"""fusec.solvers (cg, bicg, bicgstab) against JAX, CuPy and hand-written loops, per iteration
and to a tolerance.

    python -m bench.solvers [--budget 360] [--dtypes float32,float64] [--n 1024,4096,16384]
                            [--n32 32768] [--solvers cg,bicg,bicgstab]
                            [--peers jax,cupy,cupy-hand,torch,torch.compile] [--out bench/results]

Every contender runs in one process on the same CuPy arrays (PyTorch tensors and JAX arrays
alias them through DLPack where they can). For each precision, size and solver:

- **µs per iteration**: 50 iterations of a system that does not converge in 50 (SPD, A =
  diag(logspace(0, 4)) + a small symmetric random part), median of ``--repeat`` runs of the
  whole 50, each timed from a synchronised GPU to a synchronised GPU (host launching
  included: it is what a solve pays). fusec: the solver's own loop (:class:`ProgramStepper`),
  50 iterations captured once in a CUDA graph and replayed. JAX: ``jax.scipy.sparse.linalg``
  ``cg``/``bicgstab`` jitted, tol = 0 (JAX has no BiCG). CuPy: ``cupyx.scipy.sparse.linalg.cg``
  on the dense matrix. Hand-written: the iteration of :mod:`fusec.solvers.methods` (scalars
  kept on the GPU as 0-d arrays) with CuPy (cuBLAS underneath), PyTorch eager, and
  ``torch.compile`` (default mode) of one iteration.
- **floor**: the minimum bytes of an iteration (one pass over A for CG and BiCG, two for
  BiCGStab) at the copy bandwidth measured here (a CuPy device-to-device copy of 1 GiB).
- **to tolerance**: wall time of a whole solve to ``||r|| <= rtol ||b||`` (rtol 1e-5 fp32,
  1e-8 fp64) on a better conditioned system (eigenvalues in 1..10), after a warm-up solve:
  ``fusec.solvers`` (default ``check_every``), JAX, CuPy cg.

Each contender's x after 50 iterations is compared with fusec's (largest difference relative
to the largest |x|, reported). A peer that cannot run is reported skipped with the reason.
``--budget`` seconds bound the run: sizes not started in time are listed as skipped.
Writes ``<gpu>-solvers.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ITERATIONS = 50
TOLERANCE = {"float32": 1e-5, "float64": 1e-8}
MAXITER = 1000  # a solve to tolerance that has not converged by then is reported by its info


def wall_us(run, synchronize, repeat: int, before=None) -> float:
    """Median µs of ``run()`` from a synchronised GPU to a synchronised GPU."""
    samples = []
    for _ in range(repeat):
        if before is not None:
            before()
        synchronize()
        began = time.perf_counter()
        run()
        synchronize()
        samples.append((time.perf_counter() - began) * 1e6)
    return statistics.median(samples)


def copy_bandwidth(cupy) -> float:
    """Bytes per second of a device-to-device copy of 1 GiB (read + write)."""
    a = cupy.ones(1 << 28, dtype=cupy.float32)
    b = cupy.empty_like(a)
    us = wall_us(lambda: cupy.copyto(b, a), cupy.cuda.Device().synchronize, 10)
    return 2 * (1 << 30) / (us * 1e-6)


def systems(cupy, n: int, dtype: str):
    """(A not converging in 50 iterations, A converging in tens, b) as CuPy arrays."""
    rng = cupy.random.RandomState(n)
    m = rng.uniform(-0.5, 0.5, (n, n), dtype=dtype)
    m = m + m.T
    m *= 0.05 / n ** 0.5
    hard = m + cupy.diag(cupy.logspace(0, 4, n, dtype=m.dtype))
    m += cupy.diag(cupy.linspace(1, 10, n, dtype=m.dtype))
    b = rng.uniform(-0.5, 0.5, n, dtype=dtype)
    return cupy.ascontiguousarray(hard), m, b


def relative(cupy, x, reference) -> float:
    x = cupy.asarray(x, dtype=cupy.float64)
    reference = cupy.asarray(reference, dtype=cupy.float64)
    return float(cupy.abs(x - reference).max() / max(float(cupy.abs(reference).max()), 1e-300))


def fusec_iterations(cupy, method, A, b, repeat):
    """µs of 50 iterations replayed from a CUDA graph, and x after the first 50."""
    from fusec.solvers.api import program_for
    from fusec.solvers.arrays import CupyArrays
    from fusec.solvers.stepper import ProgramStepper
    arrays = CupyArrays()
    program = program_for(method.name, str(A.dtype), A.shape[0])
    with arrays.stream() as stream:
        stepper = ProgramStepper(program, method, arrays, A, method.start(cupy.zeros_like(b), b, cupy.copy))
        stepper.advance(ITERATIONS)  # plain calls: warms both sets
        stepper.restore()
        stepper.advance(ITERATIONS)  # captured, then replayed
        x = stepper.x().copy()
        us = wall_us(lambda: stepper.advance(ITERATIONS), stream.synchronize, repeat, before=stepper.restore)
    return us, x


def hand_iterations(xp, method, A, b, synchronize, repeat, step=None):
    step = step or (lambda values: method.reference(A, values))
    copy = xp.clone if hasattr(xp, "clone") else xp.copy
    start = method.start(b * 0, b, copy)

    def run():
        values = dict(start)
        for _ in range(ITERATIONS):
            values.update(step(values)[0])
        return values["x"]

    x = run()
    return wall_us(run, synchronize, repeat), x


def measure(args, cupy, dtype, n, peers, bandwidth) -> list[dict]:
    from fusec.solvers.methods import METHODS
    hard, easy, b = systems(cupy, n, dtype)
    sync = cupy.cuda.Device().synchronize
    rows = []
    for name in args.solvers:
        method = METHODS[name]
        passes = 2 if name == "bicgstab" else 1
        row = {"solver": name, "dtype": dtype, "n": n, "floor_us": passes * n * n * hard.itemsize / bandwidth * 1e6,
               "us_per_iteration": {}, "difference": {}, "to_tolerance_ms": {}, "skipped": {}}
        us, x = fusec_iterations(cupy, method, hard, b, args.repeat)
        row["us_per_iteration"]["fusec"] = us / ITERATIONS
        row["over_floor"] = row["us_per_iteration"]["fusec"] / row["floor_us"]
        for peer in peers:
            try:
                result = run_peer(peer, cupy, method, hard, b, sync, args.repeat)
            except Exception as exc:  # a peer that cannot run is reported, not an error
                row["skipped"][peer] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
                continue
            if result is None:
                row["skipped"][peer] = f"no {name} in {peer}"
                continue
            row["us_per_iteration"][peer] = result[0] / ITERATIONS
            row["difference"][peer] = relative(cupy, result[1], x)
        row["to_tolerance_ms"] = to_tolerance(cupy, name, easy, b, TOLERANCE[dtype], peers, row["skipped"])
        rows.append(row)
        print(json.dumps(row), flush=True)
    del hard, easy, b
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def run_peer(peer, cupy, method, A, b, sync, repeat):
    if peer == "cupy-hand":
        return hand_iterations(cupy, method, A, b, sync, repeat)
    if peer in ("torch", "torch.compile"):
        import torch
        tA, tb = torch.from_dlpack(A), torch.from_dlpack(b)
        step = None
        if peer == "torch.compile":
            step = torch.compile(lambda values: method.reference(tA, values), dynamic=False)
        return hand_iterations(torch, method, tA, tb, torch.cuda.synchronize, repeat, step)
    if peer == "cupy":
        if method.name != "cg":
            return None
        from cupyx.scipy.sparse.linalg import cg
        run = lambda: cg(A, b, tol=0.0, atol=0.0, maxiter=ITERATIONS)[0]  # noqa: E731
        x = run()
        return wall_us(run, sync, repeat), x
    if peer == "jax":
        import jax
        from jax.scipy.sparse import linalg
        if method.name == "bicg":
            return None
        solver = getattr(linalg, method.name)
        jA, jb = jax.dlpack.from_dlpack(A), jax.dlpack.from_dlpack(b)
        run = jax.jit(lambda A, b: solver(A, b, tol=0.0, atol=0.0, maxiter=ITERATIONS)[0])
        x = run(jA, jb).block_until_ready()
        us = wall_us(lambda: run(jA, jb).block_until_ready(), sync, repeat)
        return us, cupy.from_dlpack(x)
    raise ValueError(f"unknown peer {peer}")


def to_tolerance(cupy, name, A, b, rtol, peers, skipped) -> dict:
    import fusec.solvers
    times = {}

    def timed(solve):
        solve()  # warm: compiles, captures
        began = time.perf_counter()
        solve()
        cupy.cuda.Device().synchronize()
        return (time.perf_counter() - began) * 1e3

    infos = []
    times["fusec"] = timed(lambda: infos.append(getattr(fusec.solvers, name)(A, b, rtol=rtol, maxiter=MAXITER)[1]))
    times["fusec_info"] = infos[-1]
    if "cupy" in peers and name == "cg" and "cupy" not in skipped:
        from cupyx.scipy.sparse.linalg import cg
        times["cupy"] = timed(lambda: cg(A, b, tol=rtol, maxiter=MAXITER)[0])
    if "jax" in peers and name != "bicg" and "jax" not in skipped:
        import jax
        from jax.scipy.sparse import linalg
        solver = getattr(linalg, name)
        jA, jb = jax.dlpack.from_dlpack(A), jax.dlpack.from_dlpack(b)
        run = jax.jit(lambda A, b: solver(A, b, tol=rtol, maxiter=MAXITER)[0])
        times["jax"] = timed(lambda: run(jA, jb).block_until_ready())
    return times


def report(rows, device, bandwidth, command, skipped_sizes) -> str:
    peers = sorted({p for r in rows for p in r["us_per_iteration"]} - {"fusec"})
    lines = [f"# fusec.solvers against JAX, CuPy and hand-written loops ({device})", "",
             f"`{command}`. µs per iteration: {ITERATIONS} iterations, median of runs, synchronised GPU to"
             f" synchronised GPU. Floor: one pass over A (two for BiCGStab) at the measured copy bandwidth"
             f" {bandwidth / 1e12:.2f} TB/s. In brackets: x after {ITERATIONS} iterations against fusec's"
             " (largest difference / largest |x|).", "",
             "| solver | dtype | n | floor µs | fusec µs | fusec / floor | " + " | ".join(peers) + " |",
             "|---|---|---:|---:|---:|---:|" + "---:|" * len(peers)]
    for r in rows:
        cells = []
        for p in peers:
            if p in r["us_per_iteration"]:
                cells.append(f"{r['us_per_iteration'][p]:.1f} ({r['difference'][p]:.1e})")
            else:
                cells.append("skipped" if p in r["skipped"] else "")
        lines.append(f"| {r['solver']} | {r['dtype']} | {r['n']} | {r['floor_us']:.1f}"
                     f" | {r['us_per_iteration']['fusec']:.1f} | {r['over_floor']:.2f} | " + " | ".join(cells) + " |")
    lines += ["", "Time to tolerance (ms, a whole solve after a warm one):", "",
              "| solver | dtype | n | fusec | cupy | jax |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        t = r["to_tolerance_ms"]
        cells = [f"{t[k]:.2f}" if k in t else "" for k in ("fusec", "cupy", "jax")]
        if t.get("fusec_info"):
            cells[0] += f" (info {t['fusec_info']})"
        lines.append(f"| {r['solver']} | {r['dtype']} | {r['n']} | " + " | ".join(cells) + " |")
    reasons = sorted({f"{p}: {why}" for r in rows for p, why in r["skipped"].items()})
    if reasons or skipped_sizes:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in reasons + skipped_sizes]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=360.0, help="seconds; sizes not started by then are skipped")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--n", default="1024,4096,16384")
    parser.add_argument("--n32", default="32768", help="sizes run in float32 only")
    parser.add_argument("--solvers", default="cg,bicg,bicgstab")
    parser.add_argument("--peers", default="cupy-hand,torch,jax,cupy,torch.compile")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    args.solvers = args.solvers.split(",")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with CuPy
    began = time.monotonic()
    import cupy
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
    except ImportError:
        pass
    from bench.peers import device_name
    device = device_name(cupy)
    bandwidth = copy_bandwidth(cupy)
    peers = [p for p in args.peers.split(",") if p]
    cases = [(d, int(n)) for d in args.dtypes.split(",") for n in args.n.split(",") if n]
    cases += [("float32", int(n)) for n in args.n32.split(",") if n and "float32" in args.dtypes]
    cases.sort(key=lambda c: (c[0] != "float32", c[1]))
    rows, skipped_sizes = [], []
    for dtype, n in cases:
        if time.monotonic() - began > args.budget:
            skipped_sizes.append(f"{dtype} n={n}: past the budget of {args.budget:.0f} s")
            continue
        rows += measure(args, cupy, dtype, n, peers, bandwidth)
    name = args.name or device.lower().replace("nvidia ", "").split()[0] + "-solvers"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.solvers " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    text = report(rows, device, bandwidth, command.strip(), skipped_sizes)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps({"device": device, "copy_bandwidth": bandwidth, "rows": rows,
                                                  "skipped": skipped_sizes}, indent=1))
    print(text)
    print(f"wrote {out / name}.md and .json ({time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
