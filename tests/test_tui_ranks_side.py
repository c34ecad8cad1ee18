"""Ranks side by side (issue 28 item 2): the bundled DLRM pair (HTA's 2-rank test traces) on one
clock in the Ranks tab, the collectives matched across ranks joined at their ends, the straggler's
late arrivals marked, and each rank's file named in the table."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest
from textual.geometry import Region

from tests.conftest import KINETO

pytest.importorskip("textual")

from tests.test_tui import until  # noqa: E402
from trainscope.analyzers.ranks.alignment import rank_collectives  # noqa: E402
from trainscope.analyzers.ranks.lanes import side_by_side  # noqa: E402
from trainscope.analyzers.rules import Rules  # noqa: E402
from trainscope.collectors import open_traces  # noqa: E402
from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.ranks_timeline import RanksTimeline  # noqa: E402
from trainscope.tui.state import build_session  # noqa: E402

DLRM = str(KINETO / "hta_dlrm_ws128_2ranks")


@contextlib.asynccontextmanager
async def opened_side_by_side(*keys: str):
    """The app on the DLRM rank folder, ready, ``keys`` pressed and the ranks side by side drawn.
    Yields (app, pilot)."""
    app = AnalyzeApp(DLRM, session=build_session(DLRM, open_traces(DLRM), Rules()))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session is not None and app.query_one("#tabs").display, 15)
        await pilot.press(*keys)
        await until(pilot, lambda: getattr(app, "_side", None), 10)
        yield app, pilot


def lines(widget) -> list[str]:
    r = widget.region
    return [s.text for s in widget.render_lines(Region(0, 0, r.width, r.height))]


def test_side_by_side_matches_the_dlrm_collectives_and_finds_the_late_rank():
    from trainscope.api import analyze

    report = analyze(DLRM, jobs=1)
    story = report.story
    colls = [rank_collectives(t) for t in open_traces(DLRM).traces]
    sb = side_by_side(colls, story)
    assert sb.story is story and len(sb.shared) == 5 and all(len(c) == 10 for c in colls)
    for c in sb.shared:  # matched collectives end together on the common clock (within the end tolerance)
        assert abs(c.ends[0] - c.ends[1]) <= Rules().value("ranks.end_match_us") * 1000
    # the late arrival of each shared collective is the rank whose start is later, by the spread: the
    # story's one last rank (ties within straggler.tie_us name none)
    for c, sc in zip(sb.shared, story.collectives):
        late = int(np.argmax(c.starts))
        assert c.spread_ns == pytest.approx(abs(c.starts[1] - c.starts[0]), abs=1e3)
        assert c.late_rank == sc.last_index == (late if c.spread_ns > sb.tolerance_ns else None)
    # the lanes count what the report counts: rank 1 last at 5 of 5 (it was 4 of 5 with the 0.5 ms
    # end-matching tolerance as the tie rule, against the report's 5 of 5)
    assert sb.late_count(1) == story.ranks[1].last_in == 5 and sb.late_count(0) == 0 and sb.counted == 5
    assert max(c.spread_ns for c in sb.shared) / 1e6 == pytest.approx(22.328, abs=0.01)
    assert story.ranks[1].max_late_ms == pytest.approx(22.328, abs=0.01)


def test_ranks_tab_draws_two_ranks_on_one_clock_with_collectives_joined():
    async def go():
        async with opened_side_by_side("7") as (app, pilot):
            await pilot.pause()
            view = app.query_one(RanksTimeline)
            rows = lines(view)
            assert rows[1].startswith("rank 0") and rows[4].startswith("rank 1")
            coll0, joins, coll1 = rows[2], rows[3], rows[5]
            gutter = 9
            sb = view.sb
            for c in sb.shared:  # every matched collective: both ranks' ends in the column of the join
                k = gutter + view.col(c.end_ns - view.origin_ns)
                assert joins[k] == "│"
                assert coll0[k - 1 : k + 2].count("┤") >= 1 and coll1[k - 1 : k + 2].count("┤") >= 1
            assert "!" in coll1 and "!" not in coll0  # rank 1 is the straggler
            title = str(app.query_one("#ranks-side-title").render())
            assert (
                "2 ranks on one clock" in title and "rank 1 last at 5 of 5 (mean 6.4 ms, ! up to 22.3 ms late)" in title
            )
            table = "\n".join(lines(app.query_one("#ranks-table")))
            assert "rank0.json.gz" in table and "rank1.json.gz" in table
            # n frames the first late arrival: the window shrinks around it
            view.focus()
            width = view.end_ns - view.start_ns
            await pilot.press("n")
            await pilot.pause()
            assert view.end_ns - view.start_ns < width / 5

    asyncio.run(go())


def test_R_on_the_timeline_opens_the_ranks_side_by_side():
    async def go():
        async with opened_side_by_side("2", "R") as (app, pilot):
            await pilot.pause()
            assert app.query_one("#tabs").active == "ranks"
            assert isinstance(app.focused, RanksTimeline) and app.focused.ranks

    asyncio.run(go())
