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

import math
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field, replace

from hwsim import lang
from hwsim.dtypes import DType
from hwsim.isa.ap import AccessPattern, MemorySpace
from hwsim.isa.tensor_ops import MATMUL_DTYPES
from hwsim.lang import isa as nisa
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.tiles import Tile, View, as_ap

Operand = Tile | View

#: Bytes of one partition's row at which broadcasting on chip beats the replicating DMA
#: (module docstring): an engineering crossover of the trn1 rates, not a hardware constant.
ROW_BROADCAST_MIN_BYTES = 2048
#: Most of SBUF the pool the rows of graph inputs stay in for the program may take
#: (``RowBroadcaster``): on trn1 16 KiB per partition, 2 MiB of rows on 128 partitions.
ROW_POOL_SHARE = 1 / 12
#: Bytes of a row element in the pool, for sizing it before the lowering knows each row's
#: dtype: fp32's, the widest float TensorE multiplies (a row lands in its consumer's dtype).
ROW_POOL_ITEMSIZE = 4
#: The pool is whole 128-byte lines of a partition, as the weight ring is.
SBUF_LINE_BYTES = 128


def row_pool_bytes(
    row_widths: Iterable[int], partitions: int, sbuf_bytes_per_partition: int
) -> int:
    """Bytes per partition of a pool that holds every row of ``row_widths`` (elements) that is
    wide enough to be broadcast on chip, at most ``ROW_POOL_SHARE`` of SBUF (0: no such row).

    Rows are placed first-fit by partition (``RowBroadcaster.row``) in the order the lowering
    meets them, unknown here. The pool is the widest row, or more when the rows would not fit
    in any order: first fit leaves at most one partition half full or less, so a pool of C
    bytes takes every row when ``2 x total / C + 1 <= partitions``. Every byte it reserves is
    taken from every tiler's SBUF, hence no more than that. It also holds the [P, P] ones
    tile the broadcasts' matmuls read (``RowBroadcaster.ones``), which lives as long as the
    program: unreserved, it overflowed SBUF where the tilers used all they were given (BERT-base
    at batch 16), and the kernel fell back to placing every tile by the planner."""
    wide = [b for b in (w * ROW_POOL_ITEMSIZE for w in row_widths) if b >= ROW_BROADCAST_MIN_BYTES]
    if not wide:
        return 0
    fits_any_order = -(-2 * sum(wide) // max(1, partitions - 1))
    rows = max(max(wide), fits_any_order)
    pool = -(-(rows + partitions * ROW_POOL_ITEMSIZE) // SBUF_LINE_BYTES) * SBUF_LINE_BYTES
    share = int(sbuf_bytes_per_partition * ROW_POOL_SHARE) // SBUF_LINE_BYTES * SBUF_LINE_BYTES
    return min(pool, share)


def input_rows(shapes: Iterable[tuple[int, ...]]) -> list[int]:
    """Widths (elements) of the graph inputs that are one row (every dim but one of size 1: a
    bias, a norm's gamma, a [1, S] mask): the rows the pool may hold for the program."""
    return [math.prod(shape) for shape in shapes if shape and math.prod(shape) == max(shape)]


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


@dataclass(eq=False)
class RowBroadcaster:
    """Partition broadcasts on chip for one program (module docstring).

    A row of a graph input (a bias, a gamma: constant for the run) is moved once, by the
    trigger engine ``constant_engine``, into a place of its own in a pool that lives as long as
    the program: ``pool_bytes`` of every partition (``row_pool_bytes``: sized to the rows the
    graph's inputs hold), rows placed first-fit by partition (a 768-wide fp32 row takes 3 KiB
    of one partition: BERT-base's ~120 rows fit in 12 KiB of each of 128 partitions). Its DMA
    then depends on nothing and runs ahead with the weights. TensorE contracts the row's
    partition with a ones row on the same partition. Any other row (or one the pool has no room
    for) is moved by ``load_row`` into a tile of its own, when it is needed.
    """

    load_row: Callable[[Operand, AccessPattern], None]
    constants: set[str]
    load_constant: Callable[[Operand, AccessPattern], None]
    _: KW_ONLY
    #: Bytes per partition of the pool rows of graph inputs go to (the lowering reserved
    #: them: it does so for graphs whose weights stream, the models this is for); 0: none.
    pool_bytes: int = 0
    _ones: dict[str, Tile] = field(default_factory=dict, init=False)
    _pools: dict[str, Tile] = field(default_factory=dict, init=False)
    #: Per dtype, per partition: the pool's columns used.
    _fill: dict[str, list[int]] = field(default_factory=dict, init=False)
    _placed: dict[tuple[AccessPattern, str], Operand] = field(default_factory=dict, init=False)
    count: int = field(default=0, init=False)  # rows broadcast on chip

    def ones(self, dtype: DType) -> Tile:
        """[P, P] ones: row p is the stationary of a row on partition p."""
        tile = self._ones.get(dtype.name)
        if tile is None:
            partitions = lang.config().sbuf.partitions
            shape = (partitions, partitions)
            tile = self._ones[dtype.name] = lang.ndarray(shape, dtype, lang.sbuf)
            nisa.memset(tile, 1.0)
        return tile

    def row(self, ap: AccessPattern, dtype: DType) -> Operand:
        """The [1, N] row ``ap`` in SBUF in ``dtype`` (module docstring)."""
        key = (ap, dtype.name)
        found = self._placed.get(key)
        if found is not None:
            return found
        width = ap.free_elements
        columns = self.pool_bytes // dtype.itemsize
        fill = self._fill.setdefault(dtype.name, [0] * lang.config().sbuf.partitions)
        partition = next((p for p, used in enumerate(fill) if used + width <= columns), None)
        if ap.tensor not in self.constants or partition is None:
            tile = lang.ndarray((1, width), dtype, lang.sbuf)
            self.load_row(tile, ap)
            return tile
        pool = self._pools.get(dtype.name)
        if pool is None:
            shape = (len(fill), columns)
            pool = self._pools[dtype.name] = lang.ndarray(shape, dtype, lang.sbuf)
        c0 = fill[partition]
        fill[partition] += width
        row = pool[partition : partition + 1, c0 : c0 + width]
        self.load_constant(row, ap)
        self._placed[key] = row
        return row

    def mark(self) -> tuple[set[str], set[tuple[AccessPattern, str]]]:
        """What is placed now (``drop_since``)."""
        return set(self._ones), set(self._placed)

    def drop_since(self, mark: tuple[set[str], set[tuple[AccessPattern, str]]]) -> None:
        """Forget the ones tiles and rows placed since ``mark``: their instructions were
        dropped (another core of a logical core ran that node: ``bridge.lnc``), so they are not
        in this core's SBUF. Their pool columns stay taken."""
        ones, placed = mark
        for name in [n for n in self._ones if n not in ones]:
            del self._ones[name]
        for key in [k for k in self._placed if k not in placed]:
            del self._placed[key]

    def __call__(self, dst: Tile | View, src: AccessPattern) -> bool:
        """Fill ``dst`` [P, N] with the row ``src`` repeats: the row moved once, TensorE
        replicates it, VectorE evacuates it. False (and nothing emitted) when PSUM has no room
        now: the caller then DMAs as before."""
        done = broadcast_on_chip(dst, src, self)
        self.count += done
        return done


def broadcast_on_chip(dst: Tile | View, src: AccessPattern, rows: RowBroadcaster) -> bool:
    """``RowBroadcaster.__call__``."""
    partitions, width = dst.shape
    dtype = dst.dtype
    bank = lang.config().psum.bytes_per_partition // lang.config().psum.banks // 4
    try:
        banks = [
            lang.ndarray((partitions, min(bank, width)), lang.float32, lang.psum, defer=False)
            for _ in range(min(2, -(-width // bank)))
        ]
    except OutOfMemoryError:
        return False
    row = rows.row(replace(src, partitions=1), dtype)
    p = as_ap(row, "broadcast row").start_partition
    ones = rows.ones(dtype)[p : p + 1, :partitions]
    for i, c0 in enumerate(range(0, width, bank)):
        cols = min(bank, width - c0)
        acc = banks[i % len(banks)][:, :cols]
        nisa.nc_matmul(acc, ones, row[:, c0 : c0 + cols], is_stationary_onezero=True)
        nisa.tensor_copy(dst[:, c0 : c0 + cols], acc)
    return True
