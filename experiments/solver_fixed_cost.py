"""Where does a small solve's time go? (GPU)

    python -m experiments.solver_fixed_cost [--cases bicgstab:float32:1024,...] [--repeat 30]

QUESTION (issue 46). At n = 1024 fp32 a BiCGStab iteration takes about 17 us (bench.solvers,
50 iterations replayed), yet a solve to rtol 1e-5 (13 iterations) took 0.63-0.78 ms on the
H200, at or behind JAX's 0.58-0.77: most of a small solve is not its iterations. Which phase
holds the rest?

METHOD. bench.solvers' systems (the better-conditioned one to tolerance; the hard one, which
does not converge, for a solve cut at ``maxiter = 1``), CuPy arrays, the stepper kept from the
solve before (as a solver inside an application runs), each solve two ways: started on the GPU
(as fusec does since the start kernel: the survey launched, one launch writing the loop's record
and first state from it, the loop, one read) and the host's start (as before it, forced by
leaving out ``api._solve_started``: the survey read, the tolerance computed by the host, x0's
zeros, the stepper's ``begin`` copying the start into its arrays, the loop). Each phase is
wrapped with a device synchronisation on each side and timed by the host clock. Medians of
``--repeat`` solves after two warm ones; the whole solve timed alone (no phase synchronised)
beside them. JAX is not imported for those: the phases are fusec's own.

Then (``--jax``, where JAX imports) the first case's maxiter-1 solve, unsynchronised, and what
the host pays for a tiny CuPy copy and its read, the process's CPU time while its thread
sleeps and its threads, with the current context's scheduling flags (``cuCtxGetFlags``, the
three low bits: 0 auto, 1 spin, 2 yield, 4 blocking sync): before JAX, after importing it,
after one jitted operation, after JAX's solver: in one process that had run JAX's solver,
fusec's maxiter-1 solve measured 976 us against 494 without JAX (one H200, 2026-11-29), and
bench.solvers times both in one process.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import statistics
import time

PHASES = (("checks", "arguments", "the arguments"), ("checks", "surveyed", "the survey (launch, read)"),
          ("arrays", "launch_survey", "the survey's launch"), ("api", "program_for", "the program's lookup"),
          ("arrays", "zeros_like", "x0's zeros"), ("stepper", "begin", "the stepper's begin"),
          ("stepper", "start_on_device", "the start and the loop (one launch each, one read)"),
          ("driver", "run", "the loop (driver.run)"), ("driver", "resume", "the loop's rest (driver.resume)"),
          ("arrays", "copy", "the copy of x"))
WAYS = ("started on the GPU", "the host's start")


def instrument(sync, spent):
    """Wrap each phase's function so that it records its time, synchronised on each side."""
    from fusec.solvers import api, checks, driver
    from fusec.solvers.arrays import CupyArrays
    from fusec.solvers.stepper import ProgramStepper
    owners = {"checks": checks, "api": api, "arrays": CupyArrays, "stepper": ProgramStepper, "driver": driver}
    for key, name, label in PHASES:
        owner = owners[key]
        function = getattr(owner, name)

        @functools.wraps(function)
        def timed(*args, __function=function, __label=label, **kwargs):
            sync()
            start = time.perf_counter()
            try:
                return __function(*args, **kwargs)
            finally:
                sync()
                spent[__label].append((time.perf_counter() - start) * 1e6)
        setattr(owner, name, timed)


@contextlib.contextmanager
def way(name: str):
    """Solves started on the GPU (a kept stepper's, as fusec does), or the host's start (the
    survey read, then the stepper's begin and the loop: fusec before the GPU's start)."""
    from fusec.solvers import api
    started = api._solve_started
    if name == WAYS[1]:
        api._solve_started = lambda *args, **kwargs: None
    try:
        yield
    finally:
        api._solve_started = started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="bicgstab:float32:1024,cg:float32:1024,bicgstab:float64:1024")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--jax", action=argparse.BooleanOptionalAction, default=True,
                        help="time the first case's maxiter-1 solve as JAX comes into the process")
    args = parser.parse_args()
    cases = [_case(parser, case) for case in args.cases.split(",")]
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat}: 1 or more")
    import cupy

    from bench.solvers import systems, wall_us
    from fusec.solvers import api
    from fusec.solvers.methods import METHODS
    sync = cupy.cuda.Device().synchronize
    print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)

    def whole(solve) -> float:
        return wall_us(solve, sync, args.repeat)

    rows = []  # (name, dtype, n, solve label, way, iterations, whole solve us, the solve)
    for name, dtype, n in cases:
        hard, easy, b = systems(cupy, n, dtype)
        rtol = 1e-5 if dtype == "float32" else 1e-8
        for label, A, maxiter in (("to tolerance", easy, 10 * n), ("maxiter 1", hard, 1)):
            def solve(name=name, A=A, b=b, rtol=rtol, maxiter=maxiter):
                return api.solve_with_outcome(METHODS[name], A, b, rtol=rtol, maxiter=maxiter)[1]
            for how in WAYS:
                with way(how):
                    outcome = solve()
                    solve()
                    rows.append((name, dtype, n, label, how, outcome.iterations, whole(solve), solve))
    spent = collections.defaultdict(list)
    instrument(sync, spent)
    for k, row in enumerate(rows):
        solve = row[-1]
        with way(row[4]):
            for _ in range(2):
                solve()
            spent.clear()
            synced = whole(solve)
        rows[k] = row[:7] + ({lab: statistics.median(v) for lab, v in spent.items()} | {"synced": synced},)
    labels = [label for _, _, label in PHASES if any(label in row[-1] for row in rows)]
    print("\n| solver | dtype | n | solve | the start | iterations | whole solve us | with each phase synced us | "
          + " | ".join(labels) + " |")
    print("|---|---|---:|---|---|---:|---:|---:|" + "---:|" * len(labels))
    for name, dtype, n, label, how, iterations, alone, phases in rows:
        cells = " | ".join(f"{phases[lab]:.0f}" if lab in phases else "" for lab in labels)
        print(f"| {name} | {dtype} | {n} | {label} | {how} | {iterations} | {alone:.0f} | {phases['synced']:.0f}"
              f" | {cells} |", flush=True)
    if args.jax:
        beside_jax(cupy, cases[0], whole)


