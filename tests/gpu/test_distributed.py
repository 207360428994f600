"""GPU tier: distributed programs on two GPUs (fusec.distributed), launched
by the test with ``mpirun -n 2`` (or torchrun) in a subprocess with a timeout.

Every sequence (and the solvers' iterations) in both precisions at m = 1001,
4097 and a rectangular shape (m = 2049, n = 1001; none divides by 2, 4 or 8)
against the float64 oracle, and against the one-GPU program, within the test
ratio; fusec.distributed.solvers against the one-GPU solvers. A rank that raises
ends the run promptly with its error. P = 1 (one process, no launcher) is the
plain program, bit for bit.

Skips without two GPUs, mpirun, mpi4py or CuPy. FUSEC_TEST_DIST_SCRIPTS
(e.g. "bicgk,gemver") narrows the sequences, FUSEC_TEST_DIST_RANKS sets P
(default 2; 4 and 8 on machines that have them), FUSEC_TEST_DIST_TIMEOUT the
subprocess's limit in seconds (default 900).

This file is also the worker the launcher starts:
``mpirun -n 2 python -m mpi4py tests/gpu/test_distributed.py sequences OUT``
(or ``solvers OUT``, or ``graphs OUT``: the solvers with their calls captured in CUDA graphs).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve()
RANKS = int(os.environ.get("FUSEC_TEST_DIST_RANKS", "2"))
LIMIT = float(os.environ.get("FUSEC_TEST_DIST_TIMEOUT", "900"))
SHAPES = ({"n": 1001}, {"n": 4097}, {"m": 2049, "n": 1001})
DTYPES = ("float32", "float64")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# ---------------------------------------------------------------------------------------------- the tests


def _gpus() -> int:
    """The GPUs the ranks may use: all the session's, where pytest-xdist gave this worker one
    of them (tests/conftest.py's $FUSEC_TEST_ALL_GPUS)."""
    spread = os.environ.get("FUSEC_TEST_ALL_GPUS")
    if spread:
        return len(spread.split(","))
    try:
        from fusec.runtime import cuda
        return cuda.driver().Device.count()
    except Exception:  # no driver: the gpu marker skips these anyway
        return 0


def _mpirun() -> list[str] | None:
    """The launcher's command for RANKS processes, or None where there is none."""
    path = shutil.which("mpirun") or shutil.which("mpiexec")
    if path is None or importlib.util.find_spec("mpi4py") is None:
        return None
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    command = [path, "-n", str(RANKS)]
    if "Open MPI" in version or "OpenRTE" in version:  # runs as root in the GPU machines; no core binding
        command += ["--allow-run-as-root", "--bind-to", "none"]
        env = _environment()
        for name in ("PYTHONPATH", "FUSEC_CACHE_DIR", "FUSEC_SHIPPED_TUNINGS", "CUDA_VISIBLE_DEVICES", *MULTICAST_OFF):
            if name in env:
                command += ["-x", name]
    return command


def _environment() -> dict[str, str]:
    env = dict(os.environ, **MULTICAST_OFF, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if env.get("FUSEC_TEST_ALL_GPUS"):  # this worker sees one GPU; its ranks see them all
        env["CUDA_VISIBLE_DEVICES"] = env["FUSEC_TEST_ALL_GPUS"]
    return env


def _launch(command: list[str], limit: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit, env=_environment(), cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(command)} did not end within {limit:g} s (a hang):\n"
                    f"{(exc.stdout or b'')[-4000:]!r}\n{(exc.stderr or b'')[-4000:]!r}")
    return done, time.monotonic() - started


def _needs_ranks():
    if _gpus() < RANKS:
        pytest.skip(f"needs {RANKS} GPUs, found {_gpus()}")
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("needs CuPy (NCCL through cupy.cuda.nccl)")


def _worker_records(kind: str, folder: Path) -> list[dict]:
    """Run the worker's ``kind`` over the ranks (skipped without enough GPUs, mpirun or mpi4py)
    and read back what every rank wrote into ``folder``."""
    _needs_ranks()
    launcher = _mpirun()
    if launcher is None:
        pytest.skip("needs mpirun and mpi4py")
    done, _ = _launch(launcher + [sys.executable, "-m", "mpi4py", str(WORKER), kind, str(folder)], LIMIT)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return _results(folder)


def _results(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("rank*.json")):
        out += json.loads(path.read_text())
    return out


pytestmark = pytest.mark.gpu


def test_every_sequence_on_several_gpus(tmp_path):
    _needs_ranks()
    launcher = _mpirun()
    if launcher is None:
        pytest.skip("needs mpirun and mpi4py")
    scripts = os.environ.get("FUSEC_TEST_DIST_SCRIPTS", "all")
    done, seconds = _launch(launcher + [sys.executable, "-m", "mpi4py", str(WORKER), "sequences", str(tmp_path),
                                        "--scripts", scripts], LIMIT)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    results = _results(tmp_path)
    assert {r["rank"] for r in results} == set(range(RANKS))
    cases = {(r["script"], r["dtype"], r["shape"]) for r in results}
    wanted = _sequences(scripts)
    assert len(cases) == sum(len(_shapes(s)) for s in wanted) * len(DTYPES)
    failed = [f"{r['script']} {r['dtype']} {r['shape']} rank {r['rank']} {r['output']}: {r['why']}"
              for r in results if r["why"]]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("abort", [True, False], ids=["mpi4py-abort", "watchdog"])
def test_a_rank_that_raises_ends_the_run(tmp_path, abort):
    """Rank 1 raises before the call; rank 0 waits in the all-reduce of s. With
    ``python -m mpi4py`` the exception aborts the job at once; without, rank 0's
    watchdog ends it at the collective's timeout (10 s here)."""
    _needs_ranks()
    launcher = _mpirun()
    if launcher is None:
        pytest.skip("needs mpirun and mpi4py")
    python = [sys.executable, "-m", "mpi4py"] if abort else [sys.executable]
    done, seconds = _launch(launcher + python + [str(WORKER), "fail", str(tmp_path), "--timeout", "10"], 240)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "planted failure on rank 1" in output
    if not abort:
        assert "did not finish within 10 s" in output, output[-4000:]
    assert seconds < 180, f"took {seconds:.0f} s"


def test_torchrun_with_torch_tensors(tmp_path):
    _needs_ranks()
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs PyTorch")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={RANKS}",
               str(WORKER), "sequences", str(tmp_path), "--scripts", "bicgk,gemver,axpydot", "--frame", "torch",
               "--shapes", "0"]
    done, _ = _launch(command, LIMIT)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    results = _results(tmp_path)
    failed = [f"{r['script']} {r['dtype']} rank {r['rank']} {r['output']}: {r['why']}" for r in results if r["why"]]
    assert results and not failed, "\n".join(failed)


