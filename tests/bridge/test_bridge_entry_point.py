"""The torch_dynamo_backends entry point, and that ``import torch`` alone loads no bridge code."""

from __future__ import annotations

import subprocess
import sys

import torch._dynamo


def test_hwsim_is_a_registered_dynamo_backend():
    assert "hwsim" in torch._dynamo.list_backends(), (
        "the 'hwsim' entry point is not installed: run `pip install --no-deps -e .`"
    )


def test_import_torch_does_not_import_the_bridge():
    code = (
        "import sys, torch; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bridge', 'hwsim')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
