"""A norm's rows handed to the following matmuls on chip: xᵀ built tile by tile in SBUF.

TensorE multiplies ``stationary[K, M]ᵀ @ moving[K, N]``: a matmul reading activations x [M, K]
(tokens by hidden) needs xᵀ, K on partitions. Lowered apart, a layer norm stores its rows and
each matmul that reads them loads them back and transposes them on the way in (a staging DMA,
``nc_transpose`` per 128 columns, a PSUM copy casting to the matmul's dtype), once per matmul:
three times for a layer's Q, K and V projections. A kernel author on Trainium transposes the
normalised rows while they are still in SBUF, into one xᵀ every following matmul reads.

``TransposedRows`` does that: as each normalised row tile leaves the norm's last instruction,
the same transposes and cast as the transposing load (``TransposedLoader.transpose``) write it
into an SBUF tile [128, K tiles, M] in the matmuls' dtype, so the values are those the loads
would give, bit for bit. The matmuls' operand loads (``MatmulTiler._load``) take their xᵀ from
it (``LoweringContext.transposed``) and move nothing. When nothing else reads the rows (a pre-norm
transformer: GPT-2, Llama), they are not stored at all; when something does (BERT's residual
add), they are stored as before and residency handles them as any value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwsim import lang
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.tiling.space import TileRef
from hwsim.bridge.values import HbmValue
from hwsim.dtypes import DType
from hwsim.lang.tiles import View
from hwsim.library.common import TransposedLoader, cdiv

#: Most of SBUF per partition (of what the weight ring leaves) one norm's xᵀ may take; past it
#: the norm and the matmuls lower apart (the rows through HBM). It lives from the norm to its
#: last matmul, beside their own tiles and the resident values. A tiling choice.
PROLOGUE_SBUF_SHARE = 1 / 4


def prologue_bytes(rows: int, k: int, tile_k: int, dtype: DType) -> int:
    """Bytes per partition of xᵀ for ``rows`` rows of ``k`` columns in ``dtype``."""
    return cdiv(k, tile_k) * rows * dtype.itemsize


@dataclass
class TransposedRows:
    """xᵀ of a norm's output [``rows``, ``columns``] (viewed 2-D) in SBUF: ``tile`` [tile_k, K
    tiles, rows] in ``dtype``; ``store``: whether the rows also go to HBM (module docstring);
    ``value``: the norm's output, once lowered."""

    rows: int
    columns: int
    dtype: DType
    store: bool
    loader: TransposedLoader
    value: HbmValue | None = None
    tile: lang.Tile = field(init=False)
    _last: tuple[View, int, int] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        lim = self.loader.lim
        shape = (lim.tile_k, cdiv(self.columns, lim.tile_k), self.rows)
        self.tile = lang.ndarray(shape, self.dtype, lang.sbuf, name="prologue_xT")

    def take(self, tile: TileRef, out: HbmValue, result: View) -> None:
        """Rows ``tile`` of ``out`` (``result`` in SBUF, whole rows) transposed into xᵀ."""
        k = self.columns
        whole = tile.free_elements == k and tile.partition_strides[0] in (k, 0)
        if not whole or tile.offsets[0] % k:
            raise BridgeError(
                f"norm prologue of {out.tile.name}: a result tile is not whole rows (offset "
                f"{tile.offsets[0]}, {tile.free_elements} of {k} columns); the pass should have "
                "left this norm apart"
            )
        r0 = tile.offsets[0] // k
        if r0 + tile.partitions < self.rows:
            self.loader.transpose(self.tile, result, r0, tile.partitions)
        else:  # the norm's last tile: nothing reuses its buffer, so it waits for the matmul
            self._last = (result, r0, tile.partitions)

    def finish(self) -> None:
        """The last row tile's transposes (``take``): emitted as the first matmul reads xᵀ,
        after what that matmul does first (its bias row, its first weight block), as its
        transposing load would be; then the loader's PSUM buffers are given back."""
        if self._last is not None:
            self.loader.transpose(self.tile, *self._last)
            self._last = None
        self.loader.release()

    def operand(self, view: HbmValue, dtype: DType) -> View | lang.Tile | None:
        """xᵀ as a matmul's [K, X] operand ``view`` (a transpose of the whole value, rows in
        order) in ``dtype``, or None when it is not that."""
        if self.value is None or dtype != self.dtype or view.tile.name != self.value.tile.name:
            return None
        k, m = self.columns, self.rows
        if view.shape != (k, m) or view.strides != (1, k) or view.offset != 0:
            return None
        self.finish()
        return self.tile
