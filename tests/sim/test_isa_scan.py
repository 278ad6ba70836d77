"""tensor_tensor_scan, tensor_scalar_reduce, tensor_scalar_cumulative: numerics against plain
numpy loops (independent of ``kernels``), exact ticks on tiny, legality.

tiny: VectorE 2 ticks/cycle, MIN_II 16, pipeline latency 10 cycles, one SBUF input stream. The
cost matrix over dtypes, memories, strides and generations is in ``test_engine_cost_rules``.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP32, INT32
from hwsim.isa.scan_ops import (
    ReduceCmd,
    TensorScalarCumulative,
    TensorScalarReduce,
    TensorTensorScan,
)
from hwsim.kernels import AluOp, ReduceOp

from .helpers import (
    PSUM,
    SBUF,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
    tile_ap,
)

RNG = np.random.default_rng(11)
NUMPY_OPS = {
    AluOp.add: np.add,
    AluOp.subtract: np.subtract,
    AluOp.multiply: np.multiply,
    AluOp.max: np.maximum,
    AluOp.min: np.minimum,
}


def scan_reference(a, b, initial, op0, op1, reverse0, reverse1):
    """The nki.isa pseudocode, column by column, in fp32."""
    f0, f1 = NUMPY_OPS[op0], NUMPY_OPS[op1]
    r = np.broadcast_to(np.float32(initial), a.shape[:1]).astype(np.float32)
    out = np.empty(a.shape, np.float32)
    for i in range(a.shape[1]):
        t = f0(r, a[:, i]) if reverse0 else f0(a[:, i], r)
        r = (f1(b[:, i], t) if reverse1 else f1(t, b[:, i])).astype(np.float32)
        out[:, i] = r
    return out


@pytest.mark.parametrize(
    ("op0", "op1", "reverse0", "reverse1", "dtype", "dst_dtype", "initial"),
    [
        (AluOp.multiply, AluOp.add, False, False, FP32, FP32, 0.5),  # a linear recurrence
        (AluOp.subtract, AluOp.max, True, False, FP32, BF16, "ap"),
        (AluOp.add, AluOp.subtract, False, True, BF16, FP32, -1.0),
        (AluOp.max, AluOp.multiply, False, False, FP32, FP32, "ap"),
    ],
)
def test_tensor_tensor_scan_numerics(op0, op1, reverse0, reverse1, dtype, dst_dtype, initial):
    shape = (6, 20)
    a, b = RNG.uniform(0.5, 1.0, shape), RNG.uniform(-1, 1, shape)
    init = RNG.uniform(-1, 1, (shape[0], 1))
    inputs = {"a": inp(a, dtype), "b": inp(b, dtype, PSUM), "i": inp(init, FP32)}
    run = run_single(
        lambda aps: TensorTensorScan(
            engine="vector",
            dst=aps["dst"],
            src0=aps["a"],
            src1=aps["b"],
            initial=aps["i"] if initial == "ap" else initial,
            op0=op0,
            op1=op1,
            reverse0=reverse0,
            reverse1=reverse1,
        ),
        inputs,
        {"dst": out(shape, dst_dtype)},
    )
    start = rounded(init, FP32)[:, 0] if initial == "ap" else initial
    expected = scan_reference(
        rounded(a, dtype), rounded(b, dtype), start, op0, op1, reverse0, reverse1
    )
    assert_ulps(run.outputs["dst"], expected, dst_dtype)


def test_tensor_tensor_scan_computes_a_cumulative_sum_of_products():
    # r_i = a_i * r_{i-1} + b_i with a = 1 is the prefix sum of b.
    b = RNG.integers(-8, 8, (4, 16)).astype(np.float64)
    run = run_single(
        lambda aps: TensorTensorScan(
            engine="vector",
            dst=aps["dst"],
            src0=aps["a"],
            src1=aps["b"],
            initial=0.0,
            op0=AluOp.multiply,
            op1=AluOp.add,
        ),
        {"a": inp(np.ones((4, 16)), FP32), "b": inp(b, FP32)},
        {"dst": out((4, 16), FP32)},
    )
    np.testing.assert_array_equal(run.outputs["dst"], np.cumsum(b, axis=1))


@pytest.mark.parametrize(
    ("op0", "reverse0", "reduce_op", "dtype"),
    [
        (AluOp.multiply, False, ReduceOp.add, FP32),
        (AluOp.subtract, True, ReduceOp.max, BF16),
        (AluOp.add, False, ReduceOp.min, FP32),
        (AluOp.multiply, False, ReduceOp.multiply, FP32),
    ],
)
def test_tensor_scalar_reduce_numerics(op0, reverse0, reduce_op, dtype):
    shape = (5, 3, 8)
    x = RNG.uniform(0.5, 1.5, shape)
    s = RNG.uniform(0.5, 1.5, (5, 1))
    run = run_single(
        lambda aps: TensorScalarReduce(
            engine="vector",
            dst=aps["dst"],
            src=aps["x"],
            op0=op0,
            scalar0=aps["s"],
            reverse0=reverse0,
            reduce_op=reduce_op,
            reduce_dst=aps["r"],
        ),
        {"x": inp(x, dtype), "s": inp(s, FP32)},
        {"dst": out(shape, dtype), "r": out((5, 1), FP32)},
    )
    rx, rs = rounded(x, dtype).reshape(5, -1), rounded(s, FP32)
    f = NUMPY_OPS[op0]
    values = (f(rs, rx) if reverse0 else f(rx, rs)).astype(np.float32)
    assert_ulps(run.outputs["dst"], values.reshape(shape), dtype)
    # The reduction reads the fp32 results, not the dtype-rounded dst.
    reduce = {ReduceOp.add: np.sum, ReduceOp.max: np.max, ReduceOp.min: np.min,
              ReduceOp.multiply: np.prod}[reduce_op]  # fmt: skip
    expected = reduce(values.astype(np.float64), axis=1, keepdims=True)
    np.testing.assert_allclose(run.outputs["r"], expected, rtol=1e-5)


@pytest.mark.parametrize(
    ("op0", "op1", "cmd", "start", "dtype"),
    [
        (AluOp.multiply, AluOp.add, ReduceCmd.reset_reduce, 0.0, FP32),  # scaled prefix sum
        (AluOp.add, AluOp.max, ReduceCmd.reset_reduce, -np.inf, FP32),  # running max
        (AluOp.add, AluOp.min, ReduceCmd.reset_reduce, np.inf, BF16),
        (AluOp.multiply, AluOp.multiply, ReduceCmd.reset_reduce, 1.0, FP32),
        (AluOp.subtract, AluOp.subtract, ReduceCmd.reset_reduce, 0.0, FP32),  # x' - reg
        (AluOp.multiply, AluOp.add, ReduceCmd.load_reduce, "ap", FP32),
        (AluOp.multiply, AluOp.add, ReduceCmd.load_reduce, 3.0, BF16),
    ],
)
def test_tensor_scalar_cumulative_numerics(op0, op1, cmd, start, dtype):
    shape = (4, 12)
    x = RNG.uniform(0.5, 1.5, shape)
    init = RNG.uniform(-2, 2, (4, 1))
    imm1 = None
    if cmd is ReduceCmd.load_reduce:
        imm1 = "ap" if start == "ap" else start
    run = run_single(
        lambda aps: TensorScalarCumulative(
            engine="vector",
            dst=aps["dst"],
            src=aps["x"],
            op0=op0,
            op1=op1,
            imm0=0.75,
            imm1=aps["i"] if imm1 == "ap" else imm1,
            reduce_cmd=cmd,
        ),
        {"x": inp(x, dtype), "i": inp(init, FP32)},
        {"dst": out(shape, dtype)},
    )
    reg = rounded(init, FP32)[:, 0] if start == "ap" else np.full(4, start, np.float32)
    expected = np.empty(shape, np.float32)
    rx = rounded(x, dtype)
    for i in range(shape[1]):
        term = NUMPY_OPS[op0](rx[:, i], np.float32(0.75)).astype(np.float32)
        reg = NUMPY_OPS[op1](term, reg).astype(np.float32)
        expected[:, i] = reg
    assert_ulps(run.outputs["dst"], expected, dtype)


# ---- exact ticks on tiny ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "psum", "issue_cycles"),
    [(40, False, 80), (40, True, 80), (5, False, 16)],  # 2N whether or not one is in PSUM; MIN_II
)
def test_tensor_tensor_scan_ticks(n, psum, issue_cycles):
    run = run_single(
        lambda aps: TensorTensorScan(
            engine="vector",
            dst=aps["dst"],
            src0=aps["a"],
            src1=aps["b"],
            initial=0.0,
            op0=AluOp.multiply,
            op1=AluOp.add,
        ),
        {"a": inp(np.ones((4, n)), FP32), "b": inp(np.ones((4, n)), FP32, PSUM if psum else SBUF)},
        {"dst": out((4, n), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * issue_cycles, 2 * issue_cycles + 20)


@pytest.mark.parametrize(("n", "issue_cycles"), [(40, 40 + 16), (5, 16 + 16)])
def test_tensor_scalar_reduce_ticks(n, issue_cycles):
    run = run_single(
        lambda aps: TensorScalarReduce(
            engine="vector",
            dst=aps["dst"],
            src=aps["x"],
            op0=AluOp.multiply,
            scalar0=2.0,
            reduce_op=ReduceOp.add,
            reduce_dst=aps["r"],
        ),
        {"x": inp(np.ones((4, n)), FP32)},
        {"dst": out((4, n), FP32), "r": out((4, 1), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * issue_cycles, 2 * issue_cycles + 20)  # max(MIN_II, N) + MIN_II


@pytest.mark.parametrize(("n", "issue_cycles"), [(40, 40), (5, 16)])
def test_tensor_scalar_cumulative_ticks(n, issue_cycles):
    run = run_single(
        lambda aps: TensorScalarCumulative(
            engine="vector", dst=aps["dst"], src=aps["x"], op0=AluOp.add, op1=AluOp.add, imm0=1.0
        ),
        {"x": inp(np.ones((4, n)), FP32)},
        {"dst": out((4, n), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * issue_cycles, 2 * issue_cycles + 20)


# ---- legality --------------------------------------------------------------------------------

F4x8 = tile_ap(4, 8)


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (lambda: TensorTensorScan(engine="vector", dst=F4x8, src0=F4x8, src1=tile_ap(4, 9),
                                  initial=0.0, op0=AluOp.add, op1=AluOp.add),
         ("src0/src1: shapes (4, 8) and (4, 9) differ",)),
        (lambda: TensorTensorScan(engine="vector", dst=F4x8, src0=tile_ap(4, 8, PSUM),
                                  src1=tile_ap(4, 8, PSUM, offset_bytes=2048), initial=0.0,
                                  op0=AluOp.add, op1=AluOp.add),
         ("both in PSUM",)),
        (lambda: TensorTensorScan(engine="vector", dst=F4x8, src0=F4x8, src1=F4x8, initial=0.0,
                                  op0=AluOp.bitwise_and, op1=AluOp.add),
         ("op0=bitwise_and is a bitvec op",)),
        (lambda: TensorTensorScan(engine="vector", dst=F4x8, src0=F4x8, src1=F4x8,
                                  initial=tile_ap(4, 2), op0=AluOp.add, op1=AluOp.add),
         ("operand 'initial' has shape (4, 2)", "must be [4, 1]")),
        (lambda: TensorTensorScan(engine="gpsimd", dst=F4x8, src0=F4x8, src1=F4x8, initial=0.0,
                                  op0=AluOp.add, op1=AluOp.add),
         ("cannot run on engine 'gpsimd'",)),
        (lambda: TensorScalarReduce(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                    scalar0=1.0, reduce_op=ReduceOp.bitwise_or,
                                    reduce_dst=tile_ap(4, 1)),
         ("reduce_op=bitwise_or is not allowed", "valid: add, max, min, multiply")),
        (lambda: TensorScalarReduce(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                    scalar0=1.0, reduce_op=ReduceOp.add, reduce_dst=tile_ap(4, 2)),
         ("operand 'reduce_dst' has shape (4, 2)", "must be [4, 1]")),
        (lambda: TensorScalarReduce(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.bitwise_or,
                                    scalar0=1.0, reduce_op=ReduceOp.add, reduce_dst=tile_ap(4, 1)),
         ("op0=bitwise_or is a bitvec op",)),
        (lambda: TensorScalarCumulative(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                        op1=AluOp.divide, imm0=1.0),
         ("op1=divide is not a cumulative reduction", "valid: add, max, min, multiply, subtract")),
        (lambda: TensorScalarCumulative(engine="vector", dst=tile_ap(4, 8, dtype=INT32),
                                        src=F4x8, op0=AluOp.add, op1=AluOp.add, imm0=1.0),
         ("operand 'dst' is int32: int32/uint32 not allowed",)),
        (lambda: TensorScalarCumulative(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                        op1=AluOp.add, imm0=1.0,
                                        reduce_cmd=ReduceCmd.load_reduce),
         ("reduce_cmd=load_reduce starts from imm1, but imm1 is not given",)),
        (lambda: TensorScalarCumulative(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                        op1=AluOp.add, imm0=1.0, imm1=2.0),
         ("imm1 is read only with reduce_cmd=load_reduce",)),
        (lambda: TensorScalarCumulative(engine="vector", dst=F4x8, src=F4x8, op0=AluOp.add,
                                        op1=AluOp.add, imm0=1.0, reduce_cmd=ReduceCmd.reduce),
         ("reduce_cmd=reduce is not modelled", "load_reduce with imm1")),
    ],
)  # fmt: skip
def test_scan_ops_illegal(make, fragments):
    check_illegal(make(), "tiny", *fragments)
