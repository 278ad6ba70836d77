"""Statistics of a run derived only from its trace (engines keep no counters).

``summarize(trace)`` returns a ``RunSummary`` (``hwsim.trace.summary``), whose ``to_dict()`` has
three layers of keys:

- the CLI contract (DESIGN.md "Command line"): ``total_ns``, ``total_ticks``, ``engines`` (per
  engine ``busy_pct``, ``instructions``, ...), ``mfu_pct``, ``hbm_bytes``, ``bottleneck``;
- Neuron Explorer Summary names where one exists (HARDWARE.md §6): ``total_time`` (s),
  ``mfu_estimated_percent``, ``hfu_estimated_percent``, ``mbu_estimated_percent``,
  ``dma_active_time_percent``, ``<engine>_engine_active_time_percent``,
  ``<engine>_instruction_count``, ``hardware_flops``, ``{hbm,sbuf,psum}_{read,write}_bytes``;
- details: ``dma``, ``memory`` (SBUF/PSUM peak and step series), ``critical_path``, ``peaks``,
  ``tags``.

Definitions (T = total_ticks, the last instruction done or DMA piece end; multi-core traces divide
by T x cores, so per-engine numbers are averages over the cores):

- busy %: sum of the engine's slices (start..end, the issue interval) / T.
- semaphore wait: start - ready of each instruction, attributed to the semaphore met last (its
  class: ``dma`` for DMA-queue semaphores, else the signalling engine; ``other`` when the wait was
  not a semaphore, e.g. a shared access port).
- HFU: TensorE FLOPs executed / (peak FLOP/s of their dtype x time); MFU: ``meta['model_flops']``
  (else the TensorE FLOPs) / (peak of the dominant dtype x time).
- MBU: HBM bytes read + written by DMA / (per-core HBM bandwidth x time).
- DMA active %: union of all DMA piece intervals / T.
- critical path: see ``critical_path``; bottleneck: see ``bottleneck_verdict``.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from hwsim.trace.analysis import (
    Dependencies,
    cores_of,
    dma_columns,
    end_tick,
    engine_code,
    engine_codes,
    engine_label,
    engine_of_code,
    int_column,
    semaphore_waits,
)
from hwsim.trace.array_ops import union_ticks
from hwsim.trace.critical_path import CriticalStep, critical_path, critical_path_stats
from hwsim.trace.facts import HBM, PSUM, SBUF, FactsMemo, InstructionFacts, facts_memo
from hwsim.trace.gc_pause import cyclic_gc_paused
from hwsim.trace.groups import GROUP_WIDTH, Grouped, TraceGroups
from hwsim.trace.occupancy import AllocationLife, OperandSpans, occupancy_steps
from hwsim.trace.records import Trace, engine_order
from hwsim.trace.summary import (
    SUMMARY_SCHEMA,
    DmaStats,
    EngineStats,
    FlopStats,
    MemoryStats,
    Peaks,
    RunSummary,
    TagStats,
)
from hwsim.trace.verdict import bottleneck_verdict

__all__ = ["SUMMARY_SCHEMA", "CriticalStep", "bottleneck_verdict", "critical_path", "summarize"]
#: Step series in the summary are reduced (keeping each bin's maximum) to at most this many points.
SERIES_MAX_POINTS = 2000
#: Source tags listed in the summary (by busy time).
TOP_TAGS = 20


def summarize(trace: Trace) -> RunSummary:
    """All statistics of ``trace`` (see the module docstring). The collector is paused meanwhile
    (``cyclic_gc_paused``): a summary allocates per distinct instruction and per path link, and
    each collection would scan the whole program and trace."""
    with cyclic_gc_paused():
        return _summarize(trace)


def _summarize(trace: Trace) -> RunSummary:
    facts = facts_memo()
    total = end_tick(trace)
    cores = len(cores_of(trace))
    span = max(total, 1) * cores  # ticks of machine time per resource
    deps = Dependencies(trace, facts)
    groups = TraceGroups(trace)

    eng = engine_codes(trace.instructions)
    start = int_column(trace.instructions, "start_tick")
    end = int_column(trace.instructions, "end_tick")
    ready = int_column(trace.instructions, "ready_tick")
    spans = OperandSpans()
    work = _instruction_work(trace, facts, spans)
    waits, binding = semaphore_waits(trace, deps, ready, start)

    engines = _engine_stats(eng, start, end, ready, work.is_dma, work.opcodes, waits, span)
    dma = _dma_stats(trace, facts, deps, groups, total, span)
    memory = _memory_stats(trace, spans.lifetimes(trace.memory_allocations))
    peaks = _peaks(trace, cores, work.tensor_flops_by_dtype)
    total_s = total / trace.base_mhz / 1e6
    flops = _flop_stats(trace, work, peaks, total_s)
    hbm_read, hbm_write = work.read_bytes[HBM], work.write_bytes[HBM]
    hbm_bytes = hbm_read + hbm_write
    mbu = 100.0 * hbm_bytes / (peaks.hbm_bytes_per_s * total_s) if total_s else 0.0
    path = critical_path_stats(trace, deps, binding, total, groups)
    # the union of all slices and pieces is that of each engine's busy blocks (far fewer)
    engine_blocks, dma_blocks = groups.instructions.blocks(), groups.dma.blocks()
    busy_any = union_ticks(
        np.concatenate([engine_blocks.start, dma_blocks.start]),
        np.concatenate([engine_blocks.end, dma_blocks.end]),
    )
    idle_pct = 100.0 * (1 - busy_any / max(total, 1)) if total else 0.0
    verdict, resource, evidence = bottleneck_verdict(
        engines, dma, mbu, idle_pct, path.share_pct, flops.mfu_pct
    )
    return RunSummary(
        schema=SUMMARY_SCHEMA,
        workload=trace.meta.get("workload", ""),
        config_name=trace.meta.get("config_name", _config_name(trace)),
        config_hash=trace.meta.get("config_hash", ""),
        cores=cores,
        base_mhz=trace.base_mhz,
        total_ticks=total,
        total_ns=total * 1000 / trace.base_mhz,
        engines=engines,
        instructions=len(trace.instructions),
        mfu_pct=flops.mfu_pct,
        hfu_pct=flops.hfu_pct,
        mbu_pct=mbu,
        dma_active_pct=dma.active_pct,
        idle_pct=idle_pct,
        hbm_bytes=hbm_bytes,
        hbm_read_bytes=hbm_read,
        hbm_write_bytes=hbm_write,
        bottleneck=verdict,
        bottleneck_resource=resource,
        bottleneck_evidence=evidence,
        sbuf_read_bytes=work.read_bytes[SBUF],
        sbuf_write_bytes=work.write_bytes[SBUF],
        psum_read_bytes=work.read_bytes[PSUM],
        psum_write_bytes=work.write_bytes[PSUM],
        flops=flops,
        dma=dma,
        memory=memory,
        critical_path=path,
        peaks=peaks,
        tags=_top_tags(work.tags, trace.base_mhz),
    )


# ---- per-instruction work -----------------------------------------------------------------------


class _Work(NamedTuple):
    opcodes: Counter[tuple[str, str]]
    tensor_flops_by_dtype: dict[str, int]
    hardware_flops: int
    read_bytes: list[int]
    write_bytes: list[int]
    tags: dict[
        str, list[int]
    ]  # tag -> [instructions, flops, hbm bytes, busy, first start, last end]
    is_dma: np.ndarray  # per record: a DMA trigger


def _instruction_work(trace: Trace, facts: FactsMemo, spans: OperandSpans) -> _Work:
    """Opcode counts, FLOPs, bytes and per-tag totals, plus the operand spans SBUF/PSUM
    lifetimes need: one pass finds each record's distinct facts, the rest is numpy over columns
    (a record costs a dictionary look-up, not a walk through its facts)."""
    recs = trace.instructions
    fid, table = facts.ids(recs)
    k = len(table)
    columns = zip(*table, strict=True) if k else [()] * len(InstructionFacts._fields)
    # Each field of the distinct facts, as a tuple of that field's values (so not typed as one).
    facts_of: Any = InstructionFacts(*columns)
    flops_k = np.array(facts_of.flops, np.int64).reshape(k)
    reads_k = _int_rows(facts_of.read_bytes, 3)
    writes_k = _int_rows(facts_of.write_bytes, 3)
    opcodes_k, opcode_of = _codes(facts_of.opcode)
    dtypes_k, dtype_of = _codes([dtype or "bf16" for dtype in facts_of.dtype])
    tags_k, tag_of = _codes(
        [tag or opcode for tag, opcode in zip(facts_of.tag, facts_of.opcode, strict=True)]
    )

    eng = engine_codes(recs)
    flop = flops_k[fid]
    counts_k = np.bincount(fid, minlength=k)
    reads = [int(x) for x in counts_k @ reads_k]
    writes = [int(x) for x in counts_k @ writes_k]
    hbm = (reads_k[:, HBM] + writes_k[:, HBM])[fid]

    width = max(len(opcode_of), 1)  # (engine, opcode) pairs as one code
    pairs, pair_count = np.unique(eng * width + opcodes_k[fid], return_counts=True)
    opcodes = Counter(
        {
            (engine_of_code(p // width), opcode_of[p % width]): n
            for p, n in zip(pairs.tolist(), pair_count.tolist(), strict=True)
        }
    )
    mask = (eng == engine_code("tensor")) & (flop > 0)
    by_code = np.bincount(dtypes_k[fid][mask], weights=flop[mask], minlength=len(dtype_of))
    by_dtype = {d: int(by_code[c]) for c, d in enumerate(dtype_of) if by_code[c]}

    tag = tags_k[fid]
    start = int_column(recs, "start_tick")
    end = int_column(recs, "end_tick")
    if trace.memory_allocations and k:
        _add_spans(
            spans, int_column(recs, "core"), fid, table, start, int_column(recs, "done_tick")
        )
    n_tags = len(tag_of)
    first = np.full(n_tags, np.iinfo(np.int64).max)
    last = np.zeros(n_tags, np.int64)
    np.minimum.at(first, tag, start)
    np.maximum.at(last, tag, end)
    counts = np.bincount(tag, minlength=n_tags)
    tag_flops = np.bincount(tag, weights=flop, minlength=n_tags)
    tag_hbm = np.bincount(tag, weights=hbm, minlength=n_tags)
    busy = np.bincount(tag, weights=end - start, minlength=n_tags)
    tags = {
        name: [
            int(counts[i]),
            int(tag_flops[i]),
            int(tag_hbm[i]),
            int(busy[i]),
            int(first[i]),
            int(last[i]),
        ]
        for i, name in enumerate(tag_of)
    }
    is_dma = np.array(facts_of.is_dma, bool).reshape(k)[fid]
    return _Work(opcodes, by_dtype, int(flop.sum()), reads, writes, tags, is_dma)


def _int_rows(rows: Sequence[tuple[int, ...]], width: int) -> np.ndarray:
    """Tuples of ``width`` ints as an int64 array of shape (len(rows), width)."""
    flat = itertools.chain.from_iterable(rows)
    return np.fromiter(flat, np.int64, len(rows) * width).reshape(len(rows), width)


def _codes(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Each value's code (int64 array) and the distinct values in order of first appearance."""
    found: dict[str, int] = {}
    codes = np.array([found.setdefault(v, len(found)) for v in values], np.int64)
    return codes, list(found)


