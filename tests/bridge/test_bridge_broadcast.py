"""Broadcast operands (bridge.tiling.broadcast): loaded compact and read through stride-0 SBUF
views, repeated tiles loaded once; exact numerics against torch and exact DMA ticks."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.passes import PassSelection
from hwsim.config import load_config
from hwsim.config.timebase import TimeBase
from hwsim.cost import CostModel
from hwsim.cost.dma import WORK_UNITS_PER_TICK, transfer_descriptors
from hwsim.isa import MemorySpace
from hwsim.isa.dma_ops import TransferSides
from tests.bridge.helpers import check_op

#: HBM made abundant so a lone DMA's ticks are its engines' service time alone.
FAST_HBM = {"hbm.bandwidth_bytes_per_ns_per_stack": 10_000}


def _loads(lowered) -> list:
    """The HBM -> SBUF DMAs of a lowered graph, in program order."""
    return [
        ins
        for _, _, ins in lowered.program.cores[0].instructions()
        if getattr(ins, "IS_DMA", False) and ins.src.memory is MemorySpace.HBM
        if ins.dst.memory is MemorySpace.SBUF
    ]


@pytest.mark.parametrize("passes", ["none", None], ids=["unfused", "fused"])
def test_softmax_shift_is_exact_and_loads_the_max_compact(passes):
    def shift(x):  # the decomposed softmax's x - amax (then exp, fused with it when passes are on)
        return x - x.amax(-1, keepdim=True)

    inputs = [torch.randn(2, 3, 40, 24, generator=torch.Generator().manual_seed(0))]
    for fn in (shift, lambda x: torch.exp(shift(x))):
        graph = make_fx(fn)(*inputs)
        lowered = lower_graph(graph, inputs, config="tiny", passes=PassSelection.parse(passes))
        got = lowered.run(inputs, race_check=True).outputs
        columns = [ins for ins in _loads(lowered) if ins.dst.free_sizes == (1,)]
        # the max arrives as [rows, 1] columns: one element per partition, never repeated
        assert columns and all(ins.src.free_sizes == (1,) for ins in columns)
        if fn is shift:  # max and subtract are exact in fp32: equal to torch bit for bit
            assert torch.equal(got, shift(*inputs))
    check_op(lambda x: torch.exp(shift(x)), [(2, 3, 40, 24)])  # ScalarE's exp: fp32 tolerance


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda x, b: x + b, [(48, 40), (40,)]),  # a bias row: partition broadcast
        (lambda x, c: x * c, [(3, 20, 12), (3, 20, 1)]),  # a column per row
        (lambda x, m: x - m, [(4, 6, 10), (4, 1, 10)]),  # a middle dim repeated
        (lambda x, s: x * s, [(5, 7, 9), ()]),  # a 0-d tensor everywhere
        (lambda x, a, b: torch.where(x > 0, a, b), [(6, 33), (6, 1), (1, 33)]),
        (lambda x, m: torch.maximum(x, m), [(2, 3, 4, 5), (3, 1, 5)]),
    ],
    ids=["bias-row", "column", "middle", "scalar", "where", "maximum"],
)
def test_broadcast_operands_match_torch(fn, shapes):
    check_op(fn, shapes)


def test_repeated_tiles_are_loaded_once():
    # [384, 40] + a [40] bias row on trn2 (128 partitions): three row blocks, each reading the
    # same row on every partition (partition stride 0): one DMA of it, read three times
    inputs = [torch.randn(384, 40), torch.randn(40)]
    graph = make_fx(lambda x, b: x + b)(*inputs)
    lowered = lower_graph(graph, inputs, config="trn2", passes=PassSelection.parse("none"))
    loads = _loads(lowered)
    rows = [ins for ins in loads if ins.src.partition_stride == 0]
    assert len(loads) == 4 and len(rows) == 1
    assert (rows[0].src.partitions, rows[0].src.free_sizes) == (128, (40,))
    check_op(lambda x, b: x + b, [(384, 40), (40,)], config="trn2")


def test_the_broadcast_load_is_one_column_dma_costed_by_the_dma_formula():
    # y = m.expand(32, 64) * 2: the only load is m's [32, 1] column; on ``tiny`` (4 DMA
    # engines, 1 tick = 1 ns) its 32 partitions are the 4 engines' lanes of 8, and each engine
    # serves its 8 descriptors of 4 bytes plus the 4-byte completion semaphore, after the start
    # latency. (32 rows, not 16: 16 would be two engines' lanes, and the tile planner then
    # prefers the transposed layout, whose broadcast row spreads over all four.)
    config = load_config("tiny", FAST_HBM)
    inputs = [torch.randn(32, 1)]
    graph = make_fx(lambda m: m.expand(32, 64) * 2.0)(*inputs)
    lowered = lower_graph(graph, inputs, config=config, passes=PassSelection.parse("none"))
    (load,) = _loads(lowered)
    assert (load.src.partitions, load.src.partition_stride, load.src.free_sizes) == (32, 1, (1,))
    assert (load.dst.partitions, load.dst.free_sizes) == (32, (1,))
    sides = TransferSides(load.src, load.dst)
    assert transfer_descriptors(sides) == 32  # one run of 128 B in HBM, 32 of 4 B in SBUF
    model = CostModel.for_config(config).dma
    plan = model.plan(load.queue, sides)
    ns_per_tick = 1000 / TimeBase.from_config(config).base_mhz
    service_ns = 8 * model.descriptor_ns(4) + model.descriptor_ns(4)  # 8 data + the semaphore
    expected_ticks = math.ceil(service_ns / ns_per_tick)
    assert [(p.descriptors, p.nbytes) for p in plan.pieces] == [(8, 32)] * 4
    assert [math.ceil(p.work / WORK_UNITS_PER_TICK) for p in plan.pieces] == [expected_ticks] * 4
    result = lowered.run(inputs).result
    trigger = next(r for r in result.trace.instructions if r.instruction is load)
    pieces = [
        p
        for p in result.trace.dma
        if (p.trigger_engine, p.trigger_pc) == (trigger.engine, trigger.pc)
    ]
    latency = round(config.dma.start_latency_ns / ns_per_tick)
    assert (
        sorted((p.queued_tick, p.end_tick) for p in pieces)
        == [(trigger.start_tick + latency, trigger.start_tick + latency + expected_ticks)] * 4
    )
    # the stride-0 read it replaces: one descriptor per element, 32 x 64
    repeated = replace(load.src, free_sizes=(64,), free_strides=(0,))
    dense = replace(load.dst, free_sizes=(64,), free_strides=(1,))
    assert transfer_descriptors(TransferSides(repeated, dense)) == 32 * 64
