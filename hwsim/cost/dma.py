"""What one DMA transfer costs on the DMA engines: its descriptors and their service time.

Computed once per distinct transfer geometry and config (``DmaCosts.plan``), never per run step.
The mechanisms and their parameters (``dma:`` section of a preset; docs/fidelity.md):

- **Descriptors** (HARDWARE.md §2.5 [S1]): a transfer is a gather list of contiguous source
  buffers and a scatter list of contiguous destination buffers. A descriptor here is a run of
  elements contiguous on *both* sides: its boundaries are the union of the source's and the
  destination's run boundaries (SBUF runs never cross a partition; an HBM run spans rows when
  they are back to back), cut at ``dma.max_descriptor_bytes``. Runs of a regular access
  pattern are uniform, so a transfer has ``E/rs + E/rd - E/lcm(rs, rd)`` descriptors for E
  elements and runs of rs and rd elements, of equal average size.
- **Split over engines** [S12]: by SBUF partition lanes: each engine serves a fixed lane of
  ``sbuf.partitions / dma.engines`` partitions (8 of 128 over 16 engines), so a transfer's
  partitions go to the engines whose lanes they fall in: 128 partitions to all 16 engines, 8 each;
  the [S12] example 1's 4 partitions [0, 4) to engine 0 alone (its 32 KiB on one engine in
  1,416 ns, HARDWARE.md §5 V18). A transfer with no SBUF side (HBM to HBM), or whose split
  count is not its SBUF side's partitions, is split by rows as evenly as possible, engines in
  order. Each engine serves its share of descriptors; every engine of the core, used
  or not, also writes the 4-byte completion semaphore of the transfer [S12], one more (minimal)
  descriptor.
- **Service time of a descriptor** of b bytes: ``b / (bandwidth x efficiency(b))``, where
  ``dma.descriptor_efficiency`` gives the saturation curve of [S11][S12] (bandwidth against
  bytes per partition: overhead-bound below 256 B, improving to 2 KiB, saturated from 4 KiB)
  at some descriptor sizes, interpolated linearly in log2(b) between them and flat beyond the
  largest. Below the smallest size a descriptor costs what one of the smallest size does: the
  per-descriptor overhead floor. Two points are calibrated on HARDWARE.md §5 (bench/calibrate.py).
- **Direction**: HBM writes move at ``dma.hbm_write_bandwidth_fraction`` of the read rate;
  ``dma_transpose`` at ``dma.transpose_bandwidth_fraction_by_source`` (HBM->SBUF, SBUF->SBUF
  [S2]). A piece that touches HBM also reserves its bytes on the stack's shared bandwidth, once
  per HBM side (``hwsim.machine.dma``), at ``hbm_ticks_per_byte`` (worked out here, once).

Service times are in *work units*: 1/WORK_UNITS_PER_TICK of a tick, so that an engine shared by
k <= 16 queues advances every piece by an integer amount per tick (processor sharing, see
``hwsim.machine.dma``), and rounding happens once, here.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from hwsim.config.schema import HardwareConfig
from hwsim.config.timebase import TimeBase
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.dma_ops import TransferSides

#: lcm(1..16): work units per tick, so a tick shared by k <= 16 queues is k equal integer parts.
WORK_UNITS_PER_TICK = 720_720
#: Bytes every engine writes at the end of a transfer: its completion semaphore [S12].
SEMAPHORE_WRITE_BYTES = 4


@dataclass(frozen=True, slots=True)
class Piece:
    """One engine's share of a transfer.

    engine:       DMA engine index within the core.
    nbytes:       data bytes it moves (0 for an engine that only writes the semaphore).
    descriptors:  data descriptors (the semaphore write not counted).
    work:         engine service time, work units (data descriptors + semaphore write).
    hbm_units:    its HBM reservation, in 1/d ticks (d the stack's ticks-per-byte denominator),
                  or -1 when the transfer does not touch HBM.
    """

    engine: int
    nbytes: int
    descriptors: int
    work: int
    hbm_units: int


@dataclass(frozen=True, slots=True)
class TransferPlan:
    """A DMA instruction's transfer on one config: its queue and one piece per DMA engine."""

    queue: int
    pieces: tuple[Piece, ...]
    descriptor_bytes: int  # average data descriptor size (for statistics and the verdict)

    @property
    def symmetric(self) -> bool:
        """Every engine gets the same piece (then the engines stay in step)."""
        first = self.pieces[0]
        return all(
            (p.nbytes, p.descriptors, p.work, p.hbm_units)
            == (first.nbytes, first.descriptors, first.work, first.hbm_units)
            for p in self.pieces
        )


def split_partitions(partitions: int, engines: int) -> list[int]:
    """Partitions handled by each engine: as even as possible, engines in order; engines past
    the partition count get none."""
    used = min(partitions, engines)
    base, extra = divmod(partitions, used)
    return [base + (1 if i < extra else 0) for i in range(used)] + [0] * (engines - used)


def lane_partitions(start: int, partitions: int, lane: int, engines: int) -> list[int]:
    """Partitions of [start, start + partitions) handled by each engine when engine e serves
    the SBUF partitions [e * lane, (e + 1) * lane) (its lane [S12])."""
    shares = [0] * engines
    for engine in range(start // lane, min(engines, -(-(start + partitions) // lane))):
        low, high = max(start, engine * lane), min(start + partitions, (engine + 1) * lane)
        shares[engine] = max(0, high - low)
    return shares


def run_elements(ap: AccessPattern) -> int:
    """Elements per contiguous run of an operand, in the transfer's element order."""
    _, run_bytes = ap.contiguous_runs()
    return max(1, run_bytes // ap.dtype.itemsize)


def descriptor_count(elements: int, src_run: int, dst_run: int) -> int:
    """Descriptors of a transfer of ``elements`` whose sides have runs of ``src_run`` and
    ``dst_run`` elements: one per run boundary on either side (shared boundaries once)."""
    src_run, dst_run = min(src_run, elements), min(dst_run, elements)
    shared = math.lcm(src_run, dst_run)
    return -(-elements // src_run) + -(-elements // dst_run) - elements // shared


def transfer_descriptors(sides: TransferSides) -> int:
    """Descriptors of a transfer before long runs are cut (``DmaCosts.plan``): runs contiguous
    on both sides; a transpose's element order differs between the sides, so it takes one per
    run of either side."""
    if sides.descriptors is not None:
        return sides.descriptors
    src, dst = sides.src, sides.dst
    if sides.transpose:
        return max(src.contiguous_runs()[0], dst.contiguous_runs()[0])
    return descriptor_count(dst.elements, run_elements(src), run_elements(dst))


class DmaCosts:
    """The ``dma:`` and ``hbm:`` parameters of a config as exact costs: per-descriptor service
    times (ns as Fractions), the HBM ticks per byte, the start latency; and the plan of each
    transfer (``plan``), worked out once per distinct geometry."""

    def __init__(self, config: HardwareConfig, timebase: TimeBase) -> None:
        dma = config.dma
        self.engines = dma.engines
        self.ticks_per_ns = Fraction(timebase.base_mhz, 1000)
        self.bandwidth_bytes_per_ns = Fraction(str(dma.bandwidth_bytes_per_ns))
        #: (descriptor bytes, efficiency), ascending
        self.efficiency = tuple(
            sorted((int(size), Fraction(str(v))) for size, v in dma.descriptor_efficiency.items())
        )
        self.max_descriptor_bytes = dma.max_descriptor_bytes
        #: SBUF partitions each engine serves (its lane [S12]); at least 1
        self.lane_partitions = max(1, config.sbuf.partitions // dma.engines)
        self.hbm_write_fraction = Fraction(str(dma.hbm_write_bandwidth_fraction))
        self.transpose_fraction: dict[str, Fraction] = {
            str(memory): Fraction(str(value))
            for memory, value in dma.transpose_bandwidth_fraction_by_source.items()
        }
        hbm_bytes_per_ns = Fraction(str(config.hbm.bandwidth_bytes_per_ns_per_stack))
        #: Ticks one byte takes on a stack's shared HBM bandwidth (exact).
        self.hbm_ticks_per_byte = self.ticks_per_ns / hbm_bytes_per_ns
        self._config, self._timebase = config, timebase
        self._descriptor_ns: dict[tuple[int, Fraction], Fraction] = {}
        self._plans: dict[tuple[object, ...], TransferPlan] = {}

    @cached_property
    def start_latency_ticks(self) -> int:
        """Ticks from a transfer's submission until it reaches its engines (read only by what
        times transfers: a build's planner asks for service times alone)."""
        return self._timebase.ns_to_ticks(self._config.dma.start_latency_ns)

    def efficiency_at(self, nbytes: int) -> Fraction:
        """The saturation curve at ``nbytes`` per descriptor (log2-linear between points)."""
        sizes = [size for size, _ in self.efficiency]
        if nbytes <= sizes[0]:
            return self.efficiency[0][1]
        if nbytes >= sizes[-1]:
            return self.efficiency[-1][1]
        i = bisect_right(sizes, nbytes)
        (s0, e0), (s1, e1) = self.efficiency[i - 1], self.efficiency[i]
        t = Fraction(math.log2(nbytes / s0) / math.log2(s1 / s0)).limit_denominator(1 << 20)
        return e0 + (e1 - e0) * t

    def descriptor_ns(self, nbytes: int, fraction: Fraction = Fraction(1)) -> Fraction:
        """Service time of one descriptor of ``nbytes`` at ``fraction`` of the bandwidth."""
        key = (nbytes, fraction)
        found = self._descriptor_ns.get(key)
        if found is None:
            size = max(nbytes, self.efficiency[0][0])
            rate = self.bandwidth_bytes_per_ns * fraction * self.efficiency_at(size)
            found = self._descriptor_ns[key] = size / rate
        return found

    def plan(self, queue: int, sides: TransferSides) -> TransferPlan:
        """The pieces of a transfer on ``queue`` (see the module docstring); transfers that
        differ only in their addresses share one plan."""
        src, dst = sides.src, sides.dst
        key = (
            queue,
            _geometry(src),
            _geometry(dst),
            sides.transpose,
            sides.partitions,
            sides.descriptors,
        )
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        nbytes = dst.elements * max(src.dtype.itemsize, dst.dtype.itemsize)
        descriptors = transfer_descriptors(sides)
        descriptor_bytes = max(1, nbytes // descriptors)
        if descriptor_bytes > self.max_descriptor_bytes:
            descriptors *= -(-descriptor_bytes // self.max_descriptor_bytes)
            descriptor_bytes = max(1, nbytes // descriptors)
        fraction = self._direction_fraction(sides)
        hbm_sides = (src.memory is MemorySpace.HBM) + (dst.memory is MemorySpace.HBM)
        rows = dst.partitions if sides.partitions is None else sides.partitions
        semaphore_ns = self.descriptor_ns(SEMAPHORE_WRITE_BYTES)
        hbm_units_per_byte = self.hbm_ticks_per_byte.numerator * hbm_sides
        pieces = []
        for engine, share in enumerate(self._shares(sides, rows)):
            piece_bytes = nbytes * share // rows
            piece_descriptors = -(-descriptors * share // rows) if share else 0
            size = piece_bytes // piece_descriptors if piece_descriptors else 0
            busy_ns = semaphore_ns
            if piece_descriptors:
                busy_ns += piece_descriptors * self.descriptor_ns(size, fraction)
            work = math.ceil(busy_ns * self.ticks_per_ns * WORK_UNITS_PER_TICK)
            hbm_units = piece_bytes * hbm_units_per_byte if hbm_sides else -1
            pieces.append(Piece(engine, piece_bytes, piece_descriptors, work, hbm_units))
        plan = self._plans[key] = TransferPlan(queue, tuple(pieces), descriptor_bytes)
        return plan

    def _shares(self, sides: TransferSides, rows: int) -> list[int]:
        """Rows (partitions) of the transfer each engine serves: by lanes of the SBUF side's
        partitions, or evenly when it has no SBUF side or splits by another count."""
        sbuf = next((ap for ap in (sides.dst, sides.src) if ap.memory is MemorySpace.SBUF), None)
        if sbuf is None or sbuf.partitions != rows:
            return split_partitions(rows, self.engines)
        shares = lane_partitions(sbuf.start_partition, rows, self.lane_partitions, self.engines)
        if sum(shares) != rows:  # partitions past the lanes' range: split evenly
            return split_partitions(rows, self.engines)
        return shares

    def _direction_fraction(self, sides: TransferSides) -> Fraction:
        """The share of the bandwidth a transfer's direction reaches."""
        if sides.transpose:
            return self.transpose_fraction[sides.src.memory.value]
        if sides.dst.memory is MemorySpace.HBM:
            return self.hbm_write_fraction
        return Fraction(1)

    def uncontended_ticks(self, plan: TransferPlan) -> int:
        """How long ``plan``'s transfer keeps the DMA engines and HBM busy when it has them to
        itself: its busiest engine, or its HBM bytes at the stack's rate if that is longer."""
        engine_ticks = max(piece.work for piece in plan.pieces) / WORK_UNITS_PER_TICK
        hbm_units = sum(max(piece.hbm_units, 0) for piece in plan.pieces)
        return math.ceil(max(engine_ticks, hbm_units / self.hbm_ticks_per_byte.denominator))

    def busiest_engine_ns(self, plan: TransferPlan) -> Fraction:
        """Service time of ``plan``'s busiest DMA engine, ns."""
        work = max(piece.work for piece in plan.pieces)
        return Fraction(work, WORK_UNITS_PER_TICK) / self.ticks_per_ns


def _geometry(ap: AccessPattern) -> tuple[object, ...]:
    """What of an operand its transfer's cost depends on (not where it is)."""
    return (
        ap.memory,
        ap.dtype.itemsize,
        ap.partitions,
        ap.start_partition if ap.memory is MemorySpace.SBUF else 0,  # its lanes
        ap.free_sizes,
        ap.free_strides,
        ap.partition_stride,
    )
