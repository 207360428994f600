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
  1e-8 fp64) on a better conditioned system (eigenvalues in 1..10), median of ``--repeat``
  solves after a warm-up one: ``fusec.solvers`` (default ``check_every``, the same with
  ``check_finite=False``, and ``check_every=1``), JAX, CuPy cg (its tolerance keyword as the installed CuPy names it:
  ``rtol``, or ``tol`` in older releases). Recorded with it: the iterations fusec ran, the
  iterations needed (those of the ``check_every=1`` solve, the first that meets the rule,
  as JAX and CuPy stop), and each answer's true residual ``||b - A x|| / ||b||``.

Each contender's x after 50 iterations is compared with fusec's (largest difference relative
to the largest |x|, reported). A peer that cannot run is reported skipped with the reason.
``--budget`` seconds bound the run: sizes not started in time are listed as skipped.
Writes ``<gpu>-solvers.md`` and ``.json``.

``--iterations-on-cpu`` needs no GPU: it draws the to-tolerance systems with NumPy (another
draw from the same distribution, for each of ``--seeds``), runs each solver's iteration
(:mod:`fusec.solvers.methods`) in the precision asked for, checking every iteration, and
prints the iterations each needs and how many a solve checking every ``check_every`` runs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
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


def relative_tolerance_keyword(solver) -> str:
    """The keyword ``solver`` takes its relative tolerance by: ``rtol`` where it follows SciPy
    1.12 on (CuPy's current ``cg``: keyword-only ``rtol``, ``atol`` 0 by default), ``tol`` in
    older releases (CuPy 10's ``cg(A, b, x0, tol, maxiter, M, callback, atol)``)."""
    parameters = inspect.signature(solver).parameters
    for name in ("rtol", "tol"):
        if name in parameters:
            return name
    raise TypeError(f"{getattr(solver, '__name__', solver)} takes neither rtol nor tol")


def solve_to(solver, A, b, rtol: float, maxiter: int):
    """``solver(A, b)`` stopping at ``||r|| <= rtol ||b||`` (atol 0) under either keyword."""
    return solver(A, b, **{relative_tolerance_keyword(solver): rtol}, atol=0.0, maxiter=maxiter)


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
               "us_per_iteration": {}, "difference": {}, "to_tolerance": {}, "skipped": {}}
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
        row["to_tolerance"] = to_tolerance(cupy, name, easy, b, TOLERANCE[dtype], peers, row["skipped"], args.repeat)
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
        run = lambda: solve_to(cg, A, b, 0.0, ITERATIONS)[0]  # noqa: E731
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


def true_residual(xp, A, b, x, rows: int = 4096) -> float:
    """``||b - A x|| / ||b||`` in float64, ``rows`` rows of A at a time (a float64 copy of a
    float32 A of n = 32768 would take 8 GiB)."""
    x = xp.asarray(xp.from_dlpack(x), dtype=xp.float64)
    b = xp.asarray(b, dtype=xp.float64)
    r = xp.concatenate([b[i:i + rows] - xp.asarray(A[i:i + rows], dtype=xp.float64) @ x
                        for i in range(0, A.shape[0], rows)])
    return float(xp.linalg.norm(r) / xp.linalg.norm(b))


