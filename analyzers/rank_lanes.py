"""Ranks side by side on one time axis: every rank's clock mapped onto the reference rank's by the
clock offset that the collectives' ends give (:func:`trainscope.analyzers.ranks.match_collectives`,
the matching the alignment and the straggler figures use), and each collective matched across
ranks with every rank's arrival and end on that common clock. The last rank to arrive at a
collective, when it arrives later than the first by more than ``ranks.end_match_us`` (the
tolerance within which two ranks' ends count as one instant), is that collective's late arrival:
the others wait for it (Perfetto and HTA show the same with stacked per-rank lanes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.ranks import RankCollectives, match_collectives
from trainscope.analyzers.rules import Rules


@dataclass(frozen=True)
class SharedCollective:
    """One collective matched on several ranks; times in ns on the common (reference) clock, None
    for a rank it was not matched on."""

    kind: str
    starts: tuple[float | None, ...]
    ends: tuple[float | None, ...]
    late_rank: int | None  # index of the rank that arrived last, beyond the tolerance (None: together)
    spread_ns: float  # last arrival − first arrival

    @property
    def end_ns(self) -> float:
        """The instant the collective completes (the median of the ranks' ends)."""
        return float(np.median([e for e in self.ends if e is not None]))


@dataclass(frozen=True)
class SideBySide:
    """Per rank (the order given): the clock offset (ns, its clock minus the reference's; None when no
    collective matched, the rank then stays on its own clock) and its collectives on the common clock."""

    reference: int
    offsets_ns: tuple[float | None, ...]
    shared: tuple[SharedCollective, ...]
    own: tuple[tuple[tuple[float, float, str], ...], ...]  # every rank's collectives (start, end, kind), common clock
    tolerance_ns: float

    def late_count(self, rank: int) -> int:
        return sum(1 for c in self.shared if c.late_rank == rank)

    def to_common(self, rank: int, t_ns: float) -> float:
        """An instant on rank ``rank``'s own clock (absolute ns) on the common clock."""
        return t_ns - (self.offsets_ns[rank] or 0.0)


def side_by_side(collectives: list[RankCollectives], rules: Rules | None = None) -> SideBySide:
    rules = rules or Rules()
    tol = rules.value("ranks.end_match_us") * 1000
    n = len(collectives)
    if n < 2 or sum(1 for c in collectives if len(c)) < 2:
        own = tuple(tuple((float(s), float(e), k) for s, e, k in zip(c.start, c.end, c.kind)) for c in collectives)
        return SideBySide(0, tuple([0.0] * n), (), own, tol)
    m = match_collectives(collectives, rules)
    ref = collectives[m.reference]
    shared = []
    for j in m.instances:
        starts: list[float | None] = []
        ends: list[float | None] = []
        for r, c in enumerate(collectives):
            i = m.matches[r].get(j) if m.offsets[r] is not None else None
            starts.append(None if i is None else float(c.start[i] - m.offsets[r]))
            ends.append(None if i is None else float(c.end[i] - m.offsets[r]))
        have = [(s, r) for r, s in enumerate(starts) if s is not None]
        first, (last, last_r) = min(s for s, _ in have), max(have)
        spread = last - first
        shared.append(
            SharedCollective(
                ref.kind[j], tuple(starts), tuple(ends), last_r if spread > tol and len(have) > 1 else None, spread
            )
        )
    own = tuple(
        tuple(
            (float(s - (m.offsets[r] or 0.0)), float(e - (m.offsets[r] or 0.0)), k)
            for s, e, k in zip(c.start, c.end, c.kind)
        )
        for r, c in enumerate(collectives)
    )
    return SideBySide(m.reference, tuple(m.offsets), tuple(shared), own, tol)
