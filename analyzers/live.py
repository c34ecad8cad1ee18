"""The live diagnosis: D·A·M verdicts from a sliding window of sampled counters (``trainscope watch``).

The live rules of docs/diagnosis.md, in order of the textbook flowchart (Machine Learning Systems (mlsysbook.ai), Model Training chapter, §Pipeline Optimizations › Systematic Optimization Framework) with the
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

import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

from trainscope.analyzers.findings import live_fix_table
from trainscope.analyzers.live_memory import creep_finding
from trainscope.analyzers.live_ranks import RankWindow, rank_window
from trainscope.analyzers.devices import default_power_limit_w
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.findings.base import Evidence, Finding, Verdict
from trainscope.traces.samples import THROTTLE_REASONS, Snapshot

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.recommendations import Recommendation
    from trainscope.traces.model import Trace

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
    throttle_reasons: tuple[tuple[str, float], ...]  # (reason group, % of samples with clock events), largest first
    power_capped_gpus: int | None  # GPUs whose busy power sits at a ceiling or at the enforced limit
    power_gpus: int | None  # GPUs with enough busy power samples to judge
    power_median_w: float | None  # median busy power of the capped GPUs (else of all judged GPUs)
    power_basis: str | None  # "enforced limit" or "ceiling in the samples"
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
    step_s: float = 0.0  # summed time of the window's completed steps
    cores: int | None = None  # the host's CPU cores (per-core samples), when sampled

    def enough_steps(self, rules: Rules) -> bool:
        """Enough step-exact evidence for a step-based verdict: steps and seconds."""
        return self.steps >= rules.value("live.min_steps") and self.step_s >= rules.value("live.min_step_seconds")


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
    ranks: "RankWindow | None" = None  # per rank, for a job with several (torchrun)

    @property
    def verdict_changes(self) -> int:
        """How often the shown verdict changed after the first one (warming up excluded)."""
        ready = [c for c in self.changes if c.axis != WARMING_UP]
        return max(0, len(ready) - 1)


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
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


# Clock-event reasons grouped by what a user does about them.
_REASON_GROUPS = {
    "sw_power_cap": "power cap",
    "hw_power_brake": "power brake",
    "sw_thermal": "thermal",
    "hw_thermal": "thermal",
    "hw_slowdown": "hardware slowdown",
    "throttled": "power or thermal",
}


def _active_span(util: Sequence[float | None], idle: float) -> tuple[int, int]:
    """Indexes [lo, hi) from the first to the last sample with the GPU above ``idle``: the job's
    start-up (imports, model load) and tail (shutdown) are outside. The whole range when the GPU
    never rose above idle."""
    busy = [i for i, u in enumerate(util) if u is not None and u >= idle]
    return (busy[0], busy[-1] + 1) if busy else (0, len(util))


@dataclass(frozen=True)
class SampleDigest:
    """What the window statistics read of one snapshot, computed once per snapshot (not once per
    window it stays in): per-sample GPU means, and per-GPU arrays for the per-GPU judgements. A
    window of W samples × G GPUs then costs O(W + W·G numpy) per update instead of O(W·G) Python,
    and a replay costs O(samples × GPUs) Python in all."""

    w: float  # the sample's weight (its dt, never negative)
    util: float | None  # mean utilization of the GPUs that answered
    util_mem: float | None
    sm: float | None
    tensor: float | None
    dram: float | None
    gpus: int
    mem_idx: np.ndarray  # GPU index of each memory reading (the first entry per index)
    mem_pct: np.ndarray
    has_events: bool  # some GPU reported clock events
    throttled: bool  # some GPU was slowed by power or heat
    reason_groups: frozenset[str]
    power_idx: np.ndarray  # busy (≥ gpu_busy.saturated), answering GPUs with a power reading
    power_w: np.ndarray
    power_limit_w: np.ndarray  # 0 where the limit is unknown


def digest(s: Snapshot, rules: Rules) -> SampleDigest:
    busy_util = rules.value("gpu_busy.saturated")
    first_mem: dict[int, float | None] = {}
    p_idx: list[int] = []
    p_w: list[float] = []
    p_lim: list[float] = []
    has_events = throttled = False
    groups: set[str] = set()
    for g in s.gpus:
        if g.index not in first_mem:
            first_mem[g.index] = g.mem_pct
        if g.power_w is not None and g.util_gpu is not None and g.util_gpu >= busy_util and not g.lost:
            p_idx.append(g.index)
            p_w.append(g.power_w)
            p_lim.append(g.power_limit_w or default_power_limit_w(g.name) or 0.0)  # NVML's, else the table's
        ev = g.clock_events
        if ev is not None:
            has_events = True
            if ev:
                if not throttled and THROTTLE_REASONS.intersection(ev):
                    throttled = True
                groups.update(_REASON_GROUPS[r] for r in ev if r in _REASON_GROUPS)
    mem = [(i, v) for i, v in first_mem.items() if v is not None]
    return SampleDigest(
        w=max(s.dt, 0.0),
        util=_mean_of(g.util_gpu for g in s.gpus if not g.lost),
        util_mem=_mean_of(g.util_mem for g in s.gpus),
        sm=_mean_of(g.sm_util for g in s.gpus),
        tensor=_mean_of(g.tensor_util for g in s.gpus),
        dram=_mean_of(g.dram_bw_util for g in s.gpus),
        gpus=len(s.gpus),
        mem_idx=np.array([i for i, _ in mem], dtype=np.int64),
        mem_pct=np.array([v for _, v in mem], dtype=float),
        has_events=has_events,
        throttled=throttled,
        reason_groups=frozenset(groups),
        power_idx=np.array(p_idx, dtype=np.int64),
        power_w=np.array(p_w, dtype=float),
        power_limit_w=np.array(p_lim, dtype=float),
    )


def _grouped_quantile(starts: np.ndarray, counts: np.ndarray, sorted_vals: np.ndarray, q: float) -> np.ndarray:
    """numpy's default ('linear') quantile ``q`` of each group of ``sorted_vals`` (sorted within
    groups; group k is ``sorted_vals[starts[k]:starts[k] + counts[k]]``)."""
    pos = starts + (counts - 1) * q
    lo = np.floor(pos).astype(np.int64)
    hi = np.ceil(pos).astype(np.int64)
    out: np.ndarray = sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)
    return out


def _groups(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sorted by (key, value): the group keys, their starts and counts, and the sorted values."""
    order = np.lexsort((vals, keys))
    k, v = keys[order], vals[order]
    uniq, starts, counts = np.unique(k, return_index=True, return_counts=True)
    return uniq, starts, counts, v


