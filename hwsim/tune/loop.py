"""The loop after a search: advise the start point and the winner, and say what changed.

Both are simulated again (timing only) with their traces, the advisor runs on each with its
gains re-simulated, and the comparison names the time, the bottleneck and the recommendations
before and after: which findings the tuning resolved and which remain.
"""

from __future__ import annotations

from typing import Any

from hwsim.config import load_config
from hwsim.units import time_text


def advise_point(target: Any, point: dict[str, Any], config: Any) -> Any:
    """The advice for one point of ``target`` on ``config`` (a HardwareConfig)."""
    from hwsim.advise.advice import advise
    from hwsim.machine.simulator import run

    program = target.build(point, config)
    result = run(program, config, numerics=False)
    summary = result.summary
    summary.workload = target.name
    return advise(summary, trace=result.trace, program=program, config=config)


def compare_with_advice(
    target: Any, result: Any, config_name: str, overrides: list[str]
) -> dict[str, Any]:
    """{"start": advice, "best": advice, "resolved": [...], "remaining": [...], "lines": [...]}."""
    config = load_config(config_name, overrides)
    best = result.best
    before = advise_point(target, result.start.point, config)
    after = advise_point(target, best.point, config)
    rules_before = [r.finding.rule for r in before.recommendations if r.gain_ns > 0]
    rules_after = [r.finding.rule for r in after.recommendations if r.gain_ns > 0]
    resolved = [r for r in rules_before if r not in rules_after]
    speedup = before.total_ns / after.total_ns if after.total_ns else 0.0
    lines = [
        "What changed (start -> best):",
        f"  time: {time_text(before.total_ns)} -> {time_text(after.total_ns)} ({speedup:,.2f}x)",
        f"  bottleneck: {before.bottleneck}",
        f"          ->  {after.bottleneck}",
        f"  resolved: {', '.join(resolved) or 'none'}; "
        f"remaining: {', '.join(rules_after) or 'none'}",
        "Advice on the best point:",
        *("  " + line for line in after.lines()[1:]),
    ]
    return {
        "start": before.to_dict(),
        "best": after.to_dict(),
        "speedup": speedup,
        "resolved": resolved,
        "remaining": rules_after,
        "lines": lines,
    }
