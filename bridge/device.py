"""The ``hwsim`` PyTorch device: ``model.to("hwsim")``, ``x.to("hwsim")``, then run as usual.

Importing ``hwsim.bridge`` registers it (``register()``): PyTorch's PrivateUse1 backend renamed
``hwsim``, its Tensor/Module methods (``x.hwsim()``, ``x.is_hwsim``), this module as
``torch.hwsim`` (PyTorch's backend-module API: ``device_count``, AMP dtypes, memory), Python
device hooks and guard (``torch._C._acc``), factory kernels for the PrivateUse1 key (``empty``,
``empty_strided``, ``arange``, ``eye``, ``_copy_from``) and autocast (``bridge.device_autocast``).
Pure Python: nothing is compiled.

A tensor on the device is an ``HwsimTensor`` (``bridge.device_tensor``): its bytes, the
simulated HBM, are a CPU tensor. Eager ops on it run one by one on the simulator, each checked
against the CPU, through ``HwsimMode``'s machinery (``bridge.device_ops``, ``device_session``);
``torch.compile(model, backend="hwsim")`` compiles graphs whose inputs are on the device.

What the device did is in ``report()`` (a ``bridge.Report``: every op, where it ran, its simulated
time and error against the CPU, the host <-> device transfers) and ``summary()`` (counts and
times); ``configure(config, fallback=..., auto_cast=..., check=...)`` starts a new report with
new options (those of ``bridge.options``). The device's RNG is the CPU's generator: random fills
run on the CPU (counted as fallbacks), so ``torch.manual_seed`` seeds them.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from hwsim.bridge.device_tensor import BACKEND, HwsimTensor

aten = torch.ops.aten
_LIBRARIES: list[torch.library.Library] = []


class DeviceUnavailable(RuntimeError):
    """The process already has another PrivateUse1 backend (PyTorch allows one)."""


def register() -> None:
    """Make ``hwsim`` a PyTorch device (once per process; see the module docstring)."""
    if _LIBRARIES:
        return
    name = torch._C._get_privateuse1_backend_name()
    if name not in ("privateuseone", BACKEND):
        raise DeviceUnavailable(
            f"hwsim: PyTorch's PrivateUse1 backend is already '{name}'; a process has one "
            "PrivateUse1 device, so the hwsim device is not registered (torch.compile's "
            "backend and HwsimMode still work)"
        )
    if name != BACKEND:
        torch.utils.rename_privateuse1_backend(BACKEND)
        torch.utils.generate_methods_for_privateuse1_backend()
    torch._register_device_module(BACKEND, sys.modules[__name__])
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _LIBRARIES.append(_factory_kernels())
    from hwsim.bridge import device_autocast

    device_autocast.register()


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self) -> Any:
        return torch._C._autograd.DeviceType.PrivateUse1


# ---- kernels for the PrivateUse1 key (calls that no hwsim tensor takes part in) ---------------
def _empty(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> HwsimTensor:  # fmt: skip
    _no_pinned(pin_memory, device)
    return HwsimTensor(torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format))


def _empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None,
                   device: Any = None, pin_memory: Any = None) -> HwsimTensor:  # fmt: skip
    _no_pinned(pin_memory, device)
    return HwsimTensor(torch.empty_strided(size, stride, dtype=dtype, layout=layout))


def _no_pinned(pin_memory: Any, device: Any = None) -> None:
    """Refuse what the device does not have: pinned host memory, a device other than hwsim:0."""
    if pin_memory:
        raise NotImplementedError("hwsim: pinned memory is not supported on the hwsim device")
    if device is not None:
        set_device(device)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """What ``copy_`` calls when the Python layer is off (``torch.tensor(..., device=)``)."""
    from hwsim.bridge.device_ops import copy_into
    from hwsim.bridge.device_session import current_session
    from hwsim.bridge.device_tensor import in_host_reference

    return copy_into(None if in_host_reference() else current_session(), dst, src)


def _made_on_host(op: Any) -> Any:
    """A factory whose CompositeExplicit form would resize an empty device tensor (arange,
    eye): made on the host (simulated when lowered) and wrapped."""

    def factory(*args: Any, **kwargs: Any) -> HwsimTensor:
        from hwsim.bridge.device_session import current_session
        from hwsim.bridge.device_tensor import in_host_reference

        _no_pinned(kwargs.get("pin_memory"), kwargs.get("device"))
        kwargs = {**kwargs, "device": torch.device("cpu")}
        if in_host_reference():
            return HwsimTensor(op(*args, **kwargs))
        return HwsimTensor(current_session().run_call(op, args, kwargs))

    return factory


HOST_MADE_FACTORIES = (
    aten.arange.default,
    aten.arange.start,
    aten.arange.start_step,
    aten.eye.default,
    aten.eye.m,
)


def _factory_kernels() -> torch.library.Library:
    library = torch.library.Library("aten", "IMPL")
    library.impl("empty.memory_format", _empty, "PrivateUse1")
    library.impl("empty_strided", _empty_strided, "PrivateUse1")
    library.impl("_copy_from", _copy_from, "PrivateUse1")
    for op in HOST_MADE_FACTORIES:
        name = op._schema.name.split("::")[1]
        overload = "" if op._overloadname == "default" else f".{op._overloadname}"
        library.impl(name + overload, _made_on_host(op), "PrivateUse1")
    return library


# ---- the user's API ----------------------------------------------------------------------------
def configure(config: Any = "trn2", **options: Any) -> Any:
    """Start a new device session: options of ``bridge.options`` (config, fallback, auto_cast,
    check, tiling, initcheck, report), a new report. Returns the report."""
    from hwsim.bridge.device_session import start_session

    return start_session(config, **options).report


def report() -> Any:
    """The ``Report`` of the device's work since the last ``configure`` (or since the first op):
    ops (simulator / cpu / view / transfer), simulated times, errors against the CPU."""
    from hwsim.bridge.device_session import current_session

    return current_session().report


def summary() -> dict[str, Any]:
    """Counts and simulated times of the device's work: ops on the simulator, CPU fallbacks,
    views, transfers (count, bytes, ns each way), total simulated ns, HBM in use and peak."""
    from hwsim.bridge.device_session import current_session

    return current_session().summary()


# ---- PyTorch's backend-module API (torch.hwsim.*) ----------------------------------------------
def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: Any) -> None:
    index = torch.device(device).index if not isinstance(device, int) else device
    if index not in (None, 0):
        raise ValueError(f"hwsim: there is one hwsim device (hwsim:0), not {device!r}")


def synchronize(device: Any = None) -> None:
    """Device work is synchronous: every op has finished when it returns."""


def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """The device draws from the CPU generator (seeded by ``torch.manual_seed``)."""


def manual_seed_all(seed: int) -> None:
    """As ``manual_seed``."""


def get_rng_state(device: Any = "hwsim") -> torch.Tensor:
    """The device's RNG state: the CPU generator's (the device draws from it). PyTorch's
    accelerator helpers read it (``torch.random.fork_rng``, ``torch.testing``'s
    ``freeze_rng_state``, which OpInfo samples use)."""
    return torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "hwsim") -> None:
    """Restore what ``get_rng_state`` returned (the CPU generator's state)."""
    torch.set_rng_state(new_state)


def initial_seed() -> int:
    """The CPU generator's initial seed (the device draws from it)."""
    return torch.initial_seed()


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def memory_allocated(device: Any = None) -> int:
    """Bytes of simulated HBM the device's tensors hold now."""
    from hwsim.bridge.device_memory import MEMORY

    return MEMORY.allocated_bytes


def max_memory_allocated(device: Any = None) -> int:
    """Peak of ``memory_allocated`` since the start or ``reset_peak_memory_stats``."""
    from hwsim.bridge.device_memory import MEMORY

    return MEMORY.peak_bytes


def reset_peak_memory_stats(device: Any = None) -> None:
    from hwsim.bridge.device_memory import MEMORY

    MEMORY.reset_peak()
