"""Elementwise instructions over views wider than an access pattern (``hwsim.lang.wide_views``):
cut into one instruction per slice of the outer dims, as the compiler does; the values those of
numpy and the program that of the same kernel written slice by slice. Other instructions keep
the error."""

from __future__ import annotations

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.language as nl
from hwsim.errors import IllegalInstructionError

RNG = np.random.default_rng(5)


@nki.jit
def windows(x):
    """out[p, a, b, c, y, z, w] = 2 x[p, a + y, b + z, c + w]: the source view has 6 iterators
    over 3 axes (strides [16, 4, 1, 16, 4, 1]), 6 free dims that do not merge."""
    out = nl.ndarray((128, 2, 2, 2, 3, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(x)
    p, a, b, c, y, z, w = nl.mgrid[0:128, 0:2, 0:2, 0:2, 0:3, 0:3, 0:3]
    nl.store(out, value=tile[p, a + y, b + z, c + w] * 2.0)
    return out


@nki.jit
def windows_by_hand(x):
    """``windows`` with its outer two dims looped in the kernel: 4 free dims a view."""
    out = nl.ndarray((128, 2, 2, 2, 3, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(x)
    result = nl.ndarray((128, 2, 2, 2, 3, 3, 3), dtype=nl.float32, buffer=nl.sbuf)
    p, c, y, z, w = nl.mgrid[0:128, 0:2, 0:3, 0:3, 0:3]
    for a in nl.static_range(2):
        for b in nl.static_range(2):
            result[p, a, b, c, y, z, w] = tile[p, a + y, b + z, c + w] * 2.0
    nl.store(out, value=result)
    return out


def _want(x: np.ndarray) -> np.ndarray:
    want = np.empty((128, 2, 2, 2, 3, 3, 3), np.float32)
    for a, b, c in np.ndindex(2, 2, 2):
        want[:, a, b, c] = x[:, a : a + 3, b : b + 3, c : c + 3] * 2.0
    return want


def test_a_view_of_six_free_dims_runs_as_one_instruction_per_outer_slice():
    x = RNG.standard_normal((128, 4, 4, 4)).astype(np.float32)
    run = nki.run(windows, x, race_check=True)
    assert np.array_equal(run.outputs[0], _want(x))
    # cut along a (2), then b (2): 4 slices of 4 free dims each
    scaled = [
        i for s in run.program.cores[0].streams.values() for i in s if i.OPCODE == "tensor_scalar"
    ]
    assert len(scaled) == 4
    assert all(len(i.src.free_sizes) == 4 for i in scaled)
    by_hand = nki.run(windows_by_hand, x)
    assert np.array_equal(by_hand.outputs[0], run.outputs[0])
    hand = [
        i
        for s in by_hand.program.cores[0].streams.values()
        for i in s
        if i.OPCODE == "tensor_scalar"
    ]

    def geometry(ops):  # sizes, strides and offsets from the first slice's (tiles sit apart)
        return [
            (i.src.free_sizes, i.src.free_strides, i.src.offset_bytes - ops[0].src.offset_bytes)
            for i in ops
        ]

    assert geometry(scaled) == geometry(hand)


@nki.jit
def window_sums(x):
    """A reduction over a 6-free-dim view: cutting it would change what it sums."""
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.load(x)
    p, a, b, c, y, z, w = nl.mgrid[0:128, 0:2, 0:2, 0:2, 0:3, 0:3, 0:3]
    nl.store(
        out,
        value=nl.sum(tile[p, a + y, b + z, c + w], axis=[1, 2, 3, 4, 5, 6], keepdims=False).reshape(
            (128, 1)
        ),
    )
    return out


def test_an_instruction_that_is_not_elementwise_keeps_the_error():
    x = RNG.standard_normal((128, 4, 4, 4)).astype(np.float32)
    with pytest.raises(IllegalInstructionError, match="needs 6 free dims"):
        nki.run(window_sums, x)


@nki.jit
def windows_plus_row(x, r):
    """x[p, a + y, b + z, c + w] + r[p, 0, 0, c, y, z, w] in one tensor_tensor: the second
    operand is broadcast along a and b (stride 0), the dims the instruction is cut along."""
    out = nl.ndarray((128, 2, 2, 2, 3, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
    tile, row = nl.load(x), nl.load(r)
    p, a, b, c, y, z, w = nl.mgrid[0:128, 0:2, 0:2, 0:2, 0:3, 0:3, 0:3]
    nl.store(out, value=nl.add(tile[p, a + y, b + z, c + w], row))
    return out


def test_an_operand_broadcast_along_the_cut_dims_reads_the_same_bytes_in_every_slice():
    x = RNG.standard_normal((128, 4, 4, 4)).astype(np.float32)
    r = RNG.standard_normal((128, 1, 1, 2, 3, 3, 3)).astype(np.float32)
    run = nki.run(windows_plus_row, x, r, race_check=True)
    assert np.array_equal(run.outputs[0], _want(x) / 2.0 + r)
    added = [
        i for s in run.program.cores[0].streams.values() for i in s if i.OPCODE == "tensor_tensor"
    ]
    assert len(added) == 4 and len({i.src1.offset_bytes for i in added}) == 1  # r read whole
