"""One rule for printed times and sizes (``hwsim.units``)."""

from __future__ import annotations

import math

import pytest

from hwsim.units import significant, size_text, time_text


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0.0, "0.00 ns"),
        (796.0, "796 ns"),
        (999.4, "999 ns"),
        (999.6, "1.00 µs"),  # rounds up into the next unit, never "1000 ns"
        (1424.8125, "1.42 µs"),
        (10426.666666666666, "10.4 µs"),
        (334_500.0, "334 µs"),
        (7_170_000.0, "7.17 ms"),
        (7_100_000.0, "7.10 ms"),  # trailing zeros kept: three figures
        (2.5e9, "2.50 s"),
        (4.2e12, "4,200 s"),  # past the figures: whole seconds, never 4.2e+03
    ],
)
def test_times_take_the_unit_that_keeps_three_figures(ns: float, text: str) -> None:
    assert time_text(ns) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (512, "512 B"),
        (1023, "1,023 B"),
        (12_288, "12.0 KiB"),
        (24 * 2**20, "24.0 MiB"),
        (1.5 * 2**30, "1.50 GiB"),
    ],
)
def test_sizes_take_binary_units(size: float, text: str) -> None:
    assert size_text(size) == text


def test_non_finite_values_print_as_themselves() -> None:
    assert time_text(math.inf) == "inf ns"
    assert significant(math.nan) == "nan"
    assert significant(3.2e-7) == "3.20e-07"
