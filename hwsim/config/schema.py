"""The typed, frozen hardware-config schema: every field with its unit, range and meaning.

Presets in ``configs/*.yaml`` fill this schema; each number there cites ``HARDWARE.md``. The
schema itself holds no hardware numbers except conservative bounds: defaults are deliberately
absent so that a preset is always complete.

Every number is bounded above and below, floats are finite. The bounds admit any plausible
architecture (clocks to 100 GHz, latencies to a million cycles, 1 GiB of SBUF per core, 1 TiB per
HBM stack) and keep on-chip memories below ``MAX_ON_CHIP_BYTES`` and the durations of plausible
programs far inside the int64 ticks of a trace: bandwidths have floors (0.001 B/ns), and the
engine clocks' LCM, the time base, is bounded (``timebase.MAX_BASE_MHZ``).
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from hwsim.config.timebase import clock_problem
from hwsim.config.topology_schema import CollectivesConfig, TopologyConfig

#: dtype names used across the project (the keys of per-dtype tables).
DTypeName = Literal[
    "fp32",
    "bf16",
    "fp16",
    "fp8_e4m3",
    "fp8_e5m2",
    "int8",
    "int16",
    "int32",
    "uint8",
    "uint16",
    "uint32",
]
DTYPE_NAMES: tuple[str, ...] = get_args(DTypeName)
#: The dtypes TensorE multiplies (HARDWARE.md §3, nc_matmul).
MatmulDType = Literal["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]

#: Largest engine latency or overhead: 1 ms at 1 GHz, thousands of times the real ones (~260).
MAX_CYCLES = 1_000_000
#: Largest SBUF or PSUM of one core, partitions x bytes per partition (trn3's SBUF: 32 MiB).
MAX_ON_CHIP_BYTES = 1 << 30

Cycles = Annotated[int, Field(ge=0, le=MAX_CYCLES)]
ClockMHz = Annotated[int, Field(ge=1, le=100_000, description="clock frequency in MHz")]


class _Section(BaseModel):
    """A frozen config section that rejects unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class ChipConfig(_Section):
    name: str = Field(max_length=100, description="preset name, e.g. 'trn2'")
    generation: Literal["v2", "v3", "v4"] = Field(description="NeuronCore generation")
    cores_per_chip: Annotated[int, Field(ge=1, le=64)] = Field(
        description="physical NeuronCores per chip"
    )
    cores_per_logical_core: Annotated[int, Field(ge=1, le=8)] = Field(
        description="physical cores fused into one logical NeuronCore (LNC)"
    )


class TensorEngineConfig(_Section):
    clock_mhz: ClockMHz
    rows: Annotated[int, Field(ge=1, le=1024)] = Field(
        description="PE rows = contraction (partition) dimension of one matmul"
    )
    cols: Annotated[int, Field(ge=1, le=1024)] = Field(
        description="PE columns = max stationary free size (output partitions)"
    )
    timing_model: str = Field(
        max_length=100,
        description="TensorE timing model by registered name (closed_form, systolic_cycle, ...)",
    )
    cycles_multiplier_by_dtype: dict[MatmulDType, Annotated[int, Field(ge=1, le=64)]] = Field(
        description="matmul cycle multiplier per input dtype (fp32 passes through the array 4x)"
    )
    contraction_packing_by_dtype: dict[MatmulDType, Annotated[int, Field(ge=1, le=8)]] = Field(
        description="contraction rows per PE row per dtype (v3 fp8 'double row' = 2, else 1)"
    )
    moving_free_max: Annotated[int, Field(ge=1, le=65536)] = Field(
        description="max moving free size (elements) of one matmul"
    )
    stationary_free_max: Annotated[int, Field(ge=1, le=1024)] = Field(
        description="max stationary free size (elements) of one matmul"
    )
    min_ii_cycles: Cycles = Field(
        description="initiation-interval floor of one MultiplyMoving (MM_INIT_LATENCY), cycles"
    )
    access_overhead_cycles: Cycles = Field(
        description="cycles each matmul/transpose spends starting its SBUF/PSUM tensor accesses"
    )
    fast_weight_load_factor: Annotated[int, Field(ge=1, le=64)] = Field(
        description="LoadStationary is this many times faster than an MM of the same free size"
    )
    result_latency_cycles: Cycles = Field(
        description="cycles after an MM's issue interval until its PSUM result is visible"
    )
    onezero_speedup_by_dtype: dict[MatmulDType, Annotated[int, Field(ge=1, le=64)]] = Field(
        description="speed-up of a matmul whose stationary or moving operand is flagged as "
        "holding only 0s and 1s (is_stationary_onezero / is_moving_onezero), per input dtype; "
        "dtypes not listed: 1"
    )


