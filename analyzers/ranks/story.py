"""One rank story: for a set of ranks, the one answer every view reads.

:func:`rank_story` computes, once, from the ranks' summaries:

- the **arrival order** at every collective matched across ranks (:func:`ranks.match_collectives`:
  identity where recorded, else the common end instant), on the reference rank's clock;
- which collectives are **left out as cold starts**, and the evidence: a first use of its kernel or
  range name whose length, or wait for the last rank, exceeds ``straggler.cold_factor`` times the
  median of the other collectives (a robust reference), in a trace that can hold a first use — its
  first step numbered at most ``straggler.cold_max_step`` (a trace that starts at ProfilerStep#12
  began after the job's first collectives, so its first all-to-all is no connection set-up);
- per collective, the one rank that arrived **last** — none where ranks arrive within
  ``straggler.tie_us`` of the last arrival (a tie) or the collective is a cold start;
- the **straggler**, only where :func:`straggler_test.straggler_test` finds it clear;
- each rank's **lateness** (mean and largest arrival after the first rank over the warm collectives),
  how often it was last, its wait and transfer per step inside collectives, and its latest warm
  arrival (where Enter on a rank in the app jumps);
- the **headline rank** the report leads with: the straggler when there is one (the others wait for
  its work); else, of the aligned ranks, the one that waits least inside collectives (its own work
  fills most of the shared step); only where no collective aligns, the longest median step.

The text, the JSON ``stragglers`` and ``ranks[]``, the app's ranks view and side-by-side timeline,
HTML, Markdown and the MCP server print this result and nothing else. Where no collective aligns
on two ranks, the story falls back to the step-offset comparison (analyzers/ranks/stragglers.py) and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.ranks.alignment import Alignment
from trainscope.analyzers.ranks.alignment import Imbalance
from trainscope.analyzers.ranks.alignment import Matching
from trainscope.analyzers.ranks.alignment import RankAlignment
from trainscope.analyzers.ranks.alignment import RankSummary
from trainscope.analyzers.ranks.alignment import _imbalance
from trainscope.analyzers.ranks.alignment import match_collectives
from trainscope.analyzers.ranks.straggler_test import StragglerTest
from trainscope.analyzers.ranks.straggler_test import cold_outliers
from trainscope.analyzers.ranks.straggler_test import straggler_test
from trainscope.analyzers.rules import Rules

_STEP_NUMBER = re.compile(r"#(\d+)\s*$")


@dataclass(frozen=True)
class StoryCollective:
    """One collective matched on at least two ranks (in the reference rank's order)."""

    kind: str
    step: str | None  # the reference rank's step that holds it
    arrival_ms: tuple[float | None, ...]  # per rank: arrival after the first rank (None: not matched there)
    spread_ms: float  # last arrival − first arrival
    last_index: int | None  # the one rank that arrived last (None: a tie, one rank, or a cold start)
    cold: bool  # left out as a cold start


@dataclass(frozen=True)
class RankLate:
    """One rank's part of the story (position ``index`` among the ranks given)."""

    index: int
    rank: int | None
    source: str
    step_p50_ms: float
    matched: int  # collectives matched to the other ranks (cold starts included)
    mean_late_ms: float  # mean arrival after the first rank, warm collectives
    max_late_ms: float  # the largest such arrival
    last_in: int  # warm collectives at which it alone arrived last
    latest: int | None  # the warm collective (index into RankStory.collectives) it reached furthest behind
    wait_ms_per_step: float  # inside collectives, from its arrival to the last rank's
    transfer_ms_per_step: float  # inside collectives, after the last rank arrived
    clock_offset_us: float | None
    collective_pct: float = 0.0  # time inside collectives (waiting and transfer), % of its median step


@dataclass(frozen=True)
class RankStory:
    basis: str  # "aligned" (collectives aligned on their common end), "step offsets", "one rank"
    source: str  # which events were matched
    ranks: tuple[RankLate, ...]
    collectives: tuple[StoryCollective, ...]
    considered: int  # warm collectives that name a single last rank
    cold_excluded: int
    cold_why: str  # the evidence the cold starts were left out on ("" when none)
    cold_note: str  # a first-use outlier kept, and why ("" when none)
    test: StragglerTest | None
    straggler_index: int | None
    headline_index: int
    headline_reason: str
    imbalance: Imbalance | None
    median_step_ms: float
    summary: str  # the one line every view leads with
    tie_us: float
    alignment: Alignment | None = None
    matching: Matching | None = None

    @property
    def straggler(self) -> int | None:
        """The straggler's rank number (None: no clear straggler, or it has no number)."""
        return None if self.straggler_index is None else self.ranks[self.straggler_index].rank

    @property
    def headline_rank(self) -> int | None:
        return self.ranks[self.headline_index].rank

    @property
    def rank_label(self) -> str:
        """'rank 3' for the headline rank (its file name where it has no number)."""
        r = self.ranks[self.headline_index]
        return f"rank {r.rank}" if r.rank is not None else r.source

    @property
    def headline_line(self) -> str:
        """Why the report leads with the rank it leads with, as every view says it."""
        return f"the report leads with {self.rank_label}: {self.headline_reason}"

    def last_at(self, index: int) -> str:
        """'last at 4 of 7 collectives' for rank position ``index`` (the story's count)."""
        return f"last at {self.ranks[index].last_in} of {self.considered} collectives"


def _first_step_number(s: RankSummary) -> int | None:
    """The number of the first step the rank's trace marks (ProfilerStep#12 → 12); None when no step
    label carries a number."""
    nums = [int(m.group(1)) for st in s.analysis.segmentation.marked if (m := _STEP_NUMBER.search(st.label))]
    return min(nums) if nums else None


def _step_of(s: RankSummary, t_abs: float) -> str | None:
    t = t_abs - s.origin_ns
    for st in s.analysis.segmentation.marked:
        if st.start_ns <= t < st.end_ns:
            return st.label
    return None


def rank_story(summaries: list[RankSummary], rules: Rules | None = None) -> RankStory:
    """The story of ``summaries`` (one per rank, in rank order)."""
    rules = rules or Rules()
    n = len(summaries)
    tie_us = rules.value("straggler.tie_us")
    p50 = np.array([s.analysis.breakdown.step_ms.p50 for s in summaries], float)
    median_step = float(np.median(p50)) if n else 0.0
    if n < 2:
        ranks = tuple(_plain(i, s) for i, s in enumerate(summaries))
        return RankStory(
            "one rank", "none", ranks, (), 0, 0, "", "", None, None, 0, "the only rank", None,
            round(median_step, 3), "one rank: nothing to compare", tie_us,
        )  # fmt: skip
    with_coll = [s for s in summaries if len(s.collectives)]
    if len(with_coll) < 2:
        none = Alignment(
            "none",
            None,
            0,
            [RankAlignment(s.rank, None, 0, 0.0, 0, 0.0, 0.0) for s in summaries],
            None,
            "no collectives on two ranks: nothing to align",
        )
        return _by_step_offsets(summaries, rules, none, None)
    m = match_collectives([s.collectives for s in summaries], rules)
    inst = m.instances
    if not inst:
        return _by_step_offsets(summaries, rules, _unaligned(summaries, m), m)
    return _aligned(summaries, rules, m)


def _plain(i: int, s: RankSummary) -> RankLate:
    return RankLate(
        i, s.rank, s.source, round(s.analysis.breakdown.step_ms.p50, 3), 0, 0.0, 0.0, 0, None, 0.0, 0.0, None
    )


def _unaligned(summaries: list[RankSummary], m: Matching) -> Alignment:
    return Alignment(
        " + ".join(sorted({s.collectives.source for s in summaries if len(s.collectives)})),
        summaries[m.reference].rank,
        0,
        [RankAlignment(s.rank, None, 0, 0.0, 0, 0.0, 0.0, 0, 0, m.refused[r]) for r, s in enumerate(summaries)],
        None,
        "no collective matched on two ranks: nothing to align",
    )


def _aligned(summaries: list[RankSummary], rules: Rules, m: Matching) -> RankStory:
    n = len(summaries)
    tol = int(rules.value("ranks.end_match_us") * 1000)
    tie_us = rules.value("straggler.tie_us")
    cold_factor = rules.value("straggler.cold_factor")
    ref_i, offsets, matches, inst = m.reference, m.offsets, m.matches, m.instances
    k = len(inst)
    arrival = np.full((n, k), np.nan)
    end = np.full((n, k), np.nan)
    cand = np.zeros(k, bool)  # the first use of its kernel/range name on some rank: a cold-start candidate
    for r, s in enumerate(summaries):
        off_r = offsets[r]
        if off_r is None:
            continue
        fu = s.collectives.first_use
        for c, j in enumerate(inst):
            i = matches[r].get(j)
            if i is not None:
                arrival[r, c] = s.collectives.start[i] - off_r
                end[r, c] = s.collectives.end[i] - off_r
                if fu is not None and fu[i]:
                    cand[c] = True
    has = ~np.isnan(arrival)
    first = np.nanmin(arrival, axis=0)
    last = np.nanmax(arrival, axis=0)
    dur = np.nanmax(end, axis=0) - first
    spread = last - first
    outlier = cold_outliers(dur, spread, cand, cold_factor)
    cold, cold_why, cold_note = _cold_evidence(summaries, rules, outlier, cand, dur, spread, ref_i, inst)
    test = straggler_test(
        arrival, end, rules.value("straggler.alpha"), cold_factor, cand, tie_us * 1000, cold=cold, cold_why=cold_why
    )
    keep = ~cold
    lateness = arrival - first
    warm = has & keep[None, :]
    last_of = np.array(test.last_of if test.last_of else (-1,) * k, int)
    last_in = np.bincount(last_of[last_of >= 0], minlength=n)
    wait = np.where(warm, last - arrival, 0.0).sum(axis=1)
    common_end = np.nanmedian(end, axis=0)
    transfer = np.where(warm, np.maximum(0.0, common_end - last), 0.0).sum(axis=1)
    # Collectives are matched over the whole trace: per step is over every step it marks, the warm-up
    # steps left out of the judged window included (analyzers/trace/one_off.py)
    steps = np.array(
        [max(1, len(s.analysis.segmentation.steps) + len(s.analysis.segmentation.warmup)) for s in summaries], float
    )
    matched_all = has.sum(axis=1)
    ranks_al: list[RankAlignment] = []
    story_ranks: list[RankLate] = []
    for r, s in enumerate(summaries):
        mine = np.where(warm[r], lateness[r], np.nan)
        present = bool(warm[r].any())
        mean_ms = float(np.nanmean(mine)) / 1e6 if present else 0.0
        max_ms = float(np.nanmax(mine)) / 1e6 if present else 0.0
        latest = int(np.nanargmax(mine)) if present else None
        off_r = offsets[r]
        mm = int(matched_all[r])
        ranks_al.append(
            RankAlignment(
                s.rank,
                None if off_r is None else round(off_r / 1e3, 1),
                mm,
                round(mean_ms, 3),
                int(last_in[r]),
                round(float(wait[r]) / 1e6 / float(steps[r]), 3),
                round(float(transfer[r]) / 1e6 / float(steps[r]), 3),
                m.by_identity[r],
                mm - m.by_identity[r] if r != ref_i else 0,
                m.refused[r],
            )
        )
        story_ranks.append(
            RankLate(
                r,
                s.rank,
                s.source,
                round(s.analysis.breakdown.step_ms.p50, 3),
                mm,
                round(mean_ms, 3),
                round(max_ms, 3),
                int(last_in[r]),
                latest,
                ranks_al[-1].wait_ms_per_step,
                ranks_al[-1].transfer_ms_per_step,
                ranks_al[-1].clock_offset_us,
                round(100 * float(wait[r] + transfer[r]) / 1e6 / float(steps[r]) / p50_r, 2)
                if (p50_r := float(s.analysis.breakdown.step_ms.p50))
                else 0.0,
            )
        )
    imb = _imbalance(summaries, ranks_al, rules, test) if keep.any() else None
    src = " + ".join(sorted({s.collectives.source for s in summaries if len(s.collectives)}))
    off_known = [(a.rank, a.clock_offset_us) for a in ranks_al if a.clock_offset_us is not None]
    off_spread = max(abs(o) for _, o in off_known) if off_known else 0.0
    note = f"clock offsets against rank {summaries[ref_i].rank}, from matched collective ends: " + (
        f"all within {off_spread:.0f} µs (one clock)"
        if off_spread * 1000 <= tol
        else ", ".join(f"rank {r} {o / 1e3:+.3f} ms" for r, o in off_known if abs(o) * 1000 > tol)
    )
    alignment = Alignment(
        src,
        summaries[ref_i].rank,
        k,
        ranks_al,
        imb,
        note,
        sum(a.by_seq for a in ranks_al),
        sum(a.by_end for a in ranks_al),
        sum(m.refused),
        test,
    )
    ref = summaries[ref_i]
    colls = tuple(
        StoryCollective(
            ref.collectives.kind[j],
            _step_of(ref, float(ref.collectives.start[j])),
            tuple(None if not has[r, c] else round(float(lateness[r, c]) / 1e6, 3) for r in range(n)),
            round(float(spread[c]) / 1e6, 3),
            int(last_of[c]) if last_of[c] >= 0 else None,
            bool(cold[c]),
        )
        for c, j in enumerate(inst)
    )
    straggler_index = test.rank_index if imb is not None else None
    p50 = [r.step_p50_ms for r in story_ranks]
    median_step = float(np.median(p50))
    if straggler_index is not None and imb is not None:
        head = straggler_index
        reason = (
            f"the straggler — the other ranks wait {imb.others_wait_ms_per_step:.1f} ms per step for it, so its "
            "work sets the pace"
        )
    else:
        aligned = [i for i, a in enumerate(ranks_al) if a.matched]
        head = min(aligned, key=lambda i: (ranks_al[i].wait_ms_per_step, -p50[i], i))
        waits = [ranks_al[i].wait_ms_per_step for i in aligned]
        reason = (
            f"no clear straggler; it waits least inside collectives ({ranks_al[head].wait_ms_per_step:.1f} ms per "
            f"step against a median of {float(np.median(waits)):.1f} ms across ranks), so its own work fills most "
            "of the shared step"
        )
    basis = f"{k} collectives aligned on their common end"
    if imb is not None:
        summary = (
            f"straggler: {test.figures(_label(story_ranks[test.rank_index or 0]))}; the others wait "
            f"{imb.others_wait_ms_per_step:.1f} ms per step for it, the longest single wait "
            f"{test.max_spread_ms:.1f} ms ({basis})"
        )
    elif test.rank_index is not None:
        summary = f"no clear straggler: {test.figures(_label(story_ranks[test.rank_index]))} ({basis})"
    else:
        tied = sum(1 for c, kp in zip(spread, keep) if kp and c > 0)
        summary = (
            f"no clear straggler: no collective has a single last rank ({tied} warm collectives with a spread, "
            f"each with ranks last together within {tie_us:g} µs){'; ' + cold_why if cold_why else ''} ({basis})"
        )
    if cold_note:
        summary += f"; {cold_note}"
    return RankStory(
        "aligned",
        src,
        tuple(story_ranks),
        colls,
        int(test.considered),
        int(cold.sum()),
        cold_why,
        cold_note,
        test,
        straggler_index,
        head,
        reason,
        imb,
        round(median_step, 3),
        summary,
        tie_us,
        alignment,
        m,
    )


def _label(r: RankLate) -> str:
    return f"rank {r.rank}" if r.rank is not None else r.source


def _cold_evidence(
    summaries: list[RankSummary],
    rules: Rules,
    outlier: np.ndarray,
    cand: np.ndarray,
    dur: np.ndarray,
    spread: np.ndarray,
    ref_i: int,
    inst: list[int],
) -> tuple[np.ndarray, str, str]:
    """(per collective: left out as a cold start, the evidence stated for it, a note on a first-use
    outlier kept because the trace cannot hold a first use)."""
    if not outlier.any():
        return outlier, "", ""
    factor = rules.value("straggler.cold_factor")
    max_step = rules.value("straggler.cold_max_step")
    firsts = [f for f in (_first_step_number(s) for s in summaries) if f is not None]
    start = min(firsts) if firsts else None
    ref_dur = float(np.median(dur[~cand])) / 1e6
    ref_spread = float(np.median(spread[~cand])) / 1e6
    kinds = summaries[ref_i].collectives.kind
    parts = []
    for c in np.flatnonzero(outlier):
        what = (
            f"lasts {dur[c] / 1e6:.1f} ms against the other collectives' median {ref_dur:.2f} ms"
            if dur[c] > factor * ref_dur * 1e6
            else f"keeps the ranks waiting {spread[c] / 1e6:.1f} ms for the last arrival against the other "
            f"collectives' median {ref_spread:.2f} ms"
        )
        parts.append(f"the first {kinds[inst[c]]} {what} (over {factor:g}×)")
    n_out = int(outlier.sum())
    if start is not None and start > max_step:
        note = (
            f"{'; '.join(parts)} but is counted, not left out as a cold start: the trace starts at step "
            f"{start}, after the job's first collectives (a cold start needs a first step ≤ {max_step:g})"
        )
        return np.zeros_like(outlier), "", note
    where = f"in a trace that starts at step {start}" if start is not None else "in a trace that numbers no step"
    why = (
        f"{n_out} collective{'s' * (n_out != 1)} left out as a cold start (first use of its kernel, {where}): "
        + "; ".join(parts)
    )
    return outlier, why, ""


def _by_step_offsets(
    summaries: list[RankSummary], rules: Rules, alignment: Alignment | None, m: Matching | None
) -> RankStory:
    """No collective aligned on two ranks: the step-offset comparison (each rank's arrival measured
    from its own step start) is the only measure; the headline rank is the straggler it flags, else
    the longest median step (said as such)."""
    from trainscope.analyzers.ranks.stragglers import stragglers_from  # circle: stragglers imports this module

    rep = stragglers_from([s.host_collectives for s in summaries], [s.analysis for s in summaries], rules)
    ranks = tuple(
        RankLate(
            i,
            r.rank,
            r.source,
            r.step_p50_ms,
            r.collectives,
            r.mean_late_ms,
            r.mean_late_ms,
            r.late_in,
            None,
            0.0,
            0.0,
            None,
        )  # fmt: skip
        for i, r in enumerate(rep.ranks)
    )
    flagged = [i for i, r in enumerate(rep.ranks) if r.straggler]
    straggler = max(flagged, key=lambda i: (rep.ranks[i].mean_late_ms, rep.ranks[i].step_p50_ms)) if flagged else None
    if straggler is not None:
        head, reason = straggler, "the straggler the step-offset comparison flags (no collective aligned across ranks)"
    else:
        head = max(range(len(ranks)), key=lambda i: (ranks[i].step_p50_ms, -i))
        reason = "no collective aligned across ranks and no straggler: the rank with the longest median step"
    return RankStory(
        "step offsets",
        rep.collective_source,
        ranks,
        (),
        rep.matched,
        0,
        "",
        "",
        None,
        straggler,
        head,
        reason,
        None,
        rep.median_step_ms,
        rep.summary,
        rules.value("straggler.tie_us"),
        alignment,
        m,
    )