def test_one_process_is_the_plain_program():
    """No launcher: one rank, the script's own program; the same bits as fusec.compile's
    where that program is reproducible (no atomics), else the same within float32 rounding."""
    cupy = pytest.importorskip("cupy")
    import fusec
    import fusec.distributed as fd
    from fusec import oracle
    for script in ("bicgk", "gemver"):
        path = str(ROOT / "scripts" / f"{script}.script")
        dist = fd.compile(path, dtype="float32", sizes={"n": 1001}, comm=None)
        plain = fusec.compile(path, dtype="float32", sizes={"n": 1001})
        assert dist.plan.ranks == 1 and dist.programs[0].source == plain.source
        inputs = oracle.random_inputs(plain.dag, {s: 1001 for s in plain.dag.sizes}, "float32", 7)
        device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        ours, theirs = dist(**device), plain(**device)
        ours, theirs = (x if isinstance(x, tuple) else (x,) for x in (ours, theirs))
        for a, b in zip(ours, theirs):
            if plain.generated.reproducible:
                np.testing.assert_array_equal(cupy.asnumpy(a), cupy.asnumpy(b))
            else:  # column sums added with atomics: the same program, not the same bits each run
                scale = max(float(np.abs(cupy.asnumpy(b)).max()), 1e-30)
                assert float(np.abs(cupy.asnumpy(a) - cupy.asnumpy(b)).max()) <= 1e-5 * scale


