"""NeuronCore-v4 microscaling (MX): ``quantize_mx`` (VectorE) and ``nc_matmul_mx`` (TensorE).

Data are the x4 packed dtypes (``hwsim.dtypes``: four OCP minifloats per element, packed
along the contraction, HARDWARE.md §2.1 [S3]); numerics are ``kernels.mx``. A scale group is 8
partitions x one x4 element (32 values) [S3][S15]; its uint8 E8M0 scale lives in a scale tile
laid out by SBUF quadrant (Trainium3 arch guide [S3]): each 32 data partitions give 4 scale
partitions, held at the same offset in each quadrant, so data quadrant q's group r (its
partitions 8r .. 8r + 7) has its scales on scale partition ``start + 32 q + r``; the other 28
partitions of each quadrant are not touched (other scale tiles may use them). Data tiles start
on a quadrant boundary (an assumption: the layout is defined by quadrant).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from hwsim import kernels
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec, register
from hwsim.isa.compute_base import ComputeInstruction, read_2d, read_bits, write_bits, write_result
from hwsim.isa.operands import READ, WRITE, operand
from hwsim.isa.tensor_ops import as_2d

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

QUADRANT = 32
#: Scale partitions per data quadrant (32 / 8 partitions per group).
SCALES_PER_QUADRANT = QUADRANT // kernels.MX_GROUP_PARTITIONS
QUANTIZE_DTYPES = ("fp8_e5m2_x4", "fp8_e4m3fn_x4")
MATMUL_MX_DTYPES = ("fp8_e5m2_x4", "fp8_e4m3fn_x4", "fp4_e2m1fn_x4")


def scale_quadrants(scale: AccessPattern, data: AccessPattern) -> tuple[AccessPattern, ...]:
    """The 4-partition pieces of a scale tile that data's quadrants use, in quadrant order."""
    quadrants = data.partitions // QUADRANT
    return tuple(
        replace(
            scale,
            start_partition=scale.start_partition + q * QUADRANT,
            partitions=SCALES_PER_QUADRANT,
        )
        for q in range(quadrants)
    )


def check_mx_data(instruction: Instruction, name: str, ap: AccessPattern) -> None:
    """An MX data tile: a multiple of 32 partitions, starting on a quadrant boundary."""
    if ap.partitions % QUADRANT or ap.start_partition % QUADRANT:
        instruction.fail(
            f"operand '{name}' covers partitions [{ap.start_partition}, {ap.end_partition}); MX "
            f"data take a multiple of {QUADRANT} partitions from a quadrant boundary [S15]"
        )


def check_scale_tile(
    instruction: Instruction, name: str, scale: AccessPattern, data: AccessPattern
) -> None:
    """The scale tile of ``data``: uint8 in SBUF, 4 partitions per data quadrant at one offset
    within each quadrant (so ``32 (Q - 1) + 4`` partitions), one scale per x4 element column."""
    quadrants = data.partitions // QUADRANT
    want = QUADRANT * (quadrants - 1) + SCALES_PER_QUADRANT
    if scale.dtype.name != "uint8" or scale.memory is not MemorySpace.SBUF:
        instruction.fail(f"operand '{name}' must be a uint8 SBUF tile [S15]")
    if (
        scale.partitions != want
        or scale.start_partition % QUADRANT + SCALES_PER_QUADRANT > QUADRANT
    ):
        instruction.fail(
            f"operand '{name}' covers partitions [{scale.start_partition}, "
            f"{scale.end_partition}); the scales of {data.partitions} data partitions take "
            f"{SCALES_PER_QUADRANT} partitions in each of {quadrants} quadrant(s), i.e. {want} "
            f"partitions starting at most {QUADRANT - SCALES_PER_QUADRANT} into a quadrant"
        )
    if scale.free_elements != data.free_elements:
        instruction.fail(
            f"operand '{name}' has {scale.free_elements} elements per partition; it needs one "
            f"per x4 element of the data ({data.free_elements})"
        )


def read_scales(state: CoreState, scale: AccessPattern, data: AccessPattern) -> np.ndarray:
    """A scale tile's codes by group, int64 [P / 8, M] (group g = data partitions 8g .. 8g+7)."""
    return np.concatenate([read_bits(state, q) for q in scale_quadrants(scale, data)], axis=0)


@register("quantize_mx", engines=("vector",), profiler="QUANTIZE_MX")
@dataclass(frozen=True, kw_only=True)
class QuantizeMx(ComputeInstruction):
    """Quantize src [P, F] (fp16/bf16) to MXFP8: dst [P, F / 4] fp8_e5m2_x4 / fp8_e4m3fn_x4
    (src[p, 4j .. 4j + 3] packed into dst[p, j]) and one uint8 scale per group of 8 partitions
    x one x4 element in dst_scale (the quadrant layout of the module docstring), per the OCP MX
    algorithm (``kernels.quantize_mx``; overflow saturates, the simulator's choice) [S3][S15].
    NeuronCore-v4 VectorE; all tiles in SBUF; P a multiple of 32, F of 4.

    Cost: 4 input elements per partition per cycle [S3]: max(MIN_II, ceil(F / 4)) VectorE
    cycles (times the passes over the lanes).
    """

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ)
    dst_scale: AccessPattern = operand(WRITE)

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.dst, *scale_quadrants(self.dst_scale, self.dst))

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v4")
        for name, ap in (("src", self.src), ("dst", self.dst)):
            self.check_memory(name, ap, MemorySpace.SBUF)
            check_mx_data(self, name, ap)
        self.check_dtype("src", self.src, ("fp16", "bf16"))
        self.check_dtype("dst", self.dst, QUANTIZE_DTYPES)
        if self.src.free_elements % kernels.MX_LANES:
            self.fail(
                f"src has {self.src.free_elements} elements per partition; not a multiple of 4"
            )
        if (self.dst.start_partition, self.dst.partitions) != (
            self.src.start_partition,
            self.src.partitions,
        ) or self.dst.free_elements * kernels.MX_LANES != self.src.free_elements:
            self.fail(
                f"dst {self.dst.shape} must be src {self.src.shape} with a quarter of the "
                "elements per partition, on the same partitions (four values per x4 element)"
            )
        check_scale_tile(self, "dst_scale", self.dst_scale, self.dst)

    def execute(self, state: CoreState) -> None:
        codes, scales = kernels.quantize_mx(
            read_2d(state, self.src, False), self.dst.dtype.lane_format
        )
        write_bits(state, self.dst, codes)
        quadrants = scale_quadrants(self.dst_scale, self.dst)
        for q, piece in enumerate(quadrants):
            rows = scales[q * SCALES_PER_QUADRANT : (q + 1) * SCALES_PER_QUADRANT]
            write_result(state, piece, rows, True)


