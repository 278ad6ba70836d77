"""Each graph node's share of a run's simulated time, from the trace: per-op times of the report.

An instruction's node is the ``Origin`` its tag carries (``bridge.identity``); a DMA transfer
belongs to the node of the instruction that triggered it. Every moment some engine or DMA engine
is busy is divided evenly among the nodes busy then (``wall_shares``), so the nodes' shares sum
to the time something was busy, never more than the run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hwsim.isa.origin import Tag
from hwsim.trace.records import Trace


@dataclass
class OpTime:
    """Simulated time of one op (node) in a run, in ns."""

    engine_ns: dict[str, float] = field(default_factory=dict)
    dma_ns: float = 0.0  # summed over DMA engines
    start_ns: float = float("inf")
    end_ns: float = 0.0
    instructions: int = 0
    dma_engines: int = 16
    #: The graph nodes this time is of: the node, or a fused group's members (``Origin``).
    members: tuple[str, ...] = ()
    #: The op's share of the run's wall time: each moment any engine or DMA engine is busy is
    #: divided evenly among the ops busy then, so the shares of a run's ops sum to the time
    #: something was busy (``op_times``), never more than the run.
    share_ns: float = 0.0

    @property
    def bound_ns(self) -> float:
        return max([*self.engine_ns.values(), self.dma_ns / max(1, self.dma_engines)], default=0.0)

    @property
    def span_ns(self) -> float:
        return max(0.0, self.end_ns - self.start_ns) if self.instructions else 0.0


def op_times(trace: Trace) -> dict[str, OpTime]:
    """Per node name (the ``Origin`` in the instruction's tag: ``bridge.identity``), the op's
    simulated time; an instruction of no node by its tag's scope (``_owner``)."""
    to_ns = 1000 / trace.base_mhz
    dma_engines = trace.config.dma.engines if trace.config is not None else 16
    times: dict[str, OpTime] = defaultdict(lambda: OpTime(dma_engines=dma_engines))
    owner: dict[tuple[int, str, int], str] = {}
    for record in trace.instructions:
        key, members = _owner(record.instruction.tag, record.instruction.OPCODE)
        owner[(record.core, record.engine, record.pc)] = key
        op = times[key]
        op.members = members
        busy_ns = (record.end_tick - record.start_tick) * to_ns
        op.engine_ns[record.engine] = op.engine_ns.get(record.engine, 0.0) + busy_ns
        op.start_ns = min(op.start_ns, record.start_tick * to_ns)
        op.end_ns = max(op.end_ns, record.done_tick * to_ns)
        op.instructions += 1
    intervals: list[tuple[int, int, str]] = [
        (r.start_tick, r.end_tick, owner[(r.core, r.engine, r.pc)]) for r in trace.instructions
    ]
    for piece in trace.dma:
        key = owner.get((piece.core, piece.trigger_engine, piece.trigger_pc), "?")
        op = times[key]
        op.dma_ns += (piece.end_tick - piece.start_tick) * to_ns
        op.end_ns = max(op.end_ns, piece.end_tick * to_ns)
        intervals.append((piece.start_tick, piece.end_tick, key))
    for key, ticks in wall_shares(intervals).items():
        times[key].share_ns = ticks * to_ns
    return dict(times)


def _owner(tag: str, opcode: str) -> tuple[str, tuple[str, ...]]:
    """Whose time an instruction is, and the graph nodes that stands for: its node
    (``Origin.node``; a fused group's members), else its tag's scope (the kernel's name),
    else its tag or opcode as it is."""
    origin = tag.origin if isinstance(tag, Tag) else None
    if origin is not None:
        return origin.node, origin.members or (origin.node,)
    key = (tag.scope if isinstance(tag, Tag) else tag) or opcode
    return key, (key,)


def wall_shares(busy: list[tuple[int, int, str]]) -> dict[str, float]:
    """Ticks of wall time per owner: every stretch of time is divided evenly among the owners
    with an interval (start, end, owner) covering it; stretches nobody covers go to nobody.
    One sweep over the sorted interval ends."""
    events: list[tuple[int, int, str]] = []
    for start, end, key in busy:
        if end > start:
            events += [(start, 1, key), (end, -1, key)]
    events.sort(key=lambda e: (e[0], e[1]))
    shares: dict[str, float] = defaultdict(float)
    active: dict[str, int] = defaultdict(int)
    last = events[0][0] if events else 0
    for tick, delta, key in events:
        if tick > last and active:
            each = (tick - last) / len(active)
            for owner in active:
                shares[owner] += each
        last = tick
        active[key] += delta
        if active[key] == 0:
            del active[key]
    return dict(shares)