def _add_spans(
    spans: OperandSpans,
    core: np.ndarray,
    fid: np.ndarray,
    table: list[Any],
    start: np.ndarray,
    done: np.ndarray,
) -> None:
    """The operand spans of every record, each distinct (core, span) once with the first start
    and last done of the records using it: found per (core, distinct facts), then spread over
    the facts' spans as arrays (a span is a tile many distinct instructions share)."""
    k = len(table)
    first, last, used = _min_max_by(core * k + fid, start, done)
    per_fact = [f.spans for f in table]
    count = np.fromiter(map(len, per_fact), np.int64, k)
    flat = list(itertools.chain.from_iterable(per_fact))
    if not flat:
        return
    # distinct span objects (the facts of instructions sharing an operand share its span)
    objects, span_ids = np.unique(
        np.fromiter(map(id, flat), np.int64, len(flat)), return_inverse=True
    )
    first_seen = np.full(len(objects), len(flat))
    np.minimum.at(first_seen, span_ids.reshape(-1), np.arange(len(flat)))
    distinct = [flat[i] for i in first_seen.tolist()]
    # per used (core, facts) pair, its facts' spans: span_ids[offset[f] : offset[f] + count[f]]
    facts_of = used % k
    n = count[facts_of]
    pair = np.repeat(np.arange(len(used)), n)
    at = np.repeat(np.cumsum(count)[facts_of] - count[facts_of] - (np.cumsum(n) - n), n)
    span = span_ids.reshape(-1)[at + np.arange(len(at))]
    width = len(objects)
    span_first, span_last, found = _min_max_by(
        used[pair] // k * width + span, first[used][pair], last[used][pair]
    )
    memory = [span[0] for span in distinct]
    names = list(dict.fromkeys(memory))
    memory_code = np.array([names.index(name) for name in memory], np.int64)
    bound = _int_rows([span[1:] for span in distinct], 4)
    which = found % width
    spans.add_many(
        found // width,
        memory_code[which],
        names,
        np.column_stack([bound[which], span_first[found], span_last[found]]),
    )


