"""``trainscope analyze`` in a terminal: the Textual app.

Parsing and analysis run in a worker thread that never touches widgets; it hands the finished
:class:`Session` to the UI thread, and every screen is a thin view over it and the chosen rank.
Given the analysis's document read from the cache (``document``: tui/state.py ``cached_document``),
the app opens on the Overview drawn from it while the session loads behind; the other tabs come
when it arrives (the Overview is then drawn again from the session's own document: the same).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from rich.cells import cell_len
from textual import work
from textual.app import App
from textual.app import ComposeResult
from textual.binding import Binding
from textual.events import Key
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets import Header
from textual.widgets import Input
from textual.widgets import TabbedContent
from textual.widgets import TabPane

from trainscope.analyzers.plan.ledger import Ledger
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.views.timeline import Match
from trainscope.api.analysis import run_deep as deep_analysis
from trainscope.api.errors import BadInput
from trainscope.api.errors import DeepUnavailable
from trainscope.api.errors import TrainscopeError
from trainscope.api.errors import describe
from trainscope.api.export import export_perfetto
from trainscope.api.report import RankView
from trainscope.reports import formats
from trainscope.reports.formats import FILE_DEFAULT
from trainscope.reports.formats import writer
from trainscope.traces.safe_text import visible
from trainscope.tui.chrome import BackgroundLoading
from trainscope.tui.chrome import HelpScreen
from trainscope.tui.chrome import KeyBar
from trainscope.tui.chrome import Loading
from trainscope.tui.chrome import Palette
from trainscope.tui.chrome import ask_path
from trainscope.tui.chrome import keys_text
from trainscope.tui.deep import DeepPane
from trainscope.tui.fixes import FixesPane
from trainscope.tui.keys import binding_rows
from trainscope.tui.keys import bindings
from trainscope.tui.keys import common_bindings
from trainscope.tui.overview import Overview
from trainscope.tui.ranks_timeline import MAX_RANKS
from trainscope.tui.ranks_timeline import RankLanes
from trainscope.tui.state import Session
from trainscope.tui.state import build_session
from trainscope.tui.tables import KernelsPane
from trainscope.tui.tables import RanksPane
from trainscope.tui.tables import StepsPane
from trainscope.tui.tabs import TABS
from trainscope.tui.tabs import tab as tab_of
from trainscope.tui.timeline import TimelinePane
from trainscope.tui.timeline import TimelineView
from trainscope.tui.timeline import legend
from trainscope.tui.tree import TreePane

# Keys that work on every tab (the tabs' own keys come from their classes in tui/tabs.py).
ANYWHERE_KEYS = [("tab / shift+tab", "move focus"), ("ctrl+p", "command palette: every action of the app by name")]


def key_sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """Every key, for the help screen (and the README), from the bindings and the tab registry."""
    tabs = " · ".join(t.title.lower() for t in TABS)
    anywhere = (
        [(f"1 … {len(TABS)}", tabs)]
        + ANYWHERE_KEYS
        + binding_rows(b for b in bindings(AnalyzeApp.BINDINGS) if not b.action.startswith("show_tab"))
    )
    return [("anywhere", anywhere)] + [(t.title.lower(), t.keys) for t in TABS if t.keys]


def help_screen() -> HelpScreen:
    text = keys_text("trainscope", key_sections())
    text.append("\ntimeline glyphs and colours\n", style="bold underline")
    return HelpScreen(text, legend())


LOADING_HINT = "q quit"
# The Overview from the cached document, the session loading behind it.
PREVIEW_HINT = "the other tabs open when the analysis is done · t theme · ? keys · q quit"


def elide_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: whole, or its start and end around "…" (the end gets the
    extra cell: a path's file name matters most)."""
    if cell_len(text) <= width:
        return text
    keep = max(2, width - 1)
    head, tail = keep // 2, keep - keep // 2
    left = ""
    for ch in text:
        if cell_len(left + ch) > head:
            break
        left += ch
    right = ""
    for ch in reversed(text):
        if cell_len(ch + right) > tail:
            break
        right = ch + right
    return f"{left}…{right}"


Loader = Callable[[Callable[[str, "float | None"], None]], Session]


