"""The table screens: per-step breakdown, kernels (sortable, filterable), ranks."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets import Input
from textual.widgets import Static
from textual.widgets.data_table import ColumnKey

from trainscope.analyzers.trace.kernels import KernelStat
from trainscope.analyzers.trace.kernels import KernelSummary
from trainscope.analyzers.trace.roofline import Roofline
from trainscope.analyzers.trace.roofline import RooflineRow
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import RankRow
from trainscope.reports.analysis_document import StepTime
from trainscope.reports.analysis_document import Stragglers
from trainscope.reports.deep import stragglers_text_lines
from trainscope.traces.safe_text import visible
from trainscope.tui.keys import bind
from trainscope.tui.ranks_timeline import RankLanes
from trainscope.tui.ranks_timeline import RanksTimeline
from trainscope.tui.roofline_plot import RooflinePlot
from trainscope.tui.sorting import SortedColumns
from trainscope.tui.timeline import short_name

STEP_COLUMNS = {
    "compute": "comp",
    "communication": "comm",
    "copy": "copy",
    "memset": "mset",
    "idle_data_wait": "i:data",
    "idle_sync": "i:sync",
    "idle_host_overhead": "i:launch",
    "idle_other": "i:other",
}
# Idle by reason first: on a narrow terminal the columns that explain a slow step stay in view.
STEP_ORDER = (
    "idle_data_wait",
    "idle_sync",
    "idle_host_overhead",
    "idle_other",
    "compute",
    "communication",
    "copy",
    "memset",
)


def short_step(label: str) -> str:
    """ "ProfilerStep#10" → "#10" (the table's title says they are steps)."""
    head, _, n = label.rpartition("#")
    return f"#{n}" if head and n.isdigit() else label


class RowChosen(Message):
    """A row of a table was chosen: its index among the rows the table lists."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index


class StepsPane(Vertical):
    """Every step's exclusive breakdown; outliers (longer than outlier_ratio × median) marked."""

    DEFAULT_CSS = """
    StepsPane #steps-note { height: auto; color: $text-muted; }
    StepsPane DataTable { height: 1fr; }
    """

    class Open(RowChosen):
        """Show this step on the timeline."""

    def compose(self) -> ComposeResult:
        yield Static("", id="steps-note", markup=False)
        yield DataTable(id="steps-table", cursor_type="row", zebra_stripes=True)

    def show(self, doc: AnalysisDocument | dict[str, Any], outlier_ratio: float) -> None:
        d = AnalysisDocument.of(doc)
        table = self.query_one(DataTable)
        table.clear(columns=True)
        # Numbers first, and only the categories some step has (an all-zero column explains nothing).
        cats = [c for c in STEP_ORDER if any((s.ms[c] or 0.0) >= 0.05 for s in d.steps)]
        table.add_column("step", key="step")
        table.add_column("ms", key="ms")
        table.add_column("busy%", key="busy")
        table.add_column("wait%", key="wait")
        for c in cats:
            table.add_column(STEP_COLUMNS[c], key=c)
        table.add_column("", key="flag")
        n_out = 0
        for i, s in enumerate(d.steps):
            style = "bold red" if s.outlier else ""
            n_out += s.outlier
            table.add_row(
                Text(short_step(s.label), style=style),
                Text(f"{s.duration_ms:.1f}", style=style, justify="right"),
                Text(f"{s.gpu_busy_pct:.1f}", justify="right"),
                Text(f"{s.data_wait_pct:.1f}", justify="right"),
                *[Text(f"{s.ms[c]:.1f}", justify="right") for c in cats],
                Text("⚠", style="bold red") if s.outlier else "",
                key=str(i),
            )
        st = d.breakdown.step_time_ms if d.breakdown is not None else StepTime(None, None, None)
        hidden = [STEP_COLUMNS[c] for c in STEP_ORDER if c not in cats]
        outliers = (
            f"no outliers (none > {outlier_ratio:g}× median)"
            if not n_out
            else f"⚠ {n_out} outlier{'' if n_out == 1 else 's'} > {outlier_ratio:g}× median"
        )
        n = len(d.steps)
        count = "" if str(d.steps_note or "").startswith(f"{n} step") else f"{n} steps · "
        self.query_one("#steps-note", Static).update(
            f"{count}{d.steps_note} · p50 {st.p50:.1f} ms, p95 {st.p95:.1f} ms · "
            f"{outliers} · times in ms; i: = GPU idle by reason; busy% = GPU "
            f"busy, wait% = data wait, of the step"
            + (f" · all zero, not shown: {', '.join(hidden)}" if hidden else "")
            + " · Enter: show on timeline"
        )

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Open(int(str(event.row_key.value))))


