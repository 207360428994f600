"""Communicators: NCCL through CuPy (``cupy.cuda.nccl``), started from mpi4py or
given; ``torch.distributed`` (a process group given, or started from
torchrun's environment); and :class:`fusec.distributed.threads.ThreadComm`
for ranks that are threads of one process (CPU tests).

Every collective is queued on the stream it is given and returns at once
(stream order, no host synchronisation); the caller watches it
(:mod:`.watchdog`). Arrays are flat and contiguous; counts are elements.
Blocks of unequal length (sizes that do not divide by the ranks, ranks that
hold no rows) go as a group of broadcasts (gather) or reduces (scatter of
sums), the way PyTorch gathers tensors of unequal sizes.

NVLink multicast (NVLS) is turned off in NCCL, PyTorch's symmetric memory and
NVSHMEM before any of them starts (the GPU hosts these programs run on are
shared, and a program using multicast can take their GPUs out of service);
these collectives are small, and NCCL picks ring or tree for them anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from typing import Any, Callable

import numpy as np

from .. import validate as check
from ..errors import ArgumentError, GPUUnavailableError
from .errors import CollectiveError

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)  # at import: before NCCL, PyTorch or NVSHMEM initialise

DEFAULT_TIMEOUT = 120.0  # seconds a collective may take where $FUSEC_COLLECTIVE_TIMEOUT does not say


def default_timeout() -> float:
    """$FUSEC_COLLECTIVE_TIMEOUT, else DEFAULT_TIMEOUT. Read when a communicator or a program is
    made, so that a bad value is an ArgumentError naming the variable there (read at import, it
    was a ValueError of ``import fusec.distributed``)."""
    return float(check.environment_number("FUSEC_COLLECTIVE_TIMEOUT", DEFAULT_TIMEOUT, low=0, above=True))


def checked_timeout(timeout: Any) -> float | None:
    """``timeout=`` (seconds each collective may take; None: :func:`default_timeout`) checked as
    ``$FUSEC_COLLECTIVE_TIMEOUT`` is: a finite number > 0, else an ArgumentError naming
    ``timeout``. Checked before a communicator starts: joining NCCL is watched with it, and
    torchrun's process group is made with it."""
    if timeout is None:
        return None
    seconds = check.finite_real(timeout)
    if seconds is None or seconds <= 0:
        raise ArgumentError("timeout", f"is {check.brief(timeout)}: seconds, a finite number > 0")
    return seconds

MPI_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


def _interface(array) -> tuple[int, int, np.dtype]:
    """(device pointer, elements, dtype) of a contiguous device array (CuPy's read directly: the
    interface's dictionary is made anew on every ask, four times a collective)."""
    data = getattr(array, "data", None)
    if hasattr(data, "ptr"):  # cupy.ndarray
        return int(data.ptr), int(array.size), array.dtype
    cai = array.__cuda_array_interface__
    count = int(np.prod(cai["shape"], dtype=np.int64))
    return int(cai["data"][0]), count, np.dtype(cai["typestr"])


def _offsets(counts) -> list[int]:
    out, total = [], 0
    for c in counts:
        out.append(total)
        total += c
    return out


