"""The timeline screen: the GPU (all streams, then one lane per stream) and one lane per host
thread that matters, on one time axis, with zoom, pan, step navigation, a minimap of the whole
trace, and a cursor that lists every item under it with its stream and the overlap there."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Input
from textual.widgets import Static

from trainscope.analyzers.views.timeline import GPU_LABELS
from trainscope.analyzers.views.timeline import HOST_LABELS
from trainscope.analyzers.views.timeline import Item
from trainscope.analyzers.views.timeline import Lane
from trainscope.analyzers.views.timeline import LaneView
from trainscope.analyzers.views.timeline import Match
from trainscope.analyzers.views.timeline import Overlap
from trainscope.analyzers.views.timeline import TimelineModel
from trainscope.traces.model import Column
from trainscope.traces.safe_text import visible
from trainscope.tui.palette import GPU_STYLE
from trainscope.tui.palette import HOST_STYLE
from trainscope.tui.palette import STREAM_STYLE

GUTTER = 9  # "s21 NCCL " / "s7 comp  " / "T main   "
MIN_WINDOW_NS = 10_000  # 10 µs: finer than any kernel launch gap worth seeing
TICK_EVERY = 16  # columns between axis labels
MAX_ROWS_PER_LANE = 6
# (start_ns, kernel name) -> the kernel's launch (analyzers/views/kernel_launch.py's KernelLaunch, typed
# Any: not among the analyzers' result types a front end may import, tests/test_layering.py), or None.
LaunchInfo = Callable[[int, str], Any]


def fmt_ms(ns: float) -> str:
    ms = ns / 1e6
    if abs(ms) >= 100:
        return f"{ms:.0f}"
    if abs(ms) >= 1:
        return f"{ms:.1f}"
    return f"{ms:.3f}"


def window_label(start_ns: int, end_ns: int) -> str:
    """``a–b`` in ms with as many decimals as the window's width needs for the two to differ."""
    width_ms = max(end_ns - start_ns, 1) / 1e6
    decimals = max(0, min(6, 2 - math.floor(math.log10(width_ms))))
    return f"{start_ns / 1e6:.{decimals}f}–{end_ns / 1e6:.{decimals}f}"


def duration_label(ns: int) -> str:
    """A duration in ms that never reads 0 for a short kernel (3 significant digits)."""
    ms = ns / 1e6
    return fmt_ms(ns) if ms >= 1 or ms == 0 else f"{ms:.3g}"


def axis_labels(start_ns: int, end_ns: int, columns: int, every: int = TICK_EVERY) -> list[tuple[int, str]]:
    """(column, label in ms) every ``every`` columns, with as many decimals as the spacing needs, so
    neighbouring labels always differ (no "98.7 98.7 … 98.7" at deep zoom)."""
    step_ms = every * (end_ns - start_ns) / max(1, columns) / 1e6
    decimals = max(0, 1 - math.floor(math.log10(step_ms))) if step_ms > 0 else 3
    width = (end_ns - start_ns) / max(1, columns)
    return [(c, f"{(start_ns + c * width) / 1e6:.{decimals}f}") for c in range(0, columns, every)]


def lane_style(lane: Lane) -> dict[str, tuple[str, str]]:
    return STREAM_STYLE if lane.kind == "stream" else HOST_STYLE


def window_bindings(*, show_zoom: bool = False) -> list[Binding]:
    """The keys that move a time window, the same on the timeline and on the ranks side by side:
    h / l pan by a quarter window, + / − zoom by two (``show_zoom``: "zoom in" in the footer)."""
    return [
        Binding("h", "pan(-0.25)", "pan ←", show=False),
        Binding("l", "pan(0.25)", "pan →", show=False),
        Binding("plus,equals_sign,i", "zoom(0.5)", "zoom in", show=show_zoom),
        Binding("minus,o", "zoom(2)", "zoom out", show=False),
    ]


