"""The scheduler (``hwsim.schedule``): dependency graph edges, exact ticks with and without the list
scheduler, its contract (a topological order, deterministic), and the policy switch.

Exact ticks on the ``tiny`` preset (1 tick = 1 ns; TensorE 1 tick/cycle, VectorE 2 ticks/cycle):
a 32x32 . 32x128 matmul issues for max(min(16, M=32), N=128) = 128 ticks and completes at 160; a
VectorE copy of [32, 128] fp32 issues for max(16, 128) cycles = 256 ticks and completes 10 cycles
(20 ticks) later (``tests/sim/test_core_timing.py`` works the same numbers out).
"""

from __future__ import annotations

import pytest

from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.dtypes import BF16, FP32
from hwsim.errors import HwsimError
from hwsim.isa import MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.tensor_ops import NcMatmul
from hwsim.machine.simulator import run
from hwsim.schedule import (
    InstructionStream,
    build_graph,
    check_order,
    estimate_order,
    list_schedule,
    reorder,
    replay,
    resolve_schedule,
    schedule_order,
)
from hwsim.schedule.dag import AFTER, ORDER, RAW, DependencyGraph

SBUF, PSUM, HBM = MemorySpace.SBUF, MemorySpace.PSUM, MemorySpace.HBM
TINY = load_config("tiny")


def sbuf(offset_bytes: int, n: int = 128):
    return contiguous(SBUF, FP32, 32, n, offset_bytes=offset_bytes)


def copy(dst: int, src: int, engine: str = "vector") -> TensorCopy:
    return TensorCopy(engine=engine, dst=sbuf(dst), src=sbuf(src))


def matmul(psum_offset: int = 0, accumulate: bool = False) -> NcMatmul:
    return NcMatmul(
        engine="tensor",
        dst=contiguous(PSUM, FP32, 32, 128, offset_bytes=psum_offset),
        stationary=contiguous(SBUF, BF16, 32, 32, offset_bytes=12288),
        moving=contiguous(SBUF, BF16, 32, 128, offset_bytes=13312),
        accumulate=accumulate,
    )


def evacuate(dst: int, psum_offset: int = 0) -> TensorCopy:
    return TensorCopy(
        engine="vector",
        dst=sbuf(dst),
        src=contiguous(PSUM, FP32, 32, 128, offset_bytes=psum_offset),
    )


def stream_of(*items) -> InstructionStream:
    stream = InstructionStream()
    for item in items:
        stream.add(item)
    return stream


def timed(stream: InstructionStream, policy: str):
    order = schedule_order(stream, TINY, policy)
    builder = ProgramBuilder()
    replay(builder, stream.items, order)
    result = run(builder.build(), TINY, numerics=False)
    ticks = {
        r.engine + str(r.pc): (r.start_tick, r.end_tick, r.done_tick)
        for r in result.trace.instructions
    }
    return order, ticks, result.summary.total_ns


def test_list_scheduler_moves_an_independent_copy_ahead_of_one_that_waits_exact_ticks():
    # Program order: the evacuation waits for the matmul (done 160), the independent copy queues
    # behind it on VectorE. Scheduled: the copy runs while the matmul does, the evacuation follows.
    stream = stream_of(matmul(), evacuate(512), copy(1024, 1536))
    order, ticks, total = timed(stream, "program")
    assert order == [0, 1, 2]
    assert ticks == {
        "tensor0": (0, 128, 160),
        "vector0": (160, 416, 436),
        "vector1": (416, 672, 692),
    }
    assert total == 692
    order, ticks, total = timed(stream, "list")
    assert order == [0, 2, 1]
    # vector0 is now the copy (0 .. 256, done 276); the evacuation starts when VectorE is free
    # (256 > the matmul's 160) and ends 256 later.
    assert ticks == {"tensor0": (0, 128, 160), "vector0": (0, 256, 276), "vector1": (256, 512, 532)}
    assert total == 532


def streams(stream: InstructionStream, policy: str):
    builder = ProgramBuilder()
    replay(builder, stream.items, schedule_order(stream, TINY, policy))
    return builder.build().cores[0].streams


def test_already_good_order_is_kept():
    # Nothing waits: ties keep program order, so every engine's stream is the program's (the
    # scheduler only interleaves engines differently, [0, 2, 1], which is estimated no faster:
    # program order is returned as it was).
    stream = stream_of(copy(0, 512), copy(1024, 1536), copy(2048, 2560, engine="scalar"))
    graph = build_graph(stream)
    estimates = [CostModel.for_config(TINY).estimate(item) for item in stream.items]
    assert list_schedule(graph, estimates) == ([0, 2, 1], 532)
    assert schedule_order(stream, TINY, "list") == [0, 1, 2]
    assert streams(stream, "list") == streams(stream, "program")


def test_the_estimate_times_a_compute_only_program_as_the_simulator_does():
    stream = stream_of(matmul(), evacuate(512), copy(1024, 1536))
    graph = build_graph(stream)
    estimates = [CostModel.for_config(TINY).estimate(item) for item in stream.items]
    assert estimate_order(graph, estimates, [0, 1, 2]) == 692  # simulated: 692 (above)
    assert list_schedule(graph, estimates) == ([0, 2, 1], 532)  # simulated: 532


def graph_of(*items) -> DependencyGraph:
    return build_graph(stream_of(*items))


