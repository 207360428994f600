"""Would one launch with one grid barrier, the matrix held on chip across it, beat fusec where the
matrix is about the chip's size? Hand-written kernels, timed beside fusec's tuned plans.

At fp32 n = 4096 GEMVER's matrix is 64 MB: past L2's 50 MB, so its tuned plan (two kernels, or a
striped one) reads B from DRAM a second time, 1.67x its floor on the GPU and 1.84x with the host
(experiments/results/h100-peers-n4096.md), against the 1.5x target. But the chip holds more than L2:
33 MB of registers and 30 MB of shared memory. Here one block per SM owns a band of whole rows;
pass 1 computes B, keeping its first rows in registers and the next in shared memory (the rest
written last, so that L2 still has them), and adds its partials of x with vector atomics; after
one grid barrier pass 2 computes its rows of w from chip (experiments/one_barrier.cu). SGEMVT keeps A
the same way.

Each shape (BLOCK threads, RROWS rows held in registers, SROWS in shared memory, U rows loaded
at once, whether the unheld rows are dealt out, how many blocks: SHAPES) is timed at each case
where it tiles n and fits in shared memory, with at most one block per SM, beside fusec's tuned
plans of the same scripts, in one process on the same inputs. Timing, checks and floor as in
experiments.resident (GPU time; every result against float64 before and after the timed runs, but the
diagnostics that stop after pass 1, whose results are wrong and marked unchecked), and each checked
contender also with the host's launching (events around one call from an idle GPU; the kernels
here launched through CuPy, fusec through its program call).

    python -m experiments.one_barrier [--case float32:4096 ...] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy and an sm_90 GPU (vector atomics); fusec's rows need its runtime (PyCUDA) and are
skipped without it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from .resident import MAX_SHARED, ROOT, Case, write

SOURCE = Path(__file__).with_suffix(".cu")
CASES = ("float32:4096", "float64:4096")
RMAX = 64  # rows per block the kernel's reduction has room for
# A diagnostic's (label, detail) by STOP: 1 stops after pass 1, 2 before adding x's partials.
STOPS = (("", ""), (" pass 1", "; pass 1 only"), (" pass 1 w/o atomics", "; pass 1 only, x's partials not added"))
# (BLOCK threads, RROWS rows held in registers, SROWS rows in shared memory, U rows loaded at once,
# DEAL 0: each block's share of the rows fixed, 1: only the held rows fixed, the others dealt out in
# tickets, GRID blocks (0: one per SM), STOP 1: stop after pass 1, 2: before adding x's partials,
# diagnostics whose results are wrong and unchecked, DEFER 1: GEMVER stores its held rows after the
# barrier, not in pass 1); RROWS a multiple of U.
SHAPES = {
    "float32": ((512, 0, 0, 2, 0, 0, 0, 0), (512, 0, 13, 2, 0, 0, 0, 0), (512, 4, 13, 2, 0, 0, 0, 0),
                (512, 6, 13, 2, 0, 0, 0, 0), (512, 6, 13, 2, 0, 128, 0, 0), (512, 6, 13, 3, 0, 0, 0, 0),
                (512, 8, 13, 2, 0, 0, 0, 0), (1024, 4, 13, 2, 0, 0, 0, 0), (256, 2, 13, 2, 0, 0, 0, 0),
                (512, 6, 13, 2, 1, 0, 0, 0), (512, 4, 13, 2, 1, 0, 0, 0), (512, 8, 13, 2, 1, 0, 0, 0),
                (512, 0, 13, 2, 1, 0, 0, 0), (512, 6, 13, 2, 0, 0, 1, 0), (512, 6, 13, 2, 0, 0, 2, 0),
                (512, 0, 0, 2, 0, 0, 1, 0), (512, 6, 13, 2, 1, 0, 1, 0),
                (512, 6, 13, 2, 0, 0, 0, 1), (512, 4, 13, 2, 0, 0, 0, 1), (512, 8, 13, 2, 0, 0, 0, 1),
                (512, 0, 13, 2, 0, 0, 0, 1), (1024, 4, 13, 2, 0, 0, 0, 1), (512, 6, 13, 2, 1, 0, 0, 1),
                (512, 6, 13, 2, 0, 0, 1, 1)),
    "float64": ((512, 0, 0, 2, 0, 0, 0, 0), (512, 0, 6, 2, 0, 0, 0, 0), (512, 2, 6, 2, 0, 0, 0, 0),
                (512, 2, 6, 2, 0, 128, 0, 0), (512, 2, 6, 2, 1, 0, 0, 0), (512, 2, 6, 2, 0, 0, 1, 0),
                (512, 2, 6, 2, 0, 0, 0, 1), (512, 2, 6, 2, 1, 0, 0, 1)),
}


def shape_at(dtype: str, n: int, sms: int, shape: tuple) -> tuple[int, int] | str:
    """(blocks, shared bytes) of a shape at size n on `sms` SMs, or why it cannot run there."""
    block, rrows, srows, _, deal, grid, _, _ = shape
    grid = grid or sms
    if grid > sms:
        return f"{grid} blocks, more than the {sms} SMs"
    size = np.dtype(dtype).itemsize
    if n % (block * 16 // size):
        return f"does not tile n = {n}"
    if deal and rrows + srows + 4 > RMAX:
        return f"{rrows + srows} rows held per block and 4 dealt, more than {RMAX}"
    if not deal and -(-n // grid) > RMAX:
        return f"{-(-n // grid)} rows per block, more than {RMAX}"
    shared = srows * n * size + RMAX * block // 32 * size
    if shared > MAX_SHARED:
        return f"{shared} bytes of shared memory"
    return grid, shared


def kernel_name(dtype: str, n: int, shape: tuple, gemver: bool) -> str:
    """The kernel's instantiation in experiments/one_barrier.cu for a shape of SHAPES."""
    ctype = "float" if dtype == "float32" else "double"
    return f"one_barrier<{ctype},{n},{','.join(map(str, shape[:5]))},{str(gemver).lower()},{shape[7]}>"


