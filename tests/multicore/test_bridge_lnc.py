"""The bridge at LNC=2: a graph lowered into one program per physical core of the logical core,
large ops splitting their output tiles between the two, barriers where one core reads what the
other wrote; values bit for bit those of LNC=1. Exact ticks on ``tiny`` with two cores a logical
core, each on its own HBM stack (1 tick = 1 ns, remote semaphores 10 ns: configs/tiny.yaml)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hwsim.bridge.context import TilingOptions
from hwsim.bridge.errors import BridgeError
from hwsim.bridge.graph_lowering import lower_graph
from hwsim.bridge.options import BridgeOptions
from hwsim.config import load_config

#: tiny with a logical core of two physical cores on stacks of their own (no HBM sharing, so
#: each half runs exactly as one core would run it alone).
PAIR = load_config(
    "tiny",
    overrides={
        "chip.cores_per_chip": 2,
        "chip.cores_per_logical_core": 2,
        "hbm.stacks": 2,
        "hbm.cores_per_stack": 1,
    },
)
SPLIT_ALL = TilingOptions(lnc=2, lnc_min_split_bytes=0)


def _relu_mm(x, w):
    return torch.relu(x @ w)


def _lower(fn, inputs, config=PAIR, options=SPLIT_ALL, passes="none"):
    return lower_graph(make_fx(fn)(*inputs), inputs, config=config, options=options, passes=passes)


def _records(run, core, op):
    return sorted(
        (r.instruction.OPCODE, r.engine, r.start_tick, r.end_tick)
        for r in run.result.trace.instructions
        if r.core == core and r.instruction.tag.startswith(op + "/")
    )


def test_a_split_matmul_runs_its_halves_in_parallel_and_meets_at_a_barrier():
    torch.manual_seed(0)
    x, w = torch.randn(256, 128), torch.randn(128, 128)
    pair = _lower(_relu_mm, [x, w])
    assert pair.pipeline["lnc"]["split"] == ["mm", "relu"]
    run = pair.run([x, w], race_check=True, initcheck=True)
    half = _lower(_relu_mm, [x[:128], w], options=TilingOptions(lnc=1)).run([x[:128], w])
    # each core computes its 128 rows of the product exactly as one core computes 128 rows
    alone = _records(half, 0, "mm")
    assert alone and _records(run, 0, "mm") == alone and _records(run, 1, "mm") == alone
    by_op: dict[str, list] = {}
    for r in run.result.trace.instructions:
        by_op.setdefault(r.instruction.OPCODE, []).append(r)
    signals, waits = by_op["core_barrier"], by_op["barrier_wait"]
    assert sorted(s.core for s in signals) == [0, 1] == sorted(w.core for w in waits)
    # each core signals once its stores of the product are done ...
    for signal in signals:
        stores = [
            p.end_tick
            for p in run.result.trace.dma
            if p.core == signal.core and p.end_tick <= signal.start_tick
        ]
        assert signal.start_tick == max(stores)
    # ... and waits until the later signal has landed on the other core (10 ns)
    assert {w.start_tick for w in waits} == {max(s.start_tick for s in signals) + 10}
    # the relu (which reads the product) starts on each core only after its barrier (which
    # carries the relu's tag: its time counts in the node it stands before)
    for wait in waits:
        relu = [r for r in _records(run, wait.core, "relu") if "barrier" not in r[0]]
        assert relu and min(start for _, _, start, _ in relu) >= wait.end_tick
    one = _lower(_relu_mm, [x, w], options=TilingOptions(lnc=1)).run([x, w])
    assert torch.equal(run.outputs, one.outputs)
    assert run.result.summary.total_ns < 0.75 * one.result.summary.total_ns


def _block(x, w1, b1, w2, gamma, beta):
    """A transformer MLP block's shape: layer norm, linear, gelu, linear, residual, softmax."""
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta)
    h = torch.nn.functional.gelu(h @ w1 + b1) @ w2
    return torch.softmax(x + h, dim=-1), (x * h).sum(dim=-1)


@pytest.mark.parametrize("passes", ["none", "all"])
def test_lnc2_values_are_bit_for_bit_those_of_lnc1(passes):
    torch.manual_seed(1)
    x = torch.randn(256, 256)
    inputs = [x, torch.randn(256, 512), torch.randn(512), torch.randn(512, 256)]
    inputs += [torch.randn(256), torch.randn(256)]
    config = load_config("trn2")
    one = _lower(_block, inputs, config, TilingOptions(lnc=1), passes).run(inputs)
    pair = _lower(_block, inputs, config, TilingOptions(lnc=2, lnc_min_split_bytes=0), passes)
    assert len(pair.program.cores) == 2 and pair.pipeline["lnc"]["split"]
    two = pair.run(inputs, race_check=True, initcheck=True)
    for a, b in zip(one.outputs, two.outputs, strict=True):
        assert torch.equal(a, b)


