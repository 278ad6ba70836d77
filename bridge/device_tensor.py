"""``HwsimTensor``: a tensor on the ``hwsim`` device, whose bytes (simulated HBM) are a CPU tensor.

A wrapper subclass (``torch.Tensor._make_wrapper_subclass``) on the device ``hwsim:0``: it has the
metadata of its host tensor ``_host`` (shape, strides, storage offset, dtype) and no storage of
its own. Every ATen call that reaches it (below autograd, where a TorchDispatchMode would see it)
goes to ``bridge.device_ops.dispatch``. Views share their base's host storage, so aliasing and
in-place writes through views behave as PyTorch defines them.

It is a traceable subclass (``__tensor_flatten__`` / ``__tensor_unflatten__``), so torch.compile
sees through it: dynamo and AOTAutograd trace the program on the host tensors (plain CPU tensors,
what the bridge's lowering core takes), and AOTAutograd's runtime wrapper wraps the outputs back.

``host_reference()`` makes device ops run plainly on the host (no simulator, no report): the
compile front door computes its eager reference under it (``bridge.eager_check``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

#: The device's name (PyTorch's PrivateUse1 backend renamed) and its one device.
BACKEND = "hwsim"
DEVICE = "hwsim:0"

_reference_depth = [0]  # all threads: the autograd engine runs device backward on its own thread
_reference_lock = threading.Lock()


@contextmanager
def host_reference() -> Iterator[None]:
    """Within the block, ops on hwsim tensors run on their host tensors (in every thread)."""
    with _reference_lock:
        _reference_depth[0] += 1
    try:
        yield
    finally:
        with _reference_lock:
            _reference_depth[0] -= 1


def in_host_reference() -> bool:
    return _reference_depth[0] > 0


class HwsimTensor(torch.Tensor):
    """A tensor on ``hwsim:0`` (see the module docstring). Build one with ``x.to("hwsim")``."""

    _host: torch.Tensor

    @staticmethod
    def __new__(cls, host: torch.Tensor) -> HwsimTensor:
        if isinstance(host, HwsimTensor):
            raise TypeError("HwsimTensor wraps a host (CPU) tensor, not another HwsimTensor")
        tensor = torch.Tensor._make_wrapper_subclass(
            cls,
            host.shape,
            strides=host.stride(),
            storage_offset=host.storage_offset(),
            dtype=host.dtype,
            layout=host.layout,
            device=torch.device(DEVICE),
            requires_grad=False,
        )
        tensor._host = host
        if type(host) is torch.Tensor:  # real bytes (not a tracing FakeTensor): count them
            from hwsim.bridge.device_memory import MEMORY

            MEMORY.track(host)
        return tensor

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    @classmethod
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        from hwsim.bridge.device_ops import dispatch

        return dispatch(func, tuple(args), kwargs or {})

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["_host"], None

    @staticmethod
    def __tensor_unflatten__(
        inner: dict[str, torch.Tensor], meta: None, outer_size: Any, outer_stride: Any
    ) -> HwsimTensor:
        return HwsimTensor(inner["_host"])

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        """The host tensor's values, with this tensor's device and autograd state (no
        transfer is recorded for printing)."""
        text = repr(self._host.detach())
        suffix = f", device='{self.device}'"
        if self.grad_fn is not None:
            suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            suffix += ", requires_grad=True"
        return text[:-1] + suffix + ")"

    def __reduce_ex__(self, protocol: Any) -> Any:
        """``torch.save``: its host tensor, rebuilt on the device by ``torch.load``
        (``weights_only`` loads allow it; ``map_location`` applies)."""
        if getattr(self, "_is_param", False):  # a Parameter moved by Module.to (swapped in)
            with host_reference():
                data = self.detach()
            return torch._utils._rebuild_parameter, (data, self.requires_grad, OrderedDict())
        rebuild = torch._utils._rebuild_device_tensor_from_cpu_tensor
        return rebuild, (self._host.detach(), self.dtype, str(self.device), self.requires_grad)

    # ``param.data = other`` copies the TensorImpl's metadata only; the host must follow.
    @property
    def data(self) -> torch.Tensor:
        return torch.Tensor.data.__get__(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        if not isinstance(value, HwsimTensor):
            raise RuntimeError(
                f"hwsim: cannot set .data of a tensor on {DEVICE} to a tensor on {value.device}; "
                f"move it first (value.to('{BACKEND}'))"
            )
        torch.Tensor.data.__set__(self, value)  # type: ignore[attr-defined]
        self._host = value._host


def host_of(value: Any) -> Any:
    """The host tensor of a hwsim tensor; anything else unchanged."""
    return value._host if isinstance(value, HwsimTensor) else value