@register("nc_matmul_mx", engines=("tensor",), profiler="MATMUL")
@dataclass(frozen=True, kw_only=True)
class NcMatmulMx(Instruction):
    """dst[M, N] (+)= dequant(stationary)[K, M].T @ dequant(moving)[K, N], K = 4 x partitions
    (the x4 values), each value times 2^(scale - 127) of its group; fp32 accumulation, dst fp32
    or bf16 in PSUM [S3][S15]. NeuronCore-v4 TensorE. stationary [P, M] and moving [P, N] are x4
    MX tiles (fp8_e5m2_x4, fp8_e4m3fn_x4 or fp4_e2m1fn_x4; the two may differ [S3]) of the same
    P, a multiple of 32 up to the PE rows; M even, up to stationary_free_max; N at most one PSUM
    bank of dst (512 fp32, 1024 bf16 [S15]). Scale tiles as the module docstring.

    Cost: 4x BF16 throughput [S3]: the configured TensorE timing model on K = 4P with 4 rows
    per PE row (``MatmulShape.row_packing``), i.e. the time of a BF16 matmul with K = P.
    """

    dst: AccessPattern = operand(WRITE)
    stationary: AccessPattern = operand(READ)
    moving: AccessPattern = operand(READ)
    stationary_scale: AccessPattern = operand(READ)
    moving_scale: AccessPattern = operand(READ)
    accumulate: bool = False

    def reads(self) -> tuple[AccessPattern, ...]:
        scales = (
            *scale_quadrants(self.stationary_scale, self.stationary),
            *scale_quadrants(self.moving_scale, self.moving),
        )
        own = (self.dst,) if self.accumulate else ()
        return (self.stationary, self.moving, *scales, *own)

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        self.require_generation(spec, "v4")
        te = spec.config.tensor_engine
        for name, ap in (("stationary", self.stationary), ("moving", self.moving)):
            if ap.dtype.name not in MATMUL_MX_DTYPES:
                self.fail(
                    f"operand '{name}' is {ap.dtype.name}; it must be {', '.join(MATMUL_MX_DTYPES)}"
                )
            check_mx_data(self, name, ap)
        p, m, n = (
            self.stationary.partitions,
            self.stationary.free_elements,
            self.moving.free_elements,
        )
        if self.moving.partitions != p:
            self.fail(f"stationary has {p} partitions and moving {self.moving.partitions}")
        if p > te.rows:
            self.fail(f"{p} partitions exceed the {te.rows} PE rows")
        if m % 2 or m > te.stationary_free_max:
            self.fail(
                f"stationary free size {m} must be even and at most {te.stationary_free_max} [S15]"
            )
        self.check_dst(spec, m, n)
        check_scale_tile(self, "stationary_scale", self.stationary_scale, self.stationary)
        check_scale_tile(self, "moving_scale", self.moving_scale, self.moving)

    def check_dst(self, spec: MachineSpec, m: int, n: int) -> None:
        dst, bank = self.dst, spec.psum_bank_bytes
        if dst.memory is not MemorySpace.PSUM or dst.dtype.name not in ("fp32", "bf16"):
            self.fail(
                f"dst must be an fp32 or bf16 PSUM tile, not {dst.dtype.name} in {dst.memory.value}"
            )
        if n > bank // dst.dtype.itemsize:
            self.fail(
                f"moving free size {n} exceeds one PSUM bank of {dst.dtype.name} "
                f"({bank // dst.dtype.itemsize} elements) [S15]"
            )
        if dst.partitions != m or dst.free_elements != n:
            self.fail(f"dst shape {dst.shape} does not match [M={m}, N={n}]")
        first, last = dst.byte_span()
        if first // bank != (last - 1) // bank:
            self.fail(f"dst bytes [{first}, {last}) cross a PSUM bank boundary ({bank} B banks)")

    def flops(self) -> int:
        k_rows = kernels.MX_LANES * self.stationary.partitions
        return 2 * k_rows * self.stationary.free_elements * self.moving.free_elements

    def execute(self, state: CoreState) -> None:
        from hwsim.kernels.matmul import matmul_accumulate

        operands = []
        for data, scale in (
            (self.stationary, self.stationary_scale),
            (self.moving, self.moving_scale),
        ):
            scales = read_scales(state, scale, data)
            operands.append(
                kernels.dequantize_mx(read_bits(state, data), scales, data.dtype.lane_format)
            )
        stationary, moving = operands
        if self.accumulate:
            acc = as_2d(state.read(self.dst)).astype(np.float32)
        else:
            acc = np.empty((stationary.shape[1], moving.shape[1]), dtype=np.float32)
        matmul_accumulate(acc, stationary, moving, self.accumulate)
        state.write(self.dst, acc.reshape(self.dst.shape))
