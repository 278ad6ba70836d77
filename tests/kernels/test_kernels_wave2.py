"""Search, gather, PRNG and MX kernels: every Numba kernel against its NumPy twin, and the twins
against independent definitions (nki.isa's NumPy equivalents, ml_dtypes' OCP formats, a
plain-Python xorwow)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hwsim import kernels as K
from hwsim.kernels import AluOp

RNG = np.random.default_rng(21)


def both(name: str, *args):
    """The kernel's and its twin's results (tuples compared element by element)."""
    got, want = getattr(K, name)(*args), getattr(K, f"{name}_ref")(*args)
    if not isinstance(got, tuple):
        got, want = (got,), (want,)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    return got if len(got) > 1 else got[0]


# ---- search --------------------------------------------------------------------------------


def test_max8_with_ties_infinities_and_nan():
    x = RNG.uniform(-1, 1, (5, 30)).astype(np.float32)
    x[0] = np.minimum(x[0], 0.25)
    x[0, :10] = 0.5  # ties at the top
    x[1, 3], x[1, 4], x[1, 5] = np.inf, -np.inf, np.nan
    got = both("max8", x)
    assert got[1, 0] == np.inf and not np.isnan(got[1]).any()  # NaN ranks below everything
    np.testing.assert_array_equal(got[0], np.full(8, 0.5, np.float32))
    with pytest.raises(ValueError, match="at least 8"):
        K.max8(np.zeros((2, 7), np.float32))


def test_find_and_match_replace_follow_the_nki_numpy_loop():
    x = RNG.integers(0, 6, (7, 40)).astype(np.float32)
    vals = RNG.integers(0, 7, (7, 8)).astype(np.float32)  # 6 never occurs
    found = both("find_index8", x, vals)
    for p in range(7):
        for j in range(8):
            hits = np.flatnonzero(x[p] == vals[p, j])
            assert found[p, j] == (hits[0] if hits.size else K.NOT_FOUND)
    replaced, idx = both("match_replace8", x, vals, -3.0)
    data = x.copy()
    for p in range(7):  # nki.isa's NumPy equivalent [S16]
        for j in range(8):
            matches = np.where(data[p] == vals[p, j])[0]
            if matches.size:
                assert idx[p, j] == matches[0]
                data[p, matches[0]] = -3.0
            else:
                assert idx[p, j] == K.NOT_FOUND
    np.testing.assert_array_equal(replaced, data)


@pytest.mark.parametrize(
    ("op0", "op1"),
    [(AluOp.is_ge, AluOp.is_lt), (AluOp.is_equal, AluOp.is_le), (AluOp.is_gt, AluOp.is_ge)],
)
def test_range_select(op0, op1):
    x = RNG.standard_normal((6, 50)).astype(np.float32)
    b0 = RNG.integers(-5, 40, 6).astype(np.float32)
    b1 = (b0 + RNG.integers(0, 20, 6)).astype(np.float32)
    got = both("range_select", x, b0, b1, op0, op1, -3, -1e30)
    fns = {AluOp.is_ge: np.greater_equal, AluOp.is_lt: np.less, AluOp.is_equal: np.equal}
    fns |= {AluOp.is_le: np.less_equal, AluOp.is_gt: np.greater}
    index = (-3 + np.arange(50)).astype(np.float32)
    mask = fns[op0](index, b0[:, None]) & fns[op1](index, b1[:, None])
    np.testing.assert_array_equal(got, np.where(mask, x, np.float32(-1e30)))
    with pytest.raises(ValueError, match="not a comparison"):
        K.range_select(x, b0, b1, AluOp.add, op1, 0, 0.0)


def test_select_reduce_copy_predicated_and_accumulate():
    pred = RNG.integers(-1, 2, (4, 9))
    on_true = RNG.standard_normal((4, 9)).astype(np.float32)
    on_false = RNG.standard_normal(4).astype(np.float32)
    for reverse in (False, True):
        got = both("select_reduce", pred, on_true, on_false, reverse)
        take = (pred != 0) != reverse
        np.testing.assert_array_equal(got, np.where(take, on_true, on_false[:, None]))
        bits = both("copy_predicated", pred * 0 + 7, pred * 0 + 9, pred, reverse)
        np.testing.assert_array_equal(bits, np.where(take, 9, 7))
    for op in K.ACCUMULATE_OPS:
        acc = both("accumulate", on_true, op, K.ACCUMULATE_IDENTITY[op])
        numpy = {
            AluOp.add: on_true.sum(axis=1, dtype=np.float64),
            AluOp.max: on_true.max(axis=1),
            AluOp.min: on_true.min(axis=1),
            AluOp.abs_max: np.abs(on_true).max(axis=1),
            AluOp.abs_min: np.abs(on_true).min(axis=1),
        }[op]
        np.testing.assert_allclose(acc, numpy, rtol=1e-6)
    with pytest.raises(ValueError, match="not an accumulator reduction"):
        K.accumulate(on_true, AluOp.multiply, 1.0)


# ---- gathers -------------------------------------------------------------------------------


@pytest.mark.parametrize(("elements", "valid"), [(1, 16), (4, 64), (2, 5)])
def test_local_gather_against_the_nki_numpy_semantics(elements, valid):
    """nki.isa's NUMPY_SEMANTICS [S16], with the hardware index = row * num_elem_per_idx."""
    src = RNG.integers(-99, 99, (32, 128, elements))
    rows = RNG.integers(0, 128, (16, 4))
    index = np.tile(rows, (2, 1))
    got = both("local_gather", src.reshape(32, -1), index * elements, elements, valid)
    expected = np.empty((32, valid, elements), np.int64)
    for core in range(2):
        part = slice(16 * core, 16 * core + 16)
        indices_1d = index[part].flatten(order="F")[:valid]
        expected[part] = np.take(src[part], indices_1d, axis=1)
    np.testing.assert_array_equal(got, expected.reshape(32, -1))
    with pytest.raises(IndexError, match="outside"):
        K.local_gather(src.reshape(32, -1), index * elements + 10**6, elements, valid)


