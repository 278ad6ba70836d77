"""Ranks as threads share one process's dynamo cache: N ranks must not leave a rank's frames to
run eagerly because the ranks' compiles together met the per-frame recompile limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.fx.traceback as fx_traceback

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


def _a_rank_tracing_backward_meets(node_runs: Callable[[torch.fx.GraphModule], object]) -> None:
    """One rank thread is tracing a backward (``in_grad_fn`` counted in torch.fx.traceback's
    process-wide ``current_meta``) when another rank's interpreter runs a node, and the
    tracing rank's autograd post-hook fires meanwhile (the ``fire`` node stands for it)."""

    def fire(x: torch.Tensor) -> torch.Tensor:
        fx_traceback.reset_grad_fn_seq_nr()  # the tracing rank's post-hook
        return x + 1

    graph = torch.fx.Graph()
    out = graph.call_function(fire, (graph.placeholder("x"),))
    out.meta["stack_trace"] = "the other rank's node"  # metadata the swap would install
    graph.output(out)
    with fx_traceback.preserve_node_meta():
        fx_traceback.set_grad_fn_seq_nr(7)  # the tracing rank's pre-hook
        node_runs(torch.fx.GraphModule(torch.nn.Module(), graph))
        assert "in_grad_fn" not in fx_traceback.get_current_meta()  # its count came back to 0


def test_a_rank_checking_a_graph_leaves_another_ranks_backward_trace_alone():
    """The intermittent "Expected current_level > 0" of DDP rank threads: torch.fx's
    Interpreter swaps the process-wide node metadata for each node's while any thread traces,
    so a rank running the bridge's CPU check while another compiled made the compiling rank's
    count of backward nodes land in the swapped-in dict. The bridge's interpreters (the check's
    and the mixed-graph timeline's) leave it alone."""
    from hwsim.bridge.auto_cast import reference_casts, run_graph
    from hwsim.bridge.fx_interpreter import Interpreter
    from hwsim.bridge.precision import Precision

    x = torch.zeros(2)
    with pytest.raises(AssertionError, match="Expected current_level > 0"):
        _a_rank_tracing_backward_meets(lambda gm: torch.fx.Interpreter(gm).run(x))
    _a_rank_tracing_backward_meets(lambda gm: Interpreter(gm).run(x))
    with reference_casts(Precision.of("none")) as casts:
        _a_rank_tracing_backward_meets(lambda gm: run_graph(gm, (x,), casts))
