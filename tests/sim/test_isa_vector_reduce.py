"""VectorE reductions (tensor_reduce, bn_stats, bn_aggr): numerics vs numpy, exact ticks, legality.

Hand-computed ticks: tiny VectorE 2 ticks/cycle, MIN_II 16, latency 10 cycles, no performance
mode; trn2 VectorE 5 ticks/cycle (base 4800 MHz, 960 MHz), MIN_II 64, latency 100 cycles.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16, FP32, INT32, UINT16
from hwsim.isa.reduce_ops import BnAggr, BnStats, TensorReduce
from hwsim.kernels import ReduceOp

from .helpers import (
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

RNG = np.random.default_rng(11)

NUMPY_REDUCE = {
    ReduceOp.add: np.sum,
    ReduceOp.max: np.max,
    ReduceOp.min: np.min,
    ReduceOp.multiply: np.prod,
    ReduceOp.bitwise_or: np.bitwise_or.reduce,
    ReduceOp.bitwise_and: np.bitwise_and.reduce,
}


@pytest.mark.parametrize(("shape", "axes"), [((4, 16), 1), ((8, 3, 2, 5), 1), ((8, 3, 2, 5), 2)])
@pytest.mark.parametrize(
    ("op", "dtype", "dst_dtype", "negate"),
    [
        (ReduceOp.add, FP32, FP32, False),
        (ReduceOp.add, BF16, BF16, True),
        (ReduceOp.max, BF16, FP32, False),
        (ReduceOp.min, FP32, FP32, True),
        (ReduceOp.multiply, FP32, FP32, False),
        (ReduceOp.bitwise_or, INT32, INT32, False),
        (ReduceOp.bitwise_and, UINT16, UINT16, False),
    ],
)
def test_tensor_reduce_numerics(shape, axes, op, dtype, dst_dtype, negate):
    p, free = shape[0], shape[1:]
    kept = free[: len(free) - axes] or (1,)
    if dtype.is_float:  # positive for add (no cancellation, so a relative ulp bound holds)
        x = RNG.uniform(0.5, 1.5, shape)
        x = x if op is ReduceOp.add else x * RNG.choice([-1, 1], shape)
    else:
        info = np.iinfo(dtype.numpy)
        x = RNG.integers(info.min, info.max, shape, endpoint=True)
    run = run_single(
        lambda aps: TensorReduce(
            engine="vector", dst=aps["dst"], src=aps["x"], op=op, axes=axes, negate=negate
        ),
        {"x": inp(x, dtype)},
        {"dst": out((p, *kept), dst_dtype)},
    )
    values = rounded(x, dtype)
    wide = values.astype(np.float64) if dtype.is_float else values
    reduce_axes = tuple(range(len(shape) - axes, len(shape)))
    expected = NUMPY_REDUCE[op](wide, axis=reduce_axes).reshape(p, *kept)
    expected = -expected if negate else expected
    if op in (ReduceOp.max, ReduceOp.min) or not dtype.is_float:
        assert_ulps(run.outputs["dst"], expected, dst_dtype)  # exact
    else:  # the fp32 accumulator runs in order: a few fp32 roundings from the exact value
        assert_ulps(run.outputs["dst"], expected, dst_dtype, max_ulps=8 if dst_dtype is FP32 else 1)


@pytest.mark.parametrize(
    ("config", "dtype", "dst_dtype", "op", "n", "issue", "done"),
    [
        ("tiny", FP32, FP32, ReduceOp.add, 40, 2 * 40, 2 * 40 + 20),
        ("tiny", BF16, BF16, ReduceOp.add, 64, 2 * 32, 2 * 32 + 20),  # bf16 in/out, add: N/2
        ("tiny", BF16, BF16, ReduceOp.max, 64, 2 * 32, 2 * 32 + 20),  # bf16 in/out, max: N/2
        ("tiny", BF16, BF16, ReduceOp.min, 64, 2 * 64, 2 * 64 + 20),  # min: N
        ("tiny", BF16, FP32, ReduceOp.add, 64, 2 * 64, 2 * 64 + 20),  # fp32 out: N
        ("tiny", BF16, BF16, ReduceOp.add, 20, 2 * 16, 2 * 16 + 20),  # N/2 = 10 < MIN_II
        # trn2: + the fixed VectorE cycles per instruction (configs/trn2.yaml, calibrated)
        (
            "trn2",
            BF16,
            BF16,
            ReduceOp.add,
            512,
            5 * (256 + V3_VECTOR_FIXED),
            5 * (256 + V3_VECTOR_FIXED) + 500,
        ),
        (
            "trn2",
            FP32,
            FP32,
            ReduceOp.multiply,
            512,
            5 * (512 + V3_VECTOR_FIXED),
            5 * (512 + V3_VECTOR_FIXED) + 500,
        ),
    ],
)
def test_tensor_reduce_cost(config, dtype, dst_dtype, op, n, issue, done):
    run = run_single(
        lambda aps: TensorReduce(engine="vector", dst=aps["dst"], src=aps["x"], op=op),
        {"x": inp(np.ones((4, n)), dtype)},
        {"dst": out((4, 1), dst_dtype)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


def _bn_stats_reference(x: np.ndarray) -> np.ndarray:
    columns = []
    for part in (x[:, 0::2], x[:, 1::2]):
        part = part.astype(np.float64)
        mean = part.mean(axis=1)
        m2 = ((part - mean[:, None]) ** 2).sum(axis=1)
        columns += [np.full(x.shape[0], part.shape[1]), mean, m2]
    return np.stack(columns, axis=1)


@pytest.mark.parametrize(("shape", "dtype"), [((4, 10), FP32), ((32, 7), BF16), ((2, 512), FP32)])
def test_bn_stats_numerics(shape, dtype):
    x = RNG.normal(3.0, 2.0, shape)
    run = run_single(
        lambda aps: BnStats(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(x, dtype)},
        {"dst": out((shape[0], 6), FP32)},
    )
    expected = _bn_stats_reference(rounded(x, dtype))
    np.testing.assert_allclose(run.outputs["dst"], expected, rtol=2e-7, atol=1e-6)


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_bn_aggr_numerics_combines_bn_stats_chunks(chunks):
    p, n = 8, 12
    x = RNG.normal(-1.0, 0.5, (p, chunks * n)).astype(np.float32)
    stats = np.concatenate(
        [_bn_stats_reference(x[:, c * n : (c + 1) * n]) for c in range(chunks)], axis=1
    )
    run = run_single(
        lambda aps: BnAggr(engine="vector", dst=aps["dst"], src=aps["stats"]),
        {"stats": inp(stats, FP32)},
        {"dst": out((p, 2), FP32)},
    )
    wide = x.astype(np.float64)
    expected = np.stack([wide.mean(axis=1), wide.var(axis=1)], axis=1)
    np.testing.assert_allclose(run.outputs["dst"], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("config", "instruction", "n", "issue", "done"),
    [
        ("tiny", BnStats, 40, 2 * 40, 2 * 40 + 20),
        ("tiny", BnStats, 512, 2 * 512, 2 * 512 + 20),
        ("tiny", BnStats, 9, 2 * 16, 2 * 16 + 20),
        (
            "trn2",
            BnStats,
            512,
            5 * (512 + V3_VECTOR_FIXED),
            5 * (512 + V3_VECTOR_FIXED) + 500,
        ),  # + trn2's fixed cycles
        ("tiny", BnAggr, 6, 2 * 26, 2 * 26 + 20),  # 13 * 6 / 3
        ("tiny", BnAggr, 12, 2 * 52, 2 * 52 + 20),
        ("tiny", BnAggr, 3, 2 * 16, 2 * 16 + 20),  # 13 < MIN_II
        ("trn2", BnAggr, 6, 5 * (64 + V3_VECTOR_FIXED), 5 * (64 + V3_VECTOR_FIXED) + 500),
        ("trn2", BnAggr, 48, 5 * (208 + V3_VECTOR_FIXED), 5 * (208 + V3_VECTOR_FIXED) + 500),
    ],
)
def test_bn_cost(config, instruction, n, issue, done):
    width = 6 if instruction is BnStats else 2
    run = run_single(
        lambda aps: instruction(engine="vector", dst=aps["dst"], src=aps["x"]),
        {"x": inp(np.ones((4, n)), FP32)},
        {"dst": out((4, width), FP32)},
        config=config,
        numerics=False,
    )
    assert_timing(run, issue, done)


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        (
            lambda: TensorReduce(
                engine="vector", dst=tile_ap(4, 1), src=tile_ap(4, (3, 5)), op=ReduceOp.add, axes=3
            ),
            ("axes=3 is not a number of innermost free dims of src (4, 3, 5) (1..2)",),
        ),
        (
            lambda: TensorReduce(
                engine="vector", dst=tile_ap(4, 5), src=tile_ap(4, (3, 5)), op=ReduceOp.max
            ),
            ("dst shape (4, 5) does not hold the result", "gives [4, 3]"),
        ),
        (
            lambda: TensorReduce(
                engine="vector", dst=tile_ap(4, 1), src=tile_ap(4, 8), op=ReduceOp.bitwise_or
            ),
            ("op=bitwise_or needs integer operands, but 'src' is fp32",),
        ),
        (
            lambda: TensorReduce(
                engine="vector",
                dst=tile_ap(4, 1, dtype=INT32),
                src=tile_ap(4, 8, dtype=INT32),
                op=ReduceOp.bitwise_and,
                negate=True,
            ),
            ("negate applies to arithmetic reductions only",),
        ),
        (
            lambda: BnStats(engine="vector", dst=tile_ap(4, 6), src=tile_ap(4, 513)),
            ("src has 513 elements per partition", "at most 512 (bn_stats_fmax"),
        ),
        (
            lambda: BnStats(engine="vector", dst=tile_ap(4, 5), src=tile_ap(4, 10)),
            ("dst shape (4, 5) must be [4, 6]",),
        ),
        (
            lambda: BnStats(engine="vector", dst=tile_ap(4, 6, dtype=INT32), src=tile_ap(4, 10)),
            ("dst dtype int32 cannot hold statistics",),
        ),
        (
            lambda: BnAggr(engine="vector", dst=tile_ap(4, 2), src=tile_ap(4, 7)),
            ("src has 7 elements per partition", "a multiple of 3"),
        ),
        (
            lambda: BnAggr(engine="vector", dst=tile_ap(4, 3), src=tile_ap(4, 6)),
            ("dst shape (4, 3) must be [4, 2]",),
        ),
    ],
)
def test_vector_reduce_illegal(make, fragments):
    check_illegal(make(), "tiny", *fragments)
