"""Would cluster-resident kernels beat fusec's striped fusion? Hand-written ones, timed beside it.

experiments.resident asked whether GEMVER's and SGEMVT's matrix could leave DRAM once
if each block kept its rows' tiles on chip; the whole grid then had to meet once
per column stripe, and that meeting set the pace. Here a *cluster* of 8 or 16
blocks (Hopper's thread block clusters) covers every row of a stripe, so the
meeting is one cluster's hardware barrier, with the partial sums of x sent
through distributed shared memory, and clusters never wait for one another
(experiments/cluster_resident.cu). The price: a cluster's shared memory holds
(n / CL) rows per block, so a stripe is narrow (W columns: 32 to 128 bytes of
each row at the main sizes), and DRAM serves narrow pieces of many rows.

Each shape is timed at each size where it tiles n and fits in shared memory,
with as many clusters as can run at once (the driver's occupancy query), beside
fusec's tuned plans of the same scripts, in one process on the same inputs. Shapes
marked SYNC 0 leave the barrier out: their results are wrong by design and not
checked; they say what the meeting costs. Timing, checks and floor as in
experiments.resident.

    python -m experiments.cluster_resident [--case float32:16384 ...] [--repeat 20] [--out DIR] [--name NAME]

Needs CuPy and an sm_90 GPU; fusec's rows need its runtime (PyCUDA) and are skipped without it.
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

import numpy as np

from .resident import MAX_SHARED, ROOT, Case, write

SOURCE = Path(__file__).with_suffix(".cu")
CASES = ("float32:16384", "float64:8192", "float32:4096")
# (CL blocks per cluster, BLOCK threads, QW threads per row, PREF stripes prefetched, HOLD, SYNC, WIDE, WARM);
# the rows per block are n / CL, so ITERS = n / CL / (BLOCK / QW).
SHAPES = {
    "float32": ((16, 512, 4, 1, 1, 1, 0, 0), (16, 512, 4, 1, 1, 1, 1, 0), (16, 512, 4, 1, 1, 1, 0, 1),
                (16, 512, 4, 1, 1, 1, 0, 2), (16, 512, 4, 1, 1, 1, 0, 4), (16, 512, 4, 1, 1, 0, 0, 0),
                (8, 512, 2, 2, 0, 1, 0, 2), (8, 512, 2, 2, 0, 1, 1, 0),
                (8, 512, 8, 1, 1, 1, 0, 0), (8, 512, 8, 1, 1, 1, 0, 2), (8, 512, 8, 1, 1, 1, 1, 0),
                (8, 512, 8, 1, 1, 0, 0, 0), (8, 512, 8, 2, 0, 1, 0, 0)),
    "float64": ((16, 512, 8, 1, 1, 1, 0, 0), (16, 512, 8, 1, 1, 1, 0, 2), (16, 512, 8, 1, 1, 1, 1, 0),
                (16, 512, 8, 1, 1, 0, 0, 0),
                (16, 512, 4, 2, 0, 1, 0, 2), (8, 512, 4, 2, 0, 1, 0, 2)),
}
NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CUfunction_attribute: clusters of 16 need it


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig, for the occupancy query
    _fields_ = [("grid_x", ctypes.c_uint), ("grid_y", ctypes.c_uint), ("grid_z", ctypes.c_uint),
                ("block_x", ctypes.c_uint), ("block_y", ctypes.c_uint), ("block_z", ctypes.c_uint),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("num_attrs", ctypes.c_uint)]


def max_active_clusters(function, cluster: int, block: int, shared: int) -> int:
    """How many clusters of the kernel can run at once (cuOccupancyMaxActiveClusters)."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    config = _LaunchConfig(cluster, 1, 1, block, 1, 1, shared, None, None, 0)
    count = ctypes.c_int(0)
    status = libcuda.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(function.kernel.ptr),
                                                 ctypes.byref(config))
    if status:
        raise RuntimeError(f"cuOccupancyMaxActiveClusters failed ({status})")
    return count.value


