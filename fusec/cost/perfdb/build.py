"""``fusec perfdb build``: time every routine of a library on the GPU present.

For each routine key (:mod:`fusec.cost.perfdb.probes`) the probe kernel runs on a
problem big enough for several waves of blocks, at each number of blocks per
SM from 1 up to what the probe itself allows; extra dynamic shared memory
holds the SM to that many blocks, as a fusion's footprint would. A run's time
(as the GPU runs it, see :class:`fusec.runtime.cuda.GpuClock`), less the launch cost, divided
by the waves of blocks and the serial iterations, is the seconds one block
spends on the routine per iteration at that many blocks per SM.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import statistics
from pathlib import Path

from ... import nvcc
from ...cache import locked
from ...errors import FusecError, GPUUnavailableError
from ...library.model import Geometry, Kind, Library
from ...progress import Progress
from ...target import GpuTarget, from_device, present
from ...version import __version__
from ..model import SHARED_RESERVED, iterations, natural_blocks
from . import store
from .probes import Probe, RoutineKey, modules, probes

LEVELS = (1, 2, 3, 4, 6, 8, 12, 16)  # blocks per SM measured, and the probe's own most
WAVES = 6  # waves of blocks at the highest level, so the ragged end stays small
REPEAT = 5


def limiting_shared(blocks: int, static_shared: int, target: GpuTarget) -> int:
    """Dynamic shared memory per block that leaves room for exactly ``blocks`` per SM."""
    per_block = target.shared_per_sm // blocks - SHARED_RESERVED
    return max(0, min(per_block, target.shared_per_block) - static_shared)


def problem_sizes(probe: Probe, most_blocks: int, sms: int) -> dict[str, int]:
    """Sizes that give about WAVES waves of blocks at ``most_blocks`` per SM, and
    at least the probes' usual sizes (past the L2)."""
    kernel = probe.kernel
    sizes = dict(probe.sizes)
    wanted = WAVES * sms * most_blocks
    grid = kernel.grid(sizes)
    if grid >= wanted:
        return sizes
    if kernel.plan.geometry is Geometry.VECTOR:
        (dim,) = kernel.dims
        sizes[dim] = math.ceil(sizes[dim] * wanted / grid)
    elif kernel.dims[0] == kernel.dims[1]:
        # a square matrix: its one size grows the tiles along both axes, so by the square root
        # (stretched as the others are, a triangle's probe asked for terabytes)
        sizes[kernel.dims[0]] = math.ceil(sizes[kernel.dims[0]] * math.sqrt(wanted / grid))
    else:  # stretch the serial axis: more blocks along it, same tile count across
        dim = kernel.dims[0] if kernel.plan.serial == "rows" else kernel.dims[1]
        sizes[dim] = math.ceil(sizes[dim] * wanted / grid)
    return sizes


