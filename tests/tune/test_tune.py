"""hwsim tune: declared spaces, the search, its cache, the CLI, NKI kernels and the loop."""

from __future__ import annotations

import json
import sqlite3
import textwrap

import pytest

from hwsim import lang
from hwsim.tune import SearchSpace, TuneError, space, space_of
from hwsim.tune.cache import TuneCache
from hwsim.tune.cli import make_target
from hwsim.tune.search import tune
from hwsim.tune.space import parse_point

#: A small V1a problem on trn1 (lhsT [1024, 512], rhs [1024, 2048] bf16): fast candidates.
SMALL = ["1024x512:bf16", "1024x2048:bf16"]


def test_space_declared_next_to_the_kernel_is_checked():
    @space(BLOCK=[1, 2, 4], DEPTH=[1, 2])
    @lang.kernel
    def k(x, BLOCK=1, DEPTH=2):
        return x

    declared = space_of(k)
    assert declared.size() == 6 and declared.admits({"BLOCK": 2, "DEPTH": 1})
    assert not declared.admits({"BLOCK": 3, "DEPTH": 1})
    with pytest.raises(TuneError, match=r"BLOCKS.*not parameters"):
        space(BLOCKS=[1])(k)
    with pytest.raises(TuneError, match="at least one value"):
        SearchSpace({"A": ()})
    with pytest.raises(TuneError, match="use numbers"):
        SearchSpace({"A": ([1],)})
    with pytest.raises(TuneError, match="repeat"):
        SearchSpace({"A": (1, 1)})
    limited = SearchSpace({"A": (1, 2, 4), "B": (1, 2)}, where=lambda p: p["A"] * p["B"] <= 4)
    assert limited.size() == 5 and not limited.admits({"A": 4, "B": 2})
    assert parse_point("BLOCK=4", declared) == {"BLOCK": 4}
    with pytest.raises(TuneError, match="not among its values"):
        parse_point("BLOCK=3", declared)


def test_tune_finds_a_faster_point_and_the_cache_answers_a_rerun(tmp_path):
    target = make_target("matmul_tiled_blocked", SMALL)
    db = tmp_path / "tune.sqlite"
    with_cache = TuneCache(db)
    first = tune(target, "trn1", trials=6, seed=1, cache=with_cache)
    with_cache.close()
    start, best = first.start, first.best
    assert start.point == {
        "TILES_IN_BLOCK_M": 1,
        "TILES_IN_BLOCK_N": 1,
        "TILES_IN_BLOCK_K": 1,
        "BUFFERS": 4,
    }
    assert best.outcome.total_ns < 0.5 * start.outcome.total_ns
    path = first.path()
    assert path[0] is start and path[-1] is best
    times = [t.outcome.total_ns for t in path]
    assert times == sorted(times, reverse=True)
    assert sum(t.outcome.ok for t in first.trials) == 6 and first.simulated == len(first.trials)
    # the same search again: every candidate from the cache, nothing simulated
    again_cache = TuneCache(db)
    again = tune(target, "trn1", trials=6, seed=1, cache=again_cache)
    again_cache.close()
    assert again.simulated == 0 and all(t.cached for t in again.trials)
    assert again.best.outcome.total_ns == best.outcome.total_ns
    # another config hash is another key
    other = tune(target, "trn1", ["dma.start_latency_ns=2000"], trials=1, cache=TuneCache(db))
    assert other.simulated == 1


def test_infeasible_points_are_recorded_with_the_kernels_reason():
    """The space's filter assumes bf16; with fp32 inputs the kernel refuses what it let by."""
    target = make_target("matmul_tiled_blocked", ["1024x512:fp32", "1024x2048:fp32"])
    big = {"TILES_IN_BLOCK_M": 16, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 8, "BUFFERS": 2}
    result = tune(target, "trn1", trials=1, start=big)
    refused = [t for t in result.trials if not t.outcome.ok]
    assert refused and "per SBUF partition" in refused[0].outcome.error
    assert result.best is not None  # the budget counts the candidates the kernel accepted
    with pytest.raises(TuneError, match="not in the declared space"):
        tune(target, "trn1", trials=1, start={**big, "TILES_IN_BLOCK_N": 16})


def test_a_filter_may_read_the_config():
    from hwsim.config import load_config
    from hwsim.library.blocked_matmul import matmul_tiled_blocked

    declared = space_of(matmul_tiled_blocked)
    trn1, trn2 = load_config("trn1"), load_config("trn2")
    point = {"TILES_IN_BLOCK_M": 16, "TILES_IN_BLOCK_N": 2, "TILES_IN_BLOCK_K": 16, "BUFFERS": 2}
    # 2 x (16 x 4 KiB + 16 x 2 KiB) + 64 KiB = 256 KiB: more than trn1's 192 KiB per partition
    assert not declared.admits(point, trn1) and declared.size(trn1) < declared.size(trn2)


