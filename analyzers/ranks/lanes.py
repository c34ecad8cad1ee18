"""Ranks side by side on one time axis: every rank's clock mapped onto the reference rank's by the
clock offset that the collectives' ends give, and each collective matched across ranks with every
rank's arrival and end on that common clock — the matching, late arrivals and cold starts of the one
rank story (:func:`trainscope.analyzers.ranks.story.rank_story`), so the lanes mark exactly the
collectives the report counts: a collective's late arrival is the one rank the story names last there
(none at a tie within ``straggler.tie_us``, none at a cold start). Perfetto and HTA show the same with
stacked per-rank lanes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.ranks.alignment import RankCollectives
from trainscope.analyzers.ranks.story import RankStory


@dataclass(frozen=True)
class SharedCollective:
    """One collective matched on several ranks; times in ns on the common (reference) clock, None
    for a rank it was not matched on."""

    kind: str
    starts: tuple[float | None, ...]
    ends: tuple[float | None, ...]
    late_rank: int | None  # index of the one rank that arrived last (None: a tie, or a cold start)
    spread_ns: float  # last arrival − first arrival
    cold: bool = False  # left out of the story as a cold start

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
    tolerance_ns: float  # ranks arriving within this of the last are last together (straggler.tie_us)
    story: RankStory | None = None

    def late_count(self, rank: int) -> int:
        return sum(1 for c in self.shared if c.late_rank == rank)

    @property
    def counted(self) -> int:
        """The collectives that name a single last rank (the story's ``considered``)."""
        return self.story.considered if self.story is not None else 0

    def to_common(self, rank: int, t_ns: float) -> float:
        """An instant on rank ``rank``'s own clock (absolute ns) on the common clock."""
        return t_ns - (self.offsets_ns[rank] or 0.0)


def side_by_side(collectives: list[RankCollectives], story: RankStory) -> SideBySide:
    """The ranks' collectives on the story's common clock, each matched collective with the story's
    late arrival."""
    n = len(collectives)
    tol = story.tie_us * 1000
    m = story.matching
    if m is None or not story.collectives:
        offs = tuple(m.offsets) if m is not None else tuple([0.0] * n)
        own = tuple(
            tuple(
                (float(s - (offs[r] or 0.0)), float(e - (offs[r] or 0.0)), k) for s, e, k in zip(c.start, c.end, c.kind)
            )
            for r, c in enumerate(collectives)
        )
        return SideBySide(m.reference if m is not None else 0, offs, (), own, tol, story)
    shared = []
    for j, sc in zip(m.instances, story.collectives):
        starts: list[float | None] = []
        ends: list[float | None] = []
        for r, c in enumerate(collectives):
            off = m.offsets[r]
            i = m.matches[r].get(j) if off is not None else None
            starts.append(None if i is None or off is None else float(c.start[i] - off))
            ends.append(None if i is None or off is None else float(c.end[i] - off))
        shared.append(SharedCollective(sc.kind, tuple(starts), tuple(ends), sc.last_index, sc.spread_ms * 1e6, sc.cold))
    own = tuple(
        tuple(
            (float(s - (m.offsets[r] or 0.0)), float(e - (m.offsets[r] or 0.0)), k)
            for s, e, k in zip(c.start, c.end, c.kind)
        )
        for r, c in enumerate(collectives)
    )
    return SideBySide(m.reference, tuple(m.offsets), tuple(shared), own, tol, story)
