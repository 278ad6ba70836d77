"""Statistics of hand-built traces against values computed by hand (see synthetic_traces)."""

from __future__ import annotations

import pytest
from synthetic_traces import MATMUL_FLOPS, TRN2, pipeline_trace, small_trace

from hwsim.report.peaks import peak_flops_per_s
from hwsim.trace.critical_path import critical_path
from hwsim.trace.stats import downsample_steps, summarize
from hwsim.trace.summary import RunSummary

T = 10_000  # ticks of small_trace
NS_PER_TICK = 1000 / 4800


@pytest.fixture(scope="module")
def summary() -> RunSummary:
    return summarize(small_trace())


def test_total_time(summary: RunSummary) -> None:
    assert summary.total_ticks == T
    assert summary.total_ns == pytest.approx(T * NS_PER_TICK)
    assert summary.to_dict()["total_time"] == pytest.approx(T * NS_PER_TICK / 1e9)


def test_busy_and_counts_per_engine(summary: RunSummary) -> None:
    engines = summary.engines
    assert list(engines) == ["tensor", "vector", "scalar", "gpsimd", "sync"]
    assert {e: v.busy_pct for e, v in engines.items()} == {
        "tensor": 20.0,  # 4000..6000
        "vector": 10.0,  # 6500..7500
        "scalar": 0.0,
        "gpsimd": 5.0,  # 0..500
        "sync": 15.0,  # 0..1000 + 8000..8500
    }
    assert {e: v.instructions for e, v in engines.items()} == {
        "tensor": 1,
        "vector": 1,
        "scalar": 0,
        "gpsimd": 1,
        "sync": 2,
    }
    assert engines["sync"].opcodes == {"fake_dma": 2}
    assert summary.to_dict()["tensor_engine_active_time_percent"] == 20.0
    assert summary.to_dict()["sync_instruction_count"] == 2


def test_semaphore_wait_attributed_to_the_releasing_semaphore(summary: RunSummary) -> None:
    engines = summary.engines
    assert engines["tensor"].wait_ticks_by_source == {"dma": 4000}  # S.dma.q0 at 4000
    assert engines["vector"].wait_ticks_by_source == {"tensor": 6500}
    assert engines["sync"].wait_ticks_by_source == {"vector": 7000}  # ready 1000, start 8000
    assert engines["tensor"].wait_pct_by_source["dma"] == 40.0
    assert engines["gpsimd"].wait_ticks == 0


def test_mfu_hfu_against_the_config_peak(summary: RunSummary) -> None:
    seconds = T / 4800e6
    expected = 100 * MATMUL_FLOPS / (peak_flops_per_s(TRN2, "bf16") * seconds)
    assert expected == pytest.approx(10.24)
    assert summary.mfu_pct == pytest.approx(expected)
    assert summary.to_dict()["hfu_estimated_percent"] == pytest.approx(expected)
    trace = small_trace()
    trace.meta["model_flops"] = MATMUL_FLOPS // 2
    assert summarize(trace).mfu_pct == pytest.approx(expected / 2)


def test_hbm_bytes_mbu_and_dma_active(summary: RunSummary) -> None:
    assert summary.hbm_read_bytes == 65536 and summary.hbm_write_bytes == 65536
    assert summary.hbm_bytes == 131072
    per_core_bytes_per_ns = 725 / 2
    assert summary.mbu_pct == pytest.approx(
        100 * 131072 / (per_core_bytes_per_ns * T * NS_PER_TICK)
    )
    # union of [1000, 4000) and [8500, 10000)
    assert summary.dma_active_pct == 45.0
    assert summary.dma.transfers == 2 and summary.dma.pieces == 4
    assert summary.idle_pct == pytest.approx(10.0)  # nothing runs in [6000, 6500) and [7500, 8000)