def test_n_gather_and_gather_rows():
    x = RNG.integers(0, 1000, (5, 20))
    index = RNG.integers(0, 20, (5, 7))
    np.testing.assert_array_equal(both("n_gather", x, index), np.take_along_axis(x, index, 1))
    rows = np.array([4, 0, 0, 3])
    np.testing.assert_array_equal(both("gather_rows", x, rows), x[rows])
    with pytest.raises(IndexError):
        K.n_gather(x, index + 20)


@pytest.mark.parametrize(("n", "k"), [(8, 8), (100, 17), (41, 3)])
def test_topk_snake(n, k):
    x = RNG.standard_normal((32, 7)).astype(np.float32)
    x[16, 0] = x[17, 0]  # a tie: the lower snake index ranks first
    vals, idx = both("topk", x, n, k)
    columns = -(-k // 16)
    assert vals.shape == idx.shape == (32, columns)
    for g in range(2):
        snake = x[16 * g : 16 * g + 16].T.reshape(-1)[:n]
        chosen = [idx[16 * g + j % 16, j // 16] for j in range(k)]
        values = [vals[16 * g + j % 16, j // 16] for j in range(k)]
        assert values == sorted(values)  # ascending [S15]
        np.testing.assert_array_equal(snake[chosen], values)
        assert sorted(values) == sorted(np.sort(snake)[-k:])
        if k < 16 * columns:
            assert idx[16 * g + k % 16, columns - 1] == -1


def test_nonzero_with_count_and_sequence_bounds_examples():
    x = np.array([[0, 1, 1, 0, 0, 1, 0, 0]], np.float32)
    got = both("nonzero_with_count", x, 16, -1)
    np.testing.assert_array_equal(got, [[17, 18, 21, -1, -1, -1, -1, -1, 3]])  # [S15]
    ids = np.array([0, 1, 1, 2, 2, 2, 0, 3, 3])
    expected = [[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]  # [S16]
    np.testing.assert_array_equal(both("sequence_bounds", ids), expected)


def nki_sequence_bounds(sequence: np.ndarray) -> np.ndarray:
    """nki.isa's compute_sequence_bounds [S16] (the test file's NumPy equivalent)."""
    n = len(sequence)
    lo, hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    lo[0] = 0 if sequence[0] != 0 else n
    for i in range(1, n):
        lo[i] = n if sequence[i] == 0 else lo[i - 1] if sequence[i] == sequence[i - 1] else i
    hi[-1] = n if sequence[-1] != 0 else -1
    for i in range(n - 2, -1, -1):
        hi[i] = -1 if sequence[i] == 0 else hi[i + 1] if sequence[i] == sequence[i + 1] else i + 1
    return np.vstack((lo, hi))


def test_sequence_bounds_on_random_sorted_ids():
    for seed in range(5):
        ids = np.sort(np.random.default_rng(seed).integers(0, 12, 64)).astype(np.float32)
        np.testing.assert_array_equal(both("sequence_bounds", ids), nki_sequence_bounds(ids))
    with pytest.raises(ValueError, match="non-negative"):
        K.sequence_bounds(np.array([1, -1]))


# ---- PRNG ----------------------------------------------------------------------------------


def test_xorwow_against_a_plain_python_generator():
    state = both("xorwow_seed", 99, 3, 4)
    assert state.shape == (3, 4, 6) and (state >= 0).all() and (state < 2**32).all()
    assert not (state == K.xorwow_seed(98, 3, 4)).all()
    values, after = both("xorwow_draw", state, 9)
    for lane in range(3):
        gens = [list(map(int, state[lane, g])) for g in range(4)]
        for i in range(9):
            w = gens[i % 4]
            t = w[4] ^ (w[4] >> 2)
            t = (t ^ (t << 1)) & 0xFFFFFFFF
            t ^= w[0] ^ ((w[0] << 4) & 0xFFFFFFFF)
            w[1:5], w[0] = w[0:4], t
            w[5] = (w[5] + 362437) & 0xFFFFFFFF
            assert values[lane, i] == (t + w[5]) & 0xFFFFFFFF
        np.testing.assert_array_equal(after[lane], gens)
    with pytest.raises(ValueError, match="32-bit"):
        K.xorwow_seed(2**32, 1, 1)


def test_uniform_and_dropout():
    bits = RNG.integers(0, 2**32, (4, 1000))
    u = both("uniform", bits, -2.0, np.array([1, 2, 3, 4], np.float32))
    assert (u >= -2).all() and (u <= 4).all()
    x = RNG.standard_normal((4, 1000)).astype(np.float32)
    x[0, 0] = np.nan
    for prob in (0.0, 0.25, 1.0):
        dropped = both("dropout", x, bits, prob)
        keep = (bits >> 8) * 2.0**-24 >= prob
        np.testing.assert_array_equal(dropped, np.where(keep, x, 0))
    assert (K.dropout(x, bits, 1.0) == 0).all()


# ---- MX ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2"])
def test_quantize_mx_against_ml_dtypes(fmt):
    ml = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    x = (RNG.standard_normal((16, 32)) * np.exp2(RNG.integers(-12, 12, (16, 32)))).astype(
        np.float32
    )
    x[8:16, 4:8] = 0.0
    x[0, 1] = -0.0
    codes, scales = both("quantize_mx", x, fmt)
    factor = np.exp2(127.0 - np.repeat(np.repeat(scales, 8, 0), 4, 1))
    limit = float(ml_dtypes.finfo(ml).max)
    scaled = np.clip(x.astype(np.float64) * factor, -limit, limit).astype(np.float32)
    expected = scaled.astype(ml).view(np.uint8).astype(np.int64)
    lanes = np.stack([(codes >> (8 * j)) & 255 for j in range(4)], axis=2).reshape(16, 32)
    np.testing.assert_array_equal(lanes, expected)
    assert scales[1, 1] == 0  # the all-zero group
    back = both("dequantize_mx", codes, scales, fmt)
    restored = back.reshape(4, 16, 8).transpose(1, 2, 0).reshape(16, 32)
    np.testing.assert_array_equal(restored, (scaled.astype(ml).astype(np.float64) / factor))


def test_quantize_mx_non_finite_groups_get_the_nan_scale():
    x = np.ones((8, 8), np.float32)
    x[3, 5] = np.inf
    codes, scales = both("quantize_mx", x, "e4m3fn")
    assert scales.tolist() == [[127 - 8, 255]]  # amax 1: floor(log2 1) - emax 8 + 127
    assert np.isnan(K.dequantize_mx(codes, scales, "e4m3fn")[:, 1]).all()


def test_dequantize_fp4():
    codes = RNG.integers(0, 16, (8, 3, 4))
    words = (codes << (np.arange(4) * 4)).sum(axis=2)
    scales = np.full((1, 3), 128)
    got = both("dequantize_mx", words, scales, "e2m1fn")
    values = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64) * 2.0
    np.testing.assert_array_equal(got, values.transpose(2, 0, 1).reshape(32, 3))
