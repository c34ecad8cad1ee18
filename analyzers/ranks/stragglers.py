"""Rank stragglers: which rank of a synchronous job the others wait for.

In synchronous data-parallel training every rank meets the others in each collective, so a
slow rank does not show as a longer step — every rank's step stretches alike — but as a late
*arrival*: it enters the collective later into its step, and the others spend that time waiting
inside it. This is the signal HTA's straggler analysis uses (late-starting communication
kernels, start times normalized to each rank's iteration); here it is computed from host-side
events so it also works on CPU-only jobs (gloo) that HTA cannot load:

- collectives: the backend's own ranges (``gloo:all_reduce``, ``nccl:all_reduce``, …), else the
  ``c10d::`` ops, else communication kernels on the GPU;
- matched across ranks by (ProfilerStep label, collective name, order within the step);
- arrival offset: start minus the rank's own step start (clock-independent: ranks on different
  hosts need no synchronized clocks); lateness: offset minus the earliest rank's offset.

A rank is *late* when its mean lateness is at least ``straggler.late_pct`` of the median step, and
*slow* when its median step is ``straggler.step_pct`` longer than the ranks' median.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.kernels import ALL_CLASSES
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.traces.model import Trace

BACKEND_RANGE = re.compile(r"^(gloo|nccl|rccl|ucc|mpi|xccl):[a-z_]+")
C10D_OP = re.compile(r"^c10d::[a-z_]+")


@dataclass(frozen=True)
class RankStraggle:
    rank: int | None
    source: str
    step_p50_ms: float
    collectives: int  # matched collectives in this rank's steps
    collective_pct: float  # time inside collectives, % of step time (waiting counts here)
    mean_late_ms: float  # mean arrival lateness behind the earliest rank
    late_in: int  # matched collectives this rank entered last
    axis: str  # this rank's own D·A·M verdict
    bottleneck: str | None
    late: bool
    slow: bool

    @property
    def straggler(self) -> bool:
        return self.late or self.slow


@dataclass(frozen=True)
class SlowCollective:
    step: str
    name: str
    index: int  # order of this collective within the step
    spread_ms: float  # last arrival minus first arrival (what the first rank waited)
    last_rank: int | None


@dataclass(frozen=True)
class StragglerReport:
    ranks: list[RankStraggle]
    collective_source: str  # which events were matched: "backend ranges", "c10d ops", "GPU kernels", "none"
    matched: int  # collectives matched across all ranks
    median_step_ms: float
    slow_collectives: list[SlowCollective]
    summary: str

    @property
    def stragglers(self) -> list[RankStraggle]:
        return [r for r in self.ranks if r.straggler]


def host_collectives(trace: Trace) -> tuple[str, np.ndarray, np.ndarray, list[str]]:
    """(source, start ns, end ns, names) of one rank's collectives, sorted by start."""
    strings = trace.strings
    for what, rx in (("backend ranges", BACKEND_RANGE), ("c10d ops", C10D_OP)):
        mask = np.array([bool(rx.match(s)) for s in strings], bool)
        a, o = trace.annotations, trace.cpu_ops
        sel_a, sel_o = mask[a.name] & (a.device < 0), mask[o.name]
        if sel_a.any() or sel_o.any():
            ts = np.concatenate([a.ts[sel_a], o.ts[sel_o]])
            end = np.concatenate([a.end[sel_a], o.end[sel_o]])
            names = [strings[i] for i in np.concatenate([a.name[sel_a], o.name[sel_o]])]
            order = np.argsort(ts, kind="stable")
            return what, ts[order], end[order], [names[i] for i in order]
    k = trace.kernels
    if len(k):
        comm = kernel_classes(trace)[0][k.name] == ALL_CLASSES.index("communication")
        if comm.any():
            order = np.argsort(k.ts[comm], kind="stable")
            return ("GPU kernels", k.ts[comm][order], k.end[comm][order], [strings[i] for i in k.name[comm][order]])
    return "none", np.empty(0, np.int64), np.empty(0, np.int64), []


