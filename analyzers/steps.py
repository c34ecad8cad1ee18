"""Step segmentation: where each training step starts and ends.

In order of preference: the range named by ``--step-range``; ``ProfilerStep#N`` ranges (host
lane, else GPU lane); top-level ranges named like a step (``step 3``, ``train_step``; NVTX or
``record_function``); repeating iteration markers (DataLoader ``__next__``,
``Optimizer.zero_grad``, ``Optimizer.step``), as in traces recorded without ``profiler.step()``;
iterations from forward/backward/optimizer ranges; otherwise the whole trace (for Nsight, the span
of GPU activity) as one window, said plainly. Range-based rules live in ``range_steps``.
"""

from __future__ import annotations

from trainscope.analyzers.plural import plural

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from trainscope.traces.model import Trace

if TYPE_CHECKING:
    from trainscope.analyzers.rules import Rules

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
DATA_WAIT = re.compile(r"DataLoader.*__next__|enumerate\(DataLoader\)")
ZERO_GRAD = re.compile(r"^Optimizer\.zero_grad#")
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")


@dataclass(frozen=True)
class Step:
    label: str
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class StepSegmentation:
    method: str  # "profiler_step" | "iteration_markers" | "whole_trace"
    steps: list[Step]
    note: str
    # First/last steps far shorter than the others (a ProfilerStep opened as recording stopped):
    # left out of ``steps`` and every statistic, named in a warning.
    stubs: tuple[Step, ...] = ()
    # Steps left out as not steady state (warm-up steps, steps inside an init/warm-up range, steps
    # one-off costs dominate: analyzers/one_off.py), named in the report.
    warmup: tuple[Step, ...] = ()

    @property
    def stub_note(self) -> str | None:
        if not self.stubs:
            return None
        names = ", ".join(f"{s.label} ({s.duration_ns / 1e3:.0f} µs)" for s in self.stubs)
        return (
            f"stub step{'s' * (len(self.stubs) > 1)} left out of the statistics: {names} — far shorter than the "
            "other steps (recording stopped or started inside it)"
        )

    @property
    def marked(self) -> list[Step]:
        """Every step the trace marks that is not a stub, the warm-up steps left out of the judged
        window included, in time order (what cross-rank matching keys on: each rank may leave out
        other warm-up steps)."""
        return sorted([*self.steps, *self.warmup], key=lambda s: s.start_ns)

    @property
    def starts(self) -> np.ndarray:
        return np.array([s.start_ns for s in self.steps], np.int64)

    @property
    def ends(self) -> np.ndarray:
        return np.array([s.end_ns for s in self.steps], np.int64)


