"""``torch.distributed`` on simulated NeuronCores: the ``"hwsim"`` process-group backend.

``import hwsim.bridge`` registers the backend (``torch.distributed.Backend.register_backend``);
``dist.init_process_group("hwsim", ...)`` then gives each rank a process group whose collectives
compute exact values (every rank's data combined in rank order, reductions in fp32) and a
simulated clock per rank (``clock.RankClock``): the rank's compiled graphs (``torch.compile(...,
backend="hwsim")``) advance it by their simulated time, and at each collective the ranks exchange
arrival ticks so that all agree when it starts (the slowest arrival) and ends (plus hwsim's
collective cost model). Ranks meet in one process (threads, ``hwsim.machine.thread_fabric``) or
across processes started by torchrun or ``torch.multiprocessing.spawn`` (over the c10d store,
``fabric.StoreFabric``). ``report()`` gives each rank's compute, communication, overlapped and
exposed communication and bytes per link, per step; ``write_trace(clocks, path)`` draws the
ranks in one Perfetto trace. docs/distributed.md has the rules.
"""

from __future__ import annotations

from typing import Any

BACKEND = "hwsim"


def register() -> None:
    """Register the ``"hwsim"`` backend with torch.distributed (idempotent, cheap)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])


def _create(options: Any, pg_options: Any) -> Any:
    from hwsim.bridge.distributed.process_group import create_process_group

    return create_process_group(options, pg_options)


def __getattr__(name: str) -> Any:
    if name in ("configure", "report", "current_clock"):
        from hwsim.bridge.distributed import api

        return getattr(api, name)
    if name == "write_trace":
        from hwsim.bridge.distributed.trace import write_trace

        return write_trace
    raise AttributeError(name)
