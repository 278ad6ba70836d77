"""The ``hwsim`` command follows the conventions of the CLIs it sits beside (pytest, torch):
``--version``, ``--debug`` before or after the subcommand, one error prefix, plugin commands
described in ``--help`` without importing them, and a closed pipe ending output quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hwsim
from hwsim.cli.main import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"hwsim {hwsim.__version__}"


def test_no_command_is_one_line_with_one_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("hwsim: error: the following arguments are required: COMMAND")


def test_a_subcommand_error_names_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "spec.yaml", "--jobs", "x"]) == 2
    assert capsys.readouterr().err.startswith("hwsim: error: hwsim sweep: argument --jobs")


@pytest.mark.parametrize(
    "argv", [["--debug", "config", "show", "nosuch"], ["config", "show", "nosuch", "--debug"]]
)
def test_debug_before_or_after_the_subcommand_shows_the_traceback(argv: list[str]) -> None:
    from hwsim.errors import ConfigError

    with pytest.raises(ConfigError, match="nosuch"):
        main(argv)


def test_without_debug_the_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "nosuch"]) == 2
    assert capsys.readouterr().err.startswith("hwsim: error: nosuch: not a preset")


def test_plugin_commands_are_described_without_importing_torch() -> None:
    code = (
        "import sys; from hwsim.cli.main import build_parser; "
        "text = build_parser(['--help']).format_help(); "
        "print('torch' in sys.modules); print(text)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[0] == "False"
    assert "lower a torch model once into a saved program" in out
    assert "run an unmodified NKI kernel file on the simulator" in out
    assert "(from " not in out


def test_a_closed_pipe_ends_the_output_quietly() -> None:
    """The reader has gone (``| head -c 10``) when hwsim writes: no BrokenPipeError traceback,
    and the exit status a shell gives a writer the pipe closed on."""
    code = (
        "import os, sys\n"
        "read_end, write_end = os.pipe()\n"
        "os.close(read_end)\n"
        "os.dup2(write_end, 1)\n"
        "from hwsim.cli.main import main\n"
        "sys.exit(main(['config', 'schema']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141