# ---------------------------------------------------------------------------------------------- the worker


def _sequences(names: str) -> list[str]:
    """The scripts/ sequences named (all: every one, "overlap", a chain whose
    reduce-scatter runs on a second stream beside a stage, and the solvers' iterations,
    whose scalar expressions every rank evaluates)."""
    every = (sorted(p.stem for p in (ROOT / "scripts").glob("*.script")) + ["overlap"]
             + ["solvers/cg", "solvers/bicg", "solvers/bicgstab"])
    return every if names == "all" else [n for n in names.split(",") if n]


def where(script: str) -> dict:
    """How fusec.compile and fusec.distributed.compile are told the script."""
    if script == "overlap":
        from tests.test_distributed_threads import OVERLAP
        return {"source": OVERLAP, "name": "overlap.script"}
    return {"script": str(ROOT / "scripts" / f"{script}.script")}


def _shapes(script: str, chosen=None) -> list[dict]:
    from fusec.frontend import check, parse
    from tests.helpers import library
    told = where(script)
    dag = check(parse(told.get("source") or Path(told["script"]).read_text(), script), library())
    shapes = [SHAPES[i] for i in chosen] if chosen is not None else list(SHAPES)
    if len(dag.sizes) == 1:  # a vector script has one size: no rectangular shape
        shapes = [s for s in shapes if "m" not in s]
    return [{k: s.get(k, s["n"]) for k in dag.sizes} for s in shapes]


def _frame(name: str):
    if name == "torch":
        import torch

        def upload(array):
            return torch.as_tensor(array, device=f"cuda:{torch.cuda.current_device()}")
        return upload, lambda a: a.detach().cpu().numpy()
    import cupy
    return cupy.asarray, cupy.asnumpy


def _sequences_worker(args) -> None:
    import fusec.distributed as fd
    if args.frame == "torch":
        comm = fd.communicator(None, timeout=120)  # torchrun's environment: torch.distributed
    else:
        from mpi4py import MPI
        comm = fd.communicator(MPI.COMM_WORLD, timeout=120)  # the caller's mpi4py communicator
    chosen = None if args.shapes == "all" else [int(i) for i in args.shapes.split(",")]
    started = time.monotonic()
    results = run_cases(comm, _sequences(args.scripts), chosen, _frame(args.frame), _fusec_programs())
    Path(args.out, f"rank{comm.rank}.json").write_text(json.dumps(results))
    print(f"rank {comm.rank}: {len(results)} checks in {time.monotonic() - started:.0f} s", flush=True)


def _fusec_programs():
    """(stage executor, the one-GPU program) of fusec itself."""
    import fusec
    import fusec.distributed as fd
    from tests.helpers import library

    def executor(dtype, cache):
        return fd.fusec_executor(library(), dtype, cache=cache)

    def plain(script, dtype, sizes):
        return fusec.compile(library=library(), dtype=dtype, sizes=sizes, **where(script))
    return executor, plain


