"""VectorE elementwise instructions: numerics vs numpy, exact tick costs, legality.

tensor_tensor, tensor_scalar, scalar_tensor_tensor, reciprocal, memset, select. Hand-computed
ticks: tiny has VectorE at 2 ticks/cycle, MIN_II 16, latency 10 cycles, no performance mode;
GpSimdE 2 ticks/cycle, GPSIMD_START 10, latency 10. trn2 (base 4800 MHz) has VectorE at 5
ticks/cycle, MIN_II 64, a fixed 25 cycles per instruction (``FIXED``), latency 100 cycles,
performance mode on; ScalarE 4 ticks/cycle, MIN_II 64, latency 200; GpSimdE 4 ticks/cycle,
GPSIMD_START 150, latency 100.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP16, FP32, INT32, UINT8, UINT16, UINT32
from hwsim.isa.vector_ops import (
    Memset,
    Reciprocal,
    ScalarTensorTensor,
    Select,
    TensorScalar,
    TensorTensor,
)
from hwsim.kernels import AluOp

from .helpers import (
    PSUM,
    SBUF,
    V3_VECTOR_FIXED,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
    tile_ap,
)

#: trn2 VectorE's fixed cycles per instruction: the part of the ~60-cycle tensor access start
#: [S1] that K2-v5's VectorE active time shows unhidden (calibrated, docs/fidelity.md).
FIXED = V3_VECTOR_FIXED

RNG = np.random.default_rng(7)
SHAPES = [(4, 8), (32, 2, 16)]


def _u32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) & 0xFFFFFFFF


# ---- tensor_tensor ---------------------------------------------------------------------------

TT_CASES = [
    # (op, engine, in dtype, out dtype, numpy reference on fp32/int64 inputs)
    (AluOp.add, "vector", FP32, FP32, np.add),
    (AluOp.subtract, "vector", BF16, BF16, np.subtract),
    (AluOp.multiply, "vector", BF16, FP32, np.multiply),
    (AluOp.max, "vector", FP32, BF16, np.maximum),
    (AluOp.divide, "gpsimd", FP32, FP32, np.divide),
    (AluOp.is_ge, "vector", FP32, FP32, lambda a, b: (a >= b).astype(np.float32)),
    (AluOp.power, "gpsimd", FP32, FP32, lambda a, b: np.power(np.abs(a) + 0.5, b)),
    (AluOp.bitwise_and, "vector", INT32, INT32, np.bitwise_and),
    (AluOp.bitwise_xor, "vector", UINT16, UINT16, np.bitwise_xor),
    (AluOp.logical_shift_right, "vector", INT32, INT32, lambda a, b: _u32(a) >> (b & 31)),
    (AluOp.add, "gpsimd", INT32, INT32, np.add),  # native int32, wraps
]


def _tt_inputs(op: AluOp, dtype, shape):
    if not dtype.is_float:
        info = np.iinfo(dtype.numpy)
        a = RNG.integers(info.min, info.max, shape, endpoint=True)
        b = (
            RNG.integers(0, 31, shape)
            if op is AluOp.logical_shift_right
            else RNG.integers(info.min, info.max, shape, endpoint=True)
        )
        return a, b
    a = RNG.uniform(-3, 3, shape)
    if op is AluOp.power:
        return np.abs(a) + 0.5, RNG.uniform(-2, 2, shape)
    return a, RNG.uniform(-3, 3, shape) + (0.1 if op is AluOp.divide else 0.0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("op", "engine", "dtype", "dst_dtype", "ref"), TT_CASES, ids=lambda v: getattr(v, "name", None)
)
def test_tensor_tensor_numerics(shape, op, engine, dtype, dst_dtype, ref):
    a, b = _tt_inputs(op, dtype, shape)
    run = run_single(
        lambda aps: TensorTensor(
            engine=engine, dst=aps["dst"], src0=aps["a"], src1=aps["b"], op=op
        ),
        {"a": inp(a, dtype), "b": inp(b, dtype)},
        {"dst": out(shape, dst_dtype)},
    )
    ra, rb = rounded(a, dtype), rounded(b, dtype)
    if op is AluOp.power:
        expected = np.power(ra.astype(np.float64), rb).astype(np.float32)
        assert_ulps(run.outputs["dst"], expected, dst_dtype, max_ulps=1)
        return
    expected = ref(ra, rb)
    if not dtype.is_float:  # hardware keeps the low 32 bits of the integer result
        low = _u32(expected)
        expected = low.astype(np.uint32).view(np.int32) if dst_dtype.is_signed_int else low
    assert_ulps(run.outputs["dst"], expected, dst_dtype)


@pytest.mark.parametrize(("engine", "expected"), [("vector", 16777216), ("gpsimd", 16777217)])
def test_tensor_tensor_int32_arithmetic_is_fp32_on_vector_native_on_gpsimd(engine, expected):
    a = np.full((2, 4), 16777217)  # 2^24 + 1: not representable in fp32
    run = run_single(
        lambda aps: TensorTensor(
            engine=engine, dst=aps["dst"], src0=aps["a"], src1=aps["b"], op=AluOp.add
        ),
        {"a": inp(a, INT32), "b": inp(np.zeros((2, 4)), INT32)},
        {"dst": out((2, 4), INT32)},
    )
    assert (run.outputs["dst"] == expected).all()


def _strided(ap, stride):
    n = ap.free_elements // stride
    return dataclasses.replace(ap, free_sizes=(n,), free_strides=(stride,))


@pytest.mark.parametrize(
    ("config", "engine", "dtype", "op", "mem1", "stride", "n", "issue", "done"),
    [
        ("tiny", "vector", FP32, AluOp.add, SBUF, 1, 4, 2 * 16, 2 * 16 + 20),  # MIN_II floor
        ("tiny", "vector", FP32, AluOp.add, SBUF, 1, 40, 2 * 80, 2 * 80 + 20),  # 2N
        ("tiny", "vector", BF16, AluOp.add, SBUF, 1, 40, 2 * 40, 2 * 40 + 20),  # bf16 add: N
        ("tiny", "vector", BF16, AluOp.max, SBUF, 1, 40, 2 * 80, 2 * 80 + 20),  # max: 2N
        ("tiny", "vector", FP32, AluOp.max, PSUM, 1, 40, 2 * 40, 2 * 40 + 20),  # PSUM input: N
        ("tiny", "vector", FP32, AluOp.add, SBUF, 8, 40, 2 * 120, 2 * 120 + 20),  # 32 B stride
        ("tiny", "gpsimd", FP32, AluOp.add, SBUF, 1, 40, 2 * 90, 2 * 90 + 20),  # 10 + 2N
        # v3: the 256-element fp32 input path streams both SBUF inputs at once: N, not 2N
        (
            "trn2",
            "vector",
            FP32,
            AluOp.add,
            SBUF,
            1,
            512,
            5 * (512 + FIXED),
            5 * (512 + FIXED) + 500,
        ),
        (
            "trn2",
            "vector",
            FP16,
            AluOp.max,
            SBUF,
            1,
            512,
            5 * (512 + FIXED),
            5 * (512 + FIXED) + 500,
        ),  # perf mode
        (
            "trn2",
            "vector",
            BF16,
            AluOp.add,
            SBUF,
            1,
            512,
            5 * (512 + FIXED),
            5 * (512 + FIXED) + 500,
        ),  # not 2x2x
    ],
)
def test_tensor_tensor_cost(config, engine, dtype, op, mem1, stride, n, issue, done):
    p = 4
    run = run_single(
        lambda aps: TensorTensor(
            engine=engine,
            dst=aps["dst"],
            src0=_strided(aps["a"], stride),
            src1=aps["b"],
            op=op,
        ),
        {"a": inp(np.ones((p, n * stride)), dtype), "b": inp(np.ones((p, n)), dtype, mem1)},
        {"dst": out((p, n), dtype)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


# ---- tensor_scalar -----------------------------------------------------------------------------

TS_CASES = [
    # (engine, dtype, op0, s0, reverse0, op1, s1, reference(x, s0, s1)); "ap" = a [P, 1] tile
    ("vector", FP32, AluOp.multiply, 1.5, False, AluOp.add, "ap", lambda x, a, b: x * a + b),
    ("vector", BF16, AluOp.subtract, "ap", True, AluOp.max, 0.0,
     lambda x, a, b: np.maximum(a - x, b)),
    ("scalar", FP32, AluOp.multiply, "ap", False, AluOp.add, 0.25, lambda x, a, b: x * a + b),
    ("gpsimd", FP32, AluOp.divide, 4.0, False, AluOp.bypass, 0.0, lambda x, a, b: x / a),
    ("vector", INT32, AluOp.bitwise_and, 0xFF0F, False, AluOp.logical_shift_left, "ap",
     lambda x, a, b: (x & a) << (b & 31)),
    ("vector", UINT32, AluOp.bitwise_xor, "ap", False, AluOp.bypass, 0, lambda x, a, b: x ^ a),
]  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("engine", "dtype", "op0", "s0", "rev0", "op1", "s1", "ref"), TS_CASES)
def test_tensor_scalar_numerics(shape, engine, dtype, op0, s0, rev0, op1, s1, ref):
    p = shape[0]
    if dtype.is_float:
        x = RNG.uniform(-4, 4, shape)
        scalars = RNG.uniform(0.5, 2, (p, 1))
    else:
        x = RNG.integers(0, 2**31 - 1, shape)
        scalars = RNG.integers(0, 7, (p, 1))
    inputs = {"x": inp(x, dtype), "s": inp(scalars, dtype)}
    run = run_single(
        lambda aps: TensorScalar(
            engine=engine,
            dst=aps["dst"],
            src=aps["x"],
            op0=op0,
            scalar0=aps["s"] if s0 == "ap" else s0,
            reverse0=rev0,
            op1=op1,
            scalar1=aps["s"] if s1 == "ap" else s1,
        ),
        inputs,
        {"dst": out(shape, dtype)},
    )
    bcast = (p,) + (1,) * (len(shape) - 1)
    s_values = rounded(scalars, dtype).reshape(bcast)
    a = s_values if s0 == "ap" else rounded(np.array(s0), dtype)
    b = s_values if s1 == "ap" else rounded(np.array(s1), dtype)
    expected = ref(rounded(x, dtype), a, b)
    if not dtype.is_float:
        low = _u32(expected)
        expected = low.astype(np.uint32).view(np.int32) if dtype.is_signed_int else low
    # fp32 per step, so (x op0 s0) is rounded before op1 exactly as numpy's fp32 does.
    assert_ulps(run.outputs["dst"], expected, dtype)


@pytest.mark.parametrize(
    ("config", "engine", "dtype", "memory", "n", "issue", "done"),
    [
        ("tiny", "vector", FP32, SBUF, 40, 2 * 40, 2 * 40 + 20),
        ("tiny", "vector", BF16, SBUF, 8, 2 * 16, 2 * 16 + 20),
        ("tiny", "scalar", FP32, SBUF, 40, 2 * 40, 2 * 40 + 40),
        ("tiny", "gpsimd", FP32, SBUF, 40, 2 * 50, 2 * 50 + 20),
        ("trn2", "vector", FP32, SBUF, 512, 5 * (512 + FIXED), 5 * (512 + FIXED) + 500),
        (
            "trn2",
            "vector",
            BF16,
            SBUF,
            512,
            5 * (128 + FIXED),
            5 * (128 + FIXED) + 500,
        ),  # performance mode 4x
        (
            "trn2",
            "vector",
            BF16,
            PSUM,
            512,
            5 * (256 + FIXED),
            5 * (256 + FIXED) + 500,
        ),  # PSUM source: 2x
        (
            "trn2",
            "vector",
            BF16,
            SBUF,
            128,
            5 * (64 + FIXED),
            5 * (64 + FIXED) + 500,
        ),  # 4x, then the MIN_II floor
        ("trn2", "scalar", BF16, SBUF, 512, 4 * 512, 4 * 512 + 800),  # no perf mode on ScalarE
        ("trn2", "gpsimd", FP32, SBUF, 512, 4 * 662, 4 * 662 + 400),  # GPSIMD_START 150 + N
    ],
)
def test_tensor_scalar_cost(config, engine, dtype, memory, n, issue, done):
    run = run_single(
        lambda aps: TensorScalar(
            engine=engine,
            dst=aps["dst"],
            src=aps["x"],
            op0=AluOp.multiply,
            scalar0=aps["s"],
            op1=AluOp.add,
            scalar1=1.0,
        ),
        {"x": inp(np.ones((4, n)), dtype, memory), "s": inp(np.ones((4, 1)), FP32)},
        {"dst": out((4, n), dtype)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


# ---- scalar_tensor_tensor ----------------------------------------------------------------------

STT_CASES = [
    (FP32, AluOp.subtract, 0.5, False, AluOp.multiply, lambda x, s, y: (x - s) * y),
    (BF16, AluOp.subtract, "ap", False, AluOp.multiply, lambda x, s, y: (x - s) * y),
    (FP32, AluOp.multiply, "ap", False, AluOp.add, lambda x, s, y: x * s + y),
    (BF16, AluOp.subtract, 2.0, True, AluOp.max, lambda x, s, y: np.maximum(s - x, y)),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("dtype", "op0", "s0", "rev0", "op1", "ref"), STT_CASES)
def test_scalar_tensor_tensor_numerics(shape, dtype, op0, s0, rev0, op1, ref):
    p = shape[0]
    x, y = RNG.uniform(-3, 3, shape), RNG.uniform(-3, 3, shape)
    s = RNG.uniform(-1, 1, (p, 1))
    run = run_single(
        lambda aps: ScalarTensorTensor(
            engine="vector",
            dst=aps["dst"],
            src0=aps["x"],
            op0=op0,
            scalar0=aps["s"] if s0 == "ap" else s0,
            reverse0=rev0,
            op1=op1,
            src1=aps["y"],
        ),
        {"x": inp(x, dtype), "y": inp(y, dtype), "s": inp(s, FP32)},
        {"dst": out(shape, dtype)},
    )
    bcast = (p,) + (1,) * (len(shape) - 1)
    sv = rounded(s, FP32).reshape(bcast) if s0 == "ap" else np.float32(s0)
    expected = ref(rounded(x, dtype), sv, rounded(y, dtype))
    assert_ulps(run.outputs["dst"], expected, dtype)


@pytest.mark.parametrize(
    ("config", "dtype", "op0", "op1", "n", "issue", "done"),
    [
        ("tiny", BF16, AluOp.subtract, AluOp.multiply, 40, 2 * 40, 2 * 40 + 20),  # N
        ("tiny", BF16, AluOp.subtract, AluOp.multiply, 41, 2 * 82, 2 * 82 + 20),  # odd N: 2N
        ("tiny", FP32, AluOp.subtract, AluOp.multiply, 40, 2 * 80, 2 * 80 + 20),  # fp32: 2N
        ("tiny", BF16, AluOp.add, AluOp.multiply, 40, 2 * 80, 2 * 80 + 20),  # other ops: 2N
        ("tiny", BF16, AluOp.subtract, AluOp.multiply, 10, 2 * 16, 2 * 16 + 20),  # MIN_II
        (
            "trn2",
            BF16,
            AluOp.subtract,
            AluOp.multiply,
            512,
            5 * (512 + FIXED),
            5 * (512 + FIXED) + 500,
        ),
        (
            "trn2",
            FP32,
            AluOp.subtract,
            AluOp.multiply,
            512,
            5 * (512 + FIXED),
            5 * (512 + FIXED) + 500,
        ),  # v3: N
    ],
)
def test_scalar_tensor_tensor_cost(config, dtype, op0, op1, n, issue, done):
    run = run_single(
        lambda aps: ScalarTensorTensor(
            engine="vector",
            dst=aps["dst"],
            src0=aps["x"],
            op0=op0,
            scalar0=1.0,
            op1=op1,
            src1=aps["y"],
        ),
        {"x": inp(np.ones((4, n)), dtype), "y": inp(np.ones((4, n)), dtype)},
        {"dst": out((4, n), dtype)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


# ---- reciprocal, memset, select ------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("dtype", "dst_dtype"), [(FP32, FP32), (BF16, BF16), (FP32, BF16)])
def test_reciprocal_numerics(shape, dtype, dst_dtype):
    x = RNG.uniform(0.1, 4, shape) * RNG.choice([-1, 1], shape)
    run = run_single(
        lambda aps: Reciprocal(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(x, dtype)},
        {"dst": out(shape, dst_dtype)},
    )
    assert_ulps(run.outputs["dst"], np.float32(1) / rounded(x, dtype), dst_dtype)


@pytest.mark.parametrize(
    ("config", "n", "issue", "done"),
    [("tiny", 1, 2 * 16, 2 * 16 + 20), ("tiny", 8, 2 * 64, 2 * 64 + 20),
     ("trn2", 512, 5 * (4096 + FIXED), 5 * (4096 + FIXED) + 500)],
)  # fmt: skip
def test_reciprocal_cost(config, n, issue, done):
    run = run_single(
        lambda aps: Reciprocal(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(np.ones((4, n)), FP32)},
        {"dst": out((4, n), FP32)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


@pytest.mark.parametrize("engine", ["vector", "gpsimd"])
@pytest.mark.parametrize(
    ("dtype", "value"), [(FP32, 3.5), (BF16, 1 / 3), (FP16, 0.0), (INT32, -7), (UINT8, 200)]
)
def test_memset_numerics(engine, dtype, value):
    run = run_single(
        lambda aps: Memset(engine=engine, dst=aps["dst"], value=value),
        {},
        {"dst": out((8, 3, 5), dtype)},
    )
    assert_ulps(run.outputs["dst"], np.full((8, 3, 5), value), dtype)


@pytest.mark.parametrize(
    ("config", "engine", "dtype", "value", "n", "issue", "done"),
    [
        ("tiny", "vector", FP32, 0.0, 40, 2 * 40, 2 * 40 + 20),
        ("tiny", "vector", BF16, 0.0, 64, 2 * 32, 2 * 32 + 20),  # 0 into bf16: N/2
        ("tiny", "vector", BF16, 1.0, 64, 2 * 64, 2 * 64 + 20),  # non-zero: N
        ("tiny", "vector", FP16, 0.0, 20, 2 * 16, 2 * 16 + 20),  # N/2 = 10 < MIN_II
        ("tiny", "gpsimd", FP32, 2.0, 40, 2 * 50, 2 * 50 + 20),
        ("trn2", "vector", BF16, 0.0, 512, 5 * (256 + FIXED), 5 * (256 + FIXED) + 500),
        ("trn2", "vector", FP32, 0.0, 512, 5 * (512 + FIXED), 5 * (512 + FIXED) + 500),
    ],
)
def test_memset_cost(config, engine, dtype, value, n, issue, done):
    run = run_single(
        lambda aps: Memset(engine=engine, dst=aps["dst"], value=value),
        {},
        {"dst": out((4, n), dtype)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("pred_dtype", "dtype", "dst_dtype"), [(UINT8, FP32, FP32), (FP32, BF16, BF16)]
)
def test_select_numerics(shape, pred_dtype, dtype, dst_dtype):
    pred = RNG.integers(0, 2, shape) * (1 if pred_dtype is UINT8 else -1.5)
    on_true, on_false = RNG.uniform(-5, 5, shape), RNG.uniform(-5, 5, shape)
    run = run_single(
        lambda aps: Select(
            engine="vector", dst=aps["dst"], pred=aps["p"], on_true=aps["t"], on_false=aps["f"]
        ),
        {"p": inp(pred, pred_dtype), "t": inp(on_true, dtype), "f": inp(on_false, dtype)},
        {"dst": out(shape, dst_dtype)},
    )
    expected = np.where(pred != 0, rounded(on_true, dtype), rounded(on_false, dtype))
    assert_ulps(run.outputs["dst"], expected, dst_dtype)


@pytest.mark.parametrize(
    ("config", "false_memory", "n", "issue", "done"),
    [
        ("tiny", SBUF, 40, 2 * 120, 2 * 120 + 20),  # three SBUF input streams: 3N
        ("tiny", PSUM, 40, 2 * 80, 2 * 80 + 20),  # one input in PSUM: the other two, 2N
        ("tiny", SBUF, 5, 2 * 16, 2 * 16 + 20),  # MIN_II
        (
            "trn2",
            SBUF,
            512,
            5 * (768 + FIXED),
            5 * (768 + FIXED) + 500,
        ),  # v3: two streams at once, 3N / 2
    ],
)
def test_select_cost(config, false_memory, n, issue, done):
    ones = np.ones((4, n))
    run = run_single(
        lambda aps: Select(
            engine="vector", dst=aps["dst"], pred=aps["p"], on_true=aps["t"], on_false=aps["f"]
        ),
        {"p": inp(ones, UINT8), "t": inp(ones, FP32), "f": inp(ones, FP32, false_memory)},
        {"dst": out((4, n), FP32)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


# ---- legality ----------------------------------------------------------------------------------

F4x8, I4x8 = tile_ap(4, 8), tile_ap(4, 8, dtype=INT32)


@pytest.mark.parametrize(
    ("make", "config", "fragments"),
    [
        (lambda: TensorTensor(engine="vector", dst=F4x8, src0=F4x8, src1=tile_ap(4, 9),
                              op=AluOp.add),
         "tiny", ("src0/src1: shapes (4, 8) and (4, 9) differ",)),
        (lambda: TensorTensor(engine="vector", dst=F4x8, src0=F4x8, src1=F4x8, op=AluOp.bitwise_or),
         "tiny", ("op=bitwise_or needs integer operands, but 'src0' is fp32",)),
        (lambda: TensorTensor(engine="gpsimd", dst=I4x8, src0=I4x8, src1=tile_ap(4, 8, PSUM, INT32),
                              op=AluOp.add),
         "tiny", ("operand 'src1': gpsimd engine cannot read psum",)),
        (lambda: TensorTensor(engine="vector", dst=F4x8, src0=tile_ap(4, 8, PSUM),
                              src1=tile_ap(4, 8, PSUM, offset_bytes=2048), op=AluOp.add),
         "tiny", ("both in PSUM",)),
        (lambda: TensorTensor(engine="vector", dst=F4x8, src0=F4x8, src1=F4x8, op=AluOp.power),
         "tiny", ("op=power runs on GpSimdE only",)),
        (lambda: TensorTensor(engine="vector", dst=tile_ap(4, 4097, dtype=BF16),
                              src0=tile_ap(4, 4097, PSUM, BF16), src1=tile_ap(4, 4097, dtype=BF16),
                              op=AluOp.add),
         "trn2", ("operand 'src0' has 4097 elements per partition", "at most 4096 from psum")),
        (lambda: TensorTensor(engine="vector", dst=tile_ap(1, 65537, dtype=UINT8),
                              src0=tile_ap(1, 65537, dtype=UINT8),
                              src1=tile_ap(1, 65537, dtype=UINT8), op=AluOp.add),
         "trn2", ("at most 65536 from sbuf",)),
        (lambda: TensorScalar(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.bitwise_and,
                              scalar0=3),
         "tiny", ("a bitvec op needs integer operands, but 'src' is fp32",)),
        (lambda: TensorScalar(engine="scalar", dst=I4x8, src=I4x8, op0=AluOp.bitwise_and,
                              scalar0=3),
         "tiny", ("bitvec ops run on VectorE only",)),
        (lambda: TensorScalar(engine="vector", dst=I4x8, src=I4x8, op0=AluOp.bitwise_and,
                              scalar0=1.5),
         "tiny", ("needs an integral immediate, but 'scalar0' is 1.5",)),
        (lambda: TensorScalar(engine="vector", dst=I4x8, src=I4x8, op0=AluOp.bitwise_and,
                              scalar0=3, op1=AluOp.add, scalar1=1),
         "tiny", ("mix a bitvec and an arithmetic op",)),
        (lambda: TensorScalar(engine="scalar", dst=F4x8, src=F4x8, op0=AluOp.subtract, scalar0=1.0),
         "trn2", ("ScalarE on NeuronCore-v3 runs only multiply-then-add", "op0=subtract")),
        (lambda: TensorScalar(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                              scalar0=tile_ap(4, 2)),
         "tiny", ("operand 'scalar0' has shape (4, 2)", "must be [4, 1]")),
        (lambda: ScalarTensorTensor(engine="vector", dst=F4x8, src0=tile_ap(4, 8, PSUM),
                                    op0=AluOp.add, scalar0=1.0, op1=AluOp.add,
                                    src1=tile_ap(4, 8, PSUM, offset_bytes=2048)),
         "tiny", ("src0 and src1 are both in PSUM",)),
        (lambda: ScalarTensorTensor(engine="vector", dst=F4x8, src0=F4x8, op0=AluOp.add,
                                    scalar0=1.0, op1=AluOp.add, src1=tile_ap(2, 8)),
         "tiny", ("src0/src1: shapes (4, 8) and (2, 8) differ",)),
        (lambda: ScalarTensorTensor(engine="vector", dst=I4x8, src0=I4x8, op0=AluOp.bitwise_or,
                                    scalar0=1, op1=AluOp.add, src1=I4x8),
         "tiny", ("op0=bitwise_or is a bitvec op",)),
        (lambda: Reciprocal(engine="vector", dst=tile_ap(4, 7), src=F4x8),
         "tiny", ("src/dst: shapes (4, 8) and (4, 7) differ",)),
        (lambda: Reciprocal(engine="gpsimd", dst=F4x8, src=F4x8),
         "tiny", ("cannot run on engine 'gpsimd'",)),
        (lambda: Memset(engine="vector", dst=I4x8, value=2.5),
         "tiny", ("value 2.5 is not representable in dst dtype int32",)),
        (lambda: Memset(engine="vector", dst=tile_ap(4, 8, dtype=UINT8), value=300),
         "tiny", ("value 300 is not representable in dst dtype uint8", "0..255")),
        (lambda: Memset(engine="gpsimd", dst=tile_ap(4, 8, PSUM), value=0.0),
         "tiny", ("operand 'dst': gpsimd engine cannot write psum", "may write sbuf")),
        (lambda: Select(engine="vector", dst=F4x8, pred=F4x8, on_true=F4x8, on_false=tile_ap(4, 4)),
         "tiny", ("pred/on_false: shapes (4, 8) and (4, 4) differ",)),
        (lambda: Select(engine="vector", dst=F4x8, pred=tile_ap(4, 8, PSUM), on_true=F4x8,
                        on_false=tile_ap(4, 8, PSUM, offset_bytes=2048)),
         "tiny", ("pred and on_false are in PSUM",)),
    ],
)  # fmt: skip
def test_vector_illegal(make, config, fragments):
    check_illegal(make(), config, *fragments)