def _rotary(q, cos, sin):
    """Llama's rotate_half and the rotary sum: a negated half, a cat along the last dim, then a
    stack and a repeat (each a copy into its slice of a new tensor)."""
    half = q.shape[-1] // 2
    rotated = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    mixed = q * cos + rotated * sin
    return torch.stack((mixed, rotated), dim=1), mixed[:, :1].repeat(1, 3, 1, 1)


@pytest.mark.parametrize("passes", ["none", "all"])
def test_copies_and_fused_maps_split_between_the_cores_with_lnc1_values(passes):
    """cat, stack and repeat copy each input's tiles into their slice of the output, each core
    its share of every input's tiles; a fused elementwise group (the rotary sum, with the pass
    pipeline) hands each core a block of its output tiles. No write outside them, no race."""
    torch.manual_seed(2)
    q, cos, sin = torch.randn(4, 8, 128, 64), torch.randn(128, 64), torch.randn(128, 64)
    config = load_config("trn2")
    one = _lower(_rotary, [q, cos, sin], config, TilingOptions(lnc=1), passes).run([q, cos, sin])
    pair = _lower(_rotary, [q, cos, sin], config, TilingOptions(lnc=2), passes)
    split = set(pair.pipeline["lnc"]["split"])
    assert {"cat", "stack", "repeat"} <= split
    assert any(name.startswith("fused_") for name in split) == (passes == "all")
    assert not pair.pipeline["lnc"]["unsplit_after_escape"]
    two = pair.run([q, cos, sin], race_check=True, initcheck=True)
    for a, b in zip(one.outputs, two.outputs, strict=True):
        assert torch.equal(a, b)


def _attention(q, k, v):
    """Attention as a model's graph holds it (the attention pass fuses it into one kernel)."""
    return torch.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1) @ v


def test_fused_attention_splits_its_query_tiles_with_lnc1_values():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 4, 512, 64) for _ in range(3))
    config = load_config("trn2")
    one = _lower(_attention, [q, k, v], config, TilingOptions(lnc=1), "all").run([q, k, v])
    pair = _lower(_attention, [q, k, v], config, TilingOptions(lnc=2), "all")
    assert any(name.startswith("fused_attention") for name in pair.pipeline["lnc"]["split"])
    assert not pair.pipeline["lnc"]["unsplit_after_escape"]
    two = pair.run([q, k, v], race_check=True, initcheck=True)
    assert torch.equal(one.outputs, two.outputs)
    assert two.result.summary.total_ns < one.result.summary.total_ns


def test_the_trace_shows_both_cores_engines(tmp_path):
    from hwsim.trace.chrome import core_pid, engine_tid, iter_events, write_chrome_trace

    x, w = torch.randn(256, 128), torch.randn(128, 128)
    run = _lower(_relu_mm, [x, w]).run([x, w])
    path = tmp_path / "trace.json"
    write_chrome_trace(run.result.trace, path)
    slices = [e for e in iter_events(path) if e.get("ph") == "X"]
    for engine in ("tensor", "gpsimd"):
        pids = {e["pid"] for e in slices if e.get("tid") == engine_tid(engine)}
        assert pids == {core_pid(0), core_pid(1)}


def test_small_ops_stay_on_core_0_and_a_graph_of_only_small_ops_is_one_core():
    x, w = torch.randn(256, 128), torch.randn(128, 128)
    big_mm = TilingOptions(lnc=2, lnc_min_split_bytes=128 * 128 * 4 + 1)  # relu's [256,128]
    graph = _lower(lambda a, b: torch.relu(a @ b)[:8] * 2.0, [x, w], options=big_mm)
    assert graph.pipeline["lnc"]["split"] == ["mm", "relu"]  # the [8, 128] mul stays on core 0
    run = graph.run([x, w], race_check=True, initcheck=True)
    assert _records(run, 0, "mul") and not _records(run, 1, "mul")
    small = _lower(_relu_mm, [x[:8], w], options=TilingOptions(lnc=2))  # 4 KiB outputs
    assert len(small.program.cores) == 1 and small.pipeline["lnc"]["lnc"] == 1


def test_an_op_that_cannot_split_safely_runs_on_core_0_with_the_same_values():
    """vector_norm stores its result outside the tile drivers' units: the split lowering
    notices, lowers the graph again with it on core 0, and says why."""
    x = torch.randn(512, 256)

    def norm(a):
        return torch.linalg.vector_norm(a * 2.0, dim=1)

    graph = _lower(norm, [x], load_config("trn2"))
    assert graph.pipeline["lnc"]["split"] == ["mul"]
    assert (
        "outside its tiles" in graph.pipeline["lnc"]["unsplit_after_escape"]["linalg_vector_norm"]
    )
    run = graph.run([x], race_check=True, initcheck=True)
    one = _lower(norm, [x], load_config("trn2"), TilingOptions(lnc=1)).run([x])
    assert torch.equal(run.outputs, one.outputs)
    # a graph whose every split escaped is one core's program, as at LNC=1
    alone = _lower(lambda a: torch.linalg.vector_norm(a, dim=1), [x], load_config("trn2"))
    assert len(alone.program.cores) == 1 and alone.pipeline["lnc"]["lnc"] == 1
    assert alone.pipeline["lnc"]["unsplit_kinds"] == ["aten.linalg_vector_norm.default"]


