"""The figures read through their artists: legend entries, row and axis labels, units, and where
legends sit (not only that a PNG was written)."""

from __future__ import annotations

from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from synthetic_traces import pipeline_trace, small_trace

from hwsim.plots import perf_plots, plot, run_plots
from hwsim.plots.run_plots import _short
from hwsim.trace.outputs import RunData, load_run, run_data, write_run_outputs


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every figure a plot function finishes, instead of its PNG."""
    drawn: list[Any] = []

    def keep(fig: Any, path: Any) -> Any:
        drawn.append(fig)
        return path

    monkeypatch.setattr(run_plots, "_save", keep)
    monkeypatch.setattr(perf_plots, "_save", keep)
    return drawn


@pytest.fixture(scope="module")
def small() -> RunData:
    return run_data(small_trace())


def _legend(ax: Any) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def _ticks(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


def test_timeline_rows_are_queues_and_the_critical_path(figures, small: RunData) -> None:
    plot("timeline", small, "unused.png")
    ax = figures[0].axes[0]
    assert _ticks(ax) == [
        "critical path", "TensorE", "VectorE", "ScalarE", "GpSimdE", "Sync", "DMA q0", "DMA q1"
    ]  # fmt: skip
    assert _legend(ax)[-1] == "critical path (by resource)"
    assert {"load A", "matmul", "epilogue", "store C"} <= set(_legend(ax))
    assert ax.get_xlabel() == "time (µs)"


def test_legend_labels_keep_the_line_number() -> None:
    label = _short("gemm_kernel:optimized_matmul_with_a_much_longer_name.py:323")
    assert label.endswith("name.py:323") and label.startswith("gemm_kernel:") and len(label) == 40
    assert _short("gemm_kernel:optimized_matmul.py:323") == "gemm_kernel:optimized_matmul.py:323"


def test_memory_legends_sit_right_of_their_panels(figures, small: RunData) -> None:
    plot("memory", small, "unused.png")
    fig = figures[0]
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_legend()]
    assert len(panels) == 3
    for ax in panels:
        assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent().x1


def test_time_by_op_bars(figures, small: RunData) -> None:
    plot("ops", small, "unused.png")
    ax = figures[0].axes[0]
    assert _legend(ax) == ["engine busy", "DMA transfers in flight"]
    names = _ticks(ax)
    assert set(names) == {"load A", "matmul", "epilogue", "store C", "fake_op"}  # untagged: opcode
    engine, dma = perf_plots.op_times(small)[1:]
    assert (engine + dma).tolist() == sorted((engine + dma).tolist(), reverse=True)
    assert ax.get_xlabel().startswith("time (ns")  # the longest bar is 625 ns
    # matmul: one 2000-tick TensorE instruction at 4800 MHz, no DMA
    bars = {n: p.get_width() for n, p in zip(names, ax.patches[: len(names)], strict=True)}
    assert bars["matmul"] == pytest.approx(2000 / 4.8)


def test_dma_queue_depth_and_bytes_in_flight(figures, small: RunData) -> None:
    plot("dma", small, "unused.png")
    depth_ax, bytes_ax = figures[0].axes
    assert _legend(depth_ax) == ["DMA q0", "DMA q1"]
    assert bytes_ax.get_ylabel() == "in flight (KiB)" and bytes_ax.get_xlabel() == "time (µs)"
    # each queue carries one 64 KiB transfer: depth peaks at 1, bytes in flight at 64 KiB
    assert max(max(line.get_ydata()) for line in depth_ax.get_lines()) == 1
    assert max(max(line.get_ydata()) for line in bytes_ax.get_lines()) == 64


def test_roofline_has_a_point_per_op(figures) -> None:
    run = run_data(pipeline_trace(7))
    plot("roofline", run, "unused.png")
    ax = figures[0].axes[0]
    tags = [t for t in run.summary.tags if t.flops > 0 and t.hbm_bytes > 0]
    runs = 1 + (run.summary.flops.model_flops != run.summary.flops.tensor_flops)
    assert len(ax.collections) == len(tags) + runs


def test_figures_from_disk_match_memory(figures, tmp_path) -> None:
    trace = small_trace()
    write_run_outputs(trace, tmp_path, plots=False)
    loaded, direct = load_run(tmp_path), run_data(trace)
    assert [c[:2] for c in loaded.critical] == [c[:2] for c in direct.critical]
    assert loaded.slice_bytes.sum() == direct.slice_bytes.sum() == 2 * 65536
    for run in (loaded, direct):
        plot("dma", run, "unused.png")
    assert [line.get_ydata().max() for line in figures[0].axes[1].get_lines()] == [
        line.get_ydata().max() for line in figures[1].axes[1].get_lines()
    ]
