"""``check_op``: run a torch function through the lowering core and compare with torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from hwsim.bridge.auto_cast import reference_casts
from hwsim.bridge.context import TilingOptions
from hwsim.bridge.graph_lowering import GraphRun, lower_graph
from hwsim.bridge.precision import ErrorStats, Precision, Tolerance, compare, judged_with_exact

Shape = tuple[int, ...]


def make_input(shape: Shape, dtype: torch.dtype, seed: int, positive: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(shape, generator=generator)
    if positive:
        values = values.abs() + 0.1
    return values.to(dtype)


def check_op(
    torch_fn: Callable[..., Any],
    shapes: Sequence[Shape | torch.Tensor],
    dtype: torch.dtype = torch.float32,
    *,
    config: str = "tiny",
    precision: Precision | None = None,
    tiling: TilingOptions | None = None,
    positive: bool = False,
    seed: int = 0,
) -> GraphRun:
    """Trace ``torch_fn`` on random inputs of ``shapes`` into ATen ops (make_fx), lower the whole
    graph, simulate it on ``config`` and assert every output matches torch's within the
    tolerance of the compute dtype (``bridge.precision.TOLERANCES``). A tensor in ``shapes`` is
    used as that input as is (integer indices, bool masks)."""
    inputs = [
        s if isinstance(s, torch.Tensor) else make_input(s, dtype, seed + i, positive)
        for i, s in enumerate(shapes)
    ]
    graph = make_fx(lambda *xs: torch_fn(*xs))(*inputs)  # the lambda hides optional params
    chosen = precision or Precision()
    lowered = lower_graph(graph, inputs, config=config, precision=chosen, options=tiling)
    run = lowered.run(inputs, race_check=True)
    expected = torch_fn(*inputs)
    got_leaves, want_leaves = pytree.tree_leaves(run.outputs), pytree.tree_leaves(expected)
    assert len(got_leaves) == len(want_leaves)
    for i, (got, want) in enumerate(zip(got_leaves, want_leaves, strict=True)):
        assert got.dtype == want.dtype and got.shape == want.shape, (i, got.shape, want.shape)
        stats = compare(got, want, chosen.tolerance(want.dtype))
        assert stats.ok, f"output {i} of {shapes} {dtype}: {stats}"
    return run


def with_auto_cast(fn: Callable[[], Any], options: dict[str, Any] | None = None) -> Any:
    """``fn()`` on the CPU with the rounding the front doors' auto-cast ``options`` make
    (``auto_cast``, ``auto_cast_type``; default neuronx-cc's matmult/bf16): the eager reference
    of a simulated run."""
    given = options or {}
    precision = Precision.of(given.get("auto_cast"), given.get("auto_cast_type"))
    with torch.no_grad(), reference_casts(precision):
        return fn()


def eager_stats(
    got: torch.Tensor,
    fn: Callable[[], torch.Tensor],
    options: dict[str, Any] | None = None,
    tolerance: Tolerance | None = None,
) -> ErrorStats:
    """``got`` against ``fn()`` run eagerly with the casts ``options`` make, judged as the
    report judges (``precision.judged_with_exact``): an element off that reference passes only
    where it is no further from ``fn()`` without the casts than the reference is."""
    given = options or {}
    precision = Precision.of(given.get("auto_cast"), given.get("auto_cast_type"))
    tolerance = tolerance or precision.tolerance(torch.float32)
    expected = with_auto_cast(fn, options).float()
    if not precision.casts:
        return compare(got.float(), expected, tolerance)

    def uncast() -> torch.Tensor:
        with torch.no_grad():
            return fn().float()

    return judged_with_exact(got.float(), expected, tolerance, uncast, cast=True)


def auto_cast_tolerance(options: dict[str, Any] | None = None) -> Tolerance:
    """The tolerance of an fp32 result that went through a cast op under ``options``."""
    given = options or {}
    precision = Precision.of(given.get("auto_cast"), given.get("auto_cast_type"))
    return precision.tolerance(torch.float32)
