"""Evidence-line helpers shared by the rule modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trainscope.analyzers.findings.base import Evidence
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import FindingSpec
from trainscope.analyzers.findings.base import Severity
from trainscope.analyzers.findings.base import by_stake
from trainscope.analyzers.findings.observations import DiagnosisInput
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.sinks import Sinks

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.live.window_stats import WindowStats


def ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    """An evidence line graded against threshold ``name`` of the rule table."""
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    return Evidence(metric, round(value, 2), t.unit, f"{op} {t.value:g}", t.source, meets)


def live_ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    """:func:`ev` for a live rule: ``gpu_busy.*`` is graded in "% of step time" in traces; live it is
    NVML's share of wall time."""
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    unit = "% of time" if name.startswith("gpu_busy.") else t.unit
    return Evidence(metric, round(value, 2), unit, f"{op} {t.value:g}", t.source, meets)


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


def raised_stake(obs: DiagnosisInput, rules: Rules, sink: str, severity: Severity) -> float | None:
    """A sink-measured finding's stake (% of step time) when it is raised (:func:`raised`, on a trace
    with GPU activity and sinks); None when it is not."""
    if not obs.has_gpu or obs.sinks is None or not raised(obs, rules, sink, severity):
        return None
    return obs.sinks.pct(sink)


def graded_ev(rules: Rules, severity: Severity, metric: str, stake: float) -> Evidence:
    """``stake``'s threshold line, read against the grade it reaches: the high rule, else the moderate one."""
    high = severity.high is not None and severity.grade(stake, rules) == "high"
    rule = severity.high if high else severity.moderate
    assert rule is not None  # a stake-graded severity names its moderate rule
    return ev(rules, rule, metric, stake)


BUSY_SEV = by_stake("busy_sink.moderate", "busy_sink.high")


def busy_sink_finding(
    spec: FindingSpec,
    obs: DiagnosisInput,
    rules: Rules,
    sink: str,
    why: tuple[str, str],
    counters_title: str,
    extra: Sequence[Evidence] = (),
) -> Finding | None:
    """The finding of a busy sink (``compute-bound``, ``memory-bound``: kernel time of that kind),
    raised as :func:`raised` says; its stake the sink's share of step time. Where hardware counters
    split the busy time their evidence comes first, and ``why`` and the title say so: ``why`` is
    (as the counters say it, as the kernels' roofline says it)."""
    stake = raised_stake(obs, rules, sink, BUSY_SEV)
    if stake is None or obs.sinks is None:
        return None
    lines = [
        ev(rules, "busy_sink.moderate", f"{sink} kernel time, share of step time", stake),
        *obs.busy_evidence,
        sink_line(obs, sink),
        ev(rules, "gpu_busy.saturated", "GPU busy", obs.breakdown.gpu_busy_pct),
        *extra,
    ]
    counters = obs.sinks.busy_source == "hardware counters"
    if counters:  # measured evidence first
        lines = [*obs.busy_evidence] + [x for x in lines if x not in obs.busy_evidence]
    return spec.finding(stake, lines, why[0] if counters else why[1], rules, title=counters_title if counters else None)


def live_busy_mix(s: WindowStats, r: Rules) -> tuple[str, str] | None:
    """What a busy GPU's time goes to in a live window: (``compute`` | ``memory``, ``gpm`` | ``nvml``).
    GPM activity decides first (SM/tensor against DRAM); without a GPM decision, NVML's
    memory-controller time share on a saturated GPU, as weaker evidence."""
    sm = max((x for x in (s.sm_util, s.tensor_util) if x is not None), default=None)
    if sm is not None and s.dram_util is not None:
        hi, lo = r.value("live.gpm_active"), r.value("live.gpm_quiet")
        if sm >= hi and s.dram_util < lo:
            return "compute", "gpm"
        if s.dram_util >= hi and sm < lo:
            return "memory", "gpm"
    if s.gpu_util is None or s.gpu_mem_ctrl is None or s.gpu_util < r.value("gpu_busy.saturated"):
        return None
    return ("memory" if s.gpu_mem_ctrl >= r.value("live.mem_ctrl_busy") else "compute"), "nvml"


def gpm_sm(s: WindowStats) -> float:
    """The larger of GPM's SM and tensor activity (where :func:`live_busy_mix` decided by GPM)."""
    return max(x for x in (s.sm_util, s.tensor_util) if x is not None)


def live_busy_finding(
    spec: FindingSpec, s: WindowStats, r: Rules, side: str, gpm: tuple[str, str], nvml: tuple[str, str]
) -> Finding | None:
    """The live finding of a busy GPU whose time goes to ``side`` (``compute`` | ``memory``, as
    :func:`live_busy_mix` decides): GPM's activity on that side against the other's quiet (high), or
    without GPM, NVML's utilization and memory-controller time shares (moderate, weaker evidence).
    ``gpm`` and ``nvml`` are (why, title) as each says it."""
    mix = live_busy_mix(s, r)
    if mix is None or mix[0] != side:
        return None
    if mix[1] == "gpm":
        assert s.dram_util is not None  # GPM decided: both sides were measured
        sides = {
            "compute": ("SM / tensor activity (GPM)", gpm_sm(s)),
            "memory": ("DRAM bandwidth utilization (GPM)", s.dram_util),
        }
        other = "memory" if side == "compute" else "compute"
        (busy, busy_pct), (quiet, quiet_pct) = sides[side], sides[other]
        lines = [live_ev(r, "live.gpm_active", busy, busy_pct), live_ev(r, "live.gpm_quiet", quiet, quiet_pct, "<")]
        return spec.finding(busy_pct, lines, gpm[0], r, title=gpm[1], severity="high")
    assert s.gpu_mem_ctrl is not None and s.gpu_util is not None  # NVML decided: both were sampled
    util = live_ev(r, "gpu_busy.saturated", "GPU utilization", s.gpu_util)
    ctrl = "memory controller busy (NVML, no GPM on this GPU)"
    if side == "compute":
        stake, lines = s.gpu_util, [util, live_ev(r, "live.mem_ctrl_busy", ctrl, s.gpu_mem_ctrl, "<")]
    else:
        stake, lines = s.gpu_mem_ctrl, [live_ev(r, "live.mem_ctrl_busy", ctrl, s.gpu_mem_ctrl), util]
    return spec.finding(stake, lines, nvml[0], r, title=nvml[1], severity="moderate")


# The thresholds live_busy_mix reads.
BUSY_MIX_THRESHOLDS = ("live.gpm_active", "live.gpm_quiet", "live.mem_ctrl_busy", "gpu_busy.saturated")
