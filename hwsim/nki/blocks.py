"""Tensors with block dimensions before ``nl.par_dim``: ``nl.ndarray((n, nl.par_dim(128), 512))``.

NKI allocates each block (each index of the leading dimensions) as its own [128, 512] tile; the
leading dimensions are how kernels ask for several buffers. Here each block is a separate tile
(made at the first access, so blocks a kernel never touches cost nothing), indexed with ints:
``t[i]``, ``t[i, j, :, :]``, ``t[i, i_p, i_f]``.
"""

from __future__ import annotations

import itertools
from typing import Any

from hwsim.dtypes import DType
from hwsim.isa.ap import MemorySpace
from hwsim.lang.tiles import Buffer
from hwsim.nki.dtypes import nki_dtype
from hwsim.nki.state import state, user_site
from hwsim.nki.tensor import NkiTensor, allocate, fail, psum_group


class BlockTensor:
    """Blocks ``blocks`` (a shape) of tiles of ``tile_shape`` in ``buffer``."""

    def __init__(
        self, blocks: tuple[int, ...], tile_shape: tuple[int, ...], dtype: DType, buffer: Buffer
    ) -> None:
        self.blocks, self.tile_shape, self.hw_dtype, self.buffer = blocks, tile_shape, dtype, buffer
        self.dtype = nki_dtype(dtype)
        self.shape = (*blocks, *tile_shape)
        self.site = user_site()
        self._tiles: dict[tuple[int, ...], NkiTensor] = {}
        self._fill: float | None = None
        from hwsim.nki.direct import DirectBuffer, reserve

        if isinstance(buffer, DirectBuffer):
            reserve(tile_shape, dtype, buffer, blocks)

    def fill_on_first_use(self, value: float | None) -> None:
        self._fill = value

    def block(self, index: tuple[int, ...]) -> NkiTensor:
        for i, (value, size) in enumerate(zip(index, self.blocks, strict=True)):
            if not 0 <= value < size:
                raise fail("block index", f"index {value} of block dimension {i} (size {size})")
        found = self._tiles.get(index)
        if found is None:
            from hwsim.nki.direct import DirectBuffer, direct_tile

            if isinstance(self.buffer, DirectBuffer):
                found = direct_tile(self.tile_shape, self.hw_dtype, self.buffer, index)
            else:
                found = allocate(self.tile_shape, self.hw_dtype, self.buffer, site=self.site)
            if self._fill is not None and self.buffer.memory is MemorySpace.PSUM:
                psum_group(found).zero_pending = True  # as nl.zeros in PSUM
            elif self._fill is not None:
                from hwsim.lang import isa as lisa
                from hwsim.nki.masking import undropped

                st = state()
                waiting, st.pending_copy = st.pending_copy, None  # the fill comes first
                try:
                    with undropped():  # the declaration's fill, even if first used masked off
                        lisa.memset(found.lang_view, self._fill)
                finally:
                    st.pending_copy = waiting
            self._tiles[index] = found
        return found

    def _split(self, key: Any) -> tuple[NkiTensor, Any]:
        items = key if isinstance(key, tuple) else (key,)
        count = len(self.blocks)
        head = items[:count]
        if len(head) < count or not all(isinstance(i, int) for i in head):
            raise fail(
                "block tensor index",
                f"index the {count} block dimension(s) before par_dim with ints, got {key!r}",
            )
        return self.block(tuple(int(i) for i in head)), items[count:]

    def __getitem__(self, key: Any) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        if 0 < len(items) < len(self.blocks) and all(isinstance(i, int) for i in items):
            return BlockView(self, tuple(int(i) for i in items))  # t[i] of (n, m, par_dim...)
        tile, rest = self._split(key)
        return tile[rest] if rest else tile

    def __setitem__(self, key: Any, value: Any) -> None:
        tile, rest = self._split(key)
        tile[rest if rest else ...] = value

    def __iter__(self) -> Any:
        for index in itertools.product(*(range(n) for n in self.blocks)):
            yield self.block(index)

    def __getattr__(self, name: str) -> Any:
        raise fail(
            f"block tensor .{name}",
            "a tensor with block dimensions before par_dim is used one block at a time: index "
            "its block dimensions with ints first",
        )


class BlockView(BlockTensor):
    """The blocks of a BlockTensor under a prefix of block indices (``t[i]`` of a tensor with
    more block dimensions): the same tiles, indexed by the remaining block dimensions."""

    def __init__(self, parent: BlockTensor, prefix: tuple[int, ...]) -> None:
        for i, (value, size) in enumerate(zip(prefix, parent.blocks, strict=False)):
            if not 0 <= value < size:
                raise fail("block index", f"index {value} of block dimension {i} (size {size})")
        self.parent, self.prefix = parent, prefix
        self.blocks = parent.blocks[len(prefix) :]
        self.tile_shape, self.hw_dtype, self.buffer = (
            parent.tile_shape,
            parent.hw_dtype,
            parent.buffer,
        )
        self.dtype = parent.dtype
        self.shape = (*self.blocks, *self.tile_shape)
        self.site = parent.site

    def block(self, index: tuple[int, ...]) -> NkiTensor:
        return self.parent.block((*self.prefix, *index))
