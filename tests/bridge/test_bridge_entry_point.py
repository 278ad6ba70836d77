"""The torch_dynamo_backends entry point, that ``import torch`` alone loads no bridge code, and that
importing the bridge registers the ``hwsim`` device."""

from __future__ import annotations

import subprocess
import sys

import torch._dynamo


def test_hwsim_is_a_registered_dynamo_backend():
    assert "hwsim" in torch._dynamo.list_backends(), (
        "the 'hwsim' entry point is not installed: run `pip install --no-deps -e .`"
    )


def test_import_torch_does_not_import_the_bridge_and_importing_it_registers_the_device():
    code = (
        "import sys, torch; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('bridge', 'hwsim'))); "
        "print(torch._C._get_privateuse1_backend_name()); "
        "import hwsim.bridge; print(torch._C._get_privateuse1_backend_name()); "
        "print(torch.hwsim.__name__, torch.hwsim.device_count(), torch.ones(2).hwsim().is_hwsim)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:-1] == [
        "[]",
        "privateuseone",
        "hwsim",
        "hwsim.bridge.device 1 True",
    ]
