"""Chrome trace export: layout, args, flows, counters, time rounding, and streaming."""

from __future__ import annotations

import itertools
import json
import time
import tracemalloc
from pathlib import Path

import pytest
from synthetic_traces import BASE_MHZ, TRN2, FakeOp, pipeline_trace, sbuf, small_trace

from hwsim.trace.analysis import end_tick
from hwsim.trace.chrome import CORE_PID_BASE, HOST_PID, iter_events, read_header, write_chrome_trace
from hwsim.trace.records import InstructionRecord, Trace
from hwsim.trace.summary import RunSummary
from hwsim.trace.validate import validate_chrome_trace


def events_of(trace: Trace, tmp_path: Path, **kwargs) -> list[dict]:
    path = write_chrome_trace(trace, tmp_path / "trace.json", **kwargs)
    assert validate_chrome_trace(path) == []
    loaded = json.loads(path.read_text())  # plain JSON too
    assert loaded["traceEvents"] == list(iter_events(path))
    return loaded["traceEvents"]


def test_processes_and_tracks_in_hardware_order(tmp_path: Path) -> None:
    events = events_of(small_trace(), tmp_path)
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["name"].endswith("_name")
    }
    sort = {
        (e["pid"], e.get("tid")): e["args"]["sort_index"]
        for e in events
        if e["name"].endswith("sort_index")
    }
    core = CORE_PID_BASE
    assert names[HOST_PID, None] == "host (PyTorch ops)"
    assert names[core, None] == "NeuronCore 0"
    tracks = sorted(
        (sort[key], names[key]) for key in names if key[0] == core and key[1] is not None
    )
    assert [name for _, name in tracks] == [
        "Critical path",
        "TensorE",
        "VectorE",
        "ScalarE",
        "GpSimdE",
        "Sync",
        "DMA q0",  # one track per queue: a transfer's pieces on two DMA engines are one slice
        "DMA q1",
        "Ops",
    ]