def to_tolerance(cupy, name, A, b, rtol, peers, skipped, repeat) -> dict:
    """Whole solves to ``||r|| <= rtol ||b||``: ms (median of ``repeat`` after a warm one), the
    iterations fusec ran and needed, and each answer's true residual."""
    from fusec.solvers import api
    from fusec.solvers.methods import METHODS
    sync = cupy.cuda.Device().synchronize
    ms, residual, outcomes = {}, {}, {}

    def timed(key, solve):
        x = solve()  # warm: compiles, captures
        ms[key] = wall_us(solve, sync, repeat) / 1e3
        residual[key] = true_residual(cupy, A, b, x)

    # "fusec": the stepper kept from the solve before, its graphs replayed (the same A);
    # "fusec_unchecked": the same with check_finite=False (no pass over A before the solve);
    # "fusec_new": each solve as the first of its matrix (no stepper kept: plain first chunk,
    # then a capture); "fusec_every_1": the host's loop, a read after every iteration, no graphs
    for key, every, fresh, checked in (("fusec", None, False, True), ("fusec_unchecked", None, False, False),
                                       ("fusec_new", None, True, True), ("fusec_every_1", 1, False, True)):
        def solve(key=key, every=every, fresh=fresh, checked=checked):
            if fresh:
                api.forget_kept_steppers()
            x, outcomes[key] = api.solve_with_outcome(METHODS[name], A, b, rtol=rtol, maxiter=MAXITER,
                                                      check_every=every, check_finite=checked)
            return x
        timed(key, solve)
    if "cupy" in peers and name == "cg" and "cupy" not in skipped:
        from cupyx.scipy.sparse.linalg import cg
        timed("cupy", lambda: solve_to(cg, A, b, rtol, MAXITER)[0])
    if "jax" in peers and name != "bicg" and "jax" not in skipped:
        import jax
        from jax.scipy.sparse import linalg
        solver = getattr(linalg, name)
        jA, jb = jax.dlpack.from_dlpack(A), jax.dlpack.from_dlpack(b)
        run = jax.jit(lambda A, b: solver(A, b, tol=rtol, maxiter=MAXITER)[0])
        timed("jax", lambda: run(jA, jb).block_until_ready())
    return {"ms": ms, "info": {k: o.info for k, o in outcomes.items()},
            "iterations": {k: o.iterations for k, o in outcomes.items()}, "residual": residual}


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
    lines += ["", "Time to tolerance (ms, median of whole solves after a warm one; fusec: the solver's stepper"
              " kept from the solve before, on the same A; fusec, new A: every solve as the first on its"
              " matrix (no kept stepper: plain first chunk, then a graph captured); check_finite=False: as"
              " fusec, without the pass over A that checks it before the solve; all three with check_every"
              " not given (the loop on the GPU where the driver has conditional graph nodes, else the"
              " host's every check_every); iterations: those fusec ran so, and those needed, from the"
              " check_every=1 solve; in"
              " brackets the answer's true residual ||b - A x|| / ||b||):", "",
              "| solver | dtype | n | fusec | iterations run / needed | fusec, check_finite=False | fusec, new A"
              " | fusec, check_every=1 | cupy | jax |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t = r["to_tolerance"]
        cells = []
        for key in ("fusec", "fusec_unchecked", "fusec_new", "fusec_every_1", "cupy", "jax"):
            cell = f"{t['ms'][key]:.2f} ({t['residual'][key]:.1e})" if key in t["ms"] else ""
            if t["info"].get(key):
                cell += f" info {t['info'][key]}"
            cells.append(cell)
        cells.insert(1, f"{t['iterations']['fusec']} / {t['iterations']['fusec_every_1']}")
        lines.append(f"| {r['solver']} | {r['dtype']} | {r['n']} | " + " | ".join(cells) + " |")
    reasons = sorted({f"{p}: {why}" for r in rows for p, why in r["skipped"].items()})
    if reasons or skipped_sizes:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in reasons + skipped_sizes]
    return "\n".join(lines) + "\n"


def cpu_system(n: int, dtype: str, seed: int):
    """The to-tolerance system of :func:`systems` drawn by NumPy: ``A = (m + m^T) 0.05 / sqrt(n)
    + diag(linspace(1, 10))`` with ``m`` uniform in [-0.5, 0.5], ``b`` uniform in [-0.5, 0.5].
    Built in place, a block at a time (``A`` alone at n = 32768 in float32 is 4 GiB)."""
    import numpy as np
    rng = np.random.default_rng([seed, n])
    m = rng.random((n, n), dtype=np.dtype(dtype).type)
    m -= 0.5
    step = 2048
    for i in range(0, n, step):
        m[i:i + step, i:i + step] += m[i:i + step, i:i + step].T.copy()
        for j in range(i + step, n, step):
            m[i:i + step, j:j + step] += m[j:j + step, i:i + step].T
            m[j:j + step, i:i + step] = m[i:i + step, j:j + step].T
    m *= 0.05 / n ** 0.5
    m[np.diag_indices(n)] += np.linspace(1, 10, n, dtype=dtype)
    b = rng.random(n, dtype=np.dtype(dtype).type) - np.dtype(dtype).type(0.5)
    return m, b


