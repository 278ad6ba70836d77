"""The block a new on-chip tile gets: first fit now, or, once a kernel over-allocates, a
provisional one the memory planner places when the kernel returns (``hwsim.lang.planner``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from hwsim.dtypes import DType
from hwsim.isa.ap import MemorySpace
from hwsim.lang.allocator import Block, OutOfMemoryError
from hwsim.lang.planner import MemoryPlanner

if TYPE_CHECKING:
    from hwsim.lang.kernel import KernelContext


def allocate_block(
    context: KernelContext,
    memory: MemorySpace,
    name: str,
    shape: tuple[int, ...],
    dt: DType,
    where: str,
    offset: int | None,
    defer: bool = True,
) -> Block:
    """The block for a new on-chip tile: first fit now, or (when it does not fit, or the
    kernel is already deferred) a provisional one the planner places later; with
    ``defer=False``, OutOfMemoryError instead if it does not fit now."""
    context.state_changes += 1  # the kernel's state changed (``hwsim.lang.repeat``)
    pool = context.pools[memory]
    size = math.prod(shape[1:]) * dt.itemsize
    rows = shape[0] if pool.partitions else None
    elements = math.prod(shape[1:])
    if offset is not None:
        if context.planner is not None:
            raise OutOfMemoryError(
                f"{where}: {name}: offset= placement is not supported once the kernel "
                "over-allocates (the memory planner moves tiles); drop offset="
            )
        block = pool.reserve(name, offset, size, where, rows)
    else:
        if pool.rounded(size) > pool.capacity:
            raise OutOfMemoryError(
                pool.oom_message(name, size, where, rows)
                + (
                    f". One tile cannot be larger than {memory.value.upper()}'s "
                    f"{pool.capacity} bytes per partition"
                )
            )
        found = pool.try_allocate(name, size, where, rows) if context.planner is None else None
        if found is None and context.planner is None:
            found = _reclaimed(context, lambda: pool.try_allocate(name, size, where, rows))
        if found is None and not defer and context.planner is None:
            raise OutOfMemoryError(pool.oom_message(name, size, where, rows))
        if found is None:
            return _deferred_block(context, memory, name, size, where, shape[0], dt, elements)
        block = found
    block.dtype, block.elements, block.tile_partitions = dt, elements, shape[0]
    context.builder.note_allocation(
        memory, name, block.start_partition, shape[0], block.offset, size
    )
    return block


def _reclaimed(context: KernelContext, retry: Callable[[], Block | None]) -> Block | None:
    """Tiles the kernel's reclaimers hold for speed only, given up one at a time (oldest
    first) until ``retry`` finds room; None if none is left to give up."""
    for reclaim in context.reclaimers:
        while reclaim():
            found = retry()
            if found is not None:
                return found
    return None


def _deferred_block(
    context: KernelContext,
    memory: MemorySpace,
    name: str,
    size: int,
    where: str,
    rows: int,
    dt: DType,
    elements: int,
) -> Block:
    pool = context.pools[memory]
    if context.planner is None:
        context.planner = MemoryPlanner(context)
        for pools_memory, each in context.pools.items():
            for live in each.blocks:
                context.planner.adopt(live, live.dtype, live.elements, pools_memory)
        context.planner.find_fills(context.builder.emitted())
    block = Block(
        pool.memory,
        name,
        0,
        pool.rounded(size),
        where,
        False,
        0,
        rows if pool.partitions else 0,
        dt,
        elements,
        rows,
    )
    context.planner.record_alloc(block, dt, elements, memory)
    return block
