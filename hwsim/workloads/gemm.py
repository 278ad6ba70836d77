"""The ``gemm:MxKxN[:dtype]`` workload: C[M, N] = A[M, K] @ B[K, N] as a blocked TensorE kernel.

How it is tiled (sizes from the config, so other array shapes get a matching kernel):
- stationary tiles are A^T [K_t <= rows, M_t <= stationary_free_max], made by ``dma_transpose``
  for 2-byte dtypes (TensorE transpose otherwise) and kept in SBUF for a whole block of M rows;
- moving tiles are strips of B [K, N_t <= moving_free_max], one DMA per strip, double-buffered
  so the next strip loads while the current one is multiplied;
- each [M_t, N_t] output accumulates over K in one PSUM bank (banks rotate), is evacuated to SBUF
  by VectorE and ScalarE in turn (with the cast to the output dtype), and stored by DMA.
DMA triggers: loads from the sync engine, stores from GpSimdE, so stores never block prefetches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hwsim.builder import ProgramBuilder
from hwsim.config.schema import HardwareConfig
from hwsim.dtypes import FP32, DType, dtype, machine_epsilon
from hwsim.errors import WorkloadError
from hwsim.isa.ap import AccessPattern, MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy, DmaTranspose
from hwsim.isa.tensor_ops import NcMatmul, NcTranspose
from hwsim.program import Program

_SPEC = re.compile(r"^gemm:(\d+)x(\d+)x(\d+)(?::(\w+))?$")
LOAD_B_QUEUE, LOAD_A_QUEUE, STORE_QUEUE = 0, 1, 2
#: Fraction of SBUF per partition the stationary block may use (the rest: B strips, staging).
STATIONARY_SBUF_SHARE = 0.5


@dataclass(frozen=True)
class GemmSpec:
    m: int
    k: int
    n: int
    dtype: DType

    @classmethod
    def parse(cls, text: str) -> GemmSpec:
        match = _SPEC.match(text)
        if not match:
            raise WorkloadError(
                f"'{text}': expected gemm:MxKxN[:dtype], e.g. gemm:512x1024x2048:bf16"
            )
        m, k, n = (int(g) for g in match.groups()[:3])
        if min(m, k, n) < 1:
            raise WorkloadError(f"'{text}': M, K and N must be positive")
        return cls(m, k, n, dtype(match.group(4) or "bf16"))

    @property
    def name(self) -> str:
        return f"gemm:{self.m}x{self.k}x{self.n}:{self.dtype.name}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


@dataclass(frozen=True)
class _Tiling:
    tk: int
    tm: int
    tn: int
    k_tiles: int
    block_m: int  # M rows whose A^T stays in SBUF at once


def _tiling(spec: GemmSpec, config: HardwareConfig) -> _Tiling:
    te = config.tensor_engine
    isz = spec.dtype.itemsize
    tk = min(te.rows, config.sbuf.partitions)
    tm = min(te.stationary_free_max, te.cols)
    bank_fp32 = config.psum.bytes_per_partition // config.psum.banks // 4
    tn = min(te.moving_free_max, bank_fp32, spec.n)
    k_tiles = -(-spec.k // tk)
    budget = config.sbuf.bytes_per_partition
    a_rows = 2 * k_tiles * tk * isz  # A row tiles waiting for their TensorE transposes
    staging = 2 * tn * 4
    strips = 2 * k_tiles * tn * isz
    while strips + staging + a_rows > budget * (1 - STATIONARY_SBUF_SHARE) and tn > 64:
        tn //= 2
        strips, staging = 2 * k_tiles * tn * isz, 2 * tn * 4
    stationary_bytes = int(budget - strips - staging - a_rows - 64)
    block_tiles = min(-(-spec.m // tm), stationary_bytes // (k_tiles * tm * isz))
    if block_tiles < 1:
        raise WorkloadError(
            f"{spec.name}: K={spec.k} is too large for {config.chip.name}'s SBUF "
            f"({budget} B/partition) without K-blocking, which this kernel does not do"
        )
    return _Tiling(tk, tm, tn, k_tiles, block_tiles * tm)


def make_inputs(spec: GemmSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random A[M, K] and B[K, N] in fp32 (the program rounds them to spec.dtype)."""
    rng = np.random.default_rng(seed)
    if spec.dtype.is_float:
        return (
            rng.standard_normal((spec.m, spec.k), dtype=np.float32),
            rng.standard_normal((spec.k, spec.n), dtype=np.float32),
        )
    return (
        rng.integers(-4, 5, (spec.m, spec.k)).astype(np.float32),
        rng.integers(-4, 5, (spec.k, spec.n)).astype(np.float32),
    )