class AnalyzeApp(Palette, BackgroundLoading, App[int]):
    TITLE = "trainscope"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    Loading.behind { height: 1; layout: horizontal; align: center middle; }
    Loading.behind Static { margin: 0 1; }
    """
    BINDINGS = [
        *common_bindings("export"),
        Binding("x", "perfetto", "export the trace with the findings as tracks for Perfetto (ui.perfetto.dev)"),
        *[
            Binding(str(i + 1), f"show_tab('{t.id}')", f"show the {t.title} tab", show=False)
            for i, t in enumerate(TABS)
        ],
    ]

    rank_index: reactive[int] = reactive(0, init=False)

    def __init__(
        self,
        path: str,
        *,
        session: Session | None = None,
        loader: Loader | None = None,
        report_path: str | None = None,
        rules: Rules | None = None,
        peak_tflops: float | None = None,
        decorate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        step_range: str | None = None,
        deep: bool = False,
        deep_step: str | None = None,
        ledger: Ledger | None = None,
        document: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.session = session
        self.document = document  # the analysis's document from the cache: the Overview while the session loads
        self.loader = loader
        self.report_path = report_path
        self.rules = rules or Rules()
        self.peak_tflops = peak_tflops
        self.step_range = step_range
        self.deep = deep  # run HTA's critical path (--deep) once the analysis is shown
        self.deep_step = deep_step
        self.decorate = decorate  # adds optional sections to the report
        self.ledger = ledger  # --model: the planned ledger beside the measured peak
        self.sub_title = os.path.basename(path.rstrip("/"))
        self.exported: list[str] = []
        self._late_target: int | None = None  # Enter on a rank: show its latest-arriving collective
        self._late: list[Any] | None = None  # analyzers.ranks.late_collectives.LateCollective per rank, once asked
        self._side: tuple[list[RankLanes], Any, float] | None = None  # the ranks on one clock, once built

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        with TabbedContent(id="tabs"):
            for i, t in enumerate(TABS):
                with TabPane(f"{i + 1} {t.title}", id=t.id):
                    yield t.pane()
        yield Loading(id="loading")  # alone while loading; a line under the Overview drawn from the cache
        yield KeyBar(LOADING_HINT, id="keybar")

    def on_mount(self) -> None:
        self.query_one("#tabs").display = False
        if self.session is not None:
            self.show_session(self.session)
        elif self.document is not None:
            self.show_document(self.document)
            # The analysis after the first frame: its thread would hold the interpreter while the frame is drawn.
            self.call_after_refresh(self._start_daemon, self.load)
        else:
            self._start_daemon(self.load)

    # -- loading (worker thread: never touches widgets) ---------------------------------------------

    def load(self) -> None:
        progress = self._throttled_progress
        try:
            if self.loader is not None:
                session = self.loader(progress)
            else:
                session = build_session(
                    self.path, None, self.rules, self.peak_tflops, progress, self.step_range, ledger=self.ledger
                )
        except Exception as e:  # bad input (2) or a bug (1): the one line the plain CLI prints
            if isinstance(e, BadInput) or not self._leaving:  # widgets vanish when the user quit: not ours
                message, code = describe(e)
                if isinstance(e, MemoryError):
                    message = "out of memory while reading the trace"
                elif not isinstance(e, TrainscopeError) and code == 1:
                    message = f"internal error: {type(e).__name__}: {e} (please report it)"
                self._post(self.exit, code, code, f"trainscope: {visible(message)}")
            return
        self._post(self.show_session, session)

    def run_deep(self) -> None:
        """HTA on the report's main rank, in a daemon thread; the result goes to the Deep tab and the report."""
        s = self.loaded

        def progress(stage: str, fraction: float | None) -> None:  # the DOM is read on the UI thread
            self._post(lambda: self.query_one(DeepPane).running(stage))

        result: dict[str, Any]
        try:
            result = deep_analysis(s.report, self.deep_step, progress)
        except DeepUnavailable as e:
            result = {"status": "skipped", "reason": str(e), "unavailable": True}
        except Exception as e:  # HTA is a second opinion: its failure never takes the app down
            result = {"status": "skipped", "reason": f"{type(e).__name__}: {e}", "unavailable": True}
        self._post(self._show_deep, result)

    def _show_deep(self, result: dict[str, Any]) -> None:
        self.loaded.deep = None if result.get("unavailable") else result
        self.query_one(DeepPane).show(result)
        if self.report_path:
            self._write_report(self.report_path)

    # -- showing ------------------------------------------------------------------------------------

    @property
    def previewing(self) -> bool:
        """The Overview is drawn from the cached document and the session is still loading."""
        return self.session is None and self.document is not None

    def show_document(self, doc: dict[str, Any]) -> None:
        """The first screen from the cached document: the Overview alone (which other tabs apply is
        the session's to say), the loading stage and bar on one line under it."""
        tabs = self.query_one("#tabs", TabbedContent)
        tabs.query_one("ContentTabs").display = False
        tabs.display = True
        self.query_one(Overview).show_document(doc)
        self.query_one("#loading", Loading).add_class("behind")
        self.query_one("#keybar", KeyBar).update(PREVIEW_HINT)
        self.query_one(Overview).focus()

    def _still_loading(self, what: str) -> bool:
        """While the Overview is drawn from the cache: say that ``what`` comes with the analysis (True)."""
        if not self.previewing:
            return False
        self.notify(f"Still loading: {what} when the analysis is done.", timeout=4, markup=False)
        return True

    def show_session(self, session: Session) -> None:
        if self.decorate is not None:
            session.decorate = self.decorate
        self.session = session
        self.query_one("#loading").display = False
        tabs = self.query_one("#tabs", TabbedContent)
        tabs.query_one("ContentTabs").display = True
        tabs.display = True
        if self.deep:
            self.query_one(DeepPane).running("starting Holistic Trace Analysis")
            self._start_daemon(self.run_deep)
        if self.report_path and not self.deep:  # with --deep, written when HTA is done
            self._write_report(self.report_path)
        self.set_reactive(AnalyzeApp.rank_index, session.main_rank)
        self._show_rank()
        self.query_one("#keybar", KeyBar).update(TABS[0].hint)

    @property
    def loaded(self) -> Session:
        """The session, once it has arrived (the tabs, and what they show, come only then)."""
        if self.session is None:
            raise RuntimeError("the analysis has not arrived yet")
        return self.session

    @property
    def rank(self) -> RankView:
        """The chosen rank's view models (asked only once the session has arrived)."""
        return self.loaded.ranks[self.rank_index]

    def watch_rank_index(self) -> None:
        if self.session is not None:
            self._prepare_rank()

    @work(thread=True, exclusive=True, group="rank")
    def _prepare_rank(self) -> None:
        rank = self.rank
        _ = rank.timeline, rank.all_kernels, rank.memory  # the expensive parts, off the UI thread
        self.call_from_thread(self._show_rank)

    def _show_rank(self) -> None:
        rank = self.rank
        s = self.loaded
        tabs = self.query_one("#tabs", TabbedContent)
        for t in TABS:
            why_not = t.applies(self)
            (tabs.show_tab if why_not is None else tabs.hide_tab)(t.id)
            if why_not is None:
                t.show(self)
        label = rank.label if len(s.ranks) > 1 else ""
        if self._late_target is not None:
            self._find_late()
        self.sub_title = os.path.basename(self.path.rstrip("/")) + (f" · {label} of {len(s.ranks)}" if label else "")

    # -- actions ------------------------------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        if not tabs.display or (tab != "overview" and self._still_loading(f"the {tab_of(tab).title} tab opens")):
            return
        why_not = tab_of(tab).applies(self) if self.session is not None else None
        if why_not is not None:
            self.notify(f"No {tab_of(tab).title} tab: {why_not}.", severity="warning", timeout=4, markup=False)
            return
        tabs.active = tab
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        target = tab_of(tab).focus
        if target:
            self.query_one(target).focus()
        else:
            # A tab with nothing to focus: drop the focus rather than leave it in the hidden pane.
            # Left there, the focused table pulls its pane back to the front (TabbedContent follows
            # focus), so number keys pressed on Kernels or Fixes flickered and stayed.
            self.set_focus(None)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.session is None:  # TabbedContent activates its first tab at mount, while loading
            return
        assert event.pane.id is not None  # compose gives every pane its tab's id
        self._focus_tab(event.pane.id)
        self.query_one("#keybar", KeyBar).update(tab_of(event.pane.id).hint, layout=False)  # one row, always

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(help_screen())

    def palette_skip(self, action: str) -> bool:
        """A ``show_tab`` action for a tab that is off for this input (the palette does not offer it)."""
        if not action.startswith("show_tab(") or self.session is None:
            return False
        return tab_of(action[len("show_tab('") : -2]).applies(self) is not None

    def _stem(self) -> str:
        stem = os.path.basename(self.path.rstrip("/"))
        for ext in (".gz", ".json", ".trace", ".pt"):
            stem = stem[: -len(ext)] if stem.endswith(ext) else stem
        return stem

    def action_export(self) -> None:
        if self._still_loading("the report can be exported") or self.session is None:
            return
        if self.report_path:
            self._write_report(self.report_path)
        else:
            d = writer(FILE_DEFAULT)  # a name in the current directory, in the default report format
            ask_path(self, f"{self._stem()}.trainscope{d.suffixes[0]}", f"{d.label} report", self._write_report)

    def action_perfetto(self) -> None:
        """The trace with the findings as tracks, for ui.perfetto.dev (written in a background thread)."""
        if self._still_loading("the trace can be exported") or self.session is None:
            return
        ask_path(self, f"{self._stem()}.perfetto.json", "Perfetto trace", self._write_perfetto)

    def _write_perfetto(self, path: str) -> None:
        """The same file as ``--perfetto`` (trainscope.api.export_perfetto, on the whole report: every
        rank of a directory, whichever rank is selected)."""
        report = self.session.report if self.session is not None else None
        if report is None:
            return
        self.notify(f"writing the Perfetto trace to\n{self._fit_path(path)}…", timeout=3, markup=False)

        def work() -> None:
            try:
                export_perfetto(report, path)
            except OSError as e:
                why = e.strerror or str(e)
                self._post(self._failed, f"cannot write\n{self._fit_path(path)}\n{why}")
                return
            except TrainscopeError as e:
                self._post(self._failed, f"cannot export: {describe(e)[0]}")
                return
            self._post(self._written, path, "Perfetto trace (open it in ui.perfetto.dev)")

        threading.Thread(target=work, daemon=True, name="trainscope-perfetto").start()

    def _fit_path(self, path: str) -> str:
        """``path`` on one line of a notification: whole where it fits, else its middle elided (a path
        wrapped mid-word reads as two names)."""
        width = max(
            16, min(60, self.size.width // 2) - 4
        )  # a toast: 60 cells, at most half the screen, less padding and border
        return elide_middle(path, width)

    def _failed(self, message: str) -> None:
        self.notify(message, severity="error", timeout=6, markup=False)

    def _written(self, path: str, what: str) -> None:
        self.exported.append(path)
        self.notify(f"{what} written to\n{self._fit_path(path)}", timeout=6, markup=False)

    def _write_report(self, path: str) -> None:
        """The report in the format the file name says (reports/formats.py), with the sections the
        app's caller added (``decorate``)."""
        s = self.loaded
        try:
            w, _named = formats.write(path, s.report.output(s.document()))
        except OSError as e:
            self._failed(f"cannot write {path}: {e.strerror or e}")
            return
        self._written(os.path.abspath(path), f"{w.label} report")

    def on_steps_pane_open(self, message: StepsPane.Open) -> None:
        self.query_one("#tabs", TabbedContent).active = "timeline"
        self.query_one(TimelinePane).view.show_step(message.index)
        self.query_one("TimelineView").focus()

    def _timeline(self) -> TimelineView | None:
        if tab_of("timeline").applies(self) is not None:
            return None
        self.query_one("#tabs", TabbedContent).active = "timeline"
        view = self.query_one(TimelineView)
        view.focus()
        return view

    def on_kernels_pane_open(self, message: KernelsPane.Open) -> None:
        view = self._timeline()
        if view is not None and view.model is not None:  # after the tab is laid out: the view's width sets the window
            self.call_after_refresh(view.set_matches, view.model.instances(message.name), "instance")

    def on_fixes_pane_open(self, message: FixesPane.Open) -> None:
        view = self._timeline()
        if view is None or view.model is None:
            return
        step, match = view.model.evidence(message.finding)
        if match is not None:
            self.call_after_refresh(view.set_matches, [match], f"evidence of {message.finding}")
        elif step is not None:
            self.call_after_refresh(view.show_step, step)
            self.notify("This finding has no interval of its own: showing the worst step.", timeout=4)

    def on_tree_pane_open(self, message: TreePane.Open) -> None:
        """Enter on a node of the Tree tab: its longest range in the steps on the timeline."""
        if message.match is None:
            self.notify(f"{message.what}: no range of its own to show.", severity="warning", timeout=4, markup=False)
            return
        view = self._timeline()
        if view is not None:
            self.call_after_refresh(view.set_matches, [message.match], message.what)

    def on_ranks_pane_choose(self, message: RanksPane.Choose) -> None:
        """Enter on a rank: that rank everywhere, and its latest-arriving collective on the timeline."""
        self._late_target = message.index
        if message.index == self.rank_index:
            self._find_late()
        else:
            self.rank_index = message.index  # _show_rank then finds the collective

    def action_side_by_side(self) -> None:
        """The timeline's ranks mode: every rank on one clock (the Ranks tab's side-by-side lanes)."""
        if self._still_loading("the ranks can be put side by side") or self.session is None:
            return
        if len(self.session.ranks) < 2:
            self.notify(
                "One rank only: open a directory of per-rank traces to see ranks side by side.",
                severity="warning",
                timeout=4,
            )
            return
        self.query_one("#tabs", TabbedContent).active = "ranks"
        # after the tab's activation, which focuses the ranks table
        self.call_after_refresh(lambda: self.query_one("#ranks-timeline").focus())

    @work(thread=True, exclusive=True, group="side")
    def prepare_side_by_side(self) -> None:
        """The ranks on one clock (read and modelled off the UI thread, once): the rank story's headline
        rank and the latest ranks first, at most ``MAX_RANKS`` lane groups."""
        if self._side is not None:
            self.call_from_thread(self.query_one(RanksPane).show_side, *self._side)
            return
        s = self.loaded
        report = s.report
        try:
            n = len(s.ranks)
            side_by_side: Callable[[], Any] = report.side_by_side  # unannotated there: a ranks.lanes.SideBySide
            sb = side_by_side()
            story = sb.story  # the headline rank and the latest ranks of the rank story first
            late = {r.index: r.mean_late_ms for r in story.ranks} if story is not None else {}
            head = story.headline_index if story is not None else -1
            slow = sorted(
                range(n), key=lambda i: (i != head, -late.get(i, 0.0), -report.ranks[i].breakdown.step_ms.p50)
            )[:MAX_RANKS]
            chosen = sorted(slow, key=lambda i: (report.ranks[i].rank is None, report.ranks[i].rank, i))
            origins = {i: report.trace(i).origin_ns for i in chosen}
            origin = min(origins[i] - (sb.offsets_ns[i] or 0.0) for i in chosen)
            lanes = [
                RankLanes(s.ranks[i].label, i, s.ranks[i].timeline, origins[i] - (sb.offsets_ns[i] or 0.0) - origin)
                for i in chosen
            ]
        except Exception as e:  # a view that cannot be built never takes the app down
            self.call_from_thread(
                self.notify,
                f"cannot put the ranks side by side: {type(e).__name__}: {e}",
                severity="error",
                timeout=6,
                markup=False,
            )
            return
        self._side = (lanes, sb, origin)
        self.call_from_thread(self.query_one(RanksPane).show_side, lanes, sb, origin)

    @work(thread=True, exclusive=True, group="late")
    def _find_late(self) -> None:
        if self._late is None:  # every rank's, once (collectives matched across ranks)
            try:
                self._late = self.loaded.report.latest_arrivals()
            except Exception as e:  # a jump that cannot be computed never takes the app down
                self._late = [None] * len(self.loaded.ranks)
                self.call_from_thread(
                    self.notify,
                    f"cannot match the ranks' collectives: {type(e).__name__}: {e}",
                    severity="error",
                    timeout=6,
                    markup=False,
                )
        self.call_from_thread(self._show_late)

    def _show_late(self) -> None:
        index, self._late_target = self._late_target, None
        if index is None or index != self.rank_index or self._late is None:
            return
        late = self._late[index] if index < len(self._late) else None
        if late is None:
            self.notify(
                f"{self.rank.label}: no collective matched on another rank.",
                severity="warning",
                timeout=4,
                markup=False,
            )
            return
        view = self._timeline()
        if view is None:
            return
        origin = self.rank.trace.origin_ns
        match = Match(
            late.start_ns - origin,
            late.end_ns - origin,
            "gpu" if late.on_gpu else "host",
            f"{late.kind} (mean {late.mean_late_ms:.1f} ms late)",
        )
        # The figure leads the title (the collective's name follows it and is what a narrow window cuts).
        self.call_after_refresh(
            view.set_matches, [match], f"{self.rank.label} arrived {late.late_ms:.1f} ms after the first rank"
        )

    def on_key(self, event: Key) -> None:
        # Esc in an input returns to what it searches rather than doing nothing.
        if event.key == "escape" and isinstance(self.focused, Input):
            if self.focused.id == "tl-search":
                self.query_one(TimelinePane).close_search()
            else:
                self.query_one("#kernels-table", DataTable).focus()
