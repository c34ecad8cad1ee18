"""Steps from annotation ranges (NVTX, ``record_function``): a repeating top-level range named
like a step (``ProfilerStep#N``, ``step 12``, ``train_step``, ``iteration 3``), or the range the
user names with ``--step-range``; repeating numbered ranges (``Step 0 to 10``, ``IO 3``) that
launch nearly all the GPU work. Also the window of traces without steps, which is the span of GPU
activity (graph replays included) rather than of process startup and host work around it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import numpy as np

from trainscope.analyzers.plural import plural
from trainscope.analyzers.trace.phases import PHASE_PATTERNS
from trainscope.analyzers.trace.steps import Step
from trainscope.analyzers.trace.steps import StepSegmentation
from trainscope.traces.model import Trace

STEP_LIKE = re.compile(
    r"^(ProfilerStep#\d+|(train(ing)?[ _-]?)?(step|iter(ation)?|batch)([ _#:=-]*\d+)?|train(ing)?[ _-]?(step|iter(ation)?))$",
    re.I,
)
_MOSTLY_INSIDE = 0.9


class StepRangeError(ValueError):
    """``--step-range NAME`` matched no range; the message lists the most frequent range names."""


def _top_level(starts: np.ndarray, ends: np.ndarray, labels: list[str]) -> list[Step]:
    order = np.argsort(starts, kind="stable")
    steps: list[Step] = []
    reach = -1
    for i in order.tolist():
        s, e = int(starts[i]), int(ends[i])
        if s < reach or e <= s:  # nested in (or repeated on another thread as) the previous step
            continue
        steps.append(Step(labels[i], s, e))
        reach = e
    return steps


def _ranges(trace: Trace, match: Callable[[str], object]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    a = trace.annotations
    names = np.array([bool(match(s)) for s in trace.strings], bool)
    sel = (a.device < 0) & names[a.name] if len(a) else np.zeros(0, bool)
    return a.ts[sel], a.end[sel], [trace.strings[i] for i in a.name[sel]]


def named_range_steps(trace: Trace, name: str) -> StepSegmentation:
    """Steps from the host ranges called ``name`` (optionally followed by a number: ``step 3``)."""
    rx = re.compile(rf"^{re.escape(name)}(\s*[#:_ =-]?\s*\d+)?$")
    starts, ends, labels = _ranges(trace, rx.match)
    steps = _top_level(starts, ends, labels)
    if not steps:
        common = Counter(trace.strings[i] for i in trace.annotations.name[trace.annotations.device < 0])
        top = ", ".join(repr(n if len(n) < 40 else n[:37] + "...") for n, _ in common.most_common(5))
        raise StepRangeError(
            f"no range named {name!r} in the trace"
            + (f" (most frequent ranges: {top})" if top else " (it has no host annotation ranges)")
        )
    if len(steps) == 1 or len({s.label for s in steps}) == 1:
        steps = (
            [Step(f"{s.label} {i + 1}", s.start_ns, s.end_ns) for i, s in enumerate(steps)] if len(steps) > 1 else steps
        )
    return StepSegmentation(
        "named_range", steps, f"{plural(len(steps), 'step')} from the {name!r} ranges (--step-range)"
    )


def repeating_range_steps(trace: Trace) -> StepSegmentation | None:
    """Steps from top-level ranges named like a step, or None when the trace has none."""
    starts, ends, labels = _ranges(trace, STEP_LIKE.match)
    steps = _top_level(starts, ends, labels)
    if not steps:
        return None
    if len({s.label for s in steps}) < len(steps):  # "train_step" × N: number them
        steps = [Step(f"{s.label} {i + 1}", s.start_ns, s.end_ns) for i, s in enumerate(steps)]
    kinds = sorted({re.sub(r"\d+", "N", s.label) for s in steps})
    return StepSegmentation(
        "annotation_range",
        steps,
        f"{plural(len(steps), 'step')} from top-level {', '.join(repr(k) for k in kinds[:3])} ranges",
    )


def phase_steps(trace: Trace) -> StepSegmentation | None:
    """Iterations from phase ranges when nothing marks steps: each top-level forward range opens
    one, which lasts until the next forward range, or (the last) until its backward/optimizer
    ranges end. None without forward ranges."""

    pats = dict(PHASE_PATTERNS)
    starts, ends, labels = _ranges(trace, pats["forward"].search)
    fwd = _top_level(starts, ends, labels)
    if not fwd:
        return None
    later_s, later_e, _ = _ranges(trace, lambda n: bool(pats["backward"].search(n) or pats["optimizer"].search(n)))
    steps = []
    for i, f in enumerate(fwd):
        if i + 1 < len(fwd):
            end = fwd[i + 1].start_ns
        else:
            after = later_e[later_s >= f.start_ns]
            end = max([f.end_ns, *after.tolist()])
            # The GPU runs behind the host: the last iteration lasts until the work it launched is done.
            end = max(end, launched_work_end(trace, f.start_ns, end))
        steps.append(Step(f"iteration {i + 1}", f.start_ns, int(end)))
    return StepSegmentation(
        "phase_ranges",
        steps,
        f"no step markers: {len(steps)} iteration{'s' * (len(steps) > 1)} from the forward "
        f"ranges ({fwd[0].label!r}) to the end of their backward/optimizer ranges and of the GPU work launched",
    )


def launched_work_end(trace: Trace, start_ns: int, end_ns: int) -> int:
    """End of the last GPU operation launched by a runtime call in [start_ns, end_ns) (matched by
    correlation id), or ``start_ns`` when none was."""
    r = trace.runtime
    sel = (r.ts >= start_ns) & (r.ts < end_ns) & (r.correlation >= 0)
    if not sel.any():
        return start_ns
    corr = r.correlation[sel]
    ends = [
        int(t.end[np.isin(t.correlation, corr)].max())
        for t in (trace.kernels, trace.copies, trace.memsets)
        if len(t) and np.isin(t.correlation, corr).any()
    ]
    return max(ends, default=start_ns)


def _numbered_groups(trace: Trace) -> dict[str, list[Step]]:
    """Top-level host ranges grouped by name with numbers generalized (``IO 3`` → ``IO N``),
    groups of two or more ranges only."""
    a = trace.annotations
    if not len(a):
        return {}
    host = a.device < 0
    groups: dict[str, list[int]] = {}
    keys = {i: re.sub(r"\d+", "N", trace.strings[i]) for i in np.unique(a.name[host]).tolist()}
    for row in np.flatnonzero(host).tolist():
        groups.setdefault(keys[int(a.name[row])], []).append(row)
    out = {}
    for key, rows in groups.items():
        if len(rows) < 2:
            continue
        r = np.array(rows)
        steps = _top_level(a.ts[r], a.end[r], [trace.strings[i] for i in a.name[r]])
        if len(steps) >= 2:
            out[key] = steps
    return out


def _launched_share(trace: Trace, steps: list[Step]) -> float:
    """Share (%) of GPU kernel time launched by runtime calls inside ``steps``."""
    k, r = trace.kernels, trace.runtime
    total = float(k.dur.sum())
    if not total or not len(r):
        return 0.0
    starts = np.array([s.start_ns for s in steps], np.int64)
    ends = np.array([s.end_ns for s in steps], np.int64)
    i = np.searchsorted(starts, r.ts, side="right") - 1
    inside = (i >= 0) & (r.ts < ends[np.clip(i, 0, None)]) & (r.correlation >= 0)
    launched = np.isin(k.correlation, r.correlation[inside]) & (k.correlation >= 0)
    return 100.0 * float(k.dur[launched].sum()) / total


def tiling_range_steps(trace: Trace, min_share_pct: float) -> StepSegmentation | None:
    """Steps from repeating top-level ranges (``Step 0 to 10``, ``IO 3``, a scheduler's per-batch
    range) that launch at least ``min_share_pct`` % of the GPU kernel time: they tile the GPU work.
    Each step runs from its range's start to the next one's; the last lasts one median period
    (cut at the trace's end) and at least until the work it launched is done. None when no group
    tiles the work."""
    if not len(trace.kernels):
        return None
    best = None
    for key, steps in _numbered_groups(trace).items():
        share = _launched_share(trace, steps)
        if share >= min_share_pct and (best is None or share > best[1]):
            best = (key, share, steps)
    if best is None:
        return None
    key, share, steps = best
    out = []
    period = int(np.median(np.diff([s.start_ns for s in steps])))
    for i, st in enumerate(steps):
        if i + 1 < len(steps):
            end = steps[i + 1].start_ns
        else:  # the last: one period (within the trace), and at least until the work it launched is done
            end = max(
                st.end_ns, min(st.start_ns + period, trace.span_ns[1]), launched_work_end(trace, st.start_ns, st.end_ns)
            )
        label = st.label if len({s.label for s in steps}) == len(steps) else f"{st.label} {i + 1}"
        out.append(Step(label, st.start_ns, int(end)))
    return StepSegmentation(
        "annotation_range",
        out,
        f"{plural(len(out), 'step')} from the repeating {key!r} ranges, which launch {share:.0f} % of the GPU "
        f"kernel time (--step-range to choose other ranges)",
    )


_OFFER_SHARE = 25.0  # a range group launching less of the GPU work than this cannot be the step


def offered_ranges(trace: Trace, n: int = 3) -> str:
    """Repeating top-level ranges that launch a fair share of the GPU work (but not enough to tile
    it), most first, for the user to pick with --step-range."""
    scored = [(k, v, _launched_share(trace, v)) for k, v in _numbered_groups(trace).items()]
    groups = sorted((x for x in scored if x[2] >= _OFFER_SHARE), key=lambda x: -x[2])[:n]
    return ", ".join(f"{k!r} ×{len(v)} ({share:.0f} % of kernel time)" for k, v, share in groups)


def whole_window(trace: Trace) -> tuple[int, int, str]:
    """The window analyzed when no steps are marked, and how it was chosen: the span of GPU
    activity (graph replays included) whenever there is any — host start-up before the first
    GPU operation and host work after the last are not step time."""
    if trace.has_gpu_activity:
        starts = [int(t.ts.min()) for t in (trace.kernels, trace.copies, trace.memsets) if len(t)]
        ends = [int(t.end.max()) for t in (trace.kernels, trace.copies, trace.memsets) if len(t)]
        lo, hi = min(starts), max(ends)
        # Widen to host ranges that straddle an edge but lie mostly inside (a "profile" range
        # opened just before the first launch), so a phase that began before the first kernel is
        # whole; a range spanning the whole process (startup included) does not count.
        a = trace.annotations
        inside = np.minimum(a.end, hi) - np.maximum(a.ts, lo)
        host = (a.device < 0) & (inside >= _MOSTLY_INSIDE * np.maximum(a.dur, 1))
        left = host & (a.ts < lo) & (a.end > lo)
        right = host & (a.ts < hi) & (a.end > hi)
        lo = min(lo, int(a.ts[left].min())) if left.any() else lo
        hi = max(hi, int(a.end[right].max())) if right.any() else hi
        t_lo, t_hi = trace.span_ns
        left_out = (lo - t_lo) + (t_hi - hi)
        out = f"; {left_out / 1e6:.1f} ms of host-only time before and after it left out" if left_out >= 1e5 else ""
        return (
            lo,
            hi,
            (
                f"the span of GPU activity, {(hi - lo) / 1e6:.1f} ms (first to last GPU operation, widened to the "
                f"ranges open at its edges{out})"
            ),
        )
    lo, hi = trace.span_ns
    return lo, hi, "the whole trace"