def build_gemm(spec: GemmSpec, config: HardwareConfig, seed: int = 0) -> Program:
    """The blocked matmul program for ``spec`` on ``config`` (with seeded inputs)."""
    a, b = make_inputs(spec, seed)
    builder = ProgramBuilder()
    dt = spec.dtype
    builder.hbm_tensor("a", (spec.m, spec.k), dt, "input", a)
    builder.hbm_tensor("b", (spec.k, spec.n), dt, "input", b)
    builder.hbm_tensor("c", (spec.m, spec.n), dt, "output")
    _GemmEmitter(builder, spec, config, _tiling(spec, config)).emit()
    program = builder.build()
    program.meta.update(workload=spec.name, model_flops=spec.flops)
    return program


class _GemmEmitter:
    def __init__(
        self, builder: ProgramBuilder, spec: GemmSpec, config: HardwareConfig, tiling: _Tiling
    ) -> None:
        self.b, self.spec, self.config, self.t = builder, spec, config, tiling
        isz = spec.dtype.itemsize
        t = tiling
        self.stationary_offset = 0
        stationary_bytes = t.k_tiles * t.block_m * isz
        self.strip_offsets = [stationary_bytes + i * t.k_tiles * t.tn * isz for i in range(2)]
        self.staging_offsets = [
            self.strip_offsets[1] + t.k_tiles * t.tn * isz + i * t.tn * 4 for i in range(2)
        ]
        a_rows_bytes = t.k_tiles * t.tk * isz
        self.a_rows_offsets = [
            self.staging_offsets[1] + t.tn * 4 + i * a_rows_bytes for i in range(2)
        ]
        self.banks = config.psum.banks
        self.bank_bytes = config.psum.bytes_per_partition // config.psum.banks
        self.psum_counter = 0
        self.evac_counter = 0
        self.staging_counter = 0
        self.use_dma_transpose = spec.dtype.itemsize == 2 and self._dma_transpose_is_faster()
        builder.note_allocation(MemorySpace.SBUF, "A^T block", 0, t.tk, 0, stationary_bytes)
        for i in range(2):
            builder.note_allocation(
                MemorySpace.SBUF,
                f"B strip {i}",
                0,
                t.tk,
                self.strip_offsets[i],
                t.k_tiles * t.tn * isz,
            )
            builder.note_allocation(
                MemorySpace.SBUF, f"C staging {i}", 0, t.tm, self.staging_offsets[i], t.tn * 4
            )
        for bank in range(self.banks):
            builder.note_allocation(
                MemorySpace.PSUM, f"bank {bank}", 0, t.tm, bank * self.bank_bytes, self.bank_bytes
            )

    def _dma_transpose_is_faster(self) -> bool:
        """Pick the cheaper way to make A^T on this config, as a kernel author would.

        DMA transpose streams at ``transpose_bandwidth_fraction`` of the DMA bandwidth; the
        TensorE path loads A at full DMA bandwidth and transposes each [128, 128] tile on the PE
        array (max(P, min(64, F)) cycles [S16]) plus a PSUM->SBUF copy on VectorE.
        """
        config, spec = self.config, self.spec
        dma_bytes_per_ns = config.dma.engines * config.dma.bandwidth_bytes_per_ns
        a_bytes = spec.m * spec.k * spec.dtype.itemsize
        dma_ns = a_bytes / (dma_bytes_per_ns * config.dma.transpose_bandwidth_fraction)
        tiles = -(-spec.m // self.t.tm) * self.t.k_tiles
        pe_ns = tiles * max(self.t.tm, self.t.tk) * 1000 / config.vector_engine.clock_mhz
        return dma_ns <= a_bytes / dma_bytes_per_ns + pe_ns

    # -- access patterns ---------------------------------------------------------------------
    def hbm_tile(
        self, name: str, row0: int, rows: int, col0: int, cols: int, row_len: int
    ) -> AccessPattern:
        dt = self.spec.dtype
        return AccessPattern(
            MemorySpace.HBM,
            dt,
            0,
            rows,
            (row0 * row_len + col0) * dt.itemsize,
            (cols,),
            (1,),
            row_len,
            name,
        )

    def stationary(self, kt: int, m_local: int, k_rows: int, m_cols: int) -> AccessPattern:
        """A^T tile kt for block columns [m_local, m_local + m_cols)."""
        isz = self.spec.dtype.itemsize
        offset = self.stationary_offset + (kt * self.t.block_m + m_local) * isz
        return contiguous(MemorySpace.SBUF, self.spec.dtype, k_rows, m_cols, offset_bytes=offset)

    def strip(self, buffer: int, kt: int, k_rows: int, n_cols: int) -> AccessPattern:
        isz = self.spec.dtype.itemsize
        offset = self.strip_offsets[buffer] + kt * self.t.tn * isz
        return contiguous(MemorySpace.SBUF, self.spec.dtype, k_rows, n_cols, offset_bytes=offset)

    # -- program ----------------------------------------------------------------------------
    def emit(self) -> None:
        spec, t = self.spec, self.t
        n_tiles = -(-spec.n // t.tn)
        strip_index = 0
        for m0 in range(0, spec.m, t.block_m):
            block_rows = min(t.block_m, spec.m - m0)
            # A^T first: every matmul of the block needs it, while B strips are needed one by one.
            self.load_stationary_block(m0, block_rows)
            self.load_strip(0, strip_index % 2)
            for nt in range(n_tiles):
                if nt + 1 < n_tiles:
                    self.load_strip(nt + 1, (strip_index + 1) % 2)
                self.compute_strip(m0, block_rows, nt, strip_index % 2)
                strip_index += 1

    def load_stationary_block(self, m0: int, block_rows: int) -> None:
        """A^T for the block: one transposing DMA per K tile covering all the block's rows, or
        TensorE transposes of A row tiles when that is cheaper on this config."""
        spec, t = self.spec, self.t
        if not self.use_dma_transpose:
            for m_local in range(0, block_rows, t.tm):
                self.transpose_rows_on_tensor_engine(m0, m_local, min(t.tm, block_rows - m_local))
            return
        for kt in range(t.k_tiles):
            k0 = kt * t.tk
            k_rows = min(t.tk, spec.k - k0)
            src = self.hbm_tile("a", m0, block_rows, k0, k_rows, spec.k)
            dst = self.stationary(kt, 0, k_rows, block_rows)
            self.b.emit(
                DmaTranspose(engine="sync", dst=dst, src=src, queue=LOAD_A_QUEUE, tag="load A^T")
            )

    def transpose_rows_on_tensor_engine(self, m0: int, m_local: int, rows: int) -> None:
        """Load A[rows, K] with one DMA, then transpose each K tile on TensorE into A^T."""
        spec, t = self.spec, self.t
        offset = self.a_rows_offsets[self.staging_counter % 2]
        self.staging_counter += 1
        self.b.emit(
            DmaCopy(
                engine="sync",
                dst=contiguous(MemorySpace.SBUF, spec.dtype, rows, spec.k, offset_bytes=offset),
                src=self.hbm_tile("a", m0 + m_local, rows, 0, spec.k, spec.k),
                queue=LOAD_A_QUEUE,
                tag="load A",
            )
        )
        for kt in range(t.k_tiles):
            k0 = kt * t.tk
            k_rows = min(t.tk, spec.k - k0)
            src = AccessPattern(
                MemorySpace.SBUF,
                spec.dtype,
                0,
                rows,
                offset + k0 * spec.dtype.itemsize,
                (k_rows,),
                (1,),
            )
            psum = self.next_psum(k_rows, rows, FP32)
            self.b.emit(NcTranspose(engine="tensor", dst=psum, src=src, tag="transpose A"))
            dst = self.stationary(kt, m_local, k_rows, rows)
            self.b.emit(TensorCopy(engine="vector", dst=dst, src=psum, tag="transpose A"))

    def load_strip(self, nt: int, buffer: int) -> None:
        spec, t = self.spec, self.t
        n0 = nt * t.tn
        cols = min(t.tn, spec.n - n0)
        full = spec.k // t.tk
        isz = spec.dtype.itemsize
        if full:
            src = AccessPattern(
                MemorySpace.HBM,
                spec.dtype,
                0,
                t.tk,
                n0 * isz,
                (full, cols),
                (t.tk * spec.n, 1),
                spec.n,
                "b",
            )
            dst = AccessPattern(
                MemorySpace.SBUF,
                spec.dtype,
                0,
                t.tk,
                self.strip_offsets[buffer],
                (full, cols),
                (t.tn, 1),
            )
            self.b.emit(DmaCopy(engine="sync", dst=dst, src=src, queue=LOAD_B_QUEUE, tag="load B"))
        if spec.k % t.tk:
            k0 = full * t.tk
            src = self.hbm_tile("b", k0, spec.k - k0, n0, cols, spec.n)
            self.b.emit(
                DmaCopy(
                    engine="sync",
                    dst=self.strip(buffer, full, spec.k - k0, cols),
                    src=src,
                    queue=LOAD_B_QUEUE,
                    tag="load B",
                )
            )

    def next_psum(self, partitions: int, free: int, dt: DType) -> AccessPattern:
        bank = self.psum_counter % self.banks
        self.psum_counter += 1
        return contiguous(
            MemorySpace.PSUM, dt, partitions, free, offset_bytes=bank * self.bank_bytes
        )

    def compute_strip(self, m0: int, block_rows: int, nt: int, buffer: int) -> None:
        spec, t = self.spec, self.t
        n0 = nt * t.tn
        cols = min(t.tn, spec.n - n0)
        for m_local in range(0, block_rows, t.tm):
            rows = min(t.tm, block_rows - m_local)
            psum = self.next_psum(rows, cols, FP32)
            for kt in range(t.k_tiles):
                k_rows = min(t.tk, spec.k - kt * t.tk)
                self.b.emit(
                    NcMatmul(
                        engine="tensor",
                        dst=psum,
                        stationary=self.stationary(kt, m_local, k_rows, rows),
                        moving=self.strip(buffer, kt, k_rows, cols),
                        accumulate=kt > 0,
                        tag="matmul",
                    )
                )
            self.evacuate_and_store(psum, m0 + m_local, rows, n0, cols)

    def evacuate_and_store(
        self, psum: AccessPattern, row0: int, rows: int, n0: int, cols: int
    ) -> None:
        engine = ("vector", "scalar")[self.evac_counter % 2]
        staging_offset = self.staging_offsets[self.evac_counter % 2]
        self.evac_counter += 1
        staging = contiguous(
            MemorySpace.SBUF, self.spec.dtype, rows, cols, offset_bytes=staging_offset
        )
        if engine == "scalar" and self.config.chip.generation == "v2":
            engine = "vector"  # ScalarE has no tensor_copy on v2 [S15]
        self.b.emit(TensorCopy(engine=engine, dst=staging, src=psum, tag="evacuate PSUM"))
        dst = self.hbm_tile("c", row0, rows, n0, cols, self.spec.n)
        self.b.emit(
            DmaCopy(engine="gpsimd", dst=dst, src=staging, queue=STORE_QUEUE, tag="store C")
        )


def reference(spec: GemmSpec, seed: int = 0) -> np.ndarray:
    """C as numpy computes it from the same dtype-rounded inputs (fp64 accumulation)."""
    a, b = make_inputs(spec, seed)
    np_dt = spec.dtype.numpy
    a_q = a.astype(np_dt).astype(np.float64)
    b_q = b.astype(np_dt).astype(np.float64)
    return a_q @ b_q


def check_result(spec: GemmSpec, result: np.ndarray, seed: int = 0) -> tuple[float, bool]:
    """(max abs error, within tolerance): fp32 accumulation error bound + output rounding."""
    ref = reference(spec, seed)
    got = result.astype(np.float64)
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    out_eps = machine_epsilon(spec.dtype)
    accumulate_eps = float(np.finfo(np.float32).eps) * np.sqrt(spec.k) * 4
    tolerance = scale * (out_eps + accumulate_eps) + 1e-6
    return err, err <= tolerance
