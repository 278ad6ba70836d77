"""The cost model (``hwsim.cost``): one per config, one rule per instruction type, every
parameter listed and settable, and the exact ticks it answers with on ``tiny`` (1 tick = 1 ns;
VectorE 2 ticks per cycle, MIN_II 16, pipeline latency 10; 4 DMA engines at 4 B/ns, HBM 8 B/ns,
start latency 100 ns, doorbell 10 ns)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.cost import CostModel, InstructionCost, cost_rule, rule_for, rules_for
from hwsim.cost.parameters import cost_parameters, with_parameters
from hwsim.dtypes import FP32
from hwsim.errors import ConfigError, IllegalInstructionError
from hwsim.isa import ISA, AccessPattern, Instruction, MemorySpace, contiguous
from hwsim.isa.dma_ops import DmaCopy
from hwsim.isa.vector_ops import Reciprocal
from hwsim.machine.simulator import run

SBUF, HBM = MemorySpace.SBUF, MemorySpace.HBM


def reciprocal(offset_bytes: int = 0) -> Reciprocal:
    src = contiguous(SBUF, FP32, 32, 64, offset_bytes=offset_bytes)
    dst = contiguous(SBUF, FP32, 32, 64, offset_bytes=offset_bytes + 256)
    return Reciprocal(engine="vector", dst=dst, src=src)


def load() -> DmaCopy:
    src = contiguous(HBM, FP32, 32, 64, tensor="x")
    return DmaCopy(engine="sync", dst=contiguous(SBUF, FP32, 32, 64), src=src)


def test_one_model_per_config_found_by_object_and_by_content():
    tiny = load_config("tiny")
    model = CostModel.for_config(tiny)
    assert CostModel.for_config(tiny) is model
    assert CostModel.for_config(load_config("tiny")) is model  # an equal config, another object
    assert CostModel.for_config(load_config("trn1")) is not model
    other_rules = dataclasses.replace(rules_for("v2"), reciprocal_cycles_per_element=4)
    assert CostModel.for_config(tiny, other_rules) is not model


def test_an_instruction_cost_is_named_typed_and_frozen():
    model = CostModel.for_config(load_config("tiny"))
    cost = model.of(reciprocal())
    assert isinstance(cost, InstructionCost)
    # max(MIN_II 16, 8 x 64) = 512 cycles of 2 ticks; results 10 cycles later; a dependent
    # reciprocal streams behind it once its issue ends (longer than MIN_II + latency)
    assert cost == InstructionCost(
        issue_ticks=1024,
        latency_ticks=1044,
        chain_ticks=1024,
        ports=(),
        hold_ticks=1024,
        transfer=None,
        submit_ticks=0,
    )
    with pytest.raises(AttributeError):
        cost.issue_ticks = 0  # type: ignore[misc]
    assert model.of(reciprocal(offset_bytes=1024)) is not cost  # another instruction
    assert model.of(reciprocal()) is cost  # worked out once per distinct instruction


def test_a_dma_costs_its_trigger_and_carries_its_transfer():
    model = CostModel.for_config(load_config("tiny"))
    cost = model.of(load())
    assert (cost.issue_ticks, cost.latency_ticks, cost.submit_ticks) == (10, 10, 0)
    plan = cost.transfer
    assert plan is not None
    # 32 partitions over 4 engines: 8 rows of 256 B each, at 4 B/ns, plus the 4-byte semaphore
    assert [(p.nbytes, p.descriptors) for p in plan.pieces] == [(2048, 8)] * 4
    # the scheduler's view: the doorbell, the start latency, then 8 KiB at the stack's 8 B/ns
    # (longer than an engine's 8 x 64 + 1 ns)
    estimate = model.estimate(load())
    assert (estimate.transfer_delay_ticks, estimate.transfer_ticks) == (100, 1024)
    assert (estimate.issue_ticks, estimate.latency_ticks, estimate.chain_ticks) == (10, 1124, 10)


def test_an_illegal_instruction_has_no_cost():
    wide = contiguous(SBUF, FP32, 32, 64)
    bad = Reciprocal(engine="vector", dst=contiguous(SBUF, FP32, 16, 64), src=wide)
    with pytest.raises(IllegalInstructionError, match="reciprocal on vector"):
        CostModel.for_config(load_config("tiny")).of(bad)


def test_every_instruction_has_a_rule_and_none_costs_itself():
    for cls in ISA.values():
        assert rule_for(cls) is not None
        assert "cost" not in vars(cls), f"{cls.__name__} computes its own cost"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unruled(Instruction):
    OPCODE = "unruled"
    ENGINES = ("vector",)
    dst: AccessPattern


def test_an_instruction_without_a_rule_is_named():
    with pytest.raises(NotImplementedError, match=r"Unruled .*has no cost rule"):
        rule_for(Unruled)


def test_a_second_rule_for_a_type_is_an_error():
    with pytest.raises(ValueError, match="Reciprocal already has a cost rule"):
        cost_rule(Reciprocal)(lambda model, instruction: None)


def test_parameters_are_listed_with_their_values_and_meaning():
    config = load_config("trn2")
    found = {p.name: p for p in cost_parameters(config)}
    bandwidth = found["dma.bandwidth_bytes_per_ns"]
    assert (
        bandwidth.value == config.dma.bandwidth_bytes_per_ns
        and "bandwidth" in bandwidth.description
    )
    assert found["dma.descriptor_efficiency"].calibrated
    assert not bandwidth.calibrated
    rule = found["rules.reciprocal_cycles_per_element"]
    assert rule.value == 8 and "[S16]" in rule.description
    assert "chip.name" not in found and "host.latency_ns" not in found  # not cost parameters


def test_parameters_are_set_by_name_and_reach_the_cost():
    tiny = load_config("tiny")
    config, rules = with_parameters(
        tiny, {"vector_engine.clock_mhz": 250, "rules.reciprocal_cycles_per_element": 4}
    )
    assert config.vector_engine.clock_mhz == 250 and rules.reciprocal_cycles_per_element == 4
    # 4 x 64 = 256 cycles, now 4 ticks each (250 MHz on a 1 GHz time base)
    assert CostModel.for_config(config, rules).of(reciprocal()).issue_ticks == 1024
    with pytest.raises(ConfigError, match=r"not cost parameters: dma\.bandwith"):
        with_parameters(tiny, {"dma.bandwith": 1})
    with pytest.raises(ConfigError, match="not a positive integer"):
        with_parameters(tiny, {"rules.reciprocal_cycles_per_element": 0})


def test_a_run_uses_the_rules_it_is_given():
    b = ProgramBuilder()
    b.program.add_tensor("x", (32, 64), FP32, "input", np.ones((32, 64), np.float32))
    b.program.add_tensor("y", (32, 64), FP32, "output")
    instruction = reciprocal()
    b.emit(
        DmaCopy(engine="sync", dst=instruction.src, src=contiguous(HBM, FP32, 32, 64, tensor="x"))
    )
    b.emit(instruction)
    b.emit(
        DmaCopy(engine="sync", dst=contiguous(HBM, FP32, 32, 64, tensor="y"), src=instruction.dst)
    )
    program = b.build()
    faster = dataclasses.replace(rules_for("v2"), reciprocal_cycles_per_element=2)
    for rules, issue in ((None, 1024), (faster, 256)):
        trace = run(program, "tiny", numerics=False, summarize=False, rules=rules).trace
        (record,) = (r for r in trace.instructions if r.engine == "vector")
        assert record.end_tick - record.start_tick == issue
