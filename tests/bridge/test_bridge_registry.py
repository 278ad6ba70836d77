"""The lowering registry: duplicates rejected, typed reasons for unsupported calls."""

from __future__ import annotations

import pytest
import torch

import hwsim.bridge.lowerings  # noqa: F401  (fills the registry)
from hwsim.bridge.errors import DuplicateLoweringError, Reason, Unsupported
from hwsim.bridge.registry import LOWERINGS, OpCall, check_support, register_lowering

aten = torch.ops.aten


def test_duplicate_registration_is_rejected_naming_both():
    before = dict(LOWERINGS)
    with pytest.raises(DuplicateLoweringError, match=r"aten\.relu\.default already has a lowering"):
        register_lowering(aten.relu.default)(lambda ctx, x: x)
    assert before == LOWERINGS


def test_duplicate_fused_kind_is_rejected_naming_both():
    from hwsim.bridge.passes.fused_kinds import FUSED_LOWERINGS, register_fused

    class Kind:
        pass

    def first(ctx, kernel, outside, escapes):
        return None

    def second(ctx, kernel, outside, escapes):
        return None

    register_fused(Kind)(first)
    try:
        with pytest.raises(
            DuplicateLoweringError,
            match=r"fused kind Kind already has a lowering \(.*first\); .*second registers it",
        ):
            register_fused(Kind)(second)
        assert FUSED_LOWERINGS[Kind] is first
    finally:
        del FUSED_LOWERINGS[Kind]


def test_packets_must_name_an_overload():
    with pytest.raises(TypeError, match="overload"):
        register_lowering(aten.relu)(lambda ctx, x: x)


def reason_of(op, *args, out=None, **kwargs):
    with pytest.raises(Unsupported) as info:
        check_support(OpCall(op, args, kwargs, out))
    return info.value.reason


def test_reasons():
    x = torch.randn(3, 4)
    assert reason_of(aten.add_.Tensor, x, x, out=x) is Reason.MUTATION
    assert reason_of(aten.nonzero.default, x) is Reason.DATA_DEPENDENCE
    assert reason_of(aten.lgamma.default, x) is Reason.NO_LOWERING
    doubles = torch.ones(3, dtype=torch.float64)
    assert reason_of(aten.add.Tensor, doubles, doubles, out=doubles) is Reason.DTYPE
    ints = torch.ones(3, dtype=torch.int64)
    assert reason_of(aten.add.Tensor, ints, 2**40, out=ints) is Reason.DTYPE
    empty = torch.ones(0, 3)
    assert reason_of(aten.relu.default, empty, out=empty) is Reason.SHAPE
    assert reason_of(aten.gelu.default, x, approximate="cubic", out=x) is Reason.SHAPE


def test_supported_call_returns_its_lowering():
    x = torch.randn(3, 4)
    lowering = check_support(OpCall(aten.mm.default, (x, x.t()), {}, torch.randn(3, 3)))
    assert lowering.family == "matmul"


def test_unsupported_message_names_op_and_reason():
    error = Unsupported(aten.sort.default, Reason.NO_LOWERING, "no lowering is registered")
    assert str(error) == "aten.sort.default: no lowering: no lowering is registered"


def test_mlp_op_families_are_covered():
    needed = [
        aten.mm.default,
        aten.addmm.default,
        aten.add.Tensor,
        aten.sub.Tensor,
        aten.mul.Tensor,
        aten.div.Tensor,
        aten.relu.default,
        aten.gelu.default,
        aten.silu.default,
        aten.tanh.default,
        aten.sigmoid.default,
        aten.exp.default,
        aten.sum.dim_IntList,
        aten.mean.dim,
        aten.amax.default,
        aten._softmax.default,
        aten.view.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.expand.default,
        aten.clone.default,
        aten._to_copy.default,
    ]
    assert [op for op in needed if op not in LOWERINGS] == []
