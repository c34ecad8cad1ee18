"""Rank imbalance: in synchronous multi-rank work the ranks meet in collectives, so a rank that
carries less work waits there for the slowest one. That wait is time the job loses to imbalance,
not to communication (a collective's duration includes the wait for its last arrival)."""
from __future__ import annotations

from trainscope.analyzers import fix_text

from trainscope.analyzers.findings.base import DiffMeasure, Finding, FindingSpec, Fix, by_stake, stake_ms
from trainscope.analyzers.findings.common import ev, raised, sink_line
from trainscope.analyzers.rules import Rules

_SEV = by_stake("comm.moderate", "comm.high")


def _imbalance(obs, rules: Rules) -> Finding | None:
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, "imbalance", _SEV):
        return None
    stake = obs.sinks.pct("imbalance")
    lines = [ev(rules, "comm.moderate", "collective time waiting for the slowest rank", stake),
             *obs.imbalance_evidence, sink_line(obs, "imbalance")]
    return IMBALANCE.finding(stake, lines, "ranks carry unequal work; the others wait for the slowest inside collectives",
                             rules)


IMBALANCE = FindingSpec(
    id="ranks/imbalance", axis="algorithm", title="Ranks wait for a slower rank (work imbalance)",
    measure=_imbalance, can_be_primary=True, severity=_SEV,
    fix=Fix("balance-ranks", "Give every rank the same work",
            "# balance the sharding: TorchRec EmbeddingShardingPlanner with per-table cost estimates,\n"
            "# equal sequence lengths per rank (bucket/pack samples), equal pipeline stages",
            "// partition work by measured cost, not by count (tables, rows, sequence tokens); re-partition\n"
            "// when per-rank kernel time drifts apart",
            projection="busy", basis="if no rank waited for a slower one ({stake:.1f} % of step time)",
            whatif_label="ranks balanced: no wait for the slowest", text=fix_text._balance),
    whatif_pool="comm",
    diff_measure=DiffMeasure("collective time waiting for the slowest rank", "ms per step", stake_ms("ranks/imbalance")),
    critical_path="communication", headline="RANK-IMBALANCE-BOUND", label_class="imbalance", sink="imbalance",
    breakdown=("communication",), describes="collective time a rank spends waiting for the slowest rank",
)

SPECS = (IMBALANCE,)
