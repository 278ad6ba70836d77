"""Sliding-window geometry shared by convolution and pooling: which input rows and columns a
block of outputs reads, and how big an output block can be.

Along one spatial axis, output o reads inputs ``o * stride - padding + k * dilation`` for the
kernel taps k. A block of ``count`` consecutive outputs therefore reads one contiguous range of
inputs (its *window*), which a lowering loads into SBUF once and then reads per tap through a
strided view: tap k of the block is window elements ``k * dilation + i * stride``. Window
elements outside the input are padding; they are never read from HBM (the loads are clipped),
the lowering fills them (zeros for convolution, -inf for max pooling).

A 1-tap axis (a 1x1 convolution with stride 2) only ever reads every ``stride``-th input, so its
window holds just those (``AxisWindow.step``): the DMA skips the rest instead of loading them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hwsim.bridge.tiling.space import TilingError


@dataclass(frozen=True)
class AxisWindow:
    """The inputs one block of outputs reads along one axis: window element j is input
    ``start + j * step``; elements [lo, hi) lie inside the input, the rest are padding."""

    start: int
    size: int
    step: int
    lo: int
    hi: int

    @property
    def clipped(self) -> bool:
        """Whether part of the window is padding (the lowering must fill it)."""
        return self.lo > 0 or self.hi < self.size

    @property
    def first_input(self) -> int:
        """The input index of the first window element inside the input."""
        return self.start + self.lo * self.step


@dataclass(frozen=True)
class AxisGeometry:
    """One spatial axis of a sliding-window op (sizes in elements)."""

    size: int
    kernel: int
    stride: int
    padding: int
    dilation: int

    @property
    def step(self) -> int:
        """Inputs between consecutive window elements: ``stride`` for a 1-tap axis, else 1."""
        return self.stride if self.kernel == 1 else 1

    def window(self, out0: int, count: int) -> AxisWindow:
        """The window of outputs [out0, out0 + count)."""
        step = self.step
        start = out0 * self.stride - self.padding
        size = self.window_size(count)
        lo = min(size, max(0, -(start // step)))  # first j with start + j * step >= 0
        hi = max(lo, min(size, -(-(self.size - start) // step)))
        return AxisWindow(start, size, step, lo, hi)

    def window_size(self, count: int) -> int:
        """Window elements of ``count`` consecutive outputs."""
        return (count - 1) * (self.stride // self.step) + (self.kernel - 1) * self.dilation + 1

    def tap(self, k: int, count: int) -> slice:
        """Window elements tap ``k`` reads for ``count`` consecutive outputs."""
        first = k * self.dilation // self.step
        pitch = self.stride // self.step
        return slice(first, first + (count - 1) * pitch + 1, pitch)


@dataclass(frozen=True)
class OutputBlock:
    """Images [n0, n0 + images) x output rows [row0, row0 + rows) x columns [col0, col0 + cols)."""

    n0: int
    images: int
    row0: int
    rows: int
    col0: int
    cols: int

    @property
    def elements(self) -> int:
        return self.images * self.rows * self.cols


#: Bytes per partition of the SBUF tiles one block needs, given (images, rows, cols).
BlockBytes = Callable[[int, int, int], int]


def plan_blocks(
    batch: int,
    out_rows: int,
    out_cols: int,
    *,
    max_elements: int,
    block_bytes: BlockBytes,
    budget_bytes: int,
) -> list[OutputBlock]:
    """Output blocks covering [batch, out_rows, out_cols], each at most ``max_elements`` outputs
    (a PSUM bank, a tile's free size) and ``budget_bytes`` of SBUF per partition. Blocks grow
    columns first, then whole rows, then whole images, so windows overlap as little as they can.
    Raises TilingError when not even one output fits."""

    def fits(images: int, rows: int, cols: int) -> bool:
        return images * rows * cols <= max_elements and block_bytes(images, rows, cols) <= (
            budget_bytes
        )

    cols = min(out_cols, max_elements)
    while cols > 1 and not fits(1, 1, cols):
        cols -= 1
    if not fits(1, 1, cols):
        raise TilingError(
            f"one output's window needs {block_bytes(1, 1, 1)} bytes per partition, more than "
            f"the {budget_bytes} available"
        )
    rows = 1
    if cols == out_cols:
        rows = min(out_rows, max_elements // cols)
        while rows > 1 and not fits(1, rows, cols):
            rows -= 1
    images = 1
    if rows == out_rows and cols == out_cols:
        images = min(batch, max_elements // (rows * cols))
        while images > 1 and not fits(images, rows, cols):
            images -= 1
    return [
        OutputBlock(
            n0, min(images, batch - n0), r0, min(rows, out_rows - r0), c0, min(cols, out_cols - c0)
        )
        for n0 in range(0, batch, images)
        for r0 in range(0, out_rows, rows)
        for c0 in range(0, out_cols, cols)
    ]
