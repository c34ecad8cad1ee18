"""Where in the step, live (``trainscope watch``): each iteration split into data wait, host-to-device
copies, forward, backward, optimizer step and the rest, as shares of the step time, over a window —
for the whole job and per rank — and, in a job of several ranks, the part that holds the slowest
rank back. Pure functions over the snapshots; the step hook measures the parts
(:func:`trainscope.collectors.step_hook._install_parts`).

Every part is **host wall time**: on a GPU, forward and backward are the time the host takes to
launch their kernels (and whatever it waits for), not the GPU's time; the hook synchronizes nothing.

Which rank, and which part: the ranks' parts are compared with the other ranks' median, part by
part (ms per iteration). The slow rank is

1. the rank the input-wait rule names (:mod:`trainscope.analyzers.live.rank_window`: a sign test on the
   DataLoader wait), else
2. the rank whose iteration is longest when it exceeds the others' median iteration by
   ``straggler.late_pct`` of the median iteration (ranks that do not run in lockstep), else
3. in lockstep (synchronous data parallelism: every rank's iteration stretches alike, and a rank
   that is done early waits for the others inside its collectives — DDP's gradient all-reduce runs
   in backward; explicit collectives sit in "other"), the rank with the largest excess over the
   others' median in a part where a rank does its own work (data, host-to-device, forward,
   optimizer), by at least that threshold.

The part named is the slow rank's part with the largest excess over the others' median (in case 3,
among the own-work parts). A rank slow in its backward itself is not told apart from one waiting in
its all-reduce by the hook; a capture (``c``) or ``trainscope analyze`` of per-rank traces tells them
apart by the collectives' arrival times.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import dataclass

from trainscope.analyzers.live.rank_window import samples_by_rank
from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import RankSample
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import StepSample

PARTS = ("data", "h2d", "forward", "backward", "optimizer", "hook", "other")
LABELS = {
    "data": "data wait",
    "h2d": "host→device",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "hook": "watch's hook",
    "other": "other",
}
SHORT = {
    "data": "data",
    "h2d": "h2d",
    "forward": "fwd",
    "backward": "bwd",
    "optimizer": "opt",
    "hook": "hook",
    "other": "other",
}
OWN_WORK = ("data", "h2d", "forward", "optimizer")  # where a rank in lockstep does not wait for the others
BASIS = (
    "host wall time of each part of the iteration (DataLoader __next__, host-to-device .to/.cuda, "
    "outermost nn.Module call, autograd backward, Optimizer.step, the step hook's own time in the "
    "DataLoader call; other = the rest); on a GPU, "
    "forward and backward are kernel launch time, not GPU time — nothing is synchronized"
)


@dataclass(frozen=True)
class StepSplit:
    """Mean ms per iteration of each part (in :data:`PARTS` order) over ``steps`` timed iterations."""

    steps: int
    step_ms: float
    ms: tuple[float, ...]

    def part_ms(self, part: str) -> float:
        return self.ms[PARTS.index(part)]

    def pct(self, part: str) -> float:
        return 100.0 * self.part_ms(part) / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def largest(self) -> str:
        return max(PARTS, key=self.part_ms)


@dataclass(frozen=True)
class HoldBack:
    """The part that holds the slowest rank back: its ms per iteration against the others' median."""

    rank: str
    part: str
    rank_ms: float
    others_ms: float
    why: str  # how the rank was chosen: "input wait", "longest iteration", "lockstep"

    @property
    def excess_ms(self) -> float:
        return self.rank_ms - self.others_ms


@dataclass(frozen=True)
class SplitWindow:
    split: StepSplit | None  # every stepping process together
    ranks: tuple[tuple[str, StepSplit], ...] = ()  # per rank, for a job with several
    holds: HoldBack | None = None
    evidence: str = ""  # why a part is named, or why none is (several ranks only)


def _acc(items: Iterable[StepSample | RankSample]) -> StepSplit | None:
    n = wait = step = fwd = bwd = opt = h2d = hook = 0
    for x in items:
        if not x.steps or not x.has_parts:
            continue
        n += x.steps
        wait += x.wait_ns
        step += x.step_ns
        fwd += x.fwd_ns or 0
        bwd += x.bwd_ns or 0
        opt += x.opt_ns or 0
        h2d += x.h2d_ns or 0
        hook += x.hook_ns or 0
    if not n or step <= 0:
        return None
    other = max(0, step - wait - h2d - fwd - bwd - opt - hook)
    per = tuple(v / n / 1e6 for v in (wait, h2d, fwd, bwd, opt, hook, other))
    return StepSplit(n, step / n / 1e6, per)