def measure(dtype: str, n: int, repeat: int, rows: list, chosen: set | None = None) -> float:
    """Time the shapes of SHAPES[dtype] (those in ``chosen`` where given) at side n, beside fusec."""
    import cupy as cp
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    runs = []
    for shape in SHAPES[dtype]:
        if chosen is not None and shape not in chosen:
            continue
        fits = shape_at(dtype, n, sms, shape)
        if isinstance(fits, str):
            print(f"  {dtype} n = {n} {shape}: {fits}, left out")
            continue
        for gemver in (True, False):
            if shape[7] and not gemver:  # SGEMVT stores no matrix: nothing to defer
                continue
            name = kernel_name(dtype, n, shape, gemver)
            label = name + (f" on {fits[0]} blocks" if shape[5] else "") + STOPS[shape[6]][0]
            runs.append((name, label, shape, fits, gemver))
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",),
                          name_expressions=list(dict.fromkeys(r[0] for r in runs)) + ["spin"])
    module.compile()
    case = Case(dtype, n, repeat, module.get_function("spin"), rows)
    case.with_host = True
    u1, v1, u2, v2, y, z = case.vectors
    for name, label, shape, (grid, shared), gemver in runs:
        block, rrows, srows, unroll, deal, _, stop, defer = shape
        function = module.get_function(name)
        function.max_dynamic_shared_size_bytes = shared
        resident = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function.kernel.ptr, block, shared)
        if resident < 1:
            print(f"  {label}: no block fits on an SM, left out")
            continue
        x, w = cp.zeros(n, case.np_dtype), cp.zeros(n, case.np_dtype)
        # the barrier's counter, then DEAL's ticket counters (two per epoch parity)
        xsum, counter, epoch = cp.zeros(2 * n, case.np_dtype), cp.zeros(5, cp.uint32), [0]
        args = (case.A, case.B, u1, v1, u2, v2, y, z, x, w, case.np_dtype.type(case.alpha),
                case.np_dtype.type(case.beta), np.int32(n), xsum, counter)

        def call(f=function, g=grid, b=block, s=shared, args=args, epoch=epoch, stop=stop):
            epoch[0] += 1
            f((g,), (b,), args + (np.uint32(epoch[0]), np.int32(stop)), shared_mem=s)

        per_block = n / grid
        held = min(per_block, rrows + srows)
        detail = (f"{block} threads, {per_block:.1f} rows per block: {rrows} held in registers, {srows} in shared"
                  f" memory ({held / per_block:.0%} of the matrix on chip)"
                  + (", the others dealt out" if deal else "")
                  + (", held rows stored after the barrier" if defer else "") + f", {unroll} rows loaded at once;"
                  f" {grid} blocks, {shared // 1024} KiB shared" + STOPS[stop][1])
        case.add("gemver" if gemver else "sgemvt", label, detail, gemver, call, lambda x=x, w=w: (x, w, case.B),
                 checked=not stop)
    case.fusec_rows()
    return case.bandwidth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", metavar="DTYPE:N",
                        help=f"a precision and matrix side (repeatable; default {' '.join(CASES)})")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--shape", action="append", metavar="B,R,S,U,DEAL,GRID,STOP,DEFER",
                        help="time only these shapes of SHAPES (repeatable; default all)")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-one-barrier")
    args = parser.parse_args()
    cases = args.case or list(CASES)
    chosen = None
    if args.shape:
        try:
            chosen = {tuple(int(f) for f in text.split(",")) for text in args.shape}
        except ValueError:
            parser.error(f"--shape: expected 8 integers separated by commas, got {args.shape}")
        known = {s for shapes in SHAPES.values() for s in shapes}
        if not chosen <= known:
            parser.error(f"--shape: not in SHAPES: {sorted(chosen - known)}")
    for spec in cases:  # all checked before the first is measured
        dtype, _, n = spec.partition(":")
        if dtype not in SHAPES or not n.isdigit() or int(n) < 1:
            parser.error(f"--case {spec!r}: expected float32:N or float64:N, N a positive matrix side")
    rows, copies = [], {}
    for spec in cases:
        dtype, _, n = spec.partition(":")
        copies[f"{dtype} n = {n}"] = measure(dtype, int(n), args.repeat, rows, chosen)
    command = ("python -m experiments.one_barrier " + " ".join(f"--case {c}" for c in cases)
               + f" --repeat {args.repeat}"
               + "".join(f" --shape {s}" for s in args.shape or ()) + f" --name {args.name}")
    write(args, rows, copies, command=command, title="One-barrier kernels (the matrix held on chip)",
          kernels="experiments/one_barrier.cu")


if __name__ == "__main__":
    main()
