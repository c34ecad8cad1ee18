"""``trainscope analyze`` in a terminal: the Textual app.

Parsing and analysis run in a worker thread that never touches widgets; it hands the finished
:class:`Session` to the UI thread, and every screen is a thin view over it and the chosen rank.
"""
from __future__ import annotations

import os
from typing import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.reactive import reactive
from textual.widgets import DataTable, Header, Input, TabbedContent, TabPane

from trainscope.analyzers.rules import Rules
from trainscope.reports.document import counters_only
from trainscope.tui.chrome import BackgroundLoading, HelpScreen, KeyBar, Loading, keys_text
from trainscope.tui.deep import DeepPane
from trainscope.tui.fixes import FixesPane
from trainscope.tui.memory import MemoryPane
from trainscope.tui.overview import Overview
from trainscope.tui.state import Session, build_session
from trainscope.tui.tables import KernelsPane, RanksPane, StepsPane
from trainscope.tui.timeline import TimelinePane, legend

TABS = ("overview", "timeline", "steps", "kernels", "fixes", "memory", "ranks", "deep")

# Every key, for the help screen (and the README). Kept beside the bindings it documents.
KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("anywhere", [
        ("1 … 8", "overview · timeline · steps · kernels · fixes · memory · ranks · deep (with --deep)"),
        ("tab / shift+tab", "move focus"),
        ("e", "export the Markdown report (same as --report)"),
        ("d", "toggle dark / light theme"),
        ("?", "this help (Esc closes)"),
        ("q / ctrl+c", "quit"),
    ]),
    ("timeline", [
        ("← / →", "move the cursor (shift: 8 columns); what is under it shows below"),
        ("+ / −  (i / o, mouse wheel)", "zoom in / out around the cursor"),
        ("h / l", "pan left / right by a quarter window"),
        ("n / p  (] / [)", "next / previous step"),
        ("0 or f / a", "fit the current step / the whole trace"),
        ("click", "put the cursor there"),
    ]),
    ("steps · ranks", [
        ("↑ / ↓, Enter", "choose a row; Enter opens that step on the timeline / shows that rank everywhere"),
    ]),
    ("kernels", [
        ("/", "filter by name or class (Enter or Esc returns to the table)"),
        ("s / click a header", "sort by the next column / by that column (again: reverse)"),
        ("r", "reverse the sort"),
    ]),
    ("fixes", [
        ("↑ / ↓", "choose a fix: its evidence, change and projection show below"),
        ("space / Enter", "assume the fix in the what-if projection (toggle)"),
        ("c", "clear the what-ifs"),
    ]),
]


def help_screen() -> HelpScreen:
    text = keys_text("trainscope", KEYS)
    text.append("\ntimeline colours\n", style="bold underline")
    return HelpScreen(text, legend())


# The key line (KeyBar) per tab.
HINTS = {
    "overview": "number keys: tabs · e export report · d theme · ? every key · q quit",
    "timeline": "←/→ cursor · +/− zoom · h/l pan · n/p step · f fit step · a whole trace · ? keys · q quit",
    "steps": "↑/↓ choose · Enter show on timeline · number keys: tabs · ? keys · q quit",
    "kernels": "/ filter · s sort by next column · r reverse · click a header to sort · ? keys · q quit",
    "fixes": "↑/↓ choose · space assume in the what-if · c clear · e export · ? keys · q quit",
    "memory": "number keys: tabs · e export report · ? keys · q quit",
    "ranks": "↑/↓ choose · Enter show this rank everywhere · ? keys · q quit",
    "deep": "Holistic Trace Analysis: critical path, launch statistics · e export · ? keys · q quit",
    "loading": "q quit",
}


Loader = Callable[[Callable[[str, "float | None"], None]], Session]


