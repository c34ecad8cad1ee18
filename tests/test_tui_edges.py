"""The analyze app's rough edges (issue 28 item 4), each driven with Textual's Pilot on the bundled
ResNet-50 trace (or the A100 control trace where a chart needs FLOPs) and asserted on what the
screen shows."""

from __future__ import annotations

import asyncio
import re

import pytest
from textual.geometry import Region

from tests.conftest import analysis
from tests.test_tui import A100
from tests.test_tui import KINETO
from tests.test_tui import RESNET
from tests.test_tui import _ready
from tests.test_tui import opened
from tests.test_tui import session

pytest.importorskip("textual")

from trainscope.tui.app import AnalyzeApp  # noqa: E402
from trainscope.tui.tables import KernelsPane  # noqa: E402
from trainscope.tui.tabs import TABS  # noqa: E402
from trainscope.tui.timeline import TimelineView  # noqa: E402


def shown(widget) -> list[str]:
    """The widget's lines as drawn (rich Tables and wrapping included)."""
    r = widget.region
    return [s.text.rstrip() for s in widget.render_lines(Region(0, 0, r.width, r.height))]


def title(app) -> str:
    return str(app.query_one("#tl-title").render())


def run(coro):
    return asyncio.run(coro)


def test_kernels_table_gives_class_and_name_the_free_columns():
    async def go():
        s = session(RESNET)
        app = AnalyzeApp(str(KINETO / RESNET), loader=lambda progress: s)  # shown before the tab is laid out
        async with app.run_test(size=(120, 40)) as pilot:
            await _ready(app, pilot)
            await pilot.press("4")
            await pilot.pause()
            table = app.query_one("#kernels-table")
            cols = {str(c.key.value): c.width for c in table.columns.values()}
            assert cols["class"] >= len("normalization")
            # numbers + class + name (each with a cell of padding either side) fill the pane but a scrollbar
            used = sum(w + 2 for w in cols.values())
            assert app.query_one(KernelsPane).size.width - used <= 4
            text = "\n".join(shown(table))
            assert "convolution " in text and "convoluti " not in text and "normalization" in text

    run(go())


def test_timeline_title_leaves_the_matches_on_a_step_jump_and_clamps_to_the_trace():
    async def go():
        async with opened(RESNET) as (app, pilot):
            await pilot.press("4", "enter")
            await pilot.pause()
            assert "instance 1/" in title(app)
            await pilot.press("right_square_bracket")
            await pilot.pause()
            assert "instance" not in title(app) and "ProfilerStep#6 (2/6" in title(app)
            # Enter on the first fix: its interval opens at the trace's first step; the window starts
            # at the trace, never before it (17 ms of "idle" before the first event)
            await pilot.press("5", "enter")
            await pilot.pause()
            view = app.query_one(TimelineView)
            lo, hi = view.model.span
            assert lo <= view.start_ns < view.end_ns <= hi
            head = re.search(r"window (-?[\d.]+)–(-?[\d.]+) ms", title(app))
            assert head and float(head.group(1)) >= 0

    run(go())


def test_search_title_names_the_match_and_a_window_that_is_not_zero_wide():
    async def go():
        async with opened(RESNET) as (app, pilot):
            await pilot.press("2", "slash", *"wgrad", "enter")
            await pilot.pause()
            t = title(app)
            m = re.search(r"window ([\d.]+)–([\d.]+) ms", t)
            assert m and float(m.group(1)) < float(m.group(2)), t
            hit = re.search(r"/wgrad \d+/\d+: (\S+)", t)
            assert hit and "wgrad" in hit.group(1).lower(), t
            assert " 0.000 ms" not in t

    from trainscope.tui.timeline import window_label

    assert window_label(121_677_400, 121_687_400) != "122–122"


def test_help_lines_wrap_under_their_description():
    async def go():
        async with opened(RESNET, (80, 24), "question_mark") as (app, pilot):
            await pilot.pause()
            lines = [x for x in shown(app.screen.query_one("#help-keys")) if x.strip()]
            headings = {"anywhere", "timeglyphs"} | {t.title.lower() for t in TABS}
            stray = [
                x
                for x in lines
                if not x.startswith("  ")
                and x.split()[0] not in headings
                and not x.startswith(("trainscope — keys", "timeline glyphs"))
            ]
            assert not stray, stray
            # a long description continues at the description's column
            cont = [x for x in lines if x.startswith(" " * 30) and x.strip()]
            assert cont

    run(go())


def test_palette_lists_each_action_once_and_no_tab_that_is_off():
    async def go():
        async with opened(RESNET) as (app, pilot):
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert titles.count("Quit") == 1, titles
            assert len(titles) == len(set(titles))
            assert "Show the Deep tab" not in titles and "Show the Ranks tab" not in titles
            assert "Show the Kernels tab" in titles

    run(go())


