"""Where each ATen call on hwsim tensors goes: host <-> device copies (timed transfers), views,
allocations, in-place writes, and everything else through the device session.

- **Copies** across the host link (``copy_`` between a CPU and a hwsim tensor, ``_to_copy`` to
  the CPU, ``.item()``) move the bytes between the host tensors and are recorded as transfers.
- **Views** (any op whose result aliases an input) stay views of the host tensor.
- **Allocations** (``empty_like``, ``new_empty``...) allocate host bytes; no device work.
- **In-place ops** with a functional twin (``add_`` -> ``add``, ``zero_`` -> ``zeros_like``,
  ``copy_`` -> ``copy``...) run the twin on the simulator (checked, recorded) and write the
  result into the tensor, with PyTorch's in-place rules (same shape, a castable dtype, no
  overlapping elements). Other mutating ops run on the CPU (fallback policy, counted).
- **Everything else** runs through ``HwsimMode.run_call``: simulated and checked, or run on
  the CPU under the fallback policy.

Tensors of two devices in one op raise, as PyTorch does (CPU 0-dim tensors are scalars). Ops
that change a tensor's shape in place (``resize_``, ``t_``...) raise: a hwsim tensor's metadata
is fixed when it is made.

While torch.compile traces (the host tensors are FakeTensors) or under ``host_reference()``, the
same calls run plainly on the host tensors: nothing is simulated or recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from hwsim.bridge.device_session import TO_DEVICE, TO_HOST, DeviceSession, current_session
from hwsim.bridge.device_tensor import BACKEND, DEVICE, HwsimTensor, host_of, in_host_reference
from hwsim.bridge.errors import op_name

aten = torch.ops.aten

#: In-place ops whose functional twin is not ``<name>.<same overload>``.
FUNCTIONAL_TWINS = {
    aten.zero_.default: aten.zeros_like.default,
    aten.fill_.Scalar: aten.full_like.default,
}

#: Allocations: host bytes, nothing computed.
ALLOCATIONS = frozenset(
    {
        aten.empty_like.default,
        aten.empty.memory_format,
        aten.empty_strided.default,
        aten.new_empty.default,
        aten.new_empty_strided.default,
    }
)

#: In-place ops that change a tensor's shape, strides or storage.
RESHAPING = frozenset(
    {
        "resize_",
        "resize_as_",
        "set_",
        "as_strided_",
        "t_",
        "transpose_",
        "squeeze_",
        "unsqueeze_",
        "swapdims_",
        "swapaxes_",
    }
)


def dispatch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``HwsimTensor.__torch_dispatch__``: one ATen call (see the module docstring)."""
    _refuse_reshaping(func, args)
    if func is aten.detach_.default:  # autograd state only: above this layer
        return args[0]
    if _host_only(args, kwargs):
        return _on_host(func, args, kwargs)
    return _on_device(current_session(), func, args, kwargs)


