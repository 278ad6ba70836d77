"""The cost rules of every instruction, registered by instruction type (``registry``).

Importing the package registers them: ``streams`` (the one-pass instructions, as a table),
``elementwise``, ``compute``, ``tensor``, ``dma`` and ``multicore``.
"""

from hwsim.cost.rules import (  # noqa: F401  (register rules)
    compute,
    dma,
    elementwise,
    multicore,
    streams,
    tensor,
)
from hwsim.cost.rules.registry import Rule, cost_rule, rule_for, unregister_rule

__all__ = ["Rule", "cost_rule", "rule_for", "unregister_rule"]