def shape_at(dtype: str, n: int, shape: tuple) -> tuple[int, int, int] | str:
    """(ITERS, W columns, shared bytes) of a shape at size n, or why it cannot run there."""
    cluster, block, lanes, pref, hold, *_ = shape
    vec = 4 if dtype == "float32" else 2
    per_pass, width = block // lanes, lanes * vec
    if n % cluster or (n // cluster) % per_pass or n % width:
        return f"does not tile n = {n}"
    iters = n // cluster // per_pass
    shared = (pref + 1 + hold) * iters * block * 16
    if shared > MAX_SHARED:
        return f"{shared} bytes of shared memory"
    return iters, width, shared


def measure(dtype: str, n: int, repeat: int, rows: list) -> float:
    import cupy as cp
    ctype = "float" if dtype == "float32" else "double"
    names = {}
    for shape in SHAPES[dtype]:
        fits = shape_at(dtype, n, shape)
        if isinstance(fits, str):
            print(f"  {dtype} n = {n} {shape}: {fits}, left out")
            continue
        cluster, block, lanes, pref, hold, sync, wide, warm = shape
        for gemver in (True, False):
            name = (f"cluster_resident<{ctype},{cluster},{block},{lanes},{fits[0]},{pref},{str(gemver).lower()},"
                    f"{hold},{sync},{wide},{warm}>")
            names[name] = (shape, fits, gemver)
    module = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",), name_expressions=list(names) + ["spin"])
    module.compile()
    case = Case(dtype, n, repeat, module.get_function("spin"), rows)
    u1, v1, u2, v2, y, z = case.vectors
    for name, (shape, (iters, width, shared), gemver) in names.items():
        cluster, block, lanes, pref, hold, sync, wide, warm = shape
        function = module.get_function(name)
        function.max_dynamic_shared_size_bytes = shared
        if cluster > 8:
            cp.cuda.driver.funcSetAttribute(function.kernel.ptr, NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
        clusters = max_active_clusters(function, cluster, block, shared)
        if clusters < 1:
            print(f"  {name}: no cluster fits, left out")
            continue
        x, w = cp.zeros(n, case.np_dtype), cp.zeros(n, case.np_dtype)
        ws, counters = cp.zeros(clusters * n, case.np_dtype), cp.zeros(cluster, cp.uint32)
        args = (case.A, case.B, u1, v1, u2, v2, y, z, x, w, case.np_dtype.type(case.alpha),
                case.np_dtype.type(case.beta), np.int32(n), ws, counters)

        def call(f=function, g=clusters * cluster, b=block, s=shared, args=args):
            f((g,), (b,), args, shared_mem=s)

        held = "shared memory" if hold else "registers"
        detail = (f"clusters of {cluster} x {block} threads, {n // cluster} rows x {width} columns per block and"
                  f" stripe ({width * case.size} bytes of a row), {pref} stripe(s) prefetched, B held in {held}"
                  + (", L2 fetching 256 bytes" if wide else "") + (f", L2 warmed {warm} ahead" if warm else "") + ";"
                  f" {clusters} clusters, {shared // 1024} KiB shared")
        case.add("gemver" if gemver else "sgemvt", name, detail, gemver, call, lambda x=x, w=w: (x, w, case.B),
                 checked=bool(sync))
    case.fusec_rows()
    return case.bandwidth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", metavar="DTYPE:N",
                        help=f"a precision and matrix side (repeatable; default {' '.join(CASES)})")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h100-cluster-resident")
    args = parser.parse_args()
    cases = args.case or list(CASES)
    for spec in cases:  # all checked before the first is measured
        dtype, _, n = spec.partition(":")
        if dtype not in SHAPES or not n.isdigit() or int(n) < 1:
            parser.error(f"--case {spec!r}: expected float32:N or float64:N, N a positive matrix side")
    rows, copies = [], {}
    for spec in cases:
        dtype, _, n = spec.partition(":")
        copies[f"{dtype} n = {n}"] = measure(dtype, int(n), args.repeat, rows)
    command = ("python -m experiments.cluster_resident " + " ".join(f"--case {c}" for c in cases)
               + f" --repeat {args.repeat}")
    write(args, rows, copies, command=command, title="Cluster-resident kernels",
          kernels="experiments/cluster_resident.cu")


if __name__ == "__main__":
    main()