class AnalyzeApp(BackgroundLoading, App[int]):
    TITLE = "trainscope"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help"),
        Binding("e", "export", "export report"),
        Binding("d", "toggle_dark", "theme", show=False),
        *[Binding(str(i + 1), f"show_tab('{t}')", t, show=False) for i, t in enumerate(TABS)],
    ]

    rank_index: reactive[int] = reactive(0, init=False)

    def __init__(self, path: str, *, session: Session | None = None, loader: Loader | None = None,
                 report_path: str | None = None, rules: Rules | None = None, peak_tflops: float | None = None,
                 decorate: Callable[[dict], dict] | None = None, step_range: str | None = None,
                 deep: bool = False, deep_step: str | None = None) -> None:
        super().__init__()
        self.path = path
        self.session = session
        self.loader = loader
        self.report_path = report_path
        self.rules = rules or Rules()
        self.peak_tflops = peak_tflops
        self.step_range = step_range
        self.deep = deep  # run HTA's critical path (--deep) once the analysis is shown
        self.deep_step = deep_step
        self.decorate = decorate  # adds optional sections (e.g. the --model ledger) to the report
        self.sub_title = os.path.basename(path.rstrip("/"))
        self.exported: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Loading(id="loading")
        with TabbedContent(id="tabs"):
            with TabPane("1 Overview", id="overview"):
                yield Overview()
            with TabPane("2 Timeline", id="timeline"):
                yield TimelinePane()
            with TabPane("3 Steps", id="steps"):
                yield StepsPane()
            with TabPane("4 Kernels", id="kernels"):
                yield KernelsPane()
            with TabPane("5 Fixes", id="fixes"):
                yield FixesPane()
            with TabPane("6 Memory", id="memory"):
                yield MemoryPane()
            with TabPane("7 Ranks", id="ranks"):
                yield RanksPane()
            with TabPane("8 Deep", id="deep"):
                yield DeepPane()
        yield KeyBar(HINTS["loading"], id="keybar")

    def on_mount(self) -> None:
        self.query_one("#tabs").display = False
        if self.session is not None:
            self.show_session(self.session)
        else:
            self._start_daemon(self.load)

    # -- loading (worker thread: never touches widgets) ---------------------------------------------

    def load(self) -> None:
        from trainscope.analyzers.range_steps import StepRangeError
        from trainscope.collectors import open_traces
        from trainscope.common import input_errors, input_problem
        from trainscope.reports.safe_text import visible

        progress = self._throttled_progress
        try:
            if self.loader is not None:
                session = self.loader(progress)
            else:
                traces = open_traces(self.path, progress)
                session = build_session(self.path, traces, self.rules, self.peak_tflops, progress, self.step_range)
        except StepRangeError as e:
            self._post(self.exit, 2, 2, f"trainscope: {self.path}: --step-range: {e}")
            return
        except input_errors() as e:  # the same one line as the plain CLI
            self._post(self.exit, 2, 2, f"trainscope: {visible(input_problem(e, self.path))}")
            return
        except Exception as e:  # a bug: one line, as the plain CLI does
            if not self._leaving:  # not an error of ours when widgets vanish because the user quit
                self._post(self.exit, 1, 1, f"trainscope: internal error: {type(e).__name__}: {e} (please report it)")
            return
        self._post(self.show_session, session)

    def run_deep(self) -> None:
        """HTA on the report's main rank, in a daemon thread; the result goes to the Deep tab and the report."""
        from trainscope.analyzers.deep import HTAUnavailable, deep_analysis
        from trainscope.reports.deep import deep_dict

        s = self.session
        rank = s.ranks[s.main_rank]

        def progress(stage: str, fraction: float | None) -> None:  # the DOM is read on the UI thread
            self._post(lambda: self.query_one(DeepPane).running(stage))

        try:
            result = deep_dict(deep_analysis(rank.trace, rank.analysis, self.rules, self.deep_step, progress))
        except HTAUnavailable as e:
            result = {"status": "skipped", "reason": str(e), "unavailable": True}
        except Exception as e:  # HTA is a second opinion: its failure never takes the app down
            result = {"status": "skipped", "reason": f"{type(e).__name__}: {e}", "unavailable": True}
        self._post(self._show_deep, result)

    def _show_deep(self, result: dict) -> None:
        self.session.deep = None if result.get("unavailable") else result
        self.query_one(DeepPane).show(result)
        if self.report_path:
            self._write_report(self.report_path)

    # -- showing ------------------------------------------------------------------------------------

    def show_session(self, session: Session) -> None:
        if self.decorate is not None:
            session.decorate = self.decorate
        self.session = session
        self.query_one("#loading").display = False
        tabs = self.query_one("#tabs", TabbedContent)
        tabs.display = True
        if len(session.ranks) < 2:
            tabs.hide_tab("ranks")
        if self.deep:
            self.query_one(DeepPane).running("starting Holistic Trace Analysis")
            self._start_daemon(self.run_deep)
        else:
            tabs.hide_tab("deep")
        if self.report_path and not self.deep:  # with --deep, written when HTA is done
            self._write_report(self.report_path)
        self.set_reactive(AnalyzeApp.rank_index, session.main_rank)
        self._show_rank()
        self.query_one("#keybar", KeyBar).update(HINTS["overview"])

    @property
    def rank(self):
        return self.session.ranks[self.rank_index] if self.session else None

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
        s = self.session
        doc = rank.doc
        self.query_one(Overview).show(doc)
        median = _median_step(rank)
        self.query_one(TimelinePane).set_model(rank.timeline, median)
        self.query_one(StepsPane).show(doc, self.rules.value("step.outlier_ratio"))
        self.query_one(KernelsPane).show(rank.all_kernels)
        self.query_one(FixesPane).show(rank.analysis, doc)
        tabs = self.query_one("#tabs", TabbedContent)
        for tab in ("timeline", "steps", "kernels"):  # sampled counters have no events to draw
            (tabs.hide_tab if counters_only(doc) else tabs.show_tab)(tab)
        ledger = s.document().get("ledger") if s.decorate else None
        if rank.memory or ledger:
            tabs.show_tab("memory")
            self.query_one(MemoryPane).show(rank.memory, rank.timeline.span, ledger)
        else:
            tabs.hide_tab("memory")
        if len(s.ranks) > 1:
            rows = s.document()["ranks"]
            self.query_one(RanksPane).show(rows, self.rank_index, s.main_rank, s.stragglers)
        label = rank.label if len(s.ranks) > 1 else ""
        self.sub_title = os.path.basename(self.path.rstrip("/")) + (f" · {label} of {len(s.ranks)}" if label else "")

    # -- actions ------------------------------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        if not tabs.display:
            return
        pane = tabs.get_tab(tab)
        if pane.display is False:
            self.notify(f"No {tab} tab for this trace.", severity="warning", timeout=3)
            return
        tabs.active = tab
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        target = {"timeline": "TimelineView", "steps": "#steps-table", "kernels": "#kernels-table",
                  "fixes": "#fixes-table", "ranks": "#ranks-table"}.get(tab)
        if target:
            self.query_one(target).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.session is None:  # TabbedContent activates its first tab at mount, while loading
            return
        self._focus_tab(event.pane.id)
        self.query_one("#keybar", KeyBar).update(HINTS.get(event.pane.id, ""))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(help_screen())

    def action_export(self) -> None:
        if self.session is None:
            return
        stem = os.path.basename(self.path.rstrip("/"))
        for ext in (".gz", ".json", ".trace", ".pt"):
            stem = stem[: -len(ext)] if stem.endswith(ext) else stem
        self._write_report(self.report_path or f"{stem}.trainscope.md")

    def _write_report(self, path: str) -> None:
        from trainscope.common import write_atomic
        from trainscope.reports.markdown import render_markdown
        from trainscope.reports.safe_text import safe_strings

        try:
            write_atomic(path, render_markdown(safe_strings(self.session.document())))
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror or e}", severity="error", timeout=6)
            return
        self.exported.append(path)
        self.notify(f"Report written to {path}", timeout=4)

    def on_steps_pane_open(self, message: StepsPane.Open) -> None:
        self.query_one("#tabs", TabbedContent).active = "timeline"
        self.query_one(TimelinePane).view.show_step(message.index)
        self.query_one("TimelineView").focus()

    def on_ranks_pane_choose(self, message: RanksPane.Choose) -> None:
        self.rank_index = message.index

    def on_key(self, event) -> None:
        # Esc in the kernel filter returns to the table rather than doing nothing.
        if event.key == "escape" and isinstance(self.focused, Input):
            self.query_one("#kernels-table", DataTable).focus()


def _median_step(rank) -> int:
    steps = rank.analysis.breakdown.steps
    if not steps:
        return 0
    order = sorted(range(len(steps)), key=lambda i: steps[i].duration_ns)
    return order[len(order) // 2]