def test_cache_refuses_a_file_that_is_not_one(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE runs (x)")
    with pytest.raises(TuneError, match="not a tuner cache"):
        TuneCache(other)
    (tmp_path / "text.sqlite").write_text("not sqlite at all " * 100)
    with pytest.raises(TuneError, match="not a tuner cache"):
        TuneCache(tmp_path / "text.sqlite")


KERNEL_FILE = """
from hwsim import lang, tune
from hwsim.lang import isa as nisa


@tune.space(COLUMNS=[64, 128, 256, 512], ENGINE=["vector", "gpsimd"])
@lang.kernel
def scale(x, COLUMNS=64, ENGINE="gpsimd"):
    out = lang.ndarray(x.shape, x.dtype, lang.hbm, name="out")
    for c in range(0, x.shape[1], COLUMNS):
        t = lang.load(x[:, c : c + COLUMNS])
        nisa.tensor_scalar(t, t, nisa.AluOp.multiply, 2.0, engine=ENGINE)
        lang.store(out[:, c : c + COLUMNS], t)
    return out
"""

NKI_FILE = """
import nki
import nki.language as nl


@nki.jit
def add_one(x, ROWS=32):
    out = nl.ndarray(x.shape, x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(x.shape[0] // ROWS):
        t = nl.load(x[r * ROWS : (r + 1) * ROWS, :])
        nl.store(out[r * ROWS : (r + 1) * ROWS, :], t + 1.0)
    return out


from hwsim import tune  # noqa: E402

tune.space(ROWS=[32, 64, 128])(add_one)
"""


def test_cli_tunes_a_kernel_file_and_writes_the_convergence_plot(tmp_path, capsys):
    from hwsim.cli import main

    path = tmp_path / "kernels.py"
    path.write_text(textwrap.dedent(KERNEL_FILE))
    png = tmp_path / "conv.png"
    code = main(
        [
            "tune",
            f"{path}:scale",
            "--input",
            "128x1024:fp32",
            "--config",
            "trn2",
            "--trials",
            "8",
            "--plot",
            str(png),
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["candidates"] >= 8 and data["space_size"] == 8
    assert data["best"]["total_ns"] < data["start"]["total_ns"]
    assert data["path"][0]["point"] == {"COLUMNS": 64, "ENGINE": "gpsimd"}
    assert data["loop"]["best"]["total_ns"] == pytest.approx(data["best"]["total_ns"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_tunes_an_nki_kernel(tmp_path, capsys):
    from hwsim.cli import main

    path = tmp_path / "nki_kernels.py"
    path.write_text(textwrap.dedent(NKI_FILE))
    assert (
        main(["tune", f"{path}:add_one", "--input", "128x512:fp32", "--trials", "3", "--no-advise"])
        == 0
    )
    out = capsys.readouterr().out
    assert "Path:" in out and "Best: ROWS=" in out


def test_cli_tunes_the_library_target_with_its_filter(capsys):
    from hwsim.cli import main

    args = [
        "tune",
        "matmul_tiled_blocked",
        "--input",
        "256x128:bf16",
        "--input",
        "256x512:bf16",
        "--config",
        "trn1",
        "--trials",
        "2",
        "--no-advise",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "points in the space" in out and "Best: TILES_IN_BLOCK_M=" in out


def test_cli_errors_are_one_line(tmp_path, capsys):
    from hwsim.cli import main

    assert main(["tune", "nothing_here"]) == 2
    assert "library kernel" in capsys.readouterr().err
    assert main(["tune", "matmul_tiled_blocked", "--input", "12xQ"]) == 2
    assert main(["tune", "matmul_tiled_blocked", "--start", "BUFFERS=7"]) == 2


@pytest.mark.slow
def test_tuned_v1a_reaches_the_fully_optimised_time(capsys):
    """The done-when target: the tutorial's tiled matmul (V1a, trn1) tuned over its blocking
    factors and buffer depths to within 10% of the fully optimised version's simulated time."""
    from hwsim.cli import main
    from hwsim.lang import TensorSpec
    from hwsim.library import matmul_optimized
    from hwsim.machine.simulator import run

    built = matmul_optimized.build(
        TensorSpec((8192, 4096), "bf16"), TensorSpec((8192, 8192), "bf16"), config="trn1"
    )
    optimised_ns = run(built.program, built.config, numerics=False).summary.total_ns
    assert (
        main(
            [
                "tune",
                "matmul_tiled_blocked",
                "--config",
                "trn1",
                "--trials",
                "30",
                "--jobs",
                "2",
                "--no-advise",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    best_ms = float(out.split("Best: ")[1].split(" at ")[1].split(" ms")[0])
    assert "Path:" in out
    assert best_ms * 1e6 <= 1.10 * optimised_ns, (best_ms, optimised_ns)
