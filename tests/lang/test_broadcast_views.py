"""``lang.broadcast_to``: stride-0 on-chip views read by the engines, exact numerics, the same
engine cost as a dense operand, and clear errors for what the hardware cannot broadcast."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim import lang
from hwsim.lang import IndexingError
from hwsim.lang import isa as nisa


def test_a_column_viewed_as_a_tile_has_stride_zero():
    seen = {}

    def body():
        column = lang.ndarray((32, 1), lang.float32)
        seen["col"] = lang.broadcast_to(column, (32, 16)).ap()
        cube = lang.ndarray((32, 4, 1, 8), lang.float32)
        seen["cube"] = lang.broadcast_to(cube[:, 1:3], (32, 2, 5, 8)).ap()

    lang.kernel(body).build(config="tiny")
    col, cube = seen["col"], seen["cube"]
    assert (col.partitions, col.free_sizes, col.free_strides) == (32, (16,), (0,))
    assert (cube.free_sizes, cube.free_strides) == ((2, 5, 8), (8, 0, 1))


@lang.kernel
def subtract_broadcast(x, col, row):
    """out = x - col (a [P, 1] column over the columns) + row (a [P, 2, 1, 8] tile over dim 2)."""
    out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
    p, a, b, c = x.shape
    xt = lang.load(x)
    ct = lang.ndarray((p, 1), lang.float32)
    nisa.dma_copy(ct, col)
    rt = lang.ndarray((p, a, 1, c), lang.float32)
    nisa.dma_copy(rt, row)
    flat = xt.full()
    mid = lang.ndarray(x.shape, lang.float32)
    # [P, 1] viewed over all a*b*c elements of a partition: one free dim of stride 0
    column = lang.ndarray((p, a * b * c), lang.float32)
    nisa.tensor_copy(column, lang.broadcast_to(ct, (p, a * b * c)))
    nisa.tensor_tensor(mid, flat, column.full(), nisa.AluOp.subtract)
    nisa.tensor_tensor(mid, mid, lang.broadcast_to(rt, (p, a, b, c)), nisa.AluOp.add)
    lang.store(out, mid)
    return out


def test_engines_read_broadcast_views_exactly():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 2, 3, 8)).astype(np.float32)
    col = rng.standard_normal((16, 1)).astype(np.float32)
    row = rng.standard_normal((16, 2, 1, 8)).astype(np.float32)
    result = subtract_broadcast(x, col, row, config="tiny", race_check=True)
    expected = (x - col.reshape(16, 1, 1, 1)) + row
    np.testing.assert_array_equal(result.output, expected)


def _tensor_tensor_ticks(broadcast: bool) -> int:
    @lang.kernel
    def one_op(x):
        out = lang.ndarray(x.shape, x.dtype, buffer=lang.hbm)
        xt = lang.load(x)
        other = lang.ndarray((32, 1) if broadcast else (32, 64), lang.float32)
        nisa.memset(other, 1.0)
        src = lang.broadcast_to(other, (32, 64)) if broadcast else other
        nisa.tensor_tensor(xt, xt, src, nisa.AluOp.add)
        lang.store(out, xt)
        return out

    result = one_op(lang.TensorSpec((32, 64), "fp32"), config="tiny", numerics=False)
    (record,) = [r for r in result.trace.instructions if r.instruction.OPCODE == "tensor_tensor"]
    return record.end_tick - record.start_tick


def test_a_broadcast_operand_costs_the_engine_what_a_dense_one_does():
    # the streaming model counts elements read, not bytes fetched: N per stream either way
    assert _tensor_tensor_ticks(broadcast=True) == _tensor_tensor_ticks(broadcast=False)


def _error(fn) -> str:
    with pytest.raises(IndexingError) as error:
        lang.kernel(fn).build(config="tiny")
    return str(error.value)


def test_what_cannot_be_broadcast_is_a_clear_error():
    assert "cannot broadcast the partition dimension to 32" in _error(
        lambda: lang.broadcast_to(lang.ndarray((1, 8), lang.float32), (32, 8))
    )
    assert "cannot broadcast dimension 1 of size 8 to 16" in _error(
        lambda: lang.broadcast_to(lang.ndarray((4, 8), lang.float32), (4, 16))
    )
    assert "the view has 2 dims" in _error(
        lambda: lang.broadcast_to(lang.ndarray((4, 1), lang.float32), (4, 2, 8))
    )
