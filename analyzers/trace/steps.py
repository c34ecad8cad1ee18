"""Step segmentation: where each training step starts and ends.

In order of preference: the range named by ``--step-range``; ``ProfilerStep#N`` ranges (host
lane, else GPU lane); top-level ranges named like a step (``step 3``, ``train_step``; NVTX or
``record_function``); repeating iteration markers (DataLoader ``__next__``,
``Optimizer.zero_grad``, ``Optimizer.step``), as in traces recorded without ``profiler.step()``;
iterations from forward/backward/optimizer ranges; otherwise the whole trace (the span of GPU
activity, from the DataLoader wait that leads into its first GPU operation) as one window, said
plainly. Range-based rules live in ``range_steps``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from dataclasses import replace

import numpy as np

from trainscope.analyzers.plural import plural
from trainscope.analyzers.rules import Rules
from trainscope.traces.model import Trace

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
    # one-off costs dominate: analyzers/trace/one_off.py), named in the report.
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
    from trainscope.analyzers.trace import range_steps  # circle: range_steps builds on this module's types

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
    if not trace.has_gpu_activity and "capture" in trace.metadata:  # an Nsight export without GPU rows
        lo, hi = host_span(trace)
        what = f"the span of the host activity it holds (no GPU rows), {(hi - lo) / 1e6:.1f} ms"
    lead = leading_input_wait(trace, lo, hi)
    if lead is not None:
        lo, what = lead, _with_leading_wait(trace, lead, hi)
    offered = range_steps.offered_ranges(trace)
    return StepSegmentation(
        "whole_trace",
        [Step("whole trace", lo, hi)],
        f"no step markers (ProfilerStep#N, step-like ranges, optimizer or DataLoader annotations): {what} is "
        "analyzed as one window"
        + (f"; repeating ranges that could mark steps: {offered} (--step-range NAME)" if offered else ""),
    )


def host_span(trace: Trace) -> tuple[int, int]:
    """First start and last end of a trace's host activity: ranges, operators, CUDA and OS runtime
    calls, and the CPU samples an Nsight export without GPU rows holds (``metadata["cpu_samples"]``)."""
    starts, ends = [], []
    for t in (trace.annotations, trace.cpu_ops, trace.runtime, trace.os_runtime):
        if len(t):
            starts.append(int(t.ts.min()))
            ends.append(int(t.end.max()))
    samples = trace.metadata.get("cpu_samples")
    if isinstance(samples, dict) and samples.get("count"):
        starts.append(int(samples["start_ns"]))
        ends.append(int(samples["end_ns"]))
    return (min(starts), max(ends)) if starts else (0, 0)


def leading_input_wait(trace: Trace, lo: int, hi: int) -> int | None:
    """Where the unmarked window [``lo``, ``hi``) (the span of GPU activity) starts once the input
    wait that leads into its first GPU operation is in it: the start of the last DataLoader
    ``__next__`` (host range or operator) that begins before ``lo`` and ends no later than ``hi``,
    when the host reaches the first GPU operation's launch from its end sooner than the GPU span
    lasts (the loop fetched the batch, then issued the work); None when there is none."""
    if not trace.has_gpu_activity or hi <= lo:
        return None
    starts, ends = [], []
    for table in ("annotations", "cpu_ops"):
        s, e, _ = _matching(trace, DATA_WAIT, table)
        starts.append(s)
        ends.append(e)
    s, e = np.concatenate(starts), np.concatenate(ends)
    cand = (s < lo) & (e <= hi) & (e > s)
    if not cand.any():
        return None
    k = int(np.flatnonzero(cand)[np.argmax(e[cand])])  # the wait that ends last before the work
    issue = _first_issue(trace)
    return int(s[k]) if issue - int(e[k]) <= hi - lo else None


def _first_issue(trace: Trace) -> int:
    """When the host issued the first GPU operation: the start of its runtime call, else its own start."""
    gpu = [t for t in (trace.kernels, trace.copies, trace.memsets) if len(t)]
    first = min(int(t.ts.min()) for t in gpu)
    c = np.concatenate([t.correlation[t.ts == first] for t in gpu])
    r = trace.runtime
    hit = np.isin(r.correlation, c[c >= 0]) if len(r) and len(c) else np.zeros(len(r), bool)
    return min(int(r.ts[hit].min()), first) if hit.any() else first


def _with_leading_wait(trace: Trace, lo: int, hi: int) -> str:
    t_lo, t_hi = trace.span_ns
    left_out = (lo - t_lo) + (t_hi - hi)
    out = f"; {left_out / 1e6:.1f} ms of host-only time before and after it left out" if left_out >= 1e5 else ""
    return (
        f"the span of GPU activity and the DataLoader wait that leads into it, {(hi - lo) / 1e6:.1f} ms (from the "
        f"input wait before the first GPU operation to the last GPU operation{out})"
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
