"""The live engine (``trainscope watch``, counters-only inputs): keeps a sliding window of sampled
counters, evaluates the live measures declared on the findings' specs over it, and keeps the shown
verdict steady.

- window statistics: :mod:`trainscope.analyzers.live.window_stats`;
- the live measures, one per finding, with their thresholds and wording: the registry
  (:func:`trainscope.analyzers.findings.live_specs`);
- the verdict from the findings: :mod:`trainscope.analyzers.live.verdict`;
- here: the evaluation order, the fixes (the registry's, fitted to the machine sampled), warm-up,
  hysteresis and the log of verdict changes (:class:`LiveAnalyzer`), and ``analyze`` on a
  counters-only trace (:func:`counters_diagnosis`).

Findings and evidence use the same dataclasses as ``trainscope analyze``, so both speak one
vocabulary. Every function here is pure; :class:`LiveAnalyzer` only keeps the window and the log
of verdict changes.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Literal

from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings.base import Finding
from trainscope.analyzers.findings.base import Verdict
from trainscope.analyzers.live.rank_window import RankWindow
from trainscope.analyzers.live.rank_window import rank_window
from trainscope.analyzers.live.split import SplitWindow
from trainscope.analyzers.live.split import split_window
from trainscope.analyzers.live.verdict import live_verdict
from trainscope.analyzers.live.window_stats import SampleDigest
from trainscope.analyzers.live.window_stats import WindowStats
from trainscope.analyzers.live.window_stats import digest
from trainscope.analyzers.live.window_stats import startup_end
from trainscope.analyzers.live.window_stats import steady_start
from trainscope.analyzers.live.window_stats import window_stats
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.recommendations import Recommendation
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import trace_snapshots

if TYPE_CHECKING:  # pragma: no cover
    from trainscope.analyzers.trace.recommendations import Recommendation
    from trainscope.traces.model import Trace

__all__ = [
    "READY",
    "WARMING_UP",
    "LiveAnalyzer",
    "LiveFix",
    "LiveStatus",
    "SampleDigest",
    "SplitWindow",
    "VerdictChange",
    "WindowStats",
    "counters_diagnosis",
    "digest",
    "evaluate",
    "fit_workers",
    "live_findings",
    "live_fixes",
    "live_verdict",
    "startup_end",
    "window_stats",
]

WARMING_UP, READY = "warming_up", "ready"


@dataclass(frozen=True)
class LiveFix:
    """A finding's fix as the live engine shows it: the registry's wording, fitted to the machine."""

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
    fixes: tuple[LiveFix, ...]
    stats: WindowStats
    changes: tuple[VerdictChange, ...] = ()
    ranks: RankWindow | None = None  # per rank, for a job with several (torchrun)
    split: SplitWindow | None = None  # where in the step (forward, backward, …), whole job and per rank

    @property
    def verdict_changes(self) -> int:
        """How often the shown verdict changed after the first one (warming up excluded)."""
        ready = [c for c in self.changes if c.axis != WARMING_UP]
        return max(0, len(ready) - 1)


def live_findings(
    s: WindowStats, rules: Rules, snaps: Sequence[Snapshot] = (), *, trend: bool = False
) -> list[Finding]:
    """The findings the live measures raise on a window, in the live flowchart's order: the window
    measures, or (``trend``) those that read a trend over the window's samples."""
    out: list[Finding] = []
    for spec in registry.live_specs():
        m = spec.live
        if m is None or m.trend != trend:
            continue
        f = m.rule(s, snaps, rules)
        if f is not None:
            out.append(f)
    return out


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


def live_fixes(s: WindowStats, found: list[Finding], rules: Rules | None = None) -> list[LiveFix]:
    """Each finding's fix from the registry, worded for a PyTorch training job (what `watch`
    launches; the loader fix retitled when DataLoader workers run), its worker count fitted to the
    machine sampled. Only a data-wait projection can be made from counters: the step-exact wait,
    hidden entirely, unless the host has no free core for more workers. A GPU measure's fix is
    left out for a job with no GPU sampled."""
    out = []
    saturated = (rules or Rules()).value("live.cpu_saturated")
    for f in found:
        spec = registry.spec(f.id)
        fix = spec.fix if spec is not None else None
        if spec is None or spec.live is None or fix is None:
            continue
        if spec.live.gpu and s.gpu_util is None:
            continue  # a CPU job: GPU advice does not apply
        # The step hook times a DataLoader's batches: the job has one, whatever a trace would show.
        ctx = Context(input_source="dataloader") if s.data_wait_pct is not None else None
        title, change = fix.render(ctx, single_loader=not s.workers)
        change = fit_workers(change, s)
        speed, basis = None, "no projection from sampled counters"
        if fix.projection == "data-wait" and s.data_wait_pct is not None and s.data_wait_pct < 100:
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
        out.append(LiveFix(f.id, title, change, speed, basis))
    out.sort(key=lambda x: -(x.projected_speedup or 0.0))
    return out


