"""The Perfetto export of an analyzed run: the one function the command line (``--perfetto``) and the
terminal app (``x``) both call, so the two cannot write different files for one input."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from trainscope.reports.perfetto import RankPart
from trainscope.reports.perfetto import write_perfetto
from trainscope.reports.perfetto import write_perfetto_ranks

if TYPE_CHECKING:
    from trainscope.api.cache import CachedReport
    from trainscope.api.report import Report


def export_perfetto(report: Report | CachedReport, path: str | os.PathLike[str]) -> str:
    """Write ``report``'s trace with its findings as tracks, for ui.perfetto.dev (JSON trace-event
    format), into ``path`` atomically; returns the path.

    One trace: its events (a Kineto file's own, copied byte for byte) with the findings process.
    A rank set (a directory of per-rank traces): one file with every rank as its own process,
    named and sorted by rank, each with its findings, the collectives as the ranks' alignment matched
    them (a track and flows), and every event of its trace (:func:`trainscope.reports.perfetto.write_perfetto_ranks`).
    Whatever rank a viewer has selected, the file is the same. Raises OSError when ``path`` cannot be
    written and :class:`~trainscope.api.BadInput` when a rank's trace cannot be read again."""

    path = os.fspath(path)
    if len(report.ranks) == 1:
        view = report.rank_view()
        write_perfetto(path, view.trace, view.analysis, view.doc, view.timeline)
        return path
    parts: list[RankPart] = []
    for i in range(len(report.ranks)):
        view = report.rank_view(i)
        rank = view.analysis.rank
        parts.append(
            RankPart(
                view.trace,
                view.analysis,
                view.doc,
                view.timeline,
                view.label,
                main=i == report.main_index,
                sort=rank if rank is not None else i,
            )
        )
    write_perfetto_ranks(path, parts, report.side_by_side(), report.source)
    return path
