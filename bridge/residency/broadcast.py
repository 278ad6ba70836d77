"""A row every partition reads (a bias, a layer norm's gamma), broadcast on chip.

An HBM operand with partition stride 0 reaches every partition of its tile by one DMA whose
source rows are all the same row: the DMA engines move it P times (128 x a 3,072-wide fp32 bias
is 1.5 MB, more than the bf16 weight it is added to). A compiler loads the row once and lets
TensorE replicate it: ``ones[1, P]ᵀ @ row[1, N]`` puts the row on P PSUM partitions (a K = 1
matmul per PSUM bank of columns, with the stationary flagged all ones: 2x for fp32, HARDWARE.md
§2.1), and VectorE evacuates it to the tile. The DMA moves N elements instead of P x N; TensorE
and VectorE take about 0.4 us and 0.5 us per 512 fp32 columns on trn1.

``ROW_BROADCAST_MIN_BYTES`` is where that pays: a [128, 512] fp32 partition broadcast moves
256 KiB, about 1 us of all 16 trn1 DMA engines (272 B/ns, §2.5), the same as the ones-matmul
and its evacuation; narrower rows stay one DMA, which also costs no engine time. Only float
operands whose dtype TensorE multiplies are broadcast so; values are exact (1 x v in fp32).
"""

from __future__ import annotations

from dataclasses import replace

from hwsim import lang
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.tensor_ops import MATMUL_DTYPES
from hwsim.lang import isa as nisa
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.tiles import Tile, View, as_ap

#: Bytes of one partition's row at which broadcasting on chip beats the replicating DMA
#: (module docstring): an engineering crossover of the trn1 rates, not a hardware constant.
ROW_BROADCAST_MIN_BYTES = 2048


def broadcasts(dst: object, src: object) -> bool:
    """Whether loading ``src`` into ``dst`` is a partition broadcast worth doing on chip."""
    if not isinstance(src, AccessPattern) or not isinstance(dst, (Tile, View)):
        return False
    if src.memory is not MemorySpace.HBM or src.partitions <= 1 or src.partition_stride != 0:
        return False
    target = as_ap(dst, "broadcast destination")
    if target.memory is not MemorySpace.SBUF or not target.dtype.is_float:
        return False
    if target.dtype.name not in MATMUL_DTYPES or len(dst.shape) != 2:
        return False
    return src.free_elements * src.dtype.itemsize >= ROW_BROADCAST_MIN_BYTES


def broadcast_on_chip(dst: Tile | View, src: AccessPattern, load_row: object) -> bool:
    """Fill ``dst`` [P, N] with the row ``src`` repeats: ``load_row(row_tile, row_ap)`` moves
    it once (the caller's DMA queues), TensorE replicates it, VectorE evacuates it. False (and
    nothing emitted) when PSUM or SBUF has no room now: the caller then DMAs as before."""
    partitions, width = dst.shape
    dtype = dst.dtype
    bank = lang.config().psum.bytes_per_partition // lang.config().psum.banks // 4
    try:
        row = lang.ndarray((1, width), dtype, lang.sbuf, defer=False)
        ones = lang.ndarray((1, partitions), dtype, lang.sbuf, defer=False)
        banks = [
            lang.ndarray((partitions, min(bank, width)), lang.float32, lang.psum, defer=False)
            for _ in range(min(2, -(-width // bank)))
        ]
    except OutOfMemoryError:
        return False
    load_row(row, replace(src, partitions=1))
    nisa.memset(ones, 1.0)
    for i, c0 in enumerate(range(0, width, bank)):
        cols = min(bank, width - c0)
        acc = banks[i % len(banks)][:, :cols]
        nisa.nc_matmul(acc, ones, row[:, c0 : c0 + cols], is_stationary_onezero=True)
        nisa.tensor_copy(dst[:, c0 : c0 + cols], acc)
    return True