class TimelineView(Widget, can_focus=True):
    """Thin view: draws ``model`` over [start, end) with a cursor column; keys change the window."""

    DEFAULT_CSS = """
    TimelineView { height: auto; min-height: 6; }
    TimelineView:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "cursor(-1)", "cursor ←", show=False),
        Binding("right", "cursor(1)", "cursor →", show=False),
        Binding("shift+left", "cursor(-8)", "cursor ← ×8", show=False),
        Binding("shift+right", "cursor(8)", "cursor → ×8", show=False),
        *window_bindings(show_zoom=True),
        Binding("n", "next(1)", "next step (or match)"),
        Binding("N", "next(-1)", "previous match", show=False),
        Binding("right_square_bracket", "step(1)", "next step", show=False),
        Binding("p,left_square_bracket", "step(-1)", "prev step", show=False),
        Binding("escape", "clear_matches", "leave the matches", show=False),
        Binding("0,f", "fit_step", "fit step", show=False),
        Binding("a", "fit_all", "whole trace", show=False),
        Binding("slash", "search", "search kernels, ops, ranges", show=False),
        Binding("c", "toggle_lanes", "collapse / expand the lanes", show=False),
        Binding("R", "app.side_by_side", "ranks side by side on one clock", show=False),
        Binding("home", "cursor_to(0)", "cursor to start", show=False),
        Binding("end", "cursor_to(-1)", "cursor to end", show=False),
    ]

    start_ns: reactive[int] = reactive(0)
    end_ns: reactive[int] = reactive(1)
    cursor: reactive[int] = reactive(0)
    step_index: reactive[int] = reactive(0)

    class Moved(Message):
        """The window or cursor changed: what is under the cursor now, on both lanes."""

        def __init__(
            self,
            view: TimelineView,
            gpu: Item,
            host: Item,
            items: list[tuple[Lane, Item | None]] | None = None,
            overlap: Overlap | None = None,
        ) -> None:
            super().__init__()
            self.view = view
            self.gpu = gpu
            self.host = host
            self.items = items or []  # every stream and thread lane with what is under the cursor
            self.overlap = overlap

    def __init__(self, model: TimelineModel | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.collapsed = False  # one GPU and one host lane instead of a lane per stream and thread
        self.matches: list[Match] = []  # a search, a kernel's instances or a finding's evidence
        self.match_index = 0
        self.match_title = ""

    # -- matches -----------------------------------------------------------------------------------

    def set_matches(self, matches: list[Match], title: str, index: int = 0) -> None:
        self.matches, self.match_title = matches, title
        if matches:
            self.show_match(index)
        else:
            self._moved()

    def show_match(self, index: int) -> None:
        """Frame the match with a margin either side and put the cursor on its start."""
        self.match_index = index % len(self.matches)
        m = self.matches[self.match_index]
        dur = max(m.end_ns - m.start_ns, MIN_WINDOW_NS // 4)
        start = m.start_ns - dur // 4
        self.show_window(start, start + dur + dur // 2)
        width = (self.end_ns - self.start_ns) / self.columns
        self.cursor = max(0, min(self.columns - 1, int((m.start_ns - self.start_ns) / width + 0.5)))
        self._moved()

    def action_next(self, delta: int) -> None:
        if self.matches:
            self.show_match(self.match_index + delta)
        elif delta > 0:
            self.action_step(1)

    def action_clear_matches(self) -> None:
        if self.matches:
            self.matches, self.match_title = [], ""
            self._moved()

    # -- state -----------------------------------------------------------------------------------

    def set_model(self, model: TimelineModel, step_index: int = 0) -> None:
        self.model = model
        self.refresh(layout=True)  # the lane count sets the height
        self.show_step(step_index)

    @property
    def columns(self) -> int:
        return max(10, self.size.width - GUTTER - 1)

    def column_window(self, col: int) -> tuple[int, int]:
        width = (self.end_ns - self.start_ns) / self.columns
        a = self.start_ns + col * width
        return int(a), int(max(a + width, a + 1))

    def show_window(self, start: int, end: int) -> None:
        if self.model is None:
            return
        lo, hi = self.model.span
        end = max(end, start + MIN_WINDOW_NS)
        # Inside the trace: time before its first or after its last event has nothing to show (it
        # was painted as idle), so the window is clamped to the span and never wider than it.
        width = min(end - start, max(hi - lo, MIN_WINDOW_NS))
        start = int(max(lo, min(start, hi - width)))
        self.start_ns, self.end_ns = start, int(start + width)
        self._moved()

    def show_step(self, index: int) -> None:
        if self.model is None:
            return
        steps = self.model.segmentation.steps
        if not steps:
            self.action_fit_all()
            return
        index = max(0, min(index, len(steps) - 1))
        self.matches, self.match_title = [], ""  # a step jump leaves the matches: the title must not keep them
        self.step_index = index
        st = steps[index]
        self.cursor = 0
        self.show_window(st.start_ns, st.end_ns)

    def _moved(self) -> None:
        self.cursor = max(0, min(self.cursor, self.columns - 1))
        if self.model is not None:
            a, b = self.column_window(self.cursor)
            m = self.model
            step = m.step_at((a + b) // 2)
            if step is not None and step != self.step_index:
                self.set_reactive(TimelineView.step_index, step)  # the header follows the cursor
            moved = self.Moved(
                self, m.item_at("gpu", a, b), m.item_at("host", a, b), m.items_at(a, b), m.overlap_at(a, b)
            )
            pane = self.parent
            if isinstance(pane, TimelinePane):  # its title and cursor box change in the same frame as the lanes
                pane.on_timeline_view_moved(moved)
            else:
                self.post_message(moved)
        self.refresh()

    # -- actions ---------------------------------------------------------------------------------

    def action_cursor(self, delta: int) -> None:
        self.cursor = max(0, min(self.cursor + delta, self.columns - 1))
        self._moved()

    def action_cursor_to(self, col: int) -> None:
        self.cursor = col if col >= 0 else self.columns - 1
        self._moved()

    def action_pan(self, fraction: float) -> None:
        shift = int((self.end_ns - self.start_ns) * fraction)
        self.show_window(self.start_ns + shift, self.end_ns + shift)

    def action_zoom(self, factor: float) -> None:
        """Zoom around the cursor, which stays on the same instant."""
        a, _ = self.column_window(self.cursor)
        width = max(MIN_WINDOW_NS, int((self.end_ns - self.start_ns) * factor))
        frac = self.cursor / self.columns
        self.show_window(int(a - frac * width), int(a - frac * width) + width)

    def action_search(self) -> None:
        pane = next((a for a in self.ancestors if isinstance(a, TimelinePane)), None)
        if pane is not None:
            pane.open_search()

    def action_step(self, delta: int) -> None:
        self.show_step(self.step_index + delta)

    def action_fit_step(self) -> None:
        self.show_step(self.step_index)

    def action_fit_all(self) -> None:
        if self.model is not None:
            lo, hi = self.model.span
            self.show_window(lo, hi)

    def on_click(self, event: events.Click) -> None:
        if event.x >= GUTTER:
            self.cursor = min(event.x - GUTTER, self.columns - 1)
            self._moved()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_zoom(0.5)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_zoom(2)

    def on_resize(self, event: events.Resize) -> None:
        self._moved()

    # -- drawing ---------------------------------------------------------------------------------

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """Axis, ticks, cursor and minimap, and every lane with as many rows as the screen leaves
        after the rest: the app's chrome and the tab's title (5), these 4 rows, the cursor's box
        (border, time and overlap lines, then a line per lane, two where they wrap) and, on a tall
        screen, the legend (5)."""
        n = len(self.model.lanes) if self.model else 1
        lanes = (2 if self.collapsed else 1 + n) + (1 if self.model is not None and self.has_nvtx else 0)
        per_item = 1 if width >= 140 else 2
        rest = 5 + 4 + (2 + 2 + n * per_item) + (5 if viewport.height >= 34 else 0)
        nvtx = 1 if self.model is not None and self.has_nvtx else 0
        per = max(1, min(MAX_ROWS_PER_LANE, (viewport.height - rest) // lanes))
        return 4 + per * (lanes - nvtx) + nvtx

    def action_toggle_lanes(self) -> None:
        self.collapsed = not self.collapsed
        self.refresh(layout=True)

    def rows_per_lane(self) -> int:
        """Lanes grow into the rows the widget has (axis, ticks, cursor and minimap take 4)."""
        lanes = 2 if self.collapsed else 1 + (len(self.model.lanes) if self.model else 0)
        nvtx = 1 if self.model is not None and self.has_nvtx else 0
        return max(1, min(MAX_ROWS_PER_LANE, (self.size.height - 4 - nvtx) // max(1, lanes)))

    def render(self) -> Text:
        if self.model is None:
            return Text("no timeline")
        cols = self.columns
        m = self.model
        per = self.rows_per_lane()
        out = Text(no_wrap=True, overflow="crop")
        out.append(self._axis(cols))
        out.append("\n")
        out.append(self._ticks(m, cols))
        rows: list[tuple[str, LaneView, dict[str, tuple[str, str]]]] = [
            ("GPU all", m.lane("gpu", self.start_ns, self.end_ns, cols), GPU_STYLE)
        ]
        for lane in [] if self.collapsed else m.lanes:
            rows.append((visible(lane.label), m.lane_view(lane, self.start_ns, self.end_ns, cols), lane_style(lane)))
        if self.collapsed or not m.thread_lanes:
            rows.append(("host", m.lane("host", self.start_ns, self.end_ns, cols), HOST_STYLE))
        labels = {
            visible(lane.label): (self.slice_labels if lane.kind == "stream" else self.op_labels)(m, lane.ident, cols)
            for lane in ([] if self.collapsed else m.lanes)
        }
        for label, view, style in rows:
            for r in range(per):
                out.append("\n")
                out.append(f"{label if r == 0 else '':<{GUTTER}}"[:GUTTER], style="bold")
                # names on the lane's last row: its first keeps the glyphs (what a NO_COLOR terminal reads)
                self._append_runs(out, view, style, labels.get(label) if r == per - 1 else None)
        if self.has_nvtx:
            out.append("\n")
            out.append(f"{'NVTX':<{GUTTER}}", style="bold")
            out.append_text(self._nvtx_row(m, cols))
        out.append("\n")
        out.append(self._cursor_row(cols))
        if self.size.height >= 4 + per * len(rows):
            out.append("\n")
            out.append(self._minimap(m, cols))
        return out

    def match_columns(self) -> tuple[int, int] | None:
        """The columns [a, b) the current match covers in the window (None: no match, or outside it)."""
        if not self.matches:
            return None
        m = self.matches[self.match_index]
        width = (self.end_ns - self.start_ns) / self.columns
        a = int((m.start_ns - self.start_ns) / width)
        b = max(a + 1, int((m.end_ns - self.start_ns) / width + 0.999))
        a, b = max(0, a), min(self.columns, b)
        return (a, b) if a < b else None

    def _cursor_row(self, cols: int) -> Text:
        """The cursor (▲) under the lanes, on a bar (━) under the current match's interval."""
        span = self.match_columns()
        c = min(self.cursor, cols - 1)
        if span is None:
            return Text(" " * (GUTTER + c) + "▲", style="bold")
        out = Text(" " * GUTTER)
        line = [" "] * cols
        line[span[0] : span[1]] = "━" * (span[1] - span[0])
        line[c] = "▲"
        out.append("".join(line[:c]), style="bold yellow")
        out.append("▲", style="bold")
        out.append("".join(line[c + 1 :]).rstrip(), style="bold yellow")
        return out

    def _minimap(self, m: TimelineModel, cols: int) -> Text:
        """The whole trace (GPU, all streams) with the window shown in reverse."""
        lo, hi = m.span
        view = m.lane("gpu", lo, hi, cols)
        out = Text(f"{'trace':<{GUTTER}}", style="dim")
        a = int((self.start_ns - lo) / max(1, hi - lo) * cols)
        b = max(a + 1, int((self.end_ns - lo) / max(1, hi - lo) * cols))
        for c, k in enumerate(view.dominant.tolist()):
            glyph, color = GPU_STYLE[view.categories[k]]
            out.append(glyph, style=f"{color} reverse" if a <= c < b else f"{color} dim")
        return out

    def _append_runs(
        self, out: Text, view: LaneView, style: dict[str, tuple[str, str]], labels: dict[int, str] | None = None
    ) -> None:
        """One styled span per run of equal cells (not per cell): rendering stays cheap at any width.
        ``labels``: characters of slice names written over the run where they fit (column → char)."""
        dominant = view.dominant.tolist()
        labels = labels or {}
        c = 0
        while c < len(dominant):
            k = dominant[c]
            glyph, color = style[view.categories[k]]
            if c in labels:  # at the cursor the name's character stays, the cursor inverts it back
                out.append(labels[c], style=f"bold {color}" if c == self.cursor else f"bold {color} reverse")
                c += 1
                continue
            end = c + 1
            while end < len(dominant) and dominant[end] == k and end != self.cursor and end not in labels:
                end += 1
            if c == self.cursor:
                end = c + 1
            out.append(glyph * (end - c), style=f"{color} reverse" if c == self.cursor else color)
            c = end

    # -- slice labels and the NVTX lane ------------------------------------------------------------

    def _placed(
        self, m: TimelineModel, ts: Column, end: Column, names: Column, cols: int, limit: int = 400
    ) -> dict[int, str]:
        """Names written inside their slices where a slice spans enough columns (longest first; one
        column of margin either side, never over another label)."""
        width = (self.end_ns - self.start_ns) / cols
        out: dict[int, str] = {}
        order = np.argsort(-(end - ts), kind="stable")[:limit]
        for i in order.tolist():
            a = max(0, int((ts[i] - self.start_ns) / width) + 1)
            b = min(cols, int((end[i] - self.start_ns) / width)) - 1
            if b - a < 4:
                continue
            text = short_name(m.trace.strings[int(names[i])], b - a)
            # the first place inside the slice where the name (or at least 4 of its characters) is clear of others
            for p in range(a, b - 3):
                free = 0
                while p + free < b and (p + free) not in out and (p + free + 1) not in out and free < len(text):
                    free += 1
                if free >= min(len(text), 4) and (p - 1) not in out:
                    shown = text if free >= len(text) else short_name(text, free)
                    for j, ch in enumerate(shown):
                        out[p + j] = ch
                    break
        return out

    def slice_labels(self, m: TimelineModel, stream: int, cols: int) -> dict[int, str]:
        """Kernel names on one stream's lane in the window, where they fit."""
        k = m.trace.kernels
        dev = m.device
        sel = np.flatnonzero(
            (k.stream == stream)
            & (k.ts < self.end_ns)
            & (k.ts + k.dur > self.start_ns)
            & ((k.device == dev) if dev is not None else True)
        )
        if not len(sel) or len(sel) > 20 * cols:  # thousands of kernels in view: no name fits anyway
            return {}
        return self._placed(m, k.ts[sel], k.ts[sel] + k.dur[sel], k.name[sel], cols)

    def op_labels(self, m: TimelineModel, thread: int, cols: int) -> dict[int, str]:
        """Operator and range names on one host thread's lane in the window, where they fit."""
        t = m.trace
        o, a = t.cpu_ops, t.annotations
        so = np.flatnonzero((o.thread == thread) & (o.ts < self.end_ns) & (o.ts + o.dur > self.start_ns))
        sa = np.flatnonzero(
            (a.device < 0) & (a.thread == thread) & (a.ts < self.end_ns) & (a.ts + a.dur > self.start_ns)
        )
        if not (len(so) + len(sa)) or len(so) + len(sa) > 20 * cols:
            return {}
        ts = np.concatenate([o.ts[so], a.ts[sa]])
        return self._placed(
            m, ts, ts + np.concatenate([o.dur[so], a.dur[sa]]), np.concatenate([o.name[so], a.name[sa]]), cols
        )

    @property
    def has_nvtx(self) -> bool:
        """Nsight exports record NVTX ranges (the user's push/pop ranges): they get a lane of their own."""
        t = self.model.trace if self.model is not None else None
        return bool(t is not None and str(t.format).startswith("nsys") and len(t.annotations))

    def _nvtx_row(self, m: TimelineModel, cols: int) -> Text:
        """The NVTX ranges in the window: the outermost as a bar, names where they fit."""
        a = m.trace.annotations
        sel = np.flatnonzero((a.ts < self.end_ns) & (a.ts + a.dur > self.start_ns))
        width = (self.end_ns - self.start_ns) / cols
        cells = [" "] * cols
        for i in sel.tolist():
            lo = max(0, int((a.ts[i] - self.start_ns) / width))
            hi = min(cols, max(lo + 1, int((a.ts[i] + a.dur[i] - self.start_ns) / width)))
            for c in range(lo, hi):
                cells[c] = "▬"
        for c, ch in self._placed(m, a.ts[sel], a.ts[sel] + a.dur[sel], a.name[sel], cols).items():
            cells[c] = ch
        return Text("".join(cells), style="cyan")

    def _ticks(self, m: TimelineModel, cols: int) -> Text:
        """Step boundaries (┃, with the step's number when there is room) and a tick under each label."""
        line = [" "] * cols
        for c in range(0, cols, TICK_EVERY):
            line[c] = "╵"
        width = (self.end_ns - self.start_ns) / cols
        steps = m.segmentation.steps
        for i, s in enumerate(m.step_starts):
            c = int((s - self.start_ns) / width)
            if 0 <= c < cols:
                line[c] = "┃"
                label = steps[i].label.rsplit("#", 1)[-1] if i < len(steps) else ""
                label = f"#{label}" if label.isdigit() else visible(label)[:10]
                if c + 1 + len(label) <= cols and all(ch in " ╵" for ch in line[c + 1 : c + 1 + len(label)]):
                    line[c + 1 : c + 1 + len(label)] = label
        return Text(" " * GUTTER + "".join(line), style="dim")

    def _axis(self, cols: int) -> Text:
        """Milliseconds from the start of the trace, as precise as the zoom needs."""
        text = [" "] * (GUTTER + cols)
        label = "ms"
        text[: len(label)] = label
        for c, s in axis_labels(self.start_ns, self.end_ns, cols):
            if GUTTER + c + len(s) <= len(text):
                text[GUTTER + c : GUTTER + c + len(s)] = s
        return Text("".join(text), style="dim")


