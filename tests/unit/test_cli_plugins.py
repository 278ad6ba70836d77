"""Commands other packages add (``hwsim.commands`` entry points); hwsim never imports torch."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import EntryPoint
from typing import Any

import pytest

cli = importlib.import_module("hwsim.cli.main")  # hwsim.cli.main is also the function

loaded: list[str] = []


def register_hello(commands: Any) -> None:
    """A plugin's register function (the entry point below names it)."""
    loaded.append("hello")
    parser = commands.add_parser("hello", help="say hello")
    parser.add_argument("who")
    parser.set_defaults(handler=lambda args: print(f"hello {args.who}") or 3)


@pytest.fixture
def hello_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    point = EntryPoint("hello", f"{__name__}:register_hello", cli.PLUGIN_GROUP)
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group=None: [point] if group == cli.PLUGIN_GROUP else [],
    )
    loaded.clear()


def test_plugin_command_is_loaded_only_when_it_runs(
    hello_plugin: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"
    assert loaded == ["hello"]
    loaded.clear()
    assert cli.main(["config", "list"]) == 0
    assert loaded == []


def test_help_lists_plugin_commands_without_loading_them(
    hello_plugin: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "hello" in capsys.readouterr().out
    assert loaded == []


def test_the_hwsim_cli_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from hwsim.cli.main import main\n"
        "main(['config', 'list'])\n"
        "main(['run', '--list'])\n"
        "assert 'torch' not in sys.modules and 'hwsim.bridge' not in sys.modules, 'torch'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
