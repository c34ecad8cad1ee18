"""Rank imbalance: in synchronous multi-rank work the ranks meet in collectives, so a rank that
carries less work waits there for the slowest one. That wait is time the job loses to imbalance,
not to communication (a collective's duration includes the wait for its last arrival)."""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.base import stake_ms
from trainscope.analyzers.findings.base import verdict_class
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.common import ctx
from trainscope.analyzers.findings.common import ev
from trainscope.analyzers.findings.common import raised
from trainscope.analyzers.findings.common import sink_line
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.sinks import Sinks

_SEV = by_stake("comm.moderate", "comm.high")

NOT_WORK_TITLE = "Ranks wait for a late rank (not work imbalance)"


@dataclass(frozen=True)
class Balance:
    """What balancing the ranks' work can move (``ranks.with_aligned_imbalance`` puts it in the
    observations' ``extra``): the late rank's work per step beyond the other ranks' median."""

    extra_ms: float  # ms per step (negative: it does less than the others' median)
    rank: int | None
    basis: str  # "GPU kernel time outside collectives" | "host time outside collectives"
    straggler: bool  # the rank is the straggler (else: the aligned rank with the most extra work)
    ranks: int

    @property
    def shed_ms(self) -> float:
        """The most balanced work takes off a step: every rank does the mean work, so the late rank
        sheds (N − 1)/N of its extra work — and nobody waits longer than that for it."""
        return max(0.0, self.extra_ms) * (self.ranks - 1) / self.ranks

    @property
    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else "the late rank"

    def who(self) -> str:
        """The rank whose extra work bounds balancing, and why that rank."""
        return (
            f"{self.name} (the straggler)"
            if self.straggler
            else f"{self.name} (the most of any rank; no clear straggler)"
        )

    def explains(self, wait_ms: float, rules: Rules) -> bool:
        """Whether the extra work explains a wait of ``wait_ms`` per step (``ranks.work_explains_pct``)."""
        return self.extra_ms >= rules.value("ranks.work_explains_pct") / 100 * wait_ms

    def lines(self, rules: Rules, wait_ms: float, stake: float, wait_metric: str | None = None) -> list[Evidence]:
        """The extra work per step (graded against the wait it should explain) and the stake it allows;
        with ``wait_metric``, the wait per step first (where the rank's evidence does not hold it)."""
        explains = rules["ranks.work_explains_pct"]
        return [
            *([ctx(wait_metric, wait_ms, "ms", "ranks aligned on collective ends")] if wait_metric else []),
            Evidence(
                f"extra work per step of {self.who()}: {self.basis}, beyond the other ranks' median",
                round(self.extra_ms, 3),
                "ms",
                f"≥ {explains.value / 100 * wait_ms:.3g}",
                f"per-rank summaries; ranks.work_explains_pct: {explains.value:g} % of the wait ({explains.source})",
                self.explains(wait_ms, rules),
            ),
            ev(
                rules,
                "comm.moderate",
                f"step time balanced work takes off (the wait, at most (N − 1)/N of that extra work, N = {self.ranks})",
                stake,
            ),
        ]

    def not_work(self, wait_ms: float, whose: str) -> str:
        """The finding's detail when the extra work does not explain the wait."""
        if self.straggler:
            why = f"for {self.who()}, whose extra work is only {self.extra_ms:.3g} ms per step ({self.basis})"
        else:
            why = (
                f"with no clear straggler, and no rank does more than {max(0.0, self.extra_ms):.3g} ms of extra "
                f"work per step ({self.basis}; {self.name} the most)"
            )
        return (
            f"{whose} {wait_ms:.1f} ms per step inside collectives {why}: the wait is not work imbalance — it comes "
            "from elsewhere (a late start, the host, the network), and balancing the work cannot remove it"
        )


def _balance(obs: DiagnosisInput) -> Balance | None:
    extra = obs.extra or {}
    raw = extra.get("balance_work_ms")
    if not isinstance(raw, (int, float)):
        return None  # no cross-rank work measure (one rank, or the compute-time estimate: bounded by work already)
    rank = extra.get("balance_work_rank")
    return Balance(
        float(raw),
        rank if isinstance(rank, int) else None,
        str(extra.get("balance_work_basis", "")),
        bool(extra.get("balance_work_straggler", False)),
        max(2, int(_number(extra, "balance_ranks", 2))),
    )


def _pct(sinks: Sinks, ms: float) -> float:
    """``ms`` per step as a share of this rank's mean step (the sinks' own basis)."""
    step_ms = sinks.total_ns / 1e6 / max(1, sinks.steps)
    return 100 * ms / step_ms if step_ms > 0 else 0.0


