"""What an instruction costs: one cost model per config, asked by everything that needs a cost.

``CostModel.for_config(config)`` is built once per config (cached by its content hash) and
answers ``model.of(instruction)`` with an ``InstructionCost`` (issue, latency, chain, shared ports
and how long it holds them, the DMA transfer plan, the submit offset). The simulator's
preparation, the list scheduler (``model.estimate``) and trace statistics ask it, and a kernel's
build asks ``planning``; no other module computes a cost.

Where the parts live:

- ``model``: ``CostModel`` (the config turned into exact rates once; legality, then the rule);
- ``rules``: one rule per instruction type (``@cost_rule``): ``streams`` (the one-pass
  instructions as a table), ``elementwise``, ``compute``, ``tensor``, ``dma``;
- ``streaming``: the VectorE/ScalarE/GpSimdE data-path model the compute rules build on;
- ``dma``: descriptors, the split over DMA engines and their service times (``DmaCosts``);
- ``tensor_models``, ``systolic_models``: the TensorE timing models, by name;
- ``constants``: the documented rule constants per generation (``RuleConstants``);
- ``parameters``: every parameter a cost depends on, listed, and set (calibration, sweeps);
- ``planning``: what a kernel's build asks while it chooses a plan (DMA service times, pass
  times, the transpose path), reading only the config fields each answer needs.
"""

from hwsim.cost import rules as _rules  # noqa: F401  (registers rules)
from hwsim.cost import systolic_models as _systolic_models  # noqa: F401  (registers models)
from hwsim.cost.constants import RULES, RuleConstants, rules_for
from hwsim.cost.model import CostModel
from hwsim.cost.rules.registry import cost_rule, rule_for
from hwsim.cost.values import Cost, Estimate, InstructionCost

__all__ = [
    "RULES",
    "Cost",
    "CostModel",
    "Estimate",
    "InstructionCost",
    "RuleConstants",
    "cost_rule",
    "rule_for",
    "rules_for",
]
