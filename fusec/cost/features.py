"""What the fitted correction (:mod:`fusec.cost.correction`) knows of a kernel: its class
and a few numbers that say how it meets the GPU.

The performance database prices routines measured past L2 on several waves of
blocks; what it misprices is where a kernel is unlike its probes: few waves or a
ragged last one, few serial iterations, data that L2 holds, threads per block at
the ends of the range, fp64 — and the choices the database prices alike: a band
kernel loading its next rows ahead, a vector kernel's L2 hints. Those are the
features, each on a log scale where it spans orders of magnitude, so that a
coefficient is a power law (a correction ``exp(w . x)`` multiplies the database's
price).

The block size enters twice: ``threads`` is a slope over log2(threads per block),
and ``threads_128`` and ``threads_1024`` are indicators of the two ends. The known
bias is not a slope (issue 49): tile kernels with few iterations are priced slow and
1024-thread bands fast, while 512 threads sit near 256; one slope cannot bend at both
ends. A correction may leave the indicators out (``fusec perfdb fit`` keeps them only
where they cross-validate better on the GPU's own points): ``BLOCK_SIZE`` names them,
``BASE`` the features without them.

``FEATURES_VERSION`` changes whenever a feature's definition does: training data
and fitted files record it, and one of another version is not used.
``SAME_SINCE`` maps an older version to its features that this version computes
alike (a fitted file of that version still applies; training data are recomputed).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from ..ir import geometry as geo
from ..ir.dag import Dag
from ..ir.plan import L2_EVICT_LOADS, L2_STREAM_STORES
from ..library.model import Geometry
from ..target import GpuTarget
from .model import iterations, natural_blocks, traffic
from .registers import estimate

FEATURES_VERSION = 3  # 2: ahead, evict_loads, stream_stores; 3: threads_1024, threads_128
# the names of the values of KernelFeatures, in order
FEATURES = ("bias", "fp64", "threads", "waves", "tail", "iterations", "bytes", "l2_fit",
            "ahead", "evict_loads", "stream_stores", "threads_1024", "threads_128")
BLOCK_SIZE = ("threads_1024", "threads_128")  # the block size as a category: optional in a correction
BASE = tuple(f for f in FEATURES if f not in BLOCK_SIZE)  # a correction's features without them
SAME_SINCE = {2: BASE}  # version 2's features, which version 3 computes alike (it only adds)
# the classes a correction has coefficients for: the kernel families, tile and vector apart
CLASSES = ("vector", "tile", "band", "horizontal", "striped", "held")

WAVES_RANGE = (-8.0, 12.0)  # log2 waves clipped: a grid of 1 block to thousands of waves
BYTES_RANGE = (-12.0, 12.0)  # log2(bytes / L2) clipped


@dataclasses.dataclass(frozen=True)
class KernelFeatures:
    kind: str  # one of CLASSES
    values: tuple[float, ...]  # in the order of FEATURES

    def as_dict(self) -> dict[str, float]:
        return dict(zip(FEATURES, self.values))


def plan_class(plan) -> str:
    """The class of a kernel plan's correction: its family, the tile family's vector and
    tile geometries apart (they stream alike in name only)."""
    if plan.family == "tile":
        return "vector" if plan.geometry is Geometry.VECTOR else "tile"
    return plan.family


def features(kernel, dag: Dag, sizes: Mapping[str, int], target: GpuTarget) -> KernelFeatures:
    """The class and features of a kernel of any family at ``sizes`` on ``target``.

    - ``fp64``: 1 for double precision;
    - ``threads``: log2(threads per block / 256);
    - ``waves``: log2(grid / (SMs x blocks per SM)), the blocks per SM its registers and
      shared memory allow (a held fusion's own ``per_sm``);
    - ``tail``: the share of the last wave's slots left idle (0 for whole waves);
    - ``iterations``: log2 of the serial iterations a block runs (the most of its parts);
    - ``bytes``: log2(bytes moved through DRAM / L2 size), :func:`fusec.cost.model.traffic`;
    - ``l2_fit``: the share of its arrays L2 can hold (1 when all fit);
    - ``ahead``: the share of its band parts that load their next rows ahead;
    - ``evict_loads``, ``stream_stores``: the share of its parts whose 16-byte accesses
      carry that L2 hint (vector kernels);
    - ``threads_1024``, ``threads_128``: 1 for a block of 1024 (of 128) threads, else 0.

    The last three the database prices alike (its probes run neither), where the
    measured times differ by 5-20 % (``experiments/results/h100-prediction-offline.md``).
    """
    sizes = dict(sizes)
    leaves = kernel.leaves()
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    grid = kernel.grid(sizes)
    per_sm = _blocks_per_sm(kernel, leaves, itemsize, target)
    waves = grid / (target.sms * per_sm)
    whole = math.ceil(waves)
    tail = 1.0 - waves / whole if whole else 0.0
    serial = max(_iterations(leaf, sizes) for leaf in leaves)
    moved = sum(traffic(leaf, dag, sizes, target.l2_bytes) for leaf in leaves)
    footprint = _footprint(leaves, dag, sizes, itemsize)
    values = (
        1.0,
        1.0 if kernel.dtype == "float64" else 0.0,
        math.log2(kernel.block / 256),
        _clip(math.log2(waves), WAVES_RANGE),
        tail,
        math.log2(max(serial, 1.0)),
        _clip(math.log2(max(moved, 1) / target.l2_bytes), BYTES_RANGE),
        min(1.0, target.l2_bytes / max(footprint, 1)),
        sum(1.0 for leaf in leaves if leaf.plan.ahead) / len(leaves),
        sum(1.0 for leaf in leaves if leaf.plan.l2 == L2_EVICT_LOADS) / len(leaves),
        sum(1.0 for leaf in leaves if leaf.plan.l2 == L2_STREAM_STORES) / len(leaves),
        1.0 if kernel.block == 1024 else 0.0,
        1.0 if kernel.block == 128 else 0.0,
    )
    return KernelFeatures(plan_class(kernel.plan), values)


def _clip(value: float, bounds: tuple[float, float]) -> float:
    return min(max(value, bounds[0]), bounds[1])


def _blocks_per_sm(kernel, leaves, itemsize: int, target: GpuTarget) -> int:
    if kernel.resident_per_sm:
        return kernel.resident_per_sm
    registers = max(estimate(leaf) for leaf in leaves)
    shared = kernel.shared_reals * itemsize + kernel.dynamic_shared_bytes
    return natural_blocks(registers, shared, kernel.block, target)


def _iterations(leaf, sizes: dict[str, int]) -> float:
    """Serial iterations a block of a tile, vector or band kernel runs, on average."""
    grid = leaf.grid(sizes)
    if leaf.plan.geometry is Geometry.BAND:  # a block walks ITERS instances of BAND_ROWS rows
        return -(-sizes[leaf.dims[0]] // leaf.macros()["BAND_ROWS"]) / grid
    return iterations(leaf, sizes, grid)


def _footprint(leaves, dag: Dag, sizes: dict[str, int], itemsize: int) -> int:
    """Bytes of the distinct arrays the kernel reads or writes, once each."""
    values = {arg.value for leaf in leaves for arg in leaf.args if arg.role in ("in", "out")}
    return sum(math.prod(sizes[d] for d in dag.value(v).dims) * itemsize for v in values)