def test_slice_args_carry_ticks_opcode_operands_bytes_flops_tag(tmp_path: Path) -> None:
    events = events_of(small_trace(), tmp_path)
    matmul = next(e for e in events if e.get("name") == "fake_matmul")
    assert matmul["ph"] == "X" and matmul["cat"] == "tensor"
    assert matmul["ts"] == pytest.approx(4000 * 1000 // BASE_MHZ / 1000)
    args = matmul["args"]
    assert (args["start_tick"], args["end_tick"], args["ready_tick"], args["done_tick"]) == (
        4000,
        6000,
        0,
        6500,
    )
    assert args["opcode"] == "fake_matmul" and args["profiler_opcode"] == "MATMUL"
    assert args["operands"].startswith("src=bf16@sbuf[0:128]")
    assert args["sbuf_read_bytes"] == 65536 and args["psum_write_bytes"] == 262144
    assert args["flops"] == 2 * 128 * 128 * 512 and args["tag"] == "matmul"
    assert args["attributes"] == {"n_flops": 2 * 128 * 128 * 512}  # no ClassVars
    load = next(e for e in events if e.get("cat") == "dma")  # two pieces of 32 KiB: one slice
    assert load["args"]["bytes"] == 65536 and load["args"]["direction"] == "hbm->sbuf"
    assert load["args"]["pieces"] == 2 and load["args"]["dma_engines"] == [0, 1]
    assert load["args"]["tag"] == "load A" and load["args"]["trigger"] == "sync[0]"
    assert (load["ts"], load["dur"]) == (0.208, 0.625)  # first piece's start to last one's end


def test_critical_path_and_op_tracks(tmp_path: Path) -> None:
    """The critical-path slices tile the run in the order the summary's shares add up; the Ops
    track has one span per source tag with its instruction count and engines."""
    trace = small_trace()
    events = events_of(trace, tmp_path)
    critical = [e for e in events if e.get("cat") == "critical"]
    assert [e["name"] for e in critical] == ["Sync", "DMA", "TensorE", "VectorE", "Sync", "DMA"]
    for a, b in itertools.pairwise(critical):
        assert round((a["ts"] + a["dur"]) * 1000) == round(b["ts"] * 1000)
    assert critical[0]["ts"] == 0
    assert sum(e["args"]["share_ticks"] for e in critical) == end_tick(trace)
    ops = {e["name"]: e for e in events if e.get("cat") == "op"}
    assert list(ops) == ["load A", "matmul", "epilogue", "store C"]
    assert ops["matmul"]["args"]["engines"] == ["tensor"]
    assert ops["matmul"]["args"]["instructions"] == 1


def test_a_flow_per_wait_from_the_signaller_to_the_waiter(tmp_path: Path) -> None:
    events = events_of(small_trace(), tmp_path)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == 3
    by_name = {s["name"]: (s["tid"], ends[i]["tid"]) for i, s in starts.items()}
    # S.dma.q0 comes from the DMA track that finished the load (q0: tid 100), to TensorE (tid 1)
    assert by_name == {"S.dma.q0>=1": (100, 1), "S.tensor>=1": (1, 2), "S.vector>=1": (2, 5)}
    assert all(e["bp"] == "e" for e in ends.values())


def test_counters(tmp_path: Path) -> None:
    events = events_of(small_trace(), tmp_path, counter_bins=10)
    counters: dict[str, list] = {}
    for e in events:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append((e["ts"], *e["args"].values()))
    assert set(counters) == {"HBM read", "HBM write", "SBUF occupancy", "PSUM occupancy"}
    assert max(v for _, v in counters["SBUF occupancy"]) == 73728
    assert counters["PSUM occupancy"][-1][1] == 0
    # 64 KiB read over 3000 ticks (625 ns) of the 10 bins of 1000 ticks: 4 full bins at 104.9 GB/s
    assert max(v for _, v in counters["HBM read"]) == pytest.approx(65536 / 625, rel=1e-3)
    assert counters["HBM write"][-1][1] == 0


def test_host_events_nest_in_lanes(tmp_path: Path) -> None:
    trace = small_trace()
    trace.meta["host_events"] = [
        {"name": "aten::linear", "start_ns": 0, "end_ns": 1500, "args": {"shape": [4, 8]}},
        {"name": "aten::mm", "start_ns": 100, "end_ns": 900},
        {"name": "aten::add", "start_ns": 1000, "end_ns": 2000},  # overlaps linear partly
    ]
    events = events_of(trace, tmp_path)
    host = {e["name"]: e["tid"] for e in events if e["ph"] == "X" and e["pid"] == HOST_PID}
    assert host["aten::linear"] == host["aten::mm"] != host["aten::add"]


def test_adjacent_slices_never_overlap_after_rounding(tmp_path: Path) -> None:
    # 7-tick instructions at 4800 MHz are 1.458 ns: independent rounding would overlap them
    op = FakeOp(engine="vector", src=sbuf(1, 1), dst=sbuf(1, 1))
    records = [
        InstructionRecord(0, "vector", i, op, 7 * i, 7 * i, 7 * i + 7, 7 * i + 7)
        for i in range(500)
    ]
    trace = Trace(base_mhz=BASE_MHZ, config=TRN2, instructions=records)
    events = [e for e in events_of(trace, tmp_path) if e["ph"] == "X" and e["cat"] == "vector"]
    for a, b in itertools.pairwise(events):
        assert round((a["ts"] + a["dur"]) * 1000) <= round(b["ts"] * 1000)


def test_header_holds_summary_and_config(tmp_path: Path) -> None:
    summary = RunSummary(bottleneck="x")
    path = write_chrome_trace(small_trace(), tmp_path / "t.json", summary=summary)
    header = read_header(path)
    assert header["summary"] == json.loads(json.dumps(summary.to_dict()))
    assert header["summary"]["bottleneck"] == "x"
    assert header["base_mhz"] == BASE_MHZ and header["config"]["chip"]["name"] == "trn2"


def _streaming_run(tmp_path: Path, steps: int) -> tuple[int, float, float]:
    trace = pipeline_trace(steps, dma_engines=4)
    records = len(trace.instructions) + len(trace.dma)
    tracemalloc.start()
    began = time.perf_counter()
    path = write_chrome_trace(trace, tmp_path / "big.json")
    seconds = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert path.stat().st_size > 100 * records
    return records, peak / 2**20, seconds


def test_streams_1e5_records_in_little_memory(tmp_path: Path) -> None:
    records, peak_mib, _seconds = _streaming_run(tmp_path, 14_286)
    assert records >= 100_000
    assert peak_mib < 60, f"peak {peak_mib:.0f} MiB"  # memory, not speed: bench/ measures speed
    assert validate_chrome_trace(tmp_path / "big.json") == []


@pytest.mark.slow
def test_streams_1e6_records_in_little_memory(tmp_path: Path) -> None:
    records, peak_mib, seconds = _streaming_run(tmp_path, 142_858)
    print(f"{records:,} records: peak {peak_mib:.0f} MiB, {seconds:.1f} s")
    assert records >= 1_000_000
    assert peak_mib < 200, f"peak {peak_mib:.0f} MiB"
    # no bound on ``seconds``: measured under tracemalloc (several times slower) and on a machine
    # of unknown load, a wall-clock bound is a flaky test; speed belongs to bench/
