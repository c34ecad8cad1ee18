"""Evidence-line helpers shared by the rule modules."""

from __future__ import annotations

from trainscope.analyzers.findings.base import Evidence, Severity
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.sinks import Sinks


def ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    """An evidence line graded against threshold ``name`` of the rule table."""
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    return Evidence(metric, round(value, 2), t.unit, f"{op} {t.value:g}", t.source, meets)


def ctx(metric: str, value: float | None, unit: str, source: str = "measured") -> Evidence:
    """A context line: a measured number with no threshold."""
    return Evidence(metric, None if value is None else round(value, 2), unit, "", source, None)


def _sinks(obs: DiagnosisInput) -> Sinks:
    assert obs.sinks is not None, "a sink's finding is measured only where the sinks were"
    return obs.sinks


def sink_line(obs: DiagnosisInput, key: str) -> Evidence:
    """The sink's share of step time and its ms per step, as measured."""
    s = _sinks(obs)
    return ctx(f"{key} sink: ms per step", s.ms_per_step(key), "ms", s.by_key[key].source)


def raised(obs: DiagnosisInput, rules: Rules, sink: str, severity: Severity) -> bool:
    """A sink's finding is raised when its stake reaches the moderate grade, or when it is the
    verdict's largest sink (the verdict always cites a finding)."""
    stake = _sinks(obs).pct(sink)
    return stake > 0 and (severity.grade(stake, rules) != "info" or obs.is_leader(sink))