def _case(parser, text: str) -> tuple[str, str, int]:
    """``solver:dtype:n`` of --cases, checked: a solver of fusec.solvers, float32 or float64, n >= 2."""
    from fusec.solvers.methods import METHODS
    parts = text.split(":")
    if (len(parts) != 3 or parts[0] not in METHODS or parts[1] not in ("float32", "float64")
            or not parts[2].isdigit() or int(parts[2]) < 2):
        parser.error(f"--cases {text!r}: pass solver:dtype:n, solver one of {', '.join(sorted(METHODS))},"
                     " dtype float32 or float64, n a whole number of 2 or more")
    return parts[0], parts[1], int(parts[2])


def scheduling_flags() -> int:
    """The current CUDA context's scheduling flags (CU_CTX_SCHED_MASK bits)."""
    import ctypes
    flags = ctypes.c_uint(0)
    ctypes.CDLL("libcuda.so.1").cuCtxGetFlags(ctypes.byref(flags))
    return flags.value & 7


def host_probe(cupy, whole) -> dict:
    """What the host pays now: a tiny CuPy copy and its read (us, median), the process's CPU
    time while this thread sleeps 0.2 s (ms: other threads' work, spinning or not), and its
    threads."""
    import os
    x = cupy.zeros(16)
    copy_read = whole(lambda: x.copy().get())
    before = os.times()
    time.sleep(0.2)
    after = os.times()
    busy = (after.user - before.user + after.system - before.system) * 1e3
    return {"copy_read": copy_read, "busy": busy, "threads": len(os.listdir("/proc/self/task")),
            "flags": scheduling_flags()}


def beside_jax(cupy, case: tuple[str, str, int], whole) -> None:
    """A case's maxiter-1 solve (phases not synchronised) and the host's costs (:func:`host_probe`)
    before JAX, after importing it, after one jitted array operation, after JAX's solver."""
    from bench.solvers import systems
    from fusec.solvers import api
    from fusec.solvers.methods import METHODS
    name, dtype, n = case
    hard, _, b = systems(cupy, n, dtype)
    solve = lambda: api.solve_with_outcome(METHODS[name], hard, b, rtol=1e-30, maxiter=1)  # noqa: E731
    solve()
    steps = [("nothing of JAX", lambda: None)]
    try:
        import jax
        from jax.scipy.sparse import linalg
    except ImportError as exc:
        print(f"\nJAX not importable ({exc}): its part left out")
        return
    if not hasattr(linalg, name):
        print(f"\nJAX has no {name}: its part left out")
        return
    jA, jb = jax.dlpack.from_dlpack(hard), jax.dlpack.from_dlpack(b)
    solver = jax.jit(lambda A, b: getattr(linalg, name)(A, b, tol=0.0, atol=0.0, maxiter=5)[0])
    steps += [("import jax, the arrays shared", lambda: None),
              ("one jitted operation", lambda: jax.jit(lambda v: v * 2)(jb).block_until_ready()),
              ("JAX's solver", lambda: solver(jA, jb).block_until_ready())]
    print(f"\n{name} {dtype} n = {n}, maxiter 1, whole solve (us) and the host's costs, as JAX comes in:\n")
    print("| after | fusec's solve us | a CuPy copy and read us | process CPU ms over 0.2 s asleep | threads |"
          " scheduling flags |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, step in steps:
        step()
        probe = host_probe(cupy, whole)
        print(f"| {label} | {whole(solve):.0f} | {probe['copy_read']:.1f} | {probe['busy']:.1f} | {probe['threads']}"
              f" | {probe['flags']} |", flush=True)


if __name__ == "__main__":
    main()