def test_memory_edges_raw_war_waw():
    graph = graph_of(
        copy(0, 512),  # 0 writes A (0), reads X
        copy(1024, 0),  # 1 reads A: RAW on 0
        copy(512, 2048),  # 2 writes X, read by 0: WAR
        copy(0, 2048),  # 3 writes A again: WAW on 0, WAR on 1
        copy(2560, 3072),  # 4 independent
    )
    assert graph.preds[1] == {0: RAW}
    assert graph.preds[2] == {0: AFTER}
    assert graph.preds[3] == {0: AFTER, 1: AFTER}
    assert graph.preds[4] == {}


def test_partial_overlap_is_a_dependency_and_disjoint_partitions_are_not():
    low = contiguous(SBUF, FP32, 16, 128, offset_bytes=0)
    high = contiguous(SBUF, FP32, 16, 128, offset_bytes=0, start_partition=16)
    graph = graph_of(
        TensorCopy(engine="vector", dst=low, src=sbuf(512)),
        TensorCopy(engine="scalar", dst=sbuf(1024), src=high),  # other partitions: free
        TensorCopy(engine="scalar", dst=sbuf(1536), src=sbuf(0)),  # all 32: RAW on 0
    )
    assert graph.preds[1] == {}
    assert graph.preds[2] == {0: RAW}


def test_psum_accumulation_groups_stay_behind_their_start_and_their_evacuation():
    graph = graph_of(
        matmul(0),  # 0 starts group A
        matmul(2048),  # 1 starts group B (other bank): independent
        matmul(0, accumulate=True),  # 2 adds to A: RAW on 0
        evacuate(512, 0),  # 3 reads A: RAW on 2 (and on 0, whose bytes 2 did not kill)
        matmul(0),  # 4 restarts A: after the evacuation that read it
    )
    assert graph.preds[1] == {}
    assert graph.preds[2] == {0: RAW}
    assert graph.preds[3][2] == RAW
    assert graph.preds[4][3] == AFTER


def test_barrier_no_reorder_queue_order_and_explicit_edges():
    stream = InstructionStream()
    stream.add(copy(0, 512))
    stream.add(copy(1024, 1536))
    stream.barrier("iteration")
    stream.add(copy(2048, 2560))
    with stream.no_reorder():
        stream.add(copy(3072, 3584))
        with stream.no_reorder():  # nested: one block
            stream.add(copy(4096, 4608, engine="scalar"))
    stream.add(copy(5120, 5632))
    stream.edge(5, 6)
    graph = build_graph(stream)
    assert graph.engines[2] is None
    assert graph.preds[2] == {0: ORDER, 1: ORDER}
    assert graph.preds[3] == {2: ORDER}
    assert graph.preds[5] == {2: ORDER, 4: ORDER}
    assert graph.preds[6] == {2: ORDER, 5: ORDER}
    with pytest.raises(HwsimError, match="first must come first"):
        stream.edge(6, 5)


def dma(queue: int, offset: int, engine: str = "sync") -> DmaCopy:
    src = contiguous(HBM, FP32, 32, 128, tensor="x", offset_bytes=offset)
    return DmaCopy(engine=engine, dst=sbuf(offset), src=src, queue=queue)


def test_dma_queue_order_is_kept_only_when_asked():
    stream = stream_of(dma(0, 0), dma(0, 2048))
    assert build_graph(stream).preds[1] == {}
    assert build_graph(stream, keep_queue_order=True).preds[1] == {0: ORDER}


def test_hbm_placement_orders_the_old_tenant_before_the_new():
    out = contiguous(HBM, FP32, 32, 128, tensor="old")
    new = contiguous(HBM, FP32, 32, 128, tensor="new")
    stream = InstructionStream()
    stream.add(DmaCopy(engine="sync", dst=out, src=sbuf(0), queue=0))  # 0 writes old
    stream.add(DmaCopy(engine="sync", dst=sbuf(512), src=out, queue=1))  # 1 reads old
    stream.place_hbm("new", 0, ["old"])  # 2
    stream.add(DmaCopy(engine="sync", dst=new, src=sbuf(1024), queue=2))  # 3 writes new
    graph = build_graph(stream)
    assert graph.preds[2] == {0: AFTER, 1: AFTER}
    assert graph.preds[3] == {2: AFTER}


def test_engine_state_keeps_program_order_on_its_engine():
    from hwsim.isa.random_ops import Rng

    first = Rng(engine="vector", dst=contiguous(SBUF, FP32, 32, 16, offset_bytes=0))
    second = Rng(engine="vector", dst=contiguous(SBUF, FP32, 32, 16, offset_bytes=512))
    graph = graph_of(first, second)
    assert graph.preds[1] == {0: ORDER}


def test_check_order_refuses_an_order_against_a_dependency():
    graph = graph_of(copy(0, 512), copy(1024, 0))
    check_order(graph, [0, 1])
    with pytest.raises(AssertionError, match="item 1 before item 0"):
        check_order(graph, [1, 0])


def test_schedule_is_deterministic():
    items = [matmul(0), evacuate(512), copy(1024, 1536), matmul(2048), evacuate(2048, 2048)]
    items += [copy(2560 + 512 * i, 512, engine="scalar") for i in range(4)]
    orders = {tuple(schedule_order(stream_of(*items), TINY, "list")) for _ in range(3)}
    assert len(orders) == 1


def test_policy_names():
    assert resolve_schedule("list") == "list"
    with pytest.raises(HwsimError, match="valid: program, list, best"):
        resolve_schedule("greedy")
    with pytest.raises(HwsimError, match="permutation"):
        replay(ProgramBuilder(), [copy(0, 512)], [0, 0])


def test_reorder_a_plain_instruction_list():
    items = [matmul(), evacuate(512), copy(1024, 1536)]
    assert reorder(items, TINY) == [items[0], items[2], items[1]]
    assert reorder(items, TINY, "program") == items