class ComputeEngineConfig(_Section):
    """VectorE, ScalarE and GpSimdE share one shape of config."""

    clock_mhz: ClockMHz
    lanes: Annotated[int, Field(ge=1, le=1024)] = Field(
        description="parallel lanes = partitions processed per cycle"
    )
    elements_per_cycle_per_lane_by_dtype: dict[DTypeName, Annotated[int, Field(ge=1, le=16)]] = (
        Field(
            description="free-dim elements per lane per cycle one operand streams at, per "
            "operand dtype (dtypes not listed: fp32's)"
        )
    )
    sbuf_input_streams_by_dtype: dict[DTypeName, Annotated[int, Field(ge=1, le=16)]] = Field(
        description="input tensors the engine reads from SBUF at once, each at the per-lane "
        "rate (the SBUF read data path's width over lanes), per input dtype (dtypes not listed: "
        "fp32's); a multi-input instruction's SBUF inputs share them"
    )
    min_ii_cycles: Cycles = Field(description="initiation-interval floor (MIN_II), cycles")
    min_ii_dynamic_cycles: Cycles = Field(
        description="initiation-interval floor of a copy whose source or destination offset is "
        "read at run time (tensor_copy_dynamic_src/dst: MIN_II_DYNAMIC), cycles"
    )
    prng_values_per_cycle_per_lane: Annotated[int, Field(ge=1, le=16)] = Field(
        description="32-bit pseudo-random values one lane's random number generator makes per "
        "cycle (rng, rand2, dropout)"
    )
    fixed_overhead_cycles: Cycles = Field(
        description="fixed start cost added to every instruction (e.g. GPSIMD_START), cycles"
    )
    pipeline_latency_cycles: Cycles = Field(
        description="cycles after the issue interval until results are visible to consumers"
    )
    strided_access_stride_bytes: Annotated[int, Field(ge=1, le=1 << 30)] = Field(
        description="an innermost stride above this many bytes halves the SBUF/PSUM bandwidth"
    )
    performance_mode: bool = Field(
        description="VectorE performance mode (NeuronCore-v3+): tensor_copy/tensor_scalar "
        "with 16-bit float operands 4x faster when all are in SBUF with a contiguous "
        "innermost dim, 2x when one of those two conditions fails"
    )
    can_access_psum: bool = Field(description="whether this engine may read/write PSUM")


