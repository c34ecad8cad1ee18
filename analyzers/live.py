"""The live diagnosis: D·A·M verdicts from a sliding window of sampled counters (``trainscope watch``).

DIAGNOSIS.md's live rules, in order of the textbook flowchart (seed 000 lines 2078–2154) with the
corrections of §2:

1. While the GPU is starved (time-weighted utilization below ``gpu_busy.saturated``), the verdict is
   Data only with positive evidence: the step-exact DataLoader wait (``data/input-wait``), or the
   SageMaker Debugger patterns — GPU near idle while the host/loader CPU saturates
   (``data/loader-cpu``) or while I/O wait does (``data/io-wait``) in most samples. Starved with no
   such evidence is "insufficient evidence" (launch overhead, sync, communication: a trace tells).
2. Otherwise memory near capacity (``machine/capacity``).
3. Otherwise what the busy time is spent on: GPM SM/tensor versus DRAM activity
   (``algorithm/compute-bound`` / ``machine/bandwidth``); without GPM, NVML's memory-controller
   share, as weaker evidence.
4. No GPU at all (a CPU job): the step-exact wait alone decides Data versus the step itself.

Findings and evidence use the same dataclasses as ``trainscope analyze``, so both speak one
vocabulary. Every function here is pure; :class:`LiveAnalyzer` only keeps the window and the log
of verdict changes.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from trainscope.analyzers.findings import live_fix_table
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.verdict import Evidence, Finding, Verdict
from trainscope.collectors.samples import THROTTLE_REASONS, Snapshot

WARMING_UP, READY = "warming_up", "ready"


@dataclass(frozen=True)
class WindowStats:
    """Time-weighted (by each sample's ``dt``) summaries of the window; None where unmeasured."""

    span_s: float
    samples: int
    gpus: int
    gpu_util: float | None
    gpu_util_p95: float | None
    gpu_util_p5: float | None
    gpu_mem_ctrl: float | None
    gpu_mem_pct: float | None  # the fullest GPU's mean memory use, % of capacity
    sm_util: float | None
    tensor_util: float | None
    dram_util: float | None
    throttled_pct: float | None  # % of samples with a power/thermal slowdown
    cpu_pct: float | None
    iowait_pct: float | None
    main_cpu_pct: float | None
    workers: int | None
    worker_cpu_pct: float | None  # mean per worker, 100 = one core
    starved_cpu_pct: float | None  # % of samples: GPU near idle while the CPU/loader saturates
    starved_io_pct: float | None  # % of samples: GPU near idle while I/O wait saturates
    steps: int
    data_wait_pct: float | None
    step_ms: float | None


@dataclass(frozen=True)
class Fix:
    finding: str
    title: str
    change: str
    projected_speedup: float | None  # upper bound, ×
    basis: str


@dataclass(frozen=True)
class VerdictChange:
    t: float
    axis: str
    bottleneck: str | None
    summary: str


@dataclass(frozen=True)
class LiveStatus:
    t: float
    state: str  # "warming_up" | "ready"
    verdict: Verdict
    findings: tuple[Finding, ...]
    fixes: tuple[Fix, ...]
    stats: WindowStats
    changes: tuple[VerdictChange, ...] = ()


# --- window statistics -----------------------------------------------------------------------------

def _twmean(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    pairs = [(v, w) for v, w in zip(values, weights) if v is not None]
    if not pairs:
        return None
    tot = sum(w for _, w in pairs)
    if tot <= 0:
        return float(np.mean([v for v, _ in pairs]))
    return sum(v * w for v, w in pairs) / tot


def _mean_of(xs: Iterable[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def window_stats(snaps: Sequence[Snapshot], rules: Rules) -> WindowStats:
    w = [max(s.dt, 0.0) for s in snaps]
    util = [_mean_of(g.util_gpu for g in s.gpus if not g.lost) for s in snaps]
    measured = [u for u in util if u is not None]
    n_gpus = max((len(s.gpus) for s in snaps), default=0)
    mem_pct = None
    for idx in sorted({g.index for s in snaps for g in s.gpus}):
        per = [next((g.mem_pct for g in s.gpus if g.index == idx), None) for s in snaps]
        m = _twmean(per, w)
        if m is not None:
            mem_pct = m if mem_pct is None else max(mem_pct, m)
    hosts = [s.host for s in snaps]
    cpu = [h.cpu_pct if h else None for h in hosts]
    iow = [h.iowait_pct if h else None for h in hosts]
    main = [(h.group("main").cpu_pct if h and h.group("main") else None) for h in hosts]
    wk = [h.group("workers") if h else None for h in hosts]
    wk_count = [g.count for g in wk if g is not None]
    wk_cpu = [(g.cpu_pct / g.count if g is not None and g.count and g.cpu_pct is not None else None) for g in wk]

    idle, cpu_sat, io_sat = rules.value("live.gpu_idle"), rules.value("live.cpu_saturated"), rules.value("live.iowait_saturated")
    starved_cpu = starved_io = None
    both = [(u, c, io, lc, m) for u, c, io, lc, m in zip(util, cpu, iow, wk_cpu, main) if u is not None]
    if both:
        def loader_saturated(c, lc, m) -> bool:
            # The input pipeline's CPU: the workers (per worker), or the main process when it loads itself.
            loader = lc if lc is not None else m
            return (c is not None and c >= cpu_sat) or (loader is not None and loader >= cpu_sat)
        starved_cpu = 100.0 * sum(1 for u, c, io, lc, m in both if u < idle and loader_saturated(c, lc, m)) / len(both)
        with_io = [(u, io) for u, c, io, lc, m in both if io is not None]
        if with_io:
            starved_io = 100.0 * sum(1 for u, io in with_io if u < idle and io >= io_sat) / len(with_io)

    gpu_samples = [s for s in snaps if s.gpus]
    throttled = None
    if gpu_samples:
        with_events = [s for s in gpu_samples if any(g.clock_events is not None for g in s.gpus)]
        if with_events:
            throttled = 100.0 * sum(1 for s in with_events if any(
                THROTTLE_REASONS.intersection(g.clock_events or ()) for g in s.gpus)) / len(with_events)

    steps = [s.step for s in snaps if s.step is not None]
    n = sum(x.steps for x in steps)
    wait = sum(x.wait_ns for x in steps)
    total = sum(x.step_ns for x in steps)
    return WindowStats(
        span_s=sum(w), samples=len(snaps), gpus=n_gpus,
        gpu_util=_twmean(util, w),
        gpu_util_p95=float(np.percentile(measured, 95)) if measured else None,
        gpu_util_p5=float(np.percentile(measured, 5)) if measured else None,
        gpu_mem_ctrl=_twmean([_mean_of(g.util_mem for g in s.gpus) for s in snaps], w),
        gpu_mem_pct=mem_pct,
        sm_util=_twmean([_mean_of(g.sm_util for g in s.gpus) for s in snaps], w),
        tensor_util=_twmean([_mean_of(g.tensor_util for g in s.gpus) for s in snaps], w),
        dram_util=_twmean([_mean_of(g.dram_bw_util for g in s.gpus) for s in snaps], w),
        throttled_pct=throttled,
        cpu_pct=_twmean(cpu, w), iowait_pct=_twmean(iow, w), main_cpu_pct=_twmean(main, w),
        workers=max(wk_count) if wk_count else None, worker_cpu_pct=_twmean(wk_cpu, w),
        starved_cpu_pct=starved_cpu, starved_io_pct=starved_io,
        steps=n, data_wait_pct=100.0 * wait / total if total else None,
        step_ms=total / n / 1e6 if n else None,
    )


# --- rules -------------------------------------------------------------------------------------------

def _ev(rules: Rules, name: str, metric: str, value: float, op: str = "≥") -> Evidence:
    t = rules[name]
    meets = value >= t.value if op == "≥" else value < t.value
    # gpu_busy.* is graded in "% of step time" in traces; live it is NVML's share of wall time.
    unit = "% of time" if name.startswith("gpu_busy.") else t.unit
    return Evidence(metric, round(value, 2), unit, f"{op} {t.value:g}", t.source, meets)


def _ctx(metric: str, value: float | None, unit: str, source: str = "measured") -> Evidence:
    return Evidence(metric, None if value is None else round(value, 2), unit, "", source, None)


def _data_wait(s: WindowStats, r: Rules) -> Finding | None:
    if s.data_wait_pct is None or s.steps < r.value("live.min_steps"):
        return None
    p = s.data_wait_pct
    sev = "high" if p >= r.value("data_wait.high") else "moderate" if p >= r.value("data_wait.moderate") else None
    if sev is None:
        return None
    ev = [_ev(r, f"data_wait.{sev}", "training loop waiting in DataLoader __next__ (step-exact)", p),
          _ctx("steps measured in the window", s.steps, "steps", "step hook")]
    if s.workers is not None:
        ev.append(_ctx("DataLoader worker processes", s.workers, "processes", "process tree"))
    detail = "the input pipeline cannot keep the training step fed"
    if not s.workers:
        detail += "; batches are loaded in the training process itself (no DataLoader workers seen)"
    return Finding("data/input-wait", "data", sev, "Training waits on the input pipeline", p, ev, detail)


def _loader_cpu(s: WindowStats, r: Rules) -> Finding | None:
    if s.starved_cpu_pct is None or s.starved_cpu_pct <= r.value("live.starved_share"):
        return None
    ev = [_ev(r, "live.starved_share", f"samples with GPU < {r.value('live.gpu_idle'):g} % while CPU/loader ≥ "
              f"{r.value('live.cpu_saturated'):g} %", s.starved_cpu_pct),
          _ctx("host CPU", s.cpu_pct, "%"), _ctx("CPU per DataLoader worker", s.worker_cpu_pct, "% of a core")]
    return Finding("data/loader-cpu", "data", "high", "GPU starved while the input pipeline's CPU is saturated",
                   s.starved_cpu_pct, ev, "the data loader cannot produce batches as fast as the GPU consumes them")


def _io_wait(s: WindowStats, r: Rules) -> Finding | None:
    if s.starved_io_pct is None or s.starved_io_pct <= r.value("live.starved_share"):
        return None
    ev = [_ev(r, "live.starved_share", f"samples with GPU < {r.value('live.gpu_idle'):g} % while I/O wait ≥ "
              f"{r.value('live.iowait_saturated'):g} %", s.starved_io_pct), _ctx("I/O wait", s.iowait_pct, "%")]
    return Finding("data/io-wait", "data", "high", "GPU starved while the host waits on storage", s.starved_io_pct, ev,
                   "reading the data set is the bottleneck")


def _capacity(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_mem_pct is None or s.gpu_mem_pct < r.value("memory.capacity"):
        return None
    return Finding("machine/capacity", "machine", "high", "GPU memory near capacity", 0.0,
                   [_ev(r, "memory.capacity", "GPU memory used / total (fullest GPU)", s.gpu_mem_pct)],
                   "little headroom: larger batches or models will not fit, and allocator retries slow steps")


def _gpm_mix(s: WindowStats, r: Rules) -> Finding | None:
    sm = max((x for x in (s.sm_util, s.tensor_util) if x is not None), default=None)
    if sm is None or s.dram_util is None:
        return None
    hi, lo = r.value("live.gpm_active"), r.value("live.gpm_quiet")
    if sm >= hi and s.dram_util < lo:
        return Finding("algorithm/compute-bound", "algorithm", "high", "SMs and tensor cores are the limit", sm,
                       [_ev(r, "live.gpm_active", "SM / tensor activity (GPM)", sm),
                        _ev(r, "live.gpm_quiet", "DRAM bandwidth utilization (GPM)", s.dram_util, "<")],
                       "arithmetic units are the limit while kernels run")
    if s.dram_util >= hi and sm < lo:
        return Finding("machine/bandwidth", "machine", "high", "DRAM bandwidth is the limit", s.dram_util,
                       [_ev(r, "live.gpm_active", "DRAM bandwidth utilization (GPM)", s.dram_util),
                        _ev(r, "live.gpm_quiet", "SM / tensor activity (GPM)", sm, "<")],
                       "kernels move more bytes than they compute: fusion cuts the traffic")
    return None


def _nvml_mix(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_util is None or s.gpu_mem_ctrl is None or s.gpu_util < r.value("gpu_busy.saturated"):
        return None
    busy = r.value("live.mem_ctrl_busy")
    if s.gpu_mem_ctrl >= busy:
        return Finding("machine/bandwidth", "machine", "moderate", "Memory traffic dominates the busy GPU", s.gpu_mem_ctrl,
                       [_ev(r, "live.mem_ctrl_busy", "memory controller busy (NVML, no GPM on this GPU)", s.gpu_mem_ctrl),
                        _ev(r, "gpu_busy.saturated", "GPU utilization", s.gpu_util)],
                       "kernels wait on memory (NVML time shares; GPM would measure bandwidth directly)")
    return Finding("algorithm/compute-bound", "algorithm", "moderate", "The GPU is busy computing", s.gpu_util,
                   [_ev(r, "gpu_busy.saturated", "GPU utilization", s.gpu_util),
                    _ev(r, "live.mem_ctrl_busy", "memory controller busy (NVML, no GPM on this GPU)", s.gpu_mem_ctrl, "<")],
                   "kernels run nearly all the time with modest memory traffic (NVML time shares; GPM would be precise)")


def _utilization(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_util_p95 is None:
        return None
    low, fl = r.value("live.p95_util_low"), r.value("live.p5_util_fluctuating")
    if s.gpu_util_p95 < low:
        return Finding("gpu/underutilized", "insufficient_evidence", "info", "GPU underutilized", 100 - (s.gpu_util or 0.0),
                       [_ev(r, "live.p95_util_low", "p95 GPU utilization", s.gpu_util_p95, "<")],
                       "even the busiest samples leave the GPU mostly idle")
    if s.gpu_util_p5 is not None and s.gpu_util_p5 < fl:
        return Finding("gpu/fluctuating", "insufficient_evidence", "info", "GPU utilization fluctuates", 100 - (s.gpu_util or 0.0),
                       [_ev(r, "live.p95_util_low", "p95 GPU utilization", s.gpu_util_p95),
                        _ev(r, "live.p5_util_fluctuating", "p5 GPU utilization", s.gpu_util_p5, "<")],
                       "busy bursts alternate with idle gaps (periodic stalls: data, eval, checkpoints)")
    return None


def _throttling(s: WindowStats, r: Rules) -> Finding | None:
    if s.throttled_pct is None or s.throttled_pct <= r.value("live.throttle_share"):
        return None
    return Finding("machine/throttling", "machine", "moderate", "GPU clocks slowed by power or temperature", 0.0,
                   [_ev(r, "live.throttle_share", "samples with a power/thermal clock slowdown", s.throttled_pct)],
                   "the GPU runs below its clocks: check cooling and the power limit")


# The live rule table, in evaluation order: (finding id, what it reads, rule).
LIVE_RULES: tuple[tuple[str, str, Callable[[WindowStats, Rules], Finding | None]], ...] = (
    ("data/input-wait", "step-exact DataLoader wait share", _data_wait),
    ("data/loader-cpu", "GPU utilization × host/loader CPU per sample", _loader_cpu),
    ("data/io-wait", "GPU utilization × I/O wait per sample", _io_wait),
    ("machine/capacity", "GPU memory used / total", _capacity),
    ("gpm-mix", "GPM SM/tensor vs DRAM activity", _gpm_mix),
    ("nvml-mix", "NVML utilization vs memory-controller share (no GPM)", _nvml_mix),
    ("gpu-utilization", "p95/p5 GPU utilization", _utilization),
    ("machine/throttling", "clock-event reasons", _throttling),
)


def live_findings(s: WindowStats, rules: Rules) -> list[Finding]:
    out: list[Finding] = []
    for rid, _, rule in LIVE_RULES:
        if rid == "nvml-mix" and any(f.id in ("algorithm/compute-bound", "machine/bandwidth") for f in out):
            continue  # GPM already decided the mix
        f = rule(s, rules)
        if f is not None:
            out.append(f)
    return out


_CONF = {"high": 0.9, "moderate": 0.7, "info": 0.5}


def live_verdict(s: WindowStats, found: list[Finding], rules: Rules) -> Verdict:
    by = {f.id: f for f in found}
    has_gpu = s.gpu_util is not None
    data = [by[i] for i in ("data/input-wait", "data/loader-cpu", "data/io-wait") if i in by]

    def verdict(f: Finding, conf: float | None = None, extra: list[Evidence] | None = None) -> Verdict:
        return Verdict(f.axis, conf if conf is not None else _CONF[f.severity], f.id,
                       f"{f.title} — {f.detail}" if f.detail else f.title, list(f.evidence) + (extra or []))

    if not has_gpu:
        if data:
            return verdict(data[0])
        if s.data_wait_pct is not None and s.steps >= rules.value("live.min_steps"):
            f = Finding("algorithm/compute-bound", "algorithm", "moderate", "Time goes to the training step itself", 100 - s.data_wait_pct,
                        [_ev(rules, "data_wait.moderate", "training loop waiting in DataLoader __next__ (step-exact)", s.data_wait_pct, "<"),
                         _ctx("training process CPU", s.main_cpu_pct, "% of a core")],
                        "the input pipeline keeps up; no GPU is in use, so the step computes on the CPU")
            return verdict(f, 0.6)
        return Verdict("insufficient_evidence", 0.0, None,
                       "no GPU counters and no step timings: nothing measures where the time goes "
                       "(launch the job with `trainscope watch -- python …` for step-exact timing)", [])

    saturated = rules.value("gpu_busy.saturated")
    busy_ev = _ev(rules, "gpu_busy.saturated", "GPU utilization (time-weighted)", s.gpu_util,
                  "≥" if s.gpu_util >= saturated else "<")
    if s.gpu_util < saturated:
        if data:  # measured (step-exact) before inferred (counter patterns), high before moderate
            return verdict(sorted(data, key=lambda f: f.severity != "high")[0], extra=[busy_ev])
        return Verdict("insufficient_evidence", 0.0, None,
                       f"the GPU is busy {s.gpu_util:.0f} % of the time, but the counters show no input-pipeline "
                       "saturation; launch overhead, synchronization or communication can idle a GPU too — record a "
                       "trace and run `trainscope analyze` to tell them apart", [busy_ev])
    if "machine/capacity" in by:
        return verdict(by["machine/capacity"], extra=[busy_ev])
    for fid in ("algorithm/compute-bound", "machine/bandwidth"):
        if fid in by:
            return verdict(by[fid], 0.85 if by[fid].severity == "high" else 0.6)
    if s.gpu_mem_ctrl is None and s.dram_util is None:
        why = "this source has neither GPM nor memory-controller counters to tell compute-bound from memory-bound"
    else:
        why = "neither compute nor memory traffic dominates"
    return Verdict("balanced", 0.5, None, f"the GPU is busy {s.gpu_util:.0f} % of the time and {why}", [busy_ev])


# Finding id -> (fix title, change): declared with each finding in the registry.
_FIXES = live_fix_table()


def live_fixes(s: WindowStats, found: list[Finding]) -> list[Fix]:
    out = []
    for f in found:
        if f.id not in _FIXES:
            continue
        title, change = _FIXES[f.id]
        if f.id == "data/input-wait" and s.workers:
            title = "Prefetch more batches and add DataLoader workers"
        speed, basis = None, "no projection from sampled counters"
        if f.id == "data/input-wait" and s.data_wait_pct is not None and s.data_wait_pct < 100:
            w = s.data_wait_pct / 100
            speed, basis = round(1 / (1 - w), 3), f"hiding the measured {s.data_wait_pct:.1f} % wait entirely: 1 / (1 − {w:.3f})"
        if f.id == "algorithm/compute-bound" and s.gpu_util is None:
            continue  # a CPU job: GPU advice does not apply
        out.append(Fix(f.id, title, change, speed, basis))
    out.sort(key=lambda x: -(x.projected_speedup or 0.0))
    return out


def evaluate(snaps: Sequence[Snapshot], rules: Rules, t: float | None = None) -> LiveStatus:
    """The status of a window of snapshots (pure)."""
    s = window_stats(snaps, rules)
    t = t if t is not None else (snaps[-1].t if snaps else 0.0)
    stepping = any(x.step_mode in ("on", "waiting") for x in snaps[-3:])
    warming = s.samples < rules.value("live.min_samples") or (
        s.gpu_util is None and stepping and s.steps < rules.value("live.min_steps"))
    if warming:
        v = Verdict("insufficient_evidence", 0.0, None,
                    f"warming up: {s.samples} samples and {s.steps} steps so far", [])
        return LiveStatus(t, WARMING_UP, v, (), (), s)
    found = live_findings(s, rules)
    v = live_verdict(s, found, rules)
    if v.bottleneck:  # the primary finding first, then by severity
        grade = {"high": 0, "moderate": 1, "info": 2}
        found.sort(key=lambda f: (f.id != v.bottleneck, grade[f.severity], -f.stake_pct))
    return LiveStatus(t, READY, v, tuple(found), tuple(live_fixes(s, found)), s)


class LiveAnalyzer:
    """Keeps the last ``window_s`` seconds of snapshots, every snapshot of the run (for the final
    summary) and the log of verdict changes."""

    def __init__(self, rules: Rules | None = None, window_s: float = 30.0) -> None:
        self.rules = rules or Rules()
        self.window_s = window_s
        self._window: deque[Snapshot] = deque()
        self.history: list[Snapshot] = []
        self.changes: list[VerdictChange] = []
        self.status: LiveStatus | None = None

    def add(self, snap: Snapshot) -> LiveStatus:
        self.history.append(snap)
        self._window.append(snap)
        while self._window and snap.t - self._window[0].t > self.window_s:
            self._window.popleft()
        st = evaluate(list(self._window), self.rules, snap.t)
        key = (st.verdict.axis, st.verdict.bottleneck) if st.state == READY else (WARMING_UP, None)
        last = (self.changes[-1].axis, self.changes[-1].bottleneck) if self.changes else None
        if key != last:
            self.changes.append(VerdictChange(snap.t, key[0], key[1], st.verdict.summary))
        self.status = LiveStatus(st.t, st.state, st.verdict, st.findings, st.fixes, st.stats, tuple(self.changes))
        return self.status

    def summary(self) -> LiveStatus:
        """The verdict over the whole run, with the change log."""
        st = evaluate(self.history, self.rules)
        return LiveStatus(st.t, st.state, st.verdict, st.findings, st.fixes, st.stats, tuple(self.changes))


def counters_diagnosis(trace, rules: Rules):
    """``trainscope analyze`` on a counters-only trace (recording or nvidia-smi CSV): the live rules
    over the whole run, as analyze's findings, verdict and recommendations, plus a note."""
    from trainscope.analyzers.recommendations import Recommendation
    from trainscope.collectors.live_trace import trace_snapshots

    snaps = trace_snapshots(trace)
    st = evaluate(snaps, rules)
    recs = []
    if st.state == READY and st.verdict.axis != "insufficient_evidence":
        for fx in st.fixes:
            step = st.stats.step_ms
            recs.append(Recommendation(
                fx.finding.replace("/", "-"), fx.finding, fx.title, fx.change, fx.projected_speedup,
                None if fx.projected_speedup is None or step is None else round(step / fx.projected_speedup, 2),
                fx.basis))
    s = st.stats
    note = (f"sampled counters only ({s.samples} samples over {s.span_s:.0f} s"
            + (f", {s.gpus} GPU{'s' * (s.gpus != 1)}" if s.gpus else ", no GPU")
            + (f", {s.steps} timed steps, data wait {s.data_wait_pct:.1f} %" if s.data_wait_pct is not None else "")
            + "): the verdict comes from the live rules (`trainscope watch`); there is no per-kernel breakdown")
    if st.state == WARMING_UP:
        note += f"; too few samples for a verdict (need {rules.value('live.min_samples'):g})"
    return list(st.findings), st.verdict, recs, note
