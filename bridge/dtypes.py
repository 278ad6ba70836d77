"""Torch dtypes on the simulated machine: which map to hardware dtypes, and tensor <-> numpy.

Floats (fp32, bf16, fp16) are what the lowerings compute on; int8/16/32 and uint8 tensors can be
moved (views, copies) but not computed. int64, bool, complex and fp64 have no hardware dtype.
bf16 travels through numpy as ``ml_dtypes.bfloat16`` (bit-exact).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from hwsim.dtypes import DType
from hwsim.dtypes import dtype as hw_dtype

#: torch dtype -> hardware dtype name, for every dtype the simulator can hold.
TORCH_TO_HW: dict[torch.dtype, str] = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.uint8: "uint8",
}
HW_TO_TORCH: dict[str, torch.dtype] = {name: dt for dt, name in TORCH_TO_HW.items()}

#: Dtypes the arithmetic lowerings accept (the engines compute in fp32 and cast in and out).
FLOAT_DTYPES: frozenset[torch.dtype] = frozenset({torch.float32, torch.bfloat16, torch.float16})
#: Dtypes data movement (views, copies, casts) accepts.
MOVABLE_DTYPES: frozenset[torch.dtype] = frozenset(TORCH_TO_HW)


def to_hw(dtype: torch.dtype) -> DType:
    """The hardware dtype of a torch dtype (KeyError if it has none; check MOVABLE_DTYPES)."""
    return hw_dtype(TORCH_TO_HW[dtype])


def to_torch(dtype: DType) -> torch.dtype:
    return HW_TO_TORCH[dtype.name]


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's values as numpy (bf16 as ml_dtypes.bfloat16), sharing memory."""
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def numpy_to_tensor(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Numpy values (in the hardware storage dtype of ``dtype``) as a fresh torch tensor."""
    values = np.ascontiguousarray(values)
    if dtype == torch.bfloat16:
        return torch.from_numpy(values.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(values.copy()).to(dtype)
