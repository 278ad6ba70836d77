"""NKI direct allocation: ``nki.compiler.sbuf.alloc(func)`` / ``mod_alloc(...)`` and their
``psum`` twins place each logical tile of a tensor where the kernel says; the simulator puts
the tile there (its access patterns address those bytes and partitions).

A placement is ``func(idx=block index, pdim_size=partitions, fdim_size=bytes)`` -> (start
partition, byte address) in SBUF, or (bank, start partition, byte address within the bank) in
PSUM, as the NKI docs define ``alloc``; ``mod_alloc`` is the docs' modulo function over the
block index. Tiles at one place are one tile (the modulo reuse the kernel asked for). The
bytes a kernel places are taken from the compiler's pool for the rest of the kernel, so an
automatically placed tile never lands on them; places may overlap one another (the kernel
manages them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from hwsim.isa.ap import MemorySpace
from hwsim.lang.allocator import OutOfMemoryError
from hwsim.lang.kernel import current, source_location
from hwsim.lang.tiles import Buffer, Tile
from hwsim.lang.tiles import psum as _psum
from hwsim.lang.tiles import sbuf as _sbuf
from hwsim.nki.state import Allocation, state, user_site
from hwsim.nki.tensor import NkiTensor, fail


class DirectBuffer:
    """A ``buffer=`` that places each logical tile itself (module docstring)."""

    def __init__(self, buffer: Buffer, func: Callable[..., Any], what: str) -> None:
        self.buffer, self.func, self.what = buffer, func, what
        self.memory = buffer.memory

    def __repr__(self) -> str:
        return self.what

    def place(self, index: tuple[int, ...], partitions: int, nbytes: int) -> tuple[int, int]:
        """(start partition, byte offset within each partition) of one logical tile."""
        placed = tuple(int(v) for v in self.func(idx=index, pdim_size=partitions, fdim_size=nbytes))
        if self.memory is MemorySpace.PSUM:
            if len(placed) != 3:
                raise fail(self.what, f"a PSUM placement is (bank, partition, address): {placed}")
            bank, partition, address = placed
            banks = current().config.psum
            if not 0 <= bank < banks.banks:
                raise fail(self.what, f"bank {bank} of PSUM's {banks.banks}")
            return partition, bank * banks.bank_bytes + address
        if len(placed) != 2:
            raise fail(self.what, f"an SBUF placement is (partition, address): {placed}")
        return placed[0], placed[1]


def _modulo(base: int, shape: tuple[int, ...], scale: int) -> Callable[[tuple[int, ...]], int]:
    """The NKI docs' ``modulo_allocate_func``."""

    def func(indices: tuple[int, ...]) -> int:
        tiles = shape or (1,) * len(indices)
        mod = [i % s for i, s in zip(indices, tiles, strict=False)]
        return base + scale * sum(m * math.prod(tiles[d + 1 :]) for d, m in enumerate(mod))

    return func