def test_occupancy_peak_and_series(summary: RunSummary) -> None:
    sbuf, psum = summary.memory["sbuf"], summary.memory["psum"]
    # a (64 KiB) and d (8 KiB) live from 0; d freed at 600; a freed as b starts at 6500; b to 8500
    assert sbuf.peak_bytes == 65536 + 8192
    assert sbuf.series_bytes == [73728, 65536, 65536, 0]
    assert sbuf.series_ns == pytest.approx(
        [0, 600 * NS_PER_TICK, 6500 * NS_PER_TICK, 8500 * NS_PER_TICK]
    )
    assert psum.peak_bytes == 128 * 2048
    assert psum.peak_pct == 12.5
    assert sbuf.allocations == 4  # a, b, d and one never touched


def test_critical_path_walks_back_through_the_releasing_signals() -> None:
    steps = critical_path(small_trace())
    assert [(s.kind, s.resource, s.pc, s.share_ticks) for s in steps] == [
        ("dma", "dma", 1, 1500),  # store transfer 8500..10000, released by its trigger's end
        ("instruction", "sync", 1, 500),  # store trigger, released by S.vector at 8000
        ("instruction", "vector", 0, 1500),  # released by S.tensor at 6500
        ("instruction", "tensor", 0, 2500),  # released by S.dma.q0 at 4000
        ("dma", "dma", 0, 3000),  # load transfer, released by its trigger's end at 1000
        ("instruction", "sync", 0, 1000),  # the first instruction
    ]
    assert sum(s.share_ticks for s in steps) == T


def test_critical_path_summary_and_verdict(summary: RunSummary) -> None:
    path = summary.critical_path
    assert path.length == 6 and path.instructions == 4 and path.dma_transfers == 2
    assert path.share_pct == {"dma": 45.0, "tensor": 25.0, "sync": 15.0, "vector": 15.0}
    # nothing saturated, little idle time: the critical path names the limiter
    assert summary.bottleneck == (
        "DMA-limited (no resource saturated): critical path 45% on DMA; busiest TensorE busy 20%, "
        "DMA active 45%"
    )
    assert summary.bottleneck_resource == "dma"


def test_dma_bound_by_small_descriptors_says_so() -> None:
    # 4 KiB pieces in 8 descriptors of 512 B: on trn2's own curve (512 B: 0.681, calibrated on
    # K2-v2) they move at ~68% of the bandwidth
    s = summarize(pipeline_trace(40, dma_ticks=3000, matmul_ticks=1000))
    assert s.bottleneck.startswith("descriptor-overhead-bound: DMA active 9")
    assert "descriptors average 512 B" in s.bottleneck
    assert s.bottleneck_resource == "dma"
    assert s.dma.data_efficiency_pct == pytest.approx(68.1, abs=0.1)
    assert s.engines["tensor"].wait_pct_by_source["dma"] > 50


def test_dma_bound_by_the_engines_bandwidth() -> None:
    s = summarize(pipeline_trace(40, dma_ticks=3000, matmul_ticks=1000, descriptors=1))
    assert s.bottleneck.startswith("DMA-bandwidth-bound: DMA active 9")
    assert s.dma.descriptor_bytes_mean == 4096


def test_hbm_bound_when_mbu_is_high() -> None:
    # 64 KiB per 1000 ticks (208 ns on trn2) is 315 GB/s of the core's 375 GB/s share
    s = summarize(pipeline_trace(40, dma_ticks=1000, matmul_ticks=400, trigger=100))
    assert s.mbu_pct > 60 and s.bottleneck.startswith("HBM-bandwidth-bound")


def test_trigger_bound_when_the_triggering_engine_is_saturated_by_triggers() -> None:
    # each load's trigger holds Sync 3000 ticks, the transfer takes 500: Sync bounds the run
    s = summarize(pipeline_trace(40, dma_ticks=500, matmul_ticks=500, trigger=3000))
    assert s.bottleneck.startswith("trigger-bound on Sync: Sync busy 9"), s.bottleneck
    assert s.bottleneck_resource == "sync"
    assert s.engines["sync"].trigger_busy_pct > 90


