"""A BiCG solve written with CuPy (cuBLAS) calls, replaced by fusec.solvers.bicg.

    python examples/solver_bicg.py [--n 4096] [--dtype float32|float64] [--rtol R]

The loop below is how BiCG is usually written on the GPU: A @ p and A.T @ pt as
two cuBLAS gemv calls (two passes over A), dots and axpys, and every scalar read
by the host, which waits for the GPU each time. fusec.solvers.bicg runs the same
iteration as one compiled script whose plan reads A once for both products, and
keeps the loop on the GPU. Both solve one well-conditioned nonsymmetric system to
the same rtol; the example checks that both converged (info 0, and the true
residual ||b - A x|| / ||b|| within a small factor of rtol), that their answers
agree, and prints the time of each whole solve (CUDA events, after a warm-up
solve each: fusec's first solve of a size compiles and captures its graphs).
Exits with status 1 and says which check failed where one does.
"""

from __future__ import annotations

import argparse
import math

RTOL = {"float32": 1e-5, "float64": 1e-10}
MAXITER = 1000  # the system converges in tens of iterations
SLACK = 10  # the true residual may exceed the updated one the stopping rule reads
KAPPA = 15  # a bound on cond(A) of the system below: see make_system


def relative_tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number above 0 and below 1, got {text!r}")
    return value


def make_system(cp, n: int, dtype: str):
    """A = diag(1..10) + a random part, b random, on the GPU. The random part has entries
    uniform in +-0.25/sqrt(n), so its norm is about 0.3 (2 sigma sqrt(n)): by Weyl's
    inequality A's singular values lie within that of 1..10, and cond(A) < KAPPA."""
    rng = cp.random.RandomState(n)
    A = rng.uniform(-0.5, 0.5, (n, n), dtype=dtype) * (0.5 / math.sqrt(n))
    A += cp.diag(cp.linspace(1, 10, n, dtype=dtype))
    b = rng.uniform(-0.5, 0.5, n, dtype=dtype)
    return A, b


def cupy_bicg(cp, A, b, rtol: float, maxiter: int):
    """BiCG from x = 0 with the stopping rule of fusec.solvers (and SciPy): ||r|| <= rtol ||b||
    on the residual the iteration updates. Returns (x, info, iterations), info as SciPy's."""
    x = cp.zeros_like(b)
    r = b.copy()
    rt, p, pt = r.copy(), r.copy(), r.copy()
    tol2 = rtol ** 2 * float(b @ b)  # float(): the host waits for the GPU, here and below
    rho = float(rt @ r)
    for k in range(1, maxiter + 1):
        q = A @ p  # gemv: one pass over A
        qt = A.T @ pt  # gemv transposed: another
        pq = float(pt @ q)
        if pq == 0 or rho == 0:
            return x, -k, k  # a breakdown: x is the iterate before
        alpha = rho / pq
        x += alpha * p
        r -= alpha * q
        rt -= alpha * qt
        if float(r @ r) <= tol2:
            return x, 0, k
        rho, rho_before = float(rt @ r), rho
        beta = rho / rho_before
        p = r + beta * p
        pt = rt + beta * pt
    return x, maxiter, maxiter


def timed(cp, solve):
    """``solve()``'s result and its milliseconds on the GPU's clock, after a warm-up solve. The
    events are on the current stream, which fusec.solvers orders its own stream between."""
    solve()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    result = solve()
    end.record()
    end.synchronize()
    return result, cp.cuda.get_elapsed_time(start, end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="the system's size (default %(default)s)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--rtol", type=relative_tolerance,
                        help=f"relative tolerance (default {RTOL['float32']:g} for float32, "
                             f"{RTOL['float64']:g} for float64)")
    args = parser.parse_args()
    if args.n < 1:
        parser.error(f"argument --n: must be a whole number >= 1, got {args.n}")
    rtol = RTOL[args.dtype] if args.rtol is None else args.rtol

    import cupy as cp  # here, not above: --help needs no GPU framework

    import fusec.solvers

    A, b = make_system(cp, args.n, args.dtype)
    A64, b64 = A.astype(cp.float64), b.astype(cp.float64)

    def true_residual(x) -> float:
        return float(cp.linalg.norm(b64 - A64 @ x.astype(cp.float64)) / cp.linalg.norm(b64))

    (x_cupy, info_cupy, iterations), ms_cupy = timed(cp, lambda: cupy_bicg(cp, A, b, rtol, MAXITER))
    (x_fusec, info_fusec), ms_fusec = timed(cp, lambda: fusec.solvers.bicg(A, b, rtol=rtol, maxiter=MAXITER))
    res_cupy, res_fusec = true_residual(x_cupy), true_residual(x_fusec)
    difference = float(cp.linalg.norm(x_fusec.astype(cp.float64) - x_cupy.astype(cp.float64))
                       / cp.linalg.norm(x_cupy.astype(cp.float64)))
    # each answer's true residual is within SLACK rtol, so they differ by at most cond(A) times the sum
    agree = 2 * KAPPA * SLACK * rtol

    print(f"BiCG, n = {args.n}, {args.dtype}, rtol {rtol:g} (nonsymmetric A, cond(A) < {KAPPA})")
    print(f"CuPy loop:          info {info_cupy}, {iterations} iterations, true residual {res_cupy:.2e},"
          f" {ms_cupy:.3f} ms")
    print(f"fusec.solvers.bicg: info {info_fusec}, true residual {res_fusec:.2e}, {ms_fusec:.3f} ms")
    print(f"answers differ by {difference:.2e} relative (at most {agree:.1e} allowed)")
    print(f"speed-up: {ms_cupy / ms_fusec:.2f}x (CuPy loop time / fusec.solvers.bicg time)")

    failures = [f"{who} did not converge: info {info}" for who, info in
                (("the CuPy loop", info_cupy), ("fusec.solvers.bicg", info_fusec)) if info != 0]
    failures += [f"{who}'s true residual {res:.2e} exceeds {SLACK} rtol = {SLACK * rtol:.1e}" for who, res in
                 (("the CuPy loop", res_cupy), ("fusec.solvers.bicg", res_fusec)) if not res <= SLACK * rtol]
    if not difference <= agree:
        failures.append(f"the answers differ by {difference:.2e} relative, more than {agree:.1e}")
    if failures:
        raise SystemExit("FAILED: " + "; ".join(failures))
    print("all checks passed")


if __name__ == "__main__":
    main()
