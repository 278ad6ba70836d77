"""The many-core figures read through their artists: per-core utilisation bars (one group per
core, one bar per engine, heights the busy shares) and the scaling curve beside the ideal."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hwsim.config import load_config
from hwsim.errors import HwsimError
from hwsim.plots import multicore_plots
from hwsim.plots.multicore_plots import core_utilisation, plot_core_utilisation, plot_scaling
from tests.multicore.test_benches import _load


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    drawn: list[Any] = []

    def keep(fig: Any, path: Any) -> Any:
        drawn.append(fig)
        return path

    monkeypatch.setattr(multicore_plots, "_save", keep)
    return drawn


@pytest.fixture(scope="module")
def split_runs() -> list[Any]:
    """bench/chip_scaling.py's rows kernel, 512 rows on 1 and on 2 cores (256 each)."""
    bench = _load("chip_scaling")
    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32) * 0.01
    return bench.split_runs(x, load_config("trn2"), [1, 2])


def test_core_utilisation_bars_are_each_cores_engines_busy_share(figures, split_runs) -> None:
    trace = split_runs[1].trace
    table = core_utilisation(trace)
    assert sorted(table) == [0, 1]  # both cores of the split run
    plot_core_utilisation(trace, "unused.png")
    ax = figures[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["core 0", "core 1"]
    engines = sorted({e for rows in table.values() for e in rows})
    assert [t.get_text() for t in ax.get_legend().get_texts()] == engines
    assert "DMA" in engines and "scalar" in engines  # the loads/stores and the activations
    for k, engine in enumerate(engines):  # each engine's bars: its share on core 0, core 1
        bars = ax.containers[k]
        heights = [bar.get_height() for bar in bars]
        assert heights == pytest.approx([100 * table[c].get(engine, 0.0) for c in (0, 1)])
    assert all(0 < table[c]["scalar"] <= 1 for c in (0, 1))
    assert ax.get_ylabel() == "busy (% of the run)"


def test_scaling_curve_is_one_cores_time_over_n_cores_beside_the_ideal(figures, split_runs):
    times = [r.summary.total_ns for r in split_runs]
    plot_scaling([1, 2], times, "unused.png")
    ax = figures[0].axes[0]
    ideal, simulated = ax.get_lines()
    assert list(ideal.get_ydata()) == [1, 2]
    assert list(simulated.get_ydata()) == pytest.approx([1.0, times[0] / times[1]])
    assert 1.5 < times[0] / times[1] <= 2.0  # half the rows each: close to 2x, never above
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ideal (N x)", "simulated"]
    assert ax.get_xlabel() == "cores" and ax.get_ylabel() == "speed-up over one core"


def test_scaling_needs_one_core_first():
    with pytest.raises(HwsimError, match="must be 1"):
        plot_scaling([2, 4], [1.0, 2.0], "unused.png")
