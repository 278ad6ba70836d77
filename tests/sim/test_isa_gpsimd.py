"""GpSimdE iota, affine_select and tensor_partition_reduce: numerics, exact ticks, legality.

Hand-computed ticks: GPSIMD_START + N GpSimdE cycles, no MIN_II floor. tiny: 2 ticks/cycle,
GPSIMD_START 10, latency 10 cycles. trn2: 4 ticks/cycle (base 4800 MHz, 1200 MHz), GPSIMD_START
150, latency 100 cycles.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP32, INT32, UINT32
from hwsim.isa.gpsimd_ops import AffineSelect, Iota, TensorPartitionReduce
from hwsim.kernels import AluOp, ReduceOp

from .helpers import (
    PSUM,
    assert_timing,
    assert_ulps,
    check_illegal,
    inp,
    out,
    rounded,
    run_single,
    tile_ap,
)

RNG = np.random.default_rng(5)


def affine(shape, offset, multiplier, steps) -> np.ndarray:
    """offset + p * multiplier + Σ i_k * steps[k] over ``shape``, exact (int64)."""
    grids = np.indices(shape, dtype=np.int64)
    expr = offset + grids[0] * multiplier
    for k, step in enumerate(steps):
        expr = expr + grids[k + 1] * step
    return expr


@pytest.mark.parametrize(
    ("shape", "dtype", "offset", "multiplier", "steps"),
    [
        ((4, 8), INT32, 5, 3, (1,)),
        ((8, 2, 3), FP32, -7, 100, (10, -1)),
        ((3, 2, 2, 2, 2), BF16, 0, 16, (8, 4, 2, 1)),
        ((2, 4), INT32, 2**31 - 3, 1, (1,)),  # int32 arithmetic wraps
    ],
)
def test_iota_numerics(shape, dtype, offset, multiplier, steps):
    run = run_single(
        lambda aps: Iota(
            engine="gpsimd",
            dst=aps["dst"],
            offset=offset,
            channel_multiplier=multiplier,
            steps=steps,
        ),
        {},
        {"dst": out(shape, dtype)},
    )
    wrapped = (affine(shape, offset, multiplier, steps) & 0xFFFFFFFF).astype(np.uint32)
    assert_ulps(run.outputs["dst"], wrapped.view(np.int32), dtype)


@pytest.mark.parametrize(
    ("shape", "dtype", "cmp_op", "on_false"),
    [
        ((8, 8), FP32, AluOp.is_ge, -np.inf),  # causal mask: keep k <= q
        ((16, 2, 8), BF16, AluOp.is_lt, -3.0e38),
        ((4, 6), FP32, AluOp.not_equal, 0.0),
    ],
)
def test_affine_select_numerics(shape, dtype, cmp_op, on_false):
    steps = (-1,) if len(shape) == 2 else (4, -1)
    x = RNG.uniform(-2, 2, shape)
    run = run_single(
        lambda aps: AffineSelect(
            engine="gpsimd",
            dst=aps["dst"],
            src=aps["x"],
            offset=1,
            channel_multiplier=1,
            steps=steps,
            cmp_op=cmp_op,
            on_false=on_false,
        ),
        {"x": inp(x, dtype)},
        {"dst": out(shape, dtype)},
    )
    compare = {AluOp.is_ge: np.greater_equal, AluOp.is_lt: np.less, AluOp.not_equal: np.not_equal}
    keep = compare[cmp_op](affine(shape, 1, 1, steps), 0)
    assert keep.any() and not keep.all()
    expected = np.where(keep, rounded(x, dtype), np.float32(on_false))
    assert_ulps(run.outputs["dst"], expected, dtype)


@pytest.mark.parametrize(
    ("config", "n", "issue", "done"),
    [
        ("tiny", 8, 2 * (10 + 8), 2 * (10 + 8) + 20),
        ("tiny", 1, 2 * 11, 2 * 11 + 20),  # no MIN_II floor on GpSimdE
        ("trn2", 512, 4 * (150 + 512), 4 * (150 + 512) + 400),
        ("trn2", 1, 4 * 151, 4 * 151 + 400),
    ],
)
@pytest.mark.parametrize("instruction", [Iota, AffineSelect])
def test_affine_pattern_cost(config, n, issue, done, instruction):
    def make(aps):
        common = dict(engine="gpsimd", dst=aps["dst"], channel_multiplier=1, steps=(-1,))
        if instruction is Iota:
            return Iota(**common)
        return AffineSelect(**common, src=aps["x"], cmp_op=AluOp.is_ge, on_false=0.0)

    inputs = {} if instruction is Iota else {"x": inp(np.ones((4, n)), FP32)}
    run = run_single(make, inputs, {"dst": out((4, n), FP32)}, config=config, numerics=False)
    assert_timing(run, issue, done)


@pytest.mark.parametrize("shape", [(8, 16), (32, 3, 4), (1, 5)])
@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (ReduceOp.add, FP32),
        (ReduceOp.max, BF16),
        (ReduceOp.min, FP32),
        (ReduceOp.bitwise_or, INT32),
        (ReduceOp.bitwise_and, UINT32),
        (ReduceOp.add, INT32),  # native 32-bit integer sum, exact beyond 2^24 and wrapping
    ],
)
def test_tensor_partition_reduce_numerics(shape, op, dtype):
    free = shape[1:]
    if dtype.is_float:
        x = RNG.uniform(0.5, 2.0, shape)  # positive: sums without cancellation
    else:
        info = np.iinfo(dtype.numpy)
        x = RNG.integers(info.min, info.max, shape, endpoint=True)
    run = run_single(
        lambda aps: TensorPartitionReduce(engine="gpsimd", dst=aps["dst"], src=aps["x"], op=op),
        {"x": inp(x, dtype)},
        {"dst": out((1, *free), dtype)},
    )
    values = rounded(x, dtype)
    if op is ReduceOp.add and not dtype.is_float:
        low = (values.sum(axis=0, keepdims=True) & 0xFFFFFFFF).astype(np.uint32)
        assert_ulps(run.outputs["dst"], low.view(np.int32), dtype)
        return
    reducer = {
        ReduceOp.add: np.sum,
        ReduceOp.max: np.max,
        ReduceOp.min: np.min,
        ReduceOp.bitwise_or: np.bitwise_or.reduce,
        ReduceOp.bitwise_and: np.bitwise_and.reduce,
    }[op]
    wide = values.astype(np.float64) if dtype.is_float else values
    expected = reducer(wide, axis=0, keepdims=True)
    assert_ulps(run.outputs["dst"], expected, dtype, max_ulps=16 if op is ReduceOp.add else 0)


@pytest.mark.parametrize(
    ("config", "p", "n", "issue", "done"),
    [
        ("tiny", 8, 16, 2 * (10 + 16 * 3), 2 * (10 + 16 * 3) + 20),  # log2(8) = 3 levels
        ("tiny", 5, 16, 2 * (10 + 16 * 3), 2 * (10 + 16 * 3) + 20),  # ceil(log2(5)) = 3
        ("tiny", 1, 16, 2 * (10 + 16), 2 * (10 + 16) + 20),  # one pass
        ("tiny", 32, 16, 2 * (10 + 16 * 5), 2 * (10 + 16 * 5) + 20),
        ("trn2", 128, 512, 4 * (150 + 512 * 7), 4 * (150 + 512 * 7) + 400),
    ],
)
def test_tensor_partition_reduce_cost(config, p, n, issue, done):
    run = run_single(
        lambda aps: TensorPartitionReduce(
            engine="gpsimd", dst=aps["dst"], src=aps["x"], op=ReduceOp.add
        ),
        {"x": inp(np.ones((p, n)), FP32)},
        {"dst": out((1, n), FP32)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (
            lambda: Iota(engine="gpsimd", dst=tile_ap(4, (2, 3), dtype=INT32), steps=(1,)),
            ("steps (1,) must give one step per free dim of dst (4, 2, 3) (2 of them)",),
        ),
        (
            lambda: Iota(engine="gpsimd", dst=tile_ap(4, 8, PSUM, INT32), steps=(1,)),
            ("operand 'dst': gpsimd engine cannot write psum",),
        ),
        (
            lambda: Iota(engine="vector", dst=tile_ap(4, 8, dtype=INT32), steps=(1,)),
            ("cannot run on engine 'vector'; it runs on gpsimd",),
        ),
        (
            lambda: AffineSelect(
                engine="gpsimd",
                dst=tile_ap(4, 8),
                src=tile_ap(4, 8),
                steps=(1,),
                cmp_op=AluOp.add,
                on_false=0.0,
            ),
            ("cmp_op=add is not a comparison; valid:", "is_ge"),
        ),
        (
            lambda: AffineSelect(
                engine="gpsimd",
                dst=tile_ap(4, 8),
                src=tile_ap(4, (2, 4)),
                steps=(1,),
                cmp_op=AluOp.is_ge,
                on_false=0.0,
            ),
            ("src shape (4, 2, 4) and dst shape (4, 8) differ",),
        ),
        (
            lambda: TensorPartitionReduce(
                engine="gpsimd", dst=tile_ap(1, 8), src=tile_ap(4, 8), op=ReduceOp.multiply
            ),
            ("op=multiply is not a partition reduction; valid:", "bitwise_or"),
        ),
        (
            lambda: TensorPartitionReduce(
                engine="gpsimd", dst=tile_ap(2, 8), src=tile_ap(4, 8), op=ReduceOp.add
            ),
            ("dst shape (2, 8) must be [1, 8]",),
        ),
        (
            lambda: TensorPartitionReduce(
                engine="gpsimd", dst=tile_ap(1, 8), src=tile_ap(4, 8), op=ReduceOp.bitwise_or
            ),
            ("op=bitwise_or needs integer operands, but 'src' is fp32",),
        ),
    ],
)
def test_gpsimd_illegal(make, fragments):
    check_illegal(make(), "tiny", *fragments)
