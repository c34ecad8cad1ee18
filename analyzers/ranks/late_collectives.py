"""Each rank's latest arrival: the collective it reached furthest behind the first rank to reach it.

What Enter on a rank shows on the timeline. Read from the one rank story
(:func:`trainscope.analyzers.ranks.story.rank_story`): its matching, its cold starts (never a
target: a collective the story leaves out is not one Enter jumps to) and each rank's ``latest``
warm collective, placed on the rank's own clock. Its lateness averages to the rank's
``mean_late_ms`` in the story, the figure every view prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainscope.analyzers.ranks.alignment import RankCollectives
from trainscope.analyzers.ranks.story import RankStory


@dataclass(frozen=True)
class LateCollective:
    rank_index: int  # position among the ranks given
    kind: str  # "allreduce", "broadcast", …
    on_gpu: bool  # a communication kernel (else a blocking host range: gloo, MPI)
    start_ns: int  # the rank's arrival, absolute ns on its own clock (trace origin included)
    end_ns: int
    late_ms: float  # arrival after the first rank to arrive at this collective
    instance: int  # the collective's position among those matched across ranks (by the reference rank's order)
    mean_late_ms: float  # over the warm matched collectives of this rank (the story's figure)
    matched: int


def latest_arrivals(collectives: list[RankCollectives], story: RankStory) -> list[LateCollective | None]:
    """Per rank (same order), its latest-arriving warm collective of the story; None for a rank with
    none (fewer than two ranks, nothing aligned, or only cold starts)."""
    n = len(collectives)
    out: list[LateCollective | None] = [None] * n
    m = story.matching
    if m is None or not story.collectives:
        return out
    for r, c in enumerate(collectives):
        rl = story.ranks[r]
        if rl.latest is None:
            continue
        i = m.matches[r].get(m.instances[rl.latest])
        late = story.collectives[rl.latest].arrival_ms[r]
        if i is None or late is None:
            continue
        out[r] = LateCollective(
            r,
            c.kind[i],
            c.source == "GPU kernels",
            int(c.start[i]),
            int(c.end[i]),
            late,
            rl.latest,
            rl.mean_late_ms,
            rl.matched,
        )
    return out