class DmaConfig(_Section):
    engines: Annotated[int, Field(ge=1, le=256)] = Field(description="DMA engines per core")
    queues_per_engine: Annotated[int, Field(ge=1, le=64)] = Field(description="queues per engine")
    bandwidth_bytes_per_ns: Annotated[float, Field(ge=0.001, le=10_000)] = Field(
        description="sustained bandwidth of one DMA engine, bytes/ns (= GB/s)"
    )
    start_latency_ns: Annotated[float, Field(ge=0, le=1_000_000)] = Field(
        description="latency from trigger to the transfer starting on a DMA engine, ns"
    )
    descriptor_efficiency: dict[
        # keys come back as strings from JSON (sweep DBs, saved runs): not strict
        Annotated[int, Strict(False), Field(ge=1, le=1 << 24)],
        Annotated[float, Field(ge=0.001, le=1)],
    ] = Field(
        min_length=1,
        description="DMA efficiency (fraction of bandwidth) by descriptor bytes, the "
        "saturation curve; log2-linear between the sizes given, flat beyond the largest; below "
        "the smallest a descriptor costs what one of the smallest does (overhead floor)",
    )
    max_descriptor_bytes: Annotated[int, Field(ge=64, le=1 << 26)] = Field(
        description="longest contiguous run one descriptor moves; longer runs take several"
    )

    @field_validator("descriptor_efficiency", mode="before")
    @classmethod
    def _one_key_per_size(cls, table: object) -> object:
        """Keys read as ints: "4" and "04" (or 4 and "4") would be one size, the last value
        silently winning. Text keys must be plain decimal, and each size given once."""
        if not isinstance(table, dict):
            return table
        sizes: dict[int, object] = {}
        for key in table:
            if isinstance(key, str):
                if not (key.isascii() and key.isdigit() and key == str(int(key))):
                    raise ValueError(f"key '{key[:20]}': write a size as a plain integer")
                size = int(key)
            elif isinstance(key, int) and not isinstance(key, bool):
                size = key
            else:
                continue  # not a size at all: the int check names it
            if size in sizes:
                raise ValueError(
                    f"keys {sizes[size]!r} and {key!r} are the same size; give it once"
                )
            sizes[size] = key
        return table

    hbm_write_bandwidth_fraction: Annotated[float, Field(ge=0.01, le=1)] = Field(
        description="fraction of the read bandwidth a transfer into HBM reaches"
    )
    trigger_ns: Annotated[float, Field(ge=0, le=1_000_000)] = Field(
        description="time the triggering engine is busy issuing a transfer whose descriptors "
        "were built ahead of time (dge_mode none), ns"
    )
    hwdge_ns: Annotated[float, Field(ge=0, le=1_000_000)] | None = Field(
        description="time a hardware-DGE trigger takes to generate its descriptors, ns; null "
        "when the generation has no hardware DGE"
    )
    default_dge_mode: Literal["none", "swdge", "hwdge"] = Field(
        description="descriptor generation the compiler picks for a transfer that names none "
        "(dge_mode unknown) and no trigger engine"
    )
    transpose_bandwidth_fraction_by_source: dict[
        Literal["hbm", "sbuf"], Annotated[float, Field(ge=0.01, le=1)]
    ] = Field(description="fraction of DMA bandwidth dma_transpose reaches, by source memory")
    swdge_descriptor_cycles: Annotated[int, Field(ge=0, le=100_000)] = Field(
        description="GpSimdE cycles per DMA descriptor it writes at run time (software DGE), "
        "on top of its fixed start cost"
    )


class SbufConfig(_Section):
    partitions: Annotated[int, Field(ge=1, le=1024)]
    bytes_per_partition: Annotated[int, Field(ge=1024, le=1 << 30)]
    vector_gpsimd_share_access: bool = Field(
        description="VectorE and GpSimdE cannot access SBUF in parallel (NeuronCore-v2)"
    )


class PsumConfig(_Section):
    partitions: Annotated[int, Field(ge=1, le=1024)]
    bytes_per_partition: Annotated[int, Field(ge=64, le=1 << 24)]
    banks: Annotated[int, Field(ge=1, le=64)]
    vector_scalar_share_access: bool = Field(
        description="VectorE and ScalarE cannot access PSUM in parallel (NeuronCore-v2)"
    )

    @property
    def bank_bytes(self) -> int:
        """Bytes of one bank in one partition."""
        return self.bytes_per_partition // self.banks


class HbmConfig(_Section):
    stacks: Annotated[int, Field(ge=1, le=64)] = Field(description="HBM stacks per chip")
    capacity_bytes_per_stack: Annotated[int, Field(ge=1 << 20, le=1 << 40)] = Field(
        description="capacity of one stack, bytes"
    )
    bandwidth_bytes_per_ns_per_stack: Annotated[float, Field(ge=0.001, le=100_000)] = Field(
        description="bandwidth of one stack, bytes/ns (= GB/s)"
    )
    cores_per_stack: Annotated[int, Field(ge=1, le=64)] = Field(
        description="NeuronCores sharing one stack's bandwidth: cores k * cores_per_stack .. "
        "(k + 1) * cores_per_stack - 1 of a chip use stack k"
    )


class HostConfig(_Section):
    """The link between the host's memory and the device's HBM (the ``hwsim`` PyTorch device
    times its copies with it: ``latency_ns + bytes / bandwidth_bytes_per_ns``)."""

    bandwidth_bytes_per_ns: Annotated[float, Field(ge=0.001, le=100_000)] = Field(
        description="host <-> HBM bandwidth in each direction, bytes/ns (= GB/s)"
    )
    latency_ns: Annotated[float, Field(ge=0, le=1_000_000)] = Field(
        description="fixed cost of one host <-> HBM transfer before its first byte moves, ns"
    )


