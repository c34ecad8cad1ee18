"""Enter jumps to the evidence: a fix to the worst step's interval that carries its finding, a kernel
to its longest instance (n / N cycle), `/` searches the timeline."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.test_tui import A100
from tests.test_tui import RESNET
from tests.test_tui import _ready
from tests.test_tui import opened
from tests.test_tui import session

pytest.importorskip("textual")

from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.tables import KernelsPane  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402


def test_enter_on_a_fix_lands_on_the_interval_that_carries_it():
    async def go():
        s = session(RESNET)
        doc = s.ranks[0].doc
        async with opened(RESNET, (120, 40), "5") as (app, pilot):
            assert doc["recommendations"][0]["finding"] == "data/input-wait"
            await pilot.press("enter")
            await pilot.pause()
            assert app.query_one("#tabs").active == "timeline"
            view = app.query_one(TimelineView)
            assert len(view.matches) == 1
            m = view.matches[0]
            # The worst step by the report's own per-step breakdown of GPU idle waiting for data.
            waits = [st["ms"]["idle_data_wait"] for st in doc["steps"]]
            worst = s.analyses[0].segmentation.steps[int(np.argmax(waits))]
            assert worst.start_ns <= m.start_ns < m.end_ns <= worst.end_ns
            # It is the DataLoader wait of that step: the host is inside __next__ across the interval.
            t = s.ranks[0].trace
            nxt = [i for i, n in enumerate(t.strings) if "DataLoader" in n and "__next__" in n]
            o = t.cpu_ops
            inside = np.isin(o.name, nxt) & (o.ts <= m.start_ns) & (o.end >= m.end_ns)
            assert inside.any()
            assert (m.end_ns - m.start_ns) > 0.5 * max(waits) * 1e6
            a, b = view.column_window(view.cursor)
            assert a <= m.start_ns < b + (b - a)
            assert "waiting for data" in str(app.query_one("#tl-detail").render())
            assert "evidence of data/input-wait" in str(app.query_one("#tl-title").render())

    asyncio.run(go())


def test_enter_on_a_kernel_shows_its_longest_instance_and_n_cycles():
    async def go():
        s = session(A100)
        rank = s.ranks[s.main_rank]
        async with opened(A100, (140, 40), "4") as (app, pilot):
            pane = app.query_one(KernelsPane)
            name = pane.shown[0].name
            await pilot.press("enter")
            await pilot.pause()
            view = app.query_one(TimelineView)
            k = rank.trace.kernels
            sid = rank.trace.strings.index(name)
            on = (k.name == sid) & (k.device == rank.analysis.device)
            durs = np.sort(k.dur[on])[::-1]
            assert len(view.matches) == int(on.sum())
            first = view.matches[view.match_index]
            assert first.end_ns - first.start_ns == durs[0]
            await pilot.press("n")
            assert view.matches[view.match_index].end_ns - view.matches[view.match_index].start_ns == durs[1]
            await pilot.press("N", "N")
            assert view.match_index == len(view.matches) - 1  # cycles
            await pilot.press("escape")
            assert view.matches == []

    asyncio.run(go())


def test_slash_searches_kernels_ops_and_ranges_on_the_timeline():
    async def go():
        s = session(A100)
        t = s.ranks[s.main_rank].trace
        async with opened(A100, (140, 40)) as (app, pilot):
            await pilot.press("2", "slash", *"allreduce", "enter")
            await pilot.pause()
            view = app.query_one(TimelineView)
            assert view.matches and all("allreduce" in m.name.lower() for m in view.matches)
            ids = [i for i, n in enumerate(t.strings) if "allreduce" in n.lower()]
            expected = sum(int(np.isin(tab.name, ids).sum()) for tab in (t.kernels, t.cpu_ops, t.runtime)) + int(
                np.isin(t.annotations.name, ids)[t.annotations.device < 0].sum()
            )
            assert len(view.matches) == expected
            starts = [m.start_ns for m in view.matches]
            assert starts == sorted(starts)
            i = view.match_index
            await pilot.press("n")
            assert view.match_index == (i + 1) % len(view.matches)
            assert app.focused is view

    asyncio.run(go())


def test_enter_on_a_rank_lands_on_its_latest_arriving_collective(gloo_dir):
    """tests/data/gloo: rank 1 sleeps 30 ms per step before its collectives. Enter on a rank in the
    Ranks tab shows that rank on the timeline with the cursor inside the collective it reached
    furthest behind the first rank, and the interval underlined."""
    from trainscope.analyzers.ranks.alignment import rank_collectives

    async def go(choose: int):
        app = AnalyzeApp(str(gloo_dir))
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            s = app.session
            assert app.rank_index == s.main_rank == 1  # the straggler leads: Enter on it keeps the rank
            await pilot.press("7")
            app.query_one("#ranks-table").move_cursor(row=choose)
            await pilot.press("enter")
            view = app.query_one(TimelineView)
            for _ in range(2400):  # the event, checked every 50 ms for up to 120 s (a loaded run took over 5 s)
                await pilot.pause(0.05)
                if view.matches and app.rank_index == choose:
                    break
            await pilot.pause()
            assert app.query_one("#tabs").active == "timeline" and app.rank_index == choose
            assert view.model is s.ranks[choose].timeline
            m = view.matches[view.match_index]
            a, b = view.column_window(view.cursor)
            span = view.match_columns()
            return (
                s,
                m,
                (a + b) // 2,
                span,
                view.cursor,
                app._late[choose],
                str(app.query_one("#tl-title").render()),
                view.render().plain,
            )

    for choose in (1, 0):  # the straggler (the rank shown first), then the punctual rank (a switch)
        s, m, mid, span, cursor, late, title, drawn = run_async(go(choose))
        assert m.start_ns <= mid < m.end_ns  # the cursor is inside the collective
        assert span is not None and span[0] <= cursor < span[1] and "━" in drawn
        assert f"rank {choose} arrived {late.late_ms:.1f} ms after the first rank" in title
        # The interval is one of that rank's blocking gloo collectives, as its trace records it.
        mine = rank_collectives(s.ranks[choose].trace)
        origin = s.ranks[choose].trace.origin_ns
        i = int(np.flatnonzero(mine.start - origin == m.start_ns)[0])
        assert mine.end[i] - origin == m.end_ns and mine.kind[i] == late.kind
        # Against the alignment the report prints: the same matched count and mean lateness …
        al = next(r for r in s.stragglers["alignment"]["ranks"] if r["rank"] == s.ranks[choose].analysis.rank)
        assert late.matched == al["matched"] and round(late.mean_late_ms, 3) == al["mean_late_ms"]
        assert late.late_ms >= late.mean_late_ms
        # … and the rank story's own figures: its latest warm collective, never one it leaves out
        story = s.report.story
        assert late.instance == story.ranks[choose].latest and not story.collectives[late.instance].cold
        assert late.late_ms == story.ranks[choose].max_late_ms
        # … and, by hand, against the other rank's collective of the same kind that ends with it
        # (one clock here: the offsets are microseconds), the arrival gap is the lateness.
        other = rank_collectives(s.ranks[1 - choose].trace)
        off = {r["rank"]: r["clock_offset_us"] * 1e3 for r in s.stragglers["alignment"]["ranks"]}
        mine_off, other_off = off[s.ranks[choose].analysis.rank], off[s.ranks[1 - choose].analysis.rank]
        same = [j for j in range(len(other)) if other.kind[j] == late.kind]
        j = min(same, key=lambda j: abs((other.end[j] - other_off) - (mine.end[i] - mine_off)))
        gap_ms = ((mine.start[i] - mine_off) - (other.start[j] - other_off)) / 1e6
        assert late.late_ms == pytest.approx(max(0.0, gap_ms), abs=0.01)
        if choose == 1:
            assert late.late_ms > 30.0  # it slept 30 ms before this collective
        else:
            assert late.late_ms < 1.0


def run_async(coro):
    return asyncio.run(coro)
