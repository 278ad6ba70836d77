"""The instructions whose documented cost is one pass of their operand streams, as a table.

``max(MIN_II, N)`` [S16] (``CostModel.compute`` adds MIN_II and the engine's fixed cost), N the
streaming time of the listed inputs in and outputs out (``hwsim.cost.streaming``). Each row:
the engine (None: the instruction's own), the fields streamed in and out (``READS``: every
operand it reads), whether a PSUM input has its own read port (False where the documented
cost has no PSUM case [S16]), and whether the pass ends by reading out the engine's accumulator
(``+ MIN_II`` [S16]: always, or when the named result field is given). The instructions'
docstrings state each row's source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hwsim.cost.rules.registry import cost_rule
from hwsim.cost.streaming import streaming_cycles
from hwsim.isa.ap import AccessPattern
from hwsim.isa.base import Instruction
from hwsim.isa.copy_ops import TensorCopyPredicated
from hwsim.isa.fused_ops import Activate2
from hwsim.isa.gather_ops import NcStreamShuffle
from hwsim.isa.gpsimd_ops import AffineSelect, Iota
from hwsim.isa.index_ops import NonzeroWithCount, SequenceBounds
from hwsim.isa.random_ops import RandGetState, RandSetState, SetRngSeed
from hwsim.isa.reduce_ops import BnStats
from hwsim.isa.scalar_ops import Activation, ActivationReduce
from hwsim.isa.scan_ops import TensorScalarCumulative, TensorScalarReduce, TensorTensorScan
from hwsim.isa.search_ops import Max8, NcFindIndex8, NcMatchReplace8, RangeSelect, SelectReduce
from hwsim.isa.vector_ops import Select

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel
    from hwsim.cost.values import Cost

#: Stream every operand the instruction reads (``reads()``) or writes (``writes()``), or the first.
READS, WRITES, FIRST_READ, FIRST_WRITE = "reads()", "writes()", "reads()[0]", "writes()[0]"


@dataclass(frozen=True)
class StreamPass:
    """One row of the table: what one pass streams (see the module docstring)."""

    engine: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    psum_own_port: bool = True
    read_out: bool | str = False

    def operands(self, instruction: Instruction, names: tuple[str, ...]) -> list[AccessPattern]:
        found: list[AccessPattern] = []
        for name in names:
            if name in (READS, FIRST_READ):
                found += instruction.reads()[: None if name == READS else 1]
            elif name in (WRITES, FIRST_WRITE):
                found += instruction.writes()[: None if name == WRITES else 1]
            else:
                found.append(_operand(instruction, name))
        return found


def _operand(instruction: Instruction, name: str) -> AccessPattern:
    value: Any = getattr(instruction, name)
    return value() if callable(value) else value


STREAM_PASSES: dict[type[Instruction], StreamPass] = {
    BnStats: StreamPass("vector", ("src",), ("dst",)),
    TensorTensorScan: StreamPass("vector", ("src0", "src1"), ("dst",), psum_own_port=False),
    TensorScalarCumulative: StreamPass("vector", ("src",), ("dst",)),
    Max8: StreamPass("vector", ("src",), ("dst",)),
    NcFindIndex8: StreamPass("vector", ("data",), ("dst",)),
    NcMatchReplace8: StreamPass("vector", ("data",), (WRITES,)),
    RangeSelect: StreamPass("vector", ("on_true",), ("dst",)),
    SelectReduce: StreamPass("vector", ("predicate", "on_true"), ("dst",)),
    NcStreamShuffle: StreamPass("vector", ("src",), ("dst",)),
    Iota: StreamPass("gpsimd", (READS,), ("dst",)),
    AffineSelect: StreamPass("gpsimd", (READS,), ("dst",)),
    NonzeroWithCount: StreamPass("gpsimd", (FIRST_READ,), (FIRST_WRITE,)),
    SequenceBounds: StreamPass("gpsimd", ("segment_ids",), ("dst",)),
    SetRngSeed: StreamPass("vector", ("src_seeds",), ()),
    RandSetState: StreamPass(None, ("tile",), ()),
    RandGetState: StreamPass(None, ("tile",), ()),
    Activation: StreamPass("scalar", ("src",), ("dst",)),
    ActivationReduce: StreamPass("scalar", ("src",), ("dst",), read_out=True),
    Activate2: StreamPass("scalar", ("src",), ("dst",), read_out="reduce_res"),
    TensorScalarReduce: StreamPass("vector", ("src",), ("dst",), read_out=True),
    Select: StreamPass("vector", (READS,), ("dst",)),
    TensorCopyPredicated: StreamPass("vector", (READS,), ("dst",)),
}


def _stream_pass_rule(row: StreamPass) -> Callable[[CostModel, Instruction], Cost]:
    def rule(model: CostModel, instruction: Instruction) -> Cost:
        engine = row.engine or instruction.engine
        inputs = row.operands(instruction, row.inputs)
        outputs = row.operands(instruction, row.outputs)
        work = streaming_cycles(model, engine, inputs, outputs, psum_own_port=row.psum_own_port)
        read_out = row.read_out
        if isinstance(read_out, str):
            read_out = getattr(instruction, read_out) is not None
        extra = model.engine_configs[engine].min_ii_cycles if read_out else 0
        return model.compute(engine, work, extra_cycles=extra)

    return rule


for _cls, _row in STREAM_PASSES.items():
    cost_rule(_cls)(_stream_pass_rule(_row))
