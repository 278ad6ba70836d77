"""The output guard: ``--out`` and every other writer refuse to clobber, escape or follow links.

Through the CLI each refusal is exit code 2 and one line on stderr (no traceback); the unit tests
below pin what a claim removes, keeps and never follows.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic_traces import pipeline_trace

from hwsim.outputs_guard import (
    MARKER,
    OutputError,
    check_output_folder,
    claim_folder,
    output_file,
    session_folder,
)
from hwsim.run_marker import MARKER_FORMAT
from hwsim.trace.outputs import write_run_outputs

cli = importlib.import_module("hwsim.cli.main")
ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "gemm:32x64x64", "--config", "tiny", "--json"]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``hwsim ARGV``; assert exit 2 with exactly one stderr line; return that line."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hwsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("/", "refusing to write into / (the filesystem root)"),
        ("~", "(your home directory)"),
        (str(Path.home()), "(your home directory)"),
    ],
)
def test_out_refuses_the_root_and_home(
    out: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in (RUN, ["demo", "--config", "tiny", "--workload", "gemm:32x64x64"]):
        assert message in _refused([*command, "--out", out, "--force"], capsys)


def test_out_refuses_a_foreign_folder_unless_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    line = _refused([*RUN, "--out", str(tmp_path)], capsys)
    assert f"{tmp_path} is not empty and is not an hwsim run folder (no {MARKER} in it)" in line
    assert "--force" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing written
    assert cli.main([*RUN, "--out", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "trace.json").is_file() and (tmp_path / MARKER).is_file()
    check_output_folder(tmp_path)  # ours now: a re-run needs no --force


def test_out_refuses_a_file_a_long_path_and_an_unwritable_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert "exists and is a file, not a folder" in _refused([*RUN, "--out", str(a_file)], capsys)
    assert f"cannot create {a_file}/run: {a_file} is a file" in _refused(
        [*RUN, "--out", str(a_file / "run")], capsys
    )
    long = tmp_path / "/".join(["d" * 200] * 25)  # 5,000 bytes: over Linux's 4096
    assert "(PATH_MAX)" in _refused([*RUN, "--out", str(long)], capsys)
    assert "(NAME_MAX)" in _refused([*RUN, "--out", str(tmp_path / ("n" * 300))], capsys)
    if Path("/proc/self").is_dir():  # a place nobody can make folders in, even root
        assert "cannot create /proc/hwsim-out" in _refused(
            [*RUN, "--out", "/proc/hwsim-out"], capsys
        )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_out_refuses_an_unwritable_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    line = _refused([*RUN, "--out", str(locked / "run")], capsys)
    assert f"{locked} is not writable" in line


def test_a_planted_symlink_is_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    (out / "trace.json").unlink()  # someone swaps our trace for a link to their file
    (out / "trace.json").symlink_to(victim)
    (out / "tables" / "Summary.csv").unlink()
    (out / "tables" / "Summary.csv").symlink_to(victim)
    write_run_outputs(pipeline_trace(3), out, plots=False)
    assert victim.read_text() == "precious"
    assert not (out / "trace.json").is_symlink() and (out / "trace.json").stat().st_size > 100
    # forced into a folder of someone else's: a link at one of our names is replaced, unfollowed
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "summary.json").symlink_to(victim)
    write_run_outputs(pipeline_trace(3), foreign, plots=False, force=True)
    assert victim.read_text() == "precious" and not (foreign / "summary.json").is_symlink()
    # a link to a folder where tables/ goes is not entered either
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    forced = tmp_path / "forced"
    forced.mkdir()
    (forced / "tables").symlink_to(elsewhere)
    line = _refused([*RUN, "--out", str(forced), "--force"], capsys)
    assert f"{forced}/tables is a symlink or a file, not a folder" in line
    assert list(elsewhere.iterdir()) == []


def test_a_refused_out_fails_before_the_simulation(tmp_path: Path) -> None:
    """A real process: exit 2, one stderr line, and it fails in well under a simulation's time."""
    (tmp_path / "x").write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "hwsim.cli", "run", "gemm:4096x4096x4096", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "is not an hwsim run folder" in done.stderr


# ---- the guard itself ---------------------------------------------------------------------------


