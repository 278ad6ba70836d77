"""The ``torch`` workload kind: ``hwsim run FILE.py:NAME`` (and sweeps) where ``NAME()`` returns a
torch model and example inputs, ``(model, args)`` or ``(model, args, kwargs)``.

Registered under the ``hwsim.workloads`` entry point group (pyproject.toml); hwsim's resolver
(``hwsim.workloads.file_workload``) loads it only when it meets such a factory, so hwsim itself
never imports torch. Each build lowers the model for the run's config as ``hwsim export`` does
(``bridge.export.lower_model``: the whole graph or nothing, no CPU fallback) and the check
compares the outputs with the model's own CPU outputs, each with its dtype's tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hwsim.bridge.export import lower_model
from hwsim.config.schema import HardwareConfig
from hwsim.errors import WorkloadError
from hwsim.program import Program
from hwsim.workloads.registry import NumericsVerdict, Workload
from hwsim.workloads.saved import check_outputs

#: What a factory gives: (model, args, kwargs) for one forward pass.
Example = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


def call_factory(factory: Callable[[], Any], text: str) -> Example:
    """``factory()`` checked to be ``(model, args)`` or ``(model, args, kwargs)``; a bare input
    stands for a one-element ``args``. ``text`` names the factory in errors."""
    try:
        made = factory()
    except Exception as exc:  # user code: any exception, chained for --debug
        raise WorkloadError(f"{text}: calling it raised {type(exc).__name__}: {exc}") from exc
    except SystemExit as exc:  # would end hwsim with the factory's status and nothing printed
        raise WorkloadError(f"{text}: calling it called sys.exit({exc.code!r})") from exc
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise WorkloadError(
            f"{text}: returned {type(made).__name__}; expected (model, args) or "
            "(model, args, kwargs)"
        )
    model, inputs = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else {}
    if not isinstance(model, torch.nn.Module):
        raise WorkloadError(
            f"{text}: returned a {type(model).__name__} as the model; expected a torch.nn.Module"
        )
    if not isinstance(kwargs, dict):
        raise WorkloadError(f"{text}: kwargs is a {type(kwargs).__name__}, expected a dict")
    inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    return model, tuple(inputs), dict(kwargs)


def model_workload(factory: Callable[[], Any], text: str) -> Workload:
    """The workload of a model factory (the ``torch`` kind's entry point)."""
    model, args, kwargs = call_factory(factory, text)
    expected: dict[str, dict[str, Any]] = {}

    def build(config: HardwareConfig) -> Program:
        made = lower_model(model, args, kwargs=kwargs, config=config, name=text)
        expected.clear()  # the same CPU outputs each time; the output names are this lowering's
        expected.update(made.expected)
        return made.program

    def check(outputs: dict[str, Any]) -> NumericsVerdict:
        if not expected:
            raise WorkloadError(f"{text}: the lowered program has no outputs to compare")
        return check_outputs(expected, outputs)

    return Workload(text, f"torch model {type(model).__name__}, checked against CPU", build, check)
