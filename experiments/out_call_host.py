"""What does a warm call cost the host, by how it is made? (BiCGK fp32, one GPU)

An application embedding fusec calls a program on its own stream, into ``out=`` arrays
(docs/python-api.md). This issues 2000 warm calls back to back, five rounds, and reports the
best round's host time to issue a call and to issue and wait: a plain call (the C extension's
warm call), with ``out=``, ``run`` with ``out=`` and the current stream's handle, ``run`` with
that handle alone, ``run`` with ``out=`` on another (non-blocking) stream; then plain and
``out=`` calls on PyTorch tensors.

    python -m experiments.out_call_host [--n N] [--calls K]

Answer (2026-11-30, one H200, n = 1024): a call with ``out=`` on a stream that is not the
framework's current one took 121.6 µs to issue, every call, against 14-16 µs on the current
stream: prepared calls were made only on the current stream, where they allocate results, and
such a call allocates none. Prepared on any stream when ``out=`` holds every result: 14.9 µs.
With calls with ``out=`` in the C extension too: 7.1-8.5 µs, about a plain warm call (7.8 on that
machine) (experiments/results/h200-out-call-host.md).
"""

from __future__ import annotations

import argparse
import time

ROUNDS = 5
WARM = 50


def check_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1024, help="A is n x n (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=2000, help="calls a round (default: %(default)s)")
    args = parser.parse_args(argv)
    for flag in ("n", "calls"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} {getattr(args, flag)}: 1 or more")
    return args


def best_round(call, synchronize, calls: int) -> tuple[float, float]:
    """(issue, issue and wait) µs a call, of the round whose issuing was fastest."""
    for _ in range(WARM):
        call()
    synchronize()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        issued = time.perf_counter()
        synchronize()
        done = time.perf_counter()
        rounds.append((1e6 * (issued - start) / calls, 1e6 * (done - start) / calls))
    return min(rounds)


def main(argv=None) -> None:
    args = check_arguments(argv)
    n, calls = args.n, args.calls
    import cupy

    import fusec

    prog = fusec.compile("scripts/bicgk.script", dtype="float32", sizes={"n": n})
    A = cupy.random.rand(n, n, dtype=cupy.float32)
    p, r = (cupy.random.rand(n, dtype=cupy.float32) for _ in range(2))
    out = {"q": cupy.empty(n, cupy.float32), "s": cupy.empty(n, cupy.float32)}
    arrays = {"A": A, "p": p, "r": r}
    current = cupy.cuda.get_current_stream()
    other = cupy.cuda.Stream(non_blocking=True)
    cases = [
        ("CuPy, plain", lambda: prog(**arrays), current.synchronize),
        ("CuPy, out=", lambda: prog(**arrays, out=out), current.synchronize),
        ("CuPy, run(out=, stream=current handle)", lambda: prog.run(arrays, out=out, stream=current.ptr),
         current.synchronize),
        ("CuPy, run(stream=current handle)", lambda: prog.run(arrays, stream=current.ptr), current.synchronize),
        ("CuPy, run(out=, stream=another stream)", lambda: prog.run(arrays, out=out, stream=other),
         other.synchronize),
    ]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tensors = {"A": torch.rand(n, n, device="cuda"), "p": torch.rand(n, device="cuda"),
                   "r": torch.rand(n, device="cuda")}
        given = {"q": torch.empty(n, device="cuda"), "s": torch.empty(n, device="cuda")}
        cases += [("PyTorch, plain", lambda: prog(**tensors), torch.cuda.synchronize),
                  ("PyTorch, out=", lambda: prog(**tensors, out=given), torch.cuda.synchronize)]
    print(f"BiCGK fp32 n = {n}, {calls} calls a round, best of {ROUNDS}; host µs a call")
    print("| call | issue | issue and wait |\n|---|---:|---:|")
    for label, call, synchronize in cases:
        issue, whole = best_round(call, synchronize, calls)
        print(f"| {label} | {issue:.1f} | {whole:.1f} |", flush=True)


if __name__ == "__main__":
    main()
