"""The simulator's columnar record sequences read as the record lists they replace: the same
records (Python ints, the instruction objects), equal to a list of them, indexable and sliceable,
and the statistics' columns read without building a record."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.machine.simulator import run
from hwsim.trace.analysis import engine_codes, engine_of_code, int_column
from hwsim.trace.columns import (
    DmaRecordColumns,
    InstructionColumns,
    SemaphoreColumns,
    concatenated,
)
from hwsim.trace.records import InstructionRecord, SemaphoreUpdate
from hwsim.workloads.resolve import resolve_workload


@pytest.fixture(scope="module")
def trace():
    from hwsim.config import load_config

    config = load_config("trn2")
    program = resolve_workload("gemm:256x256x256:bf16").program(config, False)
    return run(program, config, numerics=False, summarize=False).trace, program


def test_the_simulator_writes_columns_that_read_as_records(trace):
    trace, program = trace
    assert isinstance(trace.instructions, InstructionColumns)
    assert isinstance(trace.dma, DmaRecordColumns)
    assert isinstance(trace.semaphore_updates, SemaphoreColumns)
    records = list(trace.instructions)
    assert len(records) == len(trace.instructions) == program.instruction_count
    for i, record in enumerate(records):
        assert type(record) is InstructionRecord
        assert record == trace.instructions[i] == trace.instructions[i - len(records)]
        assert record.instruction is program.cores[record.core].streams[record.engine][record.pc]
        assert all(type(v) is int for v in (record.ready_tick, record.start_tick, record.done_tick))
        assert record.ready_tick <= record.start_tick <= record.end_tick
    assert trace.instructions == records and records == list(trace.instructions)
    assert trace.instructions[2:5] == records[2:5] and trace.instructions[::2] == records[::2]
    with pytest.raises(IndexError):
        trace.instructions[len(records)]
    assert trace.instructions != records[:-1]


def test_columns_equal_the_fields_of_their_records(trace):
    trace, _ = trace
    for records, fields in (
        (trace.instructions, ("core", "pc", "ready_tick", "start_tick", "end_tick", "done_tick")),
        (trace.dma, ("core", "dma_engine", "queue", "piece", "start_tick", "end_tick")),
        (trace.semaphore_updates, ("core", "tick", "value", "source_pc")),
    ):
        as_list = list(records)
        for field in fields:
            expected = [getattr(r, field) for r in as_list]
            assert int_column(records, field).tolist() == expected
            assert int_column(as_list, field).tolist() == expected
    codes = engine_codes(trace.instructions)
    assert [engine_of_code(c) for c in codes.tolist()] == [r.engine for r in trace.instructions]
    ticks = int_column(trace.semaphore_updates, "tick")
    assert np.all(np.diff(ticks) >= 0)  # by tick, as the trace promises


def test_concatenated_merges_name_lists():
    def updates(core, names, codes):
        ints = {
            "core": np.full(len(codes), core, np.int64),
            "tick": np.arange(len(codes), dtype=np.int64),
            "value": np.ones(len(codes), np.int64),
            "source_pc": np.zeros(len(codes), np.int64),
        }
        strings = {
            "semaphore": (np.array(codes, np.int64), names),
            "source_engine": (np.zeros(len(codes), np.int64), ["dma"]),
        }
        return SemaphoreColumns(ints, strings, {})

    both = concatenated(SemaphoreColumns, [updates(0, ["a", "b"], [1, 0]), updates(1, ["b"], [0])])
    assert [u.semaphore for u in both] == ["b", "a", "b"]
    assert both[2] == SemaphoreUpdate(1, 0, "b", 1, "dma", 0)
    empty = concatenated(SemaphoreColumns, [])
    assert len(empty) == 0 and list(empty) == [] and empty == []
    assert int_column(empty, "tick").tolist() == []
