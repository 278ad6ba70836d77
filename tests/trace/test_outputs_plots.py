"""Run folders, reading them back, and the four figures (sparse and dense)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from synthetic_traces import pipeline_trace, small_trace

from hwsim.plots import PLOT_KINDS, plot
from hwsim.plots.run_plots import DENSE_SLICES
from hwsim.trace.outputs import (
    PLOT_FILES,
    default_run_dir,
    load_run,
    load_summary,
    run_data,
    write_run_outputs,
)
from hwsim.trace.validate import validate_chrome_trace

PNG = b"\x89PNG\r\n\x1a\n"


def is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 10_000 and path.read_bytes()[:8] == PNG


def test_run_folder_has_everything(tmp_path: Path) -> None:
    paths = write_run_outputs(pipeline_trace(7), tmp_path / "run")
    assert {
        "trace",
        "summary",
        "Instruction.csv",
        "DmaPacket.csv",
        "SemaphoreUpdate.csv",
        "Summary.csv",
    } <= set(paths)
    assert validate_chrome_trace(paths["trace"]) == []
    for kind in PLOT_FILES:  # a run writes these; `hwsim plot --kind ops|dma` draws the others
        assert is_png(paths[kind]), kind
    assert load_summary(tmp_path / "run").bottleneck.startswith("descriptor-overhead-bound")


def test_load_run_from_trace_json_matches_memory(tmp_path: Path) -> None:
    trace = pipeline_trace(7)
    paths = write_run_outputs(trace, tmp_path, plots=False)
    direct = run_data(trace)
    loaded = load_run(paths["trace"])  # bare trace.json: summary from its header
    assert loaded.rows == direct.rows
    assert len(loaded.slice_row) == len(direct.slice_row) == 21 + 7  # a DMA transfer is one slice
    order_a = np.lexsort((direct.slice_start_ns, direct.slice_row))
    order_b = np.lexsort((loaded.slice_start_ns, loaded.slice_row))
    assert (direct.slice_row[order_a] == loaded.slice_row[order_b]).all()
    # JSON times are floored to whole ns
    assert np.allclose(direct.slice_start_ns[order_a], loaded.slice_start_ns[order_b], atol=1.0)
    assert [direct.keys[k] for k in direct.slice_key[order_a]] == [
        loaded.keys[k] for k in loaded.slice_key[order_b]
    ]
    assert (
        set(loaded.counters)
        == set(direct.counters)
        == {"HBM read", "SBUF occupancy", "PSUM occupancy"}
    )
    assert loaded.summary.total_ticks == direct.summary.total_ticks
    assert load_run(tmp_path).summary == loaded.summary


@pytest.mark.parametrize("trace_fn", [small_trace, lambda: pipeline_trace(7)], ids=["5", "21"])
@pytest.mark.parametrize("kind", PLOT_KINDS)
def test_sparse_plots(tmp_path: Path, trace_fn, kind: str) -> None:
    assert is_png(plot(kind, run_data(trace_fn()), tmp_path / f"{kind}.png"))


def test_dense_timeline_uses_heat_strip(tmp_path: Path) -> None:
    run = run_data(pipeline_trace(800, dma_engines=4, phases=True))
    assert len(run.slice_row) > DENSE_SLICES
    for kind in PLOT_KINDS:
        assert is_png(plot(kind, run, tmp_path / f"{kind}.png"))


def test_plots_import_matplotlib_lazily() -> None:
    code = "import sys, hwsim.plots, hwsim.trace.outputs; print('matplotlib' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid: timeline, util, memory, roofline, ops, dma"):
        plot("pie", run_data(small_trace()), tmp_path / "x.png")


def test_default_run_dir(tmp_path: Path) -> None:
    a = default_run_dir("gemm:128x128x128:bf16", tmp_path)
    b = default_run_dir("gemm:128x128x128:bf16", tmp_path)
    assert a != b and a.is_dir() and b.is_dir() and "gemm_128x128x128_bf16" in a.name
    assert set(PLOT_FILES) < set(PLOT_KINDS)


def test_colour_keys_group_bridge_tags_by_op() -> None:
    from hwsim.isa.origin import Origin, Tag
    from hwsim.trace.outputs import colour_key

    assert colour_key(Tag("addmm/addmm_2", "common.py:146", Origin("addmm", "addmm_2"))) == "addmm"
    softmax = Tag("softmax/_softmax", "common.py:9", Origin("softmax", "_softmax"))
    assert colour_key(softmax) == "softmax"
    assert colour_key("addmm/addmm_2:common.py:146") == "addmm/addmm_2:common.py:146"  # text
    assert colour_key("load_a:matmul.py:42") == "load_a:matmul.py:42"  # no group: as it is
    assert colour_key("nc_matmul") == "nc_matmul"
