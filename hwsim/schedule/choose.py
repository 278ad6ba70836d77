"""Choosing among orders: the candidates the list scheduler offers, by the cost model's estimate
(policy ``list``) or by simulating each (policy ``best``).

``best`` runs each distinct candidate timing-only on the simulator (the exact cost model) and
keeps the fastest, program order on a tie: a build under it is never slower than program order.
It costs one timing-only run per candidate at build time; the chosen program keeps what its run
prepared (``Program.run_cache``), so its next run starts warm.
"""

from __future__ import annotations

from collections.abc import Sequence

from hwsim.builder import ProgramBuilder
from hwsim.config import HardwareConfig
from hwsim.cost import CostModel
from hwsim.isa.base import Instruction
from hwsim.schedule.dag import build_graph, check_order
from hwsim.schedule.list_scheduler import estimate_order, list_schedule
from hwsim.schedule.stream import InstructionStream, replay


def candidate_orders(
    stream: InstructionStream, config: HardwareConfig, *, keep_queue_order: bool = False
) -> list[tuple[list[int], int]]:
    """(order, estimated end tick) of program order, then of each distinct list schedule
    (without and with lookahead)."""
    graph = build_graph(stream, keep_queue_order=keep_queue_order)
    # A model of its own, not CostModel.for_config's (which finds models by the config's content):
    # a build reads only the config fields it depends on (a sweep's program cache keys on them).
    model = CostModel(config)
    estimates = [
        model.estimate(item) if isinstance(item, Instruction) else None for item in stream.items
    ]
    program = list(range(len(stream)))
    found = [(program, estimate_order(graph, estimates, program))]
    for lookahead in (False, True):
        order, end_tick = list_schedule(graph, estimates, lookahead=lookahead)
        check_order(graph, order)
        if all(order != known for known, _ in found):
            found.append((order, end_tick))
    return found


def estimated_best(candidates: Sequence[tuple[list[int], int]]) -> list[int]:
    """The candidate with the smallest estimated end; the first (program order) on a tie: the
    estimate is coarse, so the known order stands unless something beats it."""
    best, best_tick = candidates[0]
    for order, end_tick in candidates[1:]:
        if end_tick < best_tick:
            best, best_tick = order, end_tick
    return best


def simulated_best(
    template: ProgramBuilder, stream: InstructionStream, config: HardwareConfig
) -> ProgramBuilder:
    """A builder holding ``template``'s tensors and allocations and ``stream`` emitted in the
    candidate order that runs fastest on ``config`` (timing-only; program order on a tie);
    ``template`` itself when program order is the only candidate."""
    from hwsim.machine.simulator import run

    candidates = candidate_orders(stream, config)
    if len(candidates) == 1:  # no order but the program's: nothing to simulate
        replay(template, stream.items, candidates[0][0])
        return template
    best: tuple[int, ProgramBuilder] | None = None
    for order, _ in candidates:
        # Deferred: the waits of each candidate come from one compiled pass (the same waits).
        builder = ProgramBuilder(len(template.program.cores), deferred=True)
        program = builder.program
        program.hbm = dict(template.program.hbm)
        program.allocations = list(template.program.allocations)
        program.meta = dict(template.program.meta)
        replay(builder, stream.items, order)
        builder.build()
        end_tick = run(
            program, config, numerics=False, initcheck=False, summarize=False
        ).trace.end_tick
        if best is None or end_tick < best[0]:
            best = (end_tick, builder)
    assert best is not None
    return best[1]
