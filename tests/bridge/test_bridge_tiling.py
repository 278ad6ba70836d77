"""The tile planner: every element covered exactly once, tile limits kept, reductions grouped."""

from __future__ import annotations

import itertools
import math

import pytest

from hwsim.bridge.tiling import HbmMatrix
from hwsim.bridge.tiling.space import Dim, TileRef, TilingError, coalesce, plan
from hwsim.bridge.values import HbmValue, contiguous_strides
from hwsim.dtypes import FP32
from hwsim.lang.tiles import Tile, hbm


def elements(tile: TileRef, operand: int) -> list[int]:
    """Element offsets operand ``operand`` touches in ``tile``."""
    offsets = []
    ranges = [range(n) for n in tile.free_sizes]
    for p in range(tile.partitions):
        for index in itertools.product(*ranges):
            offset = tile.offsets[operand] + p * tile.partition_strides[operand]
            offset += sum(i * s for i, s in zip(index, tile.free_strides[operand], strict=True))
            offsets.append(offset)
    return offsets


SPACES = [
    ((1,), None),
    ((257,), None),
    ((130, 257), None),
    ((2, 3, 7), (0, 2, 1)),  # a permuted input
    ((5, 1, 257), None),
    ((3, 4, 5, 6, 7), (4, 2, 0, 3, 1)),
]


@pytest.mark.parametrize("space", SPACES, ids=str)
@pytest.mark.parametrize("budget", [1, 5, 64, 2048])
def test_pointwise_plan_covers_each_element_once(space, budget):
    shape, order = space
    out = contiguous_strides(shape)
    if order is None:
        src = out
    else:  # the input is a permutation of a contiguous tensor
        permuted = tuple(shape[d] for d in order)
        base = contiguous_strides(permuted)
        src = tuple(base[order.index(d)] for d in range(len(shape)))
    tiles = plan(shape, [(0, out), (0, src)], pmax=32, free_budget=budget)
    seen_out = [e for t in tiles for e in elements(t, 0)]
    seen_src = [e for t in tiles for e in elements(t, 1)]
    assert sorted(seen_out) == list(range(math.prod(shape)))
    assert sorted(seen_src) == list(range(math.prod(shape)))
    for t in tiles:
        assert t.partitions in range(1, 33)
        assert t.free_elements <= max(budget, 1) or t.free_elements == 1


def test_broadcast_operand_reads_repeat():
    tiles = plan((130, 7), [(0, (7, 1)), (0, (0, 1))], pmax=32, free_budget=64)
    assert sorted(e for t in tiles for e in elements(t, 1)) == sorted(list(range(7)) * 130)


def test_reduction_plan_groups_each_output():
    shape = (3, 5000)
    tiles = plan(shape, [(0, (1, 0)), (0, (5000, 1))], pmax=32, free_budget=2048, reduce_dims=[1])
    keys = {t.key for t in tiles}
    assert len(keys) == 1  # 3 rows fit one partition tile
    assert [t.first for t in tiles] == [True, False, False]
    assert [t.last for t in tiles] == [False, False, True]
    assert sorted(e for t in tiles for e in elements(t, 1)) == list(range(15000))


def test_whole_row_that_does_not_fit_raises():
    with pytest.raises(TilingError):
        plan((3, 300), [(0, (300, 1))], pmax=32, free_budget=256, reduce_dims=[1], whole_free=True)


def test_coalesce_merges_only_compatible_dims():
    dims = [Dim(2, (12, 12)), Dim(3, (4, 0)), Dim(4, (1, 1))]
    assert coalesce(dims) == dims  # the broadcast operand blocks both merges
    dense = [Dim(2, (12,)), Dim(3, (4,)), Dim(4, (1,))]
    assert coalesce(dense) == [Dim(24, (1,))]


def test_hbm_matrix_blocks_must_lie_inside_the_matrix():
    matrix = HbmMatrix(HbmValue.contiguous(Tile("w", (40 * 300,), FP32, hbm), (40, 300)))
    assert matrix[0:40, 100:300].free_sizes == (200,)
    assert matrix[10:, :].partitions == 30
    for index in (
        (slice(0, 41), slice(0, 300)),  # numpy would clamp the rows to 40
        (slice(0, 40), slice(250, 320)),
        (slice(-5, None), slice(0, 300)),
        (slice(5, 5), slice(0, 300)),
    ):
        with pytest.raises(ValueError, match=r"HbmMatrix w: block rows .* is not inside"):
            matrix[index]


def _cost_plan(shape, src_strides, *, cost: bool):
    from hwsim.bridge.tiling.estimate import tile_cost
    from hwsim.config import load_config

    n = math.prod(shape)
    out = HbmValue.contiguous(Tile("o", (n,), FP32, hbm), shape)
    span = 1 + sum((k - 1) * s for k, s in zip(shape, src_strides, strict=True))
    src = HbmValue(Tile("s", (span,), FP32, hbm), shape, src_strides)
    estimate = tile_cost([out, src], [FP32, FP32], config=load_config("trn2")) if cost else None
    operands = [(0, out.strides), (0, src.strides)]
    return plan(shape, operands, pmax=128, free_budget=2048, cost=estimate), estimate


def test_a_cost_puts_a_transposed_dim_on_partitions_and_keeps_contiguous_dims_free():
    # out[4, 256] = src^T: by default the 256 contiguous elements of out are free and 4 rows
    # are on partitions (4 of 16 DMA engines busy, every src element its own descriptor)
    default, _ = _cost_plan((4, 256), (1, 4), cost=False)
    chosen, estimate = _cost_plan((4, 256), (1, 4), cost=True)
    assert [t.partitions for t in default] == [4]
    assert [t.partitions for t in chosen] == [128, 128]  # 256 on partitions, the 4 rows free
    assert sum(map(estimate, chosen)) < sum(map(estimate, default))
    assert sorted(e for t in chosen for e in elements(t, 1)) == list(range(1024))
    assert sorted(e for t in chosen for e in elements(t, 0)) == list(range(1024))
    # rows of a padded matrix (stride 100) keep the default: rows on partitions, the
    # contiguous dim free
    dense, _ = _cost_plan((512, 64), (100, 1), cost=True)
    assert [(t.partitions, t.free_sizes) for t in dense] == [(128, (64,))] * 4
