"""Tiles cache the views indexing makes (``Tile._views``): a cached view must be the view the
uncached path makes, a cache entry must never stand in for an index the uncached path treats
differently (a float or bool equals an int as a dict key), and the access pattern a cached view
remembers must follow the tile when it moves."""

from __future__ import annotations

import numpy as np
import pytest

from hwsim.dtypes import BF16
from hwsim.lang import IndexingError
from hwsim.lang.tiles import Tile, _index, sbuf


def _tile() -> Tile:
    return Tile("t", (128, 4, 512), BF16, sbuf)


INDICES = [
    (slice(None, 64), 2, slice(0, 128)),
    (slice(0, 64), slice(1, 3), slice(None, None, 2)),
    (-1,),
    3,
    (slice(None), -2, slice(490, 504)),
    (),
]


@pytest.mark.parametrize("index", INDICES)
def test_cached_views_equal_uncached_ones_of_tiles_and_views(index) -> None:
    tile = _tile()
    first, again = tile[index], tile[index]
    fresh = _index(tile, tile._full_dims, tile._full_kept, index, None)
    assert (first.dims, first.kept) == (again.dims, again.kept) == (fresh.dims, fresh.kept)
    assert first.ap() is again.ap()  # one pattern object per geometry, as before the cache
    window = tile[:, :, 8:512]
    sub, sub_again = window[index], window[index]
    sub_fresh = _index(tile, window.dims, window.kept, index, window)
    assert (sub.dims, sub.kept) == (sub_again.dims, sub_again.kept)
    assert (sub.dims, sub.kept) == (sub_fresh.dims, sub_fresh.kept)


def test_an_int_cached_does_not_let_a_float_or_bool_through() -> None:
    tile = _tile()
    tile[1]
    tile[:, 1]
    with pytest.raises(IndexingError, match="must be an int or a slice, not float"):
        tile[1.0]
    with pytest.raises(IndexingError, match="must be an int or a slice, not bool"):
        tile[True]
    with pytest.raises(IndexingError, match="bounds and steps must be ints"):
        tile[0:1.0]
    view = tile[np.int64(1)]  # numpy ints index as ints (uncached)
    assert (view.dims, view.kept) == (tile[1].dims, tile[1].kept)


def test_a_cached_view_pattern_follows_its_tile_when_it_moves() -> None:
    tile = _tile()
    before = tile[:, 0, 0:128].ap()
    tile.offset_bytes += 4096  # as the memory planner moves a tile
    after = tile[:, 0, 0:128].ap()
    assert after.offset_bytes == before.offset_bytes + 4096
    tile.offset_bytes -= 4096
    assert tile[:, 0, 0:128].ap() is before
