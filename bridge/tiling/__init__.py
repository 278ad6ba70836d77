"""Tiling shared by every lowering: iteration spaces over strided HBM operands cut into
[partitions, free] tiles (``space``), the tile loops that load/compute/store them (``drivers``),
row plans for ops over whole rows, chunked when a row does not fit one tile (``rows``), and
matmul tiling with K accumulated in PSUM (``matmul``)."""

from hwsim.bridge.tiling.drivers import copy_tiles, map_tiles, reduce_tiles, row_tiles
from hwsim.bridge.tiling.matmul import HbmMatrix, MatmulTiler, emit_matmul
from hwsim.bridge.tiling.space import Dim, TileRef, TilingError, coalesce, hbm_ap, plan

__all__ = [
    "Dim",
    "HbmMatrix",
    "MatmulTiler",
    "TileRef",
    "TilingError",
    "coalesce",
    "copy_tiles",
    "emit_matmul",
    "hbm_ap",
    "map_tiles",
    "plan",
    "reduce_tiles",
    "row_tiles",
]
