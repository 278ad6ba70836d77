"""PreparedLayout.arrange against its documented layout, element by element."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.values import PreparedLayout


def _by_definition(layout: PreparedLayout, matrix: torch.Tensor) -> torch.Tensor:
    """Row k, column n0 + c of block n0 at ``(k % rows) * tiles * width + (k // rows) * width
    + c`` within the block; rows past K are zeros."""
    out = torch.zeros(layout.elements, dtype=matrix.dtype)
    for n0, width in layout.blocks():
        base = layout.block_offset(n0)
        for k in range(layout.k):
            at = base + (k % layout.rows) * layout.tiles * width + (k // layout.rows) * width
            out[at : at + width] = matrix[k, n0 : n0 + width]
    return out


@pytest.mark.parametrize(
    ("k", "n", "block", "transposed"),
    [(256, 96, 32, True), (200, 70, 32, True), (100, 64, 64, False), (130, 33, 16, False)],
)
def test_arrange_places_every_element_where_the_layout_says(k, n, block, transposed):
    layout = PreparedLayout(k, n, rows=128, block=block, transposed=transposed, dtype="bfloat16")
    matrix = torch.randn(k, n)
    source = matrix.t().contiguous() if transposed else matrix
    assert torch.equal(layout.arrange(source), _by_definition(layout, matrix))


def test_a_deep_weight_streams_in_blocks_narrower_than_a_bank():
    """One PSUM bank of columns of a [512, 512] weight is past the tiny config's weight block:
    it streams in narrower blocks (it failed to lower before)."""
    from hwsim.bridge.context import TilingOptions
    from hwsim.bridge.tiling.weights import block_columns, weight_block_bytes
    from hwsim.config import load_config
    from hwsim.library.common import limits

    lim = limits(load_config("tiny"))
    block = block_columns(512, 512, 2, lim, weight_block_bytes(lim, TilingOptions()))
    assert 0 < block < lim.tile_n
    torch.manual_seed(0)
    model, x = torch.nn.Linear(512, 512).eval(), torch.randn(4, 512)
    torch._dynamo.reset()
    options = {"config": "tiny", "fallback": "error"}
    compiled = torch.compile(model, backend="hwsim", options=options)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)