def iterations_needed(method, A, b, rtol: float, maxiter: int = MAXITER) -> int | None:
    """The first iteration of ``method`` (its NumPy iteration, in A's precision, from x0 = 0)
    whose residual meets ``||r|| <= rtol ||b||``, checked after every iteration as JAX, CuPy and
    SciPy do; None if none by ``maxiter`` or the iteration goes non-finite."""
    import numpy as np
    limit = (rtol * math.sqrt(float(np.dot(b.astype(np.float64), b.astype(np.float64))))) ** 2
    values = method.start(np.zeros_like(b), b, np.copy)
    for iteration in range(1, maxiter + 1):
        state, rr1 = method.reference(A, values)
        values.update(state)
        if not math.isfinite(rr1):
            return None
        if rr1 <= limit:
            return iteration
    return None


def iterations_run(needed: int, check_every: int) -> int:
    """The iterations a solve that reads the residual every ``check_every`` iterations runs
    when the ``needed``-th is the first to meet the rule."""
    return -(-needed // check_every) * check_every


def iterations_on_cpu(cases, solvers, seeds, check_every: int = 16) -> str:
    """A table: per solver, precision and size, the iterations needed on each seed's system,
    and those a fusec solve with ``check_every`` runs."""
    from fusec.solvers.methods import METHODS
    needed = {}
    for dtype, n in cases:
        for seed in seeds:
            A, b = cpu_system(n, dtype, seed)
            for name in solvers:
                needed[name, dtype, n, seed] = iterations_needed(METHODS[name], A, b, TOLERANCE[dtype])
            del A
    lines = [f"| solver | dtype | n | needed (seeds {', '.join(map(str, seeds))}) | run, check_every={check_every} |",
             "|---|---|---:|---|---|"]
    for dtype, n in cases:
        for name in solvers:
            counts = [needed[name, dtype, n, seed] for seed in seeds]
            run = ", ".join("-" if c is None else str(iterations_run(c, check_every)) for c in counts)
            lines.append(f"| {name} | {dtype} | {n} | {', '.join(map(str, counts))} | {run} |")
    return "\n".join(lines) + "\n"


PLOTTED = ("jax", "cupy", "cupy-hand", "torch", "torch.compile")  # the peers drawn beside fusec, where measured


def _to_tolerance_ms(row) -> dict:
    """The row's times to a tolerance by who ran: ``to_tolerance.ms`` (runs since the kept
    stepper), ``to_tolerance_ms`` in the H100 run before it."""
    return row.get("to_tolerance", {}).get("ms") or row.get("to_tolerance_ms") or {}


def plot(rows, device: str, path: Path) -> bool:
    """Per iteration (with the floor) and to a tolerance against n, fusec and its peers, one
    panel each per precision, log scales; False where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    dtypes = sorted({r["dtype"] for r in rows})
    fig, axes = plt.subplots(len(dtypes), 2, figsize=(11, 4.2 * len(dtypes)), squeeze=False)
    colours = {name: f"C{i}" for i, name in enumerate(sorted({r["solver"] for r in rows}))}
    styles = {"fusec": "-", "jax": "--", "cupy": ":", "cupy-hand": "-.", "torch": (0, (1, 3)),
              "torch.compile": (0, (5, 1, 1, 1))}
    for row_axes, dtype in zip(axes, dtypes):
        mine = [r for r in rows if r["dtype"] == dtype]
        for solver in sorted({r["solver"] for r in mine}):
            by_n = sorted((r for r in mine if r["solver"] == solver), key=lambda r: r["n"])
            ns = [r["n"] for r in by_n]
            for who in ("fusec",) + PLOTTED:
                per = [(r["n"], r["us_per_iteration"].get(who)) for r in by_n]
                per = [(n, v) for n, v in per if isinstance(v, (int, float))]
                if per:
                    row_axes[0].plot(*zip(*per), linestyle=styles[who], marker="o", markersize=3,
                                     color=colours[solver], label=f"{solver} {who}")
                tol = [(r["n"], _to_tolerance_ms(r).get(who)) for r in by_n]
                tol = [(n, v) for n, v in tol if isinstance(v, (int, float))]
                if tol:
                    row_axes[1].plot(*zip(*tol), linestyle=styles[who], marker="o", markersize=3,
                                     color=colours[solver], label=f"{solver} {who}")
            row_axes[0].plot(ns, [r["floor_us"] for r in by_n], color=colours[solver], linewidth=0.6, alpha=0.5)
        for ax, what in zip(row_axes, ("us per iteration (thin: the one-pass floor)", "ms to rtol 1e-5")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("n (A is n x n)")
            ax.set_ylabel(what)
            ax.set_title(f"{device}, {dtype}", fontsize=9)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=360.0, help="seconds; sizes not started by then are skipped")
    parser.add_argument("--dtypes", default="float32,float64", help="precisions (default: %(default)s)")
    parser.add_argument("--n", default="1024,4096,16384", help="sizes n of the n x n systems (default: %(default)s)")
    parser.add_argument("--n32", default="32768", help="sizes run in float32 only")
    parser.add_argument("--solvers", default="cg,bicg,bicgstab", help="comma-separated (default: %(default)s)")
    parser.add_argument("--peers", default="cupy-hand,torch,jax,cupy,torch.compile",
                        help="comma-separated subset of %(default)s")
    parser.add_argument("--repeat", type=int, default=20,
                        help="timed runs a median is taken over (default: %(default)s)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder of the table, JSON and plot")
    parser.add_argument("--name", default=None, help="file name without extension (default: <gpu>-solvers)")
    parser.add_argument("--iterations-on-cpu", action="store_true",
                        help="no GPU: print the iterations each solver needs on the to-tolerance systems")
    parser.add_argument("--seeds", default="0,1,2", help="with --iterations-on-cpu: the systems drawn")
    parser.add_argument("--plot-from", metavar="JSON", default=None,
                        help="no GPU: draw the plot of a run's JSON (beside it, .png); needs matplotlib")
    args = parser.parse_args(argv)
    args.solvers = args.solvers.split(",")
    cases = [(d, int(n)) for d in args.dtypes.split(",") for n in args.n.split(",") if n]
    cases += [("float32", int(n)) for n in args.n32.split(",") if n and "float32" in args.dtypes]
    cases.sort(key=lambda c: (c[0] != "float32", c[1]))
    if args.plot_from:
        source = Path(args.plot_from)
        try:
            data = json.loads(source.read_text())
            rows, device = data["rows"], data["device"]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise SystemExit(f"bench.solvers: --plot-from {source}: not a run's JSON ({type(exc).__name__}: {exc})"
                             ) from None
        if not plot(rows, device, source.with_suffix(".png")):
            raise SystemExit("bench.solvers: --plot-from needs matplotlib")
        print(f"wrote {source.with_suffix('.png')}")
        return 0
    if args.iterations_on_cpu:
        print(iterations_on_cpu(cases, args.solvers, [int(s) for s in args.seeds.split(",")]))
        return 0
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU with CuPy
    began = time.monotonic()
    import cupy
    peers = [p for p in args.peers.split(",") if p]
    if "jax" in peers:  # only then: with --peers "" fusec is timed in a process JAX never entered
        try:
            import jax
            jax.config.update("jax_enable_x64", True)
        except ImportError:
            pass
    from bench.peers import device_name
    device = device_name(cupy)
    bandwidth = copy_bandwidth(cupy)
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
    plotted = plot(rows, device, out / f"{name}.png")
    print(f"wrote {out / name}.md and .json{', .png' if plotted else ''} ({time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
