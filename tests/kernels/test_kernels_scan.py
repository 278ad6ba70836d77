"""Tests of the scan kernels (tensor_tensor_scan, tensor_scalar_cumulative, tensor_scalar_reduce):
jitted vs reference for every op, and closed forms the scans must reproduce."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import SHAPES, assert_exact, assert_ulp, assert_within_sum_bound, moderate_f32

from hwsim import kernels as K
from hwsim.kernels import AluOp, ReduceOp

FLOAT_OPS = [op for op in AluOp if op not in K.INTEGER_ONLY_OPS]
EXACT_OPS = [op for op in FLOAT_OPS if op in K.FLOAT_EXACT_OPS]
TSR_OPS = [ReduceOp.add, ReduceOp.multiply, ReduceOp.max, ReduceOp.min]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op0", EXACT_OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("reverse", [(False, False), (True, True)], ids=["plain", "reversed"])
def test_tensor_tensor_scan_matches_reference(op0, shape, reverse) -> None:
    rng = np.random.default_rng(int(op0) * 7 + shape[0] + shape[1])
    a, b = moderate_f32(rng, shape, 1.0), moderate_f32(rng, shape, 1.0)
    initial = moderate_f32(rng, (shape[0],), 1.0)
    for op1 in (AluOp.add, AluOp.max, AluOp.subtract):
        args = (a, b, initial, op0, op1, *reverse)
        assert_exact(K.tensor_tensor_scan(*args), K.tensor_tensor_scan_ref(*args), op0.name)


def test_tensor_tensor_scan_is_a_linear_recurrence() -> None:
    # r_i = a_i * r_{i-1} + b_i, checked against an independent float64 recurrence.
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.0, (3, 64)).astype(np.float32)
    b = rng.uniform(-1, 1, (3, 64)).astype(np.float32)
    got = K.tensor_tensor_scan(a, b, 0.25, AluOp.multiply, AluOp.add)
    r = np.full(3, 0.25)
    for i in range(64):
        r = a[:, i].astype(np.float64) * r + b[:, i]
        np.testing.assert_allclose(got[:, i], r, rtol=1e-5, atol=1e-6)


def test_tensor_tensor_scan_operand_order() -> None:
    a = np.array([[5.0, 7.0]], np.float32)
    b = np.array([[1.0, 2.0]], np.float32)
    # op0(a, r) = a - r, op1(t, b) = t - b: r0 = (5 - 10) - 1 = -6, r1 = (7 + 6) - 2 = 11.
    assert K.tensor_tensor_scan(a, b, 10.0, AluOp.subtract, AluOp.subtract).tolist() == [[-6, 11]]
    # reversed: op0(r, a) = r - a, op1(b, t) = b - t: r0 = 1 - 5 = -4, r1 = 2 - (-11) = 13.
    got = K.tensor_tensor_scan(a, b, 10.0, AluOp.subtract, AluOp.subtract, True, True)
    assert got.tolist() == [[-4, 13]]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op1", sorted(K.SCAN_REDUCE_OPS), ids=lambda op: op.name)
def test_tensor_scalar_cumulative_matches_reference(op1, shape) -> None:
    rng = np.random.default_rng(int(op1) + shape[0] * 3 + shape[1])
    x = moderate_f32(rng, shape, 1.0)
    s0, initial = moderate_f32(rng, (shape[0],)), moderate_f32(rng, (shape[0],))
    for op0 in (AluOp.multiply, AluOp.add, AluOp.max):
        args = (x, op0, s0, op1, initial)
        assert_exact(K.tensor_scalar_cumulative(*args), K.tensor_scalar_cumulative_ref(*args))


def test_tensor_scalar_cumulative_prefix_sum_and_running_max() -> None:
    x = np.array([[1.0, -2.0, 4.0, 3.0]], np.float32)
    assert K.tensor_scalar_cumulative(x, AluOp.multiply, 2.0, AluOp.add, 0.0).tolist() == [
        [2.0, -2.0, 6.0, 12.0]
    ]
    got = K.tensor_scalar_cumulative(x, AluOp.add, 0.0, AluOp.max, -np.inf)
    assert got.tolist() == [[1.0, 1.0, 4.0, 4.0]]
    with pytest.raises(ValueError, match="op1=divide is not a cumulative reduction"):
        K.tensor_scalar_cumulative(x, AluOp.add, 0.0, AluOp.divide, 0.0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduce_op", TSR_OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("reverse0", [False, True])
def test_tensor_scalar_reduce_matches_reference(reduce_op, shape, reverse0) -> None:
    rng = np.random.default_rng(int(reduce_op) + shape[0] + 5 * shape[1])
    if reduce_op is ReduceOp.multiply:  # products of 512 terms near 1 stay normal fp32 numbers
        x = rng.uniform(0.95, 1.05, shape).astype(np.float32)
        s0 = rng.uniform(0.95, 1.05, shape[0]).astype(np.float32)
        op0s = (AluOp.multiply, AluOp.divide)
    else:
        x = moderate_f32(rng, shape)
        s0 = moderate_f32(rng, (shape[0],), 1.0)
        op0s = (AluOp.subtract, AluOp.multiply)
    for op0 in op0s:
        args = (x, op0, s0, reverse0, reduce_op)
        out, red = K.tensor_scalar_reduce(*args)
        ref_out, ref_red = K.tensor_scalar_reduce_ref(*args)
        assert_exact(out, ref_out, f"{op0.name} out")
        if reduce_op in (ReduceOp.max, ReduceOp.min):
            assert_exact(red, ref_red, f"{op0.name} {reduce_op.name}")
        elif reduce_op is ReduceOp.add:
            exact = out.astype(np.float64).sum(axis=1)
            abs_sum = np.abs(out.astype(np.float64)).sum(axis=1)
            assert_within_sum_bound(red, exact, abs_sum, shape[1], op0.name)
        else:
            assert_ulp(red, ref_red, 4 * shape[1], f"{op0.name} product")


def test_tensor_scalar_reduce_rejects_other_reductions() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="reduce_op=bitwise_or is not allowed"):
        K.tensor_scalar_reduce(x, AluOp.add, 1.0, False, ReduceOp.bitwise_or)