def short_name(name: str, limit: int = 110) -> str:
    """Drop a demangled kernel's argument list (it repeats the template) and cap the length."""
    if name.endswith(")") and "(" in name:
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i] if i > 0 else name
                break
    name = visible(name.removeprefix("void "))  # a trace's name never drives the terminal
    if len(name) <= limit:
        return name
    return _elide(name, limit)


def _collapse_nested(name: str) -> str:
    """Template and call arguments nested inside a template's own: ``k<4, F<float>, A<char*, 3> >`` →
    ``k<4, F<…>, A<…> >`` — the outer arguments (the functor) tell instances of one kernel apart."""
    out, depth = [], 0
    for ch in name:
        if ch in "<({":
            depth += 1
            if depth == 2:
                out.append(ch + "…")
            elif depth < 2:
                out.append(ch)
        elif ch in ">)}":
            depth = max(0, depth - 1)
            if depth < 2:
                out.append(ch)
        elif depth < 2:
            out.append(ch)
    return "".join(out)


def _elide(name: str, limit: int) -> str:
    """Shorter and shorter, keeping what tells kernels apart: namespaces go (at::native::,
    (anonymous namespace)::), then arguments nested in the template's, then the kernel's base name
    keeps its head and tail — never all of the template arguments — and last the end is cut."""
    if limit < 8:
        return name[: max(0, limit - 1)] + "…" if limit > 0 else ""
    name = _NAMESPACE.sub("", name)
    if len(name) <= limit:
        return name
    name = _collapse_nested(name)
    if len(name) <= limit:
        return name
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=-1)
    if cut > 0:
        base, rest = name[:cut], name[cut:]
        keep = max(12, limit // 2)
        if len(base) > keep:  # its head and its tail (…_kernel_cta / …_kernel_warp tell kernels apart)
            head = (keep - 1) * 3 // 5
            name = base[:head] + "…" + base[len(base) - (keep - 1 - head) :] + rest
    return name if len(name) <= limit else name[: limit - 1] + "…"


_NAMESPACE = re.compile(r"(?:\(anonymous namespace\)|\b[A-Za-z_]\w*)::")


def describe(item: Item) -> str:
    """One or two lines about an item under the cursor."""
    where = (
        f"  · {item.step_share_pct:.2f} % of {visible(item.step_label or '')}"
        if item.step_share_pct is not None
        else (f"  · in {visible(item.step_label)}" if item.step_label else "")
    )
    if item.kind == "idle":
        return f"{item.category_label}  ({fmt_ms(item.duration_ns)} ms column){where}"
    ctx = f"\n    inside: {short_name(item.context)}" if item.context else ""
    return f"{item.kind}: {short_name(item.name)}\n    {fmt_ms(item.duration_ns)} ms at {fmt_ms(item.start_ns)} ms · {item.category_label}{where}{ctx}"


def legend() -> Text:
    out = Text(no_wrap=False)
    out.append("GPU  ", style="bold")
    for cat, (glyph, color) in GPU_STYLE.items():
        out.append(glyph * 2, style=color)
        out.append(f" {GPU_LABELS[cat].replace('GPU idle: ', 'idle: ')}  ")
    out.append("\nhost ", style="bold")
    for cat, (glyph, color) in HOST_STYLE.items():
        out.append((glyph * 2) if glyph.strip() else "  ", style=color)
        out.append(f" {HOST_LABELS[cat].split(' (')[0]}  ")
    out.append("\nlanes ", style="bold")
    out.append(
        "GPU all: every stream, idle by the host's reason · sN comp|NCCL|copy: one CUDA stream and what it mostly runs · "
        "T: one host thread · trace: the whole trace, the window in reverse"
    )
    return out


class TimelinePane(Vertical):
    DEFAULT_CSS = """
    TimelinePane { height: 1fr; }
    TimelinePane #tl-title { height: 1; text-style: bold; }
    TimelinePane #tl-detail { height: 1fr; min-height: 4; padding: 0 1; border: round $primary 50%; }
    TimelinePane #tl-legend { height: auto; color: $text-muted; }
    TimelinePane #tl-search { height: 3; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="tl-title", markup=False)
        search = Input(
            placeholder="search kernels, ops and ranges on the timeline (Enter: go · Esc: leave)", id="tl-search"
        )
        search.display = False
        yield search
        yield TimelineView(id="tl-view")
        yield Static("", id="tl-detail", markup=False)
        yield Static(legend(), id="tl-legend")

    launch_info: LaunchInfo | None = None  # api.RankView.kernel_launch; set by the tab

    @property
    def view(self) -> TimelineView:
        return self.query_one(TimelineView)

    def set_model(self, model: TimelineModel, step_index: int) -> None:
        self.view.set_model(model, step_index)

    def on_resize(self) -> None:
        # The legend is also in the help (?): on a short terminal its rows go to the lanes.
        self.query_one("#tl-legend").display = self.size.height >= 30

    def on_timeline_view_moved(self, message: TimelineView.Moved) -> None:
        v = message.view
        model = v.model
        steps = model.segmentation.steps if model else []
        a, b = v.column_window(v.cursor)
        at = model.step_at((a + b) // 2) if model else None
        step = steps[at] if at is not None else None
        total = (model.span[1] - model.span[0]) if model else 1
        zoom = total / max(1, v.end_ns - v.start_ns)
        head = (
            f"{step.label} ({at + 1}/{len(steps)}, {fmt_ms(step.duration_ns)} ms)"
            if step and at is not None
            else "between steps"
            if steps
            else "trace"
        )
        if v.matches:
            m = v.matches[v.match_index]
            name = short_name(m.name, 60) or visible(m.name[:60]) or "(unnamed)"
            tail = (
                f"{v.match_title} {v.match_index + 1}/{len(v.matches)}: {name} "
                f"{duration_label(m.end_ns - m.start_ns)} ms · n/N next/prev · Esc leave"
            )
        else:
            tail = "←/→ cursor  +/− zoom  h/l pan  n/p step  / search"
        # Both have a fixed height (1 and 1fr): no layout pass on every cursor move.
        self.query_one("#tl-title", Static).update(
            Text(f"{visible(head)} · window {window_label(v.start_ns, v.end_ns)} ms · zoom {zoom:.3g}× · {tail}"),
            layout=False,
        )
        self.query_one("#tl-detail", Static).update(detail_text(a, b, message, self.launch_info), layout=False)

    # -- search --------------------------------------------------------------------------------------

    def open_search(self) -> None:
        box = self.query_one("#tl-search", Input)
        box.display = True
        box.focus()

    def close_search(self) -> None:
        self.query_one("#tl-search", Input).display = False
        self.view.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        v = self.view
        self.close_search()
        if v.model is None:
            return
        matches = v.model.find(event.value)
        if not matches:
            self.notify(f"nothing on the timeline matches {event.value!r}", severity="warning", timeout=3, markup=False)
            return
        a, _ = v.column_window(v.cursor)
        first = next((i for i, m in enumerate(matches) if m.start_ns >= a), 0)
        v.set_matches(matches, f"/{event.value}", first)


def launch_line(info: Any) -> str:
    """``launched by aten::conv2d [[32, 3, 224, 224], …] via cudaLaunchKernel · correlation 1234``."""
    parts = []
    if info.operator:
        parts.append(
            f"launched by {short_name(info.operator, 40)}"
            + (f" {visible(info.input_dims[:60])}" if info.input_dims and info.input_dims != "[]" else "")
            + (f" inside {short_name(info.outer_operator, 30)}" if info.outer_operator else "")
        )
    if info.runtime_call:
        parts.append(f"via {visible(info.runtime_call)}")
    parts.append(
        f"stream {info.stream} · correlation {info.correlation}"
        + (f" · External id {info.external_id}" if info.external_id is not None else "")
    )
    return " · ".join(parts)


def detail_text(a: int, b: int, message: TimelineView.Moved, launch_info: LaunchInfo | None = None) -> Text:
    """Every lane's item under the cursor, then the overlap measured over the cursor's column."""
    digits = max(3, 1 - math.floor(math.log10(max(b - a, 1) / 1e6)))
    out = Text.assemble(("at ", "dim"), (f"{a / 1e6:.{digits}f}–{b / 1e6:.{digits}f} ms", "bold"))
    if message.items:
        if message.gpu.kind == "idle":
            out.append(f"   {message.gpu.category_label}", style="dim")
        idle = [visible(lane.label) for lane, item in message.items if item is None]
        if idle:
            out.append(f"   nothing on: {', '.join(idle)}", style="dim")
        if message.overlap is not None:  # before the items: a short terminal clips the box's bottom
            out.append("\noverlap ", style="bold")
            out.append(message.overlap.text())
        for lane, item in message.items:
            if item is None:
                continue
            out.append(f"\n{visible(lane.label):<{GUTTER}}", style="bold")
            out.append(f"{item.kind}: {short_name(item.name, 90)}")
            where = (
                f" · {item.step_share_pct:.2f} % of {visible(item.step_label or '')}"
                if item.step_share_pct is not None
                else ""
            )
            out.append(
                f"  {fmt_ms(item.duration_ns)} ms at {fmt_ms(item.start_ns)} ms · {item.category_label}{where}",
                style="dim",
            )
            if item.context:
                out.append(f" · inside {short_name(item.context, 50)}", style="dim")
            if launch_info is not None and item.kind.endswith("kernel"):
                info = launch_info(item.start_ns, item.name)
                if info is not None:
                    out.append(f"\n{'':<{GUTTER}}{launch_line(info)}", style="dim")
    else:
        out.append("\n")
        out.append("GPU  ", style="bold")
        out.append(describe(message.gpu) + "\n")
        out.append("host ", style="bold")
        out.append(describe(message.host))
    return out
