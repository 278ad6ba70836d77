"""floor / ceil / trunc / round (and round(decimals=)), div with a rounding mode, pow with a
tensor exponent: emulated exactly over the whole fp32 range, ties, infinities and NaN."""

from __future__ import annotations

import pytest
import torch

from tests.bridge.helpers import check_op

aten = torch.ops.aten

ROUNDING = {"floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round}


def awkward(n: int = 257, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values in [-20, 20], every half-integer tie, values past 2**23, infinities, NaN."""
    x = torch.rand(n, generator=torch.Generator().manual_seed(2)) * 40 - 20
    special = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1e-30, -1e-30]
    special += [2.0**22 + 0.5, -(2.0**22) - 0.5, 2.0**23 + 1, -(2.0**23) - 3, 2.0**31 + 2**9]
    special += [3e38, -3e38, float("inf"), float("-inf"), float("nan"), 0.0, 7.0, -7.0]
    x[: len(special)] = torch.tensor(special)
    return x.to(dtype)


@pytest.mark.parametrize("name", ROUNDING)
def test_rounding_exact_everywhere(name):
    check_op(ROUNDING[name], [awkward()])
    check_op(ROUNDING[name], [awkward(390).reshape(3, 130)], torch.bfloat16)


def test_rounding_integers_are_copies():
    ints = torch.arange(-5, 7).reshape(3, 4)
    for fn in ROUNDING.values():
        check_op(fn, [ints])


@pytest.mark.parametrize("decimals", [0, 2, -1])
def test_round_decimals(decimals):
    check_op(lambda x: torch.round(x * 30, decimals=decimals), [(3, 130)])


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_modes(mode):
    a = awkward(130) * 3
    b = torch.rand(130, generator=torch.Generator().manual_seed(5)) * 8 - 4
    b[:6] = torch.tensor([0.0, -0.0, 0.1, -0.1, float("inf"), 3.0])
    a[:6] = torch.tensor([1.0, -1.0, 1.0, 1.0, 5.0, 0.0])
    check_op(lambda x, y: torch.div(x, y, rounding_mode=mode), [a, b])
    check_op(lambda x, y: torch.div(x, y, rounding_mode=mode), [(3, 130), (130,)])


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_modes_bf16_round_each_step_like_torch(mode):
    fn = lambda x, y: torch.div(x, y, rounding_mode=mode)  # noqa: E731
    check_op(fn, [(5, 30, 33), (5, 30, 1)], torch.bfloat16)
    check_op(fn, [(7, 9), torch.tensor(-0.3)])


def test_floor_divide():
    check_op(torch.floor_divide, [(3, 130), (130,)])


def test_pow_tensor_tensor_sign_rules():
    base = torch.tensor([-2.0, -2.0, -0.5, 0.0, 0.0, 2.0, -3.0, 1.0, float("nan"), 4.0])
    exp = torch.tensor([3.0, 0.5, -2.0, -1.0, 0.0, 10.0, 2.0, float("nan"), 0.0, -0.5])
    check_op(torch.pow, [base, exp])
    check_op(torch.pow, [(3, 130), (130,)], positive=True)
    check_op(torch.pow, [(2, 1, 33), (2, 5, 1)], torch.bfloat16, positive=True)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_with_a_python_scalar_in_eager_mode(mode):
    """Eager dispatch hands div.Tensor_mode a Python number for a scalar operand."""
    from hwsim.bridge.offload import HwsimMode

    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)) * 10
    with HwsimMode("tiny", fallback="error") as hw:
        got = (torch.div(x, -2.98, rounding_mode=mode), torch.div(5.1, x, rounding_mode=mode))
    want = (torch.div(x, -2.98, rounding_mode=mode), torch.div(5.1, x, rounding_mode=mode))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert all(r.status == "simulator" for r in hw.report.ops)
