"""Every code block of the README and docs/ runs as written (``tests/docs/blocks.py`` says how a
block's language decides what is run), each page in a fresh folder beside a view of the checkout,
and the documentation site builds with no broken link or anchor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, blocks_of, pages

VENV_BIN = str(Path(sys.executable).parent)
#: What a page's folder sees of the checkout (read-only by convention: outputs go beside them).
SHARED = ("bench", "configs", "hwsim", "bridge", "kernels", "tests", "third_party", "pyproject.toml")
PAGES = [str(p.relative_to(ROOT)) for p in pages()]


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


@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run(page: str, tmp_path: Path) -> None:
    blocks = blocks_of(ROOT / page)
    if not any(b.mode == "run" and b.kind != "shown" for b in blocks):
        pytest.skip(f"{page} has no block the default run runs")
    _run_page(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_blocks_run_with_slow_ones(page: str, tmp_path: Path) -> None:
    if not any(b.mode == "slow" for b in blocks_of(ROOT / page)):
        pytest.skip(f"{page} has no slow block")
    _run_page(page, tmp_path, slow=True)


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
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if target.startswith(("http://", "https://")):
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
