"""Strict JSON: non-finite floats written as the strings the saved-program format names, and
never read from a bare literal or a number too large for a float."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hwsim import strict_json
from hwsim.trace.summary import RunSummary


def test_non_finite_floats_are_written_as_strings_anywhere() -> None:
    value = {"a": math.inf, "b": [-math.inf, (math.nan, 1.5)], "c": np.float32("nan"), "d": 2}
    text = strict_json.dumps(value)
    assert text == '{"a": "Infinity", "b": ["-Infinity", ["NaN", 1.5]], "c": "NaN", "d": 2}'
    assert strict_json.dumps(np.float64(0.25)) == "0.25"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"a": NaN}', "NaN is not JSON"),
        ("[Infinity]", "Infinity is not JSON"),
        ("-Infinity", "-Infinity is not JSON"),
        ('{"a": 1e309}', "the number 1e309 is too large for a float"),
        ("-2e400", "the number -2e400 is too large"),
    ],
)
def test_reading_refuses_what_is_not_strict_json(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        strict_json.loads(text)


def test_a_summary_reads_its_non_finite_strings_back_as_floats() -> None:
    summary = RunSummary(max_abs_err=math.inf, numerics_ok=False)
    again = RunSummary.from_dict(strict_json.loads(strict_json.dumps(summary.to_dict())))
    assert again.max_abs_err == math.inf and again.numerics_ok is False
