"""Tests of the ALU elementwise kernels: jitted vs reference for every op; IEEE/int semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import SHAPES, assert_exact, assert_ulp, int32_values, mixed_f32, moderate_f32

from hwsim import kernels as K
from hwsim.kernels import AluOp

FLOAT_OPS = [op for op in AluOp if op not in K.INTEGER_ONLY_OPS]


def _float_tolerance(*ops: AluOp) -> int:
    # IEEE-defined ops agree bit for bit; power goes through libm pow (float64) then one rounding.
    return 0 if all(op in K.FLOAT_EXACT_OPS for op in ops) else 1


def _operands(op: AluOp, shape: tuple[int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = mixed_f32(rng, shape)
    b = mixed_f32(rng, shape)
    if op in (AluOp.power,):
        # Exponents where powers stay interesting: small magnitudes and integers.
        b = np.where(rng.random(shape) < 0.5, np.round(b % 7.0), b % 3.0).astype(np.float32)
    if op in K.COMPARISON_OPS or op in (AluOp.max, AluOp.min, AluOp.abs_max, AluOp.abs_min):
        b = np.where(rng.random(shape) < 0.3, a, b)  # ties
    return a, b


# --- tensor_tensor ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", FLOAT_OPS, ids=lambda op: op.name)
def test_tensor_tensor_matches_reference(op: AluOp, shape: tuple[int, int]) -> None:
    a, b = _operands(op, shape, seed=int(op) * 1000 + shape[0] + shape[1])
    got = K.tensor_tensor(a, b, op)
    assert_ulp(got, K.tensor_tensor_ref(a, b, op), _float_tolerance(op), f"{op.name} {shape}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_tensor_tensor_int_matches_reference(op: AluOp, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(int(op) * 1000 + shape[0] + shape[1])
    a, b = int32_values(rng, shape), int32_values(rng, shape)
    got = K.tensor_tensor_int(a, b, op)
    assert got.dtype == np.int64
    assert_exact(got, K.tensor_tensor_int_ref(a, b, op), f"{op.name} {shape}")


def test_float_kernels_reject_integer_only_ops() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="bitwise_and needs integer operands"):
        K.tensor_tensor(x, x, AluOp.bitwise_and)
    with pytest.raises(ValueError, match="op1=logical_shift_left"):
        K.tensor_scalar(x, AluOp.add, 1.0, False, AluOp.logical_shift_left, 1.0)


def test_bad_operands_are_errors_that_say_what_is_wrong() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="a must be float32"):
        K.tensor_tensor(x.astype(np.float64), x, AluOp.add)
    with pytest.raises(ValueError, match=r"a and b must have the same shape"):
        K.tensor_tensor(x, x[:, :2], AluOp.add)
    with pytest.raises(ValueError, match="op=99 is not a valid AluOp; valid: bypass=0"):
        K.tensor_tensor(x, x, 99)
    with pytest.raises(ValueError, match=r"s0 must be a scalar, \[2\] or \[2, 1\]"):
        K.tensor_scalar(x, AluOp.add, np.ones(3, np.float32))


# --- IEEE and integer semantics against independent formulas ----------------------------------


def test_float_semantics_ieee() -> None:
    nan, inf = np.float32(np.nan), np.float32(np.inf)
    a = np.array([[1.0, -1.0, 0.0, nan, 2.0, -0.0, 5.5, -5.5]], np.float32)
    b = np.array([[0.0, 0.0, 0.0, 1.0, nan, 3.0, 2.0, 2.0]], np.float32)

    def tt(op: AluOp) -> list[float]:
        return K.tensor_tensor(a, b, op)[0].tolist()

    quotients = tt(AluOp.divide)
    assert quotients[:2] == [inf, -inf] and math.isnan(quotients[2])
    assert np.isnan(tt(AluOp.max)[3:5]).all() and np.isnan(tt(AluOp.min)[3:5]).all()
    assert tt(AluOp.is_equal) == [0, 0, 1, 0, 0, 0, 0, 0]
    assert tt(AluOp.not_equal) == [1, 1, 0, 1, 1, 1, 1, 1]
    assert tt(AluOp.is_ge) == [1, 0, 1, 0, 0, 0, 1, 0]
    assert tt(AluOp.logical_and) == [0, 0, 0, 1, 1, 0, 1, 1]  # NaN != 0 counts as true
    assert tt(AluOp.logical_xor) == [1, 1, 0, 0, 0, 1, 0, 0]
    assert tt(AluOp.mod)[6:] == [math.fmod(5.5, 2.0), math.fmod(-5.5, 2.0)]
    assert tt(AluOp.abs_max)[6:] == [5.5, 5.5] and tt(AluOp.abs_min)[6:] == [2.0, 2.0]
    assert tt(AluOp.bypass) == pytest.approx(a[0].tolist(), nan_ok=True)
    powers = K.tensor_tensor(
        np.array([[2.0, -8.0, 0.0, -2.0]], np.float32),
        np.array([[10.0, 1 / 3, -1.0, 3.0]], np.float32),
        AluOp.power,
    )[0]
    assert powers[0] == 1024.0 and np.isnan(powers[1]) and powers[2] == inf and powers[3] == -8.0


def test_float_arithmetic_is_single_fp32_rounding() -> None:
    rng = np.random.default_rng(7)
    a, b = moderate_f32(rng, (3, 512)), moderate_f32(rng, (3, 512))
    for op, f in [(AluOp.add, np.add), (AluOp.multiply, np.multiply), (AluOp.divide, np.divide)]:
        # Correctly rounded fp32 = the float64 result (exact for +,*; double rounding is
        # innocuous for / since 53 >= 2*24 + 2) rounded once to fp32.
        with np.errstate(all="ignore"):
            expected = f(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
        assert_exact(K.tensor_tensor(a, b, op), expected, op.name)


def _c_int_semantics(a: int, b: int, op: AluOp) -> int:
    """Independent 32-bit integer semantics, written with Python ints."""

    def low32(v: int) -> int:
        return v & 0xFFFFFFFF

    def signed32(v: int) -> int:
        v = low32(v)
        return v - (1 << 32) if v & 0x80000000 else v

    shift = b & 31
    if op == AluOp.divide:
        # a / b is correctly rounded and |a| <= 2^31, so truncating it is exact.
        return -1 if b == 0 else math.trunc(a / b)
    if op == AluOp.mod:
        return a if b == 0 else int(math.fmod(a, b))
    if op in (AluOp.arith_shift_left, AluOp.logical_shift_left):
        return low32(a << shift)
    if op == AluOp.arith_shift_right:
        return signed32(a) >> shift
    if op == AluOp.logical_shift_right:
        return low32(a) >> shift
    raise AssertionError(op)


@pytest.mark.parametrize(
    "op",
    [
        AluOp.divide,
        AluOp.mod,
        AluOp.arith_shift_left,
        AluOp.logical_shift_left,
        AluOp.arith_shift_right,
        AluOp.logical_shift_right,
    ],
    ids=lambda op: op.name,
)
def test_int_semantics_match_32_bit_c(op: AluOp) -> None:
    rng = np.random.default_rng(int(op))
    a, b = int32_values(rng, (4, 64)), int32_values(rng, (4, 64))
    got = K.tensor_tensor_int(a, b, op)
    for x, y, r in zip(a.ravel().tolist(), b.ravel().tolist(), got.ravel().tolist(), strict=True):
        expected = _c_int_semantics(x, y, op)
        assert (r & 0xFFFFFFFF) == (expected & 0xFFFFFFFF), f"{op.name}({x}, {y}) = {r}"


def test_int_bitwise_and_comparisons() -> None:
    a = np.array([[5, -1, 0, 2**31 - 1, 7]], np.int64)
    b = np.array([[3, 1, 0, -(2**31), 7]], np.int64)
    assert K.tensor_tensor_int(a, b, AluOp.bitwise_and).tolist() == [[1, 1, 0, 0, 7]]
    assert K.tensor_tensor_int(a, b, AluOp.bitwise_xor).tolist() == [[6, -2, 0, -1, 0]]
    assert K.tensor_tensor_int(a, b, AluOp.bitwise_not).tolist() == [[-6, 0, -1, -(2**31), -8]]
    assert K.tensor_tensor_int(a, b, AluOp.is_gt).tolist() == [[1, 0, 0, 1, 0]]
    assert K.tensor_tensor_int(a, b, AluOp.power)[0, :3].tolist() == [125, -1, 1]


# --- tensor_scalar / scalar_tensor_tensor ------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op", FLOAT_OPS, ids=lambda op: op.name)
def test_tensor_scalar_op0_matches_reference(
    op: AluOp, reverse: bool, shape: tuple[int, int]
) -> None:
    # op1 = bypass isolates op0; then op0 = multiply (exact) feeds op1 below.
    rng = np.random.default_rng(int(op) * 7 + shape[0] * 3 + shape[1] + reverse)
    x = mixed_f32(rng, shape)
    s0 = mixed_f32(rng, (shape[0],))
    args = (x, op, s0, reverse, AluOp.bypass, 0.0, False)
    assert_ulp(K.tensor_scalar(*args), K.tensor_scalar_ref(*args), _float_tolerance(op), op.name)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op", FLOAT_OPS, ids=lambda op: op.name)
def test_tensor_scalar_op1_matches_reference(
    op: AluOp, reverse: bool, shape: tuple[int, int]
) -> None:
    rng = np.random.default_rng(int(op) * 11 + shape[0] * 5 + shape[1] + reverse)
    x = moderate_f32(rng, shape)
    s0, s1 = moderate_f32(rng, (shape[0], 1)), moderate_f32(rng, (shape[0],), scale=2.0)
    args = (x, AluOp.multiply, s0, False, op, s1, reverse)
    assert_ulp(K.tensor_scalar(*args), K.tensor_scalar_ref(*args), _float_tolerance(op), op.name)


def test_tensor_scalar_reverse_and_bypass_semantics() -> None:
    x = np.array([[1.0, 2.0, 4.0]], np.float32)
    assert K.tensor_scalar(x, AluOp.subtract, 10.0).tolist() == [[-9.0, -8.0, -6.0]]
    assert K.tensor_scalar(x, AluOp.subtract, 10.0, True).tolist() == [[9.0, 8.0, 6.0]]
    assert K.tensor_scalar(x, AluOp.divide, 8.0, True, AluOp.add, 1.0).tolist() == [[9, 5, 3]]
    # bypass passes the data-path value through whatever the reverse flag says.
    assert K.tensor_scalar(x, AluOp.bypass, 7.0, True).tolist() == x.tolist()


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_tensor_scalar_int_matches_reference(op: AluOp, reverse: bool) -> None:
    rng = np.random.default_rng(int(op) + 100 * reverse)
    x = int32_values(rng, (128, 7))
    s0 = int32_values(rng, (128,))
    s1 = rng.integers(0, 8, size=(128, 1))
    for args in [(x, op, s0, reverse), (x, AluOp.add, s0, False, op, s1, reverse)]:
        assert_exact(K.tensor_scalar_int(*args), K.tensor_scalar_int_ref(*args), op.name)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("op0", "op1"),
    [(op, AluOp.add) for op in FLOAT_OPS] + [(AluOp.multiply, op) for op in FLOAT_OPS],
    ids=lambda op: op.name,
)
def test_scalar_tensor_tensor_matches_reference(
    op0: AluOp, op1: AluOp, shape: tuple[int, int]
) -> None:
    rng = np.random.default_rng(int(op0) * 31 + int(op1) + shape[0] + shape[1])
    x, y = moderate_f32(rng, shape), moderate_f32(rng, shape)
    s0 = moderate_f32(rng, (shape[0],))
    for reverse0, reverse1 in [(False, False), (True, True)]:
        args = (x, op0, s0, op1, y, reverse0, reverse1)
        got, expected = K.scalar_tensor_tensor(*args), K.scalar_tensor_tensor_ref(*args)
        if op0 == AluOp.power:
            # A 1-ulp difference inside power can be amplified by the following add when it
            # cancels, so compare with a relative tolerance there.
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-30)
        else:
            assert_ulp(got, expected, _float_tolerance(op0, op1), f"{op0.name}, {op1.name}")


def test_scalar_tensor_tensor_formula() -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    y = np.array([[10.0, 20.0], [30.0, 40.0]], np.float32)
    got = K.scalar_tensor_tensor(
        x, AluOp.subtract, np.array([1.0, 2.0], np.float32), AluOp.multiply, y
    )
    assert got.tolist() == [[0.0, 20.0], [30.0, 80.0]]


# --- reciprocal / select -----------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_reciprocal_matches_reference(shape: tuple[int, int]) -> None:
    x = mixed_f32(np.random.default_rng(shape[0] * 1000 + shape[1]), shape)
    got = K.reciprocal(x)
    assert_exact(got, K.reciprocal_ref(x), "reciprocal")
    with np.errstate(divide="ignore"):
        assert_exact(got, (1.0 / x.astype(np.float64)).astype(np.float32), "1/x")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pred_dtype", [np.float32, np.int32, np.uint8, np.bool_, np.float16])
def test_select_matches_reference(shape: tuple[int, int], pred_dtype: type) -> None:
    rng = np.random.default_rng(shape[0] + shape[1])
    pred = rng.integers(-1, 2, size=shape).astype(pred_dtype)
    on_true, on_false = mixed_f32(rng, shape), mixed_f32(rng, shape)
    got = K.select(pred, on_true, on_false)
    assert_exact(got, K.select_ref(pred, on_true, on_false), "select")
    assert_exact(got, np.where(pred.astype(bool), on_true, on_false), "np.where")


def test_select_nan_predicate_is_true() -> None:
    pred = np.array([[np.nan, 0.0, -0.0]], np.float32)
    got = K.select(pred, np.ones((1, 3), np.float32), np.zeros((1, 3), np.float32))
    assert got.tolist() == [[1.0, 0.0, 0.0]]


def test_non_contiguous_and_read_only_inputs() -> None:
    rng = np.random.default_rng(3)
    big = mixed_f32(rng, (8, 20))
    a, b = big[:, ::2], big.T[:10, :8].T  # strided and transposed views
    a_ro = a.copy()
    a_ro.flags.writeable = False
    for x in (a, a_ro):
        assert_exact(K.tensor_tensor(x, b, AluOp.add), np.add(x, b), "add on views")
