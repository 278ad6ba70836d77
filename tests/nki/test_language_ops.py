"""nki.language operators beyond the kernels: shared_constant, iota, loop_reduce, mean,
broadcast_to of a column, matmul without transpose_x (the compiler's inserted transpose)."""

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.isa as nisa
import hwsim.nki.language as nl
from hwsim.lang.tiles import IndexingError

RNG = np.random.default_rng(11)


@nki.jit
def assorted(x, y):
    """outputs: x @ y (x [128, 128] untransposed), running max over 4 column blocks, row means
    plus a shared constant, and iota of the partition index broadcast along the row."""
    prod = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    peak = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    means = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ramp = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.load(x)
    nl.store(prod, value=nl.copy(nl.matmul(xt, nl.load(y))))
    for j in nl.affine_range(4):
        block = nl.load(y[:, j * 64 : (j + 1) * 64])
        acc = nl.loop_reduce(block, op=np.maximum, loop_indices=[j])
    nl.store(peak, value=acc)
    offset = nl.load(nl.shared_constant(np.full((128, 1), 3.0, np.float32)))
    nl.store(means, value=nl.mean(xt, axis=1, keepdims=True) + offset)
    rows = nl.iota(nl.arange(128)[:, None], dtype=nl.float32)
    nl.store(ramp, value=nl.broadcast_to(rows, (128, 64)))
    return prod, peak, means, ramp


def test_assorted_operators_against_numpy():
    x = RNG.standard_normal((128, 128)).astype(np.float32)
    y = RNG.standard_normal((128, 256)).astype(np.float32)
    prod, peak, means, ramp = nki.run(assorted, x, y, race_check=True).outputs
    assert np.max(np.abs(prod - x @ y)) < 1e-3
    assert np.array_equal(peak, np.max(y.reshape(128, 4, 64), axis=1))
    assert np.max(np.abs(means[:, 0] - (x.mean(axis=1) + 3.0))) < 1e-5
    assert np.array_equal(ramp, np.repeat(np.arange(128, dtype=np.float32)[:, None], 64, 1))