def test_a_rerun_replaces_exactly_our_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    with output_file(out / "util.png", "wb") as png:  # as ``hwsim plot`` adds one
        png.write(b"png")
    listed = (out / MARKER).read_text().splitlines()
    assert listed[0] == f"hwsim-run format {MARKER_FORMAT}"
    assert {"trace.json", "summary.json", "tables/", "tables/Instruction.csv", "util.png"} <= set(
        listed
    )
    (out / "notes.txt").write_text("mine")
    (out / "tables" / "my.csv").write_text("mine")
    write_run_outputs(pipeline_trace(3), out, plots=False)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "tables" / "my.csv").read_text() == "mine"
    assert not (out / "util.png").exists()  # ours from the first run, not written this time
    assert "util.png" not in (out / MARKER).read_text()


def test_a_foreign_file_of_our_name_in_our_folder_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    (out / "timeline.png").write_text("someone's picture")  # not in our marker
    with pytest.raises(OutputError, match=r"timeline\.png exists and was not written by hwsim"):
        write_run_outputs(pipeline_trace(3), out)
    assert (out / "timeline.png").read_text() == "someone's picture"
    foreign = tmp_path / "foreign"  # forced into someone's folder: our names are replaced
    foreign.mkdir()
    (foreign / "summary.json").write_text("someone's summary")
    with pytest.raises(OutputError, match="is not an hwsim run folder"):
        write_run_outputs(pipeline_trace(3), foreign, plots=False)
    write_run_outputs(pipeline_trace(3), foreign, plots=False, force=True)
    assert (foreign / "summary.json").read_text().startswith("{")


BOUND = f"hwsim-run format {MARKER_FORMAT}\nfolder inode {{inode}}\n"


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (f"hwsim-run format {MARKER_FORMAT + 1}\n", "was written by a newer hwsim"),
        ("something else\n", "was not written by hwsim"),
        (BOUND + "../outside.txt\n", "names paths outside the folder"),
        ("hwsim-run format 1\nthesis.tex\n", "is of an older hwsim, not bound to this folder"),
        (f"hwsim-run format {MARKER_FORMAT}\nfolder inode 1\n", "was made for another folder"),
        (f"hwsim-run format {MARKER_FORMAT}\nthesis.tex\n", "was made for another folder"),
    ],
)
def test_a_marker_that_is_not_ours_is_foreign(tmp_path: Path, marker: str, message: str) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    out = tmp_path / "run"
    out.mkdir()
    (out / MARKER).write_text(marker.format(inode=out.stat().st_ino))
    with pytest.raises(OutputError, match=message):
        check_output_folder(out)
    with claim_folder(out, force=True) as folder:  # forced: written into, nothing cleared
        folder.write_text("a.txt", "a")
    assert outside.read_text() == "keep"


def test_a_marker_is_bound_to_its_folder(tmp_path: Path) -> None:
    """A run folder copied elsewhere (marker and all) is not a run folder there: the user's own
    files of hwsim's names in the copy are not replaced, nor any file its list names."""
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / MARKER).write_bytes((out / MARKER).read_bytes())
    (copy / "summary.json").write_text("my notes")
    with pytest.raises(OutputError, match="was made for another folder"):
        write_run_outputs(pipeline_trace(3), copy, plots=False)
    assert (copy / "summary.json").read_text() == "my notes"
    moved = tmp_path / "moved"
    out.rename(moved)  # a move keeps the folder (its inode): still ours
    write_run_outputs(pipeline_trace(3), moved, plots=False)


def test_only_names_hwsim_writes_are_trusted_in_a_marker(tmp_path: Path) -> None:
    """A marker bound to its folder that lists a user's file (edited, or forged by someone who
    can write there) clears only hwsim's own output names."""
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    (out / "docs").mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "docs" / "thesis.tex").write_text("years of work")
    with (out / MARKER).open("a") as marker:
        marker.write("thesis.tex\ndocs/thesis.tex\ndocs/\n")
    write_run_outputs(pipeline_trace(3), out, plots=False)
    assert (out / "thesis.tex").read_text() == (out / "docs" / "thesis.tex").read_text()
    assert (out / "trace.json").is_file()


def test_every_name_a_run_writes_is_trusted(tmp_path: Path) -> None:
    """The writers and ``OUTPUT_NAMES`` agree: a re-run clears everything a run wrote."""
    from hwsim.run_marker import trusted_name

    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out)
    written = (out / MARKER).read_text().splitlines()[3:]
    with claim_folder(out) as folder:  # the bridge's report and per-call folders
        folder.write_text("report.json", "{}")
        folder.write_text("report.txt", "")
        for name in ("graph3_call1", "graph0.s1_call12_timeline"):
            folder.child(name).close()
    written += (out / MARKER).read_text().splitlines()[3:]
    assert len(written) >= 15 and all(trusted_name(name) for name in written), written