@dataclass(frozen=True)
class KernelColumn:
    key: str
    label: str
    sort_key: Callable[[KernelStat, RooflineRow | None], Any]  # (kernel, its roofline row) -> comparable
    descending: bool


# Numbers first, the name last and as wide as what is left (its full text, and the kernel's roofline
# figures — FLOP/B, TFLOP/s, GB/s, % of the roof — are in the detail below, to fit 80 columns). ``value(kernel, roofline row or None)``.
_BOUND = {"memory": "mem", "compute": "comp", "unknown": "?"}


KERNEL_COLUMNS = (
    KernelColumn("total", "total ms", lambda k, r: k.total_ns, True),
    KernelColumn("mean", "mean µs", lambda k, r: k.mean_ns, True),
    KernelColumn("share", "share", lambda k, r: k.share_pct, True),
    KernelColumn("count", "count", lambda k, r: k.count, True),
    KernelColumn("bound", "bound", lambda k, r: r.bound if r else "", False),
    KernelColumn("tc", "TC", lambda k, r: k.tensor_core, True),
    KernelColumn("class", "class", lambda k, r: k.kernel_class, False),
    KernelColumn("name", "kernel", lambda k, r: k.name.lower(), False),
)
# Each wide enough for its label and the sort arrow beside it ("mean µs▼").
NUMBER_WIDTHS = {"total": 9, "mean": 8, "share": 7, "count": 6, "bound": 6, "tc": 3, "class": 9}
NAME_MIN = 24  # the kernel column's least width before the class column gives way (the detail names it)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def filter_kernels(kernels: list[KernelStat], text: str) -> list[KernelStat]:
    """Keep kernels whose name or class contains every word of ``text`` (case-insensitive)."""
    words = text.lower().split()
    return [k for k in kernels if all(w in k.name.lower() or w in k.kernel_class for w in words)]


