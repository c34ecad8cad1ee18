"""Window statistics for the live diagnosis (``trainscope watch``, counters-only inputs): time-weighted
(by each sample's ``dt``) summaries of a sliding window of sampled counters, from a per-sample digest
computed once per snapshot. Pure functions; the live measures on the findings' specs read them
(:mod:`trainscope.analyzers.findings`), :mod:`trainscope.analyzers.live.engine` keeps the window.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.devices import default_power_limit_w
from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import THROTTLE_REASONS
from trainscope.traces.samples import Snapshot


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


def startup_end(snaps: Sequence[Snapshot], rules: Rules) -> float | None:
    """The time of the snapshot that completes the run's first ``live.startup_steps`` steps: step
    samples up to it are start-up (iterator and worker creation, lazy initialization)."""
    need = rules.value("live.startup_steps")
    return _completing(snaps, need) if need > 0 else None


def _completing(snaps: Sequence[Snapshot], steps: float) -> float | None:
    """The time of the snapshot that completes the run's first ``steps`` timed steps (None before)."""
    seen = 0
    for x in snaps:
        if x.step is not None and x.step.steps:
            seen += x.step.steps
            if seen >= steps:
                return x.t
    return None


def steady_start(snaps: Sequence[Snapshot], rules: Rules) -> float | None:
    """When the run's memory is steady enough to read a trend: the time of the snapshot that
    completes its first ``live.trend_after_steps`` steps, or, for a job whose steps are not timed,
    ``live.trend_after_s`` seconds after the first snapshot. None while the run is still warming up
    (imports, model and optimizer-state allocation, a CUDA context: a climb that then stays flat)."""
    if not snaps:
        return None
    if any(x.step is not None or x.step_mode in ("on", "waiting") for x in snaps):
        return _completing(snaps, rules.value("live.trend_after_steps"))
    start = snaps[0].t + rules.value("live.trend_after_s")
    return start if snaps[-1].t >= start else None
