"""What one tile of a tile loop costs, for choosing the tile plan (``space.plan``'s ``cost``).

A plan puts one dim of the iteration space on partitions and the innermost others on the free
axis. Which dim goes where decides the DMA descriptors: a dim contiguous in HBM kept on the free
axis makes long runs; a strided one there makes one descriptor per element; few partitions
leave DMA engines idle (a transfer splits over its partitions, HARDWARE.md §2.5 [S12]) and
engine lanes too. ``tile_cost`` prices one tile with the cost model's planning questions
(``hwsim.cost.planning``), once per candidate plan (``space`` multiplies by the number of
tiles), never per emitted tile:

- each operand's transfer (a load, or the store of the result): the service time of its
  busiest DMA engine (``transfer_service_ns``; a broadcast operand priced as the compact
  transfer ``tiling.broadcast`` makes);
- the compute: one VectorE pass over the tile for each compute instruction the caller expects
  per tile (``streaming_pass_ns``).

The DMA start latency is left out: with rotating buffers transfers overlap it, so it does not
separate plans of equal descriptors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hwsim import lang
from hwsim.bridge.tiling.broadcast import compact
from hwsim.bridge.tiling.space import TileRef
from hwsim.bridge.values import HbmValue
from hwsim.config import HardwareConfig
from hwsim.cost.planning import streaming_pass_ns, transfer_service_ns
from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous


def transfer_ns(config: HardwareConfig, src: AccessPattern, dst: AccessPattern) -> float:
    """Service time of the busiest DMA engine for one transfer (ns)."""
    return transfer_service_ns(config, src, dst)


def tile_cost(
    operands: Sequence[HbmValue],
    dtypes: Sequence[DType],
    *,
    computes: int = 1,
    config: HardwareConfig | None = None,
) -> Callable[[TileRef], float]:
    """Cost (ns) of one tile: operand 0 is stored from SBUF, the others loaded into SBUF, each
    in its ``dtypes`` entry; ``computes`` VectorE instructions over the tile."""
    config = config or lang.config()

    def cost(tile: TileRef) -> float:
        total = 0.0
        for i, (value, dtype) in enumerate(zip(operands, dtypes, strict=True)):
            hbm = tile.ap(i, value)
            if i:
                found = compact(hbm)
                if found is not None:
                    hbm = found[0]
            sbuf = contiguous(MemorySpace.SBUF, dtype, hbm.partitions, hbm.free_elements)
            if i == 0:
                total += transfer_service_ns(config, sbuf, hbm)
            else:
                total += transfer_service_ns(config, hbm, sbuf)
        compute = streaming_pass_ns(config, "vector", tile.partitions, tile.free_elements, computes)
        return total + compute

    return cost