def _matching(
    trace: Trace, pattern: re.Pattern[str], table: str, lane: str = "host"
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    t = getattr(trace, table)
    if not len(t):
        return np.empty(0, np.int64), np.empty(0, np.int64), []
    sel = name_mask(trace, pattern)[t.name]
    if table == "annotations":
        sel &= (t.device < 0) if lane == "host" else (t.device >= 0)
    order = np.argsort(t.ts[sel], kind="stable")
    names = [trace.strings[i] for i in t.name[sel][order]]
    return t.ts[sel][order], t.end[sel][order], names


def name_mask(trace: Trace, pattern: re.Pattern[str]) -> np.ndarray:
    """Per string-table entry: does the name match ``pattern``."""
    return np.array([bool(pattern.search(s)) for s in trace.strings], bool)


def segment_steps(trace: Trace, step_range: str | None = None, rules: Rules | None = None) -> StepSegmentation:
    """Steps of ``trace``; ``step_range`` names the annotation range that marks one step. Stub
    steps at either end (``step.stub_fraction``) are set apart (:attr:`StepSegmentation.stubs`)."""
    from trainscope.analyzers.rules import Rules

    rules = rules or Rules()
    seg = _segment(trace, step_range, rules)
    return drop_stubs(seg, rules.value("step.stub_fraction"))


def drop_stubs(seg: StepSegmentation, fraction: float) -> StepSegmentation:
    """``seg`` without first/last steps shorter than ``fraction`` × the median of the others."""
    steps = list(seg.steps)
    if len(steps) < 2 or seg.method == "whole_trace":
        return seg
    stubs: list[Step] = []
    for end in (-1, 0):  # the last step first: a profiler stopped mid-step is the usual case
        if len(steps) < 2:
            break
        others = np.median([s.duration_ns for i, s in enumerate(steps) if i != (end % len(steps))])
        if steps[end].duration_ns < fraction * others:
            stubs.append(steps.pop(end))
    if not stubs:
        return seg
    stubs = sorted(stubs, key=lambda s: s.start_ns)
    names = ", ".join(f"{s.label}, {s.duration_ns / 1e3:.0f} µs" for s in stubs)
    note = f"{seg.note}; {plural(len(stubs), 'stub step')} left out ({names}: recording started or stopped inside it)"
    return replace(seg, steps=steps, stubs=tuple(stubs), note=note)


def _segment(trace: Trace, step_range: str | None, rules: Rules) -> StepSegmentation:
    from trainscope.analyzers import range_steps  # it builds on this module's types

    if step_range:
        return range_steps.named_range_steps(trace, step_range)
    for lane in ("host", "GPU"):
        starts, ends, names = _matching(trace, PROFILER_STEP, "annotations", lane=lane.lower())
        if len(starts):
            steps = _profiler_steps(starts, ends, names)
            return StepSegmentation(
                "profiler_step", steps, f"{plural(len(steps), 'step')} from ProfilerStep#N markers on the {lane} lane"
            )

    named = range_steps.repeating_range_steps(trace)
    if named is not None:
        return named

    anchors = _iteration_anchors(trace)
    if anchors is not None:
        starts, what, stop = anchors
        steps = []
        for i, s in enumerate(starts):
            if i + 1 < len(starts):
                e = int(starts[i + 1])
            else:
                later = stop[stop > s]
                e = int(later.max()) if len(later) else int(s + np.median(np.diff(starts)))
            steps.append(Step(f"iteration {i + 1}", int(s), e))
        return StepSegmentation(
            "iteration_markers",
            steps,
            f"no ProfilerStep markers: {len(steps)} iterations delimited by repeating {what} annotations",
        )

    tiled = range_steps.tiling_range_steps(trace, rules.value("step.range_tiling"))
    if tiled is not None:
        return tiled

    by_phase = range_steps.phase_steps(trace)
    if by_phase is not None:
        return by_phase

    lo, hi, what = range_steps.whole_window(trace)
    offered = range_steps.offered_ranges(trace)
    return StepSegmentation(
        "whole_trace",
        [Step("whole trace", lo, hi)],
        f"no step markers (ProfilerStep#N, step-like ranges, optimizer or DataLoader annotations): {what} is "
        "analyzed as one window"
        + (f"; repeating ranges that could mark steps: {offered} (--step-range NAME)" if offered else ""),
    )


def _profiler_steps(starts: np.ndarray, ends: np.ndarray, names: list[str]) -> list[Step]:
    seen: set[str] = set()
    steps: list[Step] = []
    for s, e, n in zip(starts, ends, names):
        if n in seen:  # the same step recorded on two threads: keep the first
            continue
        seen.add(n)
        steps.append(Step(n, int(s), int(e)))
    # Steps must not overlap: clip each at the next one's start.
    return [
        Step(st.label, st.start_ns, min(st.end_ns, steps[i + 1].start_ns) if i + 1 < len(steps) else st.end_ns)
        for i, st in enumerate(steps)
        if st.end_ns > st.start_ns
    ]


def _iteration_anchors(trace: Trace) -> tuple[np.ndarray, str, np.ndarray] | None:
    """Start times of repeating per-iteration markers, what they are, and optimizer-step ends."""
    opt_s, opt_e, _ = _matching(trace, OPTIMIZER_STEP, "annotations")
    candidates = []
    for pattern, what in (
        (DATA_WAIT, "DataLoader __next__"),
        (ZERO_GRAD, "Optimizer.zero_grad"),
        (OPTIMIZER_STEP, "Optimizer.step"),
    ):
        s1, e1, _ = _matching(trace, pattern, "annotations")
        s2, e2, _ = _matching(trace, pattern, "cpu_ops")
        s, e = np.concatenate([s1, s2]), np.concatenate([e1, e2])
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        # Drop markers nested inside the previous one (an op and its annotation of one call).
        keep, reach = [], -1
        for a, b in zip(s, e):
            if a >= reach:
                keep.append(a)
                reach = b
        if len(keep) >= 2:
            candidates.append((np.array(keep, np.int64), what))
    if not candidates:
        return None
    starts, what = candidates[0]
    stop = np.concatenate([opt_e, [int(starts[-1])]])
    return starts, what, stop
