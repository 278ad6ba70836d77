"""Per-program preparation is kept for the next run, and only for the program it was made from."""

from __future__ import annotations

import dataclasses

from hwsim.config import load_config
from hwsim.cost import CostModel
from hwsim.lang import TensorSpec
from hwsim.library import matmul_optimized
from hwsim.machine import prepare
from hwsim.machine.simulator import run
from hwsim.trace.records import Trace


def _program():
    spec = TensorSpec((512, 512), "bf16")
    return matmul_optimized.build(spec, spec, config=load_config("trn1")).program


def _timeline(trace: Trace) -> list[tuple[str, int, int, int, int]]:
    return [(r.engine, r.pc, r.ready_tick, r.start_tick, r.done_tick) for r in trace.instructions]


def test_second_run_reuses_preparation_and_times_alike(monkeypatch) -> None:
    program = _program()
    config = load_config("trn1")
    first = run(program, config, numerics=False, summarize=False)
    calls = []
    monkeypatch.setattr(prepare, "_static_steps", lambda *a: calls.append(a) or [])
    monkeypatch.setattr(CostModel, "streams_costs", lambda *a: calls.append(a))
    second = run(program, config, numerics=False, summarize=False)
    assert calls == []
    assert _timeline(second.trace) == _timeline(first.trace)


def test_other_config_gets_its_own_costs() -> None:
    program = _program()
    trn1, trn2 = load_config("trn1"), load_config("trn2")
    on_trn1 = run(program, trn1, numerics=False, summarize=False)
    on_trn2 = run(program, trn2, numerics=False, summarize=False)
    fresh_trn2 = run(_program(), trn2, numerics=False, summarize=False)
    assert _timeline(on_trn2.trace) == _timeline(fresh_trn2.trace)
    assert _timeline(on_trn2.trace) != _timeline(on_trn1.trace)


def test_edited_program_is_prepared_again() -> None:
    program = _program()
    config = load_config("trn1")
    before = run(program, config, numerics=False, summarize=False)
    stream = program.cores[0].streams["tensor"]
    stream[:] = stream[: len(stream) // 2] + stream[len(stream) // 2 :]  # same: still cached
    assert _timeline(run(program, config, numerics=False, summarize=False).trace) == _timeline(
        before.trace
    )
    # Replace the tensor engine's stream by a copy of its instructions: new objects, new ids.
    program.cores[0].streams["tensor"] = [dataclasses.replace(i) for i in stream]
    prepared_ids = program.run_cache[("core", 0)].stream_ids
    run(program, config, numerics=False, summarize=False)
    assert program.run_cache[("core", 0)].stream_ids != prepared_ids


def test_kept_configs_are_bounded() -> None:
    program = _program()
    latency_ns = load_config("trn1").dma.start_latency_ns
    for ns in range(prepare.KEPT_CONFIGS + 3):
        config = load_config("trn1", {"dma.start_latency_ns": latency_ns + ns})
        run(program, config, numerics=False, summarize=False)
    assert len(program.run_cache[("core", 0)].costs) == prepare.KEPT_CONFIGS
