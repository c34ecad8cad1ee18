"""The live window's statistics computed from per-snapshot digests equal a direct per-GPU
computation, and a replay digests each snapshot once (its cost is linear in samples × GPUs)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trainscope.analyzers.live import engine as live
from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.analyzers.live.engine import window_stats
from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import GpuSample
from trainscope.traces.samples import Snapshot


def _reference_power(snaps, rules):
    """The per-GPU loop the digests replace (numpy's median and percentile per GPU)."""
    busy = rules.value("gpu_busy.saturated")
    per: dict[int, list] = {}
    for s in snaps:
        for g in s.gpus:
            if g.power_w is not None and g.util_gpu is not None and g.util_gpu >= busy and not g.lost:
                per.setdefault(g.index, []).append((g.power_w, g.power_limit_w))
    judged = capped = 0
    meds, capped_meds = [], []
    for idx in sorted(per):
        vals = per[idx]
        if len(vals) < rules.value("live.min_samples") * 5:
            continue
        p = np.array([v for v, _ in vals])
        lims = [lim for _, lim in vals if lim]
        med = float(np.median(p))
        judged += 1
        meds.append(med)
        if lims:
            hit = med >= rules.value("live.power_at_limit_pct") / 100 * float(np.median(lims))
        else:  # no limit (and no named board in the device table): a sample maximum is no cap
            hit = False
        if hit:
            capped += 1
            capped_meds.append(med)
    if not judged:
        return None, None, None
    return capped, judged, float(np.median(capped_meds or meds))


def _reference_memory(snaps):
    per: dict[int, list] = {}
    for s in snaps:
        seen = set()
        for g in s.gpus:
            if g.index in seen:
                continue
            seen.add(g.index)
            if g.mem_pct is not None:
                per.setdefault(g.index, []).append((g.mem_pct, max(s.dt, 0.0)))
    best = None
    for vals in per.values():
        tot = sum(w for _, w in vals)
        m = sum(v * w for v, w in vals) / tot if tot > 0 else float(np.mean([v for v, _ in vals]))
        best = m if best is None else max(best, m)
    return best


def _snapshots(seed: int, n: int = 60, gpus: int = 9) -> list[Snapshot]:
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        gs = []
        for i in range(gpus):
            capped = i % 3 == 0
            gs.append(
                GpuSample(
                    i,
                    util_gpu=None if rnd.random() < 0.05 else rnd.uniform(60, 100),
                    mem_used=None if rnd.random() < 0.1 else rnd.randrange(1, 80) << 30,
                    mem_total=80 << 30 if i != 4 else None,
                    power_w=None
                    if rnd.random() < 0.05
                    else (rnd.uniform(395, 400) if capped else rnd.uniform(150, 390)),
                    power_limit_w=None if i % 2 else 400.0,
                    clock_events=None if i == 5 else (("sw_power_cap",) if rnd.random() < 0.3 else ()),
                    lost=rnd.random() < 0.02,
                )
            )
        if k % 7 == 0:  # a duplicate entry for an index: the first one counts
            gs.append(GpuSample(2, util_gpu=99.0, mem_used=1, mem_total=2, power_w=10.0))
        out.append(Snapshot(t=k + 1.0, dt=0.0 if k % 11 == 0 else rnd.uniform(0.5, 1.5), gpus=tuple(gs)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_statistics_match_a_direct_per_gpu_computation(seed):
    rules = Rules()
    snaps = _snapshots(seed)
    s = window_stats(snaps, rules)
    capped, judged, watts = _reference_power(snaps, rules)
    assert (s.power_capped_gpus, s.power_gpus) == (capped, judged)
    assert judged == 9 and 0 < capped < 9  # GPUs at their limit, under it, and without one
    assert s.power_median_w == pytest.approx(watts)
    assert s.gpu_mem_pct == pytest.approx(_reference_memory(snaps))
    with_events = [x for x in snaps if any(g.clock_events is not None for g in x.gpus)]
    hot = sum(1 for x in with_events if any(g.clock_events for g in x.gpus))
    assert s.throttled_pct == pytest.approx(100.0 * hot / len(with_events))


def test_a_replay_digests_each_snapshot_once(monkeypatch):
    calls = []
    real = live.digest
    monkeypatch.setattr(live, "digest", lambda snap, rules: calls.append(snap.t) or real(snap, rules))
    a = LiveAnalyzer(Rules(), window_s=30.0)
    snaps = _snapshots(4, n=80, gpus=3)
    for snap in snaps:
        a.add(snap)
    a.summary()
    assert sorted(calls) == [x.t for x in snaps]  # 80 digests for 80 samples, not one per window they sit in
