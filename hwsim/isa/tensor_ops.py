"""TensorE instructions: ``nc_matmul`` and the TensorE form of ``nc_transpose``.

Costs come from the configured TensorE timing model (``hwsim.cost.tensor_models``); legality
follows HARDWARE.md §2.1 and §3: stationary [K, M] and moving [K, N] in SBUF, K <= rows,
M <= stationary_free_max, N <= moving_free_max, dst [M, N] fp32 in one PSUM bank (v2/v3).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np

from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.base import Instruction, MachineSpec, register
from hwsim.isa.operands import READ, WRITE, operand

if TYPE_CHECKING:
    from hwsim.machine.state import CoreState

MATMUL_DTYPES = frozenset({"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"})
#: Input dtypes of the FP8 "double row" performance mode [S15].
DOUBLE_ROW_DTYPES = frozenset({"fp8_e4m3", "fp8_e5m2"})


class MatmulPerfMode(StrEnum):
    """TensorE performance mode of ``nc_matmul`` (``nki.isa.matmul_perf_mode``) [S15]."""

    none = "none"
    double_row = "double_row"


def as_2d(values: np.ndarray) -> np.ndarray:
    """[P, *free] -> [P, N] (free dims flattened, row-major)."""
    return values.reshape(values.shape[0], -1)


def check_fits_psum_bank(
    instruction: Instruction, spec: MachineSpec, name: str, ap: AccessPattern
) -> None:
    """A TensorE result must lie in one PSUM bank per partition (v2/v3) [S1][S15]."""
    first, last = ap.byte_span()
    bank = spec.psum_bank_bytes
    max_span = spec.config.tensor_engine.moving_free_max * 4
    if max_span <= bank and first // bank != (last - 1) // bank:
        instruction.fail(
            f"operand '{name}' bytes [{first}, {last}) cross a PSUM bank boundary "
            f"(banks are {bank} B per partition); start it at a multiple of {bank} "
            f"or use at most {bank // ap.dtype.itemsize} elements"
        )


@register("nc_matmul", engines=("tensor",), profiler="MATMUL")
@dataclass(frozen=True, kw_only=True)
class NcMatmul(Instruction):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N], accumulated in fp32 in PSUM.

    accumulate=False starts an accumulation group (overwrite); True adds to what dst holds.
    is_stationary_onezero / is_moving_onezero (nki.isa's names [S15][S16]) promise that operand
    holds only 0s and 1s: an fp32 matmul then runs at 2x its speed (``onezero_speedup_by_dtype``,
    HARDWARE.md §2.1; no effect on other dtypes). The hardware would compute garbage from a
    false promise, so with numerics on a flagged operand holding anything else is an error.

    ``perf_mode=double_row`` (NeuronCore-v3+, FP8 inputs [S15]): the contraction is split over
    the partitions and the first free dim, which must be 2: stationary [K/2, 2, M], moving
    [K/2, 2, N], dst [M, N], so K goes to 256 (2 x 128 partitions); element (p, j) is
    contraction row 2p + j. The array packs 2 rows per PE row
    (``tensor_engine.contraction_packing_by_dtype``, 2 for FP8 on v3/v4 presets; a config with
    1 has no double row), and the matmul takes the time of a BF16 one with K/2 rows [S2] in
    every timing model (``MatmulShape.row_packing``).
    """

    NKI_ARGS = (
        "dst, stationary, moving, is_stationary_onezero, is_moving_onezero, *, accumulate, "
        "perf_mode"
    )

    dst: AccessPattern = operand(WRITE)
    stationary: AccessPattern = operand(READ)
    moving: AccessPattern = operand(READ)
    accumulate: bool = False
    is_stationary_onezero: bool = False
    is_moving_onezero: bool = False
    perf_mode: MatmulPerfMode = MatmulPerfMode.none

    def packing(self) -> int:
        """Contraction rows per partition: 2 in double-row mode, else 1."""
        return 2 if MatmulPerfMode(self.perf_mode) is MatmulPerfMode.double_row else 1

    def dims(self) -> tuple[int, int, int]:
        """(K, M, N): contraction, stationary free size, moving free size."""
        packing = self.packing()
        return (
            self.stationary.partitions * packing,
            self.stationary.free_elements // packing,
            self.moving.free_elements // packing,
        )

    def reads(self) -> tuple[AccessPattern, ...]:
        return (
            (self.stationary, self.moving, self.dst)
            if self.accumulate
            else (
                self.stationary,
                self.moving,
            )
        )

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        te = spec.config.tensor_engine
        if self.packing() > 1:
            self._check_double_row(spec)
        k, m, n = self.dims()
        k //= self.packing()
        for name, ap in (("stationary", self.stationary), ("moving", self.moving)):
            if ap.dtype.name not in MATMUL_DTYPES:
                self.fail(
                    f"operand '{name}' dtype {ap.dtype.name} is not one TensorE multiplies "
                    f"({', '.join(sorted(MATMUL_DTYPES))})"
                )
        if (self.stationary.dtype.name == "fp32") != (self.moving.dtype.name == "fp32"):
            self.fail(
                "fp32 inputs must be paired with fp32 (stationary "
                f"{self.stationary.dtype.name}, moving {self.moving.dtype.name})"
            )
        if self.moving.partitions != k:
            self.fail(
                f"contraction mismatch: stationary has {k} partitions, moving has "
                f"{self.moving.partitions}"
            )
        if k > te.rows:
            self.fail(f"contraction K={k} exceeds the {te.rows} PE rows")
        if m > te.stationary_free_max:
            self.fail(
                f"stationary free size {m} exceeds {te.stationary_free_max} "
                "(tensor_engine.stationary_free_max)"
            )
        if n > te.moving_free_max:
            self.fail(
                f"moving free size {n} exceeds {te.moving_free_max} (tensor_engine.moving_free_max)"
            )
        if self.dst.memory is not MemorySpace.PSUM:
            self.fail(f"dst must be in PSUM, not {self.dst.memory.value}")
        if self.dst.dtype.name != "fp32" and spec.config.chip.generation != "v4":
            self.fail(
                f"dst dtype must be fp32 on {spec.config.chip.generation} "
                f"(PSUM accumulates in fp32), not {self.dst.dtype.name}"
            )
        if self.dst.partitions != m or self.dst.free_elements != n:
            self.fail(f"dst shape {self.dst.shape} does not match [M={m}, N={n}]")
        check_fits_psum_bank(self, spec, "dst", self.dst)

    def _check_double_row(self, spec: MachineSpec) -> None:
        self.require_generation(spec, "v3", "v4")
        packing = spec.config.tensor_engine.contraction_packing_by_dtype
        for name, ap in (("stationary", self.stationary), ("moving", self.moving)):
            if ap.dtype.name not in DOUBLE_ROW_DTYPES:
                self.fail(
                    f"perf_mode=double_row takes fp8_e4m3/fp8_e5m2 inputs [S15]; operand "
                    f"'{name}' is {ap.dtype.name}"
                )
            if packing.get(ap.dtype.name, 1) < 2:  # type: ignore[call-overload]
                self.fail(
                    "this config's tensor_engine.contraction_packing_by_dtype"
                    f"[{ap.dtype.name}] is 1: the array has no double row"
                )
            if len(ap.free_sizes) < 2 or ap.free_sizes[0] != 2:
                self.fail(
                    f"perf_mode=double_row splits K over the partitions and the first free dim, "
                    f"which must be 2 [S15]; operand '{name}' has shape {ap.shape}"
                )

    def flops(self) -> int:
        k, m, n = self.dims()
        return 2 * k * m * n

    def execute(self, state: CoreState) -> None:
        from hwsim.kernels.matmul import matmul_accumulate

        k, m, n = self.dims()
        stationary = as_2d(state.read(self.stationary)).reshape(k, m)
        moving = as_2d(state.read(self.moving)).reshape(k, n)
        if self.is_stationary_onezero:
            self._check_onezero("stationary", stationary)
        if self.is_moving_onezero:
            self._check_onezero("moving", moving)
        if self.accumulate:
            acc = as_2d(state.read(self.dst))
        else:
            acc = np.empty((stationary.shape[1], moving.shape[1]), dtype=np.float32)
        matmul_accumulate(acc, stationary, moving, self.accumulate)
        state.write(self.dst, acc.reshape(self.dst.shape))

    def _check_onezero(self, name: str, values: np.ndarray) -> None:
        """Fail on the first element of a flagged operand that is not 0 or 1."""
        bad = np.flatnonzero(~((values == 0) | (values == 1)))
        if bad.size:
            partition, element = divmod(int(bad[0]), values.shape[1])
            value = float(values.flat[bad[0]])
            self.fail(
                f"is_{name}_onezero=True, but operand '{name}' holds {value!r} at partition "
                f"{partition}, element {element}; the 0/1 fast path needs only 0s and 1s "
                "(the hardware would compute garbage): clear the flag or fix the operand"
            )


