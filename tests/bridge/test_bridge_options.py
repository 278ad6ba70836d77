"""The bridge's options are checked where they are given: a boolean option takes a boolean, not
a string or number that ``bool()`` would turn into True."""

from __future__ import annotations

import pytest

from hwsim.bridge.options import BridgeOptions
from hwsim.bridge.report import Report

FLAGS = ["check", "memory_plan", "measure_passes", "initcheck", "force"]


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize("value", ["false", "0", "no", 0, 1, 1.0])
def test_a_boolean_option_refuses_anything_but_a_boolean(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"hwsim option {name}={value!r}; valid: True, False"):
        BridgeOptions.parse({"config": "tiny", name: value})


@pytest.mark.parametrize("name", FLAGS)
def test_a_boolean_option_takes_false(name: str) -> None:
    assert getattr(BridgeOptions.parse({"config": "tiny", name: False}), name) is False


def test_initcheck_may_be_left_to_its_default() -> None:
    assert BridgeOptions.parse({"config": "tiny", "initcheck": None}).initcheck is None
    with pytest.raises(ValueError, match=r"valid: True, False$"):
        BridgeOptions.parse({"config": "tiny", "check": None})


def test_report_takes_a_report_only() -> None:
    with pytest.raises(ValueError, match=r"hwsim option report='x'; valid: a hwsim\.bridge"):
        BridgeOptions.parse({"config": "tiny", "report": "x"})
    report = Report("compile", "tiny", {}, "cpu")
    assert BridgeOptions.parse({"config": "tiny", "report": report}).report is report


def test_a_long_value_is_cut_in_the_message() -> None:
    with pytest.raises(ValueError) as raised:
        BridgeOptions.parse({"config": "tiny", "check": "x" * 10_000})
    assert len(str(raised.value)) < 200
