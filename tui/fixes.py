"""Fixes: each recommendation with its evidence, the concrete change and its projected effect;
what-if toggles recompute the projected step time with the chosen fixes assumed."""

from __future__ import annotations

from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets import Static

from trainscope.analyzers.trace.analysis import Analysis
from trainscope.analyzers.trace.whatif import Projection
from trainscope.api.analysis import whatif as project
from trainscope.api.analysis import whatif_levers as levers
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import Recommendation
from trainscope.reports.document import gain_words
from trainscope.traces.safe_text import visible
from trainscope.tui.keys import bind
from trainscope.tui.overview import evidence_line


class FixesPane(Vertical):
    DEFAULT_CSS = """
    FixesPane #whatif { height: auto; padding: 0 1; border: round $warning 60%; }
    FixesPane DataTable { height: auto; max-height: 8; }
    FixesPane #fix-detail { height: 1fr; padding: 0 1; }
    """
    BINDINGS = [
        Binding("space", "toggle_fix", "toggle what-if"),
        Binding("c", "clear", "clear what-ifs", show=False),
        bind("copy", "copy the fix's change", action="copy_change"),
    ]

    assumed: reactive[frozenset[str]] = reactive(frozenset())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.analysis: Analysis | None = None
        self.doc: AnalysisDocument | None = None
        self.projection: Projection | None = None
        self.detail_plain = ""  # the details shown, as plain text
        self._detail_for: tuple[int, int] | None = None  # (document, row) the details show
        self._filled_for: int | None = None  # the document the table's rows were added for

    def compose(self) -> ComposeResult:
        yield Static("", id="whatif", markup=False)
        yield DataTable(id="fixes-table", cursor_type="row")
        with VerticalScroll(id="fix-detail"):
            yield Static("", id="fix-text", markup=False)

    def show(self, analysis: Analysis, doc: AnalysisDocument | dict[str, Any]) -> None:
        self.analysis, self.doc = analysis, AnalysisDocument.of(doc)
        self.set_reactive(FixesPane.assumed, frozenset())
        self._fill_table()
        self._update_projection()
        self._show_detail(0)

    # -- table and details ----------------------------------------------------------------------

    def _fill_table(self) -> None:
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear(columns=True)
        fix_w = self._fix_width()
        self._shown_fix_w = fix_w
        table.add_column("what-if", width=7, key="whatif")
        table.add_column("#", width=2)
        table.add_column("projected", width=13)
        table.add_column("fix", width=fix_w)
        self._filled_for = id(self.doc)
        for r in self._recs():
            box = self._box(r)
            once = r.once_per_process_s
            gain = (
                f"≤ {r.projected_speedup:.2f}×"
                if r.projected_speedup
                else (f"{once:,.2f} s once" if once is not None else "no projection")
            )
            title = visible(r.title)
            table.add_row(
                box, str(r.rank), gain, Text(title if len(title) <= fix_w else title[: fix_w - 1] + "…"), key=r.id
            )
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))

    def _recs(self) -> list[Recommendation]:
        return self.doc.recommendations if self.doc else []

    def _box(self, r: Recommendation) -> Text:
        lv = levers(self.analysis) if self.analysis else {}
        return Text(("[x]" if r.id in self.assumed else "[ ]") if r.id in lv else " — ")

    def _fix_width(self) -> int:
        """The title takes what the other columns leave (its full text is in the details below)."""
        return max(20, self.size.width - (7 + 2 + 13) - 3 * 2 - 2 - 2)

    def on_resize(self) -> None:
        if self.doc is not None and self._fix_width() != getattr(self, "_shown_fix_w", None):
            self._fill_table()

    def _show_detail(self, index: int) -> None:
        if (id(self.doc), index) == self._detail_for:  # already shown (a refill re-highlights the same row)
            return
        self._detail_for = (id(self.doc), index)
        recs = self._recs()
        holder = self.query_one("#fix-text", Static)
        if not recs:
            axis = self.doc.verdict.axis if self.doc else ""
            holder.update(
                "No fixes: "
                + (
                    "the evidence is too thin for a verdict."
                    if axis == "insufficient_evidence"
                    else "no finding crosses its threshold."
                )
            )
            return
        r = recs[max(0, min(index, len(recs) - 1))]
        finding = self.doc.finding(r.finding) if self.doc else None
        head = Text()
        head.append(f"{r.rank}. {r.title}\n", style="bold")
        if finding:
            head.append(f"because {finding.title} ({finding.severity}, {finding.stake_pct:.1f} % of step time)\n")
            for e in finding.evidence:
                head.append_text(evidence_line(e, "  "))
                head.append("\n")
        head.append("change:", style="bold")
        proj = (
            f"up to {r.projected_speedup:.2f}× faster: step ≥ {r.projected_step_ms:.1f} ms"
            if r.projected_speedup
            else gain_words(r)  # a one-off cost's fix: seconds once per process
        )
        tail = Text()
        tail.append(f"projected: {proj}\n", style="bold")
        tail.append(f"basis: {r.basis}", style="dim")
        from rich.console import Group

        self.detail_plain = f"{head.plain}\n{r.change}\n{tail.plain}"
        # Highlight once into Text: a Syntax object would re-run the lexer on every repaint.
        code = Syntax(r.change, "python", theme="ansi_dark", background_color="default").highlight(r.change)
        code.rstrip()
        holder.update(Group(head, code, tail))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_detail(event.cursor_row)

    # -- what-if ---------------------------------------------------------------------------------

    def _update_projection(self) -> None:
        box = self.query_one("#whatif", Static)
        if self.analysis is None or not self._recs():
            box.update("What-if: no fixes to assume.")
            return
        if not levers(self.analysis):
            box.update("What-if: none of these fixes has a projection to combine.")
            return
        p = project(self.analysis, sorted(self.assumed))
        self.projection = p
        if not p.levers:
            box.update(
                Text.assemble(
                    ("What-if (projection): ", "bold"),
                    f"measured mean step {p.step_ms:.1f} ms · Space toggles a fix in the table "
                    "to assume it works as well as it possibly could",
                )
            )
            return
        lv = levers(self.analysis)
        assumed = "; ".join(lv[i].label for i in p.levers)
        box.update(
            Text.assemble(
                ("What-if (projection, upper bound): ", "bold"),
                (f"step {p.step_ms:.1f} → {p.projected_step_ms:.1f} ms ({p.speedup:.2f}× faster)", "bold"),
                f"\nassuming {assumed}\n",
                (p.basis, "dim"),
            )
        )

    def watch_assumed(self) -> None:
        if self.doc is None:
            return
        table = self.query_one(DataTable)
        if self._filled_for == id(self.doc) and table.row_count == len(self._recs()):
            # Only the check boxes change: update those cells (a refill re-rendered the table and,
            # through the re-highlighted row, the details: two frames a key).
            for r in self._recs():
                table.update_cell(r.id, "whatif", self._box(r))
        else:
            self._fill_table()
        self._update_projection()

    def action_toggle_fix(self) -> None:
        table = self.query_one(DataTable)
        if not table.row_count or self.analysis is None:
            return
        rid = self._recs()[table.cursor_row].id
        if rid not in levers(self.analysis):
            self.notify("This fix has no projection to assume.", severity="warning")
            return
        self.assumed = self.assumed ^ {rid}

    def action_copy_change(self) -> None:
        table = self.query_one(DataTable)
        recs = self._recs()
        if recs and 0 <= table.cursor_row < len(recs):
            self.app.copy_to_clipboard(recs[table.cursor_row].change)
            self.notify("copied the change", timeout=3)

    def action_clear(self) -> None:
        self.assumed = frozenset()

    class Open(Message):
        """Show the evidence of this finding on the timeline."""

        def __init__(self, finding: str, title: str) -> None:
            super().__init__()
            self.finding = finding
            self.title = title

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        recs = self._recs()
        if recs and 0 <= event.cursor_row < len(recs):
            r = recs[event.cursor_row]
            self.post_message(self.Open(r.finding, r.title))
