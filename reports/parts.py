"""The parts every document writes alike (the analysis, a watch's, a memory report's, the deep
analysis): a rounded number, an evidence object and its mark, a finding. A module of its own, below them all and
light to import (memory.py and live.py do not load the analysis document's dependencies for it)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from trainscope.analyzers.findings.base import Evidence
    from trainscope.analyzers.findings.base import Finding


def rounded(x: float | None, nd: int = 2) -> float | None:
    """A figure as the documents write it: ``nd`` decimals, None kept."""
    return None if x is None else round(float(x), nd)


def evidence_dict(e: Evidence) -> dict[str, Any]:
    """One line of evidence: the metric, its value and unit, the threshold it is held to, where the
    threshold comes from, and whether the value crosses it."""
    return {
        "metric": e.metric,
        "value": e.value,
        "unit": e.unit,
        "threshold": e.threshold,
        "source": e.source,
        "meets": e.meets,
    }


def evidence_mark(meets: bool | None, blank: str = " ") -> str:
    """Whether an evidence line crosses its threshold, as the reports mark it: ✔ crossed, ✘ not,
    ``blank`` for a line of context (no threshold)."""
    return {True: "✔", False: "✘", None: blank}[meets]


def finding_dict(f: Finding, stake: bool = True) -> dict[str, Any]:
    """A finding with its evidence; ``stake``: with its share of step time (``stake_pct``), which a
    memory report, having no steps, leaves out."""
    return {
        "id": f.id,
        "axis": f.axis,
        "severity": f.severity,
        "title": f.title,
        **({"stake_pct": rounded(f.stake_pct)} if stake else {}),
        "detail": f.detail,
        "evidence": [evidence_dict(e) for e in f.evidence],
    }
