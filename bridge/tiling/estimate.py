"""What one tile of a tile loop costs, for choosing the tile plan (``space.plan``'s ``cost``).

A plan puts one dim of the iteration space on partitions and the innermost others on the free
axis. Which dim goes where decides the DMA descriptors: a dim contiguous in HBM kept on the free
axis makes long runs; a strided one there makes one descriptor per element; few partitions
leave DMA engines idle (a transfer splits over its partitions, HARDWARE.md §2.5 [S12]) and
engine lanes too. ``tile_cost`` prices one tile with the simulator's own models, once per
candidate plan (``space`` multiplies by the number of tiles), never per emitted tile:

- each operand's transfer (a load, or the store of the result): the service time of its
  busiest DMA engine, ``machine.dma_plan.plan_transfer`` on the config being built for (a
  broadcast operand priced as the compact transfer ``tiling.broadcast`` makes);
- the compute: one VectorE pass over the tile, ``ceil(P / lanes) x N`` cycles plus the
  engine's fixed overhead (``hwsim.isa.streaming``'s first rule), for each compute instruction
  the caller expects per tile.

The DMA start latency is left out: with rotating buffers transfers overlap it, so it does not
separate plans of equal descriptors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from hwsim import lang
from hwsim.bridge.tiling.broadcast import compact
from hwsim.bridge.tiling.space import TileRef
from hwsim.bridge.values import HbmValue
from hwsim.config import HardwareConfig
from hwsim.config.timebase import TimeBase
from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.dma_ops import TransferSides
from hwsim.machine.dma_plan import WORK_UNITS_PER_TICK, DmaCostModel, plan_transfer

#: Cost models by config (the kernel being built names its config; models are pure).
_MODELS: dict[int, tuple[HardwareConfig, DmaCostModel, Fraction]] = {}


def _model(config: HardwareConfig) -> tuple[DmaCostModel, Fraction]:
    found = _MODELS.get(id(config))
    if found is None or found[0] is not config:
        base_mhz = TimeBase.from_config(config).base_mhz
        model = DmaCostModel(config.dma, base_mhz, config.hbm.bandwidth_bytes_per_ns_per_stack)
        found = _MODELS[id(config)] = (config, model, Fraction(1000, base_mhz))
    return found[1], found[2]


def transfer_ns(config: HardwareConfig, src: AccessPattern, dst: AccessPattern) -> float:
    """Service time of the busiest DMA engine for one transfer (ns)."""
    model, ns_per_tick = _model(config)
    plan = plan_transfer(model, config.dma.engines, 0, TransferSides(src, dst))
    work = max(piece.work for piece in plan.pieces)
    return float(Fraction(work, WORK_UNITS_PER_TICK) * ns_per_tick)


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
    vector = config.vector_engine

    def cost(tile: TileRef) -> float:
        free = tile.free_elements
        total = 0.0
        for i, (value, dtype) in enumerate(zip(operands, dtypes, strict=True)):
            hbm = tile.ap(i, value)
            if i:
                found = compact(hbm)
                if found is not None:
                    hbm = found[0]
            sbuf = contiguous(MemorySpace.SBUF, dtype, hbm.partitions, hbm.free_elements)
            total += transfer_ns(config, sbuf, hbm) if i == 0 else transfer_ns(config, hbm, sbuf)
        passes = -(-tile.partitions // vector.lanes)
        cycles = computes * (passes * free + vector.fixed_overhead_cycles)
        return total + cycles * 1000 / vector.clock_mhz

    return cost