def _min_max_by(
    group: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group key (small non-negative ints): the least ``low`` and greatest ``high`` of its
    rows (indexed by key), and the keys that have rows, ascending."""
    size = int(group.max()) + 1 if len(group) else 0
    least = np.full(size, np.iinfo(np.int64).max)
    greatest = np.full(size, np.iinfo(np.int64).min)
    np.minimum.at(least, group, low)
    np.maximum.at(greatest, group, high)
    return least, greatest, np.flatnonzero(np.bincount(group, minlength=size))


def _np(values: array[int]) -> np.ndarray:
    return np.frombuffer(values, np.int64) if len(values) else np.zeros(0, np.int64)


def _engine_stats(
    eng: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    ready: np.ndarray,
    is_dma: np.ndarray,
    opcodes: Counter[tuple[str, str]],
    waits: dict[str, Counter[str]],
    span: int,
) -> dict[str, EngineStats]:
    names = engine_order(e for e, _ in opcodes)
    size = max(engine_code(n) for n in names) + 1
    busy = np.bincount(eng, weights=end - start, minlength=size)
    triggers = np.bincount(eng[is_dma], weights=(end - start)[is_dma], minlength=size)
    waited = np.bincount(eng, weights=start - ready, minlength=size)
    count = np.bincount(eng, minlength=size)
    out = {}
    for name in names:
        code = engine_code(name)
        by_source = waits.get(name, Counter())
        out[name] = EngineStats(
            label=engine_label(name),
            busy_ticks=int(busy[code]),
            busy_pct=100.0 * busy[code] / span,
            trigger_busy_pct=100.0 * triggers[code] / span,
            instructions=int(count[code]),
            opcodes=dict(
                sorted(
                    ((op, n) for (e, op), n in opcodes.items() if e == name), key=lambda x: -x[1]
                )
            ),
            wait_ticks=int(waited[code]),
            wait_pct=100.0 * waited[code] / span,
            wait_ticks_by_source=dict(by_source),
            wait_pct_by_source={k: 100.0 * v / span for k, v in by_source.items()},
        )
    return out


def _dma_stats(
    trace: Trace, facts: FactsMemo, deps: Dependencies, groups: TraceGroups, total: int, span: int
) -> DmaStats:
    dma = trace.dma
    cols = dma_columns(trace, facts, deps.instructions, deps.transfers)
    nbytes = int_column(dma, "transfer_bytes")
    queue = int_column(dma, "queue")
    # Pieces of several queues on one engine overlap (they share it), so busy is their union;
    # active is the union per core of the engines' busy blocks.
    blocks = groups.dma.blocks()
    keys, union = groups.dma.union_ticks_by_group()
    busy = np.bincount(keys % GROUP_WIDTH, weights=union) if len(keys) else np.zeros(0)
    by_core = Grouped(blocks.group // GROUP_WIDTH, blocks.start, blocks.end)
    active = int(by_core.union_ticks_by_group()[1].sum())
    per_queue = np.bincount(queue, weights=nbytes) if len(dma) else np.zeros(0)
    efficiency, descriptor = _dma_efficiency(trace, nbytes, int_column(dma, "descriptors"))
    return DmaStats(
        active_ticks=active,
        active_pct=100.0 * active / span if total else 0.0,
        transfers=len(deps.transfers),
        pieces=len(dma),
        bytes=int(nbytes.sum()),
        hbm_read_bytes=int(cols.hbm_read.sum()),
        hbm_write_bytes=int(cols.hbm_write.sum()),
        engine_busy_pct={int(k): 100.0 * v / span for k, v in enumerate(busy) if v},
        queue_bytes={int(k): int(v) for k, v in enumerate(per_queue) if v},
        data_efficiency_pct=efficiency,
        descriptor_bytes_mean=descriptor,
    )


def _dma_efficiency(
    trace: Trace, nbytes: np.ndarray, descriptors: np.ndarray
) -> tuple[float, float]:
    """(bytes-weighted share of the DMA engines' bandwidth the data moved at, by the config's
    descriptor efficiency curve; bytes-weighted mean descriptor size), over pieces with data."""
    moving = (nbytes > 0) & (descriptors > 0)
    if trace.config is None or not moving.any():
        return 100.0, 0.0
    from hwsim.cost import CostModel

    dma = CostModel.for_config(trace.config).dma
    size = nbytes[moving] // descriptors[moving]
    weight = nbytes[moving].astype(np.float64)
    sizes, inverse = np.unique(size, return_inverse=True)
    curve = np.array([float(dma.efficiency_at(int(s))) for s in sizes])[inverse]
    total = float(weight.sum())
    return 100.0 * float((curve * weight).sum()) / total, float((size * weight).sum()) / total


def _memory_stats(trace: Trace, lives: list[AllocationLife]) -> dict[str, MemoryStats]:
    config = trace.config
    out = {}
    for memory in ("sbuf", "psum"):
        ticks, level = occupancy_steps(lives, memory)
        section = getattr(config, memory, None)
        capacity = section.partitions * section.bytes_per_partition if section else 0
        ticks, level = downsample_steps(ticks, level, SERIES_MAX_POINTS)
        out[memory] = MemoryStats(
            peak_bytes=int(level.max()) if len(level) else 0,
            capacity_bytes=capacity,
            peak_pct=100.0 * level.max() / capacity if capacity and len(level) else 0.0,
            allocations=sum(1 for life in lives if life.memory == memory),
            series_ns=(ticks * 1000 / trace.base_mhz).tolist(),
            series_bytes=level.tolist(),
        )
    return out


def downsample_steps(
    ticks: np.ndarray, level: np.ndarray, max_points: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` steps, each the maximum of the steps in its time bin."""
    if len(ticks) <= max_points:
        return ticks, level
    edges = np.linspace(ticks[0], ticks[-1], max_points + 1)
    which = np.minimum(np.searchsorted(edges, ticks, side="right") - 1, max_points - 1)
    starts = np.flatnonzero(np.append(True, which[1:] != which[:-1]))
    return edges[which[starts]].astype(np.int64), np.maximum.reduceat(level, starts)


def _config_name(trace: Trace) -> str:
    chip = getattr(trace.config, "chip", None)
    return getattr(chip, "name", "") if chip else ""


# ---- FLOPs and peaks --------------------------------------------------------------------------


def _peaks(trace: Trace, cores: int, by_dtype: dict[str, int]) -> Peaks:
    from hwsim.report.peaks import (
        dma_bandwidth_bytes_per_ns_per_core,
        hbm_bandwidth_bytes_per_ns_per_core,
        peak_flops_per_s,
    )

    config = trace.config
    dtype = trace.meta.get("dtype") or (
        max(by_dtype, key=by_dtype.__getitem__) if by_dtype else "bf16"
    )
    return Peaks(
        dtype=dtype,
        cores=cores,
        flops_per_s=peak_flops_per_s(config, dtype) * cores,
        flops_per_s_by_dtype={d: peak_flops_per_s(config, d) * cores for d in by_dtype},
        hbm_bytes_per_s=hbm_bandwidth_bytes_per_ns_per_core(config) * 1e9 * cores,
        dma_bytes_per_s=dma_bandwidth_bytes_per_ns_per_core(config) * 1e9 * cores,
        dma_engines=config.dma.engines * cores,
    )


def _flop_stats(trace: Trace, work: _Work, peaks: Peaks, total_s: float) -> FlopStats:
    tensor_flops = sum(work.tensor_flops_by_dtype.values())
    model_flops = int(trace.meta.get("model_flops") or tensor_flops)
    # HFU: each dtype's FLOPs against its own peak, so mixed-precision runs are not skewed
    busy_at_peak_s = sum(
        f / peaks.flops_per_s_by_dtype[d] for d, f in work.tensor_flops_by_dtype.items()
    )
    return FlopStats(
        hardware_flops=work.hardware_flops,
        tensor_flops=tensor_flops,
        tensor_flops_by_dtype=work.tensor_flops_by_dtype,
        model_flops=model_flops,
        achieved_flops_per_s=tensor_flops / total_s if total_s else 0.0,
        hfu_pct=100.0 * busy_at_peak_s / total_s if total_s else 0.0,
        mfu_pct=100.0 * model_flops / (peaks.flops_per_s * total_s) if total_s else 0.0,
    )


def _top_tags(tags: dict[str, list[int]], base_mhz: int) -> list[TagStats]:
    ranked = sorted(tags.items(), key=lambda kv: -kv[1][3])[:TOP_TAGS]
    return [
        TagStats(
            tag=tag,
            instructions=n,
            flops=flops,
            hbm_bytes=hbm,
            busy_ns=busy * 1000 / base_mhz,
            start_ns=first * 1000 / base_mhz,
            end_ns=last * 1000 / base_mhz,
        )
        for tag, (n, flops, hbm, busy, first, last) in ranked
    ]