class Space:
    """``nki.compiler.sbuf`` / ``nki.compiler.psum``: the direct allocation calls."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.name = buffer.memory.value

    def alloc(self, func: Callable[..., Any]) -> DirectBuffer:
        """Each logical tile where ``func(index, partitions, bytes)`` says (module docstring)."""
        return DirectBuffer(self.buffer, func, f"nki.compiler.{self.name}.alloc")

    def mod_alloc(
        self,
        *,
        base_addr: int = 0,
        base_bank: int = 0,
        base_partition: int = 0,
        num_bank_tiles: tuple[int, ...] = (),
        num_par_tiles: tuple[int, ...] = (),
        num_free_tiles: tuple[int, ...] = (),
    ) -> DirectBuffer:
        """Logical tile ``i`` at ``base + (i mod num_tiles) * tile size`` (the NKI docs')."""

        def func(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, ...]:
            partition = _modulo(base_partition, tuple(num_par_tiles), pdim_size)(idx)
            address = _modulo(base_addr, tuple(num_free_tiles), fdim_size)(idx)
            if self.buffer.memory is MemorySpace.PSUM:
                bank = _modulo(base_bank, tuple(num_bank_tiles), 1)(idx)
                return bank, partition, address
            return partition, address

        what = f"nki.compiler.{self.name}.mod_alloc(base_addr={base_addr})"
        return DirectBuffer(self.buffer, func, what)

    def auto_alloc(self) -> Buffer:
        """Placed by the compiler (here: the kernel language's allocator)."""
        return self.buffer


sbuf_space, psum_space = Space(_sbuf), Space(_psum)


#: Loops NKI traces once (their body is Python run one time, over a symbolic index);
#: ``static_range`` is unrolled by Python in NKI too.
TRACED_LOOPS = ("affine_range", "sequential_range")


def traced_once(buffer: DirectBuffer) -> DirectBuffer:
    """The placement of a tensor declared in the body of a loop NKI traces once: the one the
    body's first run asked for. NKI runs that body's Python once, so a kernel that advances
    its own address counter in it (``cur_addr += nbytes`` after each ``mod_alloc``, as
    nki-samples' allocated kernels do) advances it once; here the body runs per iteration,
    and later iterations would place the same tensor further on each time."""
    st = state()
    traced = [f for f in st.loops if f.kind in TRACED_LOOPS]
    if not traced:
        return buffer
    innermost = st.loops[-1]
    site = user_site()
    occurrence = innermost.direct_occurrences.get(site, 0)
    innermost.direct_occurrences[site] = occurrence + 1
    unrolled = tuple(f.value for f in st.loops if f.kind not in TRACED_LOOPS)
    key = (tuple(f.site for f in st.loops), unrolled, site, occurrence)
    placed: DirectBuffer = st.traced_buffers.setdefault(key, buffer)
    return placed


def reserve(
    shape: tuple[int, ...], dt: Any, direct: DirectBuffer, blocks: tuple[int, ...] = ()
) -> None:
    """Place every logical tile of a tensor of ``blocks`` blocks of ``shape`` now (its
    declaration), so no tile the kernel language places meanwhile lands on them."""
    for index in itertools.product(*(range(n) for n in blocks)):
        _place(shape, dt, direct, index)


def _place(shape: tuple[int, ...], dt: Any, direct: DirectBuffer, index: tuple[int, ...]) -> Any:
    context = current()
    config = context.config.sbuf if direct.memory is MemorySpace.SBUF else context.config.psum
    nbytes = math.prod(shape[1:]) * dt.itemsize
    partition, offset = direct.place(index, shape[0], nbytes)
    if partition < 0 or partition + shape[0] > config.partitions:
        raise fail(
            direct.what,
            f"partitions {partition}..{partition + shape[0] - 1} of {config.partitions}",
        )
    if offset < 0 or offset + nbytes > config.bytes_per_partition:
        raise fail(
            direct.what,
            f"bytes [{offset}, {offset + nbytes}) outside {direct.memory.value.upper()}'s "
            f"{config.bytes_per_partition} per partition",
        )
    st = state()
    key = (direct.memory, partition, offset, tuple(shape), dt.name)
    if key not in st.direct_places:
        _reserve(st, context, direct.memory, offset, nbytes, source_location())
        st.direct_places.add(key)
    return key


def direct_tile(
    shape: tuple[int, ...], dt: Any, direct: DirectBuffer, index: tuple[int, ...], name: str = ""
) -> NkiTensor:
    """The logical tile ``index`` of a directly allocated tensor, at its place."""
    key = _place(shape, dt, direct, index)
    st = state()
    tile = st.direct_tiles.get(key)
    if tile is None:
        _, partition, offset, _, _ = key
        memory = direct.memory.value
        tile = Tile(
            name or current().fresh_name(memory),
            shape,
            dt,
            direct.buffer,
            start_partition=partition,
            offset_bytes=offset,
        )
        st.direct_tiles[key] = tile
    return NkiTensor(tile, Allocation(tile.name))


def _reserve(st: Any, context: Any, memory: MemorySpace, start: int, size: int, where: str) -> None:
    """Take the bytes [start, start + size) that no earlier placement took from the pool."""
    taken = sorted(st.direct_bytes.setdefault(memory, []))
    gaps, at = [], start
    for lo, hi in taken:
        if hi <= at or lo >= start + size:
            continue
        if lo > at:
            gaps.append((at, lo))
        at = max(at, hi)
    if at < start + size:
        gaps.append((at, start + size))
    pool = context.pools[memory]
    for lo, hi in gaps:
        try:
            pool.reserve(f"direct@{lo}", lo, hi - lo, where)
        except OutOfMemoryError:
            # a multi-buffering ring may still hold a dead tile there: give it back, retry
            from hwsim.nki.tensor import _release_dead_slots

            if not _release_dead_slots(st, memory):
                raise
            pool.reserve(f"direct@{lo}", lo, hi - lo, where)
        st.direct_bytes[memory].append((lo, hi))