def _per_step(
    a: Analysis, ts: np.ndarray, end: np.ndarray, names: list[str]
) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(step label, name, order within step) -> (offset from step start, duration), in ns."""
    out: dict[tuple[str, str, int], tuple[int, int]] = {}
    for st in a.segmentation.marked:  # warm-up steps too: ranks leave out different ones
        seen: dict[str, int] = {}
        lo, hi = np.searchsorted(ts, st.start_ns), np.searchsorted(ts, st.end_ns)
        for i in range(lo, hi):
            n = names[i]
            seen[n] = seen.get(n, -1) + 1
            out[(st.label, n, seen[n])] = (int(ts[i] - st.start_ns), int(end[i] - ts[i]))
    return out


def detect_stragglers(
    traces: list[Trace], analyses: list[Analysis], rules: Rules | None = None, top_n: int = 5
) -> StragglerReport:
    """Stragglers among ``traces`` (one per rank, analyzed as ``analyses`` in the same order)."""
    return stragglers_from([host_collectives(t) for t in traces], analyses, rules, top_n)


def stragglers_from(
    collectives: list[tuple[str, np.ndarray, np.ndarray, list[str]]],
    analyses: list[Analysis],
    rules: Rules | None = None,
    top_n: int = 5,
) -> StragglerReport:
    """:func:`detect_stragglers` from each rank's :func:`host_collectives` (what a rank summary keeps)."""
    rules = rules or Rules()
    per_rank, sources = [], set()
    for (src, ts, end, names), a in zip(collectives, analyses):
        sources.add(src)
        per_rank.append(_per_step(a, ts, end, names))
    common = set.intersection(*(set(p) for p in per_rank)) if per_rank else set()
    keys = sorted(common)
    n = len(analyses)
    p50 = np.array([a.breakdown.step_ms.p50 for a in analyses], float)
    median_step = float(np.median(p50)) if n else 0.0

    late_ms = np.zeros(n)
    late_in = np.zeros(n, int)
    coll_ns = np.zeros(n)
    slow: list[SlowCollective] = []
    if keys:
        offsets = np.array([[per_rank[r][k][0] for k in keys] for r in range(n)], float)  # ranks × collectives
        lateness = offsets - offsets.min(axis=0)
        late_ms = lateness.mean(axis=1) / 1e6
        last = lateness.argmax(axis=0)
        late_in = np.bincount(last, minlength=n)
        coll_ns = np.array([sum(per_rank[r][k][1] for k in keys) for r in range(n)], float)
        spread = lateness.max(axis=0)
        for j in np.argsort(-spread, kind="stable")[:top_n]:
            step, name, idx = keys[j]
            slow.append(SlowCollective(step, name, idx, round(float(spread[j]) / 1e6, 3), analyses[int(last[j])].rank))

    late_cut = rules.value("straggler.late_pct") / 100 * median_step
    slow_cut = (1 + rules.value("straggler.step_pct") / 100) * median_step
    ranks = []
    for r, a in enumerate(analyses):
        total = a.breakdown.total_ns
        ranks.append(
            RankStraggle(
                rank=a.rank,
                source=a.source,
                step_p50_ms=round(float(p50[r]), 3),
                collectives=len(keys),
                collective_pct=round(float(100.0 * coll_ns[r] / total), 2) if total else 0.0,
                mean_late_ms=round(float(late_ms[r]), 3),
                late_in=int(late_in[r]),
                axis=a.verdict.axis,
                bottleneck=a.verdict.bottleneck,
                late=bool(keys) and n > 1 and bool(late_ms[r] >= late_cut) and bool(late_ms[r] > 0),
                slow=n > 1 and bool(p50[r] > slow_cut),
            )
        )
    source = " + ".join(sorted(sources - {"none"})) or "none"
    return StragglerReport(
        ranks, source, len(keys), round(median_step, 3), slow, _summary(ranks, keys, source, median_step)
    )


def _summary(ranks: list[RankStraggle], keys: list[tuple[str, str, int]], source: str, median_step: float) -> str:
    if len(ranks) < 2:
        return "one rank: nothing to compare"
    flagged = [r for r in ranks if r.straggler]
    basis = (
        f"{len(keys)} collectives matched across {len(ranks)} ranks ({source})"
        if keys
        else "no collective found in every rank's steps: only step times were compared"
    )
    if not flagged:
        return f"no straggler: {basis}"
    parts = []
    for r in flagged:
        why = []
        if r.late:
            why.append(
                f"enters collectives {r.mean_late_ms:.1f} ms after the first rank on average "
                f"({100 * r.mean_late_ms / median_step:.0f} % of the median step), last in {r.late_in} of {len(keys)}"
            )
        if r.slow:
            why.append(f"median step {r.step_p50_ms:.1f} ms vs {median_step:.1f} ms across ranks")
        parts.append(f"rank {r.rank}: " + "; ".join(why))
    return "; ".join(parts) + f" ({basis})"