def _imbalance(obs: DiagnosisInput, rules: Rules) -> Finding | None:
    if obs.sinks is None:
        return None
    if not obs.has_gpu:  # rank imbalance needs no GPU: host collectives aligned across ranks measure it
        return _cpu_imbalance(obs, obs.sinks, rules)
    if not raised(obs, rules, "imbalance", _SEV):
        return None
    wait = obs.sinks.pct("imbalance")
    b = _balance(obs)
    if b is None:
        lines = [
            ev(rules, "comm.moderate", "collective time waiting for the slowest rank", wait),
            *obs.imbalance_evidence,
            sink_line(obs, "imbalance"),
        ]
        return IMBALANCE.finding(
            wait, lines, "ranks carry unequal work; the others wait for the slowest inside collectives", rules
        )
    # Work that is not there cannot be balanced away: the stake is the wait, at most what the late
    # rank's extra work lets balancing take off a step.
    wait_ms = obs.sinks.ms_per_step("imbalance")
    stake = min(wait, _pct(obs.sinks, b.shed_ms))
    lines = [
        ev(rules, "comm.moderate", "collective time waiting for the slowest rank", wait),
        *obs.imbalance_evidence,  # its wait per step, first
        *b.lines(rules, wait_ms, stake),
        sink_line(obs, "imbalance"),
    ]
    if b.explains(wait_ms, rules):
        detail = (
            f"ranks carry unequal work; the others wait for the slowest inside collectives ({b.who()} does "
            f"{b.extra_ms:.3g} ms more work per step, {b.basis})"
        )
        return IMBALANCE.finding(stake, lines, detail, rules)
    return IMBALANCE.finding(stake, lines, b.not_work(wait_ms, "this rank waits"), rules, title=NOT_WORK_TITLE)


def _number(extra: dict[str, object], key: str, default: float) -> float:
    """``extra[key]`` as a number (ranks.py stores floats and ints there), else ``default``."""
    raw = extra.get(key, default)
    return float(raw) if isinstance(raw, (int, float)) else default


def _cpu_imbalance(obs: DiagnosisInput, sinks: Sinks, rules: Rules) -> Finding | None:
    """A CPU-only rank: its own wait inside host collectives for a slower rank, or — when it is the
    rank the others wait for — their wait, as a share of the median step; either capped by what
    balancing can move (the late rank's extra work)."""
    own = sinks.pct("imbalance")
    extra = obs.extra or {}
    others = _number(extra, "straggler_wait_pct", 0.0)
    others_ms = _number(extra, "straggler_wait_ms", 0.0)
    # Balanced work: every rank's step is the mean of the ranks' work, so the rank the others wait for
    # sheds (N − 1)/N of their mean wait — its stake, the most balancing can take off its step.
    n = max(2, int(_number(extra, "straggler_ranks", 2)))
    shed = others * (n - 1) / n
    b = _balance(obs)
    own_stake, shed_stake = own, shed
    if b is not None:  # … and of the extra work, when that is less than the wait
        own_stake = min(own, _pct(sinks, b.shed_ms))
        shed_stake = shed * min(1.0, max(0.0, b.extra_ms) / others_ms) if others_ms > 0 else 0.0
    stake = max(own_stake, shed_stake)
    if max(own, shed) <= 0 or _SEV.grade(max(own, shed), rules) == "info":
        return None  # the wait itself is no bottleneck
    if shed > own:
        wait_ms = others_ms
        lines = [
            ctx(
                "the other ranks' wait for this rank inside collectives, share of the median step",
                others,
                "%",
                "ranks aligned on collective ends",
            ),
            *(
                b.lines(rules, wait_ms, stake, "the other ranks' wait for this rank per step")
                if b is not None
                else [
                    ev(
                        rules,
                        "comm.moderate",
                        f"step time balanced work takes off this rank ((N − 1)/N of that wait, N = {n} ranks)",
                        shed,
                    )
                ]
            ),
            ctx("this rank's own wait inside collectives", own, "% of step time"),
            *obs.imbalance_evidence,
        ]
        if b is not None and not b.explains(wait_ms, rules):
            return IMBALANCE.finding(
                stake, lines, b.not_work(wait_ms, "the other ranks wait"), rules, title=NOT_WORK_TITLE
            )
        detail = (
            f"this rank arrives last at the collectives: the other ranks wait {wait_ms:.1f} ms per step for it "
            "(host collectives, no GPU)"
            + (f"; it does {b.extra_ms:.3g} ms more work per step ({b.basis})" if b is not None else "")
        )
    else:
        wait_ms = sinks.ms_per_step("imbalance")
        lines = [
            ev(rules, "comm.moderate", "collective time waiting for the slowest rank", own),
            *obs.imbalance_evidence,
            *(b.lines(rules, wait_ms, stake) if b is not None else []),
            sink_line(obs, "imbalance"),
        ]
        if b is not None and not b.explains(wait_ms, rules):
            return IMBALANCE.finding(stake, lines, b.not_work(wait_ms, "this rank waits"), rules, title=NOT_WORK_TITLE)
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
    fix=catalog_fix("balance-ranks", projection="busy", text=_balance_words),
    whatif_pool="comm",
    diff_measure=DiffMeasure(
        "step time balanced work takes off (the wait for the slowest rank, capped by its extra work)",
        "ms per step",
        stake_ms("ranks/imbalance"),
    ),
    **verdict_class("imbalance"),
    # The wait the late rank's extra work does not explain is not imbalance: the verdict says a late
    # rank binds, not unequal work (its fix, balancing, is not offered either).
    headline_variants=((NOT_WORK_TITLE, "LATE-RANK-BOUND"),),
    breakdown=("communication",),
    describes="collective time a rank spends waiting for the slowest rank",
)

SPECS = (IMBALANCE,)