class Communicator:
    """What a distributed program needs of a communicator; see the backends."""

    backend = "none"
    capturable = False  # its collectives on a capturing stream go into the CUDA graph (program.capture)
    rank: int = 0
    size: int = 1
    device: int | None = None
    arrays_family = "numpy"

    def __init__(self):
        self.failed: Exception | None = None  # set when a collective timed out or failed: nothing runs again

    def check(self) -> None:
        if self.failed is not None:
            raise self.failed

    def abort(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<fusec {self.backend} communicator: rank {self.rank} of {self.size}, device {self.device}>"


class NcclComm(Communicator):
    """NCCL through ``cupy.cuda.nccl``: one process per GPU."""

    backend = "nccl"
    arrays_family = "cupy"
    capturable = True  # NCCL 2.9 on: collectives, groups and P2P on a capturing stream are captured

    def __init__(self, nccl_comm, device: int):
        super().__init__()
        from cupy.cuda import nccl
        self.nccl_module, self.nccl = nccl, nccl_comm
        self.rank, self.size, self.device = nccl_comm.rank_id(), nccl_comm.size(), int(device)
        self._types = {np.dtype(np.float32): nccl.NCCL_FLOAT32, np.dtype(np.float64): nccl.NCCL_FLOAT64}

    def _type(self, dtype: np.dtype) -> int:
        return self._types[np.dtype(dtype)]

    def all_reduce(self, send, recv, stream: int) -> None:
        sp, count, dtype = _interface(send)
        rp, _, _ = _interface(recv)
        if count:
            self.nccl.allReduce(sp, rp, count, self._type(dtype), self.nccl_module.NCCL_SUM, stream)

    def all_gather(self, send, recv, counts, stream: int) -> None:
        sp, mine, dtype = _interface(send)
        rp, _, _ = _interface(recv)
        if len(set(counts)) == 1:
            self.nccl.allGather(sp, rp, counts[0], self._type(dtype), stream)
            return
        size = dtype.itemsize
        self.nccl_module.groupStart()
        try:
            for root, (count, offset) in enumerate(zip(counts, _offsets(counts))):
                if count:
                    source = sp if root == self.rank else rp + offset * size
                    self.nccl.broadcast(source, rp + offset * size, count, self._type(dtype), root, stream)
        finally:
            self.nccl_module.groupEnd()

    def reduce_scatter(self, send, recv, counts, stream: int) -> None:
        sp, _, dtype = _interface(send)
        rp, _, _ = _interface(recv)
        if len(set(counts)) == 1:
            self.nccl.reduceScatter(sp, rp, counts[0], self._type(dtype), self.nccl_module.NCCL_SUM, stream)
            return
        size = dtype.itemsize
        self.nccl_module.groupStart()
        try:
            for root, (count, offset) in enumerate(zip(counts, _offsets(counts))):
                if count:
                    target = rp if root == self.rank else sp + offset * size  # ignored off the root
                    self.nccl.reduce(sp + offset * size, target, count, self._type(dtype),
                                     self.nccl_module.NCCL_SUM, root, stream)
        finally:
            self.nccl_module.groupEnd()

    def broadcast(self, buffer, root: int, stream: int) -> None:
        pointer, count, dtype = _interface(buffer)
        if count:
            self.nccl.bcast(pointer, count, self._type(dtype), root, stream)

    def scatter(self, blocks, recv, root: int, stream: int) -> None:
        """``blocks`` (on the root: every rank's flat block, in rank order) to each rank's ``recv``."""
        rp, mine, dtype = _interface(recv)
        self.nccl_module.groupStart()
        try:
            if self.rank == root:
                for rank, block in enumerate(blocks):
                    pointer, count, _ = _interface(block)
                    if rank != root and count:
                        self.nccl.send(pointer, count, self._type(dtype), rank, stream)
            elif mine:
                self.nccl.recv(rp, mine, self._type(dtype), root, stream)
        finally:
            self.nccl_module.groupEnd()

    def gather(self, send, blocks, root: int, stream: int) -> None:
        """Each rank's ``send`` into ``blocks[rank]`` on the root."""
        sp, mine, dtype = _interface(send)
        self.nccl_module.groupStart()
        try:
            if self.rank == root:
                for rank, block in enumerate(blocks):
                    pointer, count, _ = _interface(block)
                    if rank != root and count:
                        self.nccl.recv(pointer, count, self._type(dtype), rank, stream)
            elif mine:
                self.nccl.send(sp, mine, self._type(dtype), root, stream)
        finally:
            self.nccl_module.groupEnd()

    def abort(self) -> None:
        if self.nccl is not None:
            self.nccl.abort()


class TorchComm(Communicator):
    """``torch.distributed`` with its NCCL backend: a process group given, or the default one.

    Its own watchdog (the group's timeout) guards its collectives too."""

    backend = "torch"
    arrays_family = "torch"

    def __init__(self, group=None):
        super().__init__()
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.group = torch, dist, group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.device = torch.cuda.current_device()

    def _global(self, rank: int) -> int:
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def _tensor(self, array):
        return self.torch.as_tensor(array, device=f"cuda:{self.device}")

    def _on(self, stream: int):
        s = (self.torch.cuda.ExternalStream(stream, device=f"cuda:{self.device}") if stream
             else self.torch.cuda.default_stream(self.device))
        return self.torch.cuda.stream(s)

    def all_reduce(self, send, recv, stream: int) -> None:
        with self._on(stream):
            out = self._tensor(recv)
            out.copy_(self._tensor(send))
            if out.numel():
                self.dist.all_reduce(out, group=self.group)

    def all_gather(self, send, recv, counts, stream: int) -> None:
        with self._on(stream):
            out, mine = self._tensor(recv), self._tensor(send)
            if len(set(counts)) == 1:
                self.dist.all_gather_into_tensor(out, mine, group=self.group)
                return
            offsets = _offsets(counts)
            out[offsets[self.rank]:offsets[self.rank] + counts[self.rank]].copy_(mine)
            for root, (count, offset) in enumerate(zip(counts, offsets)):
                if count:
                    self.dist.broadcast(out[offset:offset + count], src=self._global(root), group=self.group)

    def reduce_scatter(self, send, recv, counts, stream: int) -> None:
        with self._on(stream):
            out, whole = self._tensor(recv), self._tensor(send)
            if len(set(counts)) == 1:
                self.dist.reduce_scatter_tensor(out, whole, group=self.group)
                return
            for root, (count, offset) in enumerate(zip(counts, _offsets(counts))):
                if count:
                    part = whole[offset:offset + count].clone()
                    self.dist.reduce(part, dst=self._global(root), group=self.group)
                    if root == self.rank:
                        out.copy_(part)

    def broadcast(self, buffer, root: int, stream: int) -> None:
        with self._on(stream):
            tensor = self._tensor(buffer)
            if tensor.numel():
                self.dist.broadcast(tensor, src=self._global(root), group=self.group)

    def scatter(self, blocks, recv, root: int, stream: int) -> None:
        with self._on(stream):
            ops = []
            if self.rank == root:
                for rank, block in enumerate(blocks):
                    tensor = self._tensor(block)
                    if rank != root and tensor.numel():
                        ops.append(self.dist.P2POp(self.dist.isend, tensor, self._global(rank), self.group))
            elif self._tensor(recv).numel():
                ops.append(self.dist.P2POp(self.dist.irecv, self._tensor(recv), self._global(root), self.group))
            for work in (self.dist.batch_isend_irecv(ops) if ops else []):
                work.wait()  # NCCL: the current stream waits, not the host

    def gather(self, send, blocks, root: int, stream: int) -> None:
        with self._on(stream):
            ops = []
            if self.rank == root:
                for rank, block in enumerate(blocks):
                    tensor = self._tensor(block)
                    if rank != root and tensor.numel():
                        ops.append(self.dist.P2POp(self.dist.irecv, tensor, self._global(rank), self.group))
            elif self._tensor(send).numel():
                ops.append(self.dist.P2POp(self.dist.isend, self._tensor(send), self._global(root), self.group))
            for work in (self.dist.batch_isend_irecv(ops) if ops else []):
                work.wait()

    def abort(self) -> None:
        pass  # torch's own watchdog aborts its communicators on its timeout


def _use_device(device: int) -> None:
    """Make ``device`` the one whose primary context fusec's runtime pushes ($FUSEC_DEVICE);
    the callers that choose it make it CuPy's or PyTorch's current device too."""
    os.environ["FUSEC_DEVICE"] = str(device)


def _local_device(local_rank: int) -> int:
    import cupy
    return local_rank % cupy.cuda.runtime.getDeviceCount()


def from_mpi(mpi_comm, timeout: float | None = None) -> NcclComm:
    """A NCCL communicator over the processes of an mpi4py communicator: the
    NCCL id is made on rank 0 and broadcast over MPI; each process takes the
    GPU of its rank on its node."""
    timeout = default_timeout() if timeout is None else timeout
    import cupy
    from cupy.cuda import nccl
    from mpi4py import MPI
    local = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED)
    device = _local_device(local.Get_rank())
    local.Free()
    _use_device(device)
    cupy.cuda.Device(device).use()
    uid = nccl.get_unique_id() if mpi_comm.Get_rank() == 0 else None
    uid = mpi_comm.bcast(uid, root=0)
    return NcclComm(_init_nccl(mpi_comm.Get_size(), uid, mpi_comm.Get_rank(), timeout), device)


