"""Rank imbalance: in synchronous multi-rank work the ranks meet in collectives, so a rank that
carries less work waits there for the slowest one. That wait is time the job loses to imbalance,
not to communication (a collective's duration includes the wait for its last arrival)."""

from __future__ import annotations

from trainscope.analyzers.context import Context

from trainscope.analyzers.findings.base import DiffMeasure, Finding, FindingSpec, Fix, FixText, by_stake, stake_ms
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.findings.common import ctx, ev, raised, sink_line
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.sinks import Sinks

_SEV = by_stake("comm.moderate", "comm.high")


def _imbalance(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if obs.sinks is None:
        return None
    if not obs.has_gpu:  # rank imbalance needs no GPU: host collectives aligned across ranks measure it
        return _cpu_imbalance(obs, obs.sinks, rules)
    if not raised(obs, rules, "imbalance", _SEV):
        return None
    stake = obs.sinks.pct("imbalance")
    lines = [
        ev(rules, "comm.moderate", "collective time waiting for the slowest rank", stake),
        *obs.imbalance_evidence,
        sink_line(obs, "imbalance"),
    ]
    return IMBALANCE.finding(
        stake, lines, "ranks carry unequal work; the others wait for the slowest inside collectives", rules
    )


def _number(extra: dict[str, object], key: str, default: float) -> float:
    """``extra[key]`` as a number (ranks.py stores floats and ints there), else ``default``."""
    raw = extra.get(key, default)
    return float(raw) if isinstance(raw, (int, float)) else default


def _cpu_imbalance(obs: DiagnosisInput, sinks: Sinks, rules: Rules) -> Finding | None:
    """A CPU-only rank: its own wait inside host collectives for a slower rank, or — when it is the
    rank the others wait for — their wait, as a share of the median step."""
    own = sinks.pct("imbalance")
    extra = obs.extra or {}
    others = _number(extra, "straggler_wait_pct", 0.0)
    # Balanced work: every rank's step is the mean of the ranks' work, so the rank the others wait for
    # sheds (N − 1)/N of their mean wait — its stake, the most balancing can take off its step.
    n = max(2, int(_number(extra, "straggler_ranks", 2)))
    shed = others * (n - 1) / n
    stake = max(own, shed)
    if stake <= 0 or _SEV.grade(stake, rules) == "info":
        return None
    if shed > own:
        lines = [
            ctx(
                "the other ranks' wait for this rank inside collectives, share of the median step",
                others,
                "%",
                "ranks aligned on collective ends",
            ),
            ev(
                rules,
                "comm.moderate",
                f"step time balanced work takes off this rank ((N − 1)/N of that wait, N = {n} ranks)",
                shed,
            ),
            ctx("this rank's own wait inside collectives", own, "% of step time"),
            *obs.imbalance_evidence,
        ]
        detail = (
            f"this rank arrives last at the collectives: the other ranks wait "
            f"{_number(extra, 'straggler_wait_ms', 0.0):.1f} ms per step for it (host collectives, no GPU)"
        )
    else:
        lines = [
            ev(rules, "comm.moderate", "collective time waiting for the slowest rank", own),
            *obs.imbalance_evidence,
            sink_line(obs, "imbalance"),
        ]
        detail = "this rank waits inside host collectives for a slower rank (no GPU: measured on the host)"
    return IMBALANCE.finding(stake, lines, detail, rules)


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _balance_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native:
        return FixText(
            "balance-ranks",
            "Give every rank the same work",
            "// partition work by measured cost, not by count (rows, cells, tokens); re-partition\n"
            "// when per-rank kernel time drifts apart",
        )
    lines = ["# the late rank's extra kernel time per class (the rank imbalance line) says what to even out"]
    if c.embeddings:
        lines.append("# embedding tables: TorchRec EmbeddingShardingPlanner with per-table cost estimates")
    lines.append("# equal tokens per rank (bucket or pack sequences of similar length); equal pipeline stages")
    return FixText("balance-ranks", "Give every rank the same work", "\n".join(lines))


IMBALANCE = FindingSpec(
    id="ranks/imbalance",
    axis="algorithm",
    title="Ranks wait for a slower rank (work imbalance)",
    measure=_imbalance,
    can_be_primary=True,
    severity=_SEV,
    fix=Fix(
        "balance-ranks",
        "Give every rank the same work",
        "# balance the sharding: TorchRec EmbeddingShardingPlanner with per-table cost estimates,\n"
        "# equal sequence lengths per rank (bucket/pack samples), equal pipeline stages",
        "// partition work by measured cost, not by count (tables, rows, sequence tokens); re-partition\n"
        "// when per-rank kernel time drifts apart",
        projection="busy",
        basis="if no rank waited for a slower one ({stake:.1f} % of step time)",
        whatif_label="ranks balanced: no wait for the slowest",
        text=_balance_words,
    ),
    whatif_pool="comm",
    diff_measure=DiffMeasure(
        "collective time waiting for the slowest rank", "ms per step", stake_ms("ranks/imbalance")
    ),
    critical_path="communication",
    headline="RANK-IMBALANCE-BOUND",
    label_class="imbalance",
    sink="imbalance",
    breakdown=("communication",),
    describes="collective time a rank spends waiting for the slowest rank",
)

SPECS = (IMBALANCE,)