def evaluate(
    snaps: Sequence[Snapshot],
    rules: Rules,
    t: float | None = None,
    steps_after_t: float | None = None,
    digests: Sequence[SampleDigest] | None = None,
    steady_after_t: float | None | Literal["auto"] = "auto",
) -> LiveStatus:
    """The status of a window of snapshots (pure). ``steps_after_t``, ``digests``: see :func:`window_stats`.
    ``steady_after_t``: the run's :func:`steady_start` (None: still warming up); trends (memory
    creep) read only the window's samples from it on. By default it is found in ``snaps``."""
    s = window_stats(snaps, rules, steps_after_t, digests)
    t = t if t is not None else (snaps[-1].t if snaps else 0.0)
    stepping = any(x.step_mode in ("on", "waiting") for x in snaps[-3:])
    warming = s.samples < rules.value("live.min_samples") or (
        s.gpu_util is None and stepping and not s.enough_steps(rules)
    )
    ranks = rank_window(snaps, rules) if any(x.ranks for x in snaps) else None
    split = split_window(snaps, rules, steps_after_t, ranks.straggler if ranks is not None else None)
    # A leak is said even while the verdict warms up, but only from the steady state on: the climb of
    # imports and first allocations is the job starting, not a leak.
    steady_t = steady_start(snaps, rules) if steady_after_t == "auto" else steady_after_t
    steady = [x for x in snaps if x.t >= steady_t] if steady_t is not None else []
    trends = live_findings(s, rules, steady, trend=True) if steady else []
    if warming:
        v = Verdict(
            "insufficient_evidence", 0.0, None, f"warming up: {s.samples} samples and {s.steps} steps so far", []
        )
        return LiveStatus(t, WARMING_UP, v, tuple(trends), (), s, ranks=ranks, split=split)
    found = live_findings(s, rules, snaps) + trends
    v = live_verdict(s, found, rules)
    if v.bottleneck:  # the primary finding first, then by severity
        grade = {"high": 0, "moderate": 1, "info": 2}
        found.sort(key=lambda f: (f.id != v.bottleneck, grade[f.severity], -f.stake_pct))
    return LiveStatus(t, READY, v, tuple(found), tuple(live_fixes(s, found, rules)), s, ranks=ranks, split=split)


def _is_trend(f: Finding) -> bool:
    spec = registry.spec(f.id)
    return spec is not None and spec.live is not None and spec.live.trend


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
        # The last trend finding of each kind any window raised, and when (for the summary).
        self._trends: dict[str, tuple[Finding, float]] = {}
        self._steady_start: float | None = None  # when the run's warm-up ended (steady_start), once known

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
        if self._steady_start is None:
            self._steady_start = steady_start(self.history, self.rules)  # once: then the run is steady
        st = evaluate(
            list(self._window),
            self.rules,
            snap.t,
            self._startup_end,
            list(self._window_digests),
            self._steady_start,
        )
        for f in st.findings:
            if _is_trend(f):
                self._trends[f.id] = (f, snap.t)
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
            st.t,
            shown.state,
            shown.verdict,
            shown.findings,
            shown.fixes,
            st.stats,
            tuple(self.changes),
            st.ranks,
            st.split,
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
            self._steady_start,
        )
        findings, fixes = st.findings, st.fixes
        end = self.history[-1].t if self.history else 0.0
        kept = [
            f
            for fid, (f, last) in self._trends.items()
            if end - last <= self.window_s and not any(x.id == fid for x in findings)
        ]
        if kept:
            # A trend still raised in the run's last window stays in the summary (a whole-run fit is
            # flattened by the run's start and tail); one that stopped a window or more before the
            # end did not persist: a climb that levels off for good is growth, not a leak.
            findings = findings + tuple(kept)
            fixes = fixes + tuple(live_fixes(st.stats, kept, self.rules))
        return LiveStatus(
            st.t, st.state, st.verdict, findings, fixes, st.stats, tuple(self.changes), st.ranks, st.split
        )


def counters_diagnosis(trace: Trace, rules: Rules) -> tuple[list[Finding], Verdict, list[Recommendation], str]:
    """``trainscope analyze`` on a counters-only trace (recording or nvidia-smi CSV): the live rules
    over the whole run, as analyze's findings, verdict and recommendations, plus a note."""

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
