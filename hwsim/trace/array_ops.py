"""Array steps over trace columns (int64 numpy arrays): distinct values, sums in the order met,
sorts by (group, key), runs of equal keys, and interval arithmetic (unions, integrals, bins).

Each is what a plain ``np.unique`` / ``np.lexsort`` / Python loop would give, faster on the
shapes traces have (few distinct codes, records mostly in order already);
``tests/trace/test_summary_paths.py`` checks each against a brute-force version.
"""

from __future__ import annotations

import numpy as np

#: Keys spanning fewer values than this are summed by counting (``sums_in_order_met``).
_DENSE_KEYS = 64


#: Combined (group, key) keys must stay below this (int64, with room to spare).
KEY_LIMIT = 1 << 62


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by a sort (numpy's hashing path for a bare ``np.unique`` is several
    times slower on these int64 columns)."""
    ordered = np.sort(values)
    return ordered[np.append(True, ordered[1:] != ordered[:-1])] if len(ordered) else ordered


def sums_in_order_met(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` in the order first met, and per key the sum of its ``values``."""
    if len(keys) and int(keys.max()) - int(keys.min()) < _DENSE_KEYS:  # a few codes: count them
        low = int(keys.min())
        code = keys - low
        sums = np.zeros(int(code.max()) + 1, np.int64)
        np.add.at(sums, code, values)
        present = np.flatnonzero(np.bincount(code))
        first = [int(np.argmax(code == c)) for c in present.tolist()]
        order = present[np.argsort(first)]
        return order + low, sums[order]
    found, inverse = np.unique(keys, return_inverse=True)
    inverse = inverse.reshape(-1)
    first_index = np.full(len(found), len(keys))
    np.minimum.at(first_index, inverse, np.arange(len(keys)))
    sums = np.zeros(len(found), np.int64)
    np.add.at(sums, inverse, values)
    order = np.argsort(first_index)
    return found[order], sums[order]


def sum_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys ascending, the sum of ``values`` per key), int64."""
    distinct, inverse = np.unique(keys, return_inverse=True)
    sums = np.zeros(len(distinct), np.int64)
    np.add.at(sums, inverse.reshape(-1), values)
    return distinct, sums


def order_by_group_and_key(group: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Record indices by (group, key, index), as ``np.lexsort((arange, key, group))``: one stable
    sort of a combined key (none if the records are in that order already, as the simulator
    writes each engine's instructions)."""
    if not len(group):
        return np.zeros(0, np.int64)
    span = int(key.max()) + 1
    if group.min() >= 0 and key.min() >= 0 and (int(group.max()) + 1) * span < KEY_LIMIT:
        combined = group * span + key
        if bool((combined[1:] >= combined[:-1]).all()):
            return np.arange(len(combined), dtype=np.int64)
        if group.max() < 1 << 16 and bool((key[1:] >= key[:-1]).all()):
            # in key order already (semaphore updates, by tick): a stable sort by group keeps
            # it, and sorts 16-bit groups by radix
            return np.argsort(group.astype(np.uint16), kind="stable").astype(np.int64)
        return np.argsort(combined, kind="stable")
    return np.lexsort((np.arange(len(group)), key, group))


def dense_codes(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of small non-negative keys, without a sort."""
    present = np.bincount(keys) > 0 if len(keys) else np.zeros(0, bool)
    code = np.cumsum(present) - 1
    return np.flatnonzero(present), code[keys]


def unique_runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)``, sorting one key per run of equal keys (the
    pieces of a DMA transfer are mostly consecutive), not one per record."""
    if not len(keys):
        return keys, np.zeros(0, np.int64)
    head = np.flatnonzero(np.append(True, keys[1:] != keys[:-1]))
    distinct, head_code = np.unique(keys[head], return_inverse=True)
    lengths = np.diff(np.append(head, len(keys)))
    return distinct, np.repeat(head_code.reshape(-1).astype(np.int64), lengths)


def union_ticks(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of [start, end) intervals."""
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    # a new disjoint block starts where an interval begins after everything before it ended
    new_block = np.empty(len(s), bool)
    new_block[0] = True
    new_block[1:] = s[1:] > reach[:-1]
    block_id = np.cumsum(new_block) - 1
    block_start = s[new_block]
    block_end = np.zeros(len(block_start), np.int64)
    np.maximum.at(block_end, block_id, reach)
    return int((block_end - block_start).sum())


def interval_integral(
    starts: np.ndarray, ends: np.ndarray, rates: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """∫₀ᵗ Σᵢ rateᵢ·[startᵢ ≤ τ < endᵢ] dτ at each t in ``at`` (float64, same unit as rate·time)."""
    if not len(starts):
        return np.zeros(len(at))
    times = np.concatenate([starts, ends]).astype(np.float64)
    deltas = np.concatenate([rates, -rates]).astype(np.float64)
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    level = np.cumsum(deltas)
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])
    return np.interp(at, times, area, left=0.0, right=area[-1])


def binned_amounts(
    starts: np.ndarray, ends: np.ndarray, amounts: np.ndarray, edges: np.ndarray
) -> np.ndarray:
    """Per-bin totals of ``amounts`` spread evenly over each [start, end) (empty spans: 1 tick)."""
    ends = np.maximum(ends, starts + 1)
    rates = amounts / (ends - starts)
    return np.diff(interval_integral(starts, ends, rates, edges))


def bin_edges(total_ticks: int, bins: int) -> np.ndarray:
    """``bins`` equal bins over [0, total_ticks] (fewer if the run has fewer ticks than bins)."""
    count = max(1, min(bins, total_ticks))
    return np.linspace(0, max(total_ticks, 1), count + 1)
