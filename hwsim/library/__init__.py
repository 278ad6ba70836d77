"""The kernel library: expert-written kernels in the kernel language (``hwsim.lang``).

Each kernel is an ``@hwsim.lang.kernel``: call it with numpy arrays (or ``TensorSpec`` for
timing-only builds) and a config. ``hwsim.library.workloads`` registers each as a named workload
(``hwsim run --list``).
"""

from hwsim.library.attention import attention
from hwsim.library.common import UnsupportedShapeError
from hwsim.library.conv import conv2d_3x3
from hwsim.library.matmul import matmul_basic, matmul_blocked, matmul_optimized
from hwsim.library.mlp import mlp
from hwsim.library.norm import layernorm, rmsnorm
from hwsim.library.softmax import softmax
from hwsim.library.tutorial_matmul import matmul_block_free, matmul_hoisted, matmul_tiled

__all__ = [
    "UnsupportedShapeError",
    "attention",
    "conv2d_3x3",
    "layernorm",
    "matmul_basic",
    "matmul_block_free",
    "matmul_blocked",
    "matmul_hoisted",
    "matmul_optimized",
    "matmul_tiled",
    "mlp",
    "rmsnorm",
    "softmax",
]