def build(library: Library, dtypes=("float32", "float64"), folder: Path | None = None,
          progress: bool = True, select=None, missing: bool = False) -> tuple[store.Database, Path]:
    """Time the library's routines on the GPU present and write its database
    into ``folder`` (default :func:`store.directory`). ``select(probe)`` keeps
    a subset (tests use it). With ``missing``, only the routine keys the
    existing database lacks are timed and its other timings are kept (the space
    grew new shapes, or the library new functions: :func:`store.timed`).

    Timings of a precision not measured now are kept from the existing file,
    when it is usable for this library and GPU."""
    from ...runtime import cuda
    info, target = present(), from_device()
    if info is None or target is None:
        raise GPUUnavailableError("'fusec perfdb build' times routines on the GPU: none found"
                                  " (it needs PyCUDA and an NVIDIA GPU)")
    folder = Path(folder) if folder else store.directory()
    path = store.path_for(info.slug, folder)
    old = _usable(path, library, info.slug)
    found = [p for p in probes(library, dtypes) if select is None or select(p)]
    if missing:
        if old is None:
            raise FusecError(f"--missing: {path} is not a usable database of library {library.name!r}"
                             f" on this GPU (absent, damaged, or of another library version):"
                             f" build it whole")
        found = [p for p in found if p.key not in old.timings]
    sources = list(modules(library, found))
    driver = cuda.driver()
    with cuda.context() as ctx:
        arch = cuda.arch_of(ctx)
        bar = Progress(len(sources), "nvcc", enabled=progress)
        compiled = nvcc.compile_many([s for s, _ in sources], arch, done=lambda _: bar.advance())
        bar.close()
        clock = cuda.GpuClock(driver, arch)
        # the kept timings had the old launch cost taken off: the new ones must too
        launch = old.launch if missing else clock.launch_seconds()
        target = dataclasses.replace(target, copy_bandwidth=copy_bandwidth(driver), bandwidth_source="measured")
        bar = Progress(len(found), "timing routines", enabled=progress)
        timings: dict[RoutineKey, store.Timing] = {}
        for (_, group), module_code in zip(sources, compiled):
            module = driver.module_from_buffer(module_code.cubin)
            for probe in group:
                timings[probe.key] = _time_probe(driver, clock, module, probe, target, launch)
                bar.advance(label=probe.key.routine)
        bar.close()
    database = store.Database(
        device={"name": info.name, "slug": info.slug, "sms": info.sms,
                "compute_capability": info.compute_capability, "cuda_driver": info.cuda_driver,
                "nvcc": _nvcc_release(), "target": dataclasses.asdict(target)},
        library={"name": library.name, "hash": library.content_hash, "files": dict(library.files)},
        fusec=__version__, built=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        launch=launch, bench_sizes={"waves": WAVES, "repeat": REPEAT}, timings=timings, path=str(path))
    return save_merged(database, path, library, dtypes, missing), path


