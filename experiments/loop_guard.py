"""Does guarding a GPU loop body's second iteration pay? (GPU)

    python -m experiments.loop_guard [--cases cg:float64:16384,...] [--repeat 15]

The GPU loop's body is two iterations; unguarded, a solve that stops after an odd number of
iterations runs one more (H200, bench.solvers: fp64 CG n = 16384 needs 29 iterations of
477.7 us and ran 30). Guarded, an IF node nested in the
body runs the second only while the loop goes on, at the cost of a conditional node a body
(``fusec.solvers.device_loop.DeviceLoop(guarded=...)``; solves guard where an iteration reads
at least ``device_loop.GUARD_BYTES`` of A).

1. The loop alone: two steppers on the same system, one guarded, one not, each launching its
   loop for k iterations (``rtol = 0``: k = --k, one odd and one even count) from the same
   start, interleaved (off, on, off, on ...), host clock from before the launch to the read
   of its record. The even count runs the same iterations either way: the difference is the
   guard's cost; the odd count saves an iteration where guarded.
2. Whole solves to tolerance (rtol 1e-5 fp32, 1e-8 fp64; bench.solvers' better-conditioned
   system, eigenvalues in about 1..10), the stepper kept, in blocks of --repeat solves per
   setting, alternated three times; with the iterations needed, and the survey alone.

Medians. A system that does not converge within k iterations (bench.solvers' hard one) for 1.

``--what dependent`` compares instead, both unguarded, the loop's small kernels (the tests and
the checkpoint's copy) launched plain (off) and as programmatic dependent launches (on: each
starts while the kernel before it ends, and waits for it), the loop captured so.
"""
import argparse
import statistics
import time

DEPENDENT = None  # the loop kernels' dependent launches where the guard is compared: the GPU's own


def setting(what: str, on: bool):
    """The GPU loop of one side of the comparison, made ready: its make_loop (the kernels'
    dependent launches set as asked, for what is captured or run next)."""
    import functools

    from fusec.solvers import device_loop, kernels
    global DEPENDENT
    if DEPENDENT is None:  # before any is set here
        DEPENDENT = kernels.loaded().dependent
    kernels.loaded().dependent = on if what == "dependent" else DEPENDENT
    return functools.partial(device_loop.DeviceLoop, guarded=on if what == "guard" else False)


def loop_alone(cupy, method, A, b, ks, repeat, what) -> dict:
    from fusec.solvers.api import program_for
    from fusec.solvers.arrays import arrays_for
    from fusec.solvers.stepper import ProgramStepper
    arrays = arrays_for("cupy")
    times = {}
    with arrays.stream():
        start = method.start(cupy.zeros_like(b), b, lambda a: a)
        steppers = {}
        for on in (False, True):
            stepper = ProgramStepper(program_for(method.name, str(b.dtype), b.shape[0]), method, arrays, A, start,
                                     make_loop=setting(what, on))
            stepper.advance(2)  # warms both sets
            stepper.loop(0.0, 2)  # makes the loop (its guard chosen now) and captures it from set 0
            steppers[on] = stepper
        for _ in range(repeat + 1):  # the first round warms
            for k in ks:
                for guard, stepper in steppers.items():
                    setting(what, guard)
                    stepper.begin(A, start)
                    cupy.cuda.Device().synchronize()
                    t = time.perf_counter()
                    done, _, _ = stepper.loop(0.0, k)
                    times.setdefault((guard, k), []).append(time.perf_counter() - t)
                    assert done == k
    return {key: statistics.median(values[1:]) * 1e6 for key, values in times.items()}


def to_tolerance(cupy, method, A, b, rtol, repeat, what) -> dict:
    from fusec.solvers import api
    sync = cupy.cuda.Device().synchronize
    times, iterations = {}, {}
    for _ in range(3):
        for guard in (False, True):
            loop = setting(what, guard)
            api.forget_kept_steppers()
            api.solve_with_outcome(method, A, b, rtol=rtol, make_loop=loop)  # warms, captures
            for _ in range(repeat):
                sync()
                t = time.perf_counter()
                _, outcome = api.solve_with_outcome(method, A, b, rtol=rtol, make_loop=loop)
                sync()
                times.setdefault(guard, []).append(time.perf_counter() - t)
                iterations[guard] = outcome.iterations
    return {guard: (statistics.median(values) * 1e6, iterations[guard]) for guard, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="cg:float32:1024,bicgstab:float32:1024,cg:float32:4096,"
                                           "cg:float32:16384,bicgstab:float32:16384,cg:float64:16384")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--k", default="29,30", help="the loop's iterations in part 1: an odd and an even count")
    parser.add_argument("--what", choices=("guard", "dependent"), default="guard", help="what is off and on")
    args = parser.parse_args()
    import cupy

    from bench.solvers import systems  # (hard, easy, b): bench.solvers' systems
    from fusec.solvers import checks
    from fusec.solvers.arrays import arrays_for
    from fusec.solvers.methods import METHODS
    ks = tuple(int(k) for k in args.k.split(","))
    sync = cupy.cuda.Device().synchronize
    print(f"GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}", flush=True)
    print("\n| solver | dtype | n | " + " | ".join(f"k={k} off us | k={k} on us" for k in ks)
          + " | to tolerance off us | on us | iterations | survey us |")
    print("|---|---|---:|" + "---:|" * (2 * len(ks) + 4))
    for case in args.cases.split(","):
        name, dtype, n = case.split(":")
        n = int(n)
        hard, easy, b = systems(cupy, n, dtype)
        method = METHODS[name]
        loop = loop_alone(cupy, method, hard, b, ks, args.repeat, args.what)
        rtol = 1e-5 if dtype == "float32" else 1e-8
        whole = to_tolerance(cupy, method, easy, b, rtol, args.repeat, args.what)
        setting(args.what, True)
        arrays = arrays_for("cupy")
        survey = []
        for _ in range(args.repeat):
            sync()
            t = time.perf_counter()
            checks.check(arrays, easy, b, None, rtol, 0.0, None, None)
            survey.append(time.perf_counter() - t)
        cells = " | ".join(f"{loop[(False, k)]:.1f} | {loop[(True, k)]:.1f}" for k in ks)
        print(f"| {name} | {dtype} | {n} | {cells} | {whole[False][0]:.1f} | {whole[True][0]:.1f} "
              f"| {whole[True][1]} | {statistics.median(survey) * 1e6:.1f} |", flush=True)
        del hard, easy, b
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
