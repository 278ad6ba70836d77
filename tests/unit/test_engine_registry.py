"""Engines are data: a toy engine is one registration (plus an instruction that runs on it, and
that instruction's cost rule), and the time base, legality, the cost model, the simulator, the
trace, the summary, Chrome export and the profiler tables all pick it up with no edit anywhere
else."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from hwsim.builder import ProgramBuilder
from hwsim.config import load_config
from hwsim.config.timebase import TimeBase
from hwsim.cost import Cost, CostModel, cost_rule
from hwsim.cost.rules import unregister_rule
from hwsim.dtypes import FP32
from hwsim.engines import EngineSpec, engine_names, register_engine, unregister_engine
from hwsim.isa import MemorySpace, contiguous
from hwsim.isa.base import ISA, Instruction, MachineSpec, register
from hwsim.isa.copy_ops import TensorCopy
from hwsim.machine.simulator import run
from hwsim.trace.chrome import iter_events, write_chrome_trace
from hwsim.trace.tables import instruction_rows

SBUF = MemorySpace.SBUF


@dataclass(frozen=True, kw_only=True)
class ToyCopy(Instruction):
    """dst = src on the toy engine, costed like a VectorE copy (its config section)."""

    dst: object
    src: object

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst,)

    def execute(self, state) -> None:
        state.write(self.dst, state.read(self.src))


def toy_copy_cost(model: CostModel, instruction: ToyCopy) -> Cost:
    return model.compute("toy", instruction.src.free_elements)


@pytest.fixture
def toy_engine():
    register_engine(
        EngineSpec(
            name="toy",
            kind="compute",
            clock_section="vector_engine",
            cost_section="vector_engine",
            reads=frozenset({"sbuf", "psum"}),
            writes=frozenset({"sbuf", "psum"}),
            label="ToyE",
            profiler_name="Toy",
        )
    )
    register("toy_copy", engines=("toy",), profiler="TOY_COPY")(ToyCopy)
    cost_rule(ToyCopy)(toy_copy_cost)
    yield
    unregister_rule(ToyCopy)
    del ISA["toy_copy"]
    unregister_engine("toy")


def toy_program():
    b = ProgramBuilder()
    b.program.add_tensor(
        "x", (32, 64), FP32, "input", np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    )
    b.program.add_tensor("y", (32, 64), FP32, "output")
    from hwsim.isa.dma_ops import DmaCopy

    a, c, d = (contiguous(SBUF, FP32, 32, 64, offset_bytes=o) for o in (0, 256, 512))
    b.emit(DmaCopy(engine="sync", dst=a, src=contiguous(MemorySpace.HBM, FP32, 32, 64, tensor="x")))
    b.emit(ToyCopy(engine="toy", dst=c, src=a))
    b.emit(TensorCopy(engine="vector", dst=d, src=c))  # waits for the toy engine's completion
    b.emit(DmaCopy(engine="toy", dst=contiguous(MemorySpace.HBM, FP32, 32, 64, tensor="y"), src=d))
    return b.build()


def test_a_toy_engine_is_one_registration(toy_engine, tmp_path):
    assert engine_names()[-1] == "toy"
    config = load_config("tiny")
    assert TimeBase.from_config(config).ticks_per_cycle["toy"] == 2  # VectorE's clock
    result = run(toy_program(), config, race_check=True)
    np.testing.assert_array_equal(result.outputs["y"], np.arange(32 * 64).reshape(32, 64))
    toy = [r for r in result.trace.instructions if r.engine == "toy"]
    assert [r.instruction.OPCODE for r in toy] == ["toy_copy", "dma_copy"]
    # its cost is VectorE's rule on VectorE's clock: max(16, 64) cycles x 2 ticks
    assert toy[0].end_tick - toy[0].start_tick == 128
    (copy,) = [r for r in result.trace.instructions if r.engine == "vector"]
    assert copy.start_tick == toy[0].done_tick  # a cross-engine dependency through S.toy
    summary = result.summary
    assert summary.engines["toy"].instructions == 2
    assert summary.engines["toy"].label == "ToyE" and summary.engines["toy"].busy_pct > 0
    events = list(iter_events(write_chrome_trace(result.trace, tmp_path / "t.json")))
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "ToyE" in names
    assert "Toy" in {row[3] for row in instruction_rows(result.trace)}


def test_an_instruction_cannot_run_on_an_engine_it_does_not_name(toy_engine):
    bad = TensorCopy(
        engine="toy", dst=contiguous(SBUF, FP32, 4, 4), src=contiguous(SBUF, FP32, 4, 4)
    )
    with pytest.raises(Exception, match="cannot run on engine 'toy'"):
        bad.check(MachineSpec(load_config("tiny")))


def test_unknown_engines_are_named_with_the_registered_ones():
    b = ProgramBuilder()
    with pytest.raises(Exception, match="unknown engine 'toy'; engines are tensor, vector"):
        b.emit(
            TensorCopy(
                engine="toy", dst=contiguous(SBUF, FP32, 4, 4), src=contiguous(SBUF, FP32, 4, 4)
            )
        )
