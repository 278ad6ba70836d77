"""Cost rules of the instructions between cores: the barrier's remote signal and wait, and a
collective (its duration on the topology once every rank has arrived, ``hwsim.cost.
collectives``). ``sendrecv`` is a DMA trigger and takes the DMA rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.values import Cost
from hwsim.isa.multicore_ops import BarrierWait, Collective, CollectiveKind, CoreBarrier

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel


@cost_rule(CoreBarrier)
def core_barrier(model: CostModel, instruction: CoreBarrier) -> Cost:
    """A write to each peer's semaphore: the engine is busy a doorbell (``dma.trigger_ns``, the
    cost of a sequencer's write to the fabric), and the update lands on the peers
    ``topology.remote_semaphore_ns`` after the start."""
    issue = max(1, model.timebase.ns_to_ticks(model.config.dma.trigger_ns))
    land = model.timebase.ns_to_ticks(model.config.topology.remote_semaphore_ns)
    return Cost(issue, max(issue, land), issue)


@cost_rule(BarrierWait)
def barrier_wait(model: CostModel, instruction: BarrierWait) -> Cost:
    """One cycle of its engine once its semaphore wait is met."""
    issue = model.cycles(instruction.engine, 1)
    return Cost(issue, issue, issue)


@cost_rule(Collective)
def collective(model: CostModel, instruction: Collective) -> Cost:
    """The collective's duration from the moment every rank has arrived: its engine (the CC
    cores) is busy all of it, and its results are visible at its end."""
    kind = CollectiveKind(instruction.kind)
    cost = model.collectives.of(
        kind.value,
        instruction.nbytes,
        instruction.group,
        instruction.cores_per_rank,
        instruction.algorithm or None,
        (instruction.rank, instruction.send_to),
    )
    ticks = model.timebase.ns_to_ticks(cost.duration_ns)
    return Cost(ticks, ticks, ticks)
