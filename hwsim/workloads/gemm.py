"""The ``gemm:MxKxN[:dtype]`` workload: C[M, N] = A[M, K] @ B[K, N] with the library's best matmul.

The kernel is the library's optimised matmul (``hwsim.library.optimized_matmul``, the block
structure of ``nki_matmul_fully_optimized_``) with the stationary operand made on the way in:
TensorE wants A^T [K, M], so each K tile of A^T is produced by a transposing DMA or by a plain
row-block DMA plus TensorE transposes, whichever is cheaper on the config
(``dma_transpose_is_faster``). Block sizes are
chosen for the shape and config (``gemm_blocking``): A^T stays in SBUF when it fits, K is one
block when SBUF allows (else partial sums fold in fp32), B moves in DMAs of >= 2 KiB per
partition, and in the first block several output tiles accumulate in PSUM at once with K
outermost, so TensorE starts as soon as the first K tiles land.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from hwsim import lang
from hwsim.config.schema import HardwareConfig
from hwsim.dtypes import DType, dtype, machine_epsilon
from hwsim.errors import IllegalInstructionError, WorkloadError, shorten
from hwsim.isa.tensor_ops import MATMUL_DTYPES
from hwsim.lang import TensorSpec
from hwsim.lang.allocator import SBUF_ALIGN_BYTES
from hwsim.library.common import (
    DmaQueues,
    Limits,
    TransposedLoader,
    cdiv,
    dma_transpose_is_faster,
    limits,
)
from hwsim.library.optimized_matmul import Blocking, OptimizedMatmul, transposing_loader
from hwsim.program import Program
from hwsim.workloads.bounds import DIM, check_hbm_fits, parse_dims
from hwsim.workloads.registry import NumericsVerdict

_SPEC = re.compile(rf"gemm:({DIM})x({DIM})x({DIM})(?::([A-Za-z0-9_]+))?")
#: What a gemm workload string looks like, for lists and errors.
FORM = "gemm:MxKxN[:dtype]"
SYNTAX = f"{FORM}, e.g. gemm:512x1024x2048:bf16"
#: B blocks in SBUF at once when they fit (loads run this many blocks ahead of the matmuls).
RHS_BUFFERS = 4
#: Bytes per partition a B load aims for: >= 2 KiB per partition is the recommended minimum
#: [S11][S12]; larger DMAs would delay the first matmuls.
DMA_TARGET_BYTES = 2048
#: Contiguous bytes per row a B load aims for: DMA descriptors saturate the engines from 4 KiB
#: [S11][S12] (``hwsim.cost.dma``), so B's N block is made that wide when N allows.
DESCRIPTOR_TARGET_BYTES = 4096
#: Share of SBUF kept free of the blocking's tiles (allocation granules, fragmentation).
SBUF_MARGIN_SHARE = 1 / 16


@dataclass(frozen=True)
class GemmSpec:
    m: int
    k: int
    n: int
    dtype: DType

    @classmethod
    def parse(cls, text: str) -> GemmSpec:
        """The spec ``text`` spells (ASCII digits, bounded: ``hwsim.workloads.bounds``)."""
        match = _SPEC.fullmatch(text)
        if not match:
            raise WorkloadError(f"'{shorten(text)}': expected {SYNTAX}")
        m, k, n = parse_dims(match.groups()[:3], "MKN", text)
        name = match.group(4) or "bf16"
        try:
            dt = dtype(name)
        except IllegalInstructionError:
            dt = None
        if dt is None or dt.name not in MATMUL_DTYPES:
            valid = ", ".join(sorted(MATMUL_DTYPES))
            raise WorkloadError(f"'{shorten(text)}': TensorE multiplies {valid}, not {name}")
        return cls(m, k, n, dt)

    @property
    def name(self) -> str:
        return f"gemm:{self.m}x{self.k}x{self.n}:{self.dtype.name}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n

    @property
    def hbm_bytes(self) -> int:
        """HBM of A, B and C, the program's only HBM tensors."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.dtype.itemsize


