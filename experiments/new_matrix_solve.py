"""What does a solve cost on a matrix the solver has not seen? (GPU)

    python -m experiments.new_matrix_solve

bench.solvers' "new A" column times a solve with no kept stepper at all. A user with many
matrices of one shape (a Newton method, time steps) keeps the stepper but passes new memory
each time, and the graphs captured on the old A cannot be replayed (they hold its address):
the stepper warms its sets with plain calls and captures again. This times CG and BiCGStab
(fp32, n = 1024, rtol 1e-5, CuPy) on the same A and on a new A each solve (24 copies of one
matrix), then profiles 10 new-A solves with cProfile (cumulative and own time), printed.
"""
import cProfile
import io
import pstats
import time

import numpy as np


def main() -> None:
    import cupy

    import fusec.solvers as fs

    n = 1024
    rng = np.random.default_rng(0)
    m = rng.uniform(-0.5, 0.5, (n, n)).astype(np.float32)
    A0 = ((m + m.T) * 0.05 / np.sqrt(n) + np.diag(np.linspace(1, 10, n))).astype(np.float32)
    mats = [cupy.asarray(A0) for _ in range(24)]
    b = cupy.asarray(rng.uniform(-0.5, 0.5, n).astype(np.float32))
    for name in ("cg", "bicgstab"):
        solve = getattr(fs, name)
        for _ in range(2):  # compiled, captured, warm
            solve(mats[0], b, rtol=1e-5)
        cupy.cuda.Device().synchronize()
        t = time.perf_counter()
        for _ in range(10):
            solve(mats[0], b, rtol=1e-5)
        cupy.cuda.Device().synchronize()
        same = (time.perf_counter() - t) / 10 * 1e3
        t = time.perf_counter()
        for i in range(1, 11):
            solve(mats[i], b, rtol=1e-5)
        cupy.cuda.Device().synchronize()
        new = (time.perf_counter() - t) / 10 * 1e3
        print(f"{name} n={n} fp32: same A {same:.3f} ms a solve, new A each solve {new:.3f} ms", flush=True)
        pr = cProfile.Profile()
        pr.enable()
        for i in range(11, 21):
            solve(mats[i], b, rtol=1e-5)
        cupy.cuda.Device().synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
        print(f"NEW-A PROFILE {name} (10 solves)")
        print(s.getvalue())
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20)
        print(s.getvalue())


if __name__ == "__main__":
    main()
