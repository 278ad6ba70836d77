"""Ranks as threads share one process's dynamo cache: N ranks must not leave a rank's frames to
run eagerly because the ranks' compiles together met the per-frame recompile limit."""

from __future__ import annotations

import torch

from hwsim.bridge.distributed.threads import run_threads


def _limits(rank: int) -> tuple[int, int]:
    config = torch._dynamo.config
    return config.recompile_limit, config.accumulated_recompile_limit


def test_a_rank_thread_may_compile_each_frame_once_per_rank_more_than_one_model_may():
    """Each rank's own torch.compile compiles every frame again (dynamo guards compiled code
    on its backend, and each rank has its own), into the cache all rank threads share: with
    the limit of one model, 8 ranks met dynamo's 8 compiles per frame and the ranks past it ran
    the frame on the CPU without an error. Dynamo's config is per thread, so the caller's
    limits are what the ranks scale."""
    default = torch._dynamo.config.recompile_limit, torch._dynamo.config.accumulated_recompile_limit
    assert run_threads(_limits, 3) == [(3 * default[0], 3 * default[1])] * 3
    with torch._dynamo.config.patch(recompile_limit=2):
        assert run_threads(_limits, 4)[0][0] == 8
    assert torch._dynamo.config.recompile_limit == default[0]  # the caller's own is untouched
