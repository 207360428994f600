"""Which GPU fusec predicts and tunes for.

A GPU is known by a *slug* of its device name ("NVIDIA H100 80GB HBM3" ->
``h100-80gb-hbm3``): performance databases (``perfdb/<slug>.json``) and
tuning-cache entries are filed under it. The target is the GPU named with
``--gpu`` (or ``$FUSEC_GPU``), else the GPU present, else none (a CPU machine).
A name given by the user matches a slug by prefix, so ``--gpu h100`` finds
``h100-80gb-hbm3``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re


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


@functools.lru_cache(maxsize=1)
def present() -> GpuInfo | None:
    """The GPU fusec would run on ($FUSEC_DEVICE, default 0), or None where there
    is no PyCUDA or no GPU. Asks the driver only; creates no context."""
    try:
        import pycuda.driver as cuda
        cuda.init()
        device = cuda.Device(int(os.environ.get("FUSEC_DEVICE", "0")))
        major, minor = device.compute_capability()
        version = cuda.get_driver_version()  # e.g. 13000
        return GpuInfo(device.name(), device.get_attribute(cuda.device_attribute.MULTIPROCESSOR_COUNT),
                       f"{major}.{minor}", f"{version // 1000}.{version % 1000 // 10}")
    except Exception:  # ImportError, no driver, no device: a CPU machine
        return None


def target(gpu: str | None = None) -> str | None:
    """The slug (or slug prefix) to predict and tune for: ``gpu`` as given, else
    ``$FUSEC_GPU``, else the GPU present, else None."""
    chosen = gpu or os.environ.get("FUSEC_GPU")
    if chosen:
        return slug(chosen)
    info = present()
    return info.slug if info else None
