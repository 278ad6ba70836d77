"""On-chip gathers, shuffles and index instructions: local_gather, nc_n_gather,
nc_stream_shuffle, tensor_copy_dynamic_src/dst, topk, nonzero_with_count, sequence_bounds.

Hand-computed ticks on tiny: VectorE/ScalarE/GpSimdE 2 ticks/cycle; VectorE MIN_II 16, latency
10 cycles; GpSimdE GPSIMD_START 10, no floor, latency 10; MIN_II_DYNAMIC 40 cycles. trn2:
GpSimdE 4 ticks/cycle, GPSIMD_START 150, latency 100 cycles.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.dtypes import BF16, FP32, INT8, INT32, UINT16, UINT32
from hwsim.errors import MemoryAccessError
from hwsim.isa import contiguous
from hwsim.isa.dynamic_copy_ops import TensorCopyDynamicDst, TensorCopyDynamicSrc
from hwsim.isa.gather_ops import LocalGather, NcNGather, NcStreamShuffle
from hwsim.isa.index_ops import NonzeroWithCount, SequenceBounds, TopK

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
)
from .helpers import tile_ap as ap

RNG = np.random.default_rng(12)


# ---- local_gather ------------------------------------------------------------------------------


def local_gather_numpy(src, index, elements, valid):
    """nki.isa's NumPy semantics [S16] with hardware indices (element offsets)."""
    out = np.empty((src.shape[0], valid * elements), src.dtype)
    for core in range(src.shape[0] // 16):
        rows = slice(16 * core, 16 * core + 16)
        starts = index[rows].flatten(order="F")[:valid]
        cols = (starts[:, None] + np.arange(elements)).reshape(-1)
        out[rows] = src[rows][:, cols]
    return out


@pytest.mark.parametrize(("elements", "valid"), [(1, None), (4, 20), (2, 3)])
@pytest.mark.parametrize("dtype", [FP32, BF16, INT8])
def test_local_gather_numerics(elements, valid, dtype):
    src = RNG.integers(-100, 100, (32, 40))
    index = RNG.integers(0, 40 - elements + 1, (32, 3))
    n_valid = 16 * 3 if valid is None else valid
    run = run_single(
        lambda aps: LocalGather(
            engine="gpsimd",
            dst=aps["d"],
            src_buffer=aps["s"],
            index=aps["i"],
            num_elem_per_idx=elements,
            num_valid_indices=valid,
        ),
        {"s": inp(src, dtype), "i": inp(index, UINT16)},
        {"d": out((32, n_valid * elements), dtype)},
    )
    expected = local_gather_numpy(rounded(src, dtype), index, elements, n_valid)
    assert_ulps(run.outputs["d"], expected, dtype)


@pytest.mark.parametrize(
    ("elements", "valid", "dtype", "cycles"),
    [
        # 150 + ceil(valid * e * (28 + 4e) / (4e * min(4 / size, e)))
        (1, 64, FP32, 150 + 64 * 8),  # (28 + 4) / 4 / 1 = 8 cycles per element
        (32, 16, FP32, 150 + -(-16 * 32 * 156 // 128)),  # (28 + 128) / 128 / 1
        (32, 16, BF16, 150 + -(-16 * 32 * 156 // 256)),  # 2-byte elements: 2 per lane cycle
        (2, 10, INT8, 150 + -(-10 * 2 * 36 // 16)),  # 1-byte, e = 2: min(4, 2) = 2
    ],
)
def test_local_gather_cost(elements, valid, dtype, cycles):
    src = np.zeros((32, 128))
    index = np.zeros((32, 4))
    run = run_single(
        lambda aps: LocalGather(
            engine="gpsimd",
            dst=aps["d"],
            src_buffer=aps["s"],
            index=aps["i"],
            num_elem_per_idx=elements,
            num_valid_indices=valid,
        ),
        {"s": inp(src, dtype), "i": inp(index, UINT16)},
        {"d": out((32, valid * elements), dtype)},
        config="trn2",
        numerics=False,
    )
    assert_timing(run, 4 * cycles, 4 * cycles + 400)


def test_local_gather_out_of_row_index_is_an_error():
    index = np.zeros((16, 1))
    index[5, 0] = 39  # 39 + 2 elements leave a 40-element row
    with pytest.raises(MemoryAccessError, match=r"local_gather on gpsimd.*index 39"):
        run_single(
            lambda aps: LocalGather(
                engine="gpsimd",
                dst=aps["d"],
                src_buffer=aps["s"],
                index=aps["i"],
                num_elem_per_idx=2,
            ),
            {"s": inp(np.zeros((16, 40)), FP32), "i": inp(index, UINT16)},
            {"d": out((16, 32), FP32)},
        )


# ---- nc_n_gather ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, INT32, BF16])
def test_n_gather_numerics(dtype):
    data = RNG.integers(-1000, 1000, (8, 4, 6))
    index = RNG.integers(0, 24, (8, 2, 5))
    run = run_single(
        lambda aps: NcNGather(engine="gpsimd", dst=aps["d"], data=aps["x"], indices=aps["i"]),
        {"x": inp(data, dtype), "i": inp(index, UINT32)},
        {"d": out((8, 2, 5), dtype)},
    )
    flat = rounded(data, dtype).reshape(8, -1)
    expected = np.take_along_axis(flat, index.reshape(8, -1), axis=1).reshape(8, 2, 5)
    assert_ulps(run.outputs["d"], expected, dtype)


@pytest.mark.parametrize(("m", "instructions"), [(512, 1), (513, 2), (1500, 3)])
def test_n_gather_cost_counts_its_isa_instructions(m, instructions):
    run = run_single(
        lambda aps: NcNGather(engine="gpsimd", dst=aps["d"], data=aps["x"], indices=aps["i"]),
        {"x": inp(np.zeros((4, 8)), FP32), "i": inp(np.zeros((4, m)), UINT32)},
        {"d": out((4, m), FP32)},
        config="trn2",
        numerics=False,
    )
    cycles = instructions * 150 + m
    assert_timing(run, 4 * cycles, 4 * cycles + 400)


# ---- nc_stream_shuffle ---------------------------------------------------------------------


def test_stream_shuffle_per_quadrant_with_keep():
    src = RNG.uniform(-1, 1, (64, 5))
    old = RNG.uniform(-1, 1, (64, 5))
    mask = [int(m) for m in RNG.permutation(32)]
    mask[3] = mask[17] = 255
    run = run_single(
        lambda aps: NcStreamShuffle(engine="vector", dst=aps["d"], src=aps["s"], shuffle_mask=mask),
        {"s": inp(src, FP32), "d": inp(old, FP32)},
        {"d": out((64, 5), FP32)},
        config="trn2",
    )
    expected = old.astype(np.float32).copy()
    for q in range(2):
        for i, m in enumerate(mask):
            if m != 255:
                expected[32 * q + i] = src[32 * q + m]
    assert_ulps(run.outputs["d"], expected, FP32)


def test_stream_shuffle_in_place_and_cost():
    x = RNG.uniform(-1, 1, (32, 70))
    mask = list(range(31, -1, -1))
    run = run_single(
        lambda aps: NcStreamShuffle(engine="vector", dst=aps["x"], src=aps["x"], shuffle_mask=mask),
        {"x": inp(x, FP32)},
        {"x": out((32, 70), FP32)},
    )
    assert_ulps(run.outputs["x"], x[::-1], FP32)
    assert_timing(run, 2 * 70, 2 * 70 + 20)


# ---- tensor_copy_dynamic_src / dst ----------------------------------------------------------


@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_dynamic_src_copies_the_window_at_the_runtime_offset(engine):
    x = RNG.uniform(-1, 1, (8, 12, 3))
    run = run_single(
        lambda aps: TensorCopyDynamicSrc(
            engine=engine, dst=aps["d"], src=aps["x"], offset=aps["k"], free_axis=0
        ),
        {"x": inp(x, FP32), "k": inp(np.array([[7]]), INT32)},
        {"d": out((8, 4, 3), BF16)},
    )
    assert_ulps(run.outputs["d"], x[:, 7:11, :], BF16)


def test_dynamic_dst_writes_only_the_window():
    old = np.full((4, 10), -1.0)
    src = RNG.uniform(0, 1, (4, 3))
    run = run_single(
        lambda aps: TensorCopyDynamicDst(
            engine="vector", dst=aps["d"], src=aps["s"], offset=aps["k"], free_axis=0
        ),
        {"s": inp(src, FP32), "k": inp(np.array([[2]]), UINT32), "d": inp(old, FP32)},
        {"d": out((4, 10), FP32)},
    )
    expected = old.copy()
    expected[:, 2:5] = src
    assert_ulps(run.outputs["d"], expected, FP32)


def test_dynamic_offset_out_of_range_is_an_error():
    with pytest.raises(MemoryAccessError, match=r"offset 10 is outside \[0, 9\)"):
        run_single(
            lambda aps: TensorCopyDynamicSrc(
                engine="vector", dst=aps["d"], src=aps["x"], offset=aps["k"], free_axis=0
            ),
            {"x": inp(np.zeros((4, 12)), FP32), "k": inp(np.array([[10]]), INT32)},
            {"d": out((4, 4), FP32)},
        )


@pytest.mark.parametrize(
    ("engine", "n", "cycles"),
    [("vector", 8, 40), ("vector", 100, 100), ("gpsimd", 8, 10 + 40), ("scalar", 64, 64)],
)
def test_dynamic_copy_cost_floor_is_min_ii_dynamic(engine, n, cycles):
    latency = {"vector": 20, "scalar": 40, "gpsimd": 20}[engine]
    run = run_single(
        lambda aps: TensorCopyDynamicSrc(
            engine=engine, dst=aps["d"], src=aps["x"], offset=aps["k"], free_axis=0
        ),
        {"x": inp(np.zeros((4, 2 * n)), FP32), "k": inp(np.array([[1]]), INT32)},
        {"d": out((4, n), FP32)},
        numerics=False,
    )
    assert_timing(run, 2 * cycles, 2 * cycles + latency)


# ---- topk ----------------------------------------------------------------------------------


def snake_topk(src: np.ndarray, n: int, k: int):
    """Ascending top-k of each 16-partition snake, laid out as a snake."""
    groups = src.shape[0] // 16
    columns = -(-k // 16)
    vals = np.full((src.shape[0], columns), -np.inf, np.float32)
    idx = np.full((src.shape[0], columns), 0xFFFFFFFF, np.int64)
    for g in range(groups):
        snake = src[16 * g : 16 * g + 16].T.reshape(-1)[:n]
        order = np.argsort(-snake, kind="stable")[:k][::-1]
        for j, s in enumerate(order):
            vals[16 * g + j % 16, j // 16] = snake[s]
            idx[16 * g + j % 16, j // 16] = s
    return vals, idx


@pytest.mark.parametrize(("n", "k"), [(42, 8), (40, 20), (20, 1), (32, 32)])
def test_topk_numerics(n, k):
    x = RNG.permutation(32 * 3).reshape(32, 3).astype(np.float64) - 40  # distinct in bf16
    columns = -(-k // 16)
    sentinel = np.full((32, k), 7.0)
    run = run_single(
        lambda aps: TopK(engine="gpsimd", val_dst=aps["v"], idx_dst=aps["i"], src=aps["x"], n=n),
        {"x": inp(x, BF16), "v": inp(sentinel, BF16), "i": inp(sentinel, UINT32)},
        {"v": out((32, k), BF16), "i": out((32, k), UINT32)},
    )
    vals, idx = snake_topk(rounded(x, BF16), n, k)
    assert_ulps(run.outputs["v"][:, :columns], vals, BF16)
    np.testing.assert_array_equal(run.outputs["i"][:, :columns], idx)
    # the columns past ceil(k/16) are not written
    assert (run.outputs["v"][:, columns:].astype(np.float32) == 7.0).all()
    assert (run.outputs["i"][:, columns:] == 7).all()


@pytest.mark.parametrize(("n", "k"), [(100, 5), (8, 8)])
def test_topk_cost_is_4n_plus_k(n, k):
    run = run_single(
        lambda aps: TopK(engine="gpsimd", val_dst=aps["v"], idx_dst=aps["i"], src=aps["x"], n=n),
        {"x": inp(np.zeros((16, 7)), BF16)},
        {"v": out((16, k), BF16), "i": out((16, k), UINT32)},
        config="trn2",
        numerics=False,
        initcheck=False,  # the columns past ceil(k/16) stay unwritten
    )
    cycles = 4 * n + k  # [S15], no separate GPSIMD_START
    assert_timing(run, 4 * cycles, 4 * cycles + 400)


# ---- nonzero_with_count / sequence_bounds ---------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, INT32])
def test_nonzero_with_count_touches_only_each_cores_first_partition(dtype):
    x = RNG.integers(0, 2, (32, 9)) * RNG.integers(1, 5, (32, 9))
    old = np.full((32, 10), 99)
    run = run_single(
        lambda aps: NonzeroWithCount(
            engine="gpsimd", dst=aps["d"], src=aps["x"], index_offset=16, padding_val=-1
        ),
        {"x": inp(x, dtype), "d": inp(old, INT32)},
        {"d": out((32, 10), INT32)},
    )
    expected = old.copy()
    for p in (0, 16):
        found = np.flatnonzero(x[p]) + 16
        expected[p] = [*found, *([-1] * (9 - found.size)), found.size]
    np.testing.assert_array_equal(run.outputs["d"], expected)


def test_nonzero_with_count_example_from_the_docs():
    x = np.zeros((16, 8))
    x[0] = [0, 1, 1, 0, 0, 1, 0, 0]
    run = run_single(
        lambda aps: NonzeroWithCount(engine="gpsimd", dst=aps["d"], src=aps["x"], index_offset=16),
        {"x": inp(x, FP32), "d": inp(np.zeros((16, 9)), INT32)},
        {"d": out((16, 9), INT32)},
    )
    np.testing.assert_array_equal(run.outputs["d"][0], [17, 18, 21, -1, -1, -1, -1, -1, 3])


def test_sequence_bounds_example_from_the_docs():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]])
    run = run_single(
        lambda aps: SequenceBounds(engine="gpsimd", dst=aps["d"], segment_ids=aps["s"]),
        {"s": inp(ids, INT32)},
        {"d": out((1, 2, 9), FP32)},
    )
    expected = [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]]
    np.testing.assert_array_equal(run.outputs["d"], expected)


@pytest.mark.parametrize(
    ("opcode", "cycles"), [("nonzero_with_count", 10 + 33), ("sequence_bounds", 10 + 64)]
)
def test_index_cost_assumptions(opcode, cycles):
    if opcode == "nonzero_with_count":

        def make(aps):
            return NonzeroWithCount(engine="gpsimd", dst=aps["d"], src=aps["x"])

        inputs = {"x": inp(np.zeros((32, 32)), FP32), "d": inp(np.zeros((32, 33)), INT32)}
        outputs = {"d": out((32, 33), INT32)}
    else:

        def make(aps):
            return SequenceBounds(engine="gpsimd", dst=aps["d"], segment_ids=aps["x"])

        inputs = {"x": inp(np.zeros((1, 32)), INT32)}
        outputs = {"d": out((1, 2, 32), INT32)}
    run = run_single(make, inputs, outputs, numerics=False)
    assert_timing(run, 2 * cycles, 2 * cycles + 20)


# ---- legality -----------------------------------------------------------------------------------

V2 = load_config("trn1")


@pytest.mark.parametrize(
    ("make", "config", "fragments"),
    [
        (
            lambda: LocalGather(
                engine="gpsimd", dst=ap(24, 8), src_buffer=ap(24, 8), index=ap(24, 1, dtype=UINT16)
            ),
            "tiny",
            ("start and count must be multiples of 16",),
        ),
        (
            lambda: LocalGather(
                engine="gpsimd", dst=ap(16, 8), src_buffer=ap(16, 8), index=ap(16, 1, dtype=UINT32)
            ),
            "tiny",
            ("operand 'index' is uint32; it must be uint16",),
        ),
        (
            lambda: LocalGather(
                engine="gpsimd",
                dst=ap(16, 48),
                src_buffer=ap(16, 8),
                index=ap(16, 1, dtype=UINT16),
                num_elem_per_idx=3,
            ),
            "tiny",
            ("num_elem_per_idx=3; valid: (1, 2, 4, 8, 16, 32)",),
        ),
        (
            lambda: LocalGather(
                engine="gpsimd",
                dst=ap(16, 17),
                src_buffer=ap(16, 8),
                index=ap(16, 1, dtype=UINT16),
                num_valid_indices=17,
            ),
            "tiny",
            ("num_valid_indices=17: a core has 16 indices",),
        ),
        (
            lambda: NcNGather(
                engine="gpsimd",
                dst=ap(4, 8, dtype=BF16),
                data=ap(4, 8),
                indices=ap(4, 8, dtype=UINT32),
            ),
            "tiny",
            ("dst must have data's dtype",),
        ),
        (
            lambda: NcStreamShuffle(
                engine="vector", dst=ap(32, 4), src=ap(32, 4), shuffle_mask=(0,) * 31
            ),
            "tiny",
            ("shuffle_mask must be 32 entries",),
        ),
        (
            lambda: NcStreamShuffle(
                engine="vector",
                dst=ap(64, 4),
                src=ap(16, 4, offset_bytes=64),
                shuffle_mask=tuple(range(32)),
            ),
            "trn2",
            ("sends src partition 16 to dst partition 16, but src has 16 partitions",),
        ),
        (
            lambda: NcStreamShuffle(
                engine="vector",
                dst=ap(64, 4),
                src=contiguous(SBUF, FP32, 64, 4, start_partition=32, offset_bytes=64),
                shuffle_mask=tuple(range(32)),
            ),
            "trn2",
            ("starts at partition 32; with 64 active partitions it must start at 0 or 64",),
        ),
        (
            lambda: TensorCopyDynamicSrc(
                engine="vector",
                dst=ap(4, 5),
                src=ap(4, 4),
                offset=ap(1, 1, dtype=INT32),
                free_axis=0,
            ),
            "tiny",
            ("must match the range (4, 4) except along free_axis 0, where it may be shorter",),
        ),
        (
            lambda: TensorCopyDynamicDst(
                engine="gpsimd",
                dst=ap(4, 8),
                src=ap(4, 4),
                offset=ap(1, 1, PSUM, INT32),
                free_axis=0,
            ),
            "tiny",
            ("operand 'offset': gpsimd engine cannot read psum",),
        ),
        (
            lambda: TensorCopyDynamicSrc(
                engine="vector",
                dst=ap(4, 4),
                src=ap(4, 8),
                offset=ap(1, 2, dtype=INT32),
                free_axis=0,
            ),
            "tiny",
            ("operand 'offset' has shape (1, 2); it must be [1, 1]",),
        ),
        (
            lambda: TopK(
                engine="gpsimd",
                val_dst=ap(16, 4, dtype=BF16),
                idx_dst=ap(16, 4, dtype=UINT32),
                src=ap(16, 2, dtype=FP32),
                n=20,
            ),
            "tiny",
            ("operand 'src' is fp32; it must be bf16",),
        ),
        (
            lambda: TopK(
                engine="gpsimd",
                val_dst=ap(16, 4, dtype=BF16),
                idx_dst=ap(16, 4, dtype=UINT32),
                src=ap(16, 2, dtype=BF16),
                n=40,
            ),
            "tiny",
            ("src has 2 columns; n=40 needs ceil(n/16)",),
        ),
        (
            lambda: TopK(
                engine="gpsimd",
                val_dst=ap(16, 4, dtype=BF16),
                idx_dst=ap(16, 4, dtype=UINT32),
                src=ap(16, 2, dtype=BF16),
                n=7,
            ),
            "tiny",
            ("n=7; it must be in [8, 65536)",),
        ),
        (
            lambda: NonzeroWithCount(engine="gpsimd", dst=ap(16, 9, dtype=INT32), src=ap(16, 8)),
            V2,
            ("available on NeuronCore-v3/NeuronCore-v4 only",),
        ),
        (
            lambda: NonzeroWithCount(engine="gpsimd", dst=ap(16, 8, dtype=INT32), src=ap(16, 8)),
            "tiny",
            ("it must have src's 8 + 1 (the count)",),
        ),
        (
            lambda: SequenceBounds(
                engine="gpsimd", dst=ap(2, 16, dtype=INT32), segment_ids=ap(2, 8)
            ),
            "tiny",
            ("must have one partition",),
        ),
    ],
)
def test_illegal(make, config, fragments):
    check_illegal(make(), config, *fragments)
