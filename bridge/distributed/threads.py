"""Ranks as threads of one process, each in its own ``"hwsim"`` process group (for tests and
notebooks): ``run_threads(fn, world_size)`` calls ``fn(rank)`` on ``world_size`` threads after
``init_process_group("hwsim")`` on each, as PyTorch's multi-threaded process group does."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hwsim.bridge.distributed import register


def run_threads(fn: Callable[[int], Any], world_size: int, timeout_s: float = 600.0) -> list[Any]:
    """``fn(rank)``'s results in rank order; the first failure is raised once every thread
    stopped (a failing rank makes the others' collectives raise instead of waiting)."""
    from torch.testing._internal.distributed import multi_threaded_pg as threaded

    register()
    store = dist.HashStore()
    results: list[Any] = [None] * world_size
    errors: list[BaseException | None] = [None] * world_size

    def one(rank: int) -> None:
        try:
            dist.init_process_group(
                "hwsim", rank=rank, world_size=world_size, store=store,
                timeout=timedelta(seconds=timeout_s),
            )  # fmt: skip
            try:
                with per_rank_limits:
                    results[rank] = fn(rank)
            finally:
                dist.destroy_process_group()
        except BaseException as error:  # handed to the caller below
            errors[rank] = error
            _abort_fabrics(error)

    per_rank_limits = _recompile_limits_per_rank(world_size)
    _import_lazily_imported()
    active_ddp = DistributedDataParallel._active_ddp_module
    threaded._install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)  # type: ignore[attr-defined]  # group names per thread
    try:
        _run_ranks(one, world_size)
    finally:
        # DDP marks "inside a DDP forward" in a class attribute, saved and restored around each
        # forward: ranks' forwards interleaving on threads leave one rank's module there, and
        # every later torch.compile in the process would split its graphs as DDP's.
        DistributedDataParallel._active_ddp_module = active_ddp
        torch._C._distributed_c10d._set_thread_isolation_mode(False)  # type: ignore[attr-defined]
        threaded._uninstall_threaded_pg()
        torch.autograd.set_multithreading_enabled(True)
    failed = [e for e in errors if e is not None]
    if failed:
        from hwsim.machine.thread_fabric import RankAborted

        raise next((e for e in failed if not isinstance(e, RankAborted)), failed[0])
    return results


def _run_ranks(one: Callable[[int], None], world_size: int) -> None:
    threads = [threading.Thread(target=one, args=(r,), name=f"rank{r}") for r in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _recompile_limits_per_rank(world_size: int) -> Any:
    """Dynamo's recompile limits, as the caller's thread has them, times ``world_size``, for
    the rank threads (dynamo's config is per thread: a new thread would see the defaults).
    Each rank calls ``torch.compile`` itself, so each has its own backend (and DDP its own
    DDPOptimizer), and dynamo guards a frame's compiled code on its backend: every rank
    compiles every frame once more, into the one cache the process's threads share. A limit
    meant for one model (8 compiles per frame) was met by 8 ranks (transformers' ``Conv1D``,
    compiled once per layer width): the ranks past it ran that frame eagerly on the CPU, with
    only a log warning. Ranks in processes (torchrun) each have their own cache and limits."""
    config = torch._dynamo.config
    return config.patch(
        recompile_limit=config.recompile_limit * world_size,
        accumulated_recompile_limit=config.accumulated_recompile_limit * world_size,
    )


def _abort_fabrics(error: BaseException) -> None:
    from hwsim.bridge.distributed.fabric import _IN_PROCESS

    for fabric in list(_IN_PROCESS.values()):
        fabric.abort(error)


def _import_lazily_imported() -> None:
    """Modules torch imports on first use, imported here once: a rank thread importing one
    while inside a compiled module's call takes the import lock and then waits for dynamo's
    compile lock, which another rank, compiling, holds while it waits for the import lock."""
    with torch.autograd.profiler.record_function("hwsim.warm_up"):  # its optional CUPTI module
        pass
    importlib.import_module("torch._dynamo.variables.user_defined")
    # torch.compile's backend lookup registers the entry point on first use, racily
    torch._dynamo.lookup_backend("hwsim")