@register("nc_transpose", engines=("tensor", "vector"), profiler="TRANSPOSE")
@dataclass(frozen=True, kw_only=True)
class NcTranspose(Instruction):
    """dst[F, P] = src[P, F]: on TensorE (<= [128, 128], SBUF -> PSUM, via the PE array) or on
    VectorE (<= [32, 32] blocks, SBUF/PSUM) [S15][S16]."""

    dst: AccessPattern = operand(WRITE)
    src: AccessPattern = operand(READ, nki="data")

    def check(self, spec: MachineSpec) -> None:
        super().check(spec)
        p, f = self.src.partitions, self.src.free_elements
        limit = min(spec.config.tensor_engine.rows, spec.config.tensor_engine.cols)
        if self.engine == "vector":
            limit = 32
        if p > limit or f > limit:
            self.fail(
                f"src [{p}, {f}] exceeds the {limit}x{limit} transpose limit of {self.engine}"
            )
        if self.dst.partitions != f or self.dst.free_elements != p:
            self.fail(f"dst shape {self.dst.shape} must be [{f}, {p}] for src [{p}, {f}]")
        if self.engine == "tensor":
            check_fits_psum_bank(self, spec, "dst", self.dst)
            if self.dst.dtype.name not in ("fp32", self.src.dtype.name):
                self.fail(
                    f"TensorE transpose writes fp32 or the input dtype, not {self.dst.dtype.name}"
                )

    def execute(self, state: CoreState) -> None:
        values = as_2d(state.read(self.src))
        state.write(self.dst, np.ascontiguousarray(values.T).reshape(self.dst.shape))
