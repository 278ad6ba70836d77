"""Indexing tiles and views: bounds are checked, never clamped the numpy way, and every error
names the kernel line, the tile (or view), the index and the bound."""

from __future__ import annotations

import pytest

from hwsim import lang
from hwsim.lang import IndexingError


def index_error(index_fn, shape=(128, 64)) -> str:
    """The message of the IndexingError ``index_fn(x)`` raises, x an HBM input of ``shape``."""

    def body(x):
        index_fn(x)

    with pytest.raises(IndexingError) as error:
        lang.kernel(body).build(lang.TensorSpec(shape), config="tiny")
    return str(error.value)


def test_a_slice_past_the_end_raises_instead_of_shortening_the_tile():
    message = index_error(lambda x: x[0:256])
    assert message.endswith(
        "x: slice 0:256 of dimension 0 (size 128) is out of bounds; valid stops are 1..128"
    )
    assert message.startswith("test_indexing.py:")  # the kernel line that indexed
    assert "valid stops are 61..64" in index_error(lambda x: x[:, 60:70])


def test_a_start_past_the_end_raises():
    assert index_error(lambda x: x[200:]).endswith(
        "x: slice 200: of dimension 0 (size 128) is out of bounds; valid starts are 0..127"
    )
    assert "valid starts are 0..127" in index_error(lambda x: x[128:130])


def test_negative_slice_bounds_are_refused_but_negative_ints_count_from_the_end():
    for index in (slice(-4, None), slice(None, -1), slice(-8, -2)):
        message = index_error(lambda x, index=index: x[index])
        assert "has a negative bound; negative slice bounds are not supported" in message
    seen = {}

    def body(x):
        seen["last"] = x[-1].ap()
        seen["row"] = x[127].ap()

    lang.kernel(body).build(lang.TensorSpec((128, 64)), config="tiny")
    assert seen["last"] == seen["row"]
    assert "index -129 out of range for size 128 of dimension 0 (valid: -128..127)" in (
        index_error(lambda x: x[-129])
    )


def test_views_of_views_are_bounded_by_the_view():
    message = index_error(lambda x: x[64:128][0:100])
    assert message.endswith(
        "x (view [64, 64]): slice 0:100 of dimension 0 (size 64) is out of bounds; "
        "valid stops are 1..64"
    )
    assert "x (view [64, 8]): index 8 out of range for size 8 of dimension 1" in index_error(
        lambda x: x[64:, 8:16][0, 8]
    )


def test_empty_steps_floats_and_bools_are_errors():
    assert "slice 5:5 of dimension 0 (size 128) is empty" in index_error(lambda x: x[5:5])
    assert "slice steps must be positive, got 0" in index_error(lambda x: x[0:8:0])
    assert "slice steps must be positive, got -1" in index_error(lambda x: x[::-1])
    assert "bounds and steps must be ints" in index_error(lambda x: x[0:2.0])
    assert "index 1.5 of dimension 0 must be an int or a slice, not float" in index_error(
        lambda x: x[1.5]
    )
    assert "must be an int or a slice, not bool" in index_error(lambda x: x[True])
    assert "3 indices for a view of 2 dims" in index_error(lambda x: x[0, 0, 0])


def test_in_bounds_slices_keep_numpy_meaning():
    seen = {}

    def body(x):
        tile = lang.ndarray((32, 64), lang.float32)
        seen["strided"] = x[0:128:3].ap()  # stop need not be a multiple of the step
        seen["tail"] = tile[:, 60:].ap()
        seen["whole"] = x[0:128, 0:64].ap()

    lang.kernel(body).build(lang.TensorSpec((128, 64)), config="tiny")
    strided, tail, whole = seen["strided"], seen["tail"], seen["whole"]
    assert (strided.partitions, strided.partition_stride) == (43, 3 * 64)
    assert (tail.free_sizes, tail.offset_bytes) == ((4,), 60 * 4)
    assert (whole.partitions, whole.free_sizes) == (128, (64,))


def test_sbuf_tiles_are_checked_like_hbm_tensors():
    def body():
        tile = lang.ndarray((32, 64), lang.float32, name="t")
        tile[0:33]

    with pytest.raises(IndexingError) as error:
        lang.kernel(body).build(config="tiny")
    assert str(error.value).endswith(
        "t: slice 0:33 of dimension 0 (size 32) is out of bounds; valid stops are 1..32"
    )
