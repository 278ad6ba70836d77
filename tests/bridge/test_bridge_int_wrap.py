"""Integer arithmetic gives torch's values or says why not: narrow integers wrap in torch and
saturate on the device, so their add/sub/mul/neg fall back; an int64 result outside the int32
the device computes int64 in is a certain error, raised by the eager check."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from hwsim import bridge
from hwsim.bridge.dtypes import Int64RangeError
from hwsim.bridge.errors import FallbackError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _chain(error: BaseException | None) -> list[BaseException]:
    found = []
    while error is not None:
        found.append(error)
        error = error.__cause__ or getattr(error, "inner_exception", None)
    return found


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def _mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * b


def _neg(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return -a + 0 * b


NARROW = [
    (_add, torch.uint8, [250, 3], [10, 4]),
    (_add, torch.int8, [120, 3], [10, 4]),
    (_mul, torch.int16, [300, 3], [200, 4]),
    (_neg, torch.uint8, [5, 0], [1, 1]),
]


@pytest.mark.parametrize(("fn", "dtype", "a", "b"), NARROW)
def test_narrow_integer_arithmetic_is_refused_under_error(fn, dtype, a, b) -> None:
    x, y = torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)
    compiled = torch.compile(fn, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    with pytest.raises(Exception, match=r"wraps modulo 2\^(8|16) in torch") as info:
        compiled(x, y)
    assert any(isinstance(e, FallbackError) for e in _chain(info.value))


@pytest.mark.parametrize(("fn", "dtype", "a", "b"), NARROW)
def test_narrow_integer_arithmetic_gives_torchs_wrapped_values_on_the_cpu(fn, dtype, a, b) -> None:
    x, y = torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)
    compiled = torch.compile(fn, backend="hwsim", options={"config": "tiny", "fallback": "cpu"})
    assert torch.equal(compiled(x, y), fn(x, y))  # uint8 250 + 10 is 4, as torch says
    assert bridge.last_report().to_dict()["numerics_ok"]


def test_int32_arithmetic_still_runs_on_the_simulator_and_wraps_like_torch() -> None:
    x = torch.tensor([2**31 - 1, 3], dtype=torch.int32)
    y = torch.tensor([1, 4], dtype=torch.int32)
    compiled = torch.compile(_add, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    assert torch.equal(compiled(x, y), _add(x, y))


def test_an_int64_result_outside_int32_raises_under_check() -> None:
    x = torch.tensor([2**30, 3], dtype=torch.int64)
    y = torch.tensor([4, 4], dtype=torch.int64)
    compiled = torch.compile(_mul, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    with pytest.raises(Int64RangeError, match="holds 4294967296, outside the int32 range"):
        compiled(x, y)
    assert not bridge.last_report().to_dict()["numerics_ok"]  # the comparison is kept


def test_an_int64_result_inside_int32_is_exact() -> None:
    x = torch.tensor([2**20, -3], dtype=torch.int64)
    y = torch.tensor([4, 4], dtype=torch.int64)
    compiled = torch.compile(_mul, backend="hwsim", options={"config": "tiny", "fallback": "error"})
    assert torch.equal(compiled(x, y), _mul(x, y))