def test_only_regular_files_are_replaced(tmp_path: Path) -> None:
    """A FIFO, socket or device node where an output goes is refused, even with force, and
    left as it is."""
    import socket
    import stat

    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    with (
        pytest.raises(OutputError, match=r"is a FIFO \(named pipe\), not a regular file"),
        output_file(fifo),
    ):
        pass
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s.json"))
    with (
        pytest.raises(OutputError, match="is a socket, not a regular file"),
        output_file(tmp_path / "s.json"),
    ):
        pass
    sock.close()
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    (out / "summary.json").unlink()
    os.mkfifo(out / "summary.json")  # where one of our files was: refused, not replaced
    with pytest.raises(OutputError, match=r"summary\.json is a FIFO"):
        write_run_outputs(pipeline_trace(3), out, plots=False, force=True)
    assert stat.S_ISFIFO(os.lstat(out / "summary.json").st_mode)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_default_path_replaces_only_a_file_hwsim_wrote(tmp_path: Path) -> None:
    from hwsim.plots import plot
    from hwsim.trace.outputs import run_data

    figure = tmp_path / "timeline.png"
    figure.write_bytes(b"\x89PNG\r\n\x1a\nsomeone's own figure")
    run = run_data(pipeline_trace(3))
    with (
        pytest.raises(OutputError, match="exists and was not written by hwsim; name where"),
        output_file(figure, "wb", named=False) as stream,
    ):
        plot("timeline", run, stream)
    assert figure.read_bytes().endswith(b"someone's own figure")
    figure.unlink()
    for _ in range(2):  # the second time the file is ours (hwsim's mark): replaced
        with output_file(figure, "wb", named=False) as stream:
            plot("timeline", run, stream)
    with output_file(figure, "wb") as stream:  # a path the user names: replaced, as -o does
        stream.write(b"x")
    assert figure.read_bytes() == b"x"


def test_a_listed_link_is_removed_unfollowed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    for name in os.listdir(out / "tables"):
        (out / "tables" / name).unlink()
    (out / "tables").rmdir()
    (out / "tables").symlink_to(victim)  # our tables/ replaced by a link to someone's folder
    write_run_outputs(pipeline_trace(3), out, plots=False)
    assert [p.name for p in victim.iterdir()] == ["keep.txt"]
    assert (out / "tables").is_dir() and not (out / "tables").is_symlink()


def test_derived_folders_are_made_without_following_links(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "db-traces").symlink_to(elsewhere)
    with pytest.raises(OutputError, match="db-traces is a symlink or a file"):
        claim_folder(tmp_path / "db-traces" / "w" / "h", within=tmp_path)
    with pytest.raises(OutputError, match="is not inside"):
        claim_folder(tmp_path.parent / "x", within=tmp_path)
    with claim_folder(tmp_path / "made" / "w" / "h", within=tmp_path) as folder:
        folder.write_text("a.txt", "a")
    assert (tmp_path / "made" / "w" / "h" / "a.txt").read_text() == "a"
    assert list(elsewhere.iterdir()) == []


def test_names_stay_inside_the_folder(tmp_path: Path) -> None:
    with claim_folder(tmp_path / "run") as folder:
        for name in ("../x", "/etc/x", "a/b", "..", ""):
            with pytest.raises(OutputError, match="not a plain file name"):
                folder.write_text(name, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_output_file_refuses_a_link_and_a_folder_and_joins_our_marker(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    link = tmp_path / "out.png"
    link.symlink_to(victim)
    with pytest.raises(OutputError, match="is a symlink"), output_file(link):
        pass
    with pytest.raises(OutputError, match="is a folder"), output_file(tmp_path):
        pass
    assert victim.read_text() == "keep"
    out = tmp_path / "run"
    write_run_outputs(pipeline_trace(3), out, plots=False)
    with output_file(out / "mine.png", "wb") as file:
        file.write(b"png")
    assert "mine.png" in (out / MARKER).read_text().splitlines()


def test_a_session_folder_is_claimed_once_per_process(tmp_path: Path) -> None:
    first = session_folder(tmp_path / "t")
    first.write_text("report.json", "{}")
    assert session_folder(tmp_path / "t") is first  # the next graph's claim keeps report.json
    assert (tmp_path / "t" / "report.json").is_file()