def step_split(steps: Iterable[StepSample]) -> StepSplit | None:
    """The split of the iterations in ``steps`` whose parts were timed (None: none were)."""
    return _acc(steps)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    k = len(s)
    return s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2


def split_window(
    snaps: Sequence[Snapshot],
    rules: Rules,
    steps_after_t: float | None = None,
    straggler: str | None = None,
) -> SplitWindow | None:
    """The window's split (None when no timed iteration carried its parts: an older hook, or a job
    without torch's modules). ``steps_after_t``: start-up steps left out, as the window statistics
    do; ``straggler``: the rank the input-wait rule names, if any."""
    kept = [s for s in snaps if steps_after_t is None or s.t > steps_after_t]
    whole = _acc(s.step for s in kept if s.step is not None)
    ranks = tuple((name, sp) for name, rs in samples_by_rank(kept).items() if (sp := _acc(rs)) is not None)
    if whole is None and not ranks:
        return None
    if not ranks:
        return SplitWindow(whole)
    holds, evidence = holding_back(ranks, rules, straggler)
    return SplitWindow(whole, ranks, holds, evidence)


def holding_back(
    ranks: Sequence[tuple[str, StepSplit]], rules: Rules, straggler: str | None = None
) -> tuple[HoldBack | None, str]:
    """The part that holds the slowest rank back (see the module's doc), or None with the reason."""
    need = rules.value("live.min_steps")
    ready = [(n, sp) for n, sp in ranks if sp.steps >= need]
    if len(ready) < 2:
        return None, f"fewer than two ranks with {need:g} timed iterations in the window"
    median_step = _median([sp.step_ms for _, sp in ready])
    cut = rules.value("straggler.late_pct") / 100 * median_step
    by_name = dict(ready)

    def others(name: str, part: str) -> float:
        return _median([sp.part_ms(part) for n, sp in ready if n != name])

    def excess(name: str, part: str) -> float:
        return by_name[name].part_ms(part) - others(name, part)

    def worst(name: str, parts: Sequence[str]) -> str:
        return max(parts, key=lambda p: excess(name, p))

    chosen: tuple[str, tuple[str, ...], str] | None = None
    if straggler is not None and straggler in by_name:
        chosen = (straggler, PARTS, "input wait")
    else:
        longest = max(ready, key=lambda x: x[1].step_ms)[0]
        iter_excess = by_name[longest].step_ms - _median([sp.step_ms for n, sp in ready if n != longest])
        if iter_excess >= cut and iter_excess > 0:
            chosen = (longest, PARTS, "longest iteration")
        else:
            best = max((n for n, _ in ready), key=lambda n: excess(n, worst(n, OWN_WORK)))
            if excess(best, worst(best, OWN_WORK)) >= cut:
                chosen = (best, OWN_WORK, "lockstep")
    threshold = f"threshold {cut:.1f} ms = straggler.late_pct of the {median_step:.1f} ms median iteration"
    if chosen is None:
        return None, (
            f"no rank stands out: every rank's iteration and its own-work parts (data, host→device, forward, "
            f"optimizer) are within {threshold} of the others'"
        )
    name, parts, why = chosen
    part = worst(name, parts)
    hb = HoldBack(name, part, by_name[name].part_ms(part), others(name, part), why)
    if hb.excess_ms <= 0:
        return None, f"rank {name} is named by its input wait, but no part of its step exceeds the others'"
    how = {
        "input wait": "named by its input wait (sign test)",
        "longest iteration": f"its iteration is the longest, {by_name[name].step_ms:.1f} ms",
        "lockstep": "the ranks run in lockstep; the others wait for it in their collectives "
        "(DDP's gradient all-reduce: backward)",
    }[why]
    return hb, (
        f"rank {name}'s {LABELS[part]} takes {hb.rank_ms:.1f} ms per iteration against {hb.others_ms:.1f} ms for "
        f"the other ranks (median): +{hb.excess_ms:.1f} ms ({threshold}); {how}"
    )
