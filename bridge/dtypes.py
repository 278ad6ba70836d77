"""Torch dtypes on the simulated machine: which map to hardware dtypes, and tensor <-> numpy.

Floats (fp32, bf16, fp16) are what the arithmetic lowerings compute on; int8/16/32 and uint8
tensors are moved, compared, selected and used as indices; integer arithmetic runs on them too
(GpSimdE computes int32 tensor-tensor ops natively; ops with an immediate go through VectorE's
fp32 datapath, exact while values stay within +-2**24).

Two torch dtypes have no hardware twin and are *represented*:

- ``bool`` is ``uint8`` holding 0 or 1 (what comparisons write; ``select`` reads any nonzero as
  true). A cast *to* bool is a comparison with 0, never a numeric conversion.
- ``int64`` is ``int32``: indices, positions and mask arithmetic fit, and the hardware has no
  64-bit integer datapath. The int32 values -2**31 + 1 .. 2**31 - 1 stand for themselves, and
  -2**31 stands for int64's lowest value INT64_MIN, which torch's float -> int64 conversion
  gives for -inf, +inf, NaN and values past int64 (x86's "integer indefinite"; T5's position
  buckets cast ``log(0)``). So an int64 -2**31 has no representation. Values are checked where
  they enter: graph inputs when a run fills them (``check_int64_range`` raises
  ``Int64RangeError`` naming the input), constants and scalars when they are lowered
  (``check_int32``, ``int64_on_device``). Results come back as int64 tensors, -2**31 as
  INT64_MIN. A value *computed* past int32 (a product of large positions) wraps, where torch
  would not, and arithmetic on INT64_MIN computes with -2**31 (the eager check raises when
  such a value reaches an output).

fp64 and complex have no representation. bf16 travels through numpy as ``ml_dtypes.bfloat16``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from hwsim.bridge.errors import BridgeError
from hwsim.dtypes import DType
from hwsim.dtypes import dtype as hw_dtype

#: torch dtype -> hardware dtype name, for every dtype the simulator can hold (or represent).
TORCH_TO_HW: dict[torch.dtype, str] = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.uint8: "uint8",
    torch.int64: "int32",  # represented, range-checked (module docstring)
    torch.bool: "uint8",  # represented as 0/1
}
#: hardware dtype name -> the torch dtype it natively is (representations excluded).
HW_TO_TORCH: dict[str, torch.dtype] = {
    name: dt for dt, name in TORCH_TO_HW.items() if dt not in (torch.int64, torch.bool)
}

#: Dtypes the float arithmetic lowerings accept (the engines compute in fp32 and cast in and out).
FLOAT_DTYPES: frozenset[torch.dtype] = frozenset({torch.float32, torch.bfloat16, torch.float16})
#: Integer dtypes (int64 represented as int32).
INT_DTYPES: frozenset[torch.dtype] = frozenset(
    {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}
)
#: Dtypes of real arithmetic: floats and integers (not bool).
NUMERIC_DTYPES: frozenset[torch.dtype] = FLOAT_DTYPES | INT_DTYPES
#: Every dtype a lowered graph can hold: data movement (views, copies, casts) accepts these.
MOVABLE_DTYPES: frozenset[torch.dtype] = frozenset(TORCH_TO_HW)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN = -(2**63)
#: The int32 value holding int64's INT64_MIN on the device (module docstring).
INT64_MIN_ON_DEVICE = INT32_MIN
_INT64_RANGE = (
    f"int32 [{INT32_MIN + 1}, {INT32_MAX}] and INT64_MIN (held as {INT64_MIN_ON_DEVICE}): int64 "
    "tensors are represented as int32 on the device"
)

#: Hardware dtypes the lowerings name directly (integer/bool work tiles, fp32 statistics).
HW_INT32, HW_UINT8, HW_FP32 = hw_dtype("int32"), hw_dtype("uint8"), hw_dtype("fp32")


class Int64RangeError(BridgeError):
    """An int64 value does not fit the int32 it is represented as on the device."""


def to_hw(dtype: torch.dtype) -> DType:
    """The hardware dtype of a torch dtype (KeyError if it has none; check MOVABLE_DTYPES)."""
    return hw_dtype(TORCH_TO_HW[dtype])


def to_torch(dtype: DType) -> torch.dtype:
    return HW_TO_TORCH[dtype.name]


def check_int32(value: float | int, what: str) -> int:
    """``value`` as an int that fits int32, or ``Int64RangeError`` saying what it was."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise Int64RangeError(
            f"{what} is {value}, outside int32 [{INT32_MIN}, {INT32_MAX}]: int64 values are "
            "represented as int32 on the device"
        )
    return int(value)


def int64_on_device(value: float | int, what: str) -> int:
    """An int64 scalar as the device holds it (INT64_MIN as -2**31), or ``Int64RangeError``."""
    if value == INT64_MIN:
        return INT64_MIN_ON_DEVICE
    if not INT32_MIN < value <= INT32_MAX:
        raise Int64RangeError(f"{what} is {value}, outside {_INT64_RANGE}")
    return int(value)


def int64_representable(values: torch.Tensor) -> torch.Tensor:
    """Which elements of an int64 tensor the device can hold (module docstring)."""
    return ((values > INT32_MIN) & (values <= INT32_MAX)) | (values == INT64_MIN)


def tensor_to_numpy(
    tensor: torch.Tensor, name: str = "tensor", *, check: bool = True
) -> np.ndarray:
    """A CPU tensor's values as numpy in their device representation (bf16 as
    ``ml_dtypes.bfloat16``, sharing memory where the dtype is native; int64 and bool converted).
    int64 values are range-checked unless ``check`` is off (``name`` names the tensor)."""
    if check and tensor.dtype == torch.int64:
        check_int64_range(tensor, name)
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if tensor.dtype == torch.bool:
        return tensor.numpy().astype(np.uint8)
    if tensor.dtype == torch.int64:
        values = tensor.numpy()
        return np.where(values == INT64_MIN, INT64_MIN_ON_DEVICE, values).astype(np.int32)
    return tensor.numpy()


def check_int64_range(tensor: torch.Tensor, name: str) -> None:
    """Raise ``Int64RangeError`` if an int64 tensor holds a value the device cannot."""
    if tensor.numel() == 0:
        return
    low, high = int(tensor.min()), int(tensor.max())
    if low > INT32_MIN and high <= INT32_MAX:  # the common case, without a mask
        return
    bad = ~int64_representable(tensor)
    if bool(bad.any()):
        raise Int64RangeError(
            f"int64 input {name} holds {int(tensor[bad].flatten()[0])}, outside {_INT64_RANGE}"
        )


def numpy_to_tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Numpy values (in the hardware storage dtype of ``dtype``) as a fresh torch tensor."""
    values = np.ascontiguousarray(values)
    if dtype == torch.bfloat16:
        return torch.from_numpy(values.view(np.int16).copy()).view(torch.bfloat16)
    if dtype == torch.bool:
        return torch.from_numpy(values.copy()) != 0
    if dtype == torch.int64:  # -2**31 holds INT64_MIN (module docstring)
        wide = torch.from_numpy(values.astype(np.int64))
        return wide.masked_fill_(wide == INT64_MIN_ON_DEVICE, INT64_MIN)
    return torch.from_numpy(values.copy()).to(dtype)
