"""The table screens: per-step breakdown, kernels (sortable, filterable), ranks."""
from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Input, Static

from trainscope.analyzers.breakdown import CATEGORIES
from trainscope.analyzers.kernels import KernelStat, KernelSummary
from trainscope.tui.timeline import short_name

STEP_COLUMNS = {"compute": "compute", "communication": "comm", "copy": "copy", "memset": "memset",
                "idle_data_wait": "idle:data", "idle_sync": "idle:sync", "idle_host_overhead": "idle:launch",
                "idle_other": "idle:other"}


class StepsPane(Vertical):
    """Every step's exclusive breakdown; outliers (longer than outlier_ratio × median) marked."""

    DEFAULT_CSS = """
    StepsPane #steps-note { height: auto; color: $text-muted; }
    StepsPane DataTable { height: 1fr; }
    """

    class Open(Message):
        """Show this step on the timeline."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def compose(self):
        yield Static("", id="steps-note")
        yield DataTable(id="steps-table", cursor_type="row", zebra_stripes=True)

    def show(self, doc: dict, outlier_ratio: float) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_column("step", key="step")
        table.add_column("ms", key="ms")
        table.add_column("GPU busy", key="busy")
        table.add_column("data wait", key="wait")
        for c in CATEGORIES:
            table.add_column(STEP_COLUMNS[c], key=c)
        table.add_column("", key="flag")
        n_out = 0
        for i, s in enumerate(doc["steps"]):
            style = "bold red" if s["outlier"] else ""
            n_out += s["outlier"]
            table.add_row(
                Text(s["label"], style=style), Text(f"{s['duration_ms']:.1f}", style=style, justify="right"),
                f"{s['gpu_busy_pct']:.1f} %", f"{s['data_wait_pct']:.1f} %",
                *[f"{s['ms'][c]:.1f}" for c in CATEGORIES],
                Text("⚠ outlier", style="bold red") if s["outlier"] else "", key=str(i))
        st = doc["breakdown"]["step_time_ms"]
        self.query_one("#steps-note", Static).update(
            f"{len(doc['steps'])} steps · {doc['steps_note']} · p50 {st['p50']:.1f} ms, p95 {st['p95']:.1f} ms · "
            f"{n_out} outlier(s) > {outlier_ratio:g}× median · times in ms · Enter: show on timeline")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Open(int(event.row_key.value)))


@dataclass(frozen=True)
class KernelColumn:
    key: str
    label: str
    sort_key: object  # callable KernelStat -> comparable
    descending: bool


KERNEL_COLUMNS = (
    KernelColumn("name", "kernel", lambda k: k.name.lower(), False),
    KernelColumn("class", "class", lambda k: k.kernel_class, False),
    KernelColumn("tc", "TC", lambda k: k.tensor_core, True),
    KernelColumn("count", "count", lambda k: k.count, True),
    KernelColumn("total", "total ms", lambda k: k.total_ns, True),
    KernelColumn("mean", "mean µs", lambda k: k.mean_ns, True),
    KernelColumn("share", "share", lambda k: k.share_pct, True),
)


def filter_kernels(kernels: list[KernelStat], text: str) -> list[KernelStat]:
    """Keep kernels whose name or class contains every word of ``text`` (case-insensitive)."""
    words = text.lower().split()
    return [k for k in kernels if all(w in k.name.lower() or w in k.kernel_class for w in words)]


class KernelsPane(Vertical):
    """All kernels inside the steps. Click a header or press s to sort; / to filter."""

    DEFAULT_CSS = """
    KernelsPane #kernels-filter { height: 3; }
    KernelsPane #kernels-note { height: 1; color: $text-muted; }
    KernelsPane DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("s", "sort_next", "sort by next column"),
        Binding("r", "reverse", "reverse sort", show=False),
        Binding("slash", "focus_filter", "filter"),
    ]
    MAX_ROWS = 2000  # a DataTable of more rows is sluggish; the filter narrows the rest

    sort_column: reactive[str] = reactive("total")
    descending: reactive[bool] = reactive(True)
    filter_text: reactive[str] = reactive("")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.summary: KernelSummary | None = None
        self.shown: list[KernelStat] = []

    def compose(self):
        yield Input(placeholder="filter kernels by name or class (press / here, Esc to leave)", id="kernels-filter")
        yield Static("", id="kernels-note")
        yield DataTable(id="kernels-table", cursor_type="row", zebra_stripes=True)

    def show(self, summary: KernelSummary) -> None:
        self.summary = summary
        self._refill()

    def _refill(self) -> None:
        if self.summary is None:
            return
        col = next(c for c in KERNEL_COLUMNS if c.key == self.sort_column)
        rows = filter_kernels(self.summary.top, self.filter_text)
        rows.sort(key=col.sort_key, reverse=self.descending)
        self.shown = rows[: self.MAX_ROWS]
        table = self.query_one(DataTable)
        # Keep the columns (re-creating them re-measures every cell); only their labels change.
        if not table.columns:
            for c in KERNEL_COLUMNS:
                # Measured with the sort marker, so it fits whichever column is sorted.
                table.add_column(c.label + " ▼", key=c.key, width=48 if c.key == "name" else None)
        for c in KERNEL_COLUMNS:
            mark = (" ▼" if self.descending else " ▲") if c.key == self.sort_column else ""
            table.columns[c.key].label = Text(c.label + mark)
        table.clear()
        for i, k in enumerate(self.shown):
            # Text, not str: a DataTable reads a str cell as Rich markup ("[link=…]" in a name).
            table.add_row(Text(short_name(k.name, 200)), k.kernel_class, "✔" if k.tensor_core else "", f"{k.count}",
                          Text(f"{k.total_ns / 1e6:.2f}", justify="right"), Text(f"{k.mean_ns / 1e3:.1f}", justify="right"),
                          Text(f"{k.share_pct:.1f} %", justify="right"), key=str(i))
        more = f" (first {self.MAX_ROWS} shown)" if len(rows) > self.MAX_ROWS else ""
        self.query_one("#kernels-note", Static).update(
            f"{len(rows)} of {len(self.summary.top)} kernels{more} · sorted by {col.label} · "
            "s: next sort column · r: reverse · /: filter · TC = tensor cores")

    def watch_sort_column(self) -> None:
        self._refill()

    def watch_descending(self) -> None:
        self._refill()

    def watch_filter_text(self) -> None:
        self._refill()

    def action_sort_next(self) -> None:
        keys = [c.key for c in KERNEL_COLUMNS]
        nxt = KERNEL_COLUMNS[(keys.index(self.sort_column) + 1) % len(keys)]
        self.sort_by(nxt.key)

    def sort_by(self, key: str) -> None:
        col = next(c for c in KERNEL_COLUMNS if c.key == key)
        if key == self.sort_column:
            self.descending = not self.descending
        else:
            self.set_reactive(KernelsPane.descending, col.descending)
            self.sort_column = key

    def action_reverse(self) -> None:
        self.descending = not self.descending

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
    """Per-rank comparison; Enter switches every screen to that rank."""

    DEFAULT_CSS = """
    RanksPane #ranks-note { height: auto; color: $text-muted; }
    RanksPane DataTable { height: auto; max-height: 60%; }
    RanksPane #stragglers { height: auto; margin: 1 0 0 0; }
    """

    class Choose(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def compose(self):
        yield Static("", id="ranks-note")
        yield DataTable(id="ranks-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="stragglers")

    def show(self, rows: list[dict], current: int, slowest: int, stragglers: dict | None = None) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("", "rank", "step p50 ms", "step p95 ms", "verdict", "bottleneck", "conf.", "GPU busy",
                          "data wait", "trace")
        for i, r in enumerate(rows):
            mark = "▶" if i == current else ""
            table.add_row(mark, str(r["rank"]), f"{r['step_p50_ms']:.1f}", f"{r['step_p95_ms']:.1f}", r["axis"],
                          r["bottleneck"] or "", f"{r['confidence']:.2f}", f"{r['gpu_busy_pct']:.1f} %",
                          f"{r['data_wait_pct']:.1f} %", r["source"], key=str(i))
        self.query_one("#ranks-note", Static).update(
            f"{len(rows)} ranks · slowest median step: rank {rows[slowest]['rank']} (it sets the pace of synchronous "
            "training; the report leads with it) · Enter: show this rank on every tab")
        table.move_cursor(row=current)
        if stragglers:
            from trainscope.reports.deep import stragglers_text_lines

            self.query_one("#stragglers", Static).update(
                Text("\n".join(stragglers_text_lines(stragglers, lambda x: x))))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.Choose(int(event.row_key.value)))
