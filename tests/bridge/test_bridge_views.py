"""View and copy lowerings: strided HBM views, copies when a view is not expressible, casts."""

from __future__ import annotations

import pytest
import torch

from hwsim.bridge.values import HbmValue, view_strides
from tests.bridge.helpers import check_op

VIEW_FNS = {
    "permute_add": lambda x: x.permute(2, 0, 1) + 1,
    "transpose_mul": lambda x: x.transpose(0, 2) * 2,
    "expand_add": lambda x: x[:, :1].expand(2, 3, 257) + x,
    "slice_step": lambda x: x[:, ::2, 1::3] * 3,
    "select": lambda x: x[1] - x[0],
    "unsqueeze_squeeze": lambda x: x.unsqueeze(1).squeeze(1) + x,
    "view_of_permuted": lambda x: x.permute(0, 2, 1).reshape(2, -1) * 1.5,
    "view_contiguous": lambda x: x.view(6, 257).sum(-1),
    "clone_output": lambda x: x.t().clone() if x.dim() == 2 else x.permute(2, 1, 0).clone(),
    "output_is_a_view": lambda x: x.permute(2, 1, 0),
    "output_is_input": lambda x: x,
}


@pytest.mark.parametrize("name", VIEW_FNS)
def test_views(name):
    check_op(VIEW_FNS[name], [(2, 3, 257)])


@pytest.mark.parametrize(
    "cast", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)], ids=str
)
def test_to_copy_casts(cast):
    source, target = cast
    check_op(lambda x: x.t().to(target) * 2, [(130, 7)], source)


def test_non_contiguous_graph_input():
    x = torch.randn(257, 130).t()  # a transposed input: the HBM input keeps its storage layout
    from torch.fx.experimental.proxy_tensor import make_fx

    from hwsim.bridge.graph_lowering import lower_graph

    graph = make_fx(lambda a: torch.relu(a) + a.sum(-1, keepdim=True))(x)
    lowered = lower_graph(graph, [x], config="tiny")
    assert lowered.inputs[0].strides == (1, 130)
    out = lowered.run([x]).outputs
    torch.testing.assert_close(out, torch.relu(x) + x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "case",
    [
        ((2, 3, 4), (0, 1, 2), (24,)),
        ((2, 3, 4), (0, 2, 1), (6, 4)),
        ((2, 3, 4), (0, 2, 1), (2, 12)),
        ((4, 6), (1, 0), (2, 2, 6)),
        ((4, 1, 6), (0, 1, 2), (4, 6, 1)),
    ],
    ids=str,
)
def test_view_strides_match_torch(case):
    shape, order, new_shape = case
    x = torch.empty(shape).permute(order)
    try:
        expected = tuple(x.view(new_shape).stride())
    except RuntimeError:
        expected = None
    assert view_strides(tuple(x.shape), tuple(x.stride()), new_shape) == expected


def test_hbm_value_views_match_torch_strides():
    from hwsim.dtypes import FP32
    from hwsim.lang.tiles import Tile, hbm

    base = HbmValue.contiguous(Tile("t", (120,), FP32, hbm), (2, 3, 4, 5))
    ref = torch.empty(2, 3, 4, 5)
    pairs = [
        (base.permute((3, 1, 0, 2)), ref.permute(3, 1, 0, 2)),
        (base.transpose(1, 3), ref.transpose(1, 3)),
        (base.slice(2, 1, None, 2), ref[:, :, 1::2]),
        (base.select(1, 2), ref[:, 2]),
        (base.unsqueeze(-1), ref.unsqueeze(-1)),
        (base.select(0, 1).unsqueeze(0).expand((3, 3, 4, 5)), ref[1:2].expand(3, 3, 4, 5)),
    ]
    for value, tensor in pairs:
        assert value.shape == tuple(tensor.shape)
        assert value.strides == tuple(tensor.stride())
        assert value.offset == tensor.storage_offset()


def test_expanded_graph_output():
    check_op(lambda x: x.sum(-1, keepdim=True).expand(3, 130), [(3, 130)])
