"""Exact issue ticks of the VectorE/ScalarE/GpSimdE cost rules per dtype x source memory x access
pattern x generation (docs/fidelity.md, "Engine cost rules"; ``hwsim.cost.streaming``).

Each case runs one instruction on trn1 (NeuronCore-v2) and on trn2 (v3) with P = 4 partitions and
N = 512 elements per partition, and gives the hand-derived engine cycles on each: v2 reads one
SBUF input stream at a time (two SBUF inputs: 2N), v3 VectorE two 4-byte or four 16-bit streams
(N); a PSUM input has its own read interface (except where the documented formula has no PSUM
case: scalar_tensor_tensor, tensor_tensor_scan); an innermost stride above 16 B doubles that
operand's stream ("stride 8" for 4-byte, "stride 16" for 2-byte dtypes = 32 B); v3 performance
mode makes 16-bit tensor_copy/tensor_scalar 4x (2x with one condition failing). Ticks per cycle:
trn1 (5600 MHz base) VectorE 5, ScalarE 4, GpSimdE 4; trn2 (4800 MHz) the same. N = 512 is above
MIN_II (64), so the floor never hides a rule; GpSimdE adds GPSIMD_START = 150.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from hwsim.cost import CostModel
from hwsim.cost.streaming import stream_cycles, streaming_cycles
from hwsim.dtypes import BF16, FP16, FP32, INT16, INT32, UINT8, DType
from hwsim.isa import AccessPattern, Instruction
from hwsim.isa.copy_ops import TensorCopy
from hwsim.isa.gpsimd_ops import AffineSelect, Iota
from hwsim.isa.reduce_ops import BnAggr, BnStats, TensorReduce
from hwsim.isa.scalar_ops import Activation, ActivationReduce
from hwsim.isa.scan_ops import TensorScalarCumulative, TensorScalarReduce, TensorTensorScan
from hwsim.isa.vector_ops import (
    Memset,
    Reciprocal,
    ScalarTensorTensor,
    Select,
    TensorScalar,
    TensorTensor,
)
from hwsim.kernels import ActivationFunction, AluOp, ReduceOp

from .helpers import PSUM, SBUF, V3_VECTOR_FIXED, as_config, assert_timing, inp, out, run_single

P, N = 4, 512
#: Fixed cycles per instruction beside the data path's: trn2/trn3 VectorE's, the part of the
#: ~60-cycle tensor access start [S1] that K2-v5's VectorE active time shows unhidden (calibrated,
#: docs/fidelity.md); GpSimdE's GPSIMD_START is in each case's cycles.
FIXED_CYCLES = {("trn2", "vector"): V3_VECTOR_FIXED, ("trn3", "vector"): V3_VECTOR_FIXED}
TICKS_PER_CYCLE = {
    ("trn1", "vector"): 5,
    ("trn1", "scalar"): 4,
    ("trn1", "gpsimd"): 4,
    ("trn2", "vector"): 5,
    ("trn2", "scalar"): 4,
    ("trn2", "gpsimd"): 4,
    ("trn3", "scalar"): 2,  # 2400 MHz base, ScalarE 1200 MHz
}


@dataclass(frozen=True)
class T:
    """One operand: dtype, memory, innermost stride (elements) and free size (elements)."""

    dtype: DType
    memory: object = SBUF
    stride: int = 1
    free: int = N


Make = Callable[[dict[str, AccessPattern]], Instruction]


@dataclass(frozen=True)
class Case:
    """An instruction (``make`` from operand access patterns) and its cycles on v2 / v3."""

    name: str
    engine: str
    make: Make
    inputs: dict[str, T]
    outputs: dict[str, T]
    v2: int | None  # None: not legal on NeuronCore-v2
    v3: int


def _view(ap: AccessPattern, operand: T) -> AccessPattern:
    if operand.stride == 1:
        return ap
    return dataclasses.replace(ap, free_sizes=(operand.free,), free_strides=(operand.stride,))


def _values(operand: T) -> np.ndarray:
    return np.ones((P, operand.free * operand.stride))


def _run(case: Case, config: str, cycles: int) -> None:
    operands = {**case.inputs, **case.outputs}
    run = run_single(
        lambda aps: case.make({k: _view(ap, operands[k]) for k, ap in aps.items()}),
        {k: inp(_values(t), t.dtype, t.memory) for k, t in case.inputs.items()},
        {k: out((P, t.free * t.stride), t.dtype, t.memory) for k, t in case.outputs.items()},
        config=config,
        numerics=False,
    )
    ticks = TICKS_PER_CYCLE[(config, case.engine)]
    engine_config = getattr(as_config(config), f"{case.engine}_engine")
    latency = engine_config.pipeline_latency_cycles * ticks
    cycles += FIXED_CYCLES.get((config, case.engine), 0)
    assert_timing(run, cycles * ticks, cycles * ticks + latency)


def tt(op: AluOp = AluOp.add, engine: str = "vector") -> Make:
    return lambda a: TensorTensor(engine=engine, dst=a["dst"], src0=a["a"], src1=a["b"], op=op)


def ts(engine: str = "vector") -> Make:
    return lambda a: TensorScalar(
        engine=engine, dst=a["dst"], src=a["x"], op0=AluOp.multiply, scalar0=2.0
    )


def copy(engine: str = "vector") -> Make:
    return lambda a: TensorCopy(engine=engine, dst=a["dst"], src=a["x"])


def stt(op0: AluOp = AluOp.multiply, op1: AluOp = AluOp.add) -> Make:
    return lambda a: ScalarTensorTensor(
        engine="vector", dst=a["dst"], src0=a["a"], op0=op0, scalar0=2.0, op1=op1, src1=a["b"]
    )


def select(a: dict[str, AccessPattern]) -> Instruction:
    return Select(engine="vector", dst=a["dst"], pred=a["p"], on_true=a["t"], on_false=a["f"])


def reduce(op: ReduceOp = ReduceOp.add) -> Make:
    return lambda a: TensorReduce(engine="vector", dst=a["dst"], src=a["x"], op=op)


def act(a: dict[str, AccessPattern]) -> Instruction:
    return Activation(engine="scalar", dst=a["dst"], src=a["x"], func=ActivationFunction.exp)


def scan(a: dict[str, AccessPattern]) -> Instruction:
    return TensorTensorScan(
        engine="vector",
        dst=a["dst"],
        src0=a["a"],
        src1=a["b"],
        initial=0.0,
        op0=AluOp.multiply,
        op1=AluOp.add,
    )


def two(dtype: DType, a: T | None = None, b: T | None = None, dst: T | None = None):
    """inputs a, b and output dst of ``dtype`` (SBUF, contiguous) unless given."""
    return {"a": a or T(dtype), "b": b or T(dtype)}, {"dst": dst or T(dtype)}


def one(src: T, dst: T | None = None):
    return {"x": src}, {"dst": dst or T(src.dtype)}


REDUCED = T(FP32, free=1)  # a [P, 1] reduction result


def _cases() -> list[Case]:
    c = []

    def add(name, engine, make, io, v2, v3):
        c.append(Case(name, engine, make, io[0], io[1], v2, v3))

    # ---- tensor_tensor [S16]; v3 data path [S2] -------------------------------------------------
    add("tt fp32 sbuf+sbuf", "vector", tt(), two(FP32), 2 * N, N)
    add("tt fp32 sbuf+psum", "vector", tt(), two(FP32, b=T(FP32, PSUM)), N, N)
    add("tt fp32 strided+sbuf", "vector", tt(), two(FP32, a=T(FP32, stride=8)), 3 * N, 2 * N)
    add("tt fp32 strided+psum", "vector", tt(), two(FP32, T(FP32, stride=8), T(FP32, PSUM)),
        2 * N, 2 * N)  # fmt: skip
    add("tt fp32 strided dst", "vector", tt(), two(FP32, dst=T(FP32, stride=8)), 2 * N, 2 * N)
    add("tt bf16 add sbuf+sbuf", "vector", tt(), two(BF16), N, N)  # the bf16 case [S16]
    add("tt bf16 max sbuf+sbuf", "vector", tt(AluOp.max), two(BF16), 2 * N, N)
    add("tt bf16 add strided+sbuf", "vector", tt(), two(BF16, a=T(BF16, stride=16)), 3 * N,
        2 * N)  # fmt: skip
    add("tt bf16 add stride-2 (4 B)", "vector", tt(), two(BF16, a=T(BF16, stride=2)), 2 * N, N)
    add("tt bf16 max sbuf+psum", "vector", tt(AluOp.max), two(BF16, b=T(BF16, PSUM)), N, N)
    add("tt fp32 gpsimd", "gpsimd", tt(engine="gpsimd"), two(FP32), 150 + 2 * N, 150 + 2 * N)
    add("tt bf16 gpsimd", "gpsimd", tt(engine="gpsimd"), two(BF16), 150 + 2 * N, 150 + 2 * N)
    # ---- tensor_scalar [S16], performance mode [S2] ---------------------------------------------
    add("ts fp32 sbuf", "vector", ts(), one(T(FP32)), N, N)
    add("ts fp32 psum", "vector", ts(), one(T(FP32, PSUM)), N, N)
    add("ts fp32 strided", "vector", ts(), one(T(FP32, stride=8)), 2 * N, 2 * N)
    add("ts fp32 strided dst", "vector", ts(), one(T(FP32), T(FP32, stride=8)), 2 * N, 2 * N)
    add("ts bf16 sbuf", "vector", ts(), one(T(BF16)), N, N // 4)
    add("ts bf16 psum", "vector", ts(), one(T(BF16, PSUM)), N, N // 2)
    add("ts bf16 stride-2 (4 B)", "vector", ts(), one(T(BF16, stride=2)), N, N // 2)
    add("ts bf16 strided", "vector", ts(), one(T(BF16, stride=16)), 2 * N, N)
    # 128 elements (a 2048-element PSUM tile: VectorE reads at most 4K from PSUM [S1])
    psum_strided = T(BF16, PSUM, stride=16, free=128)
    add("ts bf16 psum strided", "vector", ts(), one(psum_strided, T(BF16, free=128)), 256, 256)
    add("ts bf16 -> fp32", "vector", ts(), one(T(BF16), T(FP32)), N, N)
    add("ts fp32 scalar", "scalar", ts("scalar"), one(T(FP32)), N, N)
    add("ts bf16 scalar", "scalar", ts("scalar"), one(T(BF16)), N, N)
    add("ts fp32 gpsimd", "gpsimd", ts("gpsimd"), one(T(FP32)), 150 + N, 150 + N)
    # ---- tensor_copy [S16], performance mode [S2] -----------------------------------------------
    add("copy fp32", "vector", copy(), one(T(FP32)), N, N)
    add("copy bf16 sbuf", "vector", copy(), one(T(BF16)), N, N // 4)
    add("copy bf16 psum", "vector", copy(), one(T(BF16, PSUM)), N, N // 2)
    add("copy fp16 -> bf16", "vector", copy(), one(T(FP16), T(BF16)), N, N // 4)
    add("copy fp32 -> bf16", "vector", copy(), one(T(FP32), T(BF16)), N, N)
    add("copy int16 (no perf mode)", "vector", copy(), one(T(INT16)), N, N)
    add("copy bf16 strided", "vector", copy(), one(T(BF16, stride=16)), 2 * N, N)
    add("copy fp32 strided dst", "vector", copy(), one(T(FP32), T(FP32, stride=8)), 2 * N, 2 * N)
    add("copy fp32 scalar", "scalar", copy("scalar"), one(T(FP32)), None, N)
    add("copy bf16 scalar", "scalar", copy("scalar"), one(T(BF16)), None, N)
    add("copy fp32 gpsimd", "gpsimd", copy("gpsimd"), one(T(FP32)), 150 + N, 150 + N)
    # ---- scalar_tensor_tensor [S16]: no PSUM case ----------------------------------------------
    add("stt fp32 sbuf+sbuf", "vector", stt(), two(FP32), 2 * N, N)
    add("stt fp32 psum+sbuf", "vector", stt(), two(FP32, a=T(FP32, PSUM)), 2 * N, N)
    add("stt bf16 subtract-multiply", "vector", stt(AluOp.subtract, AluOp.multiply), two(BF16),
        N, N)  # fmt: skip
    add("stt bf16 multiply-add", "vector", stt(), two(BF16), 2 * N, N)
    add("stt fp32 strided+sbuf", "vector", stt(), two(FP32, a=T(FP32, stride=8)), 3 * N, 2 * N)
    # ---- select: three input streams ------------------------------------------------------------
    three = {"p": T(FP32), "t": T(FP32), "f": T(FP32)}
    add("select fp32 sbuf", "vector", select, (three, {"dst": T(FP32)}), 3 * N, 3 * N // 2)
    add("select fp32 on_false psum", "vector", select,
        ({**three, "f": T(FP32, PSUM)}, {"dst": T(FP32)}), 2 * N, N)  # fmt: skip
    add("select uint8 pred", "vector", select,
        ({**three, "p": T(UINT8)}, {"dst": T(FP32)}), 3 * N, 3 * N // 2)  # fmt: skip
    add("select bf16", "vector", select,
        ({"p": T(BF16), "t": T(BF16), "f": T(BF16)}, {"dst": T(BF16)}), 3 * N, N)  # fmt: skip
    add("select fp32 strided on_true", "vector", select,
        ({**three, "t": T(FP32, stride=8)}, {"dst": T(FP32)}), 4 * N, 2 * N)  # fmt: skip
    # ---- tensor_reduce [S16] --------------------------------------------------------------------
    add("reduce fp32 add", "vector", reduce(), one(T(FP32), REDUCED), N, N)
    add("reduce fp32 psum", "vector", reduce(), one(T(FP32, PSUM), REDUCED), N, N)
    add("reduce bf16 add", "vector", reduce(), one(T(BF16), T(BF16, free=1)), N // 2, N // 2)
    add("reduce bf16 -> fp32", "vector", reduce(), one(T(BF16), REDUCED), N, N)
    add("reduce bf16 max", "vector", reduce(ReduceOp.max), one(T(BF16), T(BF16, free=1)),
        N // 2, N // 2)  # fmt: skip
    add("reduce bf16 strided", "vector", reduce(), one(T(BF16, stride=16), T(BF16, free=1)),
        N, N)  # fmt: skip
    add("reduce fp32 strided", "vector", reduce(), one(T(FP32, stride=8), REDUCED), 2 * N, 2 * N)
    # ---- other VectorE formulas [S16] -----------------------------------------------------------
    memset0 = lambda a: Memset(engine="vector", dst=a["dst"], value=0.0)  # noqa: E731
    add("memset fp32", "vector", memset0, ({}, {"dst": T(FP32)}), N, N)
    add("memset 0 bf16", "vector", memset0, ({}, {"dst": T(BF16)}), N // 2, N // 2)
    add("memset 0 bf16 strided", "vector", memset0, ({}, {"dst": T(BF16, stride=16)}), N, N)
    recip = lambda a: Reciprocal(engine="vector", dst=a["dst"], src=a["x"])  # noqa: E731
    add("reciprocal fp32", "vector", recip, one(T(FP32)), 8 * N, 8 * N)
    add("reciprocal fp32 strided", "vector", recip, one(T(FP32, stride=8)), 8 * N, 8 * N)
    stats = lambda a: BnStats(engine="vector", dst=a["dst"], src=a["x"])  # noqa: E731
    add("bn_stats fp32", "vector", stats, one(T(FP32), T(FP32, free=6)), N, N)
    aggr = lambda a: BnAggr(engine="vector", dst=a["dst"], src=a["x"])  # noqa: E731
    add("bn_aggr 48", "vector", aggr, one(T(FP32, free=48), T(FP32, free=2)), 13 * 16, 13 * 16)
    # ---- ScalarE activation [S16] ---------------------------------------------------------------
    add("act fp32 sbuf", "scalar", act, one(T(FP32)), N, N)
    add("act fp32 psum", "scalar", act, one(T(FP32, PSUM)), N, N)
    add("act fp32 strided", "scalar", act, one(T(FP32, stride=8)), 2 * N, 2 * N)
    add("act fp32 strided dst", "scalar", act, one(T(FP32), T(FP32, stride=8)), 2 * N, 2 * N)
    add("act bf16", "scalar", act, one(T(BF16)), N, N)
    act_reduce = lambda a: ActivationReduce(  # noqa: E731
        engine="scalar", dst=a["dst"], src=a["x"], func=ActivationFunction.exp, reduce_dst=a["r"]
    )
    add("activation_reduce fp32", "scalar", act_reduce,
        ({"x": T(FP32)}, {"dst": T(FP32), "r": REDUCED}), N + 64, N + 64)  # fmt: skip
    # ---- GpSimdE [S16] --------------------------------------------------------------------------
    iota = lambda a: Iota(engine="gpsimd", dst=a["dst"], steps=(1,))  # noqa: E731
    add("iota int32", "gpsimd", iota, ({}, {"dst": T(INT32)}), 150 + N, 150 + N)
    add("iota int32 strided", "gpsimd", iota, ({}, {"dst": T(INT32, stride=8)}), 150 + 2 * N,
        150 + 2 * N)  # fmt: skip
    mask = lambda a: AffineSelect(  # noqa: E731
        engine="gpsimd", dst=a["dst"], src=a["x"], steps=(1,), cmp_op=AluOp.is_ge, on_false=0.0
    )
    add("affine_select fp32", "gpsimd", mask, one(T(FP32)), 150 + N, 150 + N)
    # ---- the new VectorE instructions ------------------------------------------------------------
    add("scan fp32 sbuf+sbuf", "vector", scan, two(FP32), 2 * N, N)
    add("scan fp32 psum+sbuf", "vector", scan, two(FP32, a=T(FP32, PSUM)), 2 * N, N)
    add("scan bf16 sbuf+sbuf", "vector", scan, two(BF16), 2 * N, N)
    add("scan fp32 strided+sbuf", "vector", scan, two(FP32, a=T(FP32, stride=8)), 3 * N, 2 * N)
    tsr = lambda a: TensorScalarReduce(  # noqa: E731
        engine="vector",
        dst=a["dst"],
        src=a["x"],
        op0=AluOp.multiply,
        scalar0=2.0,
        reduce_op=ReduceOp.add,
        reduce_dst=a["r"],
    )
    for dtype in (FP32, BF16):
        add(f"tensor_scalar_reduce {dtype.name}", "vector", tsr,
            ({"x": T(dtype)}, {"dst": T(dtype), "r": REDUCED}), N + 64, N + 64)  # fmt: skip
    strided_io = ({"x": T(FP32, stride=8)}, {"dst": T(FP32), "r": REDUCED})
    add("tensor_scalar_reduce strided", "vector", tsr, strided_io, 2 * N + 64, 2 * N + 64)
    cum = lambda a: TensorScalarCumulative(  # noqa: E731
        engine="vector", dst=a["dst"], src=a["x"], op0=AluOp.multiply, op1=AluOp.add, imm0=2.0
    )
    add("cumulative fp32", "vector", cum, one(T(FP32)), N, N)
    add("cumulative bf16", "vector", cum, one(T(BF16)), N, N)
    add("cumulative fp32 psum", "vector", cum, one(T(FP32, PSUM)), N, N)
    return c


CASES = _cases()
V2_CASES = [c for c in CASES if c.v2 is not None]


@pytest.mark.parametrize("case", V2_CASES, ids=[c.name for c in V2_CASES])
def test_v2_cost(case: Case) -> None:
    assert case.v2 is not None
    _run(case, "trn1", case.v2)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_v3_cost(case: Case) -> None:
    _run(case, "trn2", case.v3)


@pytest.mark.parametrize(
    ("src", "dst", "cycles"),
    [
        (BF16, BF16, N // 2),  # v4 ScalarE reads and writes 256 BF16 per cycle [S3]
        (BF16, FP32, N),  # the fp32 write stream is 128 per cycle: output-bound
        (FP32, BF16, N),  # and so is the fp32 read stream
    ],
)
def test_v4_scalar_engine_16_bit_rate(src: DType, dst: DType, cycles: int) -> None:
    case = Case("act v4", "scalar", act, {"x": T(src)}, {"dst": T(dst)}, None, cycles)
    _run(case, "trn3", cycles)


def test_a_trailing_size_one_dim_does_not_hide_an_innermost_stride():
    model = CostModel.for_config(as_config("trn1"))
    plain = AccessPattern(SBUF, FP32, 0, P, 0, (N,), (1,))
    strided = dataclasses.replace(plain, free_sizes=(N, 1), free_strides=(8, 1))  # 32 B apart
    sixteen = dataclasses.replace(plain, free_sizes=(N,), free_strides=(4,))  # exactly 16 B
    assert stream_cycles(model, "vector", plain) == N
    assert stream_cycles(model, "vector", strided) == 2 * N
    assert stream_cycles(model, "vector", sixteen) == N  # "exceeds 16 bytes" halves [S1]


def test_mixed_dtype_inputs_use_the_fewest_streams():
    model = CostModel.for_config(as_config("trn2"))  # VectorE: fp32 2 streams, bf16 4
    bf16 = AccessPattern(SBUF, BF16, 0, P, 0, (N,), (1,))
    fp32 = dataclasses.replace(bf16, dtype=FP32)
    three_bf16 = (bf16, bf16, bf16)
    assert streaming_cycles(model, "vector", three_bf16) == N  # ceil(3N / 4) < N
    assert streaming_cycles(model, "vector", (bf16, bf16, fp32)) == 3 * N // 2  # 2 streams
