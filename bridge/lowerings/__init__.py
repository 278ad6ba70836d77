"""Lowerings by op family; importing this package fills ``bridge.registry.LOWERINGS``.

pointwise: activations and ALU ops with broadcasting; matmul: mm/addmm/bmm; reduction: sum, mean,
amax/amin, softmax/log_softmax; views: metadata views, clone, dtype casts.
"""

from bridge.lowerings import matmul, pointwise, reduction, views

__all__ = ["matmul", "pointwise", "reduction", "views"]
