"""``trainscope memory SNAPSHOT`` in a terminal: allocated memory over the recorded allocator events,
a marker on the peak, and every allocation live at the peak (largest first) with its full stack.

The snapshot is read and replayed in a daemon thread that never touches widgets; the app renders
the :class:`~trainscope.analyzers.snapshot.peak.MemoryPeak` it hands over and computes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import App
from textual.app import ComposeResult
from textual.app import SystemCommand
from textual.containers import Vertical
from textual.containers import VerticalScroll
from textual.events import Key
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets import Header
from textual.widgets import Input
from textual.widgets import Static
from textual.widgets.data_table import ColumnKey

from trainscope.analyzers.snapshot.peak import MemoryPeak
from trainscope.analyzers.snapshot.peak import PeakAllocation
from trainscope.api.errors import BadInput
from trainscope.api.errors import describe
from trainscope.api.memory_report import MemoryReport
from trainscope.api.memory_report import memory
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
from trainscope.tui.keys import bind
from trainscope.tui.keys import binding_rows
from trainscope.tui.keys import common_bindings
from trainscope.tui.keys import palette_commands
from trainscope.tui.sorting import SortedColumns

BLOCKS = " ▁▂▃▄▅▆▇█"
BAR = "#3d7fd9"
PEAK = "#e0443e"
HINT = "/ filter · s sort · r reverse · y copy · e export · t theme · ? keys · q quit"


def size_text(b: int) -> str:
    """Bytes in the unit that keeps 3–4 digits (GiB, MiB, KiB: 2**30, 2**20, 2**10)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def ms_text(us: float) -> str:
    return f"{us / 1e3:,.1f} ms"


