"""The summary's array shortcuts give what the plain definitions give: the simulator's columns and
the same records as lists (the generic paths) summarise to the same bytes, and each shortcut
(grouped unions, predecessors, the critical path's chain, sorts, dense look-ups) equals a
brute-force version on random data, ties and edge cases included."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.machine.simulator import run
from hwsim.trace.analysis import InstructionIndex
from hwsim.trace.array_ops import order_by_group_and_key, sums_in_order_met, union_ticks
from hwsim.trace.critical_path import _chain
from hwsim.trace.groups import Grouped
from hwsim.trace.stats import summarize
from hwsim.workloads.resolve import resolve_workload


@pytest.mark.parametrize(
    ("workload", "config"),
    [("gemm:256x256x256:bf16", "trn2"), ("matmul_optimized", "trn1"), ("softmax", "trn1")],
)
def test_columns_and_lists_summarise_to_the_same_bytes(workload: str, config: str) -> None:
    hw = load_config(config)
    trace = run(resolve_workload(workload).program(hw, False), hw, numerics=False).trace
    as_lists = dataclasses.replace(
        trace,
        instructions=list(trace.instructions),
        dma=list(trace.dma),
        semaphore_updates=list(trace.semaphore_updates),
    )
    assert json.dumps(summarize(trace).to_dict()) == json.dumps(summarize(as_lists).to_dict())


def _random_intervals(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    group = rng.integers(0, 5, n) * 7 + 3  # sparse keys
    start = rng.integers(0, 60, n)
    end = start + rng.integers(0, 9, n)  # empty intervals too
    return group, start, end


@pytest.mark.parametrize("seed", range(5))
def test_grouped_unions_and_predecessors_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    group, start, end = _random_intervals(rng, 200)
    grouped = Grouped(group, start, end)
    keys, ticks = grouped.union_ticks_by_group()
    assert keys.tolist() == sorted(set(group.tolist()))
    for key, total in zip(keys.tolist(), ticks.tolist(), strict=True):
        mine = group == key
        assert total == union_ticks(start[mine], end[mine])
    order = np.lexsort((np.arange(len(group)), start, group))
    assert grouped.order.tolist() == order.tolist()
    expected = np.full(len(group), -1)
    for a, b in itertools.pairwise(order.tolist()):
        if group[a] == group[b]:
            expected[b] = a
    assert grouped.previous().tolist() == expected.tolist()
    blocks = grouped.blocks()
    assert union_ticks(blocks.start, blocks.end) == union_ticks(start, end)


def test_grouped_handles_no_records_and_already_sorted_records() -> None:
    empty = np.zeros(0, np.int64)
    grouped = Grouped(empty, empty, empty)
    assert grouped.previous().tolist() == [] and grouped.union_ticks_by_group()[1].tolist() == []
    group, start = np.array([0, 0, 1, 1]), np.array([0, 5, 0, 5])
    grouped = Grouped(group, start, start + 5)
    assert grouped.previous().tolist() == [-1, 0, -1, 2]
    assert grouped.union_ticks_by_group()[1].tolist() == [10, 10]


@pytest.mark.parametrize("seed", range(5))
def test_order_by_group_and_key_is_a_stable_lexsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    group, key = rng.integers(0, 4, 300), rng.integers(0, 20, 300)
    for k in (key, np.sort(key)):  # the second: already in key order
        expected = np.lexsort((np.arange(300), k, group))
        assert order_by_group_and_key(group, k).tolist() == expected.tolist()


def test_chain_follows_predecessors_and_stops_on_a_loop() -> None:
    pred = np.array([-1, 0, 1, 2, 1, 3])
    assert _chain(pred, 5).tolist() == [5, 3, 2, 1, 0]
    assert _chain(pred, 0).tolist() == [0]
    loop = np.array([1, 2, 0])
    assert _chain(loop, 0).tolist() == [0, 1, 2, 0]  # len(pred) + 1 nodes, as the walk had


def test_sums_in_order_met_for_few_and_many_distinct_keys() -> None:
    rng = np.random.default_rng(0)
    for keys in (rng.integers(-2, 5, 100), rng.integers(0, 10**6, 100)):
        values = rng.integers(0, 100, 100)
        found, sums = sums_in_order_met(keys, values)
        expected: dict[int, int] = {}
        for k, v in zip(keys.tolist(), values.tolist(), strict=True):
            expected[k] = expected.get(k, 0) + v
        assert found.tolist() == list(expected) and sums.tolist() == list(expected.values())


def test_instruction_index_finds_by_position_and_by_search() -> None:
    hw = load_config("trn2")
    trace = run(resolve_workload("gemm:256x256x256:bf16").program(hw, False), hw).trace
    dense = InstructionIndex(trace)
    assert dense._streams is not None  # the simulator's streams: pcs 0, 1, ... each
    searched = InstructionIndex(trace)
    searched._streams = None
    keys = np.concatenate([dense._keys, dense._keys + 1, [0, 2**62]])  # present and absent
    assert dense.find_many(keys).tolist() == searched.find_many(keys).tolist()
