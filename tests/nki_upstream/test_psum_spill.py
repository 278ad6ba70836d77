"""The attention tutorial's v3 holds its whole Q @ K^T score matrix in one PSUM tensor: at
seqlen 1024 that is 16 PSUM tiles of 2 KiB per partition, twice PSUM. It runs unmodified: the
memory planner moves the tiles PSUM cannot hold to SBUF and back by VectorE copies."""

from __future__ import annotations

import numpy as np

import hwsim.nki as nki
from hwsim.nki.upstream import kernel
from tests.nki_upstream.catalog import TUT, attention_tutorial_ref


def test_attention_v3_spills_psum_through_sbuf_with_correct_numbers():
    fn = kernel(TUT + "attention_fwd_performance/attention_kernels.py", "attn_fwd_v3")
    rng = np.random.default_rng(0)
    q, k, v = (((rng.random((128, 1024)) - 0.5) * 2).astype(np.float32) for _ in range(3))
    run = nki.run(fn, q, k, v, config="trn2")
    np.testing.assert_allclose(run.outputs[0], attention_tutorial_ref(q, k, v), atol=1e-4)
    spill = run.summary.sbuf_spill
    assert spill is not None and spill["psum_evictions"] == spill["psum_restores"] >= 8
    copies = [
        i
        for stream in run.program.cores[0].streams.values()
        for i in stream
        if ":psum-out:" in str(i.tag)
    ]
    assert len(copies) == spill["psum_evictions"]
    assert all(i.src.memory.value == "psum" and i.dst.memory.value == "sbuf" for i in copies)
