"""Copies at an offset read at run time: tensor_copy_dynamic_src / tensor_copy_dynamic_dst.

The older nki.isa API [S16] on any compute engine, converting dtypes like ``tensor_copy``. The
dynamic operand is given as the whole range its window may take: ``reads()`` / ``writes()``
name that range (what dependencies must cover) and ``initcheck_reads`` / ``initcheck_writes``
the window actually used. An offset that leaves the range is a ``MemoryAccessError`` (nki.isa's
default out-of-bounds mode is an error [S15]).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction
from hwsim.isa.operands import READ, WRITE, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState


@dataclass(frozen=True, kw_only=True)
class _DynamicCopy(ComputeInstruction):
    """Shared by tensor_copy_dynamic_src/dst: one operand is a range along ``free_axis`` (its
    free dim, 0 = the first) that a window the other operand's size slides over; the window
    starts at the value of ``offset`` (a [1, 1] int32/uint32 SBUF tile) read at run time."""

    ENGINES = ("vector", "scalar", "gpsimd")

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    offset: AccessPattern = operand(READ)
    free_axis: int

    def ranged(self) -> AccessPattern:
        raise NotImplementedError

    def fixed(self) -> AccessPattern:
        raise NotImplementedError

    def window(self, start: int) -> AccessPattern:
        """The ranged operand's window at ``start`` along free_axis."""
        ranged, fixed, axis = self.ranged(), self.fixed(), self.free_axis
        sizes = list(ranged.free_sizes)
        sizes[axis] = fixed.free_sizes[axis]
        shift = start * ranged.free_strides[axis] * ranged.dtype.itemsize
        return replace(ranged, free_sizes=tuple(sizes), offset_bytes=ranged.offset_bytes + shift)

    def positions(self) -> int:
        axis = self.free_axis
        return self.ranged().free_sizes[axis] - self.fixed().free_sizes[axis] + 1

    def start(self, state: CoreState) -> int | None:
        """The run-time offset, or None when it leaves the range (``execute`` raises)."""
        value = int(state.view(self.offset).reshape(-1)[0])
        return value if 0 <= value < self.positions() else None

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        ranged, fixed = self.ranged(), self.fixed()
        if ranged.partitions != fixed.partitions:
            self.fail(f"src {self.src.shape} and dst {self.dst.shape} need the same partitions")
        if not 0 <= self.free_axis < len(ranged.free_sizes):
            self.fail(f"free_axis={self.free_axis} is not a free dim of {ranged.shape}")
        others = [i for i in range(len(ranged.free_sizes)) if i != self.free_axis]
        if (
            len(fixed.free_sizes) != len(ranged.free_sizes)
            or any(ranged.free_sizes[i] != fixed.free_sizes[i] for i in others)
            or fixed.free_sizes[self.free_axis] > ranged.free_sizes[self.free_axis]
        ):
            self.fail(
                f"the window {fixed.shape} must match the range {ranged.shape} except along "
                f"free_axis {self.free_axis}, where it may be shorter"
            )
        if self.offset.partitions != 1 or self.offset.free_elements != 1:
            self.fail(f"operand 'offset' has shape {self.offset.shape}; it must be [1, 1]")
        self.check_dtype("offset", self.offset, ("int32", "uint32"))
        self.check_memory("offset", self.offset, MemorySpace.SBUF)

    def streams(self) -> tuple[AccessPattern, AccessPattern]:
        """(what is read, what is written) of one copy, the window at offset 0."""
        raise NotImplementedError

    def execute(self, state: CoreState) -> None:
        start = self.start(state)
        if start is None:
            value = int(state.view(self.offset).reshape(-1)[0])
            raise MemoryAccessError(
                f"{self.label()}: offset {value} is outside [0, {self.positions()}): the window "
                f"of {self.fixed().free_sizes[self.free_axis]} along free_axis "
                f"{self.free_axis} would leave the range {self.ranged().shape}"
            )
        self.copy(state, start)

    def copy(self, state: CoreState, start: int) -> None:
        raise NotImplementedError


@register("tensor_copy_dynamic_src", profiler="TENSOR_COPY_DYNAMIC")
@dataclass(frozen=True, kw_only=True)
class TensorCopyDynamicSrc(_DynamicCopy):
    """dst = src's window at the run-time offset (older nki.isa API [S16]): src is the range the
    window may take, dst the window's shape; converts dtype like tensor_copy.

    Cost: max(MIN_II_DYNAMIC, N) cycles [S16] (``min_ii_dynamic_cycles``, ~600), N the window's
    elements per partition streamed in and out, plus the engine's fixed cost (GpSimdE's start).
    """

    def ranged(self) -> AccessPattern:
        return self.src

    def fixed(self) -> AccessPattern:
        return self.dst

    def streams(self) -> tuple[AccessPattern, AccessPattern]:
        return self.window(0), self.dst

    def initcheck_reads(self, state: CoreState) -> tuple[AccessPattern, ...]:
        start = self.start(state)
        return (self.offset,) if start is None else (self.offset, self.window(start))

    def copy(self, state: CoreState, start: int) -> None:
        state.write(self.dst, state.read(self.window(start)).reshape(self.dst.shape))


@register("tensor_copy_dynamic_dst", profiler="TENSOR_COPY_DYNAMIC")
@dataclass(frozen=True, kw_only=True)
class TensorCopyDynamicDst(_DynamicCopy):
    """dst's window at the run-time offset = src (older nki.isa API [S16]): dst is the range the
    window may take, src the window's shape; converts dtype like tensor_copy. Only the window's
    bytes are written (initcheck marks just those). Cost as tensor_copy_dynamic_src [S16]."""

    def ranged(self) -> AccessPattern:
        return self.dst

    def fixed(self) -> AccessPattern:
        return self.src

    def streams(self) -> tuple[AccessPattern, AccessPattern]:
        return self.src, self.window(0)

    def initcheck_writes(self, state: CoreState) -> tuple[tuple[AccessPattern, Any], ...]:
        start = self.start(state)
        return () if start is None else ((self.window(start), None),)

    def copy(self, state: CoreState, start: int) -> None:
        window = self.window(start)
        state.write(window, state.read(self.src).reshape(window.shape))
