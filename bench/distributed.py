"""Distributed programs over P GPUs: strong scaling from one GPU, the collectives'
latency by size, the rule for fewer GPUs, and one case no single GPU holds.

    mpirun -n 2 python -m mpi4py -m bench.distributed [--scripts bicgk,atax,gemver,gesummv,sgemvt]
        [--sizes 8192,16384,32768] [--dtypes float32,float64] [--repeat 20] [--weak auto|on|off]
        [--budget 480] [--out bench/results] [--ship]
    python -m bench.distributed --rules-from bench/results/<gpu>-p<P>-distributed.json   # no GPU

One process per GPU (mpirun; mpi4py aligns the ranks on the host between
samples), NCCL through CuPy. For each sequence, precision and n (every size of
the script n; matrices n x n):

- *1 GPU*: the script's own fusec program on rank 0, on the whole arrays;
- *P GPUs*: the distributed program, each rank on its rows (made on its GPU,
  not scattered), the same stream for stages and collectives;
- both the GPU's time: a spinning kernel first, then CUDA events around the
  call, so the host's launching is not counted (bench.peers' clock); the ranks
  meet on the host (an MPI barrier) before each sample, and a sample's time is
  the slowest rank's; median of --repeat after 3 warm-ups;
- *queued*: QUEUED calls back to back between the events, per call: the ranks
  meet on the host once per QUEUED calls, as in a loop of calls (timed alone, a
  call's collective also counts the wait for a rank that left the barrier later);
- *local* and *collective*: events between the steps of a call
  (``DistributedProgram.run(timings=True)``), medians, slowest rank; a
  collective's time includes waiting for the slowest rank to reach it.

The collectives (all-reduce, all-gather, reduce-scatter, broadcast) are timed
alone at sizes from 4 bytes to 64 MB, and a kernel launch alone: that is the
table (fusec.distributed.Latency) the rule for fewer GPUs takes
(fusec.distributed.scaling), written as ``<gpu>-p<P>-collectives.json``; with
--ship it is merged into fusec/data/collectives/<gpu>.json, which
fusec.distributed.compile then applies by itself. The report gives, per
sequence, the size below which the rule runs on fewer GPUs.

The weak case (--weak auto: when every GPU has the memory for its rows) is BiCGK
in fp64 at the smallest n (a multiple of 1000, at least 100000) whose matrix is
larger than the whole memory of the largest GPU of the run, spread over P GPUs:
n = 100000 is an 80 GB matrix, which an 80 GB H100 (85 GB of memory) still holds.

Cases run in order until --budget seconds have passed; the rest are listed
as not run. Tables go to bench/results/<gpu>-p<P>-distributed.md and .json
(and a plot where matplotlib is there).

``--rules-from`` (no GPU, no mpirun) recomputes a run's rule table with this
fusec from the run's JSON and the collectives table beside it, and rewrites
its report and JSON (the measurements kept, the report saying so).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("bicgk", "atax", "gemver", "gesummv", "sgemvt")
SIZES = (8192, 16384, 32768)
LATENCY_BYTES = tuple(4 * 4 ** k for k in range(13))  # 4 B .. 64 MB
OPS = ("all-reduce", "all-gather", "reduce-scatter", "broadcast")
QUEUED = 10  # calls back to back in a queued sample
WEAK_N = 100_000  # the weak case's least n; more where one GPU would hold that matrix
RULE_SIZES = tuple(2 ** k for k in range(8, 17))  # where the rule is asked how many GPUs to use
TARGETS = {("bicgk", 16384): 1.85, ("bicgk", 32768): 1.95, ("atax", 16384): 1.85, ("atax", 32768): 1.95,
           ("gemver", 32768): 1.8}  # issue 47's targets on two H100s (fp32 and fp64 alike)


class Ranks:
    """The MPI side: host barriers, the slowest rank's figure, rank 0's decisions."""

    def __init__(self, mpi_comm):
        from mpi4py import MPI
        self.comm, self.MPI = mpi_comm, MPI
        self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def slowest(self, values: list[float]) -> list[float]:
        """Element-wise maximum over the ranks."""
        out = np.empty(len(values))
        self.comm.Allreduce(np.asarray(values, dtype=np.float64), out, op=self.MPI.MAX)
        return out.tolist()

    def agree(self, value):
        return self.comm.bcast(value, root=0)


def _script(name: str) -> str:
    return str(ROOT / "scripts" / f"{name}.script")


def _inputs(cupy, dag, shapes: dict, dtype: str, seed: int) -> dict:
    """Random arrays of the given shapes on this GPU (uniform in [-0.5, 0.5]), scalars 0.7."""
    rng = cupy.random.default_rng(seed)
    out = {}
    for value in (dag.value(v) for v in dag.inputs):
        if value.kind.value == "scalar":
            out[value.name] = 0.7
        else:
            array = rng.random(shapes[value.name], dtype=np.dtype(dtype))
            array -= 0.5  # in place: the weak case's rows leave no room for a temporary
            out[value.name] = array
    return out


def _free(cupy) -> None:
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()


class Timer:
    """The GPU's time of a call on the legacy default stream: a spinning kernel
    first, then events around the call (bench.peers' clock); the ranks meet on
    the host before each sample."""

    def __init__(self, cupy, ranks: Ranks):
        from bench.peers import Clock
        self.clock, self.cupy, self.ranks = Clock.for_cupy(cupy), cupy, ranks

    def samples_ms(self, run, repeat: int, warmup: int = 3, together: bool = True, calls: int = 1) -> list[float]:
        """ms per call of ``calls`` calls of ``run`` between the events, ``repeat`` samples."""
        for _ in range(warmup):
            run()
        self.cupy.cuda.get_current_stream().synchronize()
        start, end = self.cupy.cuda.Event(), self.cupy.cuda.Event()
        out = []
        for _ in range(repeat):
            if together:
                self.ranks.barrier()
            self.clock.spin()
            start.record()
            for _ in range(calls):
                run()
            end.record()
            end.synchronize()
            out.append(self.cupy.cuda.get_elapsed_time(start, end) / calls)
        return out


def measure_latency(cupy, comm, ranks: Ranks, repeat: int) -> list[tuple[str, int, int, float]]:
    """(operation, ranks, bytes, seconds) of each collective alone, float32, slowest rank, median."""
    points = []
    stream = cupy.cuda.get_current_stream().ptr
    for op in OPS:
        for nbytes in LATENCY_BYTES:
            count = max(ranks.size, nbytes // 4 // ranks.size * ranks.size)
            whole = cupy.ones(count, cupy.float32)
            part = cupy.ones(count // ranks.size, cupy.float32)
            counts = [count // ranks.size] * ranks.size
            run = {"all-reduce": lambda: comm.all_reduce(whole, whole, stream),
                   "all-gather": lambda: comm.all_gather(part, whole, counts, stream),
                   "reduce-scatter": lambda: comm.reduce_scatter(whole, part, counts, stream),
                   "broadcast": lambda: comm.broadcast(whole, 0, stream)}[op]
            samples = Timer(cupy, ranks).samples_ms(run, repeat)
            slowest = ranks.slowest(samples)
            points.append((op, ranks.size, count * 4, statistics.median(slowest) * 1e-3))
    _free(cupy)
    return points


def launch_seconds(cupy) -> float:
    """One more kernel in a stream: empty kernels back to back, after a spin."""
    from fusec.runtime.cuda import TIMING_KERNELS
    empty = cupy.RawModule(code=TIMING_KERNELS).get_function("fusec_empty")
    from bench.peers import Clock
    clock = Clock.for_cupy(cupy)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    samples = []
    for _ in range(20):
        clock.spin()
        start.record()
        for _ in range(10):
            empty((1,), (32,), ())
        end.record()
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3 / 10)
    return statistics.median(samples)


def strong_case(cupy, comm, ranks: Ranks, script: str, dtype: str, n: int, repeat: int) -> dict:
    """One sequence, precision and n: rank 0's one-GPU time, then every rank's.
    Both programs are compiled for their own sizes (the one-GPU one for n, the
    stages for a rank's rows), as a user compiling for the problem would."""
    import fusec
    import fusec.distributed as fd
    from fusec.api import resolve_library
    lib = resolve_library(None)
    path = _script(script)
    prog = fd.compile(path, dtype=dtype, sizes={"n": n}, comm=comm, latency=False)
    dag = prog.dag
    sizes = dict(prog.plan.sizes)
    timer = Timer(cupy, ranks)
    row = {"script": script, "dtype": dtype, "n": n, "ranks": ranks.size,
           "collective_bytes": sum(c.bytes for c in prog.plan.collectives),
           "collectives": [f"{c.op} {dag.value(c.value).label}" for c in prog.plan.collectives]}
    # one GPU: rank 0 runs the script's own program on the whole arrays
    one = one_queued = [0.0]
    if ranks.rank == 0:
        plain = fusec.compile(path, lib, dtype, sizes=sizes)
        shapes = {dag.value(v).name: tuple(sizes[d] for d in dag.value(v).dims) for v in dag.inputs}
        whole = _inputs(cupy, dag, shapes, dtype, seed=1)
        one = timer.samples_ms(lambda: plain(**whole), repeat, together=False)
        one_queued = timer.samples_ms(lambda: plain(**whole), repeat, together=False, calls=QUEUED)
        whole.clear()
        _free(cupy)
    ranks.barrier()
    row["one_gpu_us"] = statistics.median(ranks.agree(one)) * 1e3
    row["one_gpu_queued_us"] = statistics.median(ranks.agree(one_queued)) * 1e3
    # P GPUs: each rank its rows
    local = _inputs(cupy, dag, {name: prog.local_shape(name) for name in prog.inputs}, dtype, seed=2 + ranks.rank)
    samples = ranks.slowest(timer.samples_ms(lambda: prog(**local), repeat))
    row["p_gpus_us"] = statistics.median(samples) * 1e3
    row["quartiles_us"] = [q * 1e3 for q in statistics.quantiles(samples, n=4)[::2]] if len(samples) > 1 else []
    queued = ranks.slowest(timer.samples_ms(lambda: prog(**local), repeat, calls=QUEUED))
    row["p_gpus_queued_us"] = statistics.median(queued) * 1e3
    row["queued_speedup"] = row["one_gpu_queued_us"] / row["p_gpus_queued_us"]
    parts_local, parts_collective = [], []
    for _ in range(repeat):
        ranks.barrier()
        timer.clock.spin()
        prog.run(local, timings=True)
        parts_local.append(prog.last_timings.local_ms)
        parts_collective.append(prog.last_timings.collective_ms)
    row["local_us"] = statistics.median(ranks.slowest(parts_local)) * 1e3
    row["collective_us"] = statistics.median(ranks.slowest(parts_collective)) * 1e3
    row["speedup"] = row["one_gpu_us"] / row["p_gpus_us"]
    row["target"] = TARGETS.get((script, n)) if ranks.size == 2 else None
    local.clear()
    _free(cupy)
    return row


def weak_size(gpu_bytes: int, itemsize: int = 8, least: int = WEAK_N, step: int = 1000) -> int:
    """The smallest n, a multiple of ``step`` and at least ``least``, whose n x n matrix
    of ``itemsize``-byte elements is larger than ``gpu_bytes``, one GPU's whole memory."""
    n = max(least, math.isqrt(gpu_bytes // itemsize) + 1)
    return -(-n // step) * step


def weak_case(cupy, comm, ranks: Ranks, repeat: int, bandwidth: float, force: bool = False) -> dict:
    """BiCGK fp64 over the ranks at n = :func:`weak_size` of the largest GPU, where every
    GPU has the memory for its rows (``force``: try anyway). The ranks agree that every
    one made its rows before any collective runs."""
    import fusec.distributed as fd
    free, total = cupy.cuda.runtime.memGetInfo()
    largest, least_negated = ranks.slowest([float(total), -float(free)])  # a maximum over the ranks each
    least = -least_negated  # the least free memory of any rank
    itemsize = 8
    n = weak_size(int(largest), itemsize)
    rows = -(-n // ranks.size)
    needed = rows * n * itemsize + 8 * n * itemsize
    row = {"script": "bicgk", "dtype": "float64", "n": n, "ranks": ranks.size, "matrix_gb": n * n * itemsize / 1e9,
           "gpu_gb": largest / 1e9}
    if least < 1.1 * needed and not force:
        return dict(row, skipped=f"needs {needed / 1e9:.1f} GB a GPU, {least / 1e9:.1f} GB free")
    prog = fd.compile(_script("bicgk"), dtype="float64", sizes={"n": n}, comm=comm, latency=False)
    try:
        local = _inputs(cupy, prog.dag, {name: prog.local_shape(name) for name in prog.inputs}, "float64", seed=3)
        made = 1.0
    except cupy.cuda.memory.OutOfMemoryError:
        local, made = {}, 0.0
    if -ranks.slowest([-made])[0] < 1:
        _free(cupy)
        return dict(row, skipped="a GPU ran out of memory making its rows")
    samples = ranks.slowest(Timer(cupy, ranks).samples_ms(lambda: prog(**local), repeat))
    seconds = statistics.median(samples) * 1e-3
    local_bytes = (rows * n + rows * 2 + 2 * n) * itemsize  # A's rows, r and q, p and s
    local.clear()
    _free(cupy)
    return dict(row, p_gpus_us=seconds * 1e6, gb_per_s_per_gpu=local_bytes / seconds / 1e9,
                of_copy_bandwidth=local_bytes / seconds / bandwidth)


def rule_sizes(latency, ranks: int, scripts, dtypes, gpu: str | None = None) -> dict:
    """Per sequence and precision, with the measured table: the smallest n (of
    RULE_SIZES) from which the planner's rule has every rank hold rows (every
    rank getting the results), and the count it picks at each n; and the
    smallest n from which P processes beat one process alone (``launch_from``). Stages are
    priced by ``gpu``'s performance model (default: the GPU present), as the planner prices them."""
    import fusec.distributed as fd
    from fusec.api import resolve_library
    from fusec.cost.perfdb import predictor_for
    from fusec.distributed import planner, scaling
    from fusec.frontend import load_script
    lib = resolve_library(None)
    predictor = predictor_for(lib, gpu)
    bandwidth = predictor.target.copy_bandwidth
    out = {}
    for script in scripts:
        dag = load_script(_script(script), lib)
        for dtype in dtypes:
            stage_seconds = scaling.modelled(lib, dtype, predictor)  # one pricing for the picks and the launch
            picks = {n: fd.plan_dag(dag, lib, ranks, {"n": n}, dtype, latency=latency, gpu=gpu,
                                    stage_seconds=stage_seconds).active
                     for n in RULE_SIZES}
            every = [n for n, a in picks.items() if a == ranks]
            alone = []
            for n in RULE_SIZES:
                one = planner.plan(dag, lib, 1, {"n": n}, dtype)
                spread = planner.plan(dag, lib, ranks, {"n": n}, dtype)
                if (scaling.predicted_seconds(spread, dag, latency, bandwidth, stage_seconds=stage_seconds)
                        < scaling.predicted_seconds(one, dag, latency, bandwidth, stage_seconds=stage_seconds)):
                    alone.append(n)
            out[f"{script} {dtype}"] = {"all_ranks_from": min(every) if every else None, "picks": picks,
                                        "launch_from": min(alone) if alone else None}
    return out


def report(rows, weak, latency_points, launch_s, rules, meta) -> str:
    p = meta["ranks"]
    lines = [f"# Distributed programs on {p} × {meta['gpu']}", "",
             f"{meta['date']}, NCCL {meta['nccl']}, copy bandwidth {meta['bandwidth'] / 1e9:.0f} GB/s (rank 0),"
             f" `{meta['command']}`. GPU time (spinning kernel first), median of {meta['repeat']}, slowest rank;"
             " local and collective from events between the steps of a call; queued: per call of"
             f" {QUEUED} calls back to back a sample, the ranks meeting on the host once per sample.", "",
             f"## Strong scaling, 1 → {p} GPUs", "",
             f"| sequence | dtype | n | 1 GPU µs | {p} GPUs µs | speed-up | target | local µs | collective µs |"
             f" collective bytes | collectives | queued: 1 GPU µs | {p} GPUs µs | speed-up |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['script']} | {r['dtype']} | {r['n']} | {r['skipped']} |" + "  |" * 10)
            continue
        target = f"{r['target']:.2f}×" if r.get("target") else ""
        queued = (f" {r['one_gpu_queued_us']:.1f} | {r['p_gpus_queued_us']:.1f} | {r['queued_speedup']:.2f}× |"
                  if "queued_speedup" in r else " not timed |  |  |")  # runs from before the queued samples
        lines.append(f"| {r['script']} | {r['dtype']} | {r['n']} | {r['one_gpu_us']:.1f} | {r['p_gpus_us']:.1f} |"
                     f" {r['speedup']:.2f}× | {target} | {r['local_us']:.1f} | {r['collective_us']:.1f} |"
                     f" {r['collective_bytes']} | {', '.join(r['collectives']) or 'none'} |" + queued)
    lines += ["", "## Weak case: a matrix no single GPU holds", ""]
    if weak is None or "skipped" in weak:
        n = (weak or {}).get("n", f"of at least {WEAK_N}")
        lines.append(f"BiCGK fp64 n = {n}: not run ({(weak or {}).get('skipped', 'not asked for')}).")
    else:
        held = f"; one GPU has {weak['gpu_gb']:.1f} GB" if "gpu_gb" in weak else ""
        lines.append(f"BiCGK fp64 n = {weak['n']} ({weak['matrix_gb']:.1f} GB matrix{held}) over {p} GPUs:"
                     f" {weak['p_gpus_us']:.0f} µs a call, {weak['gb_per_s_per_gpu']:.0f} GB/s a GPU"
                     f" ({weak['of_copy_bandwidth']:.2f} of the copy bandwidth).")
    lines += ["", f"## Collectives alone ({p} ranks, float32), and the rule for fewer GPUs", "",
              f"A kernel launch: {launch_s * 1e6:.2f} µs.", "",
              "| bytes | " + " | ".join(f"{op} µs" for op in OPS) + " |",
              "| ---: | " + " | ".join("---:" for _ in OPS) + " |"]
    table: dict = {}
    for op, _, nbytes, seconds in latency_points:
        table.setdefault(nbytes, {})[op] = seconds
    for nbytes in sorted(table):
        lines.append(f"| {nbytes} | " + " | ".join(f"{table[nbytes].get(op, float('nan')) * 1e6:.1f}" for op in OPS)
                     + " |")
    lines += ["", "The rule (fusec.distributed.scaling) with this table: each stage's local time as the GPU's"
              " performance model prices the best plan of its script, plus a launch; collectives as measured."
              " *Planner*: the"
              f" smallest n at which fusec.distributed.compile has all {p} ranks hold rows (below it fewer do,"
              " and the others get the results by broadcast). *Launch*: the smallest n at which"
              f" {p} processes are predicted faster than one process alone (below it, start fewer).", "",
              "| sequence | planner: all ranks from n | launch: P processes from n |", "| --- | ---: | ---: |"]
    if meta.get("rules_from"):
        lines[-3:-3] = ["", f"This rule table was recomputed after the run: {meta['rules_from']}."]
    for key, rule in rules.items():
        lines.append(f"| {key} | {rule['all_ranks_from'] or 'never (to 65536)'} |"
                     f" {rule.get('launch_from') or 'never (to 65536)'} |")
    return "\n".join(lines) + "\n"


def plot(rows, path: Path, ranks: int) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (script, dtype) in sorted({(r["script"], r["dtype"]) for r in rows if "speedup" in r}):
        points = sorted((r["n"], r["speedup"]) for r in rows if r["script"] == script and r["dtype"] == dtype
                        and "speedup" in r)
        ax.plot([n for n, _ in points], [s for _, s in points], marker="o",
                linestyle="-" if dtype == "float32" else "--", label=f"{script} {dtype}")
    ax.axhline(ranks, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("n (matrix n x n)")
    ax.set_ylabel(f"speed-up, 1 -> {ranks} GPUs")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Run one process per GPU: mpirun -n 2 python -m mpi4py -m bench.distributed ...")
    parser.add_argument("--scripts", default=",".join(SCRIPTS),
                        help="sequences of scripts/, comma-separated (default: %(default)s)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="n of each n x n case, comma-separated (default: %(default)s)")
    parser.add_argument("--dtypes", default="float32,float64", help="precisions (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=20, help="timed samples a case, after 3 warm-ups"
                                                              " (default: %(default)s)")
    parser.add_argument("--weak", choices=["auto", "on", "off"], default="auto",
                        help="the weak case, BiCGK fp64 over the ranks at the smallest n (at least 100000) whose"
                             " matrix one GPU cannot hold: auto runs it where every GPU has the memory for"
                             " its rows (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds; cases not started by then are listed as not run (default: %(default)s)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"),
                        help="folder of the tables, JSON and plot (default: bench/results)")
    parser.add_argument("--ship", action="store_true", help="merge the latency table into fusec/data/collectives")
    parser.add_argument("--rules-from", metavar="JSON",
                        help="no GPU: recompute the rule table of a run (its JSON, with the -collectives.json"
                             " beside it) with this fusec, and rewrite the run's report and JSON")
    args = parser.parse_args(argv)
    if args.rules_from:
        return rules_again(parser, Path(args.rules_from))
    started = time.monotonic()
    from mpi4py import MPI

    import fusec.distributed as fd
    comm = fd.communicator(MPI.COMM_WORLD)
    import cupy
    from cupy.cuda import nccl

    from bench.fusion import copy_bandwidth
    from bench.peers import device_name
    ranks = Ranks(MPI.COMM_WORLD)
    scripts = [s for s in args.scripts.split(",") if s]
    dtypes = [d for d in args.dtypes.split(",") if d]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bandwidth = ranks.agree(copy_bandwidth(cupy) if ranks.rank == 0 else None)
    _free(cupy)
    latency_points = measure_latency(cupy, comm, ranks, args.repeat)
    launch_s = ranks.agree(launch_seconds(cupy) if ranks.rank == 0 else None)
    gpu = device_name(cupy)
    latency = fd.Latency(gpu, tuple(latency_points), launch_s)
    rows = []
    for script in scripts:
        for dtype in dtypes:
            for n in sizes:
                over = ranks.agree(time.monotonic() - started > args.budget)
                if over:
                    rows.append({"script": script, "dtype": dtype, "n": n, "skipped": "not run (--budget)"})
                    continue
                rows.append(strong_case(cupy, comm, ranks, script, dtype, n, args.repeat))
                if ranks.rank == 0:
                    r = rows[-1]
                    print(f"{script} {dtype} n={n}: {r['one_gpu_us']:.1f} -> {r['p_gpus_us']:.1f} us"
                          f" ({r['speedup']:.2f}x; local {r['local_us']:.1f}, collective {r['collective_us']:.1f})",
                          file=sys.stderr, flush=True)
    rules = rule_sizes(latency, ranks.size, scripts, dtypes)
    meta = {"gpu": gpu, "ranks": ranks.size, "nccl": nccl.get_version(), "bandwidth": bandwidth,
            "repeat": args.repeat, "date": datetime.date.today().isoformat(),
            "command": "mpirun -n {} python -m mpi4py -m bench.distributed {}".format(ranks.size, " ".join(
                sys.argv[1:]))}
    write = (lambda weak: save(Path(args.out), rows, weak, latency, rules, meta, args.ship)) if ranks.rank == 0 \
        else (lambda weak: None)
    write(None)  # the strong cases are kept whatever the weak case does
    if args.weak != "off" and ranks.size > 1:
        write(weak_case(cupy, comm, ranks, args.repeat, bandwidth, force=args.weak == "on"))
    return 0


def rules_again(parser, path: Path) -> int:
    """The rule table of the run in ``path`` recomputed for its GPU (by name) with this fusec;
    its report, JSON and plot rewritten beside it, the measurements as they were."""
    import fusec.distributed as fd
    from fusec.target import slug
    collectives = path.with_name(path.name.replace("-distributed.json", "-collectives.json"))
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
        meta, rows, weak = run["meta"], run["strong"], run["weak"]
        latency = fd.Latency.load(collectives)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--rules-from {path}: not a bench.distributed run's JSON with its {collectives.name}"
                     f" beside it ({type(exc).__name__}: {exc})")
    scripts = list(dict.fromkeys(r["script"] for r in rows))
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    rules = rule_sizes(latency, meta["ranks"], scripts, dtypes, gpu=slug(meta["gpu"]))
    meta = dict(meta, rules_from=f"`python -m bench.distributed --rules-from {path.name}` on"
                                 f" {datetime.date.today().isoformat()}")
    save(path.parent, rows, weak, latency, rules, meta, ship_it=False)
    return 0


def save(out: Path, rows, weak, latency, rules, meta, ship_it: bool) -> None:
    from fusec.target import slug
    name = f"{slug(meta['gpu']).split('-')[0]}-p{meta['ranks']}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-distributed.md").write_text(
        report(rows, weak, latency.points, latency.launch_seconds, rules, meta), encoding="utf-8")
    (out / f"{name}-distributed.json").write_text(json.dumps(
        {"meta": meta, "strong": rows, "weak": weak, "rule": rules}, indent=1), encoding="utf-8")
    (out / f"{name}-collectives.json").write_text(latency.to_json(), encoding="utf-8")
    plotted = plot(rows, out / f"{name}-distributed.png", meta["ranks"])
    if ship_it:
        ship(latency, slug(meta["gpu"]))  # the whole slug: an H100 PCIe has other links
    print(f"wrote {out / name}-distributed.md, .json, -collectives.json" + (", .png" if plotted else ""),
          file=sys.stderr)


def ship(latency, name: str) -> None:
    """Merge this table into fusec/data/collectives/<name>.json (points of other rank counts kept)."""
    import fusec.distributed as fd
    folder = ROOT / "fusec" / "data" / "collectives"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.json"
    ranks = {r for _, r, _, _ in latency.points}
    kept = ()
    if path.exists():
        kept = tuple(p for p in fd.Latency.load(path).points if p[1] not in ranks)
    merged = fd.Latency(latency.gpu, kept + latency.points, latency.launch_seconds)
    path.write_text(merged.to_json(), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
