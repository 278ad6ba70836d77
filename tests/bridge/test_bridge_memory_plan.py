"""HBM memory planning: lifetimes, reuse, addresses, peak — and that reuse is ordered (WAR)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.graph_lowering import LoweredGraph, lower_graph
from hwsim.bridge.memory_plan import ALIGN_BYTES, HbmArena
from hwsim.config import load_config
from hwsim.errors import MemoryAccessError
from hwsim.isa.ap import MemorySpace

ROWS, COLS = 64, 48  # one fp32 value: 12288 B (a multiple of the alignment)
VALUE_BYTES = ROWS * COLS * 4


def chain(x: torch.Tensor) -> torch.Tensor:
    """Eight elementwise ops in a row: at most two intermediates are ever live."""
    a = torch.relu(x)
    b = a * 2.0
    c = b + 1.0
    d = torch.sigmoid(c)
    e = d - 0.5
    f = e * e
    g = f + x  # x stays live to the end: an input, never planned
    return torch.tanh(g)


def fork(x: torch.Tensor) -> torch.Tensor:
    """``c`` reuses the bytes of ``a`` but depends on neither ``a`` nor ``b``: the plan's
    ordering keeps its stores from overwriting ``a`` while ``b`` still reads it."""
    a = torch.relu(x)
    b = a * 2.0
    c = torch.sigmoid(x)
    return b + c


def lowered(fn: Callable[..., torch.Tensor], plan: bool, config: str = "tiny") -> LoweredGraph:
    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(0))
    graph = make_fx(fn)(x)
    # Graph passes off: fusion would leave these chains no intermediates to plan.
    return lower_graph(graph, [x], config=load_config(config), memory_plan=plan, passes="none")


def test_arena_best_fit_coalescing_and_reuse_names() -> None:
    arena = HbmArena()
    a = arena.allocate("a", 100)  # -> 128 B (aligned)
    b = arena.allocate("b", 64)
    c = arena.allocate("c", 200)
    assert (a.address, b.address, c.address) == (0, 128, 192)
    assert arena.end == 192 + 256
    arena.free("a")
    arena.free("b")  # coalesces with a: one free block [0, 192)
    assert arena.free_blocks == [(0, 192)]
    d = arena.allocate("d", 150)  # best fit: the 192 B hole, not the arena's end
    assert d.address == 0 and set(d.reuses) == {"a", "b"}
    arena.free("c")
    e = arena.allocate("e", 1000)  # nothing fits: extends the free block at the end
    assert e.address == 192 and e.reuses == ("c",) and arena.end == 192 + 1024
    assert arena.requested_bytes == 128 + 64 + 256 + 192 + 1024


def test_plan_keeps_two_intermediates_and_the_numerics() -> None:
    planned, unplanned = lowered(chain, True), lowered(chain, False)
    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(1))
    with_plan, without = planned.run([x], race_check=True), unplanned.run([x])
    torch.testing.assert_close(with_plan.outputs, chain(x), rtol=1e-5, atol=1e-5)
    assert torch.equal(with_plan.outputs, without.outputs)
    memory, baseline = planned.memory, unplanned.memory
    assert memory is not None and baseline is not None
    # 7 intermediates (the last op's value is the output, which is never planned).
    assert baseline.hbm_scratch_peak_bytes == 7 * VALUE_BYTES
    assert memory.hbm_scratch_unplanned_bytes == 7 * VALUE_BYTES
    assert memory.hbm_scratch_peak_bytes == 2 * VALUE_BYTES
    assert memory.hbm_output_bytes == VALUE_BYTES and memory.hbm_input_bytes == VALUE_BYTES
    assert planned.program.meta["memory"]["hbm_peak_bytes"] == 4 * VALUE_BYTES
    # Reuse can only add waits, never remove them.
    assert with_plan.result.summary.total_ns >= without.result.summary.total_ns


@pytest.mark.parametrize("fn", [chain, fork])
def test_a_reused_buffer_is_written_only_after_its_last_read(
    fn: Callable[..., torch.Tensor],
) -> None:
    graph = lowered(fn, True)
    decls = graph.program.hbm
    placed = {n: d for n, d in decls.items() if d.address_bytes is not None}
    run = graph.run([torch.randn(ROWS, COLS)])
    trace = run.result.trace
    by_trigger = {(r.engine, r.pc): r.instruction for r in trace.instructions}
    reads: dict[str, int] = {}  # tensor -> last end tick of a transfer reading it
    writes: dict[str, int] = {}  # tensor -> first start tick of a transfer writing it
    for piece in trace.dma:
        dma = by_trigger[(piece.trigger_engine, piece.trigger_pc)]
        if dma.src.memory is MemorySpace.HBM:
            reads[dma.src.tensor] = max(reads.get(dma.src.tensor, 0), piece.end_tick)
        if dma.dst.memory is MemorySpace.HBM:
            first = writes.get(dma.dst.tensor, piece.start_tick)
            writes[dma.dst.tensor] = min(first, piece.start_tick)
    pairs = 0
    for new, later in placed.items():
        for old, earlier in placed.items():
            assert later.address_bytes is not None and earlier.address_bytes is not None
            overlap = (
                earlier.address_bytes < later.address_bytes + later.nbytes
                and later.address_bytes < earlier.address_bytes + earlier.nbytes
            )
            if new != old and overlap and writes[new] > writes[old]:
                pairs += 1
                assert writes[new] >= reads[old], (new, old)
    assert pairs >= (4 if fn is chain else 1)  # the plan really reuses


def test_a_graph_that_only_fits_with_the_plan() -> None:
    # HBM for the input, the output and 2 (not 7) intermediates of 256 KiB, plus a little
    # (configs allow no less than 1 MiB per stack).
    x = torch.randn(128, 512)
    value_bytes = x.numel() * 4
    capacity = 4 * value_bytes + 4 * ALIGN_BYTES
    config = load_config("tiny", [f"hbm.capacity_bytes_per_stack={capacity}"])
    graph = make_fx(chain)(x)
    fits = lower_graph(graph, [x], config=config, memory_plan=True, passes="none")
    assert fits.run([x], numerics=False).result.summary.total_ns > 0
    too_big = lower_graph(graph, [x], config=config, memory_plan=False, passes="none")
    with pytest.raises(MemoryAccessError, match="does not fit"):
        too_big.run([x], numerics=False)


def test_compile_reports_the_hbm_peak_with_and_without_the_plan() -> None:
    from hwsim.bridge.dynamo import last_report

    torch._dynamo.reset()
    peaks = {}
    for plan in (True, False):
        options = {"config": "tiny", "fallback": "error", "memory_plan": plan, "passes": "none"}
        compiled = torch.compile(chain, backend="hwsim", options=options, dynamic=False)
        compiled(torch.randn(ROWS, COLS))
        run = last_report().runs[-1]
        peaks[plan] = (run["hbm_scratch_peak_bytes"], run["hbm_scratch_unplanned_bytes"])
        torch._dynamo.reset()
    assert peaks[True] == (2 * VALUE_BYTES, 7 * VALUE_BYTES)
    assert peaks[False] == (7 * VALUE_BYTES, 7 * VALUE_BYTES)


def test_timeline_colours_by_op_and_report_times_by_node() -> None:
    from hwsim.trace.outputs import run_data

    run = lowered(chain, True).run([torch.randn(ROWS, COLS)])
    keys = set(run_data(run.result.trace).keys)
    assert {"relu", "mul", "add", "sigmoid", "sub", "tanh"} <= keys  # one colour per op
    assert {"mul", "mul_1", "add", "add_1"} <= set(run.op_times)  # times per node