def _power_capped(ds: Sequence[SampleDigest], rules: Rules) -> tuple[int | None, int | None, float | None, str | None]:
    """Per GPU: is busy power pinned at the enforced limit (when known) or at a hard ceiling (a
    limiter clamps from above: samples pile up under the maximum)? Returns (capped GPUs, judged
    GPUs, median busy watts, basis)."""
    if not ds:
        return None, None, None, None
    idx = np.concatenate([d.power_idx for d in ds])
    if not len(idx):
        return None, None, None, None
    watts = np.concatenate([d.power_w for d in ds])
    lims = np.concatenate([d.power_limit_w for d in ds])
    gpus, starts, counts, pw = _groups(idx, watts)
    keep = counts >= rules.value("live.min_samples") * 5
    if not keep.any():
        return None, None, None, None
    med = _grouped_quantile(starts, counts, pw, 0.5)
    known = lims != 0  # truthy limits, as reported
    lim_med = np.full(len(gpus), np.nan)
    if known.any():
        lg, ls, lc, lv = _groups(idx[known], lims[known])
        lim_med[np.searchsorted(gpus, lg)] = _grouped_quantile(ls, lc, lv, 0.5)
    has_lim = ~np.isnan(lim_med)
    at_limit = med >= rules.value("live.power_at_limit_pct") / 100.0 * np.where(has_lim, lim_med, 0.0)
    # A cap needs a limit (NVML's enforced limit, else the device table's default): a maximum of the
    # samples at full load says nothing about one.
    hit = has_lim & at_limit & keep
    judged = int(keep.sum())
    capped = int(hit.sum())
    basis = None
    if capped:  # the basis of the first capped GPU, by index (as a per-GPU loop would find it)
        basis = "enforced limit" if has_lim[np.flatnonzero(hit)[0]] else "ceiling in the samples"
    chosen = med[hit] if capped else med[keep]
    return capped, judged, float(np.median(chosen)), basis


def _fullest_memory(ds: Sequence[SampleDigest]) -> float | None:
    """The fullest GPU's time-weighted mean memory use over the window, % of capacity."""
    idx = np.concatenate([d.mem_idx for d in ds]) if ds else np.empty(0, np.int64)
    if not len(idx):
        return None
    vals = np.concatenate([d.mem_pct for d in ds])
    w = np.concatenate([np.full(len(d.mem_idx), d.w) for d in ds])
    _, inv = np.unique(idx, return_inverse=True)
    tot = np.bincount(inv, weights=w)
    weighted = np.bincount(inv, weights=vals * w)
    plain = np.bincount(inv, weights=vals) / np.bincount(inv)
    per_gpu = np.where(tot > 0, weighted / np.where(tot > 0, tot, 1.0), plain)
    return float(per_gpu.max())


