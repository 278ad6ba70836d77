"""Scheduling marks in the kernel language: what a kernel says about the order of its
instructions when a scheduler reorders them (``Kernel.build(schedule="list")``).

Under program order (the default) the marks change nothing: the order is already the program's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hwsim.isa.base import Instruction
from hwsim.lang.kernel import current


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """The instructions issued inside keep their program order among themselves (NKI's
    ``nl.no_reorder()``: an edge between every pair in the block [S24-sched]); others may
    still move around them."""
    stream = current().stream
    if stream is None:
        yield
        return
    with stream.no_reorder():
        yield


def schedule_barrier(reason: str = "") -> None:
    """Nothing issued after this point moves ahead of anything issued before it, in any
    engine's stream (a ``sequential_range`` iteration boundary). It orders the streams only:
    no semaphore is added beyond what data dependencies need."""
    stream = current().stream
    if stream is not None:
        stream.barrier(reason)


def sequential_range(*bounds: int) -> Iterator[int]:
    """``range(*bounds)`` for a loop with a loop-carried dependency (NKI's
    ``nl.sequential_range``): a ``schedule_barrier`` between iterations, so no iteration's
    instructions move into another's."""
    for step, value in enumerate(range(*bounds)):
        if step:
            schedule_barrier("sequential_range")
        yield value


def schedule_edge(before: Instruction, after: Instruction) -> None:
    """Keep instruction ``before`` ahead of ``after`` (both returned by ISA calls of this
    kernel, in that program order): NKI's ``with_schedule`` edges."""
    stream = current().stream
    if stream is not None:
        stream.edge(stream.index_of(before), stream.index_of(after))
