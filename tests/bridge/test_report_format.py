"""The bridge report prints values as a user reads them: no Python reprs, no meaningless sizes."""

from __future__ import annotations

import operator

from hwsim.bridge.report_tables import _op_name, _peak


def test_scratch_without_a_plan_shown_only_when_it_means_something() -> None:
    # the kernel arena is scratch no graph tensor declares: there is no unplanned size to compare
    arena_only = {"hbm_peak_bytes": 100_000, "hbm_scratch_peak_bytes": 12_290,
                  "hbm_scratch_unplanned_bytes": 0}  # fmt: skip
    assert _peak(arena_only) == "97.7 KiB (scratch 12.0 KiB)"
    planned = dict(arena_only, hbm_scratch_unplanned_bytes=40_000)
    assert _peak(planned) == "97.7 KiB (scratch 12.0 KiB, 39.1 KiB without the memory plan)"


def test_ops_by_name_not_repr() -> None:
    assert _op_name(operator.getitem) == "getitem"
    assert _op_name("aten.add.Tensor") == "aten.add.Tensor"


def test_an_eager_run_has_no_call_number_and_shows_none_as_a_dash() -> None:
    from rich.console import Console

    from hwsim.bridge.passes.tables import floor_table

    eager = {"graph": "addmm#3", "total_ns": 5800.0, "floor_ns": 210.0, "over_floor": 27.6,
             "floor_binding": "hbm"}  # fmt: skip
    table = floor_table([eager])
    assert table is not None
    console = Console(width=120, record=True)
    console.print(table)
    text = console.export_text()
    assert "None" not in text and "addmm#3" in text
