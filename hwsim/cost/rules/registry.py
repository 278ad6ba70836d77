"""The cost rules by instruction type: ``@cost_rule(NcMatmul)`` registers what one costs.

A rule is a function ``(model, instruction) -> Cost`` (``hwsim.cost.values.Cost``), pure: it
reads the config through the model (``CostModel``: rates, time base, rule constants) and the
instruction's operands, and keeps no state, so the model works it out once per distinct
instruction. A class without a rule of its own takes its nearest base class's; an instruction
with none is an error naming the class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from hwsim.isa.base import Instruction

if TYPE_CHECKING:
    from hwsim.cost.model import CostModel
    from hwsim.cost.values import Cost

Rule = Callable[["CostModel", Any], "Cost"]
RuleT = TypeVar("RuleT", bound=Rule)

_RULES: dict[type, Rule] = {}


def cost_rule(*classes: type[Instruction]) -> Callable[[RuleT], RuleT]:
    """Register the decorated function as the cost rule of ``classes`` (and their subclasses
    without a rule of their own); a second rule for one class is an error."""

    def register(rule: RuleT) -> RuleT:
        for cls in classes:
            if cls in _RULES:
                raise ValueError(
                    f"{cls.__name__} already has a cost rule ({_RULES[cls].__qualname__})"
                )
            _RULES[cls] = rule
        return rule

    return register


def rule_for(cls: type[Instruction]) -> Rule:
    """The cost rule of an instruction class: its own, else its nearest base class's."""
    for base in cls.__mro__:
        rule = _RULES.get(base)
        if rule is not None:
            return rule
    raise NotImplementedError(
        f"{cls.__name__} ({getattr(cls, 'OPCODE', '?')}) has no cost rule; register one with "
        "@hwsim.cost.cost_rule"
    )


def unregister_rule(cls: type[Instruction]) -> None:
    """Remove the rule of a class a test or plug-in registered."""
    _RULES.pop(cls, None)
