"""The register estimate of a kernel: what the space and the cost models price occupancy and
spills with before nvcc has compiled anything (nvcc tells the truth; ``fusec.compile`` checks
the first choice with ptxas). Fitted to ptxas on kernels of the space."""

from __future__ import annotations

from ..ir import geometry as geo
from ..ir.barriers import LOOP
from ..ir.kernel import Kernel
from ..library.model import Geometry, Storage

MAX_REGISTERS = 255  # per thread, any sm_50 and later


def estimate(kernel: Kernel) -> int:
    """Registers per thread of a tile, vector or band kernel, roughly: 22 for indices and
    addresses, about half a register per word of register elements (nvcc reuses a loop's
    temporaries), and a whole one per word the serial loop carries (invariant loads and
    accumulated reductions stay live throughout). Fitted to ptxas on 312 kernels of the
    space (mean error 6.6 registers, from 9.2 without the carried term)."""
    words = geo.DTYPES[kernel.dtype].itemsize // 4
    by_value = {e.value: e for e in kernel.elements if e.storage is Storage.REGISTERS}
    if kernel.plan.geometry is Geometry.BAND:
        return _band(kernel, by_value, words)
    carried = {op.value for op in kernel.ops if op.section != LOOP and op.value in by_value}
    carried |= {e.value for e in by_value.values() if e.accumulated}
    slots = sum(e.size for e in by_value.values())
    kept = sum(by_value[v].size for v in carried)
    return min(MAX_REGISTERS, round(22 + 0.47 * slots * words + 1.0 * kept * words))


def _band(kernel: Kernel, by_value: dict, words: int) -> int:
    """A band kernel's registers, roughly: 24 for indices and addresses, the matrix elements
    live at once (the rows in flight: a computed matrix replaces the one it came from, but two
    matrices loaded in one phase are both held; ``live_band_slots``) and every other register
    element whole (ptxas, fp32 n = 16384, 512 threads of 8 pieces: ATAX 126 registers against
    121 estimated, BiCGK 120 against 122; GEMVER's first kernel, 152 estimated, spilled at the
    128 a block of 512 may have)."""
    matrices = [e.size for e in by_value.values() if e.mapping == "band"]
    live = max(kernel.live_band_slots, max(matrices, default=0))
    rest = sum(e.size for e in by_value.values() if e.mapping != "band")
    return min(MAX_REGISTERS, round(24 + words * (live + rest) + ahead(kernel)))


def ahead(kernel: Kernel) -> int:
    """Registers of the second copy a band kernel loading ahead holds (0 without)."""
    if not kernel.plan.ahead:
        return 0
    words = geo.DTYPES[kernel.dtype].itemsize // 4
    by_value = {e.value: e for e in kernel.elements}
    return words * sum(by_value[v].size for v in kernel.loaded_ahead())
