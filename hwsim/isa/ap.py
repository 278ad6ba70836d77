"""Access patterns: how an instruction operand addresses SBUF, PSUM or an HBM tensor.

As on the hardware, an operand is a partition range plus up to 4 strided free dimensions
(HARDWARE.md §1.4): every active partition uses the same free pattern, partitions are contiguous.
For HBM (a flat byte space of named tensors) the "partition" dimension is one more strided
dimension, ``partition_stride`` elements apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from hwsim.dtypes import DType

MAX_FREE_DIMS = 4


class MemorySpace(StrEnum):
    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"


class _HashSlot:
    """A slot outside the dataclass fields (not compared, copied or printed) for the pattern's
    hash, worked out once: the builder and the simulator look operands up by value a lot."""

    __slots__ = ("_hash",)
    _hash: int


@dataclass(frozen=True, slots=True)
class AccessPattern(_HashSlot):
    """One operand.

    memory:           where the bytes live.
    dtype:            element type of the operand (a cast happens when it differs from the data).
    start_partition:  first partition (SBUF/PSUM); 0 for HBM.
    partitions:       number of partitions (the partition dimension's size).
    offset_bytes:     byte offset within each partition (SBUF/PSUM) or within the tensor (HBM).
    free_sizes:       sizes of the free dimensions, outermost first (1 to 4 of them).
    free_strides:     their strides in elements (may be 0 for broadcast reads).
    partition_stride: HBM only: elements between consecutive partition rows.
    tensor:           HBM only: the tensor's name.
    """

    memory: MemorySpace
    dtype: DType
    start_partition: int
    partitions: int
    offset_bytes: int
    free_sizes: tuple[int, ...]
    free_strides: tuple[int, ...]
    partition_stride: int = 0
    tensor: str = ""

    def __hash__(self) -> int:
        # Equal patterns have equal geometry, so hashing these fields alone is consistent with
        # the generated __eq__, and twice as fast as also hashing the dtype and memory (whose
        # __hash__ are Python-level); kept in ``_hash`` after the first call.
        try:
            return self._hash
        except AttributeError:
            pass
        value = hash(
            (
                self.offset_bytes,
                self.start_partition,
                self.partitions,
                self.free_sizes,
                self.free_strides,
                self.partition_stride,
                self.tensor,
            )
        )
        object.__setattr__(self, "_hash", value)
        return value

    # ---- shape ------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *self.free_sizes)

    @property
    def free_elements(self) -> int:
        """Elements per partition (N in the documented cost formulas)."""
        return math.prod(self.free_sizes)

    @property
    def elements(self) -> int:
        return self.partitions * self.free_elements

    @property
    def nbytes(self) -> int:
        return self.elements * self.dtype.itemsize

    @property
    def end_partition(self) -> int:
        return self.start_partition + self.partitions

    # ---- byte extents -----------------------------------------------------------------------
    def free_extent_elements(self) -> tuple[int, int]:
        """(lowest, highest) element index touched within one partition row, relative to offset."""
        low = high = 0
        for n, s in zip(self.free_sizes, self.free_strides, strict=True):
            if s > 0:
                high += (n - 1) * s
            elif s < 0:
                low += (n - 1) * s
        return low, high

    def byte_span(self) -> tuple[int, int]:
        """[first, last+1) bytes touched within each partition (SBUF/PSUM) or tensor (HBM)."""
        size = self.dtype.itemsize
        low, high = self.free_extent_elements()
        if self.memory is MemorySpace.HBM and self.partitions > 1:
            row = (self.partitions - 1) * self.partition_stride
            low, high = min(low, low + row), max(high, high + row)
        return self.offset_bytes + low * size, self.offset_bytes + (high + 1) * size

    @property
    def innermost_stride_bytes(self) -> int:
        return abs(self.free_strides[-1]) * self.dtype.itemsize

    def contiguous_runs(self) -> tuple[int, int]:
        """(number of contiguous byte runs, bytes per run): DMA descriptors needed for the operand.

        Free dims are merged from the innermost out while they are contiguous; for HBM the
        partition dimension merges too when rows are back to back.
        """
        sizes = list(self.free_sizes)
        strides = list(self.free_strides)
        if self.memory is MemorySpace.HBM:
            sizes.insert(0, self.partitions)
            strides.insert(0, self.partition_stride)
            outer = 1
        else:
            outer = self.partitions
        run = 1
        index = len(sizes) - 1
        if strides[index] == 1 or sizes[index] == 1:
            run = sizes[index]
            index -= 1
            while index >= 0 and (strides[index] == run or sizes[index] == 1):
                run *= sizes[index]
                index -= 1
        count = outer * math.prod(sizes[: index + 1])
        return count, run * self.dtype.itemsize

    def describe(self) -> str:
        """Compact ISA-style text, like the profiler's ``src=<dtype>@<addr>[strides][sizes]``."""
        where = f"{self.memory}:{self.tensor}" if self.tensor else str(self.memory)
        parts = f"[{self.start_partition}:{self.end_partition}]"
        strides = ",".join(map(str, self.free_strides))
        sizes = ",".join(map(str, self.free_sizes))
        return f"{self.dtype.name}@{where}{parts}+{self.offset_bytes}[{strides}][{sizes}]"

    def with_dtype(self, dtype: DType) -> AccessPattern:
        """The same bytes read as another dtype of the same size."""
        if dtype.itemsize != self.dtype.itemsize:
            raise ValueError("with_dtype needs a dtype of the same size")
        return AccessPattern(
            self.memory,
            dtype,
            self.start_partition,
            self.partitions,
            self.offset_bytes,
            self.free_sizes,
            self.free_strides,
            self.partition_stride,
            self.tensor,
        )


def contiguous(
    memory: MemorySpace,
    dtype: DType,
    partitions: int,
    free: int | tuple[int, ...],
    *,
    start_partition: int = 0,
    offset_bytes: int = 0,
    tensor: str = "",
) -> AccessPattern:
    """A dense [partitions, *free] pattern (row-major free dims); HBM rows are back to back."""
    sizes = (free,) if isinstance(free, int) else tuple(free)
    strides = []
    step = 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    return AccessPattern(
        memory,
        dtype,
        start_partition,
        partitions,
        offset_bytes,
        sizes,
        tuple(reversed(strides)),
        partition_stride=step if memory is MemorySpace.HBM else 0,
        tensor=tensor,
    )
