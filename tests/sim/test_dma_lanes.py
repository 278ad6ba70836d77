"""Which DMA engines serve a transfer: each engine serves a fixed lane of SBUF partitions (8 of
128 over 16 engines [S12]), so a transfer into few partitions runs on few engines (the [S12]
example 1: [4, 4096] bf16 on one engine, 32 KiB in 1,416 ns, HARDWARE.md §5 V18)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.cost.dma import lane_partitions
from hwsim.dtypes import BF16
from hwsim.isa import MemorySpace, contiguous
from hwsim.isa.dma_ops import TransferSides

SBUF, HBM = MemorySpace.SBUF, MemorySpace.HBM


def plan(config: str, partitions: int, free: int, start: int = 0, dst=SBUF):
    dma = CostModel.for_config(load_config(config)).dma
    src = contiguous(HBM, BF16, partitions, free, tensor="x")
    if dst is SBUF:
        target = contiguous(SBUF, BF16, partitions, free, start_partition=start)
    else:
        target = contiguous(HBM, BF16, partitions, free, tensor="y")
    return dma, dma.plan(0, TransferSides(src, target))


def moving(p):
    return {piece.engine: (piece.nbytes, piece.descriptors) for piece in p.pieces if piece.nbytes}


@pytest.mark.parametrize(
    ("start", "partitions", "engines", "lane", "shares"),
    [
        (0, 128, 16, 8, [8] * 16),
        (0, 4, 16, 8, [4] + [0] * 15),
        (6, 4, 16, 8, [2, 2] + [0] * 14),
        (120, 8, 16, 8, [0] * 15 + [8]),
        (0, 20, 4, 8, [8, 8, 4, 0]),
    ],
)
def test_lane_partitions(start, partitions, engines, lane, shares):
    assert lane_partitions(start, partitions, lane, engines) == shares


def test_v18_four_partitions_run_on_one_engine_at_its_bandwidth():
    dma, p = plan("trn2", 4, 4096)
    # 4 rows of 8 KiB: 4 descriptors on engine 0, saturated (8 KiB: efficiency 1.0) at 23 B/ns
    assert moving(p) == {0: (32768, 4)}
    assert dma.busiest_engine_ns(p) >= Fraction(32768, 23)
    semaphore = dma.descriptor_ns(4)
    assert dma.descriptor_ns(8192) * 4 + semaphore == Fraction(32768, 23) + semaphore


def test_partitions_straddling_two_lanes_use_both_engines():
    _, p = plan("trn2", 4, 4096, start=6)
    assert moving(p) == {0: (16384, 2), 1: (16384, 2)}


def test_128_partitions_use_every_engine_equally():
    _, p = plan("trn2", 128, 1024)
    assert moving(p) == {e: (8 * 2048, 8) for e in range(16)}


def test_hbm_to_hbm_splits_rows_evenly():
    _, p = plan("trn2", 4, 4096, dst=HBM)
    # no SBUF side: no lanes; rows back to back on both sides make one run, split by rows
    assert sorted(moving(p)) == [0, 1, 2, 3]
