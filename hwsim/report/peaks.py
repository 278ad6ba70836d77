"""Peak rates and capacities a hardware config implies (pure arithmetic on the config, no printing).

Units are in the names: FLOP/s, elements/s, bytes, bytes/ns (= GB/s). "Per core" means one physical
NeuronCore; "per chip" multiplies by ``chip.cores_per_chip``. These are the denominators of
utilisation stats (MFU needs ``peak_flops_per_s``), so they must agree with the cost models: a
dtype missing from a per-dtype table costs like the documented default (multiplier 1, packing 1,
the fp32 element rate), as in ``hwsim.cost.tensor_models.closed_form``.
"""

from __future__ import annotations

from hwsim.config.schema import ComputeEngineConfig, HardwareConfig
from hwsim.engines import engines_of_kind, find_engine

HZ_PER_MHZ = 1_000_000


def compute_engines() -> tuple[str, ...]:
    """The element-wise engines (``hwsim.engines``: kind 'compute'), in hardware order."""
    return engines_of_kind("compute")


# ---- TensorE ----------------------------------------------------------------------------------


def matmul_dtypes(config: HardwareConfig) -> list[str]:
    """The dtypes TensorE multiplies in this config, in the order the preset lists them."""
    return list(config.tensor_engine.cycles_multiplier_by_dtype)


def flops_per_tensor_cycle(config: HardwareConfig, dtype: str) -> float:
    """FLOP per TensorE cycle at full array use: 2 (mul + add) x rows x cols x packing / multiplier.

    ``packing`` is the contraction rows per PE row (v3+ FP8 "double row" = 2); ``multiplier`` the
    cycles one pass takes relative to BF16 (FP32 = 4). HARDWARE.md §2.1.
    """
    te = config.tensor_engine
    multiplier = te.cycles_multiplier_by_dtype.get(dtype, 1)  # type: ignore[call-overload]
    packing = te.contraction_packing_by_dtype.get(dtype, 1)  # type: ignore[call-overload]
    return 2 * te.rows * te.cols * packing / multiplier


def peak_flops_per_s(config: HardwareConfig, dtype: str) -> float:
    """Dense TensorE peak of one core for ``dtype`` inputs, FLOP/s (trn2 bf16: 78.6e12)."""
    return flops_per_tensor_cycle(config, dtype) * config.tensor_engine.clock_mhz * HZ_PER_MHZ


def chip_peak_flops_per_s(config: HardwareConfig, dtype: str) -> float:
    """Dense TensorE peak of all cores of one chip for ``dtype`` inputs, FLOP/s."""
    return peak_flops_per_s(config, dtype) * config.chip.cores_per_chip


# ---- VectorE, ScalarE, GpSimdE ----------------------------------------------------------------


def compute_engine(config: HardwareConfig, engine: str) -> ComputeEngineConfig:
    """The config section of compute engine ``engine`` ('vector', 'scalar', 'gpsimd', ...)."""
    spec = find_engine(engine)
    if spec is None or spec.cost_section is None:
        valid = ", ".join(compute_engines())
        raise ValueError(f"unknown compute engine '{engine}'; valid: {valid}") from None
    engine_config: ComputeEngineConfig = getattr(config, spec.cost_section)
    return engine_config


def elements_per_cycle(engine: ComputeEngineConfig, dtype: str) -> int:
    """Elements one cycle processes across all lanes for ``dtype`` (the fp32 rate if unlisted)."""
    rates = engine.elements_per_cycle_per_lane_by_dtype
    per_lane = rates.get(dtype, rates["fp32"])  # type: ignore[call-overload]
    return engine.lanes * per_lane


def elements_per_s(engine: ComputeEngineConfig, dtype: str) -> float:
    """Streaming element throughput of one engine for ``dtype`` (one input, no MIN_II), elements/s.

    VectorE performance mode (v3+) can raise this for 16-bit SBUF operands; it is not included.
    """
    return elements_per_cycle(engine, dtype) * engine.clock_mhz * HZ_PER_MHZ


# ---- SBUF and PSUM ----------------------------------------------------------------------------


def sbuf_bytes_per_core(config: HardwareConfig) -> int:
    """SBUF capacity of one core, bytes (partitions x bytes per partition)."""
    return config.sbuf.partitions * config.sbuf.bytes_per_partition


def psum_bytes_per_core(config: HardwareConfig) -> int:
    """PSUM capacity of one core, bytes (partitions x bytes per partition)."""
    return config.psum.partitions * config.psum.bytes_per_partition


def psum_bank_fp32_elements(config: HardwareConfig) -> int:
    """fp32 elements one PSUM bank holds per partition (trn2: 2 KiB / 4 B = 512)."""
    return config.psum.bank_bytes // 4


# ---- DMA and HBM ------------------------------------------------------------------------------


def dma_bandwidth_bytes_per_ns_per_core(config: HardwareConfig) -> float:
    """Aggregate bandwidth of all DMA engines of one core, bytes/ns (trn2: 16 x 23 = 368)."""
    return config.dma.engines * config.dma.bandwidth_bytes_per_ns


def hbm_capacity_bytes_per_chip(config: HardwareConfig) -> int:
    """HBM capacity of one chip, bytes (stacks x capacity per stack)."""
    return config.hbm.stacks * config.hbm.capacity_bytes_per_stack


def hbm_bandwidth_bytes_per_ns_per_chip(config: HardwareConfig) -> float:
    """HBM bandwidth of one chip, bytes/ns (stacks x bandwidth per stack)."""
    return config.hbm.stacks * config.hbm.bandwidth_bytes_per_ns_per_stack


def hbm_capacity_bytes_per_core(config: HardwareConfig) -> float:
    """One core's share of its stack's capacity, bytes."""
    return config.hbm.capacity_bytes_per_stack / config.hbm.cores_per_stack


def hbm_bandwidth_bytes_per_ns_per_core(config: HardwareConfig) -> float:
    """One core's share of its stack's bandwidth when all cores on the stack stream, bytes/ns."""
    return config.hbm.bandwidth_bytes_per_ns_per_stack / config.hbm.cores_per_stack
