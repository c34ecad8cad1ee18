"""Each rank's latest arrival: the collective it reached furthest behind the first rank to reach it.

What Enter on a rank shows on the timeline. The collectives are matched across ranks by
:func:`trainscope.analyzers.ranks.match_collectives`, the matching the alignment itself uses
(identity where recorded, else end instant; offsets from the matches), so a rank's lateness here
averages to the ``mean_late_ms`` of the alignment; this module keeps, per rank, the
single collective where the lateness is largest, on the rank's own clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainscope.analyzers.ranks import RankCollectives, match_collectives
from trainscope.analyzers.rules import Rules


@dataclass(frozen=True)
class LateCollective:
    rank_index: int  # position among the ranks given
    kind: str  # "allreduce", "broadcast", …
    on_gpu: bool  # a communication kernel (else a blocking host range: gloo, MPI)
    start_ns: int  # the rank's arrival, absolute ns on its own clock (trace origin included)
    end_ns: int
    late_ms: float  # arrival after the first rank to arrive at this collective
    instance: int  # the collective's position among those matched across ranks (by the reference rank's order)
    mean_late_ms: float  # over every matched collective of this rank (the alignment's figure)
    matched: int


def latest_arrivals(collectives: list[RankCollectives], rules: Rules | None = None) -> list[LateCollective | None]:
    """Per rank (same order), its latest-arriving matched collective; None for a rank with none matched
    (fewer than two ranks, or no collectives in common)."""
    rules = rules or Rules()
    n = len(collectives)
    out: list[LateCollective | None] = [None] * n
    if n < 2 or sum(1 for c in collectives if len(c)) < 2:
        return out
    m = match_collectives(collectives, rules)
    offsets, matches, inst = m.offsets, m.matches, m.instances
    if not inst:
        return out
    arrival = np.full((n, len(inst)), np.nan)
    for r, c in enumerate(collectives):
        if offsets[r] is None:
            continue
        for k, j in enumerate(inst):
            i = matches[r].get(j)
            if i is not None:
                arrival[r, k] = c.start[i] - offsets[r]
    late = arrival - np.nanmin(arrival, axis=0)
    for r, c in enumerate(collectives):
        has = ~np.isnan(late[r])
        if not has.any():
            continue
        k = int(np.argmax(np.where(has, late[r], -1.0)))
        i = matches[r][inst[k]]
        out[r] = LateCollective(
            r,
            c.kind[i],
            c.source == "GPU kernels",
            int(c.start[i]),
            int(c.end[i]),
            float(late[r, k]) / 1e6,
            k,
            float(np.nanmean(late[r])) / 1e6,
            int(has.sum()),
        )
    return out
