"""``advise``: run the rules over a run, estimate each finding's gain with the simulator, rank.

With the run's program and config at hand (``hwsim advise WORKLOAD``, the tuner, the MCP tool),
a finding with a what-if is simulated again, timing only, on the same program under the what-if
config: the gain is the difference in simulated time ("re-simulated"). Without the program (a
run folder) or without a what-if, the gain is the finding's bound on the recorded trace ("bound
from the trace"). Recommendations are ranked by that gain; a finding that gains nothing stays in
the list (it says what is fine), below the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwsim.advise.evidence import Evidence
from hwsim.advise.rules import RULES, Finding
from hwsim.units import time_text

RESIMULATED = "re-simulated"
BOUND = "bound from the trace"


@dataclass(frozen=True)
class Recommendation:
    finding: Finding
    gain_ns: float
    method: str
    what_if_total_ns: float | None = None

    def to_dict(self, total_ns: float) -> dict[str, Any]:
        f = self.finding
        return {
            "rule": f.rule,
            "title": f.title,
            "action": f.action,
            "evidence": f.evidence,
            "gain_ns": round(self.gain_ns, 1),
            "gain_pct": round(100.0 * self.gain_ns / total_ns, 1) if total_ns else 0.0,
            "method": self.method,
            "what_if": f.what_if_text if self.method == RESIMULATED else "",
            "what_if_total_ns": self.what_if_total_ns,
        }


@dataclass
class Advice:
    workload: str
    total_ns: float
    bottleneck: str
    recommendations: list[Recommendation] = field(default_factory=list)

    @property
    def top(self) -> Recommendation | None:
        return self.recommendations[0] if self.recommendations else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "total_ns": self.total_ns,
            "bottleneck": self.bottleneck,
            "recommendations": [r.to_dict(self.total_ns) for r in self.recommendations],
        }

    def lines(self) -> list[str]:
        """The advice as text, for terminals and reports."""
        out = [f"Bottleneck: {self.bottleneck}"]
        if not self.recommendations:
            out.append("No recommendation: no rule found anything to change.")
        for rank, rec in enumerate(self.recommendations, 1):
            d = rec.to_dict(self.total_ns)
            out.append(f"{rank}. [{d['rule']}] {d['title']}")
            out.append(f"   do: {d['action']}")
            gain = f"{d['gain_pct']:.1f}% ({time_text(rec.gain_ns)})"
            how = f"re-simulated: {d['what_if']}" if rec.method == RESIMULATED else rec.method
            out.append(f"   expected gain: {gain}, {how}")
        return out


def advise(
    summary: Any,
    *,
    trace: Any = None,
    evidence: Evidence | None = None,
    program: Any = None,
    config: Any = None,
    rules: tuple[str, ...] | None = None,
) -> Advice:
    """Advice for one run: give its summary and its trace (or ``evidence`` already gathered);
    with ``program`` and ``config`` the gains are re-simulated (module docstring)."""
    if evidence is None:
        if trace is None:
            raise ValueError("advise needs the run's trace or its evidence")
        evidence = Evidence.from_trace(trace, summary)
    if config is None and trace is not None:
        config = getattr(trace, "config", None)
    findings = [
        found
        for name, fn in RULES.items()
        if rules is None or name in rules
        if (found := fn(evidence, config)) is not None
    ]
    recommendations = [_estimate(f, evidence, program, config) for f in findings]
    recommendations.sort(key=lambda r: (-r.gain_ns, r.finding.rule))
    return Advice(
        str(summary.workload or "run"), float(summary.total_ns), summary.bottleneck, recommendations
    )


def _estimate(finding: Finding, ev: Evidence, program: Any, config: Any) -> Recommendation:
    if program is None or config is None or not finding.what_if:
        return Recommendation(finding, max(0.0, finding.bound_ns), BOUND)
    from hwsim.machine.simulator import run

    changed = what_if_config(config, finding.what_if)
    total = float(run(program, changed, numerics=False).summary.total_ns)
    return Recommendation(finding, max(0.0, ev.total_ns - total), RESIMULATED, total)


def what_if_config(config: Any, overrides: dict[str, Any]) -> Any:
    """``config`` with dotted-path ``overrides`` applied and validated again."""
    from hwsim.config.loader import apply_overrides, validate_config

    data = apply_overrides(config.model_dump(mode="json"), overrides)
    return validate_config(data, source="advisor what-if")


#: Recommendations a run's printed report shows (``hwsim advise`` shows them all).
REPORT_TOP = 3


def report_lines(summary: Any, evidence: Evidence) -> list[str]:
    """The advice section of a printed run report: the top recommendations with the bounds
    the trace gives (``hwsim advise`` re-simulates them)."""
    advice = advise(summary, evidence=evidence)
    shown = [r for r in advice.recommendations if r.gain_ns > 0][:REPORT_TOP]
    if not shown:
        return ["Advice: nothing to change found (hwsim advise for the details)"]
    lines = ["Advice (gains bounded on this trace; hwsim advise re-simulates them):"]
    for rank, rec in enumerate(shown, 1):
        pct = 100.0 * rec.gain_ns / advice.total_ns if advice.total_ns else 0.0
        lines.append(f"  {rank}. up to {pct:.0f}%: {rec.finding.title}")
        lines.append(f"     do: {rec.finding.action}")
    return lines