@nki.jit
def copy_halves(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    t[0:64, :] = t[64:128, :]  # same tile, same shape, other rows: a real copy
    acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    acc[...] += t  # in place: no extra copy
    nl.store(out, value=acc)
    return out


def test_assignment_between_parts_of_one_tile_copies():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    result = nki.run(copy_halves, x, race_check=True)
    expected = np.concatenate([x[64:], x[64:]])
    assert np.array_equal(result.outputs[0], expected)


@nki.jit
def embedding(table, ids):
    out = nl.ndarray((128, table.shape[1]), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.load(ids)
    nl.store(out, value=nl.load(table[idx, :]))
    return out


def test_indirect_load_gathers_rows():
    table = RNG.standard_normal((1000, 64)).astype(np.float32)
    ids = RNG.integers(0, 1000, (128, 1)).astype(np.int32)
    result = nki.run(embedding, table, ids, race_check=True)
    assert np.array_equal(result.outputs[0], table[ids[:, 0]])
    assert "dma_gather" in [i.OPCODE for i in result.program.cores[0].streams["gpsimd"]]


@nki.jit
def copies(x):
    """t[...] = nl.copy(x) (one copy into t), and a bound copy taken before its source is
    overwritten (it must hold the old values)."""
    into = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    before = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    xt = nl.load(x)
    packed = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    packed[...] = nl.copy(xt)
    nl.store(into, value=packed)
    kept = nl.copy(xt)
    xt[...] = 0.0
    nl.store(before, value=kept)
    return into, before


def test_copy_assigned_is_one_copy_and_a_bound_copy_keeps_program_order():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    result = nki.run(copies, x, race_check=True)
    into, before = result.outputs
    assert np.array_equal(into, x) and np.array_equal(before, x)
    vector = result.program.cores[0].streams["vector"]
    assert [type(i).__name__ for i in vector] == ["TensorCopy", "TensorCopy", "Memset"]


@nki.jit
def first_max_in_window(x):
    """For each [3, 3] window of x [64, 8, 3, 3]: 1 at the first (row-major) position holding
    the window's max, else 0 — select_and_scatter's steps: iota of a sum of grid indices
    ([1, 1, 3, 3]), nl.where with a number, and operands broadcast across the partitions and
    the free dimensions at once."""
    out = nl.ndarray((64, 8, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:64, 0:8, 0:3, 0:3]
    tile = nl.load(x)
    peak = nl.max(tile, axis=[2, 3], keepdims=True)
    hits = nl.equal(peak, tile, dtype=nl.int8)
    linear = nl.iota(3 * g.y + g.z, dtype=nl.uint32)
    candidates = nl.where(hits, linear, 9, dtype=nl.uint32)
    first = nl.min(candidates, axis=[2, 3], dtype=nl.uint32, keepdims=True)
    nl.store(out, value=nl.equal(first, linear, dtype=nl.float32))
    return out


def test_iota_of_an_index_sum_where_and_broadcast_across_partitions_and_free_dims():
    x = RNG.integers(0, 3, (64, 8, 3, 3)).astype(np.float32)  # ties: the first one counts
    got = nki.run(first_max_in_window, x, race_check=True).outputs[0]
    flat = x.reshape(64, 8, 9)
    want = np.zeros_like(flat)
    np.put_along_axis(want, flat.argmax(axis=2)[..., None], 1.0, axis=2)
    assert np.array_equal(got, want.reshape(x.shape))


@nki.jit
def iota_sum_on_partitions():
    out = nl.ndarray((16, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:16, 0:4]
    nl.store(out, value=nl.iota(4 * g.p + g.x + 7, dtype=nl.int32))
    return out


def test_iota_of_a_sum_over_the_partitions_is_the_channel_multiplier():
    got = nki.run(iota_sum_on_partitions).outputs[0]
    assert np.array_equal(got, np.arange(64, dtype=np.int32).reshape(16, 4) + 7)


@nki.jit
def ragged_copy(x):
    """x [200, 64] in row tiles of 128: the last tile's plain slice runs past the end, and the
    mask (over an iterator the slice does not name) keeps the rows that exist (vision.py's
    adaptive_avg_pool2d loads so)."""
    out = nl.ndarray((200, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for t in nl.affine_range(2):
        rows = nl.arange(128)[:, None] + t * 128
        tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128 : (t + 1) * 128, :], mask=rows < 200)
        nl.store(out[t * 128 : (t + 1) * 128, :], value=tile, mask=rows < 200)
    return out


@nki.jit
def ragged_copy_unmasked(x):
    out = nl.ndarray((200, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[128:256, :])
    nl.store(out[0:128, :], value=tile)
    return out


def test_a_plain_slice_past_the_end_is_narrowed_by_the_mask_or_is_an_error():
    x = RNG.standard_normal((200, 64)).astype(np.float32)
    assert np.array_equal(nki.run(ragged_copy, x).outputs[0], x)
    with pytest.raises(IndexingError, match="out of bounds"):
        nki.run(ragged_copy_unmasked, x)


@nki.jit
def scaled_by_one_element(x, table):
    """x [128, 64] times table[1, 2] (flash_attn_bwd's ``nl.load(sinks[b, h])``), and the
    element of a 1-D tensor added."""
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    scale = nl.load(table[1, 2])
    shift = nl.load(table[0][3])
    scaled = nl.multiply(nl.load(x), nl.broadcast_to(scale, (128, 1)))
    nl.store(out, value=nl.add(scaled, nl.broadcast_to(shift, (128, 1))))
    return out


def test_loading_one_element_gives_a_one_by_one_tile():
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    table = RNG.standard_normal((2, 4)).astype(np.float32)
    got = nki.run(scaled_by_one_element, x, table).outputs[0]
    assert np.allclose(got, x * table[1, 2] + table[0, 3], atol=1e-6)


def test_a_launch_grid_of_zero_instances_is_an_error_not_an_empty_run():
    from hwsim.errors import HwsimError

    with pytest.raises(HwsimError, match="must be >= 1"):
        scaled_by_one_element[0]
