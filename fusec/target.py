"""Which GPU fusec predicts, plans and tunes for, and what it is like.

A GPU is known by a *slug* of its device name ("NVIDIA H100 80GB HBM3" ->
``h100-80gb-hbm3``): performance databases (``perfdb/<slug>.json``) and
tuning-cache entries are filed under it. The chosen GPU is the one named with
``--gpu`` (or ``$FUSEC_GPU``), else the GPU present, else none (a CPU machine).
A name given by the user matches a slug by prefix, so ``--gpu h100`` finds
``h100-80gb-hbm3``.

A :class:`GpuTarget` is the GPU as a value: its SMs, their threads, registers
and shared memory, L2, and copy bandwidth. It is read from the device (driver
attributes), or from the published figures of the GPUs fusec knows by name
(``fusec/data/gpus.json``); the space, the cost models and the families take
their limits from it, never from constants.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import warnings
from importlib import resources

from . import validate as check
from .errors import ArgumentError, FusecWarning


def slug(name: str) -> str:
    """A file-name-safe, lower-case model name without the vendor."""
    text = re.sub(r"^\s*nvidia\s+", "", name.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    name: str  # as the driver says it
    sms: int
    compute_capability: str  # "9.0"
    cuda_driver: str  # driver API version, e.g. "13.0"

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def dependent_launch(self) -> bool:
        """Whether a kernel may be launched while the one before it runs (programmatic
        dependent launches, compute capability 9.0 on)."""
        return int(self.compute_capability.split(".")[0]) >= 9


def device_index() -> int:
    """``$FUSEC_DEVICE``, the device fusec runs on where no context is current (default 0);
    anything but a whole number of at least 0 is an ArgumentError naming it."""
    return check.environment_number("FUSEC_DEVICE", 0, integer=True, low=0)


@functools.lru_cache(maxsize=1)
def present() -> GpuInfo | None:
    """The GPU fusec would run on ($FUSEC_DEVICE, default 0), or None where there
    is no PyCUDA or no GPU. Asks the driver only; creates no context."""
    index = device_index()  # a bad $FUSEC_DEVICE is an error, not "no GPU"
    try:
        import pycuda.driver as cuda
        cuda.init()
        device = cuda.Device(index)
        major, minor = device.compute_capability()
        version = cuda.get_driver_version()  # e.g. 13000
        return GpuInfo(device.name(), device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT),
                       f"{major}.{minor}", f"{version // 1000}.{version % 1000 // 10}")
    except Exception:  # ImportError, no driver, no device: a CPU machine
        return None


def chosen_slug(gpu: str | None = None) -> str | None:
    """The slug (or slug prefix) to predict and tune for: ``gpu`` as given, else
    ``$FUSEC_GPU``, else the GPU present, else None."""
    chosen = gpu or os.environ.get("FUSEC_GPU")
    if chosen:
        return slug(chosen)
    info = present()
    return info.slug if info else None


@dataclasses.dataclass(frozen=True)
class GpuTarget:
    """What fusec needs to know of a GPU to plan, price and launch for it."""

    name: str
    compute_capability: str
    sms: int
    threads_per_sm: int
    registers_per_sm: int  # 32-bit registers
    shared_per_sm: int  # bytes an SM gives its blocks
    registers_per_block: int
    shared_per_block: int  # bytes one block may have, with the opt-in (static and dynamic)
    threads_per_block: int
    l2_bytes: int
    copy_bandwidth: float  # bytes/s of a device-to-device copy (read + write)
    bandwidth_source: str = "measured"  # measured | fitted | estimated (0.9 of the DRAM peak)

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def dependent_launch(self) -> bool:
        """Whether a kernel may be launched while the one before it runs (programmatic
        dependent launches, compute capability 9.0 on)."""
        return int(self.compute_capability.split(".")[0]) >= 9

    def with_sms(self, sms: int) -> "GpuTarget":
        """The same GPU with another SM count (a performance database's record, a MIG slice)."""
        return dataclasses.replace(self, sms=int(sms))


class UnknownGpuWarning(FusecWarning):
    """fusec plans for a GPU whose figures it does not know by name."""


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads(resources.files("fusec.data").joinpath("gpus.json").read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def known() -> dict[str, GpuTarget]:
    """The GPUs fusec knows by name, by slug."""
    return {key: GpuTarget(**entry) for key, entry in _table()["gpus"].items()}


def reference() -> GpuTarget:
    """The GPU the bundled performance database and shipped tunings were made on:
    what a CPU machine plans for when no GPU is named."""
    return known()[_table()["reference"]]


def by_name(name: str) -> GpuTarget | None:
    """The known GPU whose slug starts with ``name``'s (``h100`` finds ``h100-80gb-hbm3``)."""
    wanted = slug(name)
    table = known()
    if wanted in table:
        return table[wanted]
    matches = [key for key in table if key.startswith(wanted) or wanted.startswith(key)]
    return table[sorted(matches, key=len)[-1]] if matches else None


@functools.lru_cache(maxsize=1)
def from_device() -> GpuTarget | None:
    """The GPU present ($FUSEC_DEVICE, default 0), read from the driver's attributes,
    or None on a machine without PyCUDA or a GPU. The copy bandwidth, which no
    attribute gives, is the known figure of that model, else 0.9 of the DRAM peak
    the memory clock and bus width give."""
    index = device_index()  # a bad $FUSEC_DEVICE is an error, not "no GPU"
    try:
        import pycuda.driver as cuda
        cuda.init()
        device = cuda.Device(index)
        a = cuda.device_attribute
        get = device.get_attribute
        major, minor = device.compute_capability()
        name = device.name()
        figures = dict(sms=get(a.MULTIPROCESSOR_COUNT), threads_per_sm=get(a.MAX_THREADS_PER_MULTIPROCESSOR),
                       registers_per_sm=get(a.MAX_REGISTERS_PER_MULTIPROCESSOR),
                       shared_per_sm=get(a.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
                       registers_per_block=get(a.MAX_REGISTERS_PER_BLOCK),
                       shared_per_block=get(a.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                       threads_per_block=get(a.MAX_THREADS_PER_BLOCK), l2_bytes=get(a.L2_CACHE_SIZE))
        peak = 2.0 * get(a.MEMORY_CLOCK_RATE) * 1e3 * get(a.GLOBAL_MEMORY_BUS_WIDTH) / 8
    except Exception:  # ImportError, no driver, no device: a CPU machine
        return None
    same = by_name(name)
    bandwidth, source = ((same.copy_bandwidth, same.bandwidth_source) if same is not None
                         else (0.9 * peak, "estimated"))
    return GpuTarget(name, f"{major}.{minor}", copy_bandwidth=bandwidth, bandwidth_source=source, **figures)


def from_record(device: dict) -> GpuTarget:
    """The GPU a performance database was built on, from its ``device`` record: the
    figures it recorded (``target``), else the known figures of its model with the
    SMs it counted; a model fusec does not know gets the device's own SM count on
    the reference GPU's other figures, with a warning."""
    recorded = device.get("target")
    if isinstance(recorded, dict):
        try:
            found = GpuTarget(**recorded)
        except TypeError:
            found = None  # a record of another fusec: its model's known figures below
        if found is not None and _sane(found):
            return found
    same = by_name(str(device.get("name", "")))
    if same is not None:
        return same.with_sms(int(device["sms"]))
    fallback = reference().with_sms(int(device["sms"]))
    fallback = dataclasses.replace(fallback, name=str(device.get("name", "unknown")))
    _warn_unknown(fallback)
    return fallback


def _sane(target: GpuTarget) -> bool:
    """Whether a recorded target's figures are positive numbers of the right kind."""
    counts = (target.sms, target.threads_per_sm, target.registers_per_sm, target.shared_per_sm,
              target.registers_per_block, target.shared_per_block, target.threads_per_block, target.l2_bytes)
    return (all(isinstance(c, int) and not isinstance(c, bool) and 0 < c < 2 ** 40 for c in counts)
            and isinstance(target.copy_bandwidth, (int, float)) and 1e9 < target.copy_bandwidth < 1e15
            and isinstance(target.name, str) and isinstance(target.compute_capability, str))


def resolve(gpu: str | None = None, *, unknown_ok: bool = False) -> GpuTarget:
    """The target to plan for: the GPU named (``gpu``, else ``$FUSEC_GPU``) by its
    published figures (the device's own where it is that GPU); else the GPU present;
    else, on a machine without one, the reference GPU. A named GPU fusec does not
    know is an ArgumentError naming the known ones, unless ``unknown_ok`` (``--analytic``):
    then it is planned for with the reference GPU's figures, with a warning."""
    chosen = gpu or os.environ.get("FUSEC_GPU")
    device = from_device()
    if chosen:
        if device is not None and device.slug.startswith(slug(chosen)):
            return device
        found = by_name(chosen)
        if found is None and unknown_ok:
            assumed = dataclasses.replace(reference(), name=chosen)
            warnings.warn(UnknownGpuWarning(
                f"fusec does not know GPU {chosen!r} (it knows {', '.join(sorted(known()))}): planning for it"
                f" with the figures of the {reference().name}"))
            return assumed
        if found is None:
            raise ArgumentError("gpu" if gpu else "$FUSEC_GPU",
                                f"unknown GPU {chosen!r}: fusec knows {', '.join(sorted(known()))}"
                                " (or run on the GPU itself, which fusec reads)")
        return found
    if device is not None:
        if by_name(device.name) is None:
            _warn_unknown(device)
        return device
    return reference()


@functools.lru_cache(maxsize=None)
def _warn_unknown(device: GpuTarget) -> None:
    warnings.warn(UnknownGpuWarning(
        f"{device.name} is not among the GPUs fusec knows ({', '.join(sorted(known()))}): its limits are"
        f" read from the device and its copy bandwidth estimated at {device.copy_bandwidth / 1e9:.0f} GB/s"
        " (0.9 of its DRAM peak); kernels are chosen by the analytic model until 'fusec perfdb build' runs there"))
