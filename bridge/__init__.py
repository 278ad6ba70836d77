"""The PyTorch bridge: runs PyTorch (Core ATen) ops on the simulated NeuronCore.

Front doors, over one lowering core:

- ``torch.compile(model, backend="hwsim", options={...})`` (``bridge.dynamo``; registered as a
  ``torch_dynamo_backends`` entry point): whole graphs lowered into one program, unsupported ops
  partitioned out to the CPU; ``bridge.last_report()`` after a run;
- ``with bridge.HwsimMode("trn2") as mode: ...`` (``bridge.offload``): eager offload, op by op,
  each compared with the CPU; ``mode.report``;
- ``bridge.analyze(model, *inputs)``: the op-support table, before anything runs;
- ``bridge.lower_graph(fx_graph, example_inputs)`` (``bridge.graph_lowering``): the core itself;
- ``bridge.export_program(model, args, "m.hwprog")`` (``bridge.export``): ``torch.export`` lowered
  once into a saved program that ``hwsim run`` and sweeps simulate on many configs, no torch;
- the ``hwsim`` device (``bridge.device``): ``model.to("hwsim")``, ``x.to("hwsim")``, then eager
  ops run on the simulator one by one and ``torch.compile(..., backend="hwsim")`` takes device
  tensors; ``bridge.device.report()``.

Importing ``bridge`` registers the ``hwsim`` device with torch (a few Python registrations) and is
otherwise cheap (names below load on first use), so the dynamo entry point costs nothing until the
backend is used. Imports hwsim, kernels and torch; hwsim never imports bridge.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from hwsim.bridge import device as _device
from hwsim.bridge import distributed as _distributed

_EXPORTS = {
    "HwsimMode": "hwsim.bridge.offload",
    "analyze": "hwsim.bridge.analysis",
    "last_report": "hwsim.bridge.dynamo",
    "hwsim_backend": "hwsim.bridge.dynamo",
    "lower_graph": "hwsim.bridge.graph_lowering",
    "export_program": "hwsim.bridge.export",
    "Precision": "hwsim.bridge.precision",
    "TilingOptions": "hwsim.bridge.context",
    "Report": "hwsim.bridge.report",
    "Unsupported": "hwsim.bridge.errors",
    "FallbackError": "hwsim.bridge.errors",
    "Reason": "hwsim.bridge.errors",
}

__all__ = sorted(_EXPORTS)


def _register_device() -> None:
    """The ``hwsim`` device; with another PrivateUse1 backend loaded, a warning instead (the
    front doors above do not need the device)."""
    try:
        _device.register()
    except _device.DeviceUnavailable as error:
        warnings.warn(str(error), stacklevel=3)


_register_device()
_distributed.register()  # the "hwsim" torch.distributed backend (a registration, nothing more)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
