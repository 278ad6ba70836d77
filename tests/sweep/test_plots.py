"""Sweep figures: a PNG per kind, the Pareto front computation, and plot errors that say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwsim.sweep import SweepError, load_sweep, run_sweep
from hwsim.sweep.pareto import pareto_front
from hwsim.sweep.plots import plot_sweep
from tests.sweep.helpers import write_spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("plots")
    parameters = {"grid": {"dma.engines": [2, 4, 8], "sbuf.bytes_per_partition": [16384, 32768]}}
    spec = write_spec(
        directory,
        parameters=parameters,
        workloads=["gemm:32x64x64", "workloads_for_tests.py:fails_on_two_engines"],
    )
    path = directory / "r.sqlite"
    run_sweep(load_sweep(spec), path, jobs=1, progress=False)
    return path


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 10_000


def test_line(db: Path, tmp_path: Path) -> None:
    out = plot_sweep(
        db,
        "line",
        tmp_path / "line.png",
        x="dma.engines",
        metric="total_ns",
        where=["sbuf.bytes_per_partition=16384"],
    )
    assert _is_png(out)


def test_heatmap_draws_failed_cells(db: Path, tmp_path: Path) -> None:
    out = plot_sweep(
        db,
        "heatmap",
        tmp_path / "heat.png",
        x="dma.engines",
        y="sbuf.bytes_per_partition",
        metric="mbu_pct",
    )
    assert _is_png(out)


def test_pareto(db: Path, tmp_path: Path) -> None:
    out = plot_sweep(db, "pareto", tmp_path / "pareto.png", x="dma.engines", y="total_ns")
    assert _is_png(out)


def test_errors_say_what_to_change(db: Path, tmp_path: Path) -> None:
    with pytest.raises(SweepError, match=r"mix values of sbuf.bytes_per_partition; pick one"):
        plot_sweep(
            db, "heatmap", tmp_path / "h.png", x="dma.engines", y="dma.engines", metric="total_ns"
        )
    with pytest.raises(
        SweepError, match=r"--metric 'total_n' is not a column.*did you mean 'total_ns'"
    ):
        plot_sweep(db, "line", tmp_path / "l.png", x="dma.engines", metric="total_n")
    with pytest.raises(
        SweepError, match=r"--where dma.engines=3: no rows; dma.engines takes 2, 4, 8"
    ):
        plot_sweep(
            db,
            "line",
            tmp_path / "l.png",
            x="sbuf.bytes_per_partition",
            metric="total_ns",
            where=["dma.engines=3"],
        )
    with pytest.raises(SweepError, match="no results for workload 'softmax'"):
        plot_sweep(
            db, "pareto", tmp_path / "p.png", x="dma.engines", y="total_ns", workloads=["softmax"]
        )


def test_pareto_front_keeps_the_non_dominated() -> None:
    points = [(1.0, 5.0), (2.0, 3.0), (3.0, 3.0), (2.0, 4.0), (4.0, 1.0), (4.0, 1.0), (5.0, 2.0)]
    assert sorted(pareto_front(points, (False, False))) == [0, 1, 4, 5]  # ties both kept
    # maximise y instead: (1, 5) dominates everything with x >= 1
    assert pareto_front(points, (False, True)) == [0]
    assert sorted(pareto_front(points, (True, True))) == [0, 2, 3, 6]
