"""The upstream kernels the calibration cases run (third_party/, each with its SOURCE.md) are the
published files, byte for byte: checked against a local mirror of the upstream repository when
one is present (skipped otherwise), and by their recorded git blob hashes always."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from hwsim.nki.upstream import MIRROR

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = MIRROR  # beside the checkout, or HWSIM_NKI_MIRROR
SAMPLES = ROOT / "third_party" / "nki-samples-5d97201"
DOCS = ROOT / "third_party" / "neuron-sdk-docs-db1586c3"
DMA_DOCS = ROOT / "third_party" / "neuron-sdk-docs-fb4ce106"
DMA_EXAMPLE = "nki/get-started/about/nki-dma-overview/tensor_exp_kernel_isa.py"
TUTORIAL = "src/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"
#: (vendored file, rst lines of its code block) of the kernel-optimization page at db1586c3
DOC_BLOCKS = {
    "nki/how-to-guides/kernel-optimization/tiled.py": 201,
    "nki/how-to-guides/kernel-optimization/block_all.py": 623,
}


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def code_blocks(text: str) -> dict[int, str]:
    """Each top-level ``.. code-block:: python`` of an rst page by the line its body starts on
    (1-based), extracted by the rule SOURCE.md states."""
    lines = text.split("\n")
    blocks = {}
    i = 0
    while i < len(lines):
        if lines[i] != ".. code-block:: python":
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        indent = len(lines[j]) - len(lines[j].lstrip(" "))
        k = j
        body = []
        while k < len(lines) and (not lines[k].strip() or lines[k].startswith(" " * indent)):
            body.append(lines[k][indent:])
            k += 1
        while body and not body[-1].strip():
            body.pop()
        blocks[j + 1] = "\n".join(body) + "\n"
        i = k
    return blocks


def test_the_v1_tutorial_file_is_the_blob_the_published_table_came_with():
    # aws-neuron-sdk 72825d50 (SDK 2.20): the tutorial page with the latency table includes
    # this blob; nki-samples 5d97201 holds the same one (SOURCE.md)
    data = (SAMPLES / TUTORIAL).read_bytes()
    assert git_blob(data) == "7aeb5d65b61c5dc45b18bf495a8c59fe33342056"
    assert (SAMPLES / "LICENSE").read_text().startswith("MIT No Attribution")


def test_the_kernel_optimization_blocks_are_vendored_with_their_licence():
    assert "MIT" in (DOCS / "LICENSE-SAMPLECODE").read_text()
    for name in DOC_BLOCKS:
        text = (DOCS / name).read_text()
        assert text.startswith("import nki\n") and '@nki.jit(platform_target="trn2")' in text


def _show(repo: Path, spec: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "show", spec], check=True, capture_output=True
    ).stdout


@pytest.mark.skipif(
    not (MIRRORS / "aws-neuron+nki-samples" / "repo").exists(), reason="no nki-samples mirror"
)
def test_the_v1_tutorial_file_equals_the_upstream_commit():
    repo = MIRRORS / "aws-neuron+nki-samples" / "repo"
    assert _show(repo, f"5d97201:{TUTORIAL}") == (SAMPLES / TUTORIAL).read_bytes()
    assert _show(repo, "5d97201:LICENSE") == (SAMPLES / "LICENSE").read_bytes()


@pytest.mark.skipif(
    not (MIRRORS / "aws-neuron+aws-neuron-sdk" / "repo").exists(),
    reason="no aws-neuron-sdk mirror",
)
def test_the_kernel_optimization_blocks_equal_the_upstream_page():
    repo = MIRRORS / "aws-neuron+aws-neuron-sdk" / "repo"
    page = _show(repo, "db1586c3:nki/how-to-guides/kernel-optimization.rst").decode()
    blocks = code_blocks(page)
    for name, line in DOC_BLOCKS.items():
        assert blocks[line] == (DOCS / name).read_text(), name
    assert _show(repo, "db1586c3:LICENSE-SAMPLECODE") == (DOCS / "LICENSE-SAMPLECODE").read_bytes()


@pytest.mark.skipif(
    not (MIRRORS / "aws-neuron+aws-neuron-sdk" / "repo").exists(),
    reason="no aws-neuron-sdk mirror",
)
def test_the_dma_overview_example_equals_the_upstream_page():
    repo = MIRRORS / "aws-neuron+aws-neuron-sdk" / "repo"
    page = _show(repo, "fb4ce106:nki/get-started/about/nki-dma-overview.rst").decode()
    assert code_blocks(page)[111] == (DMA_DOCS / DMA_EXAMPLE).read_text()
    assert (
        _show(repo, "fb4ce106:LICENSE-SAMPLECODE") == (DMA_DOCS / "LICENSE-SAMPLECODE").read_bytes()
    )
