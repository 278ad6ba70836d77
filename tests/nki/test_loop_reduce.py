"""nl.loop_reduce across loop iterations: assigned into a tile (the destination is the rhs of the
op, as NKI documents), and rebound to a name, both inside outer loops whose iterations must each
start a reduction of their own (the silent case: the second outer block came out doubled)."""

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.language as nl
from hwsim.errors import HwsimError

RNG = np.random.default_rng(5)


@nki.jit
def blocked_sum_into_tile(x):
    """out[b] = sum over k of x[b, k] (x: [blocks, ks, 128, 64]), reduced with loop_reduce into
    a zeroed SBUF tile per block, as nki-samples' contributed matmul does."""
    blocks, ks = x.shape[0], x.shape[1]
    out = nl.ndarray((blocks, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for b in nl.affine_range(blocks):
        total = nl.zeros((2, nl.par_dim(128), 32), dtype=nl.float32, buffer=nl.sbuf)
        for k in nl.affine_range(ks):
            for h in nl.affine_range(2):
                tile = nl.load(x[b, k, :, h * 32 : (h + 1) * 32])
                total[h, :, :] = nl.loop_reduce(tile, op=np.add, loop_indices=[k])
        for h in nl.affine_range(2):
            nl.store(out[b, :, h * 32 : (h + 1) * 32], value=total[h])
    return out


def test_loop_reduce_into_a_tile_restarts_in_every_outer_iteration():
    x = RNG.standard_normal((3, 4, 128, 64)).astype(np.float32)
    (out,) = nki.run(blocked_sum_into_tile, x, race_check=True).outputs
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5, atol=1e-5)


@nki.jit
def blocked_max_rebound(x):
    """out[b] = max over k of x[b, k]; the loop_reduce result is rebound to a name."""
    blocks, ks = x.shape[0], x.shape[1]
    out = nl.ndarray((blocks, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for b in nl.affine_range(blocks):
        for k in nl.affine_range(ks):
            peak = nl.loop_reduce(nl.load(x[b, k]), op=np.maximum, loop_indices=[k])
        nl.store(out[b], value=peak)
    return out


def test_rebound_loop_reduce_keeps_one_accumulator_per_outer_iteration():
    x = RNG.standard_normal((3, 4, 128, 64)).astype(np.float32)
    x[1] -= 10.0  # a block whose maxima are below the first block's: a shared accumulator shows
    (out,) = nki.run(blocked_max_rebound, x, race_check=True).outputs
    assert np.array_equal(out, x.max(axis=1))


@nki.jit
def reduce_over_outer_loop(x):
    """out[j] = sum over i of x[i, j]: the reduced loop is the *outer* one."""
    ni, nj = x.shape[0], x.shape[1]
    out = nl.ndarray((nj, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = nl.zeros((nj, nl.par_dim(128), 64), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(ni):
        for j in nl.affine_range(nj):
            sums[j, :, :] = nl.loop_reduce(nl.load(x[i, j]), op=np.add, loop_indices=[i])
    for j in nl.affine_range(nj):
        nl.store(out[j], value=sums[j])
    return out


def test_loop_reduce_over_an_outer_loop():
    x = RNG.standard_normal((3, 2, 128, 64)).astype(np.float32)
    (out,) = nki.run(reduce_over_outer_loop, x, race_check=True).outputs
    np.testing.assert_allclose(out, x.sum(axis=0), rtol=1e-5, atol=1e-5)


@nki.jit
def ambiguous_index(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    for _i in nl.affine_range(2):
        for _j in nl.affine_range(2):
            acc = nl.loop_reduce(nl.load(x), op=np.add, loop_indices=[0])
    nl.store(out, value=acc)
    return out


def test_a_number_that_names_no_single_loop_is_an_error():
    x = np.ones((128, 64), np.float32)
    with pytest.raises(HwsimError, match="does not name one enclosing loop"):
        nki.run(ambiguous_index, x)
