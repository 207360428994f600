"""Predicting how long a kernel runs, without running it.

:class:`Predictor` is the interface the space ranks combinations with. This
module's :class:`AnalyticPredictor` is the provisional model: the bytes a
kernel moves through DRAM over the copy bandwidth, slowed when the grid is
too small or too ragged to keep every SM busy, plus a fixed cost per launch
(leaving that out made the paper mispredict AXPYDOT). The performance
database (measured routine times) plugs in behind the same interface.

A horizontal fusion (HFuse) is predicted from its parts, which run side by
side in every block: see :meth:`AnalyticPredictor.horizontal_seconds`. A
striped fusion from its parts, which run one after the other in stripes, the
consumer re-reading from L2: see :func:`striped_seconds`. A held fusion from
its parts, which run one after the other across one grid barrier, the
consumer re-reading only the tiles not held on chip: see :func:`held_seconds`.
A band kernel (whole rows per block) from its bytes and its column sums'
atomics, without the performance database, which has no band routines yet:
see :func:`band_seconds`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Protocol

from ..ir import geometry as geo
from ..lower.kernel import PARTIALS_LINE, Kernel
from ..ir.dag import Dag
from ..library.model import Geometry
from ..ir.plan import COLS, ROWS, HeldPlan, StripedPlan

L2_BYTES = 50 * 2 ** 20  # H100
L2_REREAD_COST = 0.25  # a re-read from L2 costs about a quarter of a DRAM byte
# A striped consumer's read of a tile its producer read or wrote a stripe or two
# before costs about half a DRAM byte: the consumer sits in the same launch behind
# the producer's stream (GEMVER on the H100, scratch measurement: the striped kernel
# saved 185 of the 373 us its w = B x would spend reading B from DRAM at fp32
# n = 16384, and 105 of 193 at fp64 n = 8192).
STRIPE_REREAD_COST = 0.5
# A consumer block waits for the producer's blocks of its stripe, holding its slot;
# they finish about one block's time (its bytes at its share of DRAM) after their
# tickets, which a lag of L stripes covers for L stripes' time. What the rest costs
# grows with its square: fitted on the H100 to `fusec tune` of GEMVER, SGEMVT and
# ATAX (fp32 n = 16384: producer blocks of 32 serial iterations waited ~80-180 us
# and lost 200-1000 us; those of 8 waited ~15-30 us and lost next to nothing).
STRIPE_WAIT_SCALE = 33e-6  # seconds
# The consumer finds a stripe's tiles in L2 only while the stripes in flight (the lag's
# and its own) fit in about half of it: lag 4 with 8 MB stripes (GEMVER, SGEMVT fp32
# n = 16384) cost 7.5 %, with 4 MB stripes it gained 2-5 % (bench/results/h100-striped-variants.md).
STRIPE_L2_SHARE = 0.5
# A held fusion whose producer leaves its held tiles unstored (HeldPlan.stores_after) writes
# in its pass only what the consumer re-reads, past evict-first loads, so L2 keeps more of
# it: bench.held (n = 4096, GEMVER's held band plans holding 38-44 %) measured it faster in
# every pair, 0.9-3.4 us at fp32 (3.1 for the tuned plan's layout) and 1.9-8.4 at fp64
# (bench/results/h100-held-after.md); this share gives that plan 1.8 us.
STORES_AFTER_L2_SHARE = 0.75
# A held fusion whose producer leaves its held tiles unstored (HeldPlan.stores_after)
# moves their stores out of its pass into the consumer's, where they go to DRAM beside
# the consumer's stream from chip and L2 and slow it by this share of their own time
# (never finishing sooner than DRAM takes them). Fitted to 36 held GEMVER plans
# measured with and without the option (fp32 n = 4096 and fp64 n = 2048, 0-3
# instances in registers and 0-7 in shared memory; bench/results/h100-held-grid.md):
# at fp32 the option gained 1.1-1.6 us holding 19 % and 8.6 us holding 62 %, which
# pricing it by STORES_AFTER_L2_SHARE alone had put at 3.4 and 0 us.
STORES_AFTER_EXPOSED = 0.6
# A held fusion's blocks meet once: bench/one_barrier.cu's blocks (GEMVER fp32 n = 4096,
# one per SM) left its grid barrier 2.8 us after the last one arrived (a scratch copy
# that stamped %globaltimer at each phase; docs/striped-fusion.md).
GRID_BARRIER_SECONDS = 2.8e-6


SHARED_PER_SM = 233472  # bytes an H100 SM gives to blocks (228 KB)
SHARED_RESERVED = 1024  # per block, kept by the driver


def natural_blocks(registers: int, static_shared: int, block: int, *, threads_per_sm: int = 2048,
                   registers_per_sm: int = 65536, shared_per_sm: int = SHARED_PER_SM) -> int:
    """Blocks per SM a kernel can have: threads, registers (allocated per warp in
    units of 256), shared memory (plus what the driver keeps per block), and the
    hardware's 32."""
    warps = block // 32
    per_warp = math.ceil(registers * 32 / 256) * 256
    by_registers = registers_per_sm // (per_warp * warps) if registers else 32
    by_shared = shared_per_sm // (static_shared + SHARED_RESERVED)
    return max(1, min(threads_per_sm // block, by_registers, by_shared, 32))


class Predictor(Protocol):
    name: str

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        ...


def traffic(kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> int:
    """Bytes the kernel moves through DRAM.

    Matrices and the vectors of the vector geometry move once. In the tile
    geometry a vector indexed by rows is read by every block along the
    columns (and vice versa); while it fits in L2 those re-reads cost L2
    bandwidth, counted as a quarter of a DRAM byte each. Reductions write and
    read their partials once.
    """
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    grid_rows, grid_cols = kernel.grid_extent(dict(sizes))

    def elements(value: int) -> int:
        return math.prod(sizes[d] for d in dag.value(value).dims)

    total = 0
    for arg in kernel.args:
        if arg.role == "in":
            count = elements(arg.value)
            rereads = 0
            if arg.axis == ROWS:  # every block along the columns reads its rows
                rereads = count * (grid_cols - 1)
            elif arg.axis == COLS:
                rereads = count * (grid_rows - 1)
            if count * itemsize > L2_BYTES // 4:  # too big to stay in L2 between reads
                count, rereads = count + rereads, 0
            total += count * itemsize + rereads * itemsize * L2_REREAD_COST
        elif arg.role == "out":
            total += max(elements(arg.value), 1) * itemsize
    for reduction in kernel.reductions:
        tiles, arrivals, width = kernel.reduction_tiles(reduction, dict(sizes))
        if kernel.plan.geometry is Geometry.BAND:  # atomics in L2, then one pass over the accumulator
            total += arrivals * width * itemsize * L2_REREAD_COST + 2 * width * itemsize
        else:
            total += 2 * tiles * arrivals * width * itemsize
    return total


@dataclasses.dataclass(frozen=True)
class AnalyticPredictor:
    """Bytes over bandwidth plus launch cost; defaults measured on an H100."""

    bandwidth: float = 2.9e12  # bytes/s, device-to-device copy (read + write)
    launch: float = 3.0e-6  # seconds per kernel launch
    sms: int = 132
    threads_per_sm: int = 2048
    registers_per_sm: int = 65536
    shared_per_sm: int = 228 * 1024
    # Bytes requested per SM that keep DRAM busy (fitted, see kernel_seconds). Tile
    # kernels compute between their loads, so they need more requested at once.
    tile_in_flight: int = 120 * 1024
    vector_in_flight: int = 64 * 1024
    # A band kernel's loads leave together and it computes little between them. BiCGK fp32
    # n = 4096 (`fusec tune`, H100, 2026-11-23), launch (3.4 us) left out: 1024 threads of 32
    # bytes per SM streamed at 2030 GB/s (0.70 of the copy), 64 KB per SM (1024 threads of 64
    # bytes) at 2900; ATAX n = 16384, 512 threads of 128 bytes per SM (one block: 121
    # registers), at 3014
    band_in_flight: int = 46 * 1024
    atomic: float = 5e-9  # seconds per atomic on one counter: they queue at its L2 slice
    # Seconds per atomic add into one 128-byte line of a band kernel's column-sum
    # accumulator: the adds of every block into a line queue at its L2 slice (see
    # band_atomic_seconds). 84 fp64 band plans of BiCGK and ATAX at n = 512-4096 (H100,
    # 2026-11-23) ran a median 1.3 ns per queued add over their price without it; any
    # value from 1 to 3 ns ranked those points' candidates alike.
    atomic_line_add: float = 1.5e-9
    finish_tile: float = 1.5e-6  # seconds per output tile a block finishes: atomic, fence, barriers
    finish_round: float = 0.45e-6  # seconds per round of 8 dependent partial loads of the last block
    name: str = "analytic"

    def blocks_per_sm(self, kernel: Kernel, registers: int | None = None) -> int:
        return natural_blocks(registers or kernel.estimated_registers,
                              kernel.shared_reals * geo.DTYPES[kernel.dtype].itemsize, kernel.block,
                              threads_per_sm=self.threads_per_sm, registers_per_sm=self.registers_per_sm,
                              shared_per_sm=self.shared_per_sm)

    def kernel_seconds(self, kernel: Kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        if is_striped(kernel):
            return striped_seconds(self, kernel, dag, sizes, self.launch, self.bandwidth, self.sms)
        if is_held(kernel):
            return held_seconds(self, kernel, dag, sizes, self.launch, self.bandwidth)
        if is_horizontal(kernel):
            return self.horizontal_seconds(kernel, dag, sizes)
        if kernel.plan.geometry is Geometry.BAND:
            return band_seconds(self, kernel, dag, sizes, self.launch, self.bandwidth, self.sms)
        block = kernel.plan.shape.block
        blocks_per_sm = self.blocks_per_sm(kernel)
        grid = kernel.grid(dict(sizes))
        slots = self.sms * blocks_per_sm
        resident = min(grid, slots) * block / self.sms  # threads per SM
        # DRAM stays busy when enough bytes are requested at once (loads and stores
        # per thread per iteration, times resident threads): Nsight Compute on the
        # H100 showed a lone gemv at 47 warps x 80 B per thread (120 KB per SM) at
        # 91% of DRAM peak and fused BiCGK at 40 warps (102 KB) at 82%; vector
        # kernels with 61-123 KB ran at 90-100% of the copy bandwidth.
        in_flight = resident * max(kernel.loop_bytes, geo.VEC_BYTES)
        target = self.tile_in_flight if kernel.plan.geometry is not Geometry.VECTOR else self.vector_in_flight
        occupancy = max(min(1.0, in_flight / target), 1e-3)
        moved = traffic(kernel, dag, sizes)
        streaming = moved / (self.bandwidth * occupancy)
        # Blocks do not finish together: at the end, SMs idle for about half the
        # time one block takes (its bytes, shared with the blocks beside it).
        block_seconds = moved / grid * min(grid, slots) / self.bandwidth
        counters, finish = self.reduction_seconds(kernel, sizes)
        return self.launch + max(streaming, counters) + 0.5 * block_seconds + finish

    def horizontal_seconds(self, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        """A horizontal fusion: its parts run side by side in every block, sharing
        the SMs and DRAM, after one launch.

        The combined block (the parts' threads together, the most registers any
        part needs, their shared memory together) sets the blocks per SM, so
        each part keeps fewer of its own blocks resident than it would alone.
        Each part streams its bytes at the efficiency its own bytes in flight
        allow at that occupancy (the slowest part bounds the kernel), and all
        parts' bytes together at the efficiency of all bytes in flight (DRAM is
        shared): the kernel takes the longer of the two. Then the ragged end of
        the part with the longest blocks, and the reductions' terms of the part
        that finishes last (parts finish in parallel, on their own threads).

        The register bound is not modelled: what spills cost against the
        occupancy it buys cannot be told without running, so a bounded kernel is
        predicted as the unbounded one and the tuner decides (HFuse profiles both).
        """
        sizes = dict(sizes)
        registers = max(p.estimated_registers for p in kernel.parts)  # the bound left out
        slots = self.sms * self.blocks_per_sm(kernel, registers)
        moved_all, demand, slowest, tail, counters, finish = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        for part in kernel.parts:
            grid = part.grid(sizes)
            resident = min(grid, slots) * part.block / self.sms
            target = self.tile_in_flight if part.plan.geometry is Geometry.TILE else self.vector_in_flight
            share = resident * max(part.loop_bytes, geo.VEC_BYTES) / target  # of DRAM's need, from this part
            moved = traffic(part, dag, sizes)
            moved_all += moved
            demand += share
            slowest = max(slowest, moved / (self.bandwidth * max(min(1.0, share), 1e-3)))
            tail = max(tail, moved / grid * min(grid, slots) / self.bandwidth)
            part_counters, part_finish = self.reduction_seconds(part, sizes)
            counters, finish = max(counters, part_counters), max(finish, part_finish)
        streaming = max(slowest, moved_all / (self.bandwidth * max(min(1.0, demand), 1e-3)))
        return self.launch + max(streaming, counters) + 0.5 * tail + finish

    def reduction_seconds(self, kernel: Kernel, sizes: Mapping[str, int]) -> tuple[float, float]:
        """(counter atomics, finish) of the kernel's reductions: every block counts
        itself in on one counter per output tile (those atomics queue, overlapping
        the streaming), and the last one to arrive sums all partials in the tail.
        A block finishes, one after another, every output tile it stored a partial
        of: ITERS of them when the serial loop walks across the outputs. Each
        costs a fixed part (atomic, fence, barriers) and rounds of dependent
        partial loads; fitted on the H100 from per-kernel times (bench.prediction)."""
        counters, finish = 0.0, 0.0
        for reduction in kernel.reductions:
            arrivals, width = self._arrivals(kernel, reduction, sizes)
            counters = max(counters, arrivals * self.atomic)
            tiles = 1
            if reduction.axis is not None and reduction.axis != kernel.plan.serial:
                tiles = kernel.macros()["ITERS"]
            rounds = math.ceil(arrivals * width / (kernel.plan.shape.block * 8))
            finish += tiles * (self.finish_tile + rounds * self.finish_round)
        return counters, finish

    @staticmethod
    def _arrivals(kernel: Kernel, reduction, sizes) -> tuple[int, int]:
        """Blocks per output tile, and outputs per tile, of a reduction."""
        grid_rows, grid_cols = kernel.grid_extent(dict(sizes))
        if reduction.axis is None:
            return kernel.grid(dict(sizes)), 1
        macros = kernel.macros()
        if reduction.axis == COLS:
            return grid_cols, macros["TILE_ROWS"]
        return grid_rows, macros["TILE_COLS"]


def is_horizontal(kernel) -> bool:
    """Whether a kernel is a horizontal fusion of several parts."""
    return bool(getattr(kernel, "parts", None)) and not is_striped(kernel) and not is_held(kernel)


def is_striped(kernel) -> bool:
    """Whether a kernel is a striped fusion of a producer and a consumer."""
    return isinstance(getattr(kernel, "plan", None), StripedPlan)


def is_held(kernel) -> bool:
    """Whether a kernel is a held fusion of a producer and a consumer."""
    return isinstance(getattr(kernel, "plan", None), HeldPlan)


def band_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float, bandwidth: float,
                 sms: int, *, blocks_per_sm: int | None = None, atomics: bool = True) -> float:
    """A band kernel: its bytes (:func:`traffic`: the column sums' atomics as L2
    traffic) over the copy bandwidth, slowed where too few bytes are requested
    at once (``band_in_flight``: a block's rows wait for all their loads before
    the block's sums, so only what is in flight streams) and by a partial last wave of
    blocks (each block has the same rows, so a wave ends together); one
    launch; and per column sum the last block's pass over its accumulator.
    ``blocks_per_sm``: the blocks an SM holds, where the kernel is part of one
    that sets it (a held fusion's ``per_sm``); else what its registers and
    shared memory allow. The column sums' atomics queue after the streaming
    (:func:`band_atomic_seconds`; ``atomics=False`` leaves them to a caller
    that adds them itself). Fitted to tuning runs of ATAX and BiCGK only:
    ``fusec tune`` decides."""
    analytic = predictor if isinstance(predictor, AnalyticPredictor) else DEFAULT
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    block = kernel.plan.shape.block
    slots = sms * (blocks_per_sm or natural_blocks(kernel.estimated_registers, kernel.shared_reals * itemsize, block))
    grid = kernel.grid(sizes)
    resident = min(grid, slots) * block / sms
    # Loads issued one instance ahead (KernelPlan.ahead) are priced as without: in one tune
    # at fp32 n = 4096 they took ATAX (512 threads of 2 pieces, 1 row) 28.6 -> 25.4 us and
    # SGEMV (256 threads of 4 pieces, 2 rows) 18.5 -> 19.2, so fusec tune decides.
    occupancy = max(min(1.0, resident * max(kernel.loop_bytes, geo.VEC_BYTES) / analytic.band_in_flight), 1e-3)
    waves = grid / slots
    streaming = traffic(kernel, dag, sizes) / (bandwidth * occupancy) * math.ceil(waves) / waves
    if atomics:
        streaming += band_atomic_seconds(analytic, kernel, sizes, slots)
    return launch + streaming + band_finish_seconds(analytic, kernel, sizes)


def band_atomic_seconds(analytic, kernel, sizes: Mapping[str, int], slots: int) -> float:
    """The column sums' atomics left queuing once the streaming is done. Every block
    adds into every 128-byte line of each accumulator as it ends, one add per 16-byte
    piece in fp32 (sm_90's vector atomics) and one per element in fp64, and a line
    takes them one at a time (``atomic_line_add``). The blocks of one wave end
    together, so the last wave's adds (``slots`` blocks at most) queue after the
    streaming; earlier waves' adds overlap the later waves' loads. (BiCGK fp64
    n = 1024, 256 blocks each adding 16 elements into every line: band plans
    priced 10.4 us without them measured 16.3-18.4.)"""
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    adds_per_line = PARTIALS_LINE // (geo.VEC_BYTES if itemsize == 4 else itemsize)
    sizes = dict(sizes)
    return sum(min(kernel.reduction_tiles(r, sizes)[1], slots) * adds_per_line for r in kernel.reductions) \
        * analytic.atomic_line_add


def band_finish_seconds(analytic, kernel, sizes: Mapping[str, int], *, after_barrier: bool = False) -> float:
    """A band kernel's column sums' finish: per sum, the last block's ticket and pass
    over its accumulator; ``after_barrier`` (HeldPlan.finish_after): every block's
    pass over its own columns after a grid barrier it meets anyway, no ticket."""
    rounds = math.ceil(sizes[kernel.dims[1]] / (kernel.plan.shape.block * 8))
    tile = 0.0 if after_barrier else analytic.finish_tile
    return len(kernel.reductions) * (tile + rounds * analytic.finish_round)


def held_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float,
                 bandwidth: float) -> float:
    """A held fusion: its parts' times as they would run alone (the same grid,
    blocks resident as the fusion's are), one launch fewer, the grid barrier,
    and the consumer's reads of matrices the producer touched: nothing for the
    share held on chip, STRIPE_REREAD_COST of a DRAM byte for what L2 may
    still hold of the rest (the tiles the producer touched last), a DRAM byte
    beyond. With ``stores_after`` the held tiles' stores move from the
    producer's pass into the consumer's (STORES_AFTER_EXPOSED). The consumer's
    column-sum atomics queue at the end, whole (:func:`band_atomic_seconds`);
    the producer's count only where they outlast the producer's pass. (Priced
    whole, they ranked GEMVER's held band plans, whose column sums are the
    producer's, below tile plans that measured slower: fp32 n = 1024 and 2048,
    first choices 1.38 and 1.30 of the winner against 1.03 and 1.11. Left out,
    GEMVER's and SGEMVT's fp64 n = 512 first choices were held band plans at
    1.61 and 1.68 of the best measured; beyond the pass, 1.00 and 1.00.)"""
    from ..families.striped import matrices_reread
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    reread = sum(math.prod(sizes[d] for d in dag.value(v).dims)
                 for v in matrices_reread(dag, kernel.plan)) * itemsize
    seconds = [held_part_seconds(predictor, kernel, part, dag, sizes, launch, bandwidth) - launch
               for part in kernel.parts]
    unheld = (1.0 - kernel.held_fraction()) * reread
    # the consumer starts after the producer's whole pass: L2 keeps only the last of it
    share = STORES_AFTER_L2_SHARE if kernel.plan.stores_after else STRIPE_L2_SHARE
    in_l2 = min(unheld, share * L2_BYTES)
    # Bytes the consumer takes from chip or L2 are bytes it no longer waits for: its time
    # shrinks by them at the rate it streams alone, below the bandwidth where too few loads
    # are in flight. (GEMVER fp32 n = 4096, held band plans holding 2-3 of 16 instances in
    # registers and 7 in shared memory: priced 72-73 us when they went at the bandwidth,
    # 62-63 at the consumer's rate; measured 57.5-58.8.)
    producer, consumer = seconds
    rate = min(bandwidth, traffic(kernel.parts[1], dag, sizes) / max(consumer, 1e-12))
    consumer -= (reread - unheld + in_l2 * (1.0 - STRIPE_REREAD_COST)) / rate
    if kernel.plan.stores_after:  # the held tiles' stores leave the producer's pass for the consumer's
        matrix = math.prod(sizes[d] for d in dag.value(kernel.held).dims) * itemsize
        stores = kernel.held_fraction() * matrix / bandwidth
        producer -= stores
        consumer = max(consumer + STORES_AFTER_EXPOSED * stores, stores)
    streaming = producer + consumer
    analytic = predictor if isinstance(predictor, AnalyticPredictor) else DEFAULT
    slots = predictor.sms * kernel.plan.per_sm
    producer_part, consumer_part = kernel.parts
    if consumer_part.plan.geometry is Geometry.BAND:  # at the end, whole: bytes from chip do not shorten them
        streaming += band_atomic_seconds(analytic, consumer_part, sizes, slots)
    if producer_part.plan.geometry is Geometry.BAND:  # only what outlasts the producer's pass
        streaming += max(0.0, band_atomic_seconds(analytic, producer_part, sizes, slots) - producer)
    if kernel.plan.finish_after:  # no ticket: the producer's finish is every block's, after the barrier
        streaming -= (band_finish_seconds(analytic, kernel.parts[0], sizes)
                      - band_finish_seconds(analytic, kernel.parts[0], sizes, after_barrier=True))
    return launch + streaming + GRID_BARRIER_SECONDS


def held_part_seconds(predictor, kernel, part, dag: Dag, sizes: Mapping[str, int], launch: float,
                       bandwidth: float) -> float:
    """A held fusion's part as it would run alone on the same grid, its blocks resident
    as the fusion's are: ``per_sm`` to an SM, all in one wave. (Priced with the blocks
    its own registers would allow, GEMVER's consumer at fp32 n = 4096, 128 blocks of
    512 threads, left a second slot per SM empty and paid for a partial wave: 74.8 us
    against 39.1 for the same consumer loading ahead, whose registers allow one.)"""
    if part.plan.geometry is Geometry.BAND:  # held_seconds adds the atomics
        return band_seconds(predictor, part, dag, sizes, launch, bandwidth, predictor.sms,
                            blocks_per_sm=kernel.plan.per_sm, atomics=False)
    return predictor.kernel_seconds(part, dag, sizes)


def striped_seconds(predictor, kernel, dag: Dag, sizes: Mapping[str, int], launch: float,
                    bandwidth: float, sms: int) -> float:
    """A striped fusion: its parts' times as they would run alone, one launch
    fewer, the consumer's reads of matrices the producer touched at
    STRIPE_REREAD_COST of a DRAM byte, and the consumer's waits: a producer
    block takes its bytes over its share of DRAM (every resident block has
    one), of which a lag of L stripes hides L stripes' time; the rest costs
    its square over STRIPE_WAIT_SCALE. Where the L + 1 stripes in flight do
    not fit in STRIPE_L2_SHARE of L2, the re-read is a DRAM read. Occupancy
    (the combined kernel has the registers of the hungrier part) is left to
    the tuner."""
    from ..families.striped import matrices_reread
    sizes = dict(sizes)
    itemsize = geo.DTYPES[kernel.dtype].itemsize
    reread = sum(math.prod(sizes[d] for d in dag.value(v).dims)
                 for v in matrices_reread(dag, kernel.plan)) * itemsize
    streaming = sum(predictor.kernel_seconds(part, dag, sizes) - launch for part in kernel.parts)
    stripes = kernel.stripes(sizes)
    if (kernel.plan.lag + 1) * reread / stripes <= STRIPE_L2_SHARE * L2_BYTES:
        streaming -= (1 - STRIPE_REREAD_COST) * reread / bandwidth
    producer = kernel.parts[0]
    slots = sms * natural_blocks(kernel.estimated_registers, kernel.shared_reals * itemsize, kernel.block)
    block_seconds = traffic(producer, dag, sizes) / producer.grid(sizes) * slots / bandwidth
    wait = max(0.0, block_seconds - kernel.plan.lag * streaming / stripes)
    return launch + streaming + wait * wait / STRIPE_WAIT_SCALE


DEFAULT = AnalyticPredictor()
