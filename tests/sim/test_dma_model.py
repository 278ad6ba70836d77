"""The descriptor-level DMA model: descriptors from access patterns, the efficiency curve, queues
interleaved on an engine, engines that only write the semaphore, and the DGE modes' triggers.

Exact ticks on ``tiny`` (1 tick = 1 ns; 4 DMA engines at 4 B/ns; start latency 100 ns; the
doorbell trigger 10 ns, hardware DGE 60 ns), with HBM made abundant unless a test says so; the
descriptor efficiency is overridden where a test needs the curve to show.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from hwsim import lang
from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.cost.dma import DmaCosts, descriptor_count
from hwsim.dtypes import BF16, FP32
from hwsim.isa import AccessPattern, MemorySpace, contiguous
from hwsim.isa.dma_ops import DgeMode, DmaCopy, TransferSides
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import run

from .helpers import check_illegal

SBUF, HBM = MemorySpace.SBUF, MemorySpace.HBM
FAST_HBM = {"hbm.bandwidth_bytes_per_ns_per_stack": 10_000}


def model_of(config_name: str, **overrides) -> tuple[DmaCosts, int]:
    model = CostModel.for_config(load_config(config_name, overrides))
    return model.dma, model.timebase.base_mhz


# ---- descriptors --------------------------------------------------------------------------------
def tile_of(rows: int, cols: int, width: int, dtype=BF16) -> AccessPattern:
    """rows x cols of an HBM matrix whose rows are ``width`` elements apart."""
    return AccessPattern(HBM, dtype, 0, rows, 0, (cols,), (1,), width, "m")


def test_a_tile_of_a_wider_matrix_is_one_descriptor_per_row():
    # V1b's rhs tile: 128 rows of 512 bf16 (1 KiB) strided 16 KiB apart, into 128 partitions
    src = tile_of(128, 512, 8192)
    dst = contiguous(SBUF, BF16, 128, 512)
    model, _ = model_of("trn1")
    plan = model.plan(0, TransferSides(src, dst))
    assert plan.descriptor_bytes == 1024
    assert [(p.nbytes, p.descriptors) for p in plan.pieces] == [(8192, 8)] * 16
    assert plan.symmetric


def test_descriptors_break_at_either_sides_runs():
    # a contiguous HBM source of 128 x 128 bf16 into 128 partitions: the SBUF side's 256-byte
    # runs decide (128 descriptors), though the source is one run
    src = contiguous(HBM, BF16, 128, 128, tensor="m")
    dst = contiguous(SBUF, BF16, 128, 128)
    model, _ = model_of("trn1")
    assert model.plan(0, TransferSides(src, dst)).descriptor_bytes == 256
    # runs of 3 and 2 elements: boundaries at multiples of 2 and 3 over 12 elements
    assert descriptor_count(12, 3, 2) == 4 + 6 - 2


def test_runs_longer_than_the_descriptor_limit_take_several():
    src = contiguous(HBM, FP32, 1, 32768, tensor="m")  # 128 KiB in one partition
    dst = contiguous(SBUF, FP32, 1, 32768)
    model, _ = model_of("trn1")  # max 64 KiB per descriptor
    plan = model.plan(0, TransferSides(src, dst))
    assert plan.pieces[0].descriptors == 2 and plan.descriptor_bytes == 65536
    # one partition: one engine moves the data, the other 15 only write the semaphore
    assert [p.nbytes for p in plan.pieces[1:]] == [0] * 15 and not plan.symmetric


# ---- the efficiency curve -----------------------------------------------------------------------
def test_efficiency_interpolates_in_log2_and_is_flat_past_the_largest_size():
    model, _ = model_of("trn1", **{"dma.descriptor_efficiency": {256: 0.25, 4096: 1.0}})
    assert model.efficiency_at(256) == Fraction(1, 4)
    assert model.efficiency_at(1024) == Fraction(1, 4) + Fraction(3, 4) * Fraction(1, 2)
    assert model.efficiency_at(65536) == 1


def test_a_descriptor_below_the_smallest_size_costs_the_floor():
    model, _ = model_of("trn1", **{"dma.descriptor_efficiency": {256: 0.25, 4096: 1.0}})
    floor = model.descriptor_ns(256)
    assert floor == Fraction(256, 17) * 4  # 256 B at 17 B/ns x 25%
    assert model.descriptor_ns(4) == model.descriptor_ns(64) == floor


def test_efficiency_slows_a_transfer_by_its_descriptor_size():
    # 32 partitions x 256 B at 50% efficiency: 8 descriptors per engine x 128 ns + the semaphore
    # write (4 B: the 256-byte floor, 128 ns) = 1152 ns after the 100 ns start latency.
    config = load_config("tiny", {**FAST_HBM, "dma.descriptor_efficiency": {256: 0.5}})
    b = ProgramBuilder()
    b.program.add_tensor("x", (32, 64), FP32, "input", np.zeros((32, 64), np.float32))
    b.emit(
        DmaCopy(
            engine="sync",
            dst=contiguous(SBUF, FP32, 32, 64),
            src=contiguous(HBM, FP32, 32, 64, tensor="x"),
        )
    )
    result = run(b.build(), config, numerics=False)
    assert [(p.start_tick, p.end_tick) for p in result.trace.dma] == [(100, 1252)] * 4


# ---- queues and engines -------------------------------------------------------------------------
def two_transfers(
    queues: tuple[int, int],
    partitions: tuple[int, int] = (32, 32),
    engines: tuple[str, str] = ("sync", "gpsimd"),  # both triggers at tick 0
):
    b = ProgramBuilder()
    for i, (queue, rows) in enumerate(zip(queues, partitions, strict=True)):
        name = f"x{i}"
        b.program.add_tensor(name, (rows, 64), FP32, "input", np.zeros((rows, 64), np.float32))
        b.emit(
            DmaCopy(
                engine=engines[i],
                queue=queue,
                dst=contiguous(SBUF, FP32, rows, 64, offset_bytes=i * 256),
                src=contiguous(HBM, FP32, rows, 64, tensor=name),
            )
        )
    return run(b.build(), load_config("tiny", FAST_HBM), numerics=False)


def ends_by_queue(result) -> dict[int, list[int]]:
    ends: dict[int, list[int]] = {}
    for p in result.trace.dma:
        ends.setdefault(p.queue, []).append(p.end_tick)
    return ends


def test_two_queues_share_an_engine_round_robin():
    # each piece alone: 8 x 64 + 1 = 513 ns; two queues served together at half speed each:
    # both end 2 x 513 after they arrive (processor sharing, the fluid limit of round robin)
    result = two_transfers((0, 1))
    assert ends_by_queue(result) == {0: [100 + 1026] * 4, 1: [100 + 1026] * 4}


def test_one_queue_runs_its_transfers_in_order():
    # both from Sync: the second arrives at 110 (after the first's 10 ns trigger) and waits for
    # the head of its queue on each engine
    result = two_transfers((0, 0), engines=("sync", "sync"))
    pieces = sorted(result.trace.dma, key=lambda p: (p.dma_engine, p.start_tick))
    first, second = pieces[0], pieces[1]
    assert (first.queued_tick, first.start_tick, first.end_tick) == (100, 100, 613)
    assert (second.queued_tick, second.start_tick, second.end_tick) == (110, 613, 1126)


def test_an_engine_with_no_rows_still_writes_the_semaphore_and_the_groups_split():
    # queue 0: 1 partition (engine 0 moves 256 B: 65 ns, engines 1-3 only the semaphore write,
    # 1 ns); queue 1: 32 partitions on every engine (513 ns alone). On engine 0 both are served
    # at half speed until queue 0's piece ends at 130 ns; on engines 1-3 queue 0's write ends at
    # 2 ns. Queue 1's pieces then end 65 ns or 1 ns of shared service later than alone.
    result = two_transfers((0, 1), partitions=(1, 32))
    q0 = sorted(
        (p.dma_engine, p.transfer_bytes, p.end_tick - 100) for p in result.trace.dma if p.queue == 0
    )
    q1 = sorted((p.dma_engine, p.end_tick - 100) for p in result.trace.dma if p.queue == 1)
    assert q0 == [(0, 256, 130), (1, 0, 2), (2, 0, 2), (3, 0, 2)]
    assert q1 == [(0, 513 + 65), (1, 513 + 1), (2, 513 + 1), (3, 513 + 1)]


# ---- DGE modes ----------------------------------------------------------------------------------
def dge_program(engine: str, mode: DgeMode, count: int = 1):
    b = ProgramBuilder()
    b.program.add_tensor("x", (32, 64), FP32, "input", np.zeros((32, 64), np.float32))
    for i in range(count):
        b.emit(
            DmaCopy(
                engine=engine,
                queue=i,
                dge_mode=mode,
                dst=contiguous(SBUF, FP32, 32, 64, offset_bytes=i * 256),
                src=contiguous(HBM, FP32, 32, 64, tensor="x"),
            )
        )
    return b.build()


def trigger_and_arrivals(engine: str, mode: DgeMode, count: int = 1):
    result = run(dge_program(engine, mode, count), load_config("tiny", FAST_HBM), numerics=False)
    triggers = [(r.start_tick, r.end_tick) for r in result.trace.instructions]
    arrivals = sorted({(p.queue, p.queued_tick) for p in result.trace.dma})
    return triggers, arrivals


def test_static_descriptors_cost_a_doorbell():
    assert trigger_and_arrivals("sync", DgeMode.none) == ([(0, 10)], [(0, 100)])


def test_software_dge_writes_the_descriptors_on_gpsimd_first():
    # 32 descriptors: (GPSIMD_START 10 + 32 x 2) cycles x 2 ticks = 148; submitted after it
    assert trigger_and_arrivals("gpsimd", DgeMode.swdge) == ([(0, 148)], [(0, 248)])


def test_hardware_dge_blocks_sync_but_overlaps_scalar():
    # Sync waits for its DGE block (60 ns); ScalarE is busy the doorbell's 10 ns and its block
    # generates in the background: the second trigger issues at 10, but the block is busy until
    # 60, so its generation ends at 120.
    assert trigger_and_arrivals("sync", DgeMode.hwdge) == ([(0, 60)], [(0, 160)])
    triggers, arrivals = trigger_and_arrivals("scalar", DgeMode.hwdge, count=2)
    assert triggers == [(0, 10), (60, 70)]
    assert arrivals == [(0, 160), (1, 220)]


@pytest.mark.parametrize(
    ("engine", "mode", "config", "fragment"),
    [
        ("sync", DgeMode.swdge, "tiny", "dge_mode=swdge is triggered by gpsimd, not sync"),
        ("vector", DgeMode.hwdge, "tiny", "dge_mode=hwdge is triggered by sync or scalar"),
        ("sync", DgeMode.hwdge, "trn1", "trn1 has none (dma.hwdge_ns is null)"),
    ],
)
def test_illegal_dge_modes_say_why(engine, mode, config, fragment):
    check_illegal(dge_program(engine, mode).cores[0].streams[engine][0], config, fragment)


def test_the_compiler_default_picks_the_mode_and_the_engine():
    @lang.kernel
    def copy(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        tile = lang.load(x)  # no engine named: the compiler's choice
        nisa.dma_copy(out, tile, engine="sync")  # an engine that cannot run the default
        return out

    x = np.ones((32, 64), np.float32)
    for config, load in (("trn2", ("gpsimd", "swdge")), ("trn1", ("sync", "none"))):
        program = copy.build(x, config=config).program
        (load_instr,) = [
            i for e in program.cores[0].streams.values() for i in e if i.src.memory is HBM
        ]
        (store_instr,) = [
            i for e in program.cores[0].streams.values() for i in e if i.dst.memory is HBM
        ]
        assert (load_instr.engine, load_instr.dge_mode) == load
        assert (store_instr.engine, store_instr.dge_mode) == ("sync", "none")
