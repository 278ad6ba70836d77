"""On-chip data movement by index: local_gather, nc_n_gather (GpSimdE), nc_stream_shuffle
(VectorE).

Elements move bit for bit (``kernels.gather``). An index outside its table is a
``MemoryAccessError`` naming the instruction (nki.isa calls it undefined behaviour [S15]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hwsim import kernels
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction, read_bits, write_bits
from hwsim.isa.operands import READ, WRITE, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

GROUP = kernels.GPSIMD_GROUP
#: local_gather's elements per index [S15] and most indices per GpSimd core [S15].
LOCAL_GATHER_ELEMENTS = (1, 2, 4, 8, 16, 32)
LOCAL_GATHER_MAX_INDICES = 4096
#: nc_stream_shuffle: partitions of a quadrant, and the mask value that leaves one unmodified.
QUADRANT = 32
SHUFFLE_KEEP = 255


def partition_runs(ap: AccessPattern, rows: list[int]) -> tuple[AccessPattern, ...]:
    """``ap`` restricted to the given partitions (relative, ascending), one pattern per run."""
    runs: list[AccessPattern] = []
    start = previous = None
    for row in [*rows, None]:
        if row is not None and previous is not None and row == previous + 1:
            previous = row
            continue
        if start is not None and previous is not None:
            runs.append(
                replace(
                    ap, start_partition=ap.start_partition + start, partitions=previous - start + 1
                )
            )
        start = previous = row
    return tuple(runs)


def _gathered(instruction: ComputeInstruction, gather: Callable[..., Any], *args: Any) -> Any:
    """``gather(*args)``; an index out of range is the instruction's ``MemoryAccessError``."""
    try:
        return gather(*args)
    except IndexError as err:
        raise MemoryAccessError(f"{instruction.label()}: {err}") from None


def check_gpsimd_groups(instruction: ComputeInstruction, **operands: AccessPattern) -> None:
    """Operands of a 16-partition-group GpSimd instruction: the same partitions, starting on a
    core boundary (core i is wired to partitions 16i .. 16i + 15 [S1])."""
    first = next(iter(operands.values()))
    for name, ap in operands.items():
        if ap.start_partition != first.start_partition or ap.partitions != first.partitions:
            instruction.fail(
                f"operand '{name}' covers partitions [{ap.start_partition}, {ap.end_partition}); "
                f"all operands must cover [{first.start_partition}, {first.end_partition})"
            )
    if first.start_partition % GROUP or first.partitions % GROUP:
        instruction.fail(
            f"operands cover partitions [{first.start_partition}, {first.end_partition}); each "
            f"GpSimd core owns {GROUP} partitions, so start and count must be multiples of {GROUP}"
        )


@register("local_gather", engines=("gpsimd",), profiler="LOCAL_GATHER")
@dataclass(frozen=True, kw_only=True)
class LocalGather(ComputeInstruction):
    """Per 16-partition GpSimd core: the core flattens its 16 partitions of ``index`` (uint16,
    partition first) and takes the first ``num_valid_indices``; every one of its partitions
    then gathers ``num_elem_per_idx`` contiguous elements at each index from its own row of
    src_buffer into dst, in order (nki.isa's NumPy semantics [S16]). An index is an element
    offset into the row (the hardware's value; nki.isa's NumPy reference multiplies row numbers
    by num_elem_per_idx). No dtype conversion.

    Cost [S16]: GPSIMD_START + (num_valid_indices * num_elem_per_idx) x C cycles, C = ((28 + t e)
    / (t e)) / min(4 / dtype_size, e), t = 4, e = num_elem_per_idx. [S16] writes "/ C"; C is
    cycles per element (28 cycles per batch of t indices plus one per element, over a 32-bit
    lane path), so it multiplies: the simulator's reading (docs/fidelity.md). Rounded up.
    """

    NKI_ARGS = "dst, src_buffer, index, num_elem_per_idx, num_valid_indices"

    dst: AccessPattern = operand(WRITE)
    src_buffer: AccessPattern = operand(READ)
    index: AccessPattern = operand(READ)
    num_elem_per_idx: int = 1
    num_valid_indices: int | None = None

    def valid_indices(self) -> int:
        default = GROUP * self.index.free_elements
        return default if self.num_valid_indices is None else self.num_valid_indices

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        check_gpsimd_groups(self, dst=self.dst, src_buffer=self.src_buffer, index=self.index)
        self.check_dtype("index", self.index, ("uint16",))
        if self.num_elem_per_idx not in LOCAL_GATHER_ELEMENTS:
            self.fail(f"num_elem_per_idx={self.num_elem_per_idx}; valid: {LOCAL_GATHER_ELEMENTS}")
        valid, total = self.valid_indices(), GROUP * self.index.free_elements
        if not 1 <= valid <= min(total, LOCAL_GATHER_MAX_INDICES):
            self.fail(
                f"num_valid_indices={valid}: a core has {total} indices (16 partitions of "
                f"index) and gathers at most {LOCAL_GATHER_MAX_INDICES} [S15]"
            )
        if self.dst.free_elements != valid * self.num_elem_per_idx:
            self.fail(
                f"dst has {self.dst.free_elements} elements per partition; it must hold "
                f"{valid} indices x {self.num_elem_per_idx} elements = "
                f"{valid * self.num_elem_per_idx}"
            )
        if self.dst.dtype != self.src_buffer.dtype:
            self.fail("dst and src_buffer must share a dtype: local_gather converts nothing [S15]")

    def execute(self, state: CoreState) -> None:
        index = read_bits(state, self.index)
        out = _gathered(
            self,
            kernels.local_gather,
            read_bits(state, self.src_buffer),
            index,
            self.num_elem_per_idx,
            self.valid_indices(),
        )
        write_bits(state, self.dst, out)


