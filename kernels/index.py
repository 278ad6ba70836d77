"""Affine index kernels of GpSimdE (iota, affine_select) with NumPy twins.

Both evaluate the affine expression ``offset + p * channel_multiplier + Σ_k i_k * steps[k]`` over
the partition index ``p`` and the free indices ``i_1 … i_F`` (F ≤ 4 free dimensions, as the
hardware's access patterns). ``iota`` writes it with int32 wrap-around; ``affine_select``
compares it (exactly, in int64) against 0 to build masks such as causal attention masks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from . import _checks
from .ops import AFFINE_SELECT_CMP_OPS, AluOp

MAX_FREE_DIMS = 4
"""Free dimensions of an affine pattern (nki.isa ``iota``/``affine_select`` take up to 4)."""


def _pattern(
    shape: Sequence[int], steps: Sequence[int], what: str
) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """Check an affine pattern; return (shape, free dims padded to 4, steps padded to 4)."""
    shape = tuple(int(d) for d in shape)
    steps = tuple(int(s) for s in steps)
    free = shape[1:]
    if len(shape) < 1 or any(d < 0 for d in shape):
        raise ValueError(f"{what} shape must be [P, *free] with non-negative sizes, got {shape}")
    if len(free) > MAX_FREE_DIMS:
        raise ValueError(
            f"{what} supports at most {MAX_FREE_DIMS} free dimensions, got shape {shape}"
        )
    if len(steps) != len(free):
        raise ValueError(
            f"{what} needs one step per free dimension: shape {shape} has {len(free)}, "
            f"got steps {steps}"
        )
    # Pad on the outer side so that the innermost loop of the jitted cores runs over the
    # innermost real dimension.
    pad = MAX_FREE_DIMS - len(free)
    dims = np.array((1,) * pad + free, dtype=np.int64)
    padded_steps = np.array((0,) * pad + steps, dtype=np.int64)
    return shape, dims, padded_steps


def _affine_ref(
    shape: tuple[int, ...], offset: int, channel_multiplier: int, steps: Sequence[int]
) -> np.ndarray:
    """The affine expression over ``shape`` as exact int64, by broadcasting."""
    expr = np.full(shape, int(offset), dtype=np.int64)
    grids = np.indices(shape, dtype=np.int64)
    expr += grids[0] * int(channel_multiplier)
    for k, step in enumerate(steps):
        expr += grids[k + 1] * int(step)
    return expr


# ---------------------------------------------------------------------------------------------
# the affine expression, iota


@numba.njit(cache=True)
def _affine_jit(offset: int, multiplier: int, steps: np.ndarray, out: np.ndarray) -> None:
    parts, d1, d2, d3, d4 = out.shape
    for p in range(parts):
        base_p = offset + p * multiplier
        for i1 in range(d1):
            base_1 = base_p + i1 * steps[0]
            for i2 in range(d2):
                base_2 = base_1 + i2 * steps[1]
                for i3 in range(d3):
                    base_3 = base_2 + i3 * steps[2]
                    for i4 in range(d4):
                        out[p, i1, i2, i3, i4] = base_3 + i4 * steps[3]


def _affine(
    shape: tuple[int, ...], dims: np.ndarray, offset: int, multiplier: int, steps: np.ndarray
) -> np.ndarray:
    """The affine expression over ``shape`` (free dims padded to ``dims``) as exact int64."""
    out = np.empty((shape[0], *dims.tolist()), dtype=np.int64)
    _affine_jit(int(offset), int(multiplier), steps, out)
    return out.reshape(shape)


def iota(
    shape: Sequence[int], offset: int, channel_multiplier: int, steps: Sequence[int]
) -> np.ndarray:
    """GpSimdE ``iota``: int32 array of ``shape = [P, *free]`` holding the affine expression.

    value[p, i_1, …] = offset + p * channel_multiplier + Σ_k i_k * steps[k], computed in 32-bit
    two's-complement arithmetic (wraps). ``len(steps) == len(shape) - 1 ≤ 4``.
    """
    shape, dims, padded_steps = _pattern(shape, steps, "iota")
    return _affine(shape, dims, offset, channel_multiplier, padded_steps).astype(np.int32)


def iota_ref(
    shape: Sequence[int], offset: int, channel_multiplier: int, steps: Sequence[int]
) -> np.ndarray:
    """Reference for ``iota``."""
    shape, _, _ = _pattern(shape, steps, "iota")
    return _affine_ref(shape, offset, channel_multiplier, steps).astype(np.int32)


# ---------------------------------------------------------------------------------------------
# affine_select

#: What affine_select's comparison of the expression with 0 is, by op code.
_HOLDS = {
    int(AluOp.is_ge): np.greater_equal,
    int(AluOp.is_gt): np.greater,
    int(AluOp.is_le): np.less_equal,
    int(AluOp.is_lt): np.less,
    int(AluOp.is_equal): np.equal,
    int(AluOp.not_equal): np.not_equal,
}


def _affine_select_operands(
    x: np.ndarray, steps: Sequence[int], cmp_op: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError("affine_select x must be [P, *free], got a scalar")
    x = _checks.f32(x, "x", x.ndim)
    _, dims, padded_steps = _pattern(x.shape, steps, "affine_select")
    cmp_id = _checks.op_id(cmp_op, AluOp, "cmp_op")
    if AluOp(cmp_id) not in AFFINE_SELECT_CMP_OPS:
        valid = ", ".join(sorted(op.name for op in AFFINE_SELECT_CMP_OPS))
        raise ValueError(f"cmp_op={AluOp(cmp_id).name} is not a comparison; valid: {valid}")
    return x, dims, padded_steps, cmp_id


def affine_select(
    x: np.ndarray,
    offset: int,
    channel_multiplier: int,
    steps: Sequence[int],
    cmp_op: int,
    on_false: float,
) -> np.ndarray:
    """GpSimdE ``affine_select``: keep ``x`` where ``expr cmp_op 0`` holds, else ``on_false``.

    x: f32[P, *free] (≤ 4 free dims); expr = offset + p * channel_multiplier + Σ_k i_k * steps[k]
    evaluated exactly (int64); cmp_op one of is_ge, is_gt, is_le, is_lt, is_equal, not_equal;
    on_false is an fp32 value (e.g. -inf or -3e38 for attention masks). Returns f32 like x.
    Causal mask over [q, k]: ``affine_select(x, 0, 1, (-1,), AluOp.is_ge, -inf)`` keeps k ≤ q.
    """
    x, dims, padded_steps, cmp_id = _affine_select_operands(x, steps, cmp_op)
    values = _affine(x.shape, dims, offset, channel_multiplier, padded_steps)
    return np.where(_HOLDS[cmp_id](values, 0), x, np.float32(on_false))


def affine_select_ref(x, offset, channel_multiplier, steps, cmp_op, on_false):
    """Reference for ``affine_select``."""
    x, _, _, cmp_id = _affine_select_operands(x, steps, cmp_op)
    expr = _affine_ref(x.shape, offset, channel_multiplier, steps)
    return np.where(_HOLDS[cmp_id](expr, 0), x, np.float32(on_false))