def run_cases(comm, scripts, chosen, frame, programs) -> list[dict]:
    """Every script and precision at each shape: the distributed result on this
    rank against the oracle and against the one-GPU program (on this rank's GPU,
    whole arrays), as records with ``why`` empty where they pass. Each rank
    builds its share of the programs first (nvcc's cache is shared), then the rest."""
    import fusec.distributed as fd
    from fusec import oracle
    from tests.helpers import library
    lib, (upload, download), (executor, plain) = library(), frame, programs
    rank, ranks = comm.rank, comm.size
    work = [(s, d) for s in scripts for d in DTYPES]
    stages: dict = {}
    plains: dict = {}

    def build(script, dtype):
        sizes = max(_shapes(script, chosen), key=lambda s: sum(s.values()))
        for stage in fd.plan(**where(script), sizes=sizes, ranks=ranks, dtype=dtype).stages:
            executor(dtype, stages)(stage)
        plains[script, dtype] = plain(script, dtype, sizes)

    for i, item in enumerate(work):
        if i % ranks == rank:
            build(*item)
    fd.comm.host_barrier(comm, 600)
    for item in work:
        if item not in plains:
            build(*item)
    results = []
    for script, dtype in work:
        for sizes in _shapes(script, chosen):
            prog = fd.compile(**where(script), dtype=dtype, sizes=sizes, comm=comm, latency=False,
                              executor=executor(dtype, stages))
            dag = prog.dag
            inputs = oracle.random_inputs(dag, sizes, dtype, zlib.crc32(repr((script, dtype, sizes)).encode()))
            expected = oracle.expect(dag, lib, inputs)
            local = {k: upload(np.ascontiguousarray(prog.local(k, v))) if isinstance(v, np.ndarray) else v
                     for k, v in inputs.items()}
            out = prog(**local)
            out = out if isinstance(out, tuple) else (out,)
            whole = {k: upload(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            alone = plains[script, dtype](**whole)
            alone = alone if isinstance(alone, tuple) else (alone,)
            for name, value, single in zip(prog.outputs, out, alone):
                vid = next(v for v in dag.outputs if dag.value(v).name == name)
                rows = prog.rows(name)
                cut = (lambda a: a) if rows is None else (lambda a, r=rows: a[r[0]:r[1]])
                mine, reference, gauge = download(value), cut(expected.reference[vid]), cut(expected.gauge[vid])
                limit = oracle.threshold(expected.sum_lengths[vid])
                ratio = oracle.test_ratio(mine, reference, gauge, dtype)
                versus = oracle.test_ratio(mine, cut(download(single)), gauge, dtype)
                why = ""
                if not ratio < limit:
                    why = f"ratio {ratio:.3g} against the oracle, threshold {limit:.3g}"
                elif not versus < limit:
                    why = f"ratio {versus:.3g} against the one-GPU program, threshold {limit:.3g}"
                results.append({"rank": rank, "script": script, "dtype": dtype, "shape": repr(sizes),
                                "output": name, "ratio": ratio, "versus_one_gpu": versus, "threshold": limit,
                                "why": why})
    return results


def _fail_worker(args) -> None:
    import cupy

    import fusec.distributed as fd
    prog = fd.compile(str(ROOT / "scripts" / "bicgk.script"), dtype="float32", sizes={"n": 1001},
                      latency=False, timeout=args.timeout)  # every rank holds rows, whatever the shipped table
    if prog.rank == 1:
        raise RuntimeError("planted failure on rank 1")
    args_ = {k: cupy.ones(prog.local_shape(k), dtype=cupy.float32) for k in prog.inputs}
    prog(**args_)
    prog.synchronize()  # never returns: the watchdog ends the process at the timeout
    print("rank 0 was not stopped", flush=True)


SOLVE_N = 1001  # no block of 2, 4 or 8 ranks equal
SOLVE_LAYOUTS = ("calls", "fewest", "agreed")  # "agreed", the default, under its own name too


def _solve_systems() -> tuple[dict, np.ndarray]:
    """Each solver's A (SPD for CG, diagonally dominant otherwise) and b, the same every call."""
    rng = np.random.default_rng(17)
    spd = rng.standard_normal((SOLVE_N, SOLVE_N)) / np.sqrt(SOLVE_N)
    general = 4 * np.eye(SOLVE_N) + rng.uniform(-0.5, 0.5, (SOLVE_N, SOLVE_N)) / np.sqrt(SOLVE_N)
    return {"cg": spd @ spd.T + np.eye(SOLVE_N), "bicg": general, "bicgstab": general}, rng.standard_normal(SOLVE_N)


def _solvers_worker(args) -> None:
    """Each solver in both precisions over the ranks on CuPy blocks, and on one GPU
    (fusec.solvers) for comparison; each rank writes its block of x."""
    import cupy
    from mpi4py import MPI

    import fusec.distributed as fd
    import fusec.distributed.solvers as ds
    import fusec.solvers
    comm = fd.communicator(MPI.COMM_WORLD, timeout=120)
    systems, b = _solve_systems()
    lo, hi = ds.rows(SOLVE_N, comm)
    records = []
    for name, A in systems.items():
        for dtype in DTYPES:
            rtol = 1e-4 if dtype == "float32" else 1e-10
            whole_A, whole_b = cupy.asarray(A.astype(dtype)), cupy.asarray(b.astype(dtype))
            one, one_info = getattr(fusec.solvers, name)(whole_A, whole_b, rtol=rtol)
            for layouts in SOLVE_LAYOUTS:
                x, info = getattr(ds, name)(cupy.ascontiguousarray(whole_A[lo:hi]), whole_b[lo:hi].copy(),
                                            comm=comm, rtol=rtol, layouts=layouts)
                records.append({"rank": comm.rank, "solver": name, "dtype": dtype, "layouts": layouts, "lo": lo,
                                "hi": hi, "info": info, "one_gpu_info": one_info, "x": cupy.asnumpy(x).tolist(),
                                "one_gpu_x": cupy.asnumpy(one[lo:hi]).tolist(), "rtol": rtol})
    Path(args.out, f"rank{comm.rank}.json").write_text(json.dumps(records))


def test_the_solvers_over_several_gpus(tmp_path):
    """fusec.distributed.solvers' cg, bicg and bicgstab on CuPy blocks, in the layouts the calls
    want, in those of the fewest collectives and in the default's (agreed): every rank stops with info 0, the blocks put
    together meet the rule by their true residual (float64: within 1.01 rtol; float32: 2 rtol),
    and x is the one-GPU solver's to the precision's rounding."""
    records = _worker_records("solvers", tmp_path)
    systems, b = _solve_systems()
    for name, A in systems.items():
        for dtype, layouts in itertools.product(DTYPES, SOLVE_LAYOUTS):
            mine = sorted((r for r in records if (r["solver"], r["dtype"], r["layouts"]) == (name, dtype, layouts)),
                          key=lambda r: r["lo"])
            assert [r["info"] for r in mine] == [0] * RANKS, (name, dtype, layouts)
            x = np.concatenate([r["x"] for r in mine])
            rtol = mine[0]["rtol"]
            residual = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
            assert residual <= (1.01 if dtype == "float64" else 2.0) * rtol, (name, dtype, layouts, residual)
            one = np.concatenate([r["one_gpu_x"] for r in mine])
            scale = 1e-9 if dtype == "float64" else 1e-3
            assert np.max(np.abs(x - one)) <= scale * np.max(np.abs(one)), (name, dtype, layouts)


GRAPH_ITERATIONS = 7  # the fixed-length solves compared plain against replayed


def _graphs_worker(args) -> None:
    """Each solver in both precisions with graphs=True (its calls captured in CUDA graphs and
    replayed) and without: to convergence, and GRAPH_ITERATIONS iterations at check_every 1
    and 3; each rank writes its blocks of x and whether its captures worked."""
    import cupy
    from mpi4py import MPI

    import fusec.distributed as fd
    import fusec.distributed.solvers as ds
    comm = fd.communicator(MPI.COMM_WORLD, timeout=120)
    captured: list[bool] = []
    real_capture = fd.DistributedProgram.capture

    def counting(self, issue, **options):
        graph = real_capture(self, issue, **options)
        captured.append(graph is not None)
        return graph
    fd.DistributedProgram.capture = counting
    systems, b = _solve_systems()
    lo, hi = ds.rows(SOLVE_N, comm)
    records = []
    for name, A in systems.items():
        for dtype in DTYPES:
            rtol = 1e-4 if dtype == "float32" else 1e-10
            A_rows = cupy.asarray(np.ascontiguousarray(A[lo:hi]).astype(dtype))
            b_rows = cupy.asarray(b[lo:hi].astype(dtype))
            solve = getattr(ds, name)
            record = {"rank": comm.rank, "solver": name, "dtype": dtype, "lo": lo, "hi": hi, "rtol": rtol}
            del captured[:]
            x, record["info"] = solve(A_rows, b_rows, comm=comm, rtol=rtol, graphs=True)
            record["x"], record["captured"] = cupy.asnumpy(x).tolist(), list(captured)
            for every in (1, 3):
                fixed = {}
                for graphs in (False, True):
                    del captured[:]
                    x, info = solve(A_rows, b_rows, comm=comm, rtol=1e-30, maxiter=GRAPH_ITERATIONS,
                                    check_every=every, graphs=graphs)
                    fixed[graphs] = {"x": cupy.asnumpy(x).tolist(), "info": info, "captured": list(captured)}
                record[f"fixed{every}"] = fixed[False], fixed[True]
            records.append(record)
    Path(args.out, f"rank{comm.rank}.json").write_text(json.dumps(records))


def test_the_solvers_replaying_cuda_graphs(tmp_path):
    """graphs=True over the ranks: every capture works on every rank (none falls back to plain
    calls), the solve converges (info 0 and the rule by the true residual, as without graphs;
    one that converges within its first plain calls captures nothing, as BiCGStab fp32 does
    here), and GRAPH_ITERATIONS iterations replayed, which capture on every rank, give the
    iterates of the same iterations made plainly, within the test ratio of sums of n terms
    (16 sqrt(n) eps of the largest entry)."""
    records = _worker_records("graphs", tmp_path)
    systems, b = _solve_systems()
    for name, A in systems.items():
        for dtype in DTYPES:
            mine = sorted((r for r in records if r["solver"] == name and r["dtype"] == dtype), key=lambda r: r["lo"])
            assert len(mine) == RANKS, (name, dtype)
            assert all(all(r["captured"]) for r in mine), (name, dtype, [r["captured"] for r in mine])
            assert [r["info"] for r in mine] == [0] * RANKS, (name, dtype)
            x = np.concatenate([r["x"] for r in mine])
            residual = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
            assert residual <= (1.01 if dtype == "float64" else 2.0) * mine[0]["rtol"], (name, dtype, residual)
            limit = 16 * np.sqrt(SOLVE_N) * np.finfo(dtype).eps
            for every in (1, 3):
                plain = np.concatenate([r[f"fixed{every}"][0]["x"] for r in mine])
                replayed = np.concatenate([r[f"fixed{every}"][1]["x"] for r in mine])
                infos = [(r[f"fixed{every}"][0]["info"], r[f"fixed{every}"][1]["info"]) for r in mine]
                assert infos == [(GRAPH_ITERATIONS, GRAPH_ITERATIONS)] * RANKS, (name, dtype, every, infos)
                made = [r[f"fixed{every}"][1]["captured"] for r in mine]
                assert all(m and all(m) for m in made), (name, dtype, every, made)
                assert np.isfinite(replayed).all(), (name, dtype, every)
                apart = np.max(np.abs(replayed - plain))
                assert apart <= limit * np.max(np.abs(plain)), (name, dtype, every, apart)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["sequences", "fail", "solvers", "graphs"])
    parser.add_argument("out")
    parser.add_argument("--scripts", default="all")
    parser.add_argument("--shapes", default="all", help="indices into SHAPES, e.g. 0,2")
    parser.add_argument("--frame", default="cupy", choices=["cupy", "torch"])
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    {"sequences": _sequences_worker, "fail": _fail_worker, "solvers": _solvers_worker,
     "graphs": _graphs_worker}[args.what](args)


if __name__ == "__main__":
    main()
