"""Hostile and careless inputs beyond one bad file (issue 33, "nothing clobbered, nothing silent"):
outputs that are not regular files or were not written by hwsim, specs that must stay data under
``--dry-run``, kernels whose numerics were judged wrongly, bounds on what a command starts, and
error lines that echo huge values. The one-line refusals of single corpus files are in
``test_bad_input_corpus.py``; the corpus files these tests use are listed in
``HOSTILE_CORPUS_FILES`` (that module checks every corpus file is some test's case).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwsim.cli.main import main

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA / "bad_inputs"
PY = CORPUS / "python"
ONE_RUN_SPEC = "name: one\nbase: tiny\nworkloads: [gemm:32x32x32]\n"
PARETO = ["--kind", "pareto", "--x", "total_ns", "--y", "mfu_pct"]

#: ``hwsim nki FILE.py:KERNEL`` (and its options) -> what the one line says
NKI_CASES = {
    "nki_inputs_too_few.py:add": ([], "1 inputs do not fit kernel add: missing a required"),
    "nki_huge_range.py:copy": (
        ["--max-instructions", "2000"],
        "tracing kernel copy stopped at its limit of 2,000 instructions",
    ),
    "nki_uninitialised_read.py:copy": ([], "reads 8192 uninitialised bytes of sbuf"),
    "exits_at_import.py:copy": (
        [],
        "exits_at_import.py called sys.exit(0); a workload file defines",
    ),
}
#: FILE.py:NAME whose run must give the right verdict -> (exit status, the numerics line)
RIGHT_RESULTS = {
    "int32_saturates.py:double": (1, "numerics: MISMATCH (max abs error 101, tolerance 0)"),
    "nonfinite_output.py:copy": (0, "numerics: OK (max abs error 0, tolerance 0.0001)"),
}
HOSTILE_CORPUS_FILES = [
    *(f"python/{case.split(':')[0]}" for case in (*NKI_CASES, *RIGHT_RESULTS)),
    "specs/dry_run_imports_nothing.yaml",
    "specs/payload.py",
    "specs/not_callable_workload.yaml",
    "python/uninitialised_read.py",
]


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("hwsim: error: "), err
    return err.strip()


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "run"
    assert main(["run", "gemm:32x32x32", "--config", "tiny", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def results_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile_db")
    (folder / "s.yaml").write_text(
        "name: s\nbase: tiny\nparameters:\n  grid: {chip.name: ['=1+1', '@SUM(A1)', 'plain']}\n"
        "workloads: [gemm:32x32x32]\n"
    )
    db = folder / "r.sqlite"
    assert main(["sweep", str(folder / "s.yaml"), "--db", str(db), "--jobs", "1", "-q"]) == 0
    return db


# ---- outputs: only regular files, never a file hwsim did not write ------------------------------


def _special_files(folder: Path, suffix: str) -> Iterator[tuple[Path, str]]:
    """A FIFO, a socket and (as root) a character device, each named like an output."""
    os.mkfifo(folder / f"fifo{suffix}")
    yield folder / f"fifo{suffix}", "is a FIFO (named pipe), not a regular file"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / f"socket{suffix}"))
    try:
        yield folder / f"socket{suffix}", "is a socket, not a regular file"
    finally:
        server.close()
    if os.geteuid() == 0:  # a twin of /dev/null: making one needs root
        os.mknod(folder / f"device{suffix}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        yield folder / f"device{suffix}", "is a character device, not a regular file"


@pytest.mark.parametrize("command", ["config schema", "plot", "sweep export", "sweep plot"])
def test_an_output_that_is_not_a_regular_file_is_left_alone(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    run_folder: Path,
    results_db: Path,
    command: str,
) -> None:
    argv = {
        "config schema": ["config", "schema"],
        "plot": ["plot", str(run_folder), "--kind", "util"],
        "sweep export": ["sweep", "export", str(results_db)],
        "sweep plot": ["sweep", "plot", str(results_db), *PARETO],
    }[command]
    suffix = ".csv" if command == "sweep export" else ".png"
    for path, says in _special_files(tmp_path, suffix):
        kind = os.lstat(path).st_mode
        assert says in _refused(capsys, [*argv, "-o", str(path)])
        assert os.lstat(path).st_mode == kind, f"{path.name} was replaced"


@pytest.mark.parametrize("command", ["sweep SPEC", "sweep export", "sweep --db"])
def test_an_input_that_is_a_fifo_is_one_line_not_a_wait(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """Reading a FIFO waits for a writer that never comes: it is refused before it is opened."""
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    (tmp_path / "one.yaml").write_text(ONE_RUN_SPEC)
    argv, says = {
        "sweep SPEC": (["sweep", str(fifo), "--dry-run"], "f.yaml: cannot read sweep spec (it is"),
        "sweep export": (["sweep", "export", str(fifo), "-o", str(tmp_path / "x.csv")], "FIFO"),
        "sweep --db": (
            ["sweep", str(tmp_path / "one.yaml"), "--db", str(fifo), "--jobs", "1", "-q"],
            "is not an hwsim sweep database: it is a FIFO (named pipe)",
        ),
    }[command]
    assert says in _refused(capsys, argv)


def test_a_default_output_path_never_replaces_a_users_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, run_folder: Path, results_db: Path
) -> None:
    trace = tmp_path / "trace.json"
    trace.write_bytes((run_folder / "trace.json").read_bytes())
    db = tmp_path / "r.sqlite"
    db.write_bytes(results_db.read_bytes())
    plot = ["plot", str(trace), "--kind", "util"]
    sweep_plot = ["sweep", "plot", str(db), *PARETO]
    for argv, default in ((plot, tmp_path / "util.png"), (sweep_plot, tmp_path / "r-pareto.png")):
        default.write_bytes(b"\x89PNG\r\n\x1a\nthe user's own figure")
        line = _refused(capsys, argv)
        assert f"{default} exists and was not written by hwsim; name where the output" in line
        assert default.read_bytes().endswith(b"the user's own figure")
        default.unlink()
        for _ in range(2):  # hwsim's own figure (its PNG carries hwsim's mark) is replaced
            assert main(argv) == 0
        assert default.stat().st_size > 1000
    capsys.readouterr()


def test_a_plot_beside_a_run_folder_of_ours_replaces_our_figure(
    capsys: pytest.CaptureFixture[str], run_folder: Path
) -> None:
    before = (run_folder / "memory.png").stat().st_mtime_ns
    assert main(["plot", str(run_folder), "--kind", "memory"]) == 0  # listed in our marker
    assert (run_folder / "memory.png").stat().st_mtime_ns != before
    capsys.readouterr()


def test_export_escapes_cells_a_spreadsheet_would_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, results_db: Path
) -> None:
    import csv

    out = tmp_path / "r.csv"
    assert main(["sweep", "export", str(results_db), "-o", str(out)]) == 0
    with out.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert sorted(row["chip.name"] for row in rows) == ["'=1+1", "'@SUM(A1)", "plain"]
    cells = [cell for row in rows for cell in row.values()]
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "@")]
    capsys.readouterr()


# ---- specs are data ------------------------------------------------------------------------------


def test_a_dry_run_imports_no_workload_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("dry_run_imports_nothing.yaml", "payload.py"):  # a copy: nothing lands here
        (tmp_path / name).write_bytes((CORPUS / "specs" / name).read_bytes())
    spec = tmp_path / "dry_run_imports_nothing.yaml"
    assert main(["sweep", str(spec), "--dry-run", "--db", str(tmp_path / "r.sqlite")]) == 0
    assert not (tmp_path / "PWNED").exists(), "the dry run imported payload.py"
    assert "1 configs x 1 workloads = 1 runs" in capsys.readouterr().out
    assert not (tmp_path / "r.sqlite").exists()


def test_a_workload_file_is_checked_when_the_runs_execute(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = CORPUS / "specs" / "not_callable_workload.yaml"
    assert main(["sweep", str(spec), "--dry-run", "--db", str(tmp_path / "r.sqlite")]) == 0
    argv = ["sweep", str(spec), "--db", str(tmp_path / "r.sqlite"), "--jobs", "1", "-q"]
    assert "'x' (type int) is not a workload" in _refused(capsys, argv)
    assert not (tmp_path / "r.sqlite").exists(), "refused before the database is made"


def test_a_dry_run_still_reads_the_file_for_its_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "k.py").write_text("def build(config):\n    pass\n")
    (tmp_path / "s.yaml").write_text("name: s\nbase: tiny\nworkloads: ['k.py:buidl']\n")
    argv = ["sweep", str(tmp_path / "s.yaml"), "--dry-run"]
    assert "k.py defines no 'buidl' (did you mean 'build'?)" in _refused(capsys, argv)


# ---- kernels: one line or the right verdict ------------------------------------------------------


@pytest.mark.parametrize("case", sorted(NKI_CASES))
def test_a_bad_nki_kernel_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    options, says = NKI_CASES[case]
    argv = ["nki", str(PY / case), "--config", "tiny", "--out", str(tmp_path / "o"), *options]
    assert says in _refused(capsys, argv)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("case", sorted(RIGHT_RESULTS))
def test_numerics_get_the_right_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    status, verdict = RIGHT_RESULTS[case]
    argv = ["run", str(PY / case), "--config", "tiny", "--out", str(tmp_path / "o")]
    assert main(argv) == status
    assert verdict in capsys.readouterr().out


def test_initcheck_is_on_by_default_and_off_only_when_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HWSIM_INITCHECK", raising=False)  # the test suite sets it
    argv = ["run", f"{PY}/uninitialised_read.py:copy", "--config", "tiny"]
    line = _refused(capsys, [*argv, "--out", str(tmp_path / "a")])
    assert "reads 2048 uninitialised bytes" in line and "--no-initcheck runs without" in line
    assert main([*argv, "--out", str(tmp_path / "b"), "--no-initcheck"]) == 0
    monkeypatch.setenv("HWSIM_INITCHECK", "0")
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    capsys.readouterr()


# ---- JSON: strict --------------------------------------------------------------------------------


def test_json_output_has_no_non_finite_literals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "k.py").write_text(
        "import numpy as np\nfrom hwsim import lang\nfrom hwsim.lang import TensorSpec\n\n"
        "@lang.kernel\ndef k(x=TensorSpec((32, 16), 'fp32')):\n"
        "    out = lang.ndarray((32, 16), lang.float32, buffer=lang.hbm, name='out')\n"
        "    lang.store(out, lang.load(x))\n    return out\n\n"
        "def k_reference(x):\n    return np.full((32, 16), np.inf)\n"
    )
    assert main(["run", f"{tmp_path}/k.py:k", "--config", "tiny", "--json"]) == 1
    text = capsys.readouterr().out

    def refuse(name: str) -> None:
        raise ValueError(name)

    summary = json.loads(text, parse_constant=refuse)
    assert summary["max_abs_err"] == "Infinity" and summary["numerics_ok"] is False


# ---- bounds ------------------------------------------------------------------------------------


def test_jobs_are_capped_by_the_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text(ONE_RUN_SPEC)
    argv = ["sweep", str(tmp_path / "one.yaml"), "--db", str(tmp_path / "r.sqlite")]
    start = time.perf_counter()
    assert main([*argv, "--jobs", "64"]) == 0
    assert time.perf_counter() - start < 60
    err = capsys.readouterr().err
    assert "--jobs 64: starting 1 worker (1 run to do" in err


@pytest.mark.parametrize(
    "where",
    ["--set", "spec", "config file"],
)
def test_a_huge_value_is_cut_in_the_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    huge = "y" * 300_000
    if where == "--set":
        argv = ["config", "show", "tiny", "--set", f"tensor_engine.timing_model={huge}"]
    elif where == "spec":
        (tmp_path / "s.yaml").write_text(
            f"name: s\nbase: tiny\nset: {{tensor_engine.timing_model: {huge}}}\n"
            "workloads: [gemm:32x32x32]\n"
        )
        argv = ["sweep", str(tmp_path / "s.yaml"), "--dry-run"]
    else:
        text = (DATA.parent.parent / "configs" / "tiny.yaml").read_text()
        (tmp_path / "c.yaml").write_text(text.replace("closed_form", huge, 1))
        argv = ["config", "check", "--config", str(tmp_path / "c.yaml")]
    line = _refused(capsys, argv)
    assert "timing_model" in line and len(line) < 1000, len(line)
