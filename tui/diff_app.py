"""``trainscope diff BEFORE AFTER`` in a terminal: the two runs side by side.

Reading and analyzing both inputs runs in a worker thread that never touches widgets; it hands
the finished :class:`RunDiff` (and the gate's result) to the UI thread, and every tab is a thin
view over them (:mod:`trainscope.tui.diff_panes`). With ``--fail-if-slower`` the app's exit code
is the gate's, so a person can look at a regression and CI semantics stay the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Header
from textual.widgets import Static
from textual.widgets import TabbedContent
from textual.widgets import TabPane

from trainscope.analyzers.compare.diff import GateResult
from trainscope.analyzers.compare.diff import RunDiff
from trainscope.analyzers.rules import Rules
from trainscope.api import comparison
from trainscope.api.comparison import DiffResult

# As `trainscope diff` without the app; interrupted: quit before a requested gate could be checked
# (never a silent pass).
from trainscope.api.errors import EXIT_INTERRUPTED
from trainscope.api.errors import EXIT_REGRESSION
from trainscope.api.errors import BadInput
from trainscope.api.errors import TrainscopeError
from trainscope.api.errors import describe
from trainscope.reports import formats
from trainscope.reports.formats import FILE_DEFAULT
from trainscope.reports.formats import writer
from trainscope.traces.safe_text import visible
from trainscope.tui.chrome import BackgroundLoading
from trainscope.tui.chrome import HelpScreen
from trainscope.tui.chrome import KeyBar
from trainscope.tui.chrome import Loading
from trainscope.tui.chrome import Palette
from trainscope.tui.chrome import keys_text
from trainscope.tui.diff_panes import DiffBreakdown
from trainscope.tui.diff_panes import DiffSummary
from trainscope.tui.diff_panes import FixOutcomes
from trainscope.tui.diff_panes import KernelDiffPane
from trainscope.tui.diff_panes import base_name
from trainscope.tui.keys import bind
from trainscope.tui.keys import common_bindings

TABS = ("summary", "breakdown", "kernels", "fixes")

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "anywhere",
        [
            ("1 … 4", "summary · breakdown · kernels · earlier fixes"),
            ("tab / shift+tab", "move focus"),
            ("e", "export the Markdown diff report (same as --report)"),
            ("t", "toggle dark / light theme"),
            ("ctrl+p", "command palette: every action by name"),
            ("?", "this help (Esc closes)"),
            ("q / ctrl+c", "quit (with --fail-if-slower: exit code 3 on a regression, else 0)"),
        ],
    ),
    (
        "kernels",
        [
            ("a / g / - / n / d", "show all · grew · shrank · new (appeared) · gone (disappeared)  (+ = g)"),
            ("f", "next filter"),
            ("s / click a header", "sort by the next column / by that column (again: reverse)"),
            ("r", "reverse the sort"),
            ("↑ / ↓", "choose a row: its kernel names before and after show below"),
        ],
    ),
    (
        "summary · breakdown · fixes",
        [
            ("↑ / ↓, page up / down", "scroll"),
        ],
    ),
]

HINTS = {
    "summary": "1–4 tabs · e export report · t theme · ctrl+p commands · ? every key · q quit",
    "breakdown": "1–4 tabs · ↑/↓ scroll · e export · ? keys · q quit",
    "kernels": "a/g/-/n/d all/grew/shrank/new/gone · s sort · r reverse · ? keys · q quit",
    "fixes": "1–4 tabs · ↑/↓ scroll · e export · ? keys · q quit",
    "loading": "q quit",
}


MATCH_KINDS = (
    "  exact   the same kernel name\n"
    "  arch    the same name without GPU-architecture tokens (volta_ → ampere_, sm80, cutlass_80_)\n"
    "  family  the same name once numbers (tile sizes, template parameters) are also ignored\n"
    "  new     only in AFTER · gone: only in BEFORE\n"
)


def help_screen() -> HelpScreen:
    text = keys_text("trainscope diff", KEYS, key_width=24)
    text.append("\nmatch kinds\n", style="bold underline")
    text.append(MATCH_KINDS)
    return HelpScreen(text)


Progress = Callable[[str, "float | None"], None]
DiffLoader = Callable[[Progress], "tuple[RunDiff, GateResult | None]"]


def report_name(before: str, after: str) -> str:
    """Where ``e`` writes when no --report was given: both inputs in the name, in the current directory."""

    def stem(path: str) -> str:
        s = base_name(path)
        for ext in (".gz", ".json", ".trace", ".pt", ".sqlite"):
            s = s[: -len(ext)] if s.endswith(ext) else s
        return s

    return f"{stem(before)}-vs-{stem(after)}.trainscope-diff{writer(FILE_DEFAULT).suffixes[0]}"


class DiffApp(Palette, BackgroundLoading, App[int]):
    TITLE = "trainscope diff"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        *common_bindings(),
        bind("export", "export the Markdown diff report"),
        *[Binding(str(i + 1), f"show_tab('{t}')", f"show the {t} tab", show=False) for i, t in enumerate(TABS)],
    ]

    def __init__(
        self,
        before: str,
        after: str,
        *,
        diff: RunDiff | None = None,
        gate: GateResult | None = None,
        loader: DiffLoader | None = None,
        rules: Rules | None = None,
        metric: str = "step_p50",
        fail_if_slower: float | None = None,
        report_path: str | None = None,
    ) -> None:
        super().__init__()
        self.before_path, self.after_path = before, after
        self.diff = diff
        self.gate = gate
        self.loader = loader
        self.rules = rules or Rules()
        self.metric = metric
        self.fail_if_slower = fail_if_slower
        self.report_path = report_path
        self.sub_title = f"{base_name(before)} → {base_name(after)}"
        self.exported: list[str] = []
        self.error: str | None = None  # bad input: the one line `trainscope diff` prints without the app

    @property
    def gate_requested(self) -> bool:
        return self.fail_if_slower is not None or self.gate is not None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Loading(id="loading")
        with TabbedContent(id="tabs"):
            with TabPane("1 Summary", id="summary"):
                yield DiffSummary()
            with TabPane("2 Breakdown", id="breakdown"):
                yield DiffBreakdown()
            with TabPane("3 Kernels", id="kernels"):
                yield KernelDiffPane()
            with TabPane("4 Earlier fixes", id="fixes"):
                yield FixOutcomes()
        yield KeyBar(HINTS["loading"], id="keybar")

    def on_mount(self) -> None:
        self.query_one("#tabs").display = False
        if self.diff is not None:
            if self.gate is None and self.fail_if_slower is not None:
                self.gate = comparison.gate(self.diff, self.metric, self.fail_if_slower).gate
            self.show_diff(self.diff, self.gate)
        else:
            self.query_one("#loading-stage", Static).update("reading BEFORE…")
            self._start_daemon(self.load)

    # -- loading (daemon thread: never touches widgets) ---------------------------------------------

    def load(self) -> None:
        progress = self._throttled_progress
        try:
            if self.loader is not None:
                diff, gate = self.loader(progress)
            else:
                r = comparison.diff(
                    self.before_path,
                    self.after_path,
                    rules=self.rules,
                    metric=self.metric,
                    fail_if_slower=self.fail_if_slower,
                    progress=progress,
                )
                if not isinstance(r.diff, RunDiff):  # a stored run: compared by its summary, never in the app
                    raise BadInput("the diff app compares two traces; compare a stored run with --no-tui")
                diff, gate = r.diff, r.gate
        except Exception as e:
            # The caller prints it after the app closes: Textual's exit message would be wrapped at 80 columns.
            if isinstance(e, BadInput) or not self._leaving:  # a bug while the user quits is not ours
                message, code = describe(e)
                if isinstance(e, MemoryError):
                    message = "out of memory while reading the runs"
                elif not isinstance(e, TrainscopeError) and code == 1:
                    message = f"internal error: {type(e).__name__}: {e} (please report it)"
                self.error = f"trainscope: {visible(message)}"  # a path or a name from a trace: shown, inert
                self._post(self.exit, code, code)
            return
        self._post(self.show_diff, diff, gate)

    # -- showing ------------------------------------------------------------------------------------

    def show_diff(self, diff: RunDiff, gate: GateResult | None) -> None:
        self.diff, self.gate = diff, gate
        self.query_one("#loading").display = False
        self.query_one("#tabs").display = True
        self.query_one(DiffSummary).show(diff, gate, self.gate_requested)
        self.query_one(DiffBreakdown).show(diff)
        self.query_one(KernelDiffPane).show(diff)
        self.query_one(FixOutcomes).show(diff)
        if self.report_path:
            self._write_report(self.report_path)
        self.query_one("#keybar", KeyBar).update(HINTS["summary"])

    def document(self) -> dict[str, Any]:
        if self.diff is None:
            raise RuntimeError("the runs have not been compared yet")
        return DiffResult(self.diff, self.gate).to_dict()

    # -- actions ------------------------------------------------------------------------------------

    def exit_code(self) -> int:
        """The gate's code once it ran; interrupted when a requested gate never ran; else 0."""
        if self.gate is not None:  # refused (runs not comparable): 2, as without the app
            return 2 if self.gate.refused else EXIT_REGRESSION if self.gate.regressed else 0
        return EXIT_INTERRUPTED if self.fail_if_slower is not None else 0

    async def action_quit(self) -> None:
        code = self.exit_code()
        self.exit(code, code)

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        if not tabs.display:
            return
        tabs.active = tab
        self._focus_tab(tab)

    def _focus_tab(self, tab: str) -> None:
        target = {
            "summary": "DiffSummary",
            "breakdown": "DiffBreakdown",
            "kernels": "#kd-table",
            "fixes": "FixOutcomes",
        }[tab]
        self.query_one(target).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if self.diff is None:  # TabbedContent activates its first tab at mount, while loading
            return
        assert event.pane.id is not None  # compose gives every pane its tab's id
        self._focus_tab(event.pane.id)
        self.query_one("#keybar", KeyBar).update(HINTS.get(event.pane.id, ""))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(help_screen())

    def action_export(self) -> None:
        if self.diff is None:
            return
        self._write_report(self.report_path or report_name(self.before_path, self.after_path))

    def _write_report(self, path: str) -> None:
        """The report in the format the file name says (reports/formats.py)."""
        if self.diff is None:  # written only once the diff is shown
            return
        try:
            formats.write(path, DiffResult(self.diff, self.gate, rules=self.rules).output())
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror or e}", severity="error", timeout=6, markup=False)
            return
        self.exported.append(path)
        self.notify(f"Diff report written to {path}", timeout=4, markup=False)