def _on_device(session: DeviceSession, func: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
    transfer = TRANSFERS.get(func)
    if transfer is not None:
        return transfer(session, args, kwargs)
    _check_one_device(func, args, kwargs)
    host_args, host_kwargs = _hosts(args, kwargs)
    if not _targets_device(kwargs):  # zeros_like(x, device="cpu"): metadata of x only
        return func(*host_args, **host_kwargs)
    if func in ALLOCATIONS:
        return _wrap(func(*host_args, **host_kwargs), args, kwargs)
    if _writes_inputs(func):
        return _mutate(session, func, args, kwargs, (host_args, host_kwargs))
    return _wrap(session.run_call(func, host_args, host_kwargs), args, kwargs)


def _mutate(
    session: DeviceSession, func: Any, args: tuple[Any, ...], kwargs: Any, hosts: Any
) -> Any:
    """An op that writes its arguments: its functional twin on the simulator, written back, or
    the op itself on the CPU (the fallback policy decides)."""
    host_args, host_kwargs = hosts
    written = [
        value
        for value, argument in zip(args, func._schema.arguments, strict=False)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]
    for value in written:
        if isinstance(value, torch.Tensor) and not isinstance(value, HwsimTensor):
            raise RuntimeError(
                f"hwsim: {op_name(func)} would write a tensor on {value.device} with tensors "
                f"on {DEVICE}; move it with .to('{BACKEND}')"
            )
    twin = functional_twin(func)
    if twin is not None:
        result = session.run_call(twin, host_args, host_kwargs)
        write_back(func, args[0]._host, result)
        return args[0]
    out = session.run_call(func, host_args, host_kwargs)
    _check_metadata_kept(func, (args, kwargs))
    return _wrap(out, args, kwargs)


def _on_host(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    host_args, host_kwargs = _hosts(args, kwargs, tracing=True)
    out = func(*host_args, **host_kwargs)
    if not _targets_device(kwargs):
        return out
    if _writes_inputs(func):
        _check_metadata_kept(func, (args, kwargs))
    return _wrap(out, args, kwargs)


# ---- copies across the host link -----------------------------------------------------------------
def copy_into(session: DeviceSession | None, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` where at least one is a hwsim tensor; a transfer if one is not."""
    if isinstance(dst, HwsimTensor) and isinstance(src, HwsimTensor):
        if session is None:
            dst._host.copy_(src._host)
            return dst
        result = session.run_call(aten.copy.default, (dst._host, src._host), {})
        write_back(aten.copy_.default, dst._host, result)
        return dst
    if isinstance(dst, HwsimTensor):
        dst._host.copy_(src)
        if session is not None:
            session.transfer(TO_DEVICE, dst)
        return dst
    dst.copy_(host_of(src))
    if session is not None:
        session.transfer(TO_HOST, src)
    return dst


def _copy_(session: DeviceSession, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return copy_into(session, args[0], args[1])


def _to_copy(session: DeviceSession, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (tensor,) = args
    if _targets_device(kwargs):  # a cast or copy on the device
        on_device = {**kwargs, "device": None}
        return _wrap(session.run_call(aten._to_copy.default, (tensor._host,), on_device), args, {})
    out = aten._to_copy.default(tensor._host, **kwargs)
    if torch.device(kwargs["device"]).type == "cpu":
        session.transfer(TO_HOST, tensor)
    return out


def _item(session: DeviceSession, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    (tensor,) = args
    value = aten._local_scalar_dense.default(tensor._host)
    session.transfer(TO_HOST, tensor)
    return value


TRANSFERS: dict[Any, Callable[[DeviceSession, tuple[Any, ...], dict[str, Any]], Any]] = {
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _item,
}


# ---- in-place writes -----------------------------------------------------------------------------
def _writes_inputs(func: Any) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


def functional_twin(func: Any) -> Any:
    """The out-of-place op computing what in-place ``func`` writes into its first argument
    (``add_.Tensor`` -> ``add.Tensor``), or None if there is none with the same arguments."""
    if func in FUNCTIONAL_TWINS:
        return FUNCTIONAL_TWINS[func]
    arguments = func._schema.arguments
    writes = [a.alias_info is not None and a.alias_info.is_write for a in arguments]
    if not writes or not writes[0] or any(writes[1:]):
        return None
    name = func._schema.name.split("::")[1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    twin = getattr(packet, func._overloadname, None) if packet is not None else None
    if twin is None or [a.name for a in twin._schema.arguments] != [a.name for a in arguments]:
        return None
    returns = twin._schema.returns
    if len(returns) != 1 or returns[0].alias_info is not None:
        return None
    return twin


def write_back(func: Any, host: torch.Tensor, result: torch.Tensor) -> None:
    """Write ``result`` into ``host`` as in-place ``func`` would, with PyTorch's rules."""
    where = f"hwsim: {op_name(func)}"
    if tuple(result.shape) != tuple(host.shape):
        raise RuntimeError(
            f"{where}: output with shape {list(host.shape)} doesn't match the broadcast shape "
            f"{list(result.shape)}"
        )
    if result.dtype != host.dtype and not torch.can_cast(result.dtype, host.dtype):
        raise RuntimeError(
            f"{where}: result type {result.dtype} can't be cast to the desired output type "
            f"{host.dtype}"
        )
    if torch._debug_has_internal_overlap(host) == 1:
        raise RuntimeError(
            f"{where}: unsupported operation: more than one element of the written-to tensor "
            "refers to a single memory location. Please clone() the tensor before performing "
            "the operation."
        )
    host.copy_(result)


def _refuse_reshaping(func: Any, args: tuple[Any, ...]) -> None:
    name = func._schema.name.split("::")[1]
    if name not in RESHAPING:
        return
    if name == "resize_" and list(args[0].shape) == list(args[1]):
        return  # the shape it has already: nothing changes
    raise NotImplementedError(
        f"hwsim: {op_name(func)} changes a tensor's shape or storage in place, which the "
        f"{BACKEND} device does not support; use the out-of-place form "
        f"({name.rstrip('_')}) or make the tensor with the shape it needs"
    )


def _check_metadata_kept(func: Any, args: Any) -> None:
    """A mutating op (an ``out=`` variant run on the host) must not have resized its output."""
    for value in pytree.tree_leaves(args):
        if not isinstance(value, HwsimTensor):
            continue
        host = value._host
        mine = (tuple(value.shape), value.stride(), value.storage_offset())
        theirs = (tuple(host.shape), host.stride(), host.storage_offset())
        if mine != theirs:
            raise RuntimeError(
                f"hwsim: {op_name(func)} resized or restrided its argument in place "
                f"({mine} -> {theirs}); a {BACKEND} tensor's shape is fixed when it is made: "
                "give out= a tensor of the result's shape"
            )


# ---- devices and wrapping ------------------------------------------------------------------------
def _host_only(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Tracing (FakeTensor or functional host tensors), or inside ``host_reference()``."""
    if in_host_reference():
        return True
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, HwsimTensor):
            if type(leaf._host) is not torch.Tensor:
                return True
        elif isinstance(leaf, torch.Tensor) and leaf.device.type == BACKEND:
            return True  # a tensor a factory made on the device while dynamo traces
    return False


def _hosts(args: Any, kwargs: Any, *, tracing: bool = False) -> tuple[Any, Any]:
    """Arguments for the host: hwsim tensors by their host tensors, the device by the CPU.

    While tracing, a plain tensor on the device (a factory's result under FakeTensorMode) is
    copied to the CPU, which is where everything of the device lives in the traced program."""

    def host(value: Any) -> Any:
        if isinstance(value, HwsimTensor):
            return value._host
        if tracing and isinstance(value, torch.Tensor) and value.device.type == BACKEND:
            return value.to("cpu")
        if isinstance(value, torch.device) and value.type == BACKEND:
            return torch.device("cpu")
        return value

    return pytree.tree_map(host, (args, kwargs))


def _targets_device(kwargs: dict[str, Any]) -> bool:
    """Whether the results stay on the device (no ``device=`` naming another one)."""
    device = kwargs.get("device")
    return device is None or torch.device(device).type == BACKEND


def _check_one_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, HwsimTensor) or not isinstance(leaf, torch.Tensor):
            continue
        if leaf.device.type == "cpu" and leaf.dim() == 0:
            continue  # a CPU scalar, as PyTorch allows with any device
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{DEVICE} and {leaf.device}! (hwsim: {op_name(func)}; move the tensor with "
            f".to('{BACKEND}'))"
        )


def _wrap(out: Any, args: Any, kwargs: Any) -> Any:
    """Results as hwsim tensors; a result that is an input's tensor (in place, out=) is that
    input."""
    known: dict[int, torch.Tensor] = {}
    for leaf in pytree.tree_leaves((args, kwargs)):
        if isinstance(leaf, HwsimTensor):
            known[id(leaf._host)] = leaf
        elif isinstance(leaf, torch.Tensor):
            known[id(leaf)] = leaf

    def wrap(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        same = known.get(id(value))
        return same if same is not None else HwsimTensor(value)

    return pytree.tree_map(wrap, out)
