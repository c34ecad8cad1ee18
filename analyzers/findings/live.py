"""Findings only the live engine raises (``trainscope watch``, counter-only recordings): utilization
patterns from sampled counters and memory creep, with their live measures. The other live findings
(input wait, loader CPU, I/O wait, capacity, compute-/memory-bound, throttling, power cap) are
declared, with their live measures, in their families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import DiffMeasure
from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import FixText
from trainscope.analyzers.findings.base import LiveMeasure
from trainscope.analyzers.findings.base import LiveRule
from trainscope.analyzers.findings.base import fixed
from trainscope.analyzers.findings.base import stake_pct
from trainscope.analyzers.findings.catalog import catalog_fix
from trainscope.analyzers.findings.catalog import catalog_words
from trainscope.analyzers.findings.common import live_ev
from trainscope.analyzers.live.memory_creep import SOURCE as CREEP_SOURCE
from trainscope.analyzers.live.memory_creep import memory_creeps
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.live.window_stats import WindowStats
    from trainscope.traces.samples import Snapshot

# --- live measures -----------------------------------------------------------------------------------


def _live_underutilized(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    """p95 utilization (over the GPU's active span, analyzers/live/window_stats.py) below the low mark."""
    if s.gpu_util_p95 is None or s.gpu_util_p95 >= r.value("live.p95_util_low"):
        return None
    return UNDERUTILIZED.finding(
        100 - (s.gpu_util or 0.0),
        [live_ev(r, "live.p95_util_low", "p95 GPU utilization", s.gpu_util_p95, "<")],
        "even the busiest samples leave the GPU mostly idle",
        r,
    )


def _live_fluctuating(s: WindowStats, _snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    """p95 utilization at or above the low mark while p5 sits near idle."""
    p95, p5 = s.gpu_util_p95, s.gpu_util_p5
    if p95 is None or p95 < r.value("live.p95_util_low") or p5 is None or p5 >= r.value("live.p5_util_fluctuating"):
        return None
    return FLUCTUATING.finding(
        100 - (s.gpu_util or 0.0),
        [
            live_ev(r, "live.p95_util_low", "p95 GPU utilization", p95),
            live_ev(r, "live.p5_util_fluctuating", "p5 GPU utilization", p5, "<"),
        ],
        "busy bursts alternate with idle gaps (periodic stalls: data, eval, checkpoints)",
        r,
    )


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def creep_finding(snaps: Sequence[Snapshot], rules: Rules | None = None) -> Finding | None:
    """``machine/memory-creep`` from the window's memory series (analyzers/live/memory_creep.py): each
    steady climb as evidence, the one that reaches capacity first as the detail."""
    r = rules or Rules()
    creeps = memory_creeps(snaps, r)
    if not creeps:
        return None
    worst = min(creeps, key=lambda c: c.to_capacity_s if c.to_capacity_s is not None else float("inf"))
    lines = []
    for c in creeps:
        lines.append(
            Evidence(
                f"{c.what}: growth rate",
                round(c.slope_bps / 2**20, 2),
                "MiB/s",
                f"R² ≥ {r.value('live.creep_min_r2'):g}, ≥ {r.value('live.creep_min_growth'):g} MiB over "
                f"{r.value('live.creep_min_span'):g}+ s",
                CREEP_SOURCE,
                True,
            )
        )
        lines.append(Evidence(f"{c.what}: fit of the line (R²)", round(c.r2, 3), "", "", CREEP_SOURCE, None))
        if c.per_step is not None:
            lines.append(
                Evidence(f"{c.what}: growth per iteration", round(c.per_step / 2**20, 3), "MiB", "", CREEP_SOURCE, None)
            )
        if c.to_capacity_s is not None and c.headroom is not None:
            lines.append(
                Evidence(
                    f"{c.what}: projected time until capacity",
                    round(c.to_capacity_s, 1),
                    "s",
                    f"headroom {c.headroom / 2**30:.2f} GiB at this slope",
                    CREEP_SOURCE,
                    None,
                )
            )
    t = worst.to_capacity_s
    sev = "high" if t is not None and t < r.value("live.creep_soon") else "moderate"
    detail = (
        f"{worst.what} grows {worst.slope_bps / 2**20:.1f} MiB/s over the last {worst.span_s:.0f} s "
        f"(+{worst.growth / 2**20:.0f} MiB, now {worst.current / 2**30:.2f} GiB)"
        + (f"; at this rate it reaches capacity in {_duration(t)}" if t is not None else "")
    )
    stake = 100.0 * worst.growth / worst.capacity if worst.capacity else 0.0
    return MEMORY_CREEP.finding(stake, lines, detail, rules or Rules(), severity=sev)


def _live_creep(_s: WindowStats, snaps: Sequence[Snapshot], r: Rules) -> Finding | None:
    return creep_finding(snaps, r)


# --- wording: the fix in the run's words (its Context) ----------------------------------------


def _record_words(c: Context, single: bool, bf16: bool) -> FixText:
    if c.native or c.source_format.startswith("nsys"):
        return catalog_words("record-trace", native=True)
    return FixText(
        "record-trace",
        "Record a trace to see what idles the GPU",
        "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=5),\n"
        "        on_trace_ready=torch.profiler.tensorboard_trace_handler('./trace')) as p:\n"
        "    for batch in batches: step(batch); p.step()\n"
        "# then: trainscope analyze ./trace",
    )


_RECORD = catalog_fix("record-trace", projection="none", text=_record_words)


def _utilization(
    spec_id: str, title: str, headline: str, describes: str, reads: str, rule: LiveRule, thresholds: tuple[str, ...]
) -> FindingSpec:
    """A live utilization pattern over the active span (one declaration for both): counters cannot
    tell what idles the GPU, so its fix is to record a trace (an observation graded info)."""
    return FindingSpec(
        id=spec_id,
        axis="insufficient_evidence",
        title=title,
        measure=None,
        can_be_primary=False,
        severity=fixed("info"),
        fix=_RECORD,
        diff_measure=DiffMeasure("GPU idle, share of samples", "%", stake_pct(spec_id)),
        critical_path="none",
        headline=headline,
        describes=describes,
        live=LiveMeasure("utilization", reads, rule, thresholds),
    )


UNDERUTILIZED = _utilization(
    "gpu/underutilized",
    "GPU underutilized",
    "UNDERUTILIZED",
    "p95 GPU utilization below the live threshold",
    "p95 GPU utilization over the active span",
    _live_underutilized,
    ("live.p95_util_low", "live.gpu_idle"),
)
FLUCTUATING = _utilization(
    "gpu/fluctuating",
    "GPU utilization fluctuates",
    "FLUCTUATING",
    "busy bursts alternating with idle gaps (p95 high, p5 low)",
    "p95/p5 GPU utilization over the active span",
    _live_fluctuating,
    ("live.p95_util_low", "live.p5_util_fluctuating", "live.gpu_idle"),
)

MEMORY_CREEP = FindingSpec(
    id="machine/memory-creep",
    axis="machine",
    title="Memory grows steadily over the run",
    measure=None,
    can_be_primary=False,
    severity=fixed("moderate"),
    fix=catalog_fix("find-the-leak", projection="none"),
    diff_measure=DiffMeasure("memory growth, share of capacity per window", "%", stake_pct("machine/memory-creep")),
    critical_path="none",
    headline="MEMORY CREEP",
    describes="host RSS of a process or a GPU's memory rising steadily (a slope over the window, with the time "
    "left until capacity)",
    live=LiveMeasure(
        "trend",
        "least-squares slope of host RSS per process and GPU memory per device over the window",
        _live_creep,
        (
            "live.creep_min_points",
            "live.creep_min_span",
            "live.creep_min_r2",
            "live.creep_min_growth",
            "live.creep_min_growth_pct",
            "live.creep_steady_fraction",
            "live.creep_soon",
        ),
        gpu=False,
        trend=True,
    ),
)

SPECS = (UNDERUTILIZED, FLUCTUATING, MEMORY_CREEP)