def _init_nccl(size: int, uid, rank: int, timeout: float):
    """``NcclCommunicator(size, uid, rank)``, which waits for every rank: a rank
    that never comes ends this process after ``timeout`` seconds."""
    from cupy.cuda import nccl

    from . import watchdog

    class Joining:  # what the watchdog needs while the communicator does not exist yet
        def __init__(self):
            self.failed, self.rank, self.size, self.joined = None, rank, size, False

        def done(self) -> bool:
            return self.joined

        def abort(self) -> None:
            pass

    joining = Joining()
    watchdog.WATCHDOG.watch(joining, "joining the NCCL communicator", joining, timeout, "exit")
    try:
        return nccl.NcclCommunicator(size, uid, rank)
    finally:
        joining.joined = True


def from_torchrun(timeout: float | None = None) -> TorchComm:
    """torch.distributed's default group with the NCCL backend, from torchrun's
    environment (started here unless the caller started it)."""
    timeout = default_timeout() if timeout is None else timeout
    import datetime

    import torch
    import torch.distributed as dist
    device = int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    _use_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout),
                                device_id=torch.device("cuda", device))
        _STARTED.append(dist)  # fusec started it: fusec ends it at exit
    return TorchComm(None)


def launched_by() -> str | None:
    """"mpi" or "torchrun" when this process was started by one, else None."""
    if all(v in os.environ for v in TORCHRUN_VARIABLES):
        return "torchrun"
    if any(v in os.environ for v in MPI_SIZE_VARIABLES):
        return "mpi"
    return None


