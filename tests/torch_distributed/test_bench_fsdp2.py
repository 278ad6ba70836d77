"""bench/distributed.py's FSDP2 mode on tiny GPT-2 and two ranks: the gradients gathered from
the shards are eager's full-batch gradients, and every step of every rank has its compiled
blocks' compute and FSDP2's collectives in the report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "distributed.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_distributed", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fsdp2_mode_gives_eager_gradients_and_times_each_step():
    bench = _bench()
    args = bench.parse_args(["--model", "tiny", "--ranks", "2", "--seq", "8", "--fsdp2"])
    worst, reports, _ = bench.run(args)
    assert worst <= bench.TOLERANCE
    assert [r["rank"] for r in reports] == [0, 1]
    for report in reports:
        assert sorted(report["steps"]) == [0, 1]
        for split in report["steps"].values():
            # two blocks, each a forward and a backward graph on the rank's core
            assert split["graphs"] == 4 and split["compute_ns"] > 0
            # per block: an all-gather before its forward and its backward, a reduce-scatter
            assert split["collectives"] >= 6 and split["communication_ns"] > 0
            assert split["link_bytes"]["intra_chip"] > 0
    assert reports[0]["steps"] == reports[1]["steps"]  # the same work on both ranks
