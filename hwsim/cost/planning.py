"""What a kernel's build asks the cost model while it chooses a plan (tile shapes, a transpose
path): service times and pass times of instructions it has not emitted yet.

These read only the config fields their answer depends on, field by field, never the whole
config (as ``CostModel.for_config`` does to find its model by content): a sweep's program cache
(``hwsim.sweep.lowering``) shares a lowered program between configs that agree on the fields its
build read, so a build that consulted the whole config would be lowered again for every config.
"""

from __future__ import annotations

from hwsim.config import HardwareConfig
from hwsim.config.timebase import TimeBase
from hwsim.cost.constants import rules_for
from hwsim.cost.dma import DmaCosts
from hwsim.engines import engine_spec
from hwsim.isa.ap import AccessPattern
from hwsim.isa.dma_ops import TransferSides

#: DMA costs of the configs builds asked about, by the config object (builds hold their config).
_DMA: dict[int, tuple[HardwareConfig, DmaCosts]] = {}
_KEPT = 8


def _dma(config: HardwareConfig) -> DmaCosts:
    found = _DMA.get(id(config))
    if found is None or found[0] is not config:
        if len(_DMA) >= _KEPT:
            _DMA.clear()
        found = _DMA[id(config)] = (config, DmaCosts(config, TimeBase.from_config(config)))
    return found[1]


def transfer_service_ns(config: HardwareConfig, src: AccessPattern, dst: AccessPattern) -> float:
    """Service time (ns) of the busiest DMA engine for one transfer src -> dst."""
    dma = _dma(config)
    return float(dma.busiest_engine_ns(dma.plan(0, TransferSides(src, dst))))


def streaming_pass_ns(
    config: HardwareConfig, engine: str, partitions: int, free_elements: int, count: int = 1
) -> float:
    """``count`` passes of a compute engine over a [partitions, free_elements] tile, ns: its
    lanes take the partitions ``ceil(P / lanes)`` at a time, one element per cycle, plus the
    engine's fixed start cost (``hwsim.cost.streaming``'s first rule, no MIN_II floor)."""
    eng = getattr(config, engine_spec(engine).cost_section or "")
    passes = -(-partitions // eng.lanes)
    cycles = count * (passes * free_elements + eng.fixed_overhead_cycles)
    return cycles * 1000 / eng.clock_mhz


def dma_transpose_is_faster(
    config: HardwareConfig, rows: int, cols: int, itemsize: int, tile_m: int, tile_k: int
) -> bool:
    """Whether one transposing DMA of a [rows, cols] HBM matrix beats a plain DMA plus TensorE
    transposes of [tile_m, tile_k] blocks, at peak rates.

    A transposing DMA streams at ``transpose_bandwidth_fraction_by_source['hbm']`` of the DMA
    engines' bandwidth [S2]; the TensorE path loads at full bandwidth, transposes each block on
    the PE array (max(P, min(64, F)) cycles [S16]) and copies PSUM to SBUF on VectorE
    (max(MIN_II, N) [S16], ``RuleConstants.documented_min_ii_cycles``).
    """
    dma = config.dma
    bandwidth = dma.engines * dma.bandwidth_bytes_per_ns  # B/ns
    nbytes = rows * cols * itemsize
    dma_ns = nbytes / (bandwidth * dma.transpose_bandwidth_fraction_by_source["hbm"])
    blocks = -(-rows // tile_m) * -(-cols // tile_k)
    pe_ns = blocks * max(tile_m, tile_k) * 1000 / config.tensor_engine.clock_mhz
    floor = rules_for(config.chip.generation).documented_min_ii_cycles
    copy_ns = blocks * max(floor, tile_m) * 1000 / config.vector_engine.clock_mhz
    return dma_ns <= nbytes / bandwidth + max(pe_ns, copy_ns)