_MADE: dict = {}  # communicators fusec made, by what they were made from: one NCCL communicator each
_STARTED: list = []  # torch.distributed, where fusec started its default group
_BEFORE_CLOSING: list = []  # what lets go of CUDA graphs holding collectives, before the destroys


def before_closing(hook: Callable[[], None]) -> None:
    """Have ``hook()`` run at exit before the communicators fusec made are destroyed: NCCL's
    destroy waits until every CUDA graph holding the communicator's collectives is destroyed,
    so a graph kept to the end would hang the exit."""
    _BEFORE_CLOSING.append(hook)


@atexit.register
def _close_made() -> None:
    """Destroy the NCCL communicators fusec made while CUDA is still up (left to
    the interpreter's teardown, they would go after it), once the graphs holding
    their collectives are gone. One with collectives in flight was aborted already
    (watchdog, registered later, runs first)."""
    for hook in _BEFORE_CLOSING:
        try:
            hook()
        except Exception:  # exiting: nothing more to do about it
            pass
    for comm in _MADE.values():
        if isinstance(comm, NcclComm) and comm.failed is None:
            try:
                comm.nccl.destroy()
            except Exception:  # exiting: nothing more to do about it
                pass
    for dist in _STARTED:  # PyTorch aborts the process at exit when its NCCL group is left alive
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # exiting: nothing more to do about it
            pass


