"""``dma_gather`` (indirect DMA, software DGE): numerics, index errors, legality, exact ticks.

On ``tiny`` (1 tick = 1 ns; GpSimdE 2 ticks/cycle, GPSIMD_START 10 cycles; 4 DMA engines at
4 B/ns, start latency 100 ns, sync trigger 10 ns; ``dma.swdge_descriptor_cycles`` 2), with a
descriptor efficiency of 50% and a 16-byte floor, so per-descriptor costs show (a descriptor of
b >= 16 bytes takes b / 2 ns, a smaller one 8 ns, the 4-byte semaphore write of every piece 8 ns),
and HBM made abundant (10 000 B/ns) so bandwidth sharing stays out of the arithmetic:

    GpSimdE issue = (GPSIMD_START + descriptors * swdge_descriptor_cycles) * 2 ticks
    DMA arrival   = gather start + issue + start latency (descriptors exist only then)
    DMA piece     = descriptors on the engine * their time + 8 ns (semaphore write)

Every program loads the index tile first: 8 partitions over 4 engines = 2 per engine, one 4-byte
descriptor per partition: 2 * 8 + 8 = 24 ns after the 100 ns start latency, so the gather
starts at tick 124.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32, INT32
from hwsim.errors import MemoryAccessError
from hwsim.isa import AccessPattern, MemorySpace, contiguous
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.dma_ops import DmaCopy, DmaGather
from hwsim.lang import isa as nisa
from hwsim.machine.simulator import RunResult, run

from .helpers import check_illegal, tile_ap

SBUF, HBM = MemorySpace.SBUF, MemorySpace.HBM
CONFIG = load_config(
    "tiny", {"dma.descriptor_efficiency": {16: 0.5}, "hbm.bandwidth_bytes_per_ns_per_stack": 10_000}
)
ROWS, COLS = 40, 16
#: The [8, 1] index load: its 8 partitions are DMA engine 0's lane (8 of tiny's 32 partitions per
#: engine [S12]), 8 descriptors of 4 B at 8 ticks each on that one engine.
INDEX_LOADED_TICK = 172


def table_rows(dtype=FP32, cols: int = COLS, stride: int = 1) -> AccessPattern:
    """The whole [ROWS, cols] HBM table 'table' as rows; ``stride`` > 1 reads every stride-th
    element of rows twice as wide."""
    width = cols * stride
    return AccessPattern(HBM, dtype, 0, ROWS, 0, (cols,), (stride,), width, "table")


def gather_program(
    indices: np.ndarray, *, table_dtype=FP32, dst_dtype=FP32, stride: int = 1
) -> tuple[ProgramBuilder, DmaGather, TensorCopy]:
    """Load the indices, gather, then a VectorE copy reads the gathered tile; output via DMA."""
    p = len(indices)
    width = COLS * stride
    b = ProgramBuilder()
    table = np.arange(ROWS * width, dtype=np.float32).reshape(ROWS, width) / 8
    b.program.add_tensor("table", (ROWS, width), table_dtype, "input", table)
    b.program.add_tensor("idx", (p, 1), INT32, "input", np.asarray(indices, np.int32).reshape(p, 1))
    b.program.add_tensor("out", (p, COLS), FP32, "output")
    idx = contiguous(SBUF, INT32, p, 1)
    rows = contiguous(SBUF, dst_dtype, p, COLS, offset_bytes=64)
    copy = contiguous(SBUF, FP32, p, COLS, offset_bytes=192)
    b.emit(DmaCopy(engine="sync", dst=idx, src=contiguous(HBM, INT32, p, 1, tensor="idx")))
    gather = b.emit(
        DmaGather(
            engine="gpsimd",
            dst=rows,
            src=table_rows(table_dtype, stride=stride),
            indices=idx,
            queue=1,
        )
    )
    consumer = b.emit(TensorCopy(engine="vector", dst=copy, src=rows))
    b.emit(DmaCopy(engine="sync", dst=contiguous(HBM, FP32, p, COLS, tensor="out"), src=copy))
    return b, gather, consumer  # type: ignore[return-value]


def record_of(result: RunResult, instruction):
    return next(r for r in result.trace.instructions if r.instruction is instruction)


def completion(result: RunResult, queue: int) -> list[int]:
    return sorted(
        u.tick for u in result.trace.semaphore_updates if u.semaphore == f"S.dma.q{queue}"
    )


# ---- numerics ---------------------------------------------------------------------------------
def test_gathers_rows_including_repeated_indices():
    indices = np.array([3, 0, 39, 3, 7, 3, 1, 39])
    b, _, _ = gather_program(indices)
    result = run(b.build(), CONFIG, race_check=True)
    table = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) / 8
    np.testing.assert_array_equal(result.outputs["out"], table[indices])


def test_gather_converts_dtype_like_dma_copy():
    # bf16 table -> fp32 tile: the bf16 values widen exactly (k / 8 for k < 256 is exact in bf16).
    indices = np.array([2, 2, 0, 1])
    b, _, _ = gather_program(indices, table_dtype=BF16)
    result = run(b.build(), CONFIG)
    table = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS) / 8
    np.testing.assert_array_equal(result.outputs["out"], table[indices])


def test_gather_of_strided_rows_reads_every_stride_th_element():
    indices = np.array([5, 1, 5, 0])
    b, _, _ = gather_program(indices, stride=2)
    result = run(b.build(), CONFIG)
    table = np.arange(ROWS * COLS * 2, dtype=np.float32).reshape(ROWS, COLS * 2) / 8
    np.testing.assert_array_equal(result.outputs["out"], table[indices][:, ::2])


@pytest.mark.parametrize(("bad", "partition"), [(40, 2), (-1, 5)])
def test_out_of_range_index_names_instruction_partition_and_value(bad, partition):
    indices = np.array([0, 1, 2, 3, 4, 5, 6, 7])
    indices[partition] = bad
    b, _, _ = gather_program(indices)
    with pytest.raises(MemoryAccessError) as error:
        run(b.build(), CONFIG)
    message = str(error.value)
    assert message.startswith("dma_gather on gpsimd")
    assert f"index {bad} at partition {partition}" in message
    assert "[0, 40)" in message and "'table'" in message


def test_cost_does_not_depend_on_index_values():
    def ticks(indices, numerics):
        b, _, _ = gather_program(np.array(indices))
        result = run(b.build(), CONFIG, numerics=numerics)
        return [(r.start_tick, r.end_tick) for r in result.trace.instructions], [
            (d.start_tick, d.end_tick) for d in result.trace.dma
        ]

    assert ticks([0] * 8, True) == ticks([39, 1, 2, 3, 4, 5, 6, 0], True)
    assert ticks([0] * 8, True) == ticks([0] * 8, False)


# ---- exact ticks ------------------------------------------------------------------------------
def test_gpsimd_issue_builds_one_descriptor_per_row():
    # 8 rows, unit-stride: 8 descriptors; (10 + 8 * 2) cycles * 2 ticks = 52 ticks.
    b, gather, _ = gather_program(np.arange(8))
    result = run(b.build(), CONFIG, numerics=False)
    record = record_of(result, gather)
    assert record.engine == "gpsimd"
    assert (record.ready_tick, record.start_tick) == (0, INDEX_LOADED_TICK)
    assert record.end_tick - record.start_tick == 52


def test_dma_moves_the_rows_after_the_descriptors_with_per_row_overheads():
    # Arrival 172 + 52 + 100 = 324. The 8 rows land in partitions 0-7, engine 0's lane: 8 rows of
    # 64 B on that engine, 8 * 32 + 8 = 264 -> 588; the other engines write the semaphore only.
    b, _, consumer = gather_program(np.arange(8))
    result = run(b.build(), CONFIG, numerics=False)
    pieces = [d for d in result.trace.dma if d.trigger_engine == "gpsimd"]
    moving = [p for p in pieces if p.transfer_bytes]
    assert [p.dma_engine for p in moving] == [0]
    assert all(p.queue == 1 and p.descriptors == 8 and p.transfer_bytes == 512 for p in moving)
    assert all((p.queued_tick, p.start_tick, p.end_tick) == (324, 324, 588) for p in moving)
    assert completion(result, 1) == [588]
    # The dependent VectorE copy was waiting and starts exactly at the completion.
    copy = record_of(result, consumer)
    assert copy.ready_tick < 588 and copy.start_tick == 588


def test_strided_rows_cost_one_descriptor_per_element_run():
    # Row stride 2: 16 one-element runs per row, 128 descriptors: issue (10 + 128 * 2) * 2 =
    # 532 ticks, 172 -> 704; arrival 804; engine 0 (the rows' lane) all 8 rows: 128 * 8 + 8 =
    # 1032 -> 1836.
    b, gather, consumer = gather_program(np.arange(8), stride=2)
    result = run(b.build(), CONFIG, numerics=False)
    record = record_of(result, gather)
    assert (record.start_tick, record.end_tick) == (172, 704)
    (piece,) = (d for d in result.trace.dma if d.trigger_engine == "gpsimd" and d.transfer_bytes)
    assert piece.descriptors == 128 and (piece.start_tick, piece.end_tick) == (804, 1836)
    assert record_of(result, consumer).start_tick == 1836


def test_gather_waits_for_a_write_anywhere_in_the_table():
    # A scratch table is written by a DMA (queue 0) in rows the builder cannot know are read:
    # the gather reads the whole table, so it waits for that write's completion.
    b = ProgramBuilder()
    b.program.add_tensor("src", (2, COLS), FP32, "input", np.ones((2, COLS), np.float32))
    b.program.add_tensor("table", (ROWS, COLS), FP32, "scratch")
    b.program.add_tensor("idx", (4, 1), INT32, "input", np.array([[38], [39], [38], [0]], np.int32))
    staged = contiguous(SBUF, FP32, 2, COLS, offset_bytes=256)
    b.emit(DmaCopy(engine="sync", dst=staged, src=contiguous(HBM, FP32, 2, COLS, tensor="src")))
    last_rows = AccessPattern(HBM, FP32, 0, 2, 38 * COLS * 4, (COLS,), (1,), COLS, "table")
    write = b.emit(DmaCopy(engine="sync", dst=last_rows, src=staged, queue=2))
    idx = contiguous(SBUF, INT32, 4, 1)
    b.emit(DmaCopy(engine="sync", dst=idx, src=contiguous(HBM, INT32, 4, 1, tensor="idx")))
    rows = contiguous(SBUF, FP32, 4, COLS, offset_bytes=64)
    gather = b.emit(DmaGather(engine="gpsimd", dst=rows, src=table_rows(), indices=idx, queue=1))
    assert ("S.dma.q2", 1) in gather.waits
    result = run(b.build(), CONFIG, numerics=False, race_check=True)
    assert record_of(result, gather).start_tick >= completion(result, 2)[0]
    assert record_of(result, write).engine == "sync"


def test_race_checker_is_quiet_on_a_kernel_language_gather():
    @lang.kernel
    def embed(table, ids):
        out = lang.ndarray((ids.shape[0], table.shape[1]), table.dtype, buffer=lang.hbm)
        index = lang.load(ids)
        rows = lang.ndarray((ids.shape[0], table.shape[1]), table.dtype, lang.sbuf)
        nisa.dma_gather(rows, table, index)
        lang.store(out, rows)
        return out

    table = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    ids = np.array([[4], [4], [0], [39]], np.int32)
    result = embed(table, ids, config="tiny", race_check=True)
    np.testing.assert_array_equal(result.output, table[ids[:, 0]])


# ---- legality ---------------------------------------------------------------------------------
def gather_of(**changes) -> DmaGather:
    fields = {
        "engine": "gpsimd",
        "dst": tile_ap(8, COLS, offset_bytes=64),
        "src": table_rows(),
        "indices": tile_ap(8, 1, dtype=INT32),
    }
    fields.update(changes)
    return DmaGather(**fields)


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [
        ({"engine": "sync"}, ["cannot run on engine 'sync'", "gpsimd"]),
        ({"indices": tile_ap(8, 1)}, ["'indices' must be int32, not fp32"]),
        (
            {"indices": contiguous(HBM, INT32, 8, 1, tensor="table")},
            ["'indices' must be an SBUF tile, not hbm"],
        ),
        ({"src": tile_ap(8, COLS, offset_bytes=1024)}, ["'src' must be an HBM table, not sbuf"]),
        ({"dst": contiguous(HBM, FP32, 8, COLS, tensor="out")}, ["'dst' must be an SBUF tile"]),
        ({"indices": tile_ap(8, 2, dtype=INT32)}, ["indices shape (8, 2) must be [8, 1]"]),
        ({"indices": tile_ap(4, 1, dtype=INT32)}, ["indices shape (4, 1) must be [8, 1]"]),
        (
            {"indices": contiguous(SBUF, INT32, 8, 1, start_partition=8)},
            ["indices start at partition 8 and dst at 0"],
        ),
        ({"dst": tile_ap(8, COLS - 1, offset_bytes=64)}, ["a src row has 16 elements", "15"]),
        ({"queue": 4}, ["queue 4 does not exist"]),
        ({"dst": tile_ap(33, COLS, offset_bytes=64)}, ["partitions [0, 33)", "0..32"]),
    ],
)
def test_illegal_gathers_say_what_is_wrong(changes, fragments):
    check_illegal(gather_of(**changes), CONFIG, *fragments)


def test_a_legal_gather_passes_its_check():
    from hwsim.isa import MachineSpec

    gather_of().check(MachineSpec(CONFIG))


def test_traffic_statistics_count_the_rows_moved_not_the_table():
    from hwsim.trace.facts import instruction_facts

    indices = np.array([3, 0, 39, 3, 7, 3, 1, 39])
    _, gather, _ = gather_program(indices)
    facts = instruction_facts(gather)
    hbm, sbuf = 0, 1  # the memories' order in the facts' byte tuples
    assert facts.read_bytes[hbm] == len(indices) * COLS * 4  # 8 rows, not the 40-row table
    assert facts.read_bytes[sbuf] == len(indices) * 4  # the indices