def window_stats(
    snaps: Sequence[Snapshot],
    rules: Rules,
    steps_after_t: float | None = None,
    digests: Sequence[SampleDigest] | None = None,
) -> WindowStats:
    """``steps_after_t``: step samples at or before this time are the run's start-up and are left out.
    ``digests``: each snapshot's :func:`digest`, when the caller keeps them (a live window does)."""
    ds = list(digests) if digests is not None else [digest(s, rules) for s in snaps]
    w = [d.w for d in ds]
    util = [d.util for d in ds]
    lo, hi = _active_span(util, rules.value("live.gpu_idle"))
    # Percentiles (underutilized / fluctuating) over the job's active span: start-up and tail
    # samples would make any steady job look like it fluctuates.
    measured = [u for u in util[lo:hi] if u is not None]
    n_gpus = max((d.gpus for d in ds), default=0)
    mem_pct = _fullest_memory(ds)
    hosts = [s.host for s in snaps]
    cpu = [h.cpu_pct if h else None for h in hosts]
    iow = [h.iowait_pct if h else None for h in hosts]
    mains = [h.group("main") if h else None for h in hosts]
    main = [g.cpu_pct if g else None for g in mains]
    wk = [h.group("workers") if h else None for h in hosts]
    wk_count = [g.count for g in wk if g is not None]
    wk_cpu = [(g.cpu_pct / g.count if g is not None and g.count and g.cpu_pct is not None else None) for g in wk]

    idle, cpu_sat, io_sat = (
        rules.value("live.gpu_idle"),
        rules.value("live.cpu_saturated"),
        rules.value("live.iowait_saturated"),
    )
    starved_cpu = starved_io = None
    both = [(u, c, io, lc, m) for u, c, io, lc, m in zip(util, cpu, iow, wk_cpu, main) if u is not None]
    if both:

        def loader_saturated(c: float | None, lc: float | None, m: float | None) -> bool:
            # The input pipeline's CPU: the workers (per worker), or the main process when it loads itself.
            loader = lc if lc is not None else m
            return (c is not None and c >= cpu_sat) or (loader is not None and loader >= cpu_sat)

        starved_cpu = 100.0 * sum(1 for u, c, io, lc, m in both if u < idle and loader_saturated(c, lc, m)) / len(both)
        with_io = [(u, io) for u, c, io, lc, m in both if io is not None]
        if with_io:
            starved_io = 100.0 * sum(1 for u, io in with_io if u < idle and io >= io_sat) / len(with_io)

    throttled = None
    reasons: tuple[tuple[str, float], ...] = ()
    with_events = [d for d in ds if d.gpus and d.has_events]
    if with_events:
        throttled = 100.0 * sum(1 for d in with_events if d.throttled) / len(with_events)
        counts: dict[str, int] = {}
        for d in with_events:
            for grp in d.reason_groups:
                counts[grp] = counts.get(grp, 0) + 1
        reasons = tuple(sorted(((k, 100.0 * v / len(with_events)) for k, v in counts.items()), key=lambda x: -x[1]))
    capped, judged, watts, basis = _power_capped(ds, rules)

    steps = [s.step for s in snaps if s.step is not None and (steps_after_t is None or s.t > steps_after_t)]
    n = sum(x.steps for x in steps)
    wait = sum(x.wait_ns for x in steps)
    total = sum(x.step_ns for x in steps)
    return WindowStats(
        span_s=sum(w),
        samples=len(snaps),
        gpus=n_gpus,
        gpu_util=_twmean(util, w),
        gpu_util_p95=float(np.percentile(measured, 95)) if measured else None,
        gpu_util_p5=float(np.percentile(measured, 5)) if measured else None,
        gpu_mem_ctrl=_twmean([d.util_mem for d in ds], w),
        gpu_mem_pct=mem_pct,
        sm_util=_twmean([d.sm for d in ds], w),
        tensor_util=_twmean([d.tensor for d in ds], w),
        dram_util=_twmean([d.dram for d in ds], w),
        throttled_pct=throttled,
        throttle_reasons=reasons,
        power_capped_gpus=capped,
        power_gpus=judged,
        power_median_w=watts,
        power_basis=basis,
        cpu_pct=_twmean(cpu, w),
        iowait_pct=_twmean(iow, w),
        main_cpu_pct=_twmean(main, w),
        workers=max(wk_count) if wk_count else None,
        worker_cpu_pct=_twmean(wk_cpu, w),
        starved_cpu_pct=starved_cpu,
        starved_io_pct=starved_io,
        steps=n,
        data_wait_pct=100.0 * wait / total if total else None,
        step_ms=total / n / 1e6 if n else None,
        step_s=total / 1e9,
        cores=max((len(h.per_core) for h in hosts if h is not None and h.per_core), default=None),
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
    if s.data_wait_pct is None or not s.enough_steps(r):
        return None
    p = s.data_wait_pct
    sev = "high" if p >= r.value("data_wait.high") else "moderate" if p >= r.value("data_wait.moderate") else None
    if sev is None:
        return None
    ev = [
        _ev(r, f"data_wait.{sev}", "training loop waiting in DataLoader __next__ (step-exact)", p),
        _ctx("steps measured in the window", s.steps, "steps", "step hook"),
    ]
    if s.workers is not None:
        ev.append(_ctx("DataLoader worker processes", s.workers, "processes", "process tree"))
    detail = "the input pipeline cannot keep the training step fed"
    if not s.workers:
        detail += "; batches are loaded in the training process itself (no DataLoader workers seen)"
    return Finding("data/input-wait", "data", sev, "Training waits on the input pipeline", p, ev, detail)


def _loader_cpu(s: WindowStats, r: Rules) -> Finding | None:
    if s.starved_cpu_pct is None or s.starved_cpu_pct <= r.value("live.starved_share"):
        return None
    ev = [
        _ev(
            r,
            "live.starved_share",
            f"samples with GPU < {r.value('live.gpu_idle'):g} % while CPU/loader ≥ {r.value('live.cpu_saturated'):g} %",
            s.starved_cpu_pct,
        ),
        _ctx("host CPU", s.cpu_pct, "%"),
        _ctx("CPU per DataLoader worker", s.worker_cpu_pct, "% of a core"),
    ]
    return Finding(
        "data/loader-cpu",
        "data",
        "high",
        "GPU starved while the input pipeline's CPU is saturated",
        s.starved_cpu_pct,
        ev,
        "the data loader cannot produce batches as fast as the GPU consumes them",
    )


def _io_wait(s: WindowStats, r: Rules) -> Finding | None:
    if s.starved_io_pct is None or s.starved_io_pct <= r.value("live.starved_share"):
        return None
    ev = [
        _ev(
            r,
            "live.starved_share",
            f"samples with GPU < {r.value('live.gpu_idle'):g} % while I/O wait ≥ "
            f"{r.value('live.iowait_saturated'):g} %",
            s.starved_io_pct,
        ),
        _ctx("I/O wait", s.iowait_pct, "%"),
    ]
    return Finding(
        "data/io-wait",
        "data",
        "high",
        "GPU starved while the host waits on storage",
        s.starved_io_pct,
        ev,
        "reading the data set is the bottleneck",
    )


def _capacity(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_mem_pct is None or s.gpu_mem_pct < r.value("memory.capacity"):
        return None
    return Finding(
        "machine/capacity",
        "machine",
        "high",
        "GPU memory near capacity",
        0.0,
        [_ev(r, "memory.capacity", "GPU memory used / total (fullest GPU)", s.gpu_mem_pct)],
        "little headroom: larger batches or models will not fit, and allocator retries slow steps",
    )


def _gpm_mix(s: WindowStats, r: Rules) -> Finding | None:
    sm = max((x for x in (s.sm_util, s.tensor_util) if x is not None), default=None)
    if sm is None or s.dram_util is None:
        return None
    hi, lo = r.value("live.gpm_active"), r.value("live.gpm_quiet")
    if sm >= hi and s.dram_util < lo:
        return Finding(
            "algorithm/compute-bound",
            "algorithm",
            "high",
            "SMs and tensor cores are the limit",
            sm,
            [
                _ev(r, "live.gpm_active", "SM / tensor activity (GPM)", sm),
                _ev(r, "live.gpm_quiet", "DRAM bandwidth utilization (GPM)", s.dram_util, "<"),
            ],
            "arithmetic units are the limit while kernels run",
        )
    if s.dram_util >= hi and sm < lo:
        return Finding(
            "machine/bandwidth",
            "machine",
            "high",
            "DRAM bandwidth is the limit",
            s.dram_util,
            [
                _ev(r, "live.gpm_active", "DRAM bandwidth utilization (GPM)", s.dram_util),
                _ev(r, "live.gpm_quiet", "SM / tensor activity (GPM)", sm, "<"),
            ],
            "kernels move more bytes than they compute: fusion cuts the traffic",
        )
    return None


def _nvml_mix(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_util is None or s.gpu_mem_ctrl is None or s.gpu_util < r.value("gpu_busy.saturated"):
        return None
    busy = r.value("live.mem_ctrl_busy")
    if s.gpu_mem_ctrl >= busy:
        return Finding(
            "machine/bandwidth",
            "machine",
            "moderate",
            "Memory traffic dominates the busy GPU",
            s.gpu_mem_ctrl,
            [
                _ev(r, "live.mem_ctrl_busy", "memory controller busy (NVML, no GPM on this GPU)", s.gpu_mem_ctrl),
                _ev(r, "gpu_busy.saturated", "GPU utilization", s.gpu_util),
            ],
            "kernels wait on memory (NVML time shares; GPM would measure bandwidth directly)",
        )
    return Finding(
        "algorithm/compute-bound",
        "algorithm",
        "moderate",
        "The GPU is busy computing",
        s.gpu_util,
        [
            _ev(r, "gpu_busy.saturated", "GPU utilization", s.gpu_util),
            _ev(r, "live.mem_ctrl_busy", "memory controller busy (NVML, no GPM on this GPU)", s.gpu_mem_ctrl, "<"),
        ],
        "kernels run nearly all the time with modest memory traffic (NVML time shares; GPM would be precise)",
    )


def _utilization(s: WindowStats, r: Rules) -> Finding | None:
    if s.gpu_util_p95 is None:
        return None
    low, fl = r.value("live.p95_util_low"), r.value("live.p5_util_fluctuating")
    if s.gpu_util_p95 < low:
        return Finding(
            "gpu/underutilized",
            "insufficient_evidence",
            "info",
            "GPU underutilized",
            100 - (s.gpu_util or 0.0),
            [_ev(r, "live.p95_util_low", "p95 GPU utilization", s.gpu_util_p95, "<")],
            "even the busiest samples leave the GPU mostly idle",
        )
    if s.gpu_util_p5 is not None and s.gpu_util_p5 < fl:
        return Finding(
            "gpu/fluctuating",
            "insufficient_evidence",
            "info",
            "GPU utilization fluctuates",
            100 - (s.gpu_util or 0.0),
            [
                _ev(r, "live.p95_util_low", "p95 GPU utilization", s.gpu_util_p95),
                _ev(r, "live.p5_util_fluctuating", "p5 GPU utilization", s.gpu_util_p5, "<"),
            ],
            "busy bursts alternate with idle gaps (periodic stalls: data, eval, checkpoints)",
        )
    return None


_THROTTLE_ADVICE = {
    "power cap": (
        "GPU clocks held down by the power cap",
        "the GPU draws its power limit and lowers its clocks to stay under it: check the limit "
        "(nvidia-smi -q -d POWER) and whether it was lowered below the board's default",
    ),
    "power brake": (
        "GPU clocks cut by the power brake",
        "an external power-brake signal (the system's power supply or chassis) slows the GPU",
    ),
    "thermal": ("GPU clocks slowed by temperature", "the GPU is too hot: check cooling and airflow"),
}


def _throttling(s: WindowStats, r: Rules) -> Finding | None:
    if s.throttled_pct is None or s.throttled_pct <= r.value("live.throttle_share"):
        return None
    top = s.throttle_reasons[0][0] if s.throttle_reasons else "power or thermal"
    title, detail = _THROTTLE_ADVICE.get(
        top,
        (
            "GPU clocks slowed by power or temperature",
            "the GPU runs below its clocks: check cooling and the power limit",
        ),
    )
    ev = [_ev(r, "live.throttle_share", "samples with a power/thermal clock slowdown", s.throttled_pct)]
    ev += [
        _ctx(f"samples slowed by: {name}", pct, "% of samples", "NVML clock-event reasons")
        for name, pct in s.throttle_reasons
    ]
    return Finding("machine/throttling", "machine", "moderate", title, 0.0, ev, detail)


def _power_cap(s: WindowStats, r: Rules) -> Finding | None:
    """Power pinned at a limit while the GPUs are busy: the clocks are set by the power budget."""
    if not s.power_gpus or not s.power_capped_gpus or 2 * s.power_capped_gpus <= s.power_gpus:
        return None
    if s.throttle_reasons and s.throttle_reasons[0][0] == "power cap":
        return None  # the clock-event reasons already say it, more directly
    at_limit = s.power_basis == "enforced limit"
    name = "live.power_at_limit_pct" if at_limit else "live.power_ceiling_pct"
    ev = [
        _ctx(
            "GPUs whose busy power sits " + ("at the enforced limit" if at_limit else "at a hard ceiling"),
            s.power_capped_gpus,
            f"of {s.power_gpus} GPUs",
            f"power samples; threshold {name} = {r.value(name):g}",
        ),
        _ctx("median busy power of those GPUs", s.power_median_w, "W"),
    ]
    detail = (
        "busy power stays pinned under a maximum it never exceeds: the GPUs run at their power limit, so "
        "their clocks follow the power budget"
        + ("" if at_limit else " (this source records no power limit; the ceiling is read from the samples)")
    )
    return Finding("machine/power-cap", "machine", "moderate", "GPUs run at their power limit", 0.0, ev, detail)


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
    ("machine/power-cap", "busy power against the enforced limit or a ceiling in the samples", _power_cap),
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
    data = [by[i] for i in ("data/input-wait", "data/loader-cpu", "data/io-wait") if i in by]

    def verdict(f: Finding, conf: float | None = None, extra: list[Evidence] | None = None) -> Verdict:
        return Verdict(
            f.axis,
            conf if conf is not None else _CONF[f.severity],
            f.id,
            f"{f.title} — {f.detail}" if f.detail else f.title,
            list(f.evidence) + (extra or []),
        )

    if s.gpu_util is None:
        if data:
            return verdict(data[0])
        if s.data_wait_pct is not None and s.enough_steps(rules):
            f = Finding(
                "algorithm/compute-bound",
                "algorithm",
                "moderate",
                "Time goes to the training step itself",
                100 - s.data_wait_pct,
                [
                    _ev(
                        rules,
                        "data_wait.moderate",
                        "training loop waiting in DataLoader __next__ (step-exact)",
                        s.data_wait_pct,
                        "<",
                    ),
                    _ctx("training process CPU", s.main_cpu_pct, "% of a core"),
                ],
                "the input pipeline keeps up; no GPU is in use, so the step computes on the CPU",
            )
            return verdict(f, 0.6)
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            "no GPU counters and no step timings: nothing measures where the time goes "
            "(launch the job with `trainscope watch -- python …` for step-exact timing)",
            [],
        )

    saturated = rules.value("gpu_busy.saturated")
    busy_ev = _ev(
        rules,
        "gpu_busy.saturated",
        "GPU utilization (time-weighted)",
        s.gpu_util,
        "≥" if s.gpu_util >= saturated else "<",
    )
    if s.gpu_util < saturated:
        if data:  # measured (step-exact) before inferred (counter patterns), high before moderate
            return verdict(sorted(data, key=lambda f: f.severity != "high")[0], extra=[busy_ev])
        return Verdict(
            "insufficient_evidence",
            0.0,
            None,
            f"the GPU is busy {s.gpu_util:.0f} % of the time, but the counters show no input-pipeline "
            "saturation; launch overhead, synchronization or communication can idle a GPU too — record a "
            "trace and run `trainscope analyze` to tell them apart",
            [busy_ev],
        )
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


# The registry's snippet computes the worker count where it runs; the watch knows the machine it samples.
_WORKERS_RULE = re.compile(
    r"# as many workers as this machine has CPU cores per GPU:\n"
    r"workers = max\(1, len\(os\.sched_getaffinity\(0\)\) // [^\n]*\n"
)
_WORKERS_ARG = re.compile(r"num_workers=workers,")


def fit_workers(change: str, s: WindowStats) -> str:
    """The DataLoader worker count of a fix, fitted to the machine the watch samples: its cores
    per GPU, one left for the training process, at most 8."""
    if not s.cores or not _WORKERS_RULE.search(change):
        return change
    per_gpu = s.cores // max(1, s.gpus)
    n = max(1, min(8, per_gpu - 1))
    where = f"{s.cores} CPU cores here" + (f", {s.gpus} GPUs" if s.gpus > 1 else "")
    change = _WORKERS_RULE.sub("", change)
    return _WORKERS_ARG.sub(f"num_workers={n},  # {where}", change, count=1)


def live_fixes(s: WindowStats, found: list[Finding], rules: Rules | None = None) -> list[Fix]:
    out = []
    saturated = (rules or Rules()).value("live.cpu_saturated")
    for f in found:
        if f.id not in _FIXES:
            continue
        title, change = _FIXES[f.id]
        change = fit_workers(change, s)
        if f.id == "data/input-wait" and s.workers:
            title = "Prefetch more batches and add DataLoader workers"
        speed, basis = None, "no projection from sampled counters"
        if f.id == "data/input-wait" and s.data_wait_pct is not None and s.data_wait_pct < 100:
            w = s.data_wait_pct / 100
            speed, basis = (
                round(1 / (1 - w), 3),
                f"hiding the measured {s.data_wait_pct:.1f} % wait entirely: 1 / (1 − {w:.3f})",
            )
            if s.cpu_pct is not None and s.cpu_pct >= saturated:  # no free core for more workers here
                speed = None
                basis = (
                    f"no projection: the host's CPUs are already {s.cpu_pct:.0f} % busy, so more workers have "
                    f"no free core to run on (a {s.data_wait_pct:.1f} % wait is hidden only with spare CPU)"
                )
        if f.id == "algorithm/compute-bound" and s.gpu_util is None:
            continue  # a CPU job: GPU advice does not apply
        out.append(Fix(f.id, title, change, speed, basis))
    out.sort(key=lambda x: -(x.projected_speedup or 0.0))
    return out


def startup_end(snaps: Sequence[Snapshot], rules: Rules) -> float | None:
    """The time of the snapshot that completes the run's first ``live.startup_steps`` steps: step
    samples up to it are start-up (iterator and worker creation, lazy initialization)."""
    need, seen = rules.value("live.startup_steps"), 0
    if need <= 0:
        return None
    for x in snaps:
        if x.step is not None and x.step.steps:
            seen += x.step.steps
            if seen >= need:
                return x.t
    return None


def evaluate(
    snaps: Sequence[Snapshot],
    rules: Rules,
    t: float | None = None,
    steps_after_t: float | None = None,
    digests: Sequence[SampleDigest] | None = None,
) -> LiveStatus:
    """The status of a window of snapshots (pure). ``steps_after_t``, ``digests``: see :func:`window_stats`."""
    s = window_stats(snaps, rules, steps_after_t, digests)
    t = t if t is not None else (snaps[-1].t if snaps else 0.0)
    stepping = any(x.step_mode in ("on", "waiting") for x in snaps[-3:])
    warming = s.samples < rules.value("live.min_samples") or (
        s.gpu_util is None and stepping and not s.enough_steps(rules)
    )
    ranks = rank_window(snaps, rules) if any(x.ranks for x in snaps) else None
    creep = creep_finding(snaps)  # a leak is said even while the verdict warms up
    if warming:
        v = Verdict(
            "insufficient_evidence", 0.0, None, f"warming up: {s.samples} samples and {s.steps} steps so far", []
        )
        return LiveStatus(t, WARMING_UP, v, (creep,) if creep else (), (), s, ranks=ranks)
    found = live_findings(s, rules) + ([creep] if creep else [])
    v = live_verdict(s, found, rules)
    if v.bottleneck:  # the primary finding first, then by severity
        grade = {"high": 0, "moderate": 1, "info": 2}
        found.sort(key=lambda f: (f.id != v.bottleneck, grade[f.severity], -f.stake_pct))
    return LiveStatus(t, READY, v, tuple(found), tuple(live_fixes(s, found, rules)), s, ranks=ranks)


def _key(st: LiveStatus) -> tuple[str, str | None]:
    return (st.verdict.axis, st.verdict.bottleneck) if st.state == READY else (WARMING_UP, None)


class LiveAnalyzer:
    """Keeps the last ``window_s`` seconds of snapshots, every snapshot of the run (for the final
    summary) and the log of verdict changes.

    The shown verdict has hysteresis: a new verdict replaces it only after leading without
    interruption for ``live.verdict_hold`` seconds, so a window that grazes a threshold, one slow
    step or one odd sample does not flip it. Until then the shown verdict, findings and fixes stay,
    with the current window's statistics."""

    def __init__(self, rules: Rules | None = None, window_s: float = 30.0) -> None:
        self.rules = rules or Rules()
        self.window_s = window_s
        self._window: deque[Snapshot] = deque()
        self._window_digests: deque[SampleDigest] = deque()
        self.history: list[Snapshot] = []
        self._digests: list[SampleDigest] = []  # one per history snapshot, computed once
        self.changes: list[VerdictChange] = []
        self.status: LiveStatus | None = None
        self._shown: LiveStatus | None = None
        self._candidate: tuple[tuple[str, str | None], float] | None = None  # (key, leading since)
        self._startup_end: float | None = None
        self._creep: Finding | None = None  # the last memory-creep finding of any window (for the summary)

    def add(self, snap: Snapshot) -> LiveStatus:
        d = digest(snap, self.rules)
        self.history.append(snap)
        self._digests.append(d)
        self._window.append(snap)
        self._window_digests.append(d)
        while self._window and snap.t - self._window[0].t > self.window_s:
            self._window.popleft()
            self._window_digests.popleft()
        if self._startup_end is None and snap.step is not None and snap.step.steps:
            self._startup_end = startup_end(self.history, self.rules)  # once, when steps first arrive
        st = evaluate(list(self._window), self.rules, snap.t, self._startup_end, list(self._window_digests))
        self._creep = next((f for f in st.findings if f.id == "machine/memory-creep"), self._creep)
        key, shown = _key(st), self._shown
        if shown is None or key == _key(shown):
            accept, self._candidate = True, None
        elif _key(shown)[0] == WARMING_UP:
            accept = True  # leaving warm-up is not a flap: the minimum evidence already guards it
        else:
            accept = self._held(key, snap.t) >= self.rules.value("live.verdict_hold")
        if accept:
            self._shown, self._candidate = st, None
            if not self.changes or (self.changes[-1].axis, self.changes[-1].bottleneck) != key:
                self.changes.append(VerdictChange(snap.t, key[0], key[1], st.verdict.summary))
            shown = st
        assert shown is not None  # nothing shown yet: st was accepted above
        self.status = LiveStatus(
            st.t, shown.state, shown.verdict, shown.findings, shown.fixes, st.stats, tuple(self.changes), st.ranks
        )
        return self.status

    def _held(self, key: tuple[str, str | None], t: float) -> float:
        """Seconds ``key`` has led without interruption (0 when it starts leading now)."""
        if self._candidate is None or self._candidate[0] != key:
            self._candidate = (key, t)
        return t - self._candidate[1]

    def summary(self) -> LiveStatus:
        """The verdict over the whole run (start-up steps left out), with the change log."""
        st = evaluate(
            self.history,
            self.rules,
            self.history[-1].t if self.history else None,
            startup_end(self.history, self.rules),
            self._digests,
        )
        findings, fixes = st.findings, st.fixes
        if self._creep is not None and not any(f.id == self._creep.id for f in findings):
            # A leak seen in a window stays in the summary (the run's start-up and tail flatten a whole-run fit).
            findings = findings + (self._creep,)
            fixes = fixes + tuple(live_fixes(st.stats, [self._creep], self.rules))
        return LiveStatus(st.t, st.state, st.verdict, findings, fixes, st.stats, tuple(self.changes), st.ranks)


def counters_diagnosis(trace: Trace, rules: Rules) -> tuple[list[Finding], Verdict, list[Recommendation], str]:
    """``trainscope analyze`` on a counters-only trace (recording or nvidia-smi CSV): the live rules
    over the whole run, as analyze's findings, verdict and recommendations, plus a note."""
    from trainscope.analyzers.recommendations import Recommendation
    from trainscope.traces.samples import trace_snapshots

    snaps = trace_snapshots(trace)
    st = evaluate(snaps, rules)
    recs: list[Recommendation] = []
    if st.state == READY and st.verdict.axis != "insufficient_evidence":
        for fx in st.fixes:
            step = st.stats.step_ms
            recs.append(
                Recommendation(
                    fx.finding.replace("/", "-"),
                    fx.finding,
                    fx.title,
                    fx.change,
                    fx.projected_speedup,
                    None if fx.projected_speedup is None or step is None else round(step / fx.projected_speedup, 2),
                    fx.basis,
                )
            )
    s = st.stats
    note = (
        f"sampled counters only ({s.samples} samples over {s.span_s:.0f} s"
        + (f", {s.gpus} GPU{'s' * (s.gpus != 1)}" if s.gpus else ", no GPU")
        + (f", {s.steps} timed steps, data wait {s.data_wait_pct:.1f} %" if s.data_wait_pct is not None else "")
        + "): the verdict comes from the live rules (`trainscope watch`); there is no per-kernel breakdown"
    )
    if st.state == WARMING_UP:
        note += f"; too few samples for a verdict (need {rules.value('live.min_samples'):g})"
    return list(st.findings), st.verdict, recs, note
