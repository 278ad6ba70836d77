"""A training step on the simulator: forward, backward and the optimizer step, each compiled.

``train_steps`` runs ``steps`` training steps of a language model on token ids: the model and
``optimizer.step`` each go through ``torch.compile(backend="hwsim")`` with the same options, so
one report holds the three phases (``Report.phase_times()``: forward, backward, optimizer).
``compiled=False`` runs the same steps eagerly (the reference). ``docs/training.md`` walks
through it; ``bench/training.py`` times it; ``tests/bridge/test_training_on_simulator.py``
checks the parameters against eager's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


def tiny_gpt2_for_training() -> nn.Module:
    """``bridge.models.tiny_gpt2`` in train mode with dropout 0 (so eager and compiled draw no
    random masks and their parameters can be compared exactly)."""
    from hwsim.bridge.models import tiny_gpt2

    model = tiny_gpt2()
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model.train()


@dataclass
class TrainingRun:
    """The losses of each step, the report of the compiled run (None if eager), and per
    parameter the elements whose gradient was ever nonzero but below ``tiny_gradient``."""

    losses: list[float] = field(default_factory=list)
    report: Any = None
    tiny_gradients: dict[str, torch.Tensor] = field(default_factory=dict)


def train_steps(
    model: nn.Module,
    make_optimizer: Callable[[Any], torch.optim.Optimizer],
    ids: torch.Tensor,
    *,
    steps: int = 3,
    compiled: bool = True,
    options: dict[str, Any] | None = None,
    tiny_gradient: float = 0.0,
) -> TrainingRun:
    """``steps`` steps of next-token training on ``ids`` ([batch, seq] token ids, labels = ids):
    zero the gradients, forward + loss, backward, ``optimizer.step()``.

    ``tiny_gradient``: record the elements whose gradient falls below it (Adam's update
    ``lr * m / (sqrt(v) + eps)`` of a gradient far below ``eps`` is ``lr * g / eps``: it
    multiplies the gradient's rounding by ``lr / eps``, 1e5 for AdamW's defaults)."""
    import torch._dynamo

    from hwsim.bridge.dynamo import last_report

    optimizer = make_optimizer(model.parameters())
    forward: Callable[..., Any] = model
    step: Callable[[], Any] = optimizer.step
    if compiled:
        torch._dynamo.reset()  # a fresh report: this run's graphs only
        options = dict(options or {})
        forward = torch.compile(model, backend="hwsim", options=options)
        step = torch.compile(optimizer.step, backend="hwsim", options=options)
    run = TrainingRun()
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = forward(ids, labels=ids, use_cache=False).loss
        loss.backward()
        for name, parameter in model.named_parameters():
            if tiny_gradient > 0 and parameter.grad is not None:
                magnitude = parameter.grad.detach().abs()
                tiny = (magnitude > 0) & (magnitude < tiny_gradient)  # 0 exactly: no noise
                known = run.tiny_gradients.get(name)
                run.tiny_gradients[name] = tiny if known is None else known | tiny
        step()
        run.losses.append(float(loss.detach()))
    if compiled:
        run.report = last_report()
    return run
