"""Per rank of a live multi-process job (``watch -- torchrun …``): each rank's iteration time,
DataLoader wait, own work (iteration minus wait), RSS and GPU over the window, and the rank that
holds the others back when the evidence is clear.

Why the input wait names the rank: in synchronous data parallelism every rank meets the others in
each collective, so the ranks' iterations stretch alike. A rank whose input pipeline is slow waits
in its DataLoader ``__next__`` while the others wait for it inside their collectives — which the
step hook counts as their own work. So the straggler is the rank whose input wait exceeds the
others', by at least ``straggler.late_pct`` of the median iteration (the offline straggler's
lateness threshold, the same signal seen from the other side), in a share of the window's samples
that chance does not explain: a one-sided sign test against 1/R (R ranks), p < ``live.rank_significance``
(after ``live.rank_min_samples`` samples with every rank stepping).
A rank slow in its own compute makes every rank's own work stretch alike, so the hook alone cannot
name it; the per-rank traces of a capture or ``trainscope analyze`` can (their collectives' arrivals).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import RankSample
from trainscope.traces.samples import Snapshot


@dataclass(frozen=True)
class RankStats:
    rank: str
    pid: int
    steps: int
    step_ms: float | None  # mean iteration time
    wait_ms: float | None  # mean DataLoader wait per iteration
    wait_pct: float | None
    own_ms: float | None  # mean iteration minus wait
    rss: int | None  # latest
    gpu: int | None
    gpu_mem: int | None
    gpu_util: float | None


@dataclass(frozen=True)
class RankWindow:
    ranks: tuple[RankStats, ...]
    straggler: str | None  # the rank holding the others back, when the evidence is clear
    evidence: str  # why it is named, or why none is


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def samples_by_rank(snaps: Iterable[Snapshot]) -> dict[str, list[RankSample]]:
    """Each rank's samples over ``snaps``, in time order, the ranks in the order they first appear."""
    per: dict[str, list[RankSample]] = {}
    for s in snaps:
        for r in s.ranks:
            per.setdefault(r.rank, []).append(r)
    return per


def rank_window(snaps: Sequence[Snapshot], rules: Rules) -> RankWindow | None:
    """None for a single-process job (no per-rank samples in the window)."""
    per = samples_by_rank(snaps)
    if not per:
        return None
    stats = [_rank_stats(name, samples) for name, samples in per.items()]
    return RankWindow(tuple(stats), *_straggler(snaps, stats, rules))


def _rank_stats(name: str, samples: list[RankSample]) -> RankStats:
    """One rank over the window: its iterations summed; its memory and GPU as last reported."""
    n = sum(r.steps for r in samples)
    w = sum(r.wait_ns for r in samples)
    st = sum(r.step_ns for r in samples)
    rss: int | None = None
    gpu: int | None = None
    mem: int | None = None
    util: float | None = None
    for r in samples:
        rss = r.rss if r.rss is not None else rss
        gpu, mem, util = (r.gpu, r.gpu_mem, r.gpu_util) if r.gpu is not None else (gpu, mem, util)
    return RankStats(
        name,
        samples[0].pid,
        n,
        st / n / 1e6 if n else None,
        w / n / 1e6 if n else None,
        100.0 * w / st if st else None,
        (st - w) / n / 1e6 if n else None,
        rss,
        gpu,
        mem,
        util,
    )


def _straggler(snaps: Sequence[Snapshot], stats: list[RankStats], rules: Rules) -> tuple[str | None, str]:
    stepping = [r for r in stats if r.steps]
    if len(stepping) < 2:
        return None, "fewer than two ranks stepping"
    names = [r.rank for r in stepping]
    wins: dict[str, int] = dict.fromkeys(names, 0)
    n = 0
    for s in snaps:  # per sample: the rank with the longest mean wait per iteration
        per = {r.rank: r.wait_ns / r.steps for r in s.ranks if r.steps and r.rank in wins}
        if len(per) == len(names):
            n += 1
            wins[max(per, key=lambda k: per[k])] += 1
    if n < rules.value("live.rank_min_samples"):
        return None, f"{n} samples with every rank stepping (need {rules.value('live.rank_min_samples'):g})"
    top = max(stepping, key=lambda r: r.wait_ms or 0.0)
    others = sorted(r.wait_ms or 0.0 for r in stepping if r is not top)
    other_wait = others[len(others) // 2]
    steps_ms = sorted(r.step_ms for r in stepping if r.step_ms is not None)
    median_step = steps_ms[len(steps_ms) // 2]
    margin = (top.wait_ms or 0.0) - other_wait
    cut = rules.value("straggler.late_pct") / 100 * median_step
    p = binomial_tail(wins[top.rank], n, 1 / len(stepping))
    basis = (
        f"rank {top.rank} waits {top.wait_ms:.1f} ms per iteration on its input against {other_wait:.1f} ms "
        f"for the others (margin {margin:.1f} ms, threshold {cut:.1f} ms = straggler.late_pct of the "
        f"{median_step:.1f} ms median iteration); longest wait in {wins[top.rank]} of {n} samples "
        f"(sign test p = {p:.2g})"
    )
    if margin >= cut and margin > 0 and p < rules.value("live.rank_significance"):
        return top.rank, basis + ": the others wait for it in their collectives"
    return None, "no rank stands out: " + basis
