"""``nki.typing``: annotations kernels use (``tensor``, ``mutable_tensor``, ``scalar``). They are
accepted and carry shapes/dtypes for ``hwsim nki`` input generation: ``nt.tensor[(128, 512),
nl.float32]`` records the shape and dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...] | None = None
    dtype: Any = None
    mutable: bool = False


class _TensorAnnotation:
    def __init__(self, mutable: bool) -> None:
        self.mutable = mutable

    def __getitem__(self, key: Any) -> TensorType:
        key = key if isinstance(key, tuple) else (key,)
        shape = next((k for k in key if isinstance(k, tuple)), None)
        dtype = next((k for k in key if isinstance(k, str)), None)
        return TensorType(shape, dtype, self.mutable)


tensor = _TensorAnnotation(False)
mutable_tensor = _TensorAnnotation(True)
scalar = float
