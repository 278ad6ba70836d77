"""At most as many rank threads as the process may use CPUs run a compiled graph at once.

Ranks on threads of one process share its CPUs. A rank running a graph simulates it, then runs
the bridge's checks against the CPU, and holds that graph's transient memory meanwhile (its
simulated HBM, its outputs, the CPU reference's outputs). More ranks at once than CPUs gain no
speed, but each adds its graph's transient memory (8 ranks of GPT-2 small, every rank running
its graphs when it liked, passed 14 GB in their second step; with the gate they peaked at 13.4
GB and took no longer). So a rank thread takes a permit for such a run and gives it back
at its end; the other ranks wait their turn. A graph with collectives inside takes none (it waits
for the other ranks while it runs), nor does anything else that waits for other ranks: no
permit holder ever waits for another rank, so the gate cannot deadlock. Values and simulated
times are unchanged; only the order in which the ranks' CPU work interleaves is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hwsim.bridge.distributed.clock import current_clock

#: How many rank threads may run a graph at once: the CPUs this process may use.
PERMITS = max(
    1,
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
)  # sched_getaffinity (the CPUs this process may use) is Linux's; elsewhere the machine's
_PERMITS = threading.BoundedSemaphore(PERMITS)
_HELD = threading.local()


@contextmanager
def graph_run_permit() -> Iterator[None]:
    """Hold a permit while running a graph without collectives (a no-op outside a rank of a
    ``"hwsim"`` group, and within a permit this thread already holds)."""
    if getattr(_HELD, "held", False) or current_clock() is None:
        yield
        return
    with _PERMITS:
        _HELD.held = True
        try:
            yield
        finally:
            _HELD.held = False