@register("nc_n_gather", engines=("gpsimd",), profiler="N_GATHER")
@dataclass(frozen=True, kw_only=True)
class NcNGather(ComputeInstruction):
    """dst[p, i] = data[p, indices[p, i]], each partition gathering from its own flattened
    row; indices uint32 in [0, data's elements per partition); dst takes data's dtype; all in
    SBUF [S15].

    Cost: no published figure (HARDWARE.md §3 "n/a"). Assumption: nki.isa lowers it to
    ceil(M / 512) ISA instructions [S15], so GPSIMD_START per instruction plus the streaming of
    the M indices in and M results out; the table reads are random accesses, not a stream.
    """

    dst: AccessPattern = operand(WRITE)
    data: AccessPattern = operand(READ)
    indices: AccessPattern = operand(READ)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        for name, ap in (("data", self.data), ("indices", self.indices)):
            if (
                ap.start_partition != self.dst.start_partition
                or ap.partitions != self.dst.partitions
            ):
                self.fail(
                    f"operand '{name}' covers partitions [{ap.start_partition}, "
                    f"{ap.end_partition}); it must cover dst's [{self.dst.start_partition}, "
                    f"{self.dst.end_partition}) (each partition gathers from itself)"
                )
        self.check_dtype("indices", self.indices, ("uint32",))
        if self.indices.free_elements != self.dst.free_elements:
            self.fail("dst must have as many elements per partition as indices [S15]")
        if self.dst.dtype != self.data.dtype:
            self.fail("dst must have data's dtype: nc_n_gather converts nothing [S15]")

    def execute(self, state: CoreState) -> None:
        data, indices = read_bits(state, self.data), read_bits(state, self.indices)
        write_bits(state, self.dst, _gathered(self, kernels.n_gather, data, indices))


@register("nc_stream_shuffle", engines=("vector",), profiler="STREAM_SHUFFLE")
@dataclass(frozen=True, kw_only=True)
class NcStreamShuffle(ComputeInstruction):
    """Within each 32-partition quadrant, dst partition i = src partition shuffle_mask[i] (255:
    dst partition i unmodified), the same mask for every quadrant; dst and src share dtype and
    elements per partition and may be the same tile [S15]. Start partitions follow the hardware
    rule for ``active = ceil(max(src, dst partitions) / 32) * 32``: 0 for 96/128, 0 or 64 for
    64, a multiple of 32 for 32 [S15]. A mask entry naming a partition src lacks is an error.

    Cost: max(MIN_II, N) VectorE cycles [S16], N = src's elements per partition.
    """

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    shuffle_mask: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shuffle_mask", tuple(int(m) for m in self.shuffle_mask))

    def moves(self) -> list[tuple[int, int]]:
        """(dst partition, src partition) pairs, relative to each operand's start."""
        quadrants = -(-max(self.src.partitions, self.dst.partitions) // QUADRANT)
        return [
            (q * QUADRANT + i, q * QUADRANT + m)
            for q in range(quadrants)
            for i, m in enumerate(self.shuffle_mask)
            if m != SHUFFLE_KEEP and q * QUADRANT + i < self.dst.partitions
        ]

    def reads(self) -> tuple[AccessPattern, ...]:
        return partition_runs(self.src, sorted({s for _, s in self.moves()}))

    def writes(self) -> tuple[AccessPattern, ...]:
        return partition_runs(self.dst, [d for d, _ in self.moves()])

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        mask = self.shuffle_mask
        if len(mask) != QUADRANT or any(not 0 <= m < QUADRANT and m != SHUFFLE_KEEP for m in mask):
            self.fail(
                f"shuffle_mask must be {QUADRANT} entries in 0..{QUADRANT - 1} or "
                f"{SHUFFLE_KEEP} (keep), got {mask}"
            )
        if self.src.dtype != self.dst.dtype or self.src.free_elements != self.dst.free_elements:
            self.fail("dst must have src's dtype and elements per partition [S15]")
        active = -(-max(self.src.partitions, self.dst.partitions) // QUADRANT) * QUADRANT
        starts = {QUADRANT: (0, 32, 64, 96), 2 * QUADRANT: (0, 64)}.get(active, (0,))
        for name, ap in (("src", self.src), ("dst", self.dst)):
            if ap.start_partition not in starts:
                self.fail(
                    f"operand '{name}' starts at partition {ap.start_partition}; with {active} "
                    f"active partitions it must start at {' or '.join(map(str, starts))} [S15]"
                )
        for d, s in self.moves():
            if s >= self.src.partitions:
                self.fail(
                    f"shuffle_mask sends src partition {s} to dst partition {d}, but src has "
                    f"{self.src.partitions} partitions"
                )

    def execute(self, state: CoreState) -> None:
        moves = self.moves()
        if not moves:
            return
        rows = np.array([s for _, s in moves], dtype=np.int64)
        moved = kernels.gather_rows(read_bits(state, self.src), rows)
        out = read_bits(state, self.dst)
        out[[d for d, _ in moves]] = moved
        write_bits(state, self.dst, out)
