"""Graph values in HBM: a torch-style strided view (shape, strides, offset) of one HBM tensor.

Every value of a lowered graph lives in HBM. A lowering that computes allocates a new contiguous
HBM tensor; a view op (permute, transpose, expand, slice, select, unsqueeze, view of a viewable
layout) only makes a new ``HbmValue`` over the same tensor, and the loads of the ops that consume
it read through the strides (stride 0 for broadcast dims), as PyTorch's strided tensors do. Views
cost nothing until a consumer reads them; a view that cannot be expressed (``view`` of a
non-viewable layout) returns ``None`` and the caller copies.

Strides and offsets are in elements. ``tile`` is the kernel-language HBM tile that names the tensor
and its dtype; its own shape is how the tensor was declared and plays no part in views.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.lang.tiles import Tile


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class HbmValue:
    """A strided view of the HBM tensor ``tile``: element i of the view is at
    ``offset + sum(i_d * strides[d])`` elements from the tensor's start."""

    tile: Tile
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def contiguous(cls, tile: Tile, shape: tuple[int, ...], offset: int = 0) -> HbmValue:
        return cls(tile, tuple(shape), contiguous_strides(tuple(shape)), offset)

    # ---- facts --------------------------------------------------------------------------------
    @property
    def dtype(self) -> DType:
        return self.tile.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def name(self) -> str:
        return self.tile.name

    def is_contiguous(self) -> bool:
        """Row-major and dense (size-1 dims may have any stride), as torch.is_contiguous."""
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def span(self) -> tuple[int, int]:
        """[first, last + 1) elements of the tensor this view can touch."""
        high = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))
        return self.offset, self.offset + high + 1

    # ---- metadata-only views (torch semantics) --------------------------------------------------
    def permute(self, dims: tuple[int, ...] | list[int]) -> HbmValue:
        dims = [_wrap(d, self.ndim) for d in dims]
        if sorted(dims) != list(range(self.ndim)):
            raise ValueError(f"permute dims {dims} are not a permutation of {self.ndim} dims")
        return replace(
            self,
            shape=tuple(self.shape[d] for d in dims),
            strides=tuple(self.strides[d] for d in dims),
        )

    def transpose(self, dim0: int, dim1: int) -> HbmValue:
        if self.ndim < 2:
            return self
        order = list(range(self.ndim))
        a, b = _wrap(dim0, self.ndim), _wrap(dim1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    def expand(self, shape: tuple[int, ...] | list[int]) -> HbmValue:
        """torch.expand: new leading dims and size-1 dims broadcast with stride 0; -1 keeps."""
        shape = tuple(int(n) for n in shape)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ValueError(f"cannot expand shape {self.shape} to fewer dims {shape}")
        sizes, strides = [], []
        for d, n in enumerate(shape):
            if d < lead:
                sizes.append(n)
                strides.append(0)
                continue
            have, stride = self.shape[d - lead], self.strides[d - lead]
            if n == -1 or n == have:
                sizes.append(have)
                strides.append(stride)
            elif have == 1:
                sizes.append(n)
                strides.append(0)
            else:
                raise ValueError(f"cannot expand dim {d - lead} of size {have} to {n}")
        return replace(self, shape=tuple(sizes), strides=tuple(strides))

    def unsqueeze(self, dim: int) -> HbmValue:
        dim = _wrap(dim, self.ndim + 1)
        inner = self.strides[dim] * self.shape[dim] if dim < self.ndim else 1
        return replace(
            self,
            shape=(*self.shape[:dim], 1, *self.shape[dim:]),
            strides=(*self.strides[:dim], inner, *self.strides[dim:]),
        )

    def squeeze(self, dims: tuple[int, ...] | list[int] | None = None) -> HbmValue:
        """Drop size-1 dims (all of them, or those of ``dims`` that have size 1)."""
        chosen = range(self.ndim) if dims is None else {_wrap(d, self.ndim) for d in dims}
        keep = [d for d in range(self.ndim) if not (d in chosen and self.shape[d] == 1)]
        return replace(
            self,
            shape=tuple(self.shape[d] for d in keep),
            strides=tuple(self.strides[d] for d in keep),
        )

    def slice(self, dim: int, start: int | None, end: int | None, step: int = 1) -> HbmValue:
        """torch slicing: start/end clamped to the dim, positive step."""
        dim = _wrap(dim, self.ndim)
        if step < 1:
            raise ValueError(f"slice step must be positive, got {step}")
        n = self.shape[dim]
        first, stop, _ = slice(start, end).indices(n)
        count = max(0, -(-(stop - first) // step))
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = count
        strides[dim] = self.strides[dim] * step
        return replace(
            self,
            shape=tuple(shape),
            strides=tuple(strides),
            offset=self.offset + first * self.strides[dim] if count else self.offset,
        )

    def select(self, dim: int, index: int) -> HbmValue:
        dim = _wrap(dim, self.ndim)
        n = self.shape[dim]
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for dim {dim} of size {n}")
        return HbmValue(
            self.tile,
            self.shape[:dim] + self.shape[dim + 1 :],
            self.strides[:dim] + self.strides[dim + 1 :],
            self.offset + index * self.strides[dim],
        )

    def view(self, shape: tuple[int, ...] | list[int]) -> HbmValue | None:
        """torch.view: the same elements with another shape, or None if this layout cannot
        be viewed so (torch would raise; the caller copies to a contiguous tensor first)."""
        shape = infer_shape(shape, self.numel)
        strides = view_strides(self.shape, self.strides, shape)
        return None if strides is None else replace(self, shape=shape, strides=strides)


def infer_shape(shape: tuple[int, ...] | list[int], numel: int) -> tuple[int, ...]:
    """Resolve one -1 in a view shape; check the element count."""
    shape = [int(n) for n in shape]
    if shape.count(-1) > 1:
        raise ValueError(f"view shape {shape} has more than one -1")
    known = math.prod(n for n in shape if n != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise ValueError(f"view shape {shape} does not fit {numel} elements")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise ValueError(f"view shape {tuple(shape)} does not fit {numel} elements")
    return tuple(shape)


def view_strides(
    old_shape: tuple[int, ...], old_strides: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides that view ``old`` as ``new_shape`` (ATen's ``computeStride``), or None."""
    if math.prod(old_shape) <= 1 or not old_shape:
        return contiguous_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        boundary = tensor_d == 0 or (
            old_shape[tensor_d - 1] != 1 and old_strides[tensor_d - 1] != tensor_numel * chunk_base
        )
        if not boundary:
            continue
        while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
            new_strides[view_d] = view_numel * chunk_base
            view_numel *= new_shape[view_d]
            view_d -= 1
        if view_numel != tensor_numel:
            return None
        if tensor_d > 0:
            chunk_base = old_strides[tensor_d - 1]
            tensor_numel = 1
            view_numel = 1
    if view_d != -1:
        return None
    return tuple(new_strides)


def _wrap(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"dim {dim} out of range for {ndim} dims")
    return dim % rank


#: An unsigned-int torch dtype per element size: prepared weights are rearranged as bits.
_BITS = {1: torch.uint8, 2: torch.uint16, 4: torch.uint32, 8: torch.uint64}


@dataclass(frozen=True)
class PreparedLayout:
    """How a [K, N] matrix is stored: in blocks of ``block`` columns (the last one narrower),
    each block [rows, tiles, width] contiguous, one after the other. Row k of a block is at
    ``(k % rows) * tiles * width + (k // rows) * width`` within it (rows past K in the last K
    tile are zeros), so partition p of a block, every K tile of it, is one contiguous run of
    ``tiles * width`` elements: the block reaches SBUF [rows, tiles * width] by one DMA of
    whole-run descriptors. ``rows``: the contraction rows of one matmul on the config (128,
    the partitions TensorE contracts over, HARDWARE.md §0); ``block``: the columns the matmul
    streams at a time (``tiling.weights.block_columns``); ``transposed``: the matrix is the
    source's transpose (nn.Linear's [N, K] weight); ``dtype``: the hardware dtype."""

    k: int
    n: int
    rows: int
    block: int
    transposed: bool
    dtype: str

    @property
    def tiles(self) -> int:
        return math.ceil(self.k / self.rows)

    @property
    def elements(self) -> int:
        return self.rows * self.tiles * self.n

    def blocks(self) -> list[tuple[int, int]]:
        """(first column, width) of each block."""
        return [(n0, min(self.block, self.n - n0)) for n0 in range(0, self.n, self.block)]

    def block_offset(self, n0: int) -> int:
        """Elements before the block that starts at column ``n0``."""
        return self.rows * self.tiles * n0

    def arrange(self, source: torch.Tensor) -> torch.Tensor:
        """``source`` (W, or the [K, N] matrix itself) in this layout (1-D), in its dtype."""
        # It runs on every call, for every prepared weight. A transposed source is a gather
        # torch does slowly: a cache-tiled kernel moves its bits. Otherwise one strided copy per
        # block straight from the source.
        if self.transposed:
            from hwsim.kernels.weights import arrange_blocks

            bits = _BITS[source.element_size()]
            # an N-D source (a patch convolution's weight) is its [N, K] matrix, row-major
            matrix = source.detach().contiguous().reshape(self.n, self.k)
            matrix_bits = matrix.view(bits).numpy()
            arranged_bits = arrange_blocks(
                matrix_bits, self.k, self.n, self.rows, self.block, transposed=True
            )
            return torch.from_numpy(arranged_bits).view(source.dtype)
        matrix = source.detach().reshape(self.k, self.n)
        rows, tiles = self.rows, self.tiles
        arranged = matrix.new_empty(self.elements)
        full, rest = divmod(self.k, rows)  # whole K tiles, rows of the last partial one
        for n0, width in self.blocks():
            start = self.block_offset(n0)
            block = arranged[start : start + rows * tiles * width].view(rows, tiles, width)
            columns = matrix[:, n0 : n0 + width]
            if full:
                whole = columns[: full * rows].reshape(full, rows, width).permute(1, 0, 2)
                block[:, :full].copy_(whole)
            if rest:
                block[:rest, full].copy_(columns[full * rows :])
                block[rest:, full].zero_()
        return arranged


@dataclass(frozen=True)
class PreparedMatrix(HbmValue):
    """A [K, N] matrix stored in a compile-time layout (``PreparedLayout``, from
    ``passes.prepare_constants``). Only a matmul's streamed-weight loads read it
    (``tiling.weights``); it has no torch-style views."""

    layout: PreparedLayout | None = None

    @classmethod
    def over(cls, tile: Tile, layout: PreparedLayout) -> PreparedMatrix:
        return cls(tile, (layout.k, layout.n), (layout.tiles * layout.n, 1), 0, layout)

    def block_ap(self, n0: int) -> AccessPattern:
        """The block starting at column ``n0`` as [rows, tiles * width]: one contiguous run per
        partition."""
        layout = self.layout
        assert layout is not None
        width = min(layout.block, layout.n - n0)
        run = layout.tiles * width
        return AccessPattern(
            MemorySpace.HBM,
            self.dtype,
            0,
            layout.rows,
            layout.block_offset(n0) * self.dtype.itemsize,
            (run,),
            (1,),
            run,
            self.name,
        )

    def _no_view(self, *_: object, **__: object) -> HbmValue:
        raise ValueError(
            f"{self.tile.name} is a weight prepared for its matmul (a tiled layout): it has no "
            "strided views"
        )

    permute = transpose = expand = unsqueeze = squeeze = slice = select = view = _no_view
