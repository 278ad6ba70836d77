"""Every code block of the README and docs/ runs as written (``tests/docs/blocks.py`` says how a
block's language decides what is run), each page in a fresh folder beside a view of the checkout,
and the documentation site builds with no broken link or anchor.

The default run checks every block without running it (python blocks compile; every ``hwsim``
command parses with the real argument parser) and runs the pages that take seconds; the slow run
(``make test-all``) runs every block of every page.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, blocks_of, pages

VENV_BIN = str(Path(sys.executable).parent)
#: What a page's folder sees of the checkout (outputs go beside these links, never into them).
SHARED = (
    "bench",
    "configs",
    "hwsim",
    "bridge",
    "kernels",
    "tests",
    "third_party",
    "pyproject.toml",
)
PAGES = [str(p.relative_to(ROOT)) for p in pages()]
#: Pages whose blocks take minutes (each simulates models or many kernels): run by the slow run
#: only, and statically checked in the default one.
HEAVY_PAGES = {
    "docs/cli.md": "runs most commands, each simulating a kernel and drawing its plots",
    "docs/export.md": "exports and simulates GPT-2 and Llama several times",
    "docs/models.md": "Hugging Face models and generation",
    "docs/pytorch.md": "exports, runs and validates models",
    "docs/sweeps.md": "a 40-run sweep",
    "docs/training.md": "training steps of tiny GPT-2",
}


def _run_page(page: str, tmp_path: Path, slow: bool) -> None:
    for name in SHARED:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    args = [sys.executable, str(ROOT / "tests" / "docs" / "run_blocks.py"), page, VENV_BIN]
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [*args, *(["--slow"] if slow else [])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]


@pytest.mark.parametrize("page", [p for p in PAGES if p not in HEAVY_PAGES])
def test_page_blocks_run(page: str, tmp_path: Path) -> None:
    if not any(
        b.mode == "run" and b.kind in ("python", "commands") for b in blocks_of(ROOT / page)
    ):
        pytest.skip(f"{page} has no block to run")
    _run_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run_all(page: str, tmp_path: Path) -> None:
    if not any(
        b.mode != "skip" and b.kind in ("python", "commands") for b in blocks_of(ROOT / page)
    ):
        pytest.skip(f"{page} has no block to run")
    _run_page(page, tmp_path, slow=True)


def test_python_blocks_compile() -> None:
    for page in pages():
        for block in blocks_of(page):
            if block.kind == "python" or block.save_as.endswith(".py"):
                compile(block.text, block.where, "exec")


def test_hwsim_commands_parse() -> None:
    """Each documented ``hwsim`` command's subcommand and flags exist (what would fail first)."""
    from hwsim.cli.main import build_parser

    for page in pages():
        for block in blocks_of(page):
            for command, _ in block.expected:
                words = shlex.split(command, comments=True)
                if not words or not re.fullmatch(r"(\.venv/bin/)?hwsim", words[0]):
                    continue
                argv = words[1:]
                try:
                    build_parser(argv).parse_args(argv)
                except SystemExit as exc:
                    assert exc.code == 0, f"{block.where}: `{command}` does not parse"


def test_every_skip_names_its_reason() -> None:
    for page in pages():
        for block in blocks_of(page):
            if block.mode == "skip":
                assert block.reason, block.where


def test_site_builds_without_broken_links(tmp_path: Path) -> None:
    mkdocs = Path(VENV_BIN) / "mkdocs"
    assert mkdocs.exists(), "mkdocs is missing: make setup installs the 'docs' extra"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://")):
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