def make_inputs(spec: GemmSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random A[M, K] and B[K, N] in fp32 (the program rounds them to spec.dtype)."""
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((spec.m, spec.k), dtype=np.float32),
        rng.standard_normal((spec.k, spec.n), dtype=np.float32),
    )


def gemm_blocking(spec: GemmSpec, config: HardwareConfig) -> Blocking:
    """Block sizes and buffering for this shape on this config: the first that fits SBUF.

    Preference order, from what saves the most: A^T resident in SBUF (never reloaded); K in one
    block (no partial sums through SBUF), else the largest K block; N blocks wide enough that B
    moves in 4 KiB rows (``DESCRIPTOR_TARGET_BYTES``), else narrower; M blocks as tall as the
    tutorial's (16 tiles); B loads running up to ``RHS_BUFFERS`` blocks ahead. In the first block
    half the PSUM banks accumulate at once (K outermost) while the other half drain.
    """
    lim = limits(config)
    dt = spec.dtype
    budget = int(config.sbuf.bytes_per_partition * (1 - SBUF_MARGIN_SHARE))
    k_tiles, m_tiles = cdiv(spec.k, lim.tile_k), cdiv(spec.m, lim.tile_m)
    n_tiles = cdiv(spec.n, lim.tile_n)
    wide_n = max(1, min(n_tiles, DESCRIPTOR_TARGET_BYTES // (lim.tile_n * dt.itemsize)))
    for resident, tiles_k, tiles_n, tiles_m, rhs_buffers in itertools.product(
        (True, False),
        _halvings(k_tiles),
        _halvings(wide_n),
        _halvings(min(16, m_tiles)),
        (RHS_BUFFERS, 2),
    ):
        rhs_row_bytes = tiles_n * lim.tile_n * dt.itemsize
        blocking = Blocking(
            tiles_m=tiles_m,
            tiles_n=tiles_n,
            tiles_k=tiles_k,
            psum_groups=max(1, config.psum.banks // 2),
            lhs_resident=resident,
            rhs_buffers=rhs_buffers,
            rhs_k_tiles_per_dma=max(1, DMA_TARGET_BYTES // rhs_row_bytes),
            fold_fp32=True,
        )
        need = blocking.sbuf_bytes(spec.k, spec.m, spec.n, dt, dt, lim)
        if need + _staging_bytes(spec, config, lim, tiles_k) <= budget:
            return blocking
    raise WorkloadError(
        f"{spec.name}: no blocking fits {config.chip.name}'s SBUF "
        f"({config.sbuf.bytes_per_partition} B per partition): the kernel keeps a "
        f"[{lim.tile_n}-column] result strip of all M={spec.m} rows in SBUF; use a smaller M "
        "or a config with more SBUF"
    )


def _halvings(start: int) -> list[int]:
    values = [start]
    while values[-1] > 1:
        values.append(values[-1] // 2)
    return values


def _staging_bytes(spec: GemmSpec, config: HardwareConfig, lim: Limits, tiles_k: int) -> int:
    """SBUF the TensorE transpose path's row blocks (one K block wide) take, if it is used."""
    if dma_transpose_is_faster(spec.m, spec.k, spec.dtype, config):
        return 0
    width = min(spec.k, tiles_k * lim.tile_k) * spec.dtype.itemsize
    return TransposedLoader.STAGING_BUFFERS * cdiv(width, SBUF_ALIGN_BYTES) * SBUF_ALIGN_BYTES


@lang.kernel
def gemm_kernel(a, b, blocking, transpose="auto"):
    """c[M, N] = a[M, K] @ b[K, N] (A^T made on chip; see the module docstring)."""
    m, k = a.shape
    n = b.shape[1]
    c = lang.ndarray((m, n), a.dtype, buffer=lang.hbm, name="c")
    queues = DmaQueues()
    loader = TransposedLoader(queues, transpose)
    psum_banks = limits().psum_banks - (0 if loader.use_dma(a) else loader.psum_buffers)
    OptimizedMatmul(
        transposing_loader(a, loader), k, m, b, c, blocking, queues, psum_banks=psum_banks
    ).emit()
    return c


def build_gemm(spec: GemmSpec, config: HardwareConfig, seed: int = 0) -> Program:
    """The blocked matmul program for ``spec`` on ``config`` (with seeded inputs); a shape whose
    tensors exceed the config's HBM is refused before any input is made."""
    check_hbm_fits(spec.hbm_bytes, config, spec.name)
    blocking = gemm_blocking(spec, config)
    a, b = make_inputs(spec, seed)
    np_dt = spec.dtype.numpy
    built = gemm_kernel.build(a.astype(np_dt), b.astype(np_dt), blocking, config=config)
    program = built.program
    program.meta.update(workload=spec.name, model_flops=spec.flops)
    return program


def build_gemm_timing(spec: GemmSpec, config: HardwareConfig) -> Program:
    """``build_gemm``'s program from shapes alone, for timing-only runs (no input values)."""
    check_hbm_fits(spec.hbm_bytes, config, spec.name)
    a = TensorSpec((spec.m, spec.k), spec.dtype.name)
    b = TensorSpec((spec.k, spec.n), spec.dtype.name)
    program = gemm_kernel.build(a, b, gemm_blocking(spec, config), config=config).program
    program.meta.update(workload=spec.name, model_flops=spec.flops)
    return program


def reference(spec: GemmSpec, seed: int = 0) -> np.ndarray:
    """C as numpy computes it from the same dtype-rounded inputs (fp64 accumulation)."""
    a, b = make_inputs(spec, seed)
    np_dt = spec.dtype.numpy
    a_q = a.astype(np_dt).astype(np.float64)
    b_q = b.astype(np_dt).astype(np.float64)
    return a_q @ b_q


def check_result(spec: GemmSpec, result: np.ndarray, seed: int = 0) -> NumericsVerdict:
    """The verdict against the fp64 product: fp32 accumulation error bound + output rounding."""
    ref = reference(spec, seed)
    got = result.astype(np.float64)
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    out_eps = machine_epsilon(spec.dtype)
    accumulate_eps = float(np.finfo(np.float32).eps) * np.sqrt(spec.k) * 4
    tolerance = scale * (out_eps + accumulate_eps) + 1e-6
    return NumericsVerdict(err, err <= tolerance, tolerance)