class KernelsPane(SortedColumns[KernelColumn], Vertical):
    """All kernels inside the steps. Click a header or press s to sort; / to filter."""

    sort_columns = KERNEL_COLUMNS  # s / r / header click (tui/sorting.py)

    DEFAULT_CSS = """
    KernelsPane #kernels-filter { height: 3; }
    KernelsPane #kernels-note { height: 2; color: $text-muted; }
    KernelsPane DataTable { height: 1fr; }
    KernelsPane #kernel-detail { height: 5; padding: 0 1; border-top: solid $panel; }
    """
    BINDINGS = [
        bind("sort", "sort by next column"),
        bind("reverse"),
        bind("search", "filter", action="focus_filter"),
        bind("copy", "copy the kernel's full name"),
        Binding("p", "toggle_plot", "roofline chart"),
    ]
    MAX_ROWS = 2000  # a DataTable of more rows is sluggish; the filter narrows the rest

    sort_column: reactive[str] = reactive("total")
    descending: reactive[bool] = reactive(True)
    filter_text: reactive[str] = reactive("")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.summary: KernelSummary | None = None
        self.shown: list[KernelStat] = []
        self.roof_rows: dict[str, RooflineRow] = {}
        self._detail_of: KernelStat | None = None  # the kernel #kernel-detail describes
        self._filled: tuple[int, str, int] | None = (
            None  # (summary, filter, name width) the table's rows were added for
        )
        self._row_kernel: dict[int, KernelStat] = {}

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter kernels by name or class (press / here, Esc to leave)", id="kernels-filter")
        yield Static("", id="kernels-note", markup=False)
        yield DataTable(id="kernels-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="kernel-detail", markup=False)
        plot = RooflinePlot(id="kernels-roofline")
        plot.display = False
        yield plot

    @property
    def selected(self) -> KernelStat | None:
        table = self.query_one(DataTable)
        return self.shown[table.cursor_row] if self.shown and 0 <= table.cursor_row < len(self.shown) else None

    def _pane_width(self) -> int:
        # Before its tab was first shown the pane has no size yet: it spans the screen.
        return self.size.width or self.app.size.width

    def _class_width(self) -> int:
        """As wide as the longest class shown (``convolution``, ``normalization``) where the screen
        leaves the name at least its 16 columns; at 80 columns the class is cut to fit."""
        longest = max((len(k.kernel_class) for k in self.summary.top), default=5) if self.summary else 5
        used = sum(w + 2 for k, w in NUMBER_WIDTHS.items() if k != "class") + 2 + 2 + 2
        return max(NUMBER_WIDTHS["class"], min(longest, self._pane_width() - used - 16))

    def _name_width(self) -> int:
        """What the number columns leave (each column has one cell of padding either side)."""
        used = sum(w + 2 for k, w in NUMBER_WIDTHS.items() if k != "class") + 2 + 2
        if self._shows_class():
            used += self._class_width() + 2
        return max(16, min(200, self._pane_width() - used))

    def _shows_class(self) -> bool:
        """The class column is shown where the kernel's name keeps NAME_MIN columns beside it (at 80
        columns it is not: the names matter more, and the detail below the table gives the class)."""
        used = sum(w + 2 for w in NUMBER_WIDTHS.values()) + 2 + 2
        return self._pane_width() - used >= NAME_MIN

    def _columns(self) -> tuple[KernelColumn, ...]:
        return tuple(c for c in KERNEL_COLUMNS if c.key != "class" or self._shows_class())

    def on_resize(self) -> None:
        if self.summary is not None and self._name_width() != getattr(self, "_shown_name_w", None):
            self.query_one(DataTable).clear(columns=True)
            self._filled = None
            self._refill()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_detail()

    def _show_detail(self) -> None:
        """The detail under the table: the highlighted kernel's (its row is :attr:`selected`)."""
        k = self.selected
        detail = self.query_one("#kernel-detail", Static)
        if k is self._detail_of:  # a refill re-highlights the same row: its detail is already shown
            return
        self._detail_of = k
        # A fixed height (5): choosing, sorting or filtering re-lays nothing out (a layout pass over the
        # kernels table cost ~25 ms a key).
        if k is None:
            detail.update("", layout=False)
            return
        r = self.roof_rows.get(k.name)
        roof = ""
        if r is not None:
            figures = [
                f"{r.intensity:.3g} FLOP/B" if r.intensity is not None else None,
                f"{r.tflops:.3g} TFLOP/s" if r.tflops is not None else None,
                f"{r.gbps:.4g} GB/s" if r.gbps is not None else None,
                f"{r.pct_of_roof:.0f} % of the roof" if r.pct_of_roof is not None else None,
            ]
            roof = (
                f"\n{r.bound}-bound"
                + "".join(f" · {x}" for x in figures if x)
                + f" · {r.precision or '?'}"
                + f" · from {r.source}"
            )
        detail.update(
            Text.assemble(
                (short_name(k.name, 10_000), "bold"),
                (
                    f"\n{k.kernel_class} · {k.count} calls · {k.total_ns / 1e6:.2f} ms in all · "
                    f"mean {k.mean_ns / 1e3:.1f} µs · {k.share_pct:.1f} % of kernel time"
                    f"{' · tensor cores' if k.tensor_core else ''} · y copies the name" + roof,
                    "dim",
                ),
            ),
            layout=False,
        )

    class Open(Message):
        """Show this kernel's instances on the timeline, longest first."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        k = self.selected
        if k is not None:
            self.post_message(self.Open(k.name))

    def action_copy_name(self) -> None:
        k = self.selected
        if k is not None:
            self.app.copy_to_clipboard(k.name)
            self.notify(f"copied: {short_name(k.name, 60)}", timeout=3, markup=False)

    def show(self, summary: KernelSummary, roof: Roofline | None = None) -> None:
        self.summary = summary
        self.roof_rows = {r.name: r for r in roof.rows} if roof is not None else {}
        self.query_one(RooflinePlot).show(roof)
        self._refill()

    def action_toggle_plot(self) -> None:
        plot = self.query_one(RooflinePlot)
        plot.display = not plot.display

    def _refill(self) -> None:
        if self.summary is None:
            return
        col, roof = self.current_column(), self.roof_rows
        rows = self.in_order(
            filter_kernels(self.summary.top, self.filter_text), lambda k: col.sort_key(k, roof.get(k.name))
        )
        self.shown = rows[: self.MAX_ROWS]
        table = self.query_one(DataTable)
        # Keep the columns (re-creating them re-measures every cell); only their labels change.
        if not table.columns:
            self._shown_name_w = self._name_width()
            self._shown_class_w = self._class_width() if self._shows_class() else 0
            self._shown_columns = self._columns()
            for c in self._shown_columns:
                width = (
                    self._shown_name_w
                    if c.key == "name"
                    else self._shown_class_w
                    if c.key == "class"
                    else NUMBER_WIDTHS[c.key]
                )
                table.add_column(c.label + "▼", key=c.key, width=width)
        for c in self._shown_columns:
            table.columns[ColumnKey(c.key)].label = Text(c.label + self.sort_mark(c.key))
        filled = (id(self.summary), self.filter_text, self._shown_name_w)
        if filled == self._filled and len(rows) <= self.MAX_ROWS and table.row_count == len(self.shown):
            # Only the order changed (s, r, a header click): reorder the rows in place. Clearing and
            # re-adding them made the table re-measure every cell (~20 ms a key on 140 kernels).
            pos = {id(k): i for i, k in enumerate(self.shown)}
            table.sort(key=lambda cells: pos[id(self._row_kernel[id(cells[0])])])
            table.move_cursor(row=0, column=0)
        else:
            table.clear()
            self._row_kernel = {}  # id of a row's first cell (kept alive by the table) → its kernel
            for i, k in enumerate(self.shown):
                r = roof.get(k.name)
                first = Text(f"{k.total_ns / 1e6:.2f}", justify="right")
                self._row_kernel[id(first)] = k
                cells = {
                    "total": first,
                    "mean": Text(f"{k.mean_ns / 1e3:.1f}", justify="right"),
                    "share": Text(f"{k.share_pct:.1f} %", justify="right"),
                    "count": Text(f"{k.count}", justify="right"),
                    "bound": _BOUND.get(r.bound, r.bound) if r else "",
                    "tc": "✔" if k.tensor_core else "",
                    "class": _cut(k.kernel_class, self._shown_class_w),
                    "name": Text(short_name(k.name, self._shown_name_w)),
                }
                table.add_row(
                    *(cells[c.key] for c in self._shown_columns),
                    key=str(i),
                )  # Text: a str cell is read as markup
            self._filled = filled
        more = f" (first {self.MAX_ROWS} shown)" if len(rows) > self.MAX_ROWS else ""
        self.query_one("#kernels-note", Static).update(
            f"{len(rows)} of {len(self.summary.top)} kernels{more} · sorted by {col.label} {self.arrow}\n"
            "s sort · r reverse · / filter · y copy name · p roofline · TC tensor cores",
            layout=False,
        )  # two rows (height: 2), each under 80 columns
        self._show_detail()

    def watch_filter_text(self) -> None:
        self._refill()

    def action_focus_filter(self) -> None:
        self.query_one(Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one(DataTable).focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))


class RanksPane(Vertical):
    """Per-rank comparison; Enter switches every screen to that rank and shows its latest-arriving
    collective on the timeline."""

    DEFAULT_CSS = """
    RanksPane #ranks-note { height: auto; color: $text-muted; }
    RanksPane DataTable { height: auto; max-height: 60%; }
    RanksPane #stragglers { height: auto; margin: 1 0 0 0; }
    RanksPane #ranks-side-title { height: auto; margin: 1 0 0 0; }
    """

    class Choose(RowChosen):
        """Show this rank on every tab."""

    def compose(self) -> ComposeResult:
        yield Static("", id="ranks-note", markup=False)
        yield DataTable(id="ranks-table", cursor_type="row", zebra_stripes=True)
        yield Static("ranks side by side: preparing…", id="ranks-side-title", markup=False)
        yield RanksTimeline(id="ranks-timeline")
        yield Static("", id="stragglers", markup=False)

    def show_side(self, ranks: list[RankLanes], sb: Any, origin_ns: float) -> None:
        """The side-by-side timeline of ``ranks`` (tui.ranks_timeline.RankLanes) on one clock."""
        view = self.query_one(RanksTimeline)
        view.show(ranks, sb, origin_ns)
        self.query_one("#ranks-side-title", Static).update(Text(view.title(), style="bold"))

    def on_ranks_timeline_moved(self) -> None:  # the title follows zoom and pan
        self.query_one("#ranks-side-title", Static).update(
            Text(self.query_one(RanksTimeline).title(), style="bold"), layout=False
        )

    def show(
        self,
        rows: list[RankRow] | list[dict[str, Any]],
        current: int,
        headline: int,
        stragglers: Stragglers | dict[str, Any] | None = None,
    ) -> None:
        ranks = [r if isinstance(r, RankRow) else RankRow.from_dict(r) for r in rows]  # the document's ranks[]
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns(
            "",
            "rank",
            "step p50 ms",
            "late ms",
            "last at",
            "verdict",
            "bottleneck",
            "conf.",
            "GPU busy",
            "data wait",
            "trace",
        )
        for i, r in enumerate(ranks):
            mark = "▶" if i == current else ""
            flag = " ◀" if r.straggler else ""  # the straggler (the note above names it)
            table.add_row(
                mark,
                str(r.rank) + flag,
                f"{r.step_p50_ms:.1f}",
                f"{r.mean_late_ms:.1f}" if r.mean_late_ms is not None else "—",
                f"{r.last_in} of {r.considered}" if r.last_in is not None else "—",
                r.axis,
                r.bottleneck or "",
                f"{r.confidence:.2f}",
                f"{r.gpu_busy_pct:.1f} %",
                f"{r.data_wait_pct:.1f} %",
                Text(visible(os.path.basename(str(r.source).rstrip("/")) or r.source)),
                key=str(i),
            )  # the file: the part of the path that differs between ranks
        story = Stragglers.of(stragglers) if stragglers else None
        lead = (story.headline if story else None) or f"the report leads with rank {ranks[headline].rank}"
        self.query_one("#ranks-note", Static).update(
            f"{len(rows)} ranks · {visible(lead)} · Enter: this rank everywhere, at its latest-arriving collective "
            "of the story"
        )
        table.move_cursor(row=current)
        if story:
            self.query_one("#stragglers", Static).update(Text("\n".join(stragglers_text_lines(story, lambda x: x))))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Choose(int(str(event.row_key.value))))