@pytest.mark.parametrize("dim", [0, 1])
def test_a_reduction_and_a_softmax_split_whole_rows_and_whole_sums(dim):
    x = torch.randn(512, 256)

    def reduce(a):
        return (a * 2.0).sum(), (a * 2.0).sum(dim), torch.softmax(a, dim)

    graph = _lower(reduce, [x], load_config("trn2"))
    assert {"sum_1", "sum_2", "_softmax"} <= set(graph.pipeline["lnc"]["split"])
    run = graph.run([x], race_check=True, initcheck=True)
    one = _lower(reduce, [x], load_config("trn2"), TilingOptions(lnc=1)).run([x])
    for a, b in zip(run.outputs, one.outputs, strict=True):
        assert torch.equal(a, b)


def test_the_lnc_option_defaults_to_the_configs_logical_core():
    assert BridgeOptions.parse({}).tiling.lnc is None
    assert BridgeOptions.parse({"lnc": 1}).tiling.lnc == 1
    with pytest.raises(BridgeError, match="trn1 has 1 physical core"):
        BridgeOptions.parse({"config": "trn1", "lnc": 2})
    x, w = torch.randn(256, 512), torch.randn(512, 512)
    assert len(_lower(_relu_mm, [x, w], load_config("trn2"), TilingOptions()).program.cores) == 2
    assert len(_lower(_relu_mm, [x, w], load_config("trn1"), TilingOptions()).program.cores) == 1


def _end_tick(lowered):
    from hwsim.machine.simulator import run

    return run(lowered.program, lowered.config, numerics=False).trace.end_tick


def _end_ns(lowered):
    from hwsim.machine.simulator import run

    trace = run(lowered.program, lowered.config, numerics=False).trace
    return trace.ticks_to_ns(trace.end_tick)


@pytest.mark.parametrize(
    ("fn", "shapes", "cores"),
    [
        # a [256, 128] chain: four ops of 128 KiB, three barriers between the halves cost more
        # than the second core saves
        (lambda a: ((a * 2.0).relu() + 1.0).sigmoid(), [(256, 128)], 1),
        # a [2048, 1024] x [1024, 1024] matmul: each core's half takes about half the time
        (_relu_mm, [(2048, 1024), (1024, 1024)], 2),
    ],
)
def test_left_to_the_bridge_a_graph_keeps_its_faster_lowering(fn, shapes, cores):
    """``lnc`` at None: the graph is lowered for the pair and for one core, each simulated
    timing-only, and the faster kept; the log's times are those of the explicit lowerings."""
    trn2 = load_config("trn2")
    inputs = [torch.randn(*shape) for shape in shapes]
    chosen = _lower(fn, inputs, trn2, TilingOptions())
    one = _lower(fn, inputs, trn2, TilingOptions(lnc=1))
    pair = _lower(fn, inputs, trn2, TilingOptions(lnc=2))
    timed = chosen.pipeline["lnc"]["timed"]
    assert timed == {"lnc2_ns": _end_ns(pair), "lnc1_ns": _end_ns(one)}
    assert (_end_tick(pair) < _end_tick(one)) == (cores == 2)
    assert len(chosen.program.cores) == cores and chosen.pipeline["lnc"]["lnc"] == cores
    assert _end_tick(chosen) == min(_end_tick(pair), _end_tick(one))
    assert torch.equal(chosen.run(inputs).outputs, one.run(inputs).outputs)


def test_an_lnc_given_explicitly_is_not_second_guessed():
    x = torch.randn(256, 128)
    pair = _lower(lambda a: ((a * 2.0).relu() + 1.0).sigmoid(), [x], load_config("trn2"),
                  TilingOptions(lnc=2))  # fmt: skip
    assert len(pair.program.cores) == 2 and "timed" not in pair.pipeline["lnc"]


def test_the_report_says_how_many_cores_each_run_used_and_whether_the_bridge_chose():
    import hwsim.bridge as bridge

    def layer(a, b):
        return torch.relu(a @ b)

    x, w = torch.randn(2048, 1024), torch.randn(1024, 1024)
    for options, cores, chosen in (({}, 2, True), ({"lnc": 1}, 1, False)):
        torch._dynamo.reset()
        compiled = torch.compile(layer, backend="hwsim", options={"config": "trn2"} | options)
        compiled(x, w)
        run = bridge.last_report().runs[-1]
        assert (run["cores"], run["cores_chosen"]) == (cores, chosen)
        text = bridge.last_report().text()
        runs = text[text.index("simulator runs") :].splitlines()
        row = next(line for line in runs if f" {run['graph']} " in line)
        assert (f"{cores} (chosen)" if chosen else f" {cores} ") in row
