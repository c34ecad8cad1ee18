"""Evidence-line helpers shared by the rule modules."""
from __future__ import annotations

from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.rules import Rules


def ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    """An evidence line graded against threshold ``name`` of the rule table."""
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    return Evidence(metric, round(value, 2), t.unit, f"{op} {t.value:g}", t.source, meets)


def ctx(metric: str, value: float | None, unit: str, source: str = "measured") -> Evidence:
    """A context line: a measured number with no threshold."""
    return Evidence(metric, None if value is None else round(value, 2), unit, "", source, None)


def sink_line(obs, key: str) -> Evidence:
    """The sink's share of step time and its ms per step, as measured."""
    s = obs.sinks
    return ctx(f"{key} sink: ms per step", s.ms_per_step(key), "ms", s.by_key[key].source)


def raised(obs, rules: Rules, sink: str, severity) -> bool:
    """A sink's finding is raised when its stake reaches the moderate grade, or when it is the
    verdict's largest sink (the verdict always cites a finding)."""
    stake = obs.sinks.pct(sink)
    return stake > 0 and (severity.grade(stake, rules) != "info" or obs.is_leader(sink))
