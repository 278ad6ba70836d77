"""Instruction scheduling: reorder a recorded stream within what its dependencies allow.

The compiler layer both front ends share (the kernel language and NKI kernels, and the bridge's
lowerings, which are kernel-language kernels): a front end records instructions in program order
(``InstructionStream``), a policy picks the order to emit them in (``schedule_order``), and
``replay`` emits them into a ``ProgramBuilder``, which inserts the semaphores the new order needs.

Policies (``SCHEDULES``):

- ``program``: program order, as recorded (what the kernel language does without a scheduler);
- ``list``: the cost-model-driven list scheduler (``hwsim.schedule.list_scheduler``) over the
  dependency graph (``hwsim.schedule.dag``): the longest remaining path first, on whichever
  engine can start earliest (with and without waiting for a better item about to be ready);
  whichever the cost model estimates fastest, program order when none beats it.

    stream = InstructionStream()
    for instruction in instructions:
        stream.add(instruction)
    builder = ProgramBuilder()
    replay(builder, stream.items, schedule_order(stream, config, "list"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from hwsim.config import HardwareConfig
from hwsim.errors import HwsimError
from hwsim.isa.base import Instruction
from hwsim.schedule.costs import CostEstimator, Estimate
from hwsim.schedule.dag import DependencyGraph, build_graph, check_order
from hwsim.schedule.list_scheduler import estimate_order, list_schedule
from hwsim.schedule.stream import Barrier, InstructionStream, Item, PlaceHbm, replay

#: Scheduling policies by name.
SCHEDULES = ("program", "list")
#: Environment variable naming the policy of builds that do not choose one.
SCHEDULE_ENV = "HWSIM_SCHEDULE"


def resolve_schedule(schedule: str | None) -> str:
    """The policy a build uses: ``schedule``, else ``$HWSIM_SCHEDULE``, else ``program``."""
    name = schedule if schedule is not None else os.environ.get(SCHEDULE_ENV, "program")
    if name not in SCHEDULES:
        where = "schedule=" if schedule is not None else f"${SCHEDULE_ENV}="
        raise HwsimError(
            f"{where}{name!r} is not a scheduling policy; valid: {', '.join(SCHEDULES)}"
        )
    return name


def schedule_order(
    stream: InstructionStream,
    config: HardwareConfig,
    policy: str = "list",
    *,
    keep_queue_order: bool = False,
) -> list[int]:
    """The order (item indices) to emit ``stream`` in under ``policy`` on ``config``."""
    policy = resolve_schedule(policy)
    if policy == "program":
        return list(range(len(stream)))
    graph = build_graph(stream, keep_queue_order=keep_queue_order)
    estimator = CostEstimator(config)
    estimates = [
        estimator.of(item) if isinstance(item, Instruction) else None for item in stream.items
    ]
    program = list(range(len(stream)))
    best, best_tick = program, estimate_order(graph, estimates, program)
    # Keep the known order unless a schedule is estimated faster (the estimate is coarse).
    for lookahead in (False, True):
        order, end_tick = list_schedule(graph, estimates, lookahead=lookahead)
        check_order(graph, order)
        if end_tick < best_tick:
            best, best_tick = order, end_tick
    return best


def reorder(
    instructions: Sequence[Instruction], config: HardwareConfig, policy: str = "list"
) -> list[Instruction]:
    """``instructions`` (program order, no marks) in the order ``policy`` emits them."""
    stream = InstructionStream()
    for instruction in instructions:
        stream.add(instruction)
    return [instructions[i] for i in schedule_order(stream, config, policy)]


__all__ = [
    "SCHEDULES",
    "SCHEDULE_ENV",
    "Barrier",
    "CostEstimator",
    "DependencyGraph",
    "Estimate",
    "InstructionStream",
    "Item",
    "PlaceHbm",
    "build_graph",
    "check_order",
    "estimate_order",
    "list_schedule",
    "reorder",
    "replay",
    "resolve_schedule",
    "schedule_order",
]