def copy_bandwidth(driver, nbytes: int = 1 << 30, repeat: int = 10) -> float:
    """Bytes/s of a device-to-device copy (bytes read plus bytes written): the median of
    ``repeat`` copies of ``nbytes`` after one warm-up, between CUDA events. The GPU
    record of the database keeps it (GpuTarget.copy_bandwidth), as no attribute gives it."""
    import statistics
    source, destination = driver.mem_alloc(nbytes), driver.mem_alloc(nbytes)
    try:
        driver.memset_d32(source, 0x3F800000, nbytes // 4)  # ones, not zeros (METHOD.md)
        start, end = driver.Event(), driver.Event()
        seconds = []
        for i in range(repeat + 1):
            start.record()
            driver.memcpy_dtod(destination, source, nbytes)
            end.record()
            end.synchronize()
            if i:
                seconds.append(end.time_since(start) * 1e-3)
    finally:
        source.free()
        destination.free()
    return 2 * nbytes / statistics.median(seconds)


def save_merged(database: store.Database, path: Path, library: Library, dtypes, missing: bool) -> store.Database:
    """Write ``database`` (the timings measured now) into ``path`` with the timings the
    file holds at this moment that were not measured now (the other precision's; with
    ``missing``, every other key), under an exclusive lock on ``<path>.lock``: two
    builds at once (fp32 and fp64) each re-read, merge and write in turn, and neither
    loses the other's timings. With ``missing`` the file's launch time and measured target
    (its copy bandwidth) are kept too: a kernel it priced is priced alike after (training
    points stamped with it carry over: tools/restamp_training.py). The database written."""
    path = Path(path)
    with locked(path):
        old = _usable(path, library, database.slug)
        timings = dict(database.timings)
        if old is not None:
            for key, timing in old.timings.items():
                if missing or key.dtype not in dtypes:
                    timings.setdefault(key, timing)
        # every timing kept is of the library as it is (load left out the stale ones), so
        # each routine's digest now is what its timings measured
        routines = store.routine_digests(library, {key.routine for key in timings})
        merged = dataclasses.replace(database, timings=timings, library={**database.library, "routines": routines})
        if missing and old is not None:
            device = {**database.device, "target": old.device.get("target", database.device.get("target"))}
            merged = dataclasses.replace(merged, device=device, launch=old.launch)
        store.save(merged, path)
    return merged


def _usable(path: Path, library: Library, slug: str) -> store.Database | None:
    """The database at ``path`` if it was built for this library and GPU."""
    if not path.exists():
        return None
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a damaged or stale file is simply replaced
        old = store.load(path, library)
    return old if old is not None and old.slug == slug else None


def _nvcc_release() -> str:
    path = nvcc.nvcc_path()
    if path is None:
        return "unknown"
    lines = [line for line in nvcc.nvcc_version(path).splitlines() if "release" in line]
    return lines[-1].strip() if lines else "unknown"


class _Arena:
    """Device buffers the probes run on, grown on demand and reused."""

    def __init__(self, driver):
        self.driver = driver
        self.buffers: dict[str, tuple[object, int]] = {}

    def pointer(self, name: str, nbytes: int) -> int:
        nbytes = max(int(nbytes), 256)
        buffer, size = self.buffers.get(name, (None, 0))
        if size < nbytes:
            if buffer is not None:
                buffer.free()
            buffer = self.driver.mem_alloc(nbytes)
            self.driver.memset_d32(buffer, 0, nbytes // 4)  # zeros: counters, finite data
            self.buffers[name] = (buffer, nbytes)
        return int(buffer)


_ARENAS: dict[int, _Arena] = {}


def _time_probe(driver, clock, module, probe: Probe, target: GpuTarget, launch: float) -> store.Timing:
    from ...runtime.cuda import parameter_format
    kernel = probe.kernel
    function = module.get_function(kernel.name)
    function.prepare(parameter_format(kernel))
    registers = function.get_attribute(driver.function_attribute.NUM_REGS)
    static = function.get_attribute(driver.function_attribute.SHARED_SIZE_BYTES)
    block = kernel.plan.shape.block
    sms = target.sms
    most = natural_blocks(registers, static, block, target)
    function.set_attribute(driver.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
    function.set_attribute(driver.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                           target.shared_per_block - static)
    sizes = problem_sizes(probe, most, sms)
    args = _arguments(driver, kernel, probe, sizes)
    grid = kernel.grid(sizes)
    iters = iterations(kernel, sizes, grid)  # the predictor's own rule
    seconds = {}
    for level in sorted({b for b in LEVELS if b <= most} | {most}):
        dynamic = limiting_shared(level, static, target) if level < most else 0
        run = lambda: function.prepared_call((grid, 1, 1), (block, 1, 1), *args,  # noqa: E731
                                             shared_size=dynamic)
        times = [clock.seconds(run) for _ in range(REPEAT + 1)][1:]  # the first run warms up
        waves = grid / (sms * level)  # whole waves, or nearly: see problem_sizes
        seconds[level] = max(statistics.median(times) - launch, 1e-9) / (waves * iters)
    return store.Timing(probe.key, probe.kind, seconds, registers, most)


def _arguments(driver, kernel, probe: Probe, sizes: dict[str, int]) -> list:
    """Kernel arguments on arena buffers: each array its own buffer, big enough."""
    import numpy as np
    arena = _ARENAS.setdefault(id(driver), _Arena(driver))
    itemsize = np.dtype(kernel.dtype).itemsize
    dag = probe.dag
    args = []
    for position, arg in enumerate(kernel.args):
        if arg.role in ("in", "out"):
            value = dag.value(arg.value)
            count = math.prod(sizes[d] for d in value.dims) if value.dims else 1
            name = "matrix" if value.kind is Kind.MATRIX else f"vector{position}"
            args.append(arena.pointer(name, count * itemsize))
        elif arg.role == "workspace":
            reduction = next(r for r in probe.reductions if r.value == arg.value)
            partials, _ = kernel.reduction_buffers(reduction, sizes)
            args.append(arena.pointer(f"workspace{position}", partials * itemsize))
        elif arg.role == "counters":
            args.append(arena.pointer(f"counters{position}", 4 * 65536))
        elif arg.role == "scalar":
            args.append(np.dtype(kernel.dtype).type(1.0))
        elif arg.role == "size":
            args.append(sizes[arg.size])
        elif arg.role == "aligned":
            args.append(1)
        else:
            raise AssertionError(f"a probe has no {arg.role} argument")
    return args
