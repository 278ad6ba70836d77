"""``nki.language``-style conveniences built on the ISA calls: load, store, tile sizes, dtypes."""

from __future__ import annotations

from typing import Any

from hwsim.lang import isa
from hwsim.lang.kernel import current, ndarray
from hwsim.lang.tiles import Tile, View, sbuf

float32, bfloat16, float16 = "fp32", "bf16", "fp16"
float8_e4m3, float8_e5m2 = "fp8_e4m3", "fp8_e5m2"
#: The v4 MX packed types: four minifloats per element (quantize_mx, nc_matmul_mx).
float8_e5m2_x4, float8_e4m3fn_x4 = "fp8_e5m2_x4", "fp8_e4m3fn_x4"
float4_e2m1fn_x4 = "fp4_e2m1fn_x4"
int8, int16, int32, uint8, uint16, uint32 = "int8", "int16", "int32", "uint8", "uint16", "uint32"


class tile_size:
    """Tile limits of the hardware being built for (read from the kernel's config)."""

    @staticmethod
    def pmax() -> int:
        return current().config.sbuf.partitions

    @staticmethod
    def gemm_stationary_fmax() -> int:
        return current().config.tensor_engine.stationary_free_max

    @staticmethod
    def gemm_moving_fmax() -> int:
        return current().config.tensor_engine.moving_free_max

    @staticmethod
    def psum_fmax() -> int:
        psum = current().config.psum
        return psum.bytes_per_partition // psum.banks // 4

    bn_stats_fmax = 512  # [S16] bn_stats free-size limit


def load(src: Tile | View, *, dtype: str | None = None, engine: str | None = None) -> Tile:
    """A new SBUF tile holding ``src`` (an HBM view), like ``nl.load`` (the trigger engine and
    DGE mode are the compiler's choice unless ``engine`` is named: ``isa.dma_copy``)."""
    shape = src.shape
    tile = ndarray(shape, dtype or src.dtype, sbuf)
    isa.dma_copy(tile, src, engine=engine)
    return tile


def store(dst: Tile | View, value: Tile | View, *, engine: str | None = None) -> None:
    """Write an SBUF tile to HBM, like ``nl.store``."""
    isa.dma_copy(dst, value, engine=engine)


def config() -> Any:
    """The hardware config the kernel is being built for."""
    return current().config
