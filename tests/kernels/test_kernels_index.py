"""Tests of iota and affine_select: jitted vs reference, explicit loops, and causal masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_exact, mixed_f32

from hwsim import kernels as K
from hwsim.kernels import AluOp

PATTERNS = [
    ((1,), ()),
    ((3, 1), (5,)),
    ((128, 7), (-1,)),
    ((128, 512), (1,)),
    ((3, 4, 5), (10, -2)),
    ((2, 3, 2, 4), (1, 0, 7)),
    ((5, 2, 3, 2, 2), (1, -3, 4, 100)),
]


def _loop_affine(
    shape: tuple[int, ...], offset: int, multiplier: int, steps: tuple[int, ...]
) -> np.ndarray:
    """The affine expression written as explicit Python loops (independent of both twins)."""
    out = np.empty(shape, dtype=object)
    for index in itertools.product(*(range(d) for d in shape)):
        p, free = index[0], index[1:]
        out[index] = offset + p * multiplier + sum(i * s for i, s in zip(free, steps, strict=True))
    return out


@pytest.mark.parametrize(("shape", "steps"), PATTERNS)
@pytest.mark.parametrize(("offset", "multiplier"), [(0, 1), (7, -3), (-100, 0), (2**31 - 5, 1)])
def test_iota(shape: tuple[int, ...], steps: tuple[int, ...], offset: int, multiplier: int) -> None:
    got = K.iota(shape, offset, multiplier, steps)
    assert got.shape == shape and got.dtype == np.int32
    assert_exact(got, K.iota_ref(shape, offset, multiplier, steps), "iota vs reference")
    if np.prod(shape) <= 4096:
        exact = _loop_affine(shape, offset, multiplier, steps)
        wrapped = ((exact.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)
        assert_exact(got, wrapped, "iota vs loops (int32 wrap-around)")


def test_iota_rejects_bad_patterns() -> None:
    with pytest.raises(ValueError, match="one step per free dimension"):
        K.iota((4, 5), 0, 1, (1, 2))
    with pytest.raises(ValueError, match="at most 4 free dimensions"):
        K.iota((1, 1, 1, 1, 1, 1), 0, 1, (1, 1, 1, 1, 1))


CMP_OPS = sorted(K.AFFINE_SELECT_CMP_OPS)


@pytest.mark.parametrize(("shape", "steps"), PATTERNS)
@pytest.mark.parametrize("cmp_op", CMP_OPS, ids=lambda op: op.name)
def test_affine_select(shape: tuple[int, ...], steps: tuple[int, ...], cmp_op: AluOp) -> None:
    rng = np.random.default_rng(int(cmp_op) + len(shape))
    x = mixed_f32(rng, shape)
    for offset, multiplier in [(0, 1), (3, -2), (-5, 2)]:
        got = K.affine_select(x, offset, multiplier, steps, cmp_op, -np.inf)
        ref = K.affine_select_ref(x, offset, multiplier, steps, cmp_op, -np.inf)
        assert_exact(got, ref, f"{cmp_op.name} {shape}")
        if x.size <= 4096:
            expr = _loop_affine(shape, offset, multiplier, steps).astype(np.int64)
            keep = {
                AluOp.is_ge: expr >= 0,
                AluOp.is_gt: expr > 0,
                AluOp.is_le: expr <= 0,
                AluOp.is_lt: expr < 0,
                AluOp.is_equal: expr == 0,
                AluOp.not_equal: expr != 0,
            }[cmp_op]
            assert_exact(got, np.where(keep, x, np.float32(-np.inf)), "vs loops")


@pytest.mark.parametrize("size", [1, 7, 128])
def test_affine_select_builds_causal_mask(size: int) -> None:
    # Partition = query row q, free = key column k: keep k <= q, i.e. q - k >= 0.
    ones = np.ones((size, size), np.float32)
    mask = K.affine_select(ones, 0, 1, (-1,), AluOp.is_ge, 0.0)
    assert_exact(mask, np.tril(ones), "causal mask")
    scores = mixed_f32(np.random.default_rng(size), (size, size))
    masked = K.affine_select(scores, 0, 1, (-1,), AluOp.is_ge, -np.inf)
    assert_exact(masked, np.where(np.tril(ones) == 1, scores, -np.inf).astype(np.float32), "")
    # A query tile starting at row 64 of a longer sequence: offset shifts the diagonal.
    shifted = K.affine_select(ones, 64, 1, (-1,), AluOp.is_ge, 0.0)
    assert_exact(shifted, np.tril(ones, 64), "causal mask, offset 64")


def test_affine_select_rejects_non_comparison() -> None:
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="cmp_op=add is not a comparison"):
        K.affine_select(x, 0, 1, (-1,), AluOp.add, 0.0)