def communicator(comm: Any = None, *, timeout: float | None = None) -> Communicator | None:
    """A fusec communicator from what the caller has: a fusec communicator; an
    mpi4py communicator; a ``cupy.cuda.nccl.NcclCommunicator``; a
    ``torch.distributed`` process group (or ``"torch"`` for the default one);
    or None: made from mpirun's or torchrun's environment, and None in a
    process nobody launched (one rank: the plain program). What fusec makes
    from an environment or an mpi4py communicator is made once per process
    and handed out again; so is its wrapper of a NCCL communicator or process
    group of the caller's (the last few), which programs and graphs are kept by."""
    timeout = default_timeout() if timeout is None else checked_timeout(timeout)
    if isinstance(comm, Communicator):
        return comm
    if comm is None:
        launcher = launched_by()
        if launcher == "mpi":
            with _needs("mpi4py", "this process was started by mpirun (comm=None)"):
                from mpi4py import MPI
            return communicator(MPI.COMM_WORLD, timeout=timeout)
        if launcher == "torchrun" and launcher not in _MADE:
            with _needs("torch", "this process was started by torchrun (comm=None)"):
                _MADE[launcher] = from_torchrun(timeout)
        return _MADE.get(launcher)
    if isinstance(comm, str) and comm == "torch":
        with _needs("torch", "comm='torch'"):
            return _given("torch", lambda: TorchComm(None))
    module = type(comm).__module__
    if hasattr(comm, "Get_rank") and hasattr(comm, "Get_size"):
        key = ("mpi", comm.py2f()) if hasattr(comm, "py2f") else ("mpi", id(comm))
        if key not in _MADE:
            with _needs("cupy", "comm, an mpi4py communicator,"):
                _MADE[key] = from_mpi(comm, timeout)
        return _MADE[key]
    if module.startswith("cupy") and hasattr(comm, "rank_id"):
        _use_device(comm.device_id())
        return _given(comm, lambda: NcclComm(comm, comm.device_id()))
    if module.startswith("torch"):
        return _given(comm, lambda: TorchComm(comm))
    raise ArgumentError("comm", f"is a {type(comm).__name__}: pass an mpi4py communicator, a"
                                " cupy.cuda.nccl.NcclCommunicator, a torch.distributed process group,"
                                " 'torch', or None (from mpirun's or torchrun's environment)")


@contextlib.contextmanager
def _needs(module: str, what: str):
    """A GPUUnavailableError saying that ``what`` needs ``module`` where an import of it fails
    (mpi4py, CuPy with NCCL, PyTorch), not the ModuleNotFoundError."""
    try:
        yield
    except ImportError as exc:
        raise GPUUnavailableError(f"{what} needs {module}, which does not import here ({exc}): install it,"
                                  " or pass another communicator") from None


_GIVEN: dict = {}  # id of a caller's communicator -> (it, fusec's wrapper of it), oldest first
MOST_GIVEN = 8


def _given(handle, make: Callable[[], Communicator]) -> Communicator:
    """fusec's communicator over the caller's ``handle`` (a NCCL communicator, a process group):
    made once and handed out again, as the programs and CUDA graphs kept between solves are kept
    by communicator (a new wrapper each call compiled them again). The handle is held beside
    it, so its id stays its own."""
    key = handle if isinstance(handle, str) else id(handle)
    kept = _GIVEN.get(key)
    if kept is None:
        while len(_GIVEN) >= MOST_GIVEN:
            del _GIVEN[next(iter(_GIVEN))]
        kept = _GIVEN[key] = (handle, make())
    return kept[1]


def host_all_gather(comm: Communicator, value: float, timeout: float, what: str) -> list[float]:
    """Every rank's ``value`` (a float64: integers below 2**53 exact), in rank order: one
    all-gather, waited for (every rank here, or the error, as :func:`host_barrier`)."""
    helper, stream = _host_helper(comm)
    send, recv = helper.zeros((1,), np.float64), helper.zeros((comm.size,), np.float64)
    helper.copy_into(send, float(value))
    comm.all_gather(send, recv, [1] * comm.size, stream)
    _wait_on_host(comm, helper, stream, what, timeout)
    return [float(v) for v in helper.host(recv)]


def host_barrier(comm: Communicator, timeout: float) -> None:
    """Every rank here, or the error: a one-element all-reduce, waited for."""
    helper, stream = _host_helper(comm)
    one = helper.zeros((1,), np.float32)
    comm.all_reduce(one, one, stream)
    _wait_on_host(comm, helper, stream, "the start-up barrier", timeout)


def _host_helper(comm: Communicator):
    """The arrays helper of ``comm``'s framework and device, and its current stream."""
    from . import arrays
    helper = arrays.arrays_for(comm.arrays_family, comm.device)
    return helper, helper.current_stream()


def _wait_on_host(comm: Communicator, helper, stream: int, what: str, timeout: float) -> None:
    """The host waits for ``stream``'s collective, watched: the error where it fails or times out."""
    from . import watchdog
    started = time.monotonic()
    watchdog.wait(helper.event().record(stream), what, comm, timeout, "raise")
    if comm.failed is not None:
        raise CollectiveError(f"{what} failed after {time.monotonic() - started:.1f} s")