class PeakChart(Widget):
    """Allocated bytes over the trace, one column per time window (its highest level), scaled so the
    peak fills the height; the peak's column is marked (▼ above it, another colour)."""

    DEFAULT_CSS = "PeakChart { height: 1fr; min-height: 7; }"
    GUTTER = 11

    peak: reactive[MemoryPeak | None] = reactive(None, always_update=True)  # redrawn whenever set

    def set_peak(self, peak: MemoryPeak | None) -> None:
        self.peak = peak

    @property
    def columns(self) -> int:
        return max(10, self.size.width - self.GUTTER)

    def peak_column(self) -> int | None:
        """The column holding the peak (None: the peak is before the trace, or there are no events)."""
        p = self.peak
        if p is None or p.peak_time_us is None:
            return None
        return p.column_of(p.peak_time_us, self.columns)

    def render(self) -> Text:
        p = self.peak
        if p is None or not len(p.time_us):
            return Text(
                "No allocator events recorded: the table is what was live at the dump (record the history "
                "with torch.cuda.memory._record_memory_history() before the step to see memory over time).",
                style="dim",
            )
        g, cols = self.GUTTER, self.columns
        rows = max(3, self.size.height - 3)
        levels = p.binned_peak(cols) / max(1, p.peak_bytes) * rows
        at = self.peak_column()
        out = Text(no_wrap=True, overflow="crop")
        marker = f"▼ peak {size_text(p.peak_bytes)}" + (
            f" at {ms_text(p.peak_time_us - p.time_us[0])}" if p.peak_time_us is not None else " (before the trace)"
        )
        if len(marker) + 26 <= cols:
            marker += " · top = the peak"  # not the device's capacity
        if at is None:
            out.append(" " * g + marker + "\n", style=f"bold {PEAK}")
        else:
            start = max(0, min(at, cols - len(marker)))  # the ▼ over the column when the label fits to its right
            label = marker if start == at else marker[2:] + " ▼"
            start = at if start == at else max(0, at - len(label) + 1)
            out.append(" " * (g + start))
            out.append(label + "\n", style=f"bold {PEAK}")
        for r in range(rows, 0, -1):
            label = (
                size_text(p.peak_bytes) if r == rows else size_text(p.peak_bytes // 2) if r == (rows + 1) // 2 else ""
            )
            out.append(f"{label:>{g - 1}} ", style="dim")
            for c, lv in enumerate(levels):
                fill = lv - (r - 1)
                ch = "█" if fill >= 1 else BLOCKS[int(max(0.0, fill) * 8)]
                if c == at:
                    ch = "┃" if ch == " " else ch
                    out.append(ch, style=f"bold {PEAK}")
                else:
                    out.append(ch, style=BAR)
            out.append("\n")
        axis = ["─"] * cols
        axis[0] = "└"
        if at is not None:
            axis[at] = "┴"
        out.append(" " * g + "".join(axis) + "\n", style="dim")
        span = ms_text(p.time_us[-1] - p.time_us[0])
        out.append(" " * g + "0 ms".ljust(max(5, cols - len(span))) + span, style="dim")
        return out


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    width: int | None  # None: what the others leave
    descending: bool

    def sort_key(self, a: PeakAllocation) -> int | float | str:
        if self.key in ("size", "share"):
            return a.size
        if self.key == "time":
            return -1 if a.time_us is None else a.time_us
        return a.site.lower()


COLUMNS = (
    Column("size", "size", 10, True),
    Column("share", "of peak", 8, True),
    Column("time", "allocated", 11, False),
    Column("site", "allocated at (stack top)", None, False),
)


def filter_allocations(allocs: list[PeakAllocation], text: str) -> list[PeakAllocation]:
    """Keep allocations whose site or any stack frame contains every word of ``text`` (case-insensitive)."""
    words = text.lower().split()
    if not words:
        return list(allocs)
    out = []
    for a in allocs:
        hay = (a.site + "\n" + "\n".join(f.text for f in a.stack)).lower()
        if all(w in hay for w in words):
            out.append(a)
    return out


class PeakTable(SortedColumns[Column], Vertical):
    """The allocations live at the peak: numbers first, the stack top as wide as what is left; the
    selected row's full stack in the pane below."""

    sort_columns = COLUMNS  # s / r / header click (tui/sorting.py)

    DEFAULT_CSS = """
    PeakTable #mm-filter { height: 3; }
    PeakTable #mm-table-note { height: 1; color: $text-muted; }
    PeakTable DataTable { height: 2fr; min-height: 4; }
    PeakTable #mm-stack { height: 1fr; max-height: 12; border-top: solid $panel; padding: 0 1; }
    """
    BINDINGS = [
        bind("sort", "sort by the next column"),
        bind("reverse"),
        bind("search", "filter by file, function or frame", action="focus_filter"),
        bind("copy", "copy the selected allocation's site"),
    ]
    MAX_ROWS = 1000  # a DataTable of more rows is sluggish; / narrows the rest

    sort_column: reactive[str] = reactive("size")
    descending: reactive[bool] = reactive(True)
    filter_text: reactive[str] = reactive("", init=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.peak: MemoryPeak | None = None
        self.shown: list[PeakAllocation] = []

    def compose(self) -> ComposeResult:
        f = Input(placeholder="filter by file, function or frame (Enter or Esc returns to the table)", id="mm-filter")
        f.display = False
        yield f
        yield Static("", id="mm-table-note", markup=False)
        yield DataTable(id="mm-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="mm-stack"):
            yield Static("", id="mm-stack-text", markup=False)

    def show(self, peak: MemoryPeak) -> None:
        self.peak = peak
        self._refill()

    @property
    def selected(self) -> PeakAllocation | None:
        table = self.query_one(DataTable)
        return self.shown[table.cursor_row] if self.shown and 0 <= table.cursor_row < len(self.shown) else None

    def _site_width(self) -> int:
        used = sum(c.width + 2 for c in COLUMNS if c.width) + 2 + 2
        return max(16, self.size.width - used)

    def on_resize(self) -> None:
        if self.peak is not None and self._site_width() != getattr(self, "_site_w", None):
            self.query_one(DataTable).clear(columns=True)
            self._refill()

    def _refill(self) -> None:
        p = self.peak
        if p is None:
            return
        col = self.current_column()
        rows = self.in_order(filter_allocations(p.allocations, self.filter_text), col.sort_key)
        self.shown = rows[: self.MAX_ROWS]
        table = self.query_one(DataTable)
        if not table.columns:
            self._site_w = self._site_width()
            for c in COLUMNS:
                table.add_column(c.label + " ▼", key=c.key, width=c.width or self._site_w)
        for c in COLUMNS:
            table.columns[ColumnKey(c.key)].label = Text(c.label + self.sort_mark(c.key, " "))
        table.clear()
        t0 = int(p.time_us[0]) if len(p.time_us) else 0
        for i, a in enumerate(self.shown):
            when = "before" if a.time_us is None else ms_text(a.time_us - t0)
            table.add_row(
                Text(size_text(a.size), justify="right"),
                Text(f"{a.share_of(p.peak_bytes):.2f} %", justify="right"),
                Text(when, justify="right"),
                Text(visible(a.site)[: self._site_w]),  # file and function names: from the snapshot
                key=str(i),
            )
        more = f", first {self.MAX_ROWS:,} shown" if len(rows) > self.MAX_ROWS else ""
        shown_bytes = sum(a.size for a in rows)
        count = f"{len(rows):,} of {len(p.allocations):,}" if len(rows) != len(p.allocations) else f"{len(rows):,}"
        self.query_one("#mm-table-note", Static).update(
            f"{count} live{more} · {size_text(shown_bytes)} = "
            f"{100 * shown_bytes / max(1, p.peak_bytes):.1f} % of the peak · sort: {col.label}"
        )
        self._show_stack()

    def _show_stack(self) -> None:
        a = self.selected
        text = self.query_one("#mm-stack-text", Static)
        p = self.peak
        if a is None or p is None:  # a row is selected only among the peak's allocations
            text.update("")
            return
        out = Text()
        out.append(f"{size_text(a.size)}", style="bold")
        out.append(
            f" ({a.size:,} bytes, {a.share_of(p.peak_bytes):.2f} % of the peak) · {visible(a.site)}\n", style="bold"
        )
        out.append(f"address 0x{a.address:x} · {a.origin} · y copies the site\n", style="dim")
        if not a.stack:
            out.append("no stack recorded\n", style="dim")
            text.update(out)
            return
        py = [f for f in a.stack if f.python]
        if py:
            out.append(f"Python frames, innermost first ({len(py)}):\n", style="underline")
            for f in py:
                out.append(f"  {visible(f.short)}\n")
        out.append(f"full stack, innermost first ({len(a.stack)} frames):\n", style="underline")
        for f in a.stack:
            out.append(f"  {visible(f.text)}\n", style="" if f.python else "dim")
        text.update(out)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_stack()

    def watch_filter_text(self) -> None:
        self._refill()

    def action_focus_filter(self) -> None:
        f = self.query_one(Input)
        f.display = True
        f.focus()

    def action_copy_name(self) -> None:
        a = self.selected
        if a is not None:
            self.app.copy_to_clipboard(a.site)
            self.notify(f"copied: {a.site}", timeout=3, markup=False)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(DataTable).focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))


MemoryLoader = Callable[[Callable[[str, "float | None"], None]], "tuple[MemoryReport, list[MemoryPeak]]"]


class MemoryApp(Palette, BackgroundLoading, App[int]):
    TITLE = "trainscope memory"
    CSS = """
    #mm-main { height: 1fr; }
    #mm-note { height: auto; padding: 0 1; }
    PeakChart { height: 35%; }
    PeakTable { height: 1fr; }
    """
    BINDINGS = [*common_bindings(), bind("export", "export the Markdown memory report")]

    def __init__(
        self,
        path: str,
        *,
        report: MemoryReport | None = None,
        peaks: list[MemoryPeak] | None = None,
        loader: MemoryLoader | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.report = report  # api.MemoryReport: what `e` exports
        self.peaks = peaks
        self.loader = loader
        self.peak: MemoryPeak | None = None
        self.sub_title = os.path.basename(path)
        self.exported: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Loading(id="loading")
        with Vertical(id="mm-main"):
            yield Static("", id="mm-note", markup=False)
            yield PeakChart(id="mm-chart")
            yield PeakTable(id="mm-peak")
        yield KeyBar("q quit", id="keybar")

    def on_mount(self) -> None:
        self.query_one("#mm-main").display = False
        if self.peaks is not None:
            self.show_peaks(self.report, self.peaks)
        else:
            self._start_daemon(self.load)

    def load(self) -> None:
        try:
            if self.loader is not None:
                report, peaks = self.loader(self._throttled_progress)
            else:
                report = memory(self.path)
                peaks = report.peaks()
        except Exception as e:
            if isinstance(e, BadInput) or not self._leaving:
                message, code = describe(e)
                self._post(self.exit, code, code, f"trainscope: {message}")
            return
        self._post(self.show_peaks, report, peaks)

    def show_peaks(self, report: MemoryReport | None, peaks: list[MemoryPeak]) -> None:
        self.report, self.peaks = report, peaks
        self.query_one("#loading").display = False
        self.query_one("#mm-main").display = True
        if not peaks:
            self.query_one("#mm-note", Static).update("This snapshot holds no device memory: nothing to show.")
            return
        # The device whose peak is highest leads (the one that runs out first).
        self.peak = p = max(peaks, key=lambda x: x.peak_bytes)
        others = [x for x in peaks if x is not p]
        note = Text()
        note.append(f"GPU {p.device}", style="bold")
        note.append(
            f" · {'peak allocated' if len(p.time_us) else 'allocated at the dump'} {size_text(p.peak_bytes)}",
            style="bold",
        )
        if p.peak_time_us is not None and len(p.time_us):
            note.append(f" at {ms_text(p.peak_time_us - p.time_us[0])} of {ms_text(p.time_us[-1] - p.time_us[0])}")
        elif len(p.time_us):
            note.append(" before the recorded trace began")
        note.append(f" · reserved then {size_text(p.reserved_at_peak)} · {len(p.allocations):,} allocations live")
        if len(p.time_us):
            note.append(f" · {p.events:,} allocator events")
        if p.phase:
            note.append(f" · in {visible(p.phase)}")
        if not p.accounted:
            note.append(
                f"\nthe live allocations add up to {size_text(p.live_bytes)}, not the peak: the trace was cut mid-way",
                style="bold yellow",
            )
        if others:
            note.append(
                "\nother devices: " + ", ".join(f"GPU {x.device} peak {size_text(x.peak_bytes)}" for x in others),
                style="dim",
            )
        self.query_one("#mm-note", Static).update(note)
        chart = self.query_one(PeakChart)
        if not len(p.time_us):  # no series: the chart is one line saying why
            chart.styles.height = "auto"
            chart.styles.min_height = 2
        chart.set_peak(p)
        self.query_one(PeakTable).show(p)
        self.query_one("#mm-table", DataTable).focus()
        self.query_one("#keybar", KeyBar).update(HINT)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(help_screen())

    def palette_more(self) -> list[SystemCommand]:
        return list(palette_commands(self.query_one(PeakTable), PeakTable.BINDINGS))

    def action_export(self) -> None:
        if self.report is None:
            return
        stem = os.path.basename(self.path)
        for ext in (".gz", ".pickle", ".pkl"):
            stem = stem[: -len(ext)] if stem.endswith(ext) else stem
        d = writer(FILE_DEFAULT)  # a name in the current directory, in the default report format
        ask_path(self, f"{stem}.trainscope-memory{d.suffixes[0]}", f"{d.label} memory report", self._write)

    def _write(self, path: str) -> None:
        """The report in the format the file name says (reports/formats.py)."""
        if self.report is None:  # asked only once the report is shown (action_export)
            return
        try:
            formats.write(path, self.report.output())
        except OSError as e:
            self.notify(f"cannot write {path}: {e.strerror or e}", severity="error", timeout=6, markup=False)
            return
        self.exported.append(path)
        self.notify(f"Memory report written to {path}", timeout=6, markup=False)

    def on_key(self, event: Key) -> None:
        if event.key == "escape" and isinstance(self.focused, Input):
            self.focused.display = bool(self.focused.value)
            self.query_one("#mm-table", DataTable).focus()


def key_sections() -> list[tuple[str, list[tuple[str, str]]]]:
    return [
        (
            "anywhere",
            [("tab / shift+tab", "move focus"), ("ctrl+p", "command palette: every action by name")]
            + binding_rows(MemoryApp.BINDINGS),
        ),
        (
            "live allocations at the peak",
            [("↑ / ↓", "choose an allocation: its full stack shows below")]
            + binding_rows(PeakTable.BINDINGS)
            + [
                ("click a header", "sort by that column (again: reverse)"),
                ("Esc (in the filter)", "back to the table"),
            ],
        ),
    ]


def help_screen() -> HelpScreen:
    text = keys_text("trainscope memory", key_sections())
    text.append("\nthe chart\n", style="bold underline")
    text.append(
        "  Each column is a slice of the recorded time; its bar is the highest allocated level in it, scaled so "
        "the peak fills the height. ▼ and the red column mark the peak. The table lists every allocation live "
        "just after the peak event: the sizes tensors requested (torch.cuda.memory_allocated counts the same), "
        "and where they were allocated — the innermost frame in user code; the pane below holds the full "
        "stack, innermost first.\n"
    )
    return HelpScreen(text)