class HardwareConfig(_Section):
    """One complete hardware description (a preset plus any overrides)."""

    chip: ChipConfig
    tensor_engine: TensorEngineConfig
    vector_engine: ComputeEngineConfig
    scalar_engine: ComputeEngineConfig
    gpsimd_engine: ComputeEngineConfig
    dma: DmaConfig
    sbuf: SbufConfig
    psum: PsumConfig
    hbm: HbmConfig
    host: HostConfig
    topology: TopologyConfig
    collectives: CollectivesConfig

    @model_validator(mode="after")
    def _cross_field_invariants(self) -> HardwareConfig:
        te, psum, sbuf = self.tensor_engine, self.psum, self.sbuf
        errors = []
        if te.rows > sbuf.partitions:
            errors.append(
                f"tensor_engine.rows ({te.rows}) exceeds sbuf.partitions ({sbuf.partitions})"
            )
        if te.cols > psum.partitions:
            errors.append(
                f"tensor_engine.cols ({te.cols}) exceeds psum.partitions ({psum.partitions})"
            )
        if te.stationary_free_max > te.cols:
            errors.append(
                f"tensor_engine.stationary_free_max ({te.stationary_free_max}) exceeds "
                f"tensor_engine.cols ({te.cols})"
            )
        if psum.bytes_per_partition % psum.banks:
            errors.append(
                f"psum.bytes_per_partition ({psum.bytes_per_partition}) is not a multiple of "
                f"psum.banks ({psum.banks})"
            )
        fp32_bank_elements = psum.bytes_per_partition // psum.banks // 4
        if te.moving_free_max > fp32_bank_elements * psum.banks:
            errors.append(
                f"tensor_engine.moving_free_max ({te.moving_free_max}) exceeds the fp32 "
                f"capacity of all PSUM banks ({fp32_bank_elements * psum.banks})"
            )
        if "bf16" not in te.cycles_multiplier_by_dtype:
            errors.append("tensor_engine.cycles_multiplier_by_dtype must give 'bf16'")
        for name in ("vector_engine", "scalar_engine", "gpsimd_engine"):
            eng: ComputeEngineConfig = getattr(self, name)
            for table in ("elements_per_cycle_per_lane_by_dtype", "sbuf_input_streams_by_dtype"):
                if "fp32" not in getattr(eng, table):
                    errors.append(f"{name}.{table} must give 'fp32'")
        if self.hbm.cores_per_stack * self.hbm.stacks < self.chip.cores_per_chip:
            errors.append(
                f"hbm.stacks x hbm.cores_per_stack ({self.hbm.stacks} x "
                f"{self.hbm.cores_per_stack}) covers fewer cores than chip.cores_per_chip "
                f"({self.chip.cores_per_chip})"
            )
        errors.extend(_chip_problems(self))
        for name, section in (("sbuf", sbuf), ("psum", psum)):
            total = section.partitions * section.bytes_per_partition
            if total > MAX_ON_CHIP_BYTES:
                errors.append(
                    f"{name}.partitions x {name}.bytes_per_partition ({section.partitions} x "
                    f"{section.bytes_per_partition} = {total} B) exceeds "
                    f"{MAX_ON_CHIP_BYTES >> 30} GiB per core"
                )
        clocks = {
            f"{name}.clock_mhz": getattr(self, name).clock_mhz
            for name in ("tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine")
        }
        problem = clock_problem(clocks)
        if problem:
            errors.append(problem)
        if errors:
            raise ValueError("; ".join(errors))
        return self


def _chip_problems(config: HardwareConfig) -> list[str]:
    """Cross-field problems of the chip, its logical cores and its topology."""
    chip, topology = config.chip, config.topology
    errors = []
    if chip.cores_per_chip % chip.cores_per_logical_core:
        errors.append(
            f"chip.cores_per_logical_core ({chip.cores_per_logical_core}) does not divide "
            f"chip.cores_per_chip ({chip.cores_per_chip})"
        )
    if topology.chip_interconnect == "torus2d" and (
        topology.chips_per_instance % topology.torus_rows
    ):
        errors.append(
            f"topology.torus_rows ({topology.torus_rows}) does not divide "
            f"topology.chips_per_instance ({topology.chips_per_instance})"
        )
    return errors
