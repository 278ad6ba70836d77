"""Row plans for ops over whole rows (softmax, layer norm, var, cumsum): rows on partitions, each
row's elements on the free axis — whole in one tile when the row fits the SBUF budget, else cut
into chunks that the op visits in order (once or twice) and combines.

The choice is made while lowering, from the config: ``row_budget`` turns the SBUF bytes an op
keeps per row element into elements per partition (at most ``TilingOptions.row_elements``), and
``plan_rows`` plans with that budget; a row longer than that becomes several chunks of the same
row tile (the planner's reduce loops and free-dim chunks), which ``RowPlan.groups`` hands out
together. Chunks are balanced: a row of n elements with budget b is cut into chunks of
c = ceil(n / ceil(n / b)) elements (the last one shorter), ceil(n / c) = ceil(n / b) of them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hwsim.bridge.context import LoweringContext
from hwsim.bridge.tiling.space import TileRef, plan
from hwsim.bridge.values import HbmValue

#: Share of SBUF (per partition) a row op's tiles may take.
ROW_SBUF_SHARE = 3 / 4


def row_budget(ctx: LoweringContext, bytes_per_element: int) -> int:
    """Most row elements per partition of one tile when the op keeps ``bytes_per_element`` SBUF
    bytes per element (every ring and temporary it allocates), never above ``row_elements``."""
    fits = int(ctx.limits.sbuf_bytes * ROW_SBUF_SHARE) // max(1, bytes_per_element)
    return max(1, min(ctx.options.row_elements, fits))


def chunk_count(row: int, budget: int) -> int:
    """Chunks a row of ``row`` elements takes with ``budget`` elements per tile (1: whole)."""
    return max(1, -(-row // budget))


@dataclass(frozen=True)
class RowPlan:
    """Tiles of a row op grouped per row tile: ``groups[i]`` are the chunks of the i-th row tile
    (same partitions, in row order; one tile when the rows fit whole). ``largest`` is the
    [partitions, free] shape that sizes every buffer ring."""

    groups: list[list[TileRef]]
    largest: tuple[int, int]
    row: int  # elements per row (product of the row dims)
    chunk: int  # most elements of one chunk (the balanced budget)

    @property
    def chunked(self) -> bool:
        return any(len(group) > 1 for group in self.groups)

    @property
    def chunks_per_row(self) -> int:
        return max(len(group) for group in self.groups)


def plan_rows(
    ctx: LoweringContext,
    shape: Sequence[int],
    operands: Sequence[HbmValue],
    dims: Sequence[int],
    budget: int,
) -> RowPlan:
    """Plan ``operands`` (views broadcast to ``shape``; the output first) with ``dims`` the row:
    whole rows per tile if a row fits ``budget`` elements, else balanced chunks."""
    ndim = max(1, len(shape))
    row = math.prod(shape[d % ndim] for d in dims) if shape else 1
    chunk = -(-row // chunk_count(row, budget))
    tiles = plan(
        shape,
        [(v.offset, v.strides) for v in operands],
        pmax=ctx.pmax,
        free_budget=chunk,
        reduce_dims=dims,
    )
    groups = [list(group) for _, group in itertools.groupby(tiles, key=lambda t: t.key)]
    largest = (max(t.partitions for t in tiles), max(t.free_elements for t in tiles))
    return RowPlan(groups, largest, row, chunk)
