"""Kernels of the neuronxcc era, as the calibration's published tutorial file has them: the output
is an argument the kernel writes (it returns nothing), and block tensors allocated in a loop are
multi-buffered across that loop's iterations."""

from __future__ import annotations

import numpy as np
import pytest

import hwsim.nki as nki
import hwsim.nki.language as nl
from hwsim.errors import HwsimError


def add_into(a, b, result):
    """``result[...] = a + b`` written into the argument, as the SDK 2.20 tutorials do."""
    i_p, i_f = nl.mgrid[0:128, 0:512]
    nl.store(result[i_p, i_f], value=nl.load(a[i_p, i_f]) + nl.load(b[i_p, i_f]))


def test_a_kernel_that_returns_nothing_gives_the_arguments_it_wrote():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((128, 512)).astype(np.float32) for _ in range(2))
    result = np.zeros((128, 512), np.float32)
    run = nki.run(add_into, a, b, result, config="trn2")
    (out,) = run.outputs
    np.testing.assert_array_equal(out, a + b)
    assert run.program.hbm["result"].kind == "output" and run.program.hbm["a"].kind == "input"


def test_a_kernel_that_returns_nothing_and_writes_nothing_is_an_error():
    def reads_only(a):
        nl.load(a[0:128, 0:512])

    with pytest.raises(HwsimError, match="returned nothing and wrote none of its arguments"):
        nki.run(reads_only, np.zeros((128, 512), np.float32), config="trn2")


def stream_through_blocks(x, result):
    """Per step, a block tensor of 2 tiles filled in an inner loop (as the tutorial's rhs_tiles)."""
    for step in nl.sequential_range(4):
        tiles = nl.ndarray((2, nl.par_dim(128), 512), dtype=x.dtype, buffer=nl.sbuf)
        for j in nl.affine_range(2):
            cols = slice((step * 2 + j) * 512, (step * 2 + j + 1) * 512)
            tiles[j, 0:128, 0:512] = nl.load(x[0:128, cols])
        for j in nl.affine_range(2):
            cols = slice((step * 2 + j) * 512, (step * 2 + j + 1) * 512)
            nl.store(result[0:128, cols], value=tiles[j])


def test_block_tensors_made_in_a_loop_rotate_over_buffers_across_its_iterations():
    x = np.arange(128 * 4096, dtype=np.float32).reshape(128, 4096)
    run = nki.run(stream_through_blocks, x, np.zeros_like(x), config="trn2")
    np.testing.assert_array_equal(run.outputs[0], x)
    loads = [
        i
        for s in run.program.cores[0].streams.values()
        for i in s
        if i.OPCODE == "dma_copy" and i.dst.memory.value == "sbuf"
    ]
    places = [(i.dst.start_partition, i.dst.offset_bytes) for i in loads]
    # each block of each step has a buffer of its own for the ring's depth (4 steps x 2 blocks):
    # the loads of step 1 do not wait for step 0's stores (they would if blocks of a step could
    # only reuse the previous step's buffers)
    assert len(set(places)) == 8
    assert all(not i.waits for i in loads)