def test_steps_note_and_evidence_read_cleanly():
    async def go():
        async with opened(RESNET) as (app, pilot):
            evidence = str(app.query_one("#evidence").render())
            assert "—  —" not in evidence and ": —" not in evidence
            assert "DataLoader runs in the main process (num_workers=0)  — trace" in evidence
            await pilot.press("3")
            await pilot.pause()
            note = str(app.query_one("#steps-note").render())
            assert "0 outlier" not in note and "outlier(s)" not in note and "no outliers" in note
            assert not note.startswith("6 steps · 6 steps")

    run(go())


def test_every_key_line_keeps_help_and_quit_at_80_columns():
    async def go():
        async with opened(RESNET, (80, 24)) as (app, pilot):
            for i in range(5):
                await pilot.press(str(i + 1))
                await pilot.pause()
                line = shown(app.query_one("#keybar"))[0]
                assert line.rstrip().endswith("? keys · q quit"), line

    run(go())
    from trainscope.tui.chrome import fit_hint

    assert fit_hint("a · b · ? keys · q quit", 100) == "a · b · ? keys · q quit"
    assert fit_hint("aaaa · bbbb · cccc · ? keys · q quit", 26) == "aaaa · … · ? keys · q quit"
    assert fit_hint("aaaa · bbbb · cccc · ? keys · q quit", 25) == "? keys · q quit"


def test_x_is_an_export_in_every_app_never_a_filter():
    from trainscope.tui.diff_app import DiffApp
    from trainscope.tui.diff_panes import KernelDiffPane
    from trainscope.tui.memory_app import MemoryApp
    from trainscope.tui.plan_app import PlanApp

    for cls in (AnalyzeApp, DiffApp, PlanApp, MemoryApp, KernelDiffPane, KernelsPane):
        for b in cls.BINDINGS:
            keys = [k.strip() for k in b.key.split(",")]
            if "x" in keys:
                assert b.action in ("perfetto", "export"), (cls.__name__, b.action)


def test_roofline_chart_shows_every_label():
    from trainscope.tui.roofline_plot import LABELS
    from trainscope.tui.roofline_plot import roofline_chart

    roof = analysis(A100).roofline
    pts = [r for r in roof.rows if r.intensity and r.tflops]
    n = min(len(pts), len(LABELS))
    assert n == len(LABELS)
    for width, height in ((80, 18), (120, 18)):
        lines = roofline_chart(roof, width, height)
        plot = "".join(x[9:] for x in lines if "│" in x[:10])
        assert all(plot.count(L) == 1 for L in LABELS[:n]), (width, [L for L in LABELS if L not in plot])


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_kernels_at_real_sizes_name_their_kernels_and_show_every_sort_arrow(size):
    """At 80 columns the names had 16 characters (four rows read "at::native::vec…"); sorted by mean the
    arrow was cut off; at 120 columns the note was cut at "TC =". Names now lose namespaces, then their
    middle; each sorted header shows its arrow; the note's lines fit."""

    async def go():
        async with opened(RESNET, size, "4") as (app, pilot):
            await pilot.pause()
            pane, table = app.query_one(KernelsPane), app.query_one("#kernels-table")
            cols = {str(c.key.value): c.width for c in table.columns.values()}
            assert cols["name"] >= 24
            assert ("class" in cols) == (size[0] >= 100)
            assert sum(w + 2 for w in cols.values()) <= pane.size.width  # no sideways scrolling
            names = [str(table.get_row_at(i)[-1]) for i in range(min(12, table.row_count))]
            # The elementwise kernels (the four "at::native::vec…" rows) are told apart by their functor;
            # at 120 columns every top row is.
            elementwise = [n for n in names if n.startswith("vector")]
            assert len(elementwise) >= 2 and len(set(elementwise)) == len(elementwise), names
            if size[0] >= 120:
                assert len(set(names)) == len(names), names
            assert not any(n.startswith("at::native::") for n in names)
            for key in [c.key for c in pane.sort_columns]:
                pane.sort_by(key)
                await pilot.pause()
                label = str(table.columns[key].label) if key in cols else None
                if label is not None:
                    assert label[-1] in "▼▲" and len(label) <= cols[key], (key, label, cols[key])
            note = [line for line in shown(app.query_one("#kernels-note")) if line]
            assert len(note) == 2 and note[1].endswith("TC tensor cores"), note

    run(go())


def test_an_evidence_fact_without_a_number_has_no_dash_for_its_value():
    """The fixes tab showed "metric: — — source" for evidence without a value (the overview did not):
    both panes draw evidence with one function."""
    from trainscope.tui import fixes
    from trainscope.tui import overview

    fact = {"metric": "num_workers=0 in the trace", "value": None, "unit": "", "threshold": None, "meets": None}
    line = overview.evidence_line({**fact, "source": "DataLoader arguments"}, "  ").plain
    assert line == "  · num_workers=0 in the trace  — DataLoader arguments"
    assert overview.evidence_line({**fact, "source": ""}).plain == "· num_workers=0 in the trace"
    measured = {**fact, "value": 33.9, "unit": "%", "threshold": 30, "meets": True, "source": "breakdown"}
    assert (
        overview.evidence_line(measured).plain == "✔ num_workers=0 in the trace: 33.9 %  (threshold 30 %)  — breakdown"
    )
    assert fixes.evidence_line is overview.evidence_line
