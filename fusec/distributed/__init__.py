"""Distributed programs: a script over P GPUs, one process each, matrices split
by rows, NCCL collectives placed by the compiler (docs/distributed.md).

    mpirun -n 2 python -m mpi4py my_solver.py          # or: torchrun --nproc-per-node 2 my_solver.py

    import fusec.distributed as fd
    prog = fd.compile("scripts/bicgk.script", dtype="float32", sizes={"m": 16384, "n": 16384})
    A = prog.scatter("A", A_whole if prog.rank == 0 else None)   # or build the rank's rows itself
    q, s = prog(A=A, p=p, r=prog.local("r", r_whole))            # q: this rank's rows; s: whole
    print(prog.describe())

Importing this package turns NVLink multicast off for NCCL, PyTorch and
NVSHMEM (see :mod:`.comm`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from .. import validate
from ..api import check_gpu
from ..errors import ArgumentError
from .comm import Communicator, checked_timeout, communicator, default_timeout
from .errors import CollectiveError, CollectiveTimeoutError, DistributionError
from .layout import Layout, Op
from .plan import DistributedPlan
from .program import DistributedProgram, Timings
from .scaling import Latency

__all__ = ["compile", "plan", "communicator", "Communicator", "DistributedPlan", "DistributedProgram", "Latency",
           "Layout", "Op", "Timings", "DistributionError", "CollectiveError", "CollectiveTimeoutError",
           "fusec_executor"]


def _dag(script, source, name, library):
    from ..api import resolve_library, script_dag
    lib = resolve_library(library)
    return script_dag(script, source, name, lib), lib


def _latency(latency, gpu) -> Latency | None:
    if latency is None:
        from ..target import chosen_slug
        from .scaling import shipped
        return shipped(chosen_slug(gpu))
    if latency is False:
        return None
    if isinstance(latency, Latency):
        return latency
    if isinstance(latency, (str, os.PathLike)):
        try:
            return Latency.load(latency)
        except OSError as exc:
            raise ArgumentError("latency", f"{os.fspath(latency)!r} cannot be read ({exc.strerror or exc}): pass the"
                                           " path of a table bench/distributed.py wrote") from None
        except (ValueError, KeyError, TypeError, IndexError) as exc:  # not JSON, or not such a table
            raise ArgumentError("latency", f"{os.fspath(latency)!r} is not a table of collective latencies"
                                           f" ({type(exc).__name__}: {exc}): pass one bench/distributed.py wrote"
                                ) from None
    raise ArgumentError("latency", f"is a {type(latency).__name__}: pass a fusec.distributed.Latency, the path of"
                                   " one bench/distributed.py wrote, False (every rank holds rows) or None")


def plan_dag(dag, library, ranks: int, sizes: Mapping[str, int], dtype: str, *, active: int | None = None,
             latency: Latency | None = None, gpu: str | None = None,
             results: Mapping[str, str] | None = None, inputs: Mapping[str, str] | None = None,
             stage_seconds: Callable | None = None) -> DistributedPlan:
    """The plan of a checked DAG; with a latency table and no ``active`` given,
    the count of ranks holding rows is the one :mod:`.scaling` predicts fastest,
    each stage priced by ``gpu``'s performance model (``stage_seconds``: a
    :func:`.scaling.modelled` pricing kept by a caller that plans many sizes)."""
    from . import planner, scaling
    if active is not None or latency is None or ranks == 1:
        return planner.plan(dag, library, ranks, sizes, dtype, active=active, results=results, inputs=inputs)
    from ..cost.perfdb import predictor_for
    predictor = predictor_for(library, gpu)
    stage_seconds = stage_seconds or scaling.modelled(library, dtype, predictor)
    plans: dict[int, DistributedPlan] = {}

    def seconds(a: int) -> float:
        plans[a] = planner.plan(dag, library, ranks, sizes, dtype, active=a, results=results, inputs=inputs)
        if plans[a].active != a:  # fewer rows than ranks: a cannot hold rows each
            return float("inf")
        return scaling.predicted_seconds(plans[a], dag, latency, predictor.target.copy_bandwidth,
                                         stage_seconds=stage_seconds)
    return plans[scaling.active_ranks(ranks, seconds)]


def plan(script=None, *, source: str | None = None, name: str = "<string>", library=None, dtype="float32",
         sizes: Mapping[str, int], ranks: int, active: int | None = None, latency=False,
         gpu: str | None = None, results: Mapping[str, str] | None = None,
         inputs: Mapping[str, str] | None = None) -> DistributedPlan:
    """The distributed plan of a script (a path, or its text as ``source``) over
    ``ranks`` processes at ``sizes``, without a GPU or a communicator.
    ``latency``: a :class:`Latency` table (or its path) to choose how many
    ranks hold rows by; None looks for the one fusec ships for ``gpu``;
    False (the default here) keeps every rank. ``results``, ``inputs``: see :func:`compile`."""
    check_gpu(gpu)
    dag, lib = _dag(script, source, name, library)
    return plan_dag(dag, lib, ranks, sizes, validate.dtype(dtype), active=active, latency=_latency(latency, gpu),
                    gpu=gpu, results=results, inputs=inputs)


def fusec_executor(library, dtype: str, *, gpu: str | None = None, tuned: bool = True,
                   cache: dict | None = None) -> Callable:
    """Stages compiled by :func:`fusec.compile` for their sizes, each reading the scalars
    that stages and collectives make from device memory (``stage.device_scalars``).
    With ``cache`` (a dict the caller keeps) a stage of the same text is compiled once and
    serves every size (a fusec program runs at any size): programs of one
    script planned for several sizes share their stages.

    An executor (this one, :func:`fusec.distributed.threads.oracle_executor`, or the
    caller's) turns a :class:`~fusec.distributed.plan.Stage` into a callable taking the
    stage's inputs by name: arrays of the call's framework, host numbers for the scalars
    the caller passed, and one-element arrays for those in ``stage.device_scalars``."""
    import fusec

    def compile_stage(stage):
        key = (stage.source, stage.device_scalars, dtype)
        if cache is not None and key in cache:
            return cache[key]
        # never measured here, whatever $FUSEC_MEASURE says: each rank would time its own
        # candidates (and may pick others than its neighbours, whose sums must match them)
        program = fusec.compile(source=stage.source, name=stage.name, library=library, dtype=dtype,
                                sizes=dict(stage.sizes), gpu=gpu, tuned=tuned, device_scalars=stage.device_scalars,
                                measure=False)
        if cache is not None:
            cache[key] = program
        return program
    return compile_stage


def _arch(comm: Communicator | None) -> str | None:
    if comm is None or comm.device is None:
        return None
    try:
        if comm.arrays_family == "torch":
            import torch
            major, minor = torch.cuda.get_device_capability(comm.device)
            return f"sm_{major}{minor}"
        import cupy
        return f"sm_{cupy.cuda.Device(comm.device).compute_capability}"
    except Exception:  # no framework to ask: the cubins are built at the first call
        return None


def compile(script=None, *, source: str | None = None, name: str = "<string>", library=None, dtype="float32",
            sizes: Mapping[str, int], comm: Any = None, active: int | None = None, latency=None,
            gpu: str | None = None, tuned: bool = True, timeout: float | None = None, on_timeout: str = "exit",
            executor: Callable | None = None, results: Mapping[str, str] | None = None,
            inputs: Mapping[str, str] | None = None) -> DistributedProgram:
    """Compile a script for the ranks of ``comm`` (see :func:`communicator`;
    None: from mpirun's or torchrun's environment, or one process) at the global
    ``sizes``. Every rank calls this with the same arguments; ranks that hold
    rows compile the stages (each an ordinary fusec program on its rows).

    ``active``: how many ranks hold rows (default: as :mod:`.scaling` predicts
    fastest from ``latency``, else all). ``timeout``: seconds each collective
    may take (default $FUSEC_COLLECTIVE_TIMEOUT, else 120); ``on_timeout``:
    "exit" ends the process with the error, "raise" raises it at the next call.
    ``executor``: how a stage becomes a callable (default
    :func:`fusec_executor`; :func:`fusec.distributed.threads.oracle_executor`
    runs stages with the float64 oracle). ``results``: the layout a result is
    returned in, by name (``{"p1": "whole"}``), where not the one it is made in
    and a collective can make it (a split result gathered whole on every rank; a
    partial one split by a reduce-scatter). ``inputs``: the layout a vector
    input is passed in, by name (``{"r": "whole"}``), where not the one the
    plan would choose (split unless a call reads it whole): a loop passing back
    what its last call returned gives its results' layouts as the inputs'."""
    from .comm import host_barrier
    check_gpu(gpu)
    check_executor(executor)
    timeout = default_timeout() if timeout is None else checked_timeout(timeout)
    comm = communicator(comm, timeout=timeout)  # after the checks: one from mpirun's environment joins NCCL
    dag, lib = _dag(script, source, name, library)
    dtype = validate.dtype(dtype)
    ranks = comm.size if comm is not None else 1
    the_plan = plan_dag(dag, lib, ranks, sizes, dtype, active=active, latency=_latency(latency, gpu), gpu=gpu,
                        results=results, inputs=inputs)
    executor = executor or fusec_executor(lib, dtype, gpu=gpu, tuned=tuned)
    program = DistributedProgram(the_plan, dag, comm, executor, timeout=timeout, on_timeout=on_timeout)
    arch = _arch(comm)
    sources = [p.source for p in program.programs if isinstance(getattr(p, "source", None), str)]
    if arch is not None and sources:  # built now, in parallel: no rank builds them while the others wait
        from .. import nvcc
        nvcc.compile_many(sources, arch)
    if comm is not None and ranks > 1:  # every rank compiled: calls start together
        from .planner import summed_on_every_rank
        summed = summed_on_every_rank(the_plan, dag, lib)
        if summed and the_plan.active > 1:
            _check_same_kernels(comm, program, [dag.value(v).name for v in summed], max(timeout, default_timeout()))
        else:
            host_barrier(comm, max(timeout, default_timeout()))
    return program


def check_executor(executor) -> None:
    """``executor=``: None, or a callable that makes a stage's program (an ArgumentError naming
    it otherwise), checked before a communicator is made."""
    if executor is not None and not callable(executor):
        raise ArgumentError("executor", f"is a {type(executor).__name__}: pass a callable that makes a stage's"
                                        " program (fusec_executor, threads.oracle_executor), or None")


def _check_same_kernels(comm: Communicator, program: DistributedProgram, summed: list[str], timeout: float) -> None:
    """Where every rank sums ``summed`` for itself, the ranks holding rows must have compiled the
    same stage kernels, or their sums could differ in their last bits (another tuning cache,
    another GPU): a digest of each rank's stage sources, all-gathered (the start-up barrier too),
    else a DistributionError on every rank naming the groups of ranks."""
    import hashlib

    from .comm import host_all_gather
    if program.holds_rows:
        text = "\0".join(p.source if isinstance(getattr(p, "source", None), str) else stage.source
                         for p, stage in zip(program.programs, program.plan.stages))
        digest = float(int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big"))  # 48 bits: exact
    else:
        digest = -1.0  # no rows, no kernels
    digests = host_all_gather(comm, digest, timeout, "the check that the ranks compiled the same kernels")
    groups: dict[float, list[int]] = {}
    for rank, d in enumerate(digests):
        if d >= 0:
            groups.setdefault(d, []).append(rank)
    if len(groups) > 1:
        named = "; ".join("rank(s) " + ", ".join(map(str, ranks)) for ranks in groups.values())
        raise DistributionError(
            f"{program.plan.name}: the ranks holding rows compiled different stage kernels ({named}: one set"
            f" each), and every rank sums {', '.join(summed)} for itself, so their last bits could differ:"
            " give every rank the same tuning cache ($FUSEC_CACHE_DIR) and the same kind of GPU", None, None)
