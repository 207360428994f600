"""Where does a small solve's time go? (GPU)

    python -m experiments.solver_fixed_cost [--cases bicgstab:float32:1024,...] [--repeat 30]

QUESTION (issue 46). At n = 1024 fp32 a BiCGStab iteration takes about 17 us (bench.solvers,
50 iterations replayed), yet a solve to rtol 1e-5 (13 iterations) took 0.63-0.78 ms on the
H200, at or behind JAX's 0.58-0.77: most of a small solve is not its iterations. Which phase
holds the rest?

METHOD. bench.solvers' systems (the better-conditioned one to tolerance; the hard one, which
does not converge, for a solve cut at ``maxiter = 1``), CuPy arrays, the stepper kept from the
solve before (as a solver inside an application runs). Each phase of
``fusec.solvers.api.solve_with_outcome`` is wrapped with a device synchronisation on each side
and timed by the host clock: the checks (the survey: one kernel over A, b and x0, one read),
the program's lookup, x0's zeros, the stepper's ``begin`` (copying the start into its own
arrays), ``driver.run`` (the GPU loop: one launch, one read), the copy of x. Medians of
``--repeat`` solves after two warm ones; the whole solve timed alone (no phase synchronised)
beside them. JAX is not imported for those: the phases are fusec's own.

Then (``--jax``, where JAX imports) the first case's maxiter-1 solve, unsynchronised, timed
before and after JAX's jitted solver of the same name has run once in this process, with the
current context's scheduling flags (``cuCtxGetFlags``, the three low bits: 0 auto, 1 spin,
2 yield, 4 blocking sync) each time: in one process that had run JAX's solver, fusec's
maxiter-1 solve measured 625-691 us against 354 without JAX (one H200), and bench.solvers
times both in one process.
"""

from __future__ import annotations

import argparse
import collections
import functools
import statistics
import time

PHASES = (("checks", "check", "the checks (survey)"), ("api", "program_for", "the program's lookup"),
          ("zeros", "zeros_like", "x0's zeros"), ("stepper", "begin", "the stepper's begin"),
          ("driver", "run", "the loop (driver.run)"), ("copy", "copy", "the copy of x"))


def instrument(sync, spent):
    """Wrap each phase's function so that it records its time, synchronised on each side."""
    from fusec.solvers import api, checks, driver
    from fusec.solvers.arrays import CupyArrays
    from fusec.solvers.stepper import ProgramStepper
    owners = {"checks": checks, "api": api, "zeros": CupyArrays, "stepper": ProgramStepper, "driver": driver,
              "copy": CupyArrays}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="bicgstab:float32:1024,cg:float32:1024,bicgstab:float64:1024")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--jax", action=argparse.BooleanOptionalAction, default=True,
                        help="time the first case's maxiter-1 solve before and after JAX's solver runs")
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

    rows = []  # (name, dtype, n, solve label, iterations, whole solve us, the solve)
    for name, dtype, n in cases:
        hard, easy, b = systems(cupy, n, dtype)
        rtol = 1e-5 if dtype == "float32" else 1e-8
        for label, A, maxiter in (("to tolerance", easy, 10 * n), ("maxiter 1", hard, 1)):
            def solve(name=name, A=A, b=b, rtol=rtol, maxiter=maxiter):
                return api.solve_with_outcome(METHODS[name], A, b, rtol=rtol, maxiter=maxiter)[1]
            outcome = solve()
            solve()
            rows.append((name, dtype, n, label, outcome.iterations, whole(solve), solve))
    spent = collections.defaultdict(list)
    instrument(sync, spent)
    for k, row in enumerate(rows):
        solve = row[-1]
        for _ in range(2):
            solve()
        spent.clear()
        synced = whole(solve)
        rows[k] = row[:6] + ({lab: statistics.median(v) for lab, v in spent.items()} | {"synced": synced},)
    labels = [label for _, _, label in PHASES]
    print("\n| solver | dtype | n | solve | iterations | whole solve us | with each phase synced us | "
          + " | ".join(labels) + " |")
    print("|---|---|---:|---|---:|---:|---:|" + "---:|" * len(labels))
    for name, dtype, n, label, iterations, alone, phases in rows:
        cells = " | ".join(f"{phases.get(lab, 0.0):.0f}" for lab in labels)
        print(f"| {name} | {dtype} | {n} | {label} | {iterations} | {alone:.0f} | {phases['synced']:.0f} | {cells} |",
              flush=True)
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


def beside_jax(cupy, case: tuple[str, str, int], whole) -> None:
    """A case's maxiter-1 solve (phases not synchronised) before and after JAX's solver ran."""
    try:
        import jax
        from jax.scipy.sparse import linalg
    except ImportError as exc:
        print(f"\nJAX not importable ({exc}): its part left out")
        return
    from bench.solvers import systems
    from fusec.solvers import api
    from fusec.solvers.methods import METHODS
    name, dtype, n = case
    if not hasattr(linalg, name):
        print(f"\nJAX has no {name}: its part left out")
        return
    hard, _, b = systems(cupy, n, dtype)
    solve = lambda: api.solve_with_outcome(METHODS[name], hard, b, rtol=1e-30, maxiter=1)  # noqa: E731
    solve()
    before, flags_before = whole(solve), scheduling_flags()
    run = jax.jit(lambda A, b: getattr(linalg, name)(A, b, tol=0.0, atol=0.0, maxiter=5)[0])
    run(jax.dlpack.from_dlpack(hard), jax.dlpack.from_dlpack(b)).block_until_ready()
    after, flags_after = whole(solve), scheduling_flags()
    print(f"\n{name} {dtype} n = {n}, maxiter 1, whole solve: {before:.0f} us before JAX's solver ran in this process"
          f" (context scheduling flags {flags_before}), {after:.0f} us after (flags {flags_after})", flush=True)


if __name__ == "__main__":
    main()
