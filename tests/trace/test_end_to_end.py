"""The trace exports on a real simulated run (skipped until the simulator and workloads exist)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hwsim.trace.chrome import iter_events
from hwsim.trace.validate import validate_chrome_trace

cli_run = pytest.importorskip("hwsim.workloads.cli_run")


def test_gemm_run_folder(tmp_path: Path) -> None:
    from hwsim.trace.outputs import load_run, write_run_outputs
    from hwsim.trace.stats import summarize

    result, _ = cli_run.run_workload("gemm:256x256x512:bf16", "trn2")
    trace = result.trace
    summary = summarize(trace)
    paths = write_run_outputs(trace, tmp_path, summary=summary)
    assert validate_chrome_trace(paths["trace"]) == []

    engines = summary.engines
    assert sum(e.instructions for e in engines.values()) == len(trace.instructions)
    assert all(0 <= e.busy_pct <= 100 for e in engines.values())
    assert engines["tensor"].instructions > 0 and summary.mfu_pct > 0
    assert 0 < summary.dma_active_pct <= 100
    assert sum(summary.critical_path.share_pct.values()) == pytest.approx(100)
    for memory in ("sbuf", "psum"):
        assert 0 < summary.memory[memory].peak_bytes <= summary.memory[memory].capacity_bytes

    events = list(iter_events(paths["trace"]))
    waits = sum(
        1 for rec in trace.instructions for sem, value in rec.instruction.waits if value > 0
    )
    flows = [e for e in events if e["ph"] == "s"]
    assert 0 < len(flows) <= waits
    slices = Counter(e.get("cat") for e in events if e["ph"] == "X")
    transfers = len({(p.core, p.trigger_engine, p.trigger_pc, p.queue) for p in trace.dma})
    assert slices["dma"] == transfers < len(trace.dma)  # one slice per transfer, not per piece
    engines = sum(n for cat, n in slices.items() if cat not in ("dma", "critical", "op"))
    assert engines == len(trace.instructions)
    assert json.loads(paths["summary"].read_text())["total_ticks"] == summary.total_ticks
    assert load_run(tmp_path).rows[:5] == ["TensorE", "VectorE", "ScalarE", "GpSimdE", "Sync"]


def test_cli_run_out_dir_for_the_issue_gemm(tmp_path: Path) -> None:
    """`hwsim run gemm:1024x1024x1024:bf16 --config trn2 --out DIR`: a trace the validator
    accepts, a summary whose per-engine busy time equals the sum of that engine's slices in the
    trace, and four PNGs."""
    from collections import Counter

    from hwsim.cli.main import main

    out = tmp_path / "run"
    assert main(["run", "gemm:1024x1024x1024:bf16", "--config", "trn2", "--out", str(out)]) == 0
    assert validate_chrome_trace(out / "trace.json") == []
    summary = json.loads((out / "summary.json").read_text())
    busy_ticks: Counter[str] = Counter()
    for event in iter_events(out / "trace.json"):
        if (
            event["ph"] == "X"
            and "start_tick" in event.get("args", {})
            and event["cat"] in summary["engines"]
        ):
            busy_ticks[event["cat"]] += event["args"]["end_tick"] - event["args"]["start_tick"]
    for engine, stats in summary["engines"].items():
        if engine in busy_ticks:
            assert stats["busy_ticks"] == busy_ticks[engine], engine
    assert set(busy_ticks) >= {"tensor", "vector", "sync"}
    for name in ("timeline.png", "util.png", "memory.png", "roofline.png"):
        assert (out / name).stat().st_size > 10_000
