"""Steps from annotation ranges (NVTX, ``record_function``): a repeating top-level range named
like a step (``ProfilerStep#N``, ``step 12``, ``train_step``, ``iteration 3``), or the range the
user names with ``--step-range``. Also the whole-trace window of traces that cover a whole
process (Nsight), which is the span of GPU activity rather than of process startup.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from trainscope.analyzers.steps import Step, StepSegmentation
from trainscope.traces.model import Trace

STEP_LIKE = re.compile(
    r"^(ProfilerStep#\d+|(train(ing)?[ _-]?)?(step|iter(ation)?|batch)([ _#:=-]*\d+)?|train(ing)?[ _-]?(step|iter(ation)?))$",
    re.I,
)
# Traces that record the whole process (startup, imports, CUDA init) rather than a chosen window.
WHOLE_PROCESS_FORMATS = ("nsys-sqlite",)
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


def _ranges(trace: Trace, match) -> tuple[np.ndarray, np.ndarray, list[str]]:
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
        raise StepRangeError(f"no range named {name!r} in the trace" + (f" (most frequent ranges: {top})" if top else
                                                                        " (it has no host annotation ranges)"))
    if len(steps) == 1 or len(set(s.label for s in steps)) == 1:
        steps = [Step(f"{s.label} {i + 1}", s.start_ns, s.end_ns) for i, s in enumerate(steps)] if len(steps) > 1 else steps
    return StepSegmentation("named_range", steps, f"{len(steps)} steps from the {name!r} ranges (--step-range)")


def repeating_range_steps(trace: Trace) -> StepSegmentation | None:
    """Steps from top-level ranges named like a step, or None when the trace has none."""
    starts, ends, labels = _ranges(trace, STEP_LIKE.match)
    steps = _top_level(starts, ends, labels)
    if not steps:
        return None
    if len(set(s.label for s in steps)) < len(steps):  # "train_step" × N: number them
        steps = [Step(f"{s.label} {i + 1}", s.start_ns, s.end_ns) for i, s in enumerate(steps)]
    kinds = sorted({re.sub(r"\d+", "N", s.label) for s in steps})
    return StepSegmentation("annotation_range", steps,
                            f"{len(steps)} steps from top-level {', '.join(repr(k) for k in kinds[:3])} ranges")


def phase_steps(trace: Trace) -> StepSegmentation | None:
    """Iterations from phase ranges when nothing marks steps: each top-level forward range opens
    one, which lasts until the next forward range, or (the last) until its backward/optimizer
    ranges end. None without forward ranges."""
    from trainscope.analyzers.phases import PHASE_PATTERNS  # phases imports this package's steps

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
    return StepSegmentation("phase_ranges", steps,
                            f"no step markers: {len(steps)} iteration{'s' * (len(steps) > 1)} from the forward "
                            f"ranges ({fwd[0].label!r}) to the end of their backward/optimizer ranges and of the GPU work launched")


def launched_work_end(trace: Trace, start_ns: int, end_ns: int) -> int:
    """End of the last GPU operation launched by a runtime call in [start_ns, end_ns) (matched by
    correlation id), or ``start_ns`` when none was."""
    r = trace.runtime
    sel = (r.ts >= start_ns) & (r.ts < end_ns) & (r.correlation >= 0)
    if not sel.any():
        return start_ns
    corr = r.correlation[sel]
    ends = [int(t.end[np.isin(t.correlation, corr)].max()) for t in (trace.kernels, trace.copies, trace.memsets)
            if len(t) and np.isin(t.correlation, corr).any()]
    return max(ends, default=start_ns)


def whole_window(trace: Trace) -> tuple[int, int, str]:
    """The window analyzed when no steps are marked, and how it was chosen."""
    if trace.format in WHOLE_PROCESS_FORMATS and trace.has_gpu_activity:
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
        return lo, hi, ("the span of GPU activity (first to last GPU operation, widened to the ranges open at its "
                        "edges; the trace also covers process startup)")
    lo, hi = trace.span_ns
    return lo, hi, "the whole trace"