def test_compute_bound_verdict() -> None:
    s = summarize(pipeline_trace(40, dma_ticks=1000, matmul_ticks=3000))
    assert s.bottleneck.startswith("compute-bound on TensorE: TensorE busy 9")
    assert s.bottleneck_resource == "tensor"
    assert s.critical_path.share_pct["tensor"] > 90


def test_latency_bound_verdict() -> None:
    s = summarize(pipeline_trace(40, dma_ticks=500, matmul_ticks=500, gap_ticks=5000))
    assert s.bottleneck.startswith("sync/latency-bound: nothing busy")
    assert s.idle_pct > 50
    assert s.bottleneck_resource == "latency"


def test_cli_contract_keys(summary: RunSummary) -> None:
    data = summary.to_dict()
    for key in ("total_ns", "total_ticks", "engines", "mfu_pct", "hbm_bytes", "bottleneck"):
        assert key in data
    for engine in data["engines"].values():
        assert {"busy_pct", "instructions"} <= set(engine)


def test_empty_trace_is_summarised() -> None:
    trace = small_trace()
    trace.instructions, trace.dma, trace.semaphore_updates = [], [], []
    s = summarize(trace)
    assert s.total_ticks == 0 and s.mfu_pct == 0.0 and s.critical_path.length == 0


def test_downsample_keeps_the_maximum_of_each_bin() -> None:
    import numpy as np

    ticks = np.arange(10_000)
    level = np.zeros(10_000, np.int64)
    level[4321] = 99
    t, v = downsample_steps(ticks, level, 100)
    assert len(t) <= 100 and v.max() == 99


def test_buffers_sharing_addresses_count_each_byte_once() -> None:
    from hwsim.trace.occupancy import AllocationLife, occupancy_steps

    def life(name: str, p0: int, parts: int, offset: int, size: int, first: int, last: int):
        return AllocationLife(0, "psum", name, p0, parts, offset, size, first, last)

    lives = [
        life("reused1", 0, 128, 0, 2048, 0, 100),
        life("reused2", 0, 128, 0, 2048, 0, 100),  # same bytes, same (merged) lifetime
        life("half", 0, 64, 1024, 2048, 50, 150),  # overlaps the first half of partitions
        life("apart", 0, 128, 8192, 1024, 120, 200),
    ]
    ticks, level = occupancy_steps(lives, "psum")
    assert ticks.tolist() == [0, 50, 100, 120, 150, 200]
    union = 128 * 2048 + 64 * 1024  # reused buffer plus the part of "half" outside it
    assert level.tolist() == [128 * 2048, union, 64 * 2048, 64 * 2048 + 128 * 1024, 128 * 1024, 0]


def test_occupancy_of_overlapping_buffers_equals_the_union_at_every_tick() -> None:
    """Random buffers sharing addresses: the level at each tick equals the area of the union
    of the buffers live then (first <= tick < last), computed cell by cell."""
    import random

    from hwsim.trace.occupancy import AllocationLife, occupancy_steps

    rng = random.Random(7)
    lives = []
    for i in range(60):
        p0, x0, first = rng.randrange(0, 128, 16), rng.randrange(0, 4096, 256), rng.randrange(99)
        parts, size = rng.randrange(16, 129 - p0, 16), rng.randrange(256, 4097 - x0, 256)
        lives.append(AllocationLife(0, "sbuf", f"b{i}", p0, parts, x0, size, first, first + 30))
    ticks, level = occupancy_steps(lives, "sbuf")
    for tick, value in zip(ticks.tolist(), level.tolist(), strict=True):
        covered = set()
        for b in lives:
            if b.first_tick <= tick < b.last_tick:
                rows = range(b.start_partition, b.start_partition + b.partitions, 16)
                cols = range(b.offset_bytes, b.offset_bytes + b.size_bytes, 256)
                covered |= {(r, c) for r in rows for c in cols}
        assert value == len(covered) * 16 * 256, tick
