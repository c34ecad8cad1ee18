"""The screens of the diff app: thin views over a :class:`RunDiff` (and the gate's result).

Each pane keeps what it shows as plain state (``rows``, ``shown``, ``outcomes`` …) so tests can
compare it with a RunDiff computed on their own, and renders with rich Text at any width.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.containers import Vertical
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets import Static

from trainscope.analyzers.compare.diff import GateResult
from trainscope.analyzers.compare.diff import RecommendationOutcome
from trainscope.analyzers.compare.diff import Run
from trainscope.analyzers.compare.diff import RunDiff
from trainscope.analyzers.compare.diff import ShareChange
from trainscope.analyzers.kernel_match import KernelChange
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.reports.diff_document import verdict_headline
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.document import headline_word
from trainscope.traces.safe_text import visible
from trainscope.tui.palette import AXIS_CLASS
from trainscope.tui.palette import GPU_STYLE
from trainscope.tui.sorting import SortedColumns
from trainscope.tui.timeline import short_name

AXIS_CSS = """
    .axis-data { background: #b3261e; color: white; }
    .axis-algorithm { background: #1f5fbf; color: white; }
    .axis-machine { background: #7b3fa0; color: white; }
    .axis-balanced { background: #2e7d32; color: white; }
    .axis-none { background: #5f5f5f; color: white; }
"""
GOOD, BAD = "#2e9e44", "#e0443e"


def base_name(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def speed_words(speedup: float | None) -> str:
    """``1.49× slower`` / ``2.10× faster``: the p50 speedup as a person says it."""
    if speedup is None:
        return "—"
    return f"{speedup:.2f}× faster" if speedup >= 1 else f"{1 / speedup:.2f}× slower"


def _add_columns(table: Table, *columns: tuple[str, JustifyMethod]) -> None:
    """The step-time table's columns: (name, justification), bold headers, never wrapped."""
    for name, justify in columns:
        table.add_column(name, justify=justify, header_style="bold", no_wrap=True)


# -- 1 summary -----------------------------------------------------------------------------------

# Which header row a failed comparability check points at.
CHECK_ROW = {
    "gpu": "device",
    "gpu_activity": "device",
    "ranks": "traces",
    "steps": "steps",
    "step_method": "steps",
    "batch_shapes": "batch",
}


def _side_cells(r: Run) -> dict[str, str]:
    a = r.analysis
    rank = f" · rank {a.rank}" if a.rank is not None else ""
    return {
        "input": visible(base_name(r.path)),
        "device": visible(a.device_name or "no GPU activity") + rank,
        "traces": f"{r.ranks} ({'slowest rank shown' if r.ranks > 1 else 'one trace'})",
        "steps": f"{r.steps} ({a.segmentation.method.replace('_', ' ')})",
        "batch": "unknown (no shapes recorded)" if r.shapes.batch_dim is None else f"leading dim {r.shapes.batch_dim}",
    }


def verdict_lines(axis: str, bottleneck: str | None, confidence: float, summary: str = "") -> str:
    """A badge's two lines: what binds, then the axis and confidence."""
    if axis in ("insufficient_evidence", "balanced"):
        return f"{AXIS_NAMES[axis].upper()}\nconfidence {confidence:.2f}"
    return f"{headline_word(bottleneck, summary, axis.upper())}\n{AXIS_NAMES[axis]} axis · confidence {confidence:.2f}"


class DiffSummary(VerticalScroll):
    """Both sides, what makes them incomparable, the verdict before → after, step time, the gate."""

    DEFAULT_CSS = """
    DiffSummary { padding: 0 1; }
    DiffSummary #sides, DiffSummary #comparable, DiffSummary #comparability { height: auto; }
    DiffSummary #step-time { height: auto; margin: 1 0 0 0; }
    DiffSummary #verdicts { height: 3; }
    DiffSummary .badge { width: 1fr; height: 3; padding: 0 1; text-style: bold; content-align: center middle;
                         text-align: center; }
    DiffSummary #verdict-arrow { width: 4; height: 3; content-align: center middle; text-style: bold; }
    DiffSummary #after-summary { height: auto; color: $text-muted; }
    DiffSummary .heading { text-style: bold; margin: 1 0 0 0; }
    DiffSummary #gate { height: auto; padding: 0 1; margin: 1 0 0 0; text-style: bold; }
    DiffSummary .gate-pass { background: #2e7d32; color: white; }
    DiffSummary .gate-fail { background: #b3261e; color: white; }
    DiffSummary #side-notes { height: auto; margin: 1 0 0 0; }
    """ + "".join(f"DiffSummary {line.strip()}\n" for line in AXIS_CSS.strip().splitlines())

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flagged: set[str] = set()  # header rows marked as differing

    def compose(self) -> ComposeResult:
        yield Static("", id="sides", markup=False)
        yield Static("", id="comparable", markup=False)
        with Horizontal(id="verdicts"):
            yield Static("", id="badge-before", classes="badge")
            yield Static("→", id="verdict-arrow")
            yield Static("", id="badge-after", classes="badge")
        yield Static("", id="after-summary", markup=False)
        yield Static("", id="step-time", markup=False)
        yield Static("", id="gate", markup=False)
        yield Static("Comparability", classes="heading")
        yield Static("", id="comparability", markup=False)
        yield Static("", id="side-notes", markup=False)

    def show(self, d: RunDiff, gate: GateResult | None, gate_requested: bool) -> None:
        self.flagged = {CHECK_ROW[c.check] for c in d.comparability if c.status == "differ" and c.check in CHECK_ROW}
        before, after = _side_cells(d.before), _side_cells(d.after)
        sides = Table(box=None, expand=True, show_edge=False, pad_edge=False, padding=(0, 1))
        sides.add_column("", style="bold", no_wrap=True, width=7)
        sides.add_column("BEFORE", ratio=1, header_style="bold", overflow="fold")
        sides.add_column("AFTER", ratio=1, header_style="bold", overflow="fold")
        for row in ("input", "device", "traces", "steps", "batch"):
            if row == "traces" and d.before.ranks == d.after.ranks == 1:
                continue
            style = "bold red" if row in self.flagged else ""
            mark = "⚠ " if row in self.flagged else ""
            sides.add_row(row, Text(before[row], style=style), Text(mark + after[row], style=style))
        self.query_one("#sides", Static).update(sides)

        differ = [c for c in d.comparability if c.status == "differ"]
        unknown = [c for c in d.comparability if c.status == "unknown"]
        banner = Text()
        if differ:
            banner.append(" NOT COMPARABLE ", style="bold white on #b3261e")
            banner.append(f" differ: {', '.join(c.check for c in differ)} (details below)", style="bold")
        else:
            banner.append("✔ comparable", style=f"bold {GOOD}")
            if unknown:
                banner.append(f" as far as known; unknown: {', '.join(c.check for c in unknown)}", style="dim")
        self.query_one("#comparable", Static).update(banner)
        comp = Text()
        for c in d.comparability:
            mark, style = {"differ": ("!", "bold red"), "unknown": ("?", "bold yellow")}.get(c.status, ("✔", GOOD))
            comp.append(f"{mark} {c.check}: ", style=style)
            comp.append(visible(f"{c.before} → {c.after}"))  # device names, step methods: from the traces
            comp.append(f" — {visible(c.note)}\n", style="dim")
        comp.rstrip()
        self.query_one("#comparability", Static).update(comp)

        v = d.verdict
        for side, axis, bott, conf, said in (
            ("before", v.before_axis, v.before_bottleneck, v.before_confidence, v.before_summary),
            ("after", v.after_axis, v.after_bottleneck, v.after_confidence, v.after_summary),
        ):
            badge = self.query_one(f"#badge-{side}", Static)
            for cls in AXIS_CLASS.values():
                badge.remove_class(cls)
            badge.add_class(AXIS_CLASS.get(axis, "axis-none"))
            badge.update(verdict_lines(axis, bott, conf, said))
        self.query_one("#verdict-arrow", Static).update("→" if v.changed else "=")
        self.query_one("#after-summary", Static).update(
            f"Verdict {'changed' if v.changed else 'unchanged'}. After: {visible(v.after_summary)}"
        )

        st = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0))
        work = d.work
        if work is not None and work.fixed_windows:
            # A capture window's length is the capture's: the work it holds is the measure, no speedup.
            _add_columns(st, ("work per window", "left"), ("before", "right"), ("after", "right"), ("change", "right"))

            def pct(b: float, a: float) -> str:
                return "—" if not b else f"{100 * (a - b) / b:+.1f} %"

            st.add_row(
                "GPU kernel time",
                f"{work.before_kernel_ms:.2f} ms",
                f"{work.after_kernel_ms:.2f} ms",
                pct(work.before_kernel_ms, work.after_kernel_ms),
            )
            st.add_row(
                "kernels",
                f"{work.before_kernels:.0f}",
                f"{work.after_kernels:.0f}",
                pct(work.before_kernels, work.after_kernels),
            )
            if work.before_flops is not None and work.after_flops is not None:
                st.add_row(
                    "recorded FLOPs",
                    f"{work.before_flops:.3g}",
                    f"{work.after_flops:.3g}",
                    pct(work.before_flops, work.after_flops),
                )
            else:
                st.add_row("recorded FLOPs", "—", "—", "not recorded")
            st.add_row(
                Text("window length", style="dim"),
                f"{work.before_window_ms:.2f} ms",
                f"{work.after_window_ms:.2f} ms",
                Text("the capture's", style="dim"),
            )
            self.query_one("#step-time", Static).update(st)
        else:
            _add_columns(
                st,
                ("step time", "left"),
                ("before", "right"),
                ("after", "right"),
                ("change", "right"),
                ("speedup", "left"),
            )
            for s in d.step_time:
                faster = s.speedup is not None and s.speedup >= 1
                st.add_row(
                    s.statistic,
                    f"{s.before_ms:.2f} ms",
                    f"{s.after_ms:.2f} ms",
                    "—" if s.change_pct is None else f"{s.change_pct:+.1f} %",
                    Text(speed_words(s.speedup), style=f"bold {GOOD if faster else BAD}"),
                )
            self.query_one("#step-time", Static).update(st)

        g = self.query_one("#gate", Static)
        g.remove_class("gate-pass", "gate-fail")
        g.display = gate is not None or gate_requested
        if gate is not None:
            g.add_class("gate-fail" if gate.regressed or gate.refused else "gate-pass")
            code = 2 if gate.refused else 3 if gate.regressed else 0
            word = "⚠ GATE NOT RUN" if gate.refused else "✘ GATE FAILED" if gate.regressed else "✔ GATE PASSED"
            g.update(f"{word} ({gate.metric}): {visible(gate.reason)} · exit code {code} on quit")

        notes = Text()
        m = d.memory
        if m is not None:
            change = "" if m.change_pct is None else f" ({m.change_pct:+.1f} %)"
            notes.append("peak memory  ", style="bold")
            notes.append(f"{m.before_bytes / 2**30:.2f} GiB → {m.after_bytes / 2**30:.2f} GiB{change}\n")
        for label, r in (("before", d.before), ("after", d.after)):
            for w in r.warnings:
                notes.append(f"⚠ {label}: {visible(w)}\n", style="yellow")
        self.query_one("#side-notes", Static).update(notes)


# -- 2 breakdown ---------------------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉"

SHORT_LABELS = {
    "gpu_busy": "GPU busy",
    "data_wait": "host data wait",
    "compute": "GPU compute",
    "communication": "comm. not overlapped",
    "copy": "memory copies",
    "memset": "memsets",
    "idle_data_wait": "idle: data wait",
    "idle_sync": "idle: host sync",
    "idle_host_overhead": "idle: launch/CPU",
    "idle_other": "idle: other",
}
# A rise is bad for every step-time category but compute (the GPU waits, or does work that is not
# compute) and for the host's data wait.
RISE_IS_BAD = {"data_wait", *(c for c in CATEGORIES if c != "compute")}
BAR_COLORS = {"gpu_busy": "#2e9e44", "data_wait": "#e0443e", **{k: v[1] for k, v in GPU_STYLE.items()}}


def bar(value: float, scale: float, width: int) -> str:
    """``value`` of ``scale`` as a bar of ``width`` cells, to an eighth of a cell."""
    if width <= 0 or scale <= 0:
        return ""
    eighths = max(0, min(width * 8, round(value / scale * width * 8)))
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


@dataclass(frozen=True)
class BarRow:
    name: str
    label: str
    before: float
    after: float
    color: str
    rise_is_bad: bool


class BarPairs(Widget):
    """Rows of ``label  before-bar value │ after-bar value  change``, sized to the widget's width."""

    DEFAULT_CSS = "BarPairs { height: auto; }"

    def __init__(self, unit: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.unit = unit  # "%" (shares, change in points) or "ms" (per step)
        self.rows: list[BarRow] = []
        self.scale = 100.0

    def set_rows(self, rows: list[BarRow], scale: float) -> None:
        self.rows, self.scale = rows, scale
        self.styles.height = len(rows) + 1
        self.refresh(layout=True)

    def _value(self, x: float) -> str:
        return f"{x:5.1f} %" if self.unit == "%" else f"{x:7.2f}"

    def _change(self, x: float) -> str:
        if self.unit == "%":
            return f"{x:+.1f} pts" if abs(x) >= 0.05 else "0.0 pts"
        return f"{x:+.2f} ms" if abs(x) >= 0.005 else "0.00 ms"

    def render(self) -> Text:
        width = max(40, self.size.width)
        vw, cw = 7, 11
        label_w = min(36, max(20, width * 28 // 100))  # one width for every BarPairs, so columns line up
        bar_w = max(4, (width - label_w - 2 * vw - cw - 6) // 2)
        out = Text(no_wrap=True, overflow="crop")
        out.append(" " * (label_w + 1))
        out.append("before".center(bar_w + vw), style="bold")
        out.append(" │ ")
        out.append("after".center(bar_w + vw), style="bold")
        out.append("change".rjust(cw) + "\n", style="bold")
        for r in self.rows:
            label = r.label if len(r.label) <= label_w else SHORT_LABELS.get(r.name, r.label)
            label = label if len(label) <= label_w else label[: label_w - 1] + "…"
            out.append(label.ljust(label_w) + " ")
            out.append(bar(r.before, self.scale, bar_w), style=r.color)
            out.append(self._value(r.before).rjust(vw))
            out.append(" │ ", style="dim")
            out.append(bar(r.after, self.scale, bar_w), style=r.color)
            out.append(self._value(r.after).rjust(vw))
            delta = r.after - r.before
            small = abs(delta) < (0.05 if self.unit == "%" else 0.005)
            style = "dim" if small else (BAD if (delta > 0) == r.rise_is_bad else GOOD)
            out.append(self._change(delta).rjust(cw) + "\n", style=style)
        out.rstrip()
        return out


def category_rows(d: RunDiff) -> tuple[list[BarRow], list[BarRow]]:
    """The headline shares and the exclusive categories, in % of summed step time."""
    head = [
        BarRow(s.name, s.label, s.before_pct, s.after_pct, BAR_COLORS[s.name], s.name in RISE_IS_BAD)
        for s in (d.gpu_busy, d.data_wait)
    ]
    cats = [
        BarRow(c.name, c.label, c.before_pct, c.after_pct, BAR_COLORS.get(c.name, "white"), c.name in RISE_IS_BAD)
        for c in d.categories
    ]
    return head, cats


def class_rows(classes: list[ShareChange]) -> list[BarRow]:
    """Kernel time per step by class: more time is worse."""
    return [
        BarRow(c.name, c.label, c.before_ms_per_step or 0.0, c.after_ms_per_step or 0.0, "#5b8fb9", True)
        for c in classes
    ]


class DiffBreakdown(VerticalScroll):
    """Where step time goes, before | after, and kernel time by class in ms per step."""

    DEFAULT_CSS = """
    DiffBreakdown { padding: 0 1; }
    DiffBreakdown .note { color: $text-muted; height: auto; }
    DiffBreakdown .heading { text-style: bold; margin: 1 0 0 0; height: auto; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.share_rows: list[BarRow] = []
        self.category_rows: list[BarRow] = []
        self.class_rows: list[BarRow] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="bd-note", classes="note", markup=False)
        yield BarPairs("%", id="bd-headline")
        yield Static("Exclusive breakdown (each instant of a step counted once)", classes="heading")
        yield BarPairs("%", id="bd-categories")
        yield Static(
            "Kernel time by class (ms per step; survives kernel renaming across GPUs)",
            classes="heading",
            id="bd-classes-heading",
        )
        yield BarPairs("ms", id="bd-classes")

    def show(self, d: RunDiff) -> None:
        self.share_rows, self.category_rows = category_rows(d)
        self.class_rows = class_rows(d.kernel_classes)
        self.query_one("#bd-note", Static).update(
            f"% of summed step time · step p50 {d.p50.before_ms:.1f} ms → {d.p50.after_ms:.1f} ms · "
            "bars on one scale (0–100 %) · change in percentage points, red where it hurts"
        )
        self.query_one("#bd-headline", BarPairs).set_rows(self.share_rows, 100.0)
        self.query_one("#bd-categories", BarPairs).set_rows(self.category_rows, 100.0)
        scale = max([max(r.before, r.after) for r in self.class_rows], default=0.0)
        self.query_one("#bd-classes", BarPairs).set_rows(self.class_rows, scale)
        for w in (self.query_one("#bd-classes"), self.query_one("#bd-classes-heading")):
            w.display = bool(self.class_rows)


# -- 3 kernels -----------------------------------------------------------------------------------

GROUPS = ("all", "grew", "shrank", "appeared", "disappeared")
MATCH_TAG = {
    "exact": ("exact", "dim"),
    "arch": ("arch", "bold cyan"),
    "family": ("family", "bold magenta"),
    "appeared": ("new", f"bold {BAD}"),
    "disappeared": ("gone", f"bold {GOOD}"),
}
MATCH_MEANS = {
    "exact": "the same kernel name in both runs",
    "arch": "the same name without GPU-architecture tokens (built for another GPU)",
    "family": "the same name without architecture tokens and numbers (other tile sizes)",
    "appeared": "only in AFTER",
    "disappeared": "only in BEFORE",
}


@dataclass(frozen=True)
class DiffColumn:
    key: str
    label: str
    sort_key: Callable[[KernelChange], Any]  # a comparable value of the row
    descending: bool


# The change, both values and the match kind first, so they stay in view at 80 columns.
DIFF_COLUMNS = (
    DiffColumn("change", "Δ ms/step", lambda k: abs(k.delta_ms_per_step), True),
    DiffColumn("before", "before", lambda k: k.before_ms_per_step, True),
    DiffColumn("after", "after", lambda k: k.after_ms_per_step, True),
    DiffColumn(
        "match", "match", lambda k: ("exact", "arch", "family", "appeared", "disappeared").index(k.match), False
    ),
    DiffColumn("kernel", "kernel", lambda k: k.label.lower(), False),
    DiffColumn("pct", "Δ %", lambda k: k.change_pct if k.change_pct is not None else float("inf"), True),
    DiffColumn("class", "class", lambda k: k.kernel_class, False),
)


def kernel_group(d: RunDiff, group: str) -> list[KernelChange]:
    return list(d.kernels) if group == "all" else d.kernels_by(group)


class KernelDiffPane(SortedColumns[DiffColumn], Vertical):
    """Every matched group and appeared/disappeared kernel; g/-/n/d/a filter (x is an export in analyze, never a filter), s/r sort, details below."""

    sort_columns = DIFF_COLUMNS  # s / r / header click (tui/sorting.py)

    DEFAULT_CSS = """
    KernelDiffPane #kd-groups { height: 1; padding: 0 1; }
    KernelDiffPane #kd-note { height: 1; color: $text-muted; padding: 0 1; }
    KernelDiffPane DataTable { height: 1fr; }
    KernelDiffPane #kd-detail { height: auto; max-height: 9; padding: 0 1; border-top: solid $panel; }
    """
    BINDINGS = [
        Binding("a", "group('all')", "all", show=False),
        Binding("g,plus", "group('grew')", "grew", show=False),
        Binding("minus", "group('shrank')", "shrank", show=False),
        Binding("n", "group('appeared')", "appeared", show=False),
        Binding("d", "group('disappeared')", "disappeared", show=False),
        Binding("f", "next_group", "next filter", show=False),
        Binding("s", "sort_next", "sort by next column", show=False),
        Binding("r", "reverse", "reverse sort", show=False),
    ]

    group: reactive[str] = reactive("all", init=False)
    sort_column: reactive[str] = reactive("change", init=False)
    descending: reactive[bool] = reactive(True, init=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.diff: RunDiff | None = None
        self.shown: list[KernelChange] = []
        self.selected: KernelChange | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="kd-groups", markup=False)
        yield Static("", id="kd-note", markup=False)
        yield DataTable(id="kd-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="kd-detail", markup=False)

    def show(self, d: RunDiff) -> None:
        self.diff = d
        self._refill()

    def _refill(self) -> None:
        d = self.diff
        if d is None:
            return
        rows = self.in_order(kernel_group(d, self.group), self.current_column().sort_key)
        self.shown = rows
        table = self.query_one(DataTable)
        table.clear(columns=True)
        name_w = self._name_width()
        self._shown_name_w = name_w
        for c in DIFF_COLUMNS:
            table.add_column(
                c.label + self.sort_mark(c.key, " "), key=c.key, width=name_w if c.key == "kernel" else None
            )
        for i, k in enumerate(rows):
            tag, tag_style = MATCH_TAG[k.match]
            delta = k.delta_ms_per_step
            table.add_row(
                Text(f"{delta:+.3f}", style=BAD if delta > 0 else GOOD if delta < 0 else "dim", justify="right"),
                Text(f"{k.before_ms_per_step:.3f}", justify="right"),
                Text(f"{k.after_ms_per_step:.3f}", justify="right"),
                Text(tag, style=tag_style),
                Text(short_name(k.label, 200)),
                Text("—" if k.change_pct is None else f"{k.change_pct:+.0f} %", justify="right"),
                k.kernel_class,
                key=str(i),
            )
        counts = {g: len(kernel_group(d, g)) for g in GROUPS}
        groups = Text()
        for key, g in zip("ag-nd", GROUPS):
            style = "bold reverse" if g == self.group else ""
            groups.append(f" {key} {g} {counts[g]} ", style=style)
            groups.append(" ")
        self.query_one("#kd-groups", Static).update(groups)
        mc = d.match_counts()
        self.query_one("#kd-note", Static).update(
            f"per step · sorted by {self.current_column().label} {self.arrow} · BEFORE names matched: "
            f"{mc['exact']} exact, {mc['arch']} arch, {mc['family']} family · s: sort · r: reverse"
        )
        self._select(0 if rows else None)

    def _name_width(self) -> int:
        """The kernel column takes what the other columns leave (they stay in view from ~100 columns)."""
        return max(30, min(110, self.size.width - 70))

    def on_resize(self) -> None:
        # The pane is sized only once its tab is shown (and on every terminal resize).
        if self.diff is not None and self._name_width() != getattr(self, "_shown_name_w", None):
            self._refill()

    def _select(self, index: int | None) -> None:
        self.selected = self.shown[index] if index is not None and index < len(self.shown) else None
        self.query_one("#kd-detail", Static).update(self.detail_text())

    def detail_text(self) -> Text:
        k = self.selected
        out = Text(no_wrap=False)
        if k is None:
            out.append("no kernels in this group", style="dim")
            return out
        tag, style = MATCH_TAG[k.match]
        out.append(f"{tag}", style=style)
        out.append(f" · {k.kernel_class} · {MATCH_MEANS[k.match]}\n", style="dim")
        width = max(40, self.size.width - 2)
        for side, names, count, ms in (
            ("before", k.before_names, k.before_count, k.before_ms_per_step),
            ("after", k.after_names, k.after_count, k.after_ms_per_step),
        ):
            head = f"{side:<7}{count} calls, {ms:.3f} ms/step"
            out.append(f"{side:<7}", style="bold")
            out.append(head[7:], style="dim")
            if not names:
                out.append("  (none)\n", style="dim")
            elif len(names) == 1 and width - len(head) - 2 >= 30:  # one name: on the same line
                out.append("  " + short_name(names[0], width - len(head) - 2) + "\n")
            else:
                out.append("\n")
                for name in names[:2]:
                    out.append("  " + short_name(name, width - 2) + "\n")
                if len(names) > 2:
                    out.append(f"  … and {len(names) - 2} more\n", style="dim")
        out.rstrip()
        return out

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if event.row_key is not None and event.row_key.value is not None:
            self._select(int(event.row_key.value))

    def watch_group(self) -> None:
        self._refill()

    def action_group(self, group: str) -> None:
        self.group = group

    def action_next_group(self) -> None:
        self.group = GROUPS[(GROUPS.index(self.group) + 1) % len(GROUPS)]

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))


# -- 4 earlier fixes -----------------------------------------------------------------------------

STATUS_STYLE = {
    "resolved": f"bold white on {GOOD}",
    "improved": "bold white on #2e7d32",
    "unchanged": "bold white on #5f5f5f",
    "worse": "bold white on #b3261e",
    "unknown": "bold black on #c9a227",
}


def _value(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


class FixOutcomes(VerticalScroll):
    """What became of each fix the BEFORE analysis recommended, measured on AFTER."""

    DEFAULT_CSS = """
    FixOutcomes { padding: 0 1; }
    FixOutcomes #fo-note { color: $text-muted; height: auto; }
    FixOutcomes #fo-list { height: auto; margin: 1 0 0 0; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outcomes: list[RecommendationOutcome] = []

    def compose(self) -> ComposeResult:
        yield Static("", id="fo-note", markup=False)
        yield Static("", id="fo-list", markup=False)

    def show(self, d: RunDiff) -> None:
        self.outcomes = list(d.recommendations)
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        self.query_one("#fo-note", Static).update(
            "The fixes BEFORE's analysis recommended, and what AFTER measures: resolved (finding gone), improved / "
            "worse (its metric moved beyond the noise floor), unchanged, unknown (not measurable) · "
            + (", ".join(f"{n} {s}" for s, n in counts.items()) or "none")
        )
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(width=11, no_wrap=True)
        grid.add_column(ratio=1)
        if not self.outcomes:
            v = d.verdict
            grid.add_row(
                "",
                Text(
                    f"None: the BEFORE verdict was {verdict_headline(v.before_axis, v.before_bottleneck, v.before_summary)}, "
                    "with no ranked fixes.",
                    style="dim",
                ),
            )
        for o in self.outcomes:
            body = Text()
            body.append(visible(o.title), style="bold")
            if o.projected_speedup:
                body.append(f"  (projected ≤ {o.projected_speedup:.2f}×)", style="dim")
            body.append("\n")
            if o.metric:
                body.append(f"{o.metric}: ")
                body.append(f"{_value(o.before)} → {_value(o.after)} {o.unit}", style="bold")
                if o.before is not None and o.after is not None:
                    body.append(f"  ({o.after - o.before:+.2f})", style="dim")
                body.append("\n")
            body.append(visible(o.note), style="dim")
            body.append("\n")
            grid.add_row(Text(f" {o.status.upper()} ", style=STATUS_STYLE.get(o.status, "")), body)
        self.query_one("#fo-list", Static).update(grid)
