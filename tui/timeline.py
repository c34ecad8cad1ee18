"""The timeline screen: GPU and host lanes on one time axis, with zoom, pan, step navigation and a
cursor that says what is under it on both lanes."""
from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from trainscope.analyzers.timeline import GPU_LABELS, HOST_LABELS, Item, TimelineModel
from trainscope.reports.safe_text import visible
from trainscope.tui.palette import GPU_STYLE, HOST_STYLE

GUTTER = 6  # "GPU   " / "host  "
MIN_WINDOW_NS = 10_000  # 10 µs: finer than any kernel launch gap worth seeing


def fmt_ms(ns: float) -> str:
    ms = ns / 1e6
    if abs(ms) >= 100:
        return f"{ms:.0f}"
    if abs(ms) >= 1:
        return f"{ms:.1f}"
    return f"{ms:.3f}"


class TimelineView(Widget, can_focus=True):
    """Thin view: draws ``model`` over [start, end) with a cursor column; keys change the window."""

    DEFAULT_CSS = """
    TimelineView { height: 7; }
    TimelineView:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "cursor(-1)", "cursor ←", show=False),
        Binding("right", "cursor(1)", "cursor →", show=False),
        Binding("shift+left", "cursor(-8)", "cursor ← ×8", show=False),
        Binding("shift+right", "cursor(8)", "cursor → ×8", show=False),
        Binding("h", "pan(-0.25)", "pan ←", show=False),
        Binding("l", "pan(0.25)", "pan →", show=False),
        Binding("plus,equals_sign,i", "zoom(0.5)", "zoom in"),
        Binding("minus,o", "zoom(2)", "zoom out", show=False),
        Binding("n,right_square_bracket", "step(1)", "next step"),
        Binding("p,left_square_bracket", "step(-1)", "prev step", show=False),
        Binding("0,f", "fit_step", "fit step", show=False),
        Binding("a", "fit_all", "whole trace", show=False),
        Binding("home", "cursor_to(0)", "cursor to start", show=False),
        Binding("end", "cursor_to(-1)", "cursor to end", show=False),
    ]

    start_ns: reactive[int] = reactive(0)
    end_ns: reactive[int] = reactive(1)
    cursor: reactive[int] = reactive(0)
    step_index: reactive[int] = reactive(0)

    class Moved(Message):
        """The window or cursor changed: what is under the cursor now, on both lanes."""

        def __init__(self, view: "TimelineView", gpu: Item, host: Item) -> None:
            super().__init__()
            self.view = view
            self.gpu = gpu
            self.host = host

    def __init__(self, model: TimelineModel | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model

    # -- state -----------------------------------------------------------------------------------

    def set_model(self, model: TimelineModel, step_index: int = 0) -> None:
        self.model = model
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
        width = min(end - start, (hi - lo) * 1.05)
        start = int(min(max(start, lo - 0.025 * (hi - lo)), hi - width * 0.5))
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
        self.step_index = index
        st = steps[index]
        self.cursor = 0
        self.show_window(st.start_ns, st.end_ns)

    def _moved(self) -> None:
        self.cursor = max(0, min(self.cursor, self.columns - 1))
        if self.model is not None:
            a, b = self.column_window(self.cursor)
            self.post_message(self.Moved(self, self.model.item_at("gpu", a, b), self.model.item_at("host", a, b)))
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

    def render(self) -> Text:
        if self.model is None:
            return Text("no timeline")
        cols = self.columns
        gpu = self.model.lane("gpu", self.start_ns, self.end_ns, cols)
        host = self.model.lane("host", self.start_ns, self.end_ns, cols)
        out = Text(no_wrap=True, overflow="crop")
        out.append(self._axis(cols))
        out.append("\n")
        out.append(self._ticks(cols))
        for label, view, style in (("GPU", gpu, GPU_STYLE), ("GPU", gpu, GPU_STYLE), ("host", host, HOST_STYLE),
                                   ("host", host, HOST_STYLE)):
            out.append("\n")
            out.append(f"{label:<{GUTTER}}", style="bold")
            self._append_runs(out, view, style)
        out.append("\n")
        out.append(" " * (GUTTER + self.cursor) + "▲", style="bold")
        return out

    def _append_runs(self, out: Text, view, style: dict[str, tuple[str, str]]) -> None:
        """One styled span per run of equal cells (not per cell): rendering stays cheap at any width."""
        dominant = view.dominant.tolist()
        c = 0
        while c < len(dominant):
            k = dominant[c]
            end = c + 1
            while end < len(dominant) and dominant[end] == k and end != self.cursor:
                end += 1
            if c == self.cursor:
                end = c + 1
            glyph, color = style[view.categories[k]]
            out.append(glyph * (end - c), style=f"{color} reverse" if c == self.cursor else color)
            c = end

    def _ticks(self, cols: int) -> Text:
        """Step boundaries (┃) and a tick every 16 columns (│)."""
        line = [" "] * cols
        for c in range(0, cols, 16):
            line[c] = "╵"
        starts = self.model.step_starts
        width = (self.end_ns - self.start_ns) / cols
        for s in starts:
            c = int((s - self.start_ns) / width)
            if 0 <= c < cols:
                line[c] = "┃"
        return Text(" " * GUTTER + "".join(line), style="dim")

    def _axis(self, cols: int) -> Text:
        """Milliseconds from the start of the trace at every 16th column."""
        text = [" "] * (GUTTER + cols)
        label = "ms"
        text[:len(label)] = label
        width = (self.end_ns - self.start_ns) / cols
        for c in range(0, cols, 16):
            s = fmt_ms(self.start_ns + c * width)
            if GUTTER + c + len(s) <= len(text):
                text[GUTTER + c:GUTTER + c + len(s)] = s
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
    from trainscope.reports.safe_text import visible

    name = visible(name.removeprefix("void "))  # a trace's name never drives the terminal
    return name if len(name) <= limit else name[: limit - 1] + "…"


def describe(item: Item) -> str:
    """One or two lines about an item under the cursor."""
    where = f"  · {item.step_share_pct:.2f} % of {item.step_label}" if item.step_share_pct is not None else (
        f"  · in {item.step_label}" if item.step_label else "")
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
        out.append(glyph * 2, style=color)
        out.append(f" {HOST_LABELS[cat].split(' (')[0]}  ")
    return out


class TimelinePane(Vertical):
    DEFAULT_CSS = """
    TimelinePane { height: 1fr; }
    TimelinePane #tl-title { height: 1; text-style: bold; }
    TimelinePane #tl-detail { height: auto; min-height: 4; padding: 0 1; border: round $primary 50%; }
    TimelinePane #tl-legend { height: auto; color: $text-muted; }
    """

    def compose(self):
        yield Static("", id="tl-title")
        yield TimelineView(id="tl-view")
        yield Static("", id="tl-detail")
        yield Static(legend(), id="tl-legend")

    @property
    def view(self) -> TimelineView:
        return self.query_one(TimelineView)

    def set_model(self, model: TimelineModel, step_index: int) -> None:
        self.view.set_model(model, step_index)

    def on_timeline_view_moved(self, message: TimelineView.Moved) -> None:
        v = message.view
        model = v.model
        steps = model.segmentation.steps if model else []
        step = steps[v.step_index] if steps else None
        total = (model.span[1] - model.span[0]) if model else 1
        zoom = total / max(1, v.end_ns - v.start_ns)
        head = (f"{step.label} ({v.step_index + 1}/{len(steps)}, {fmt_ms(step.duration_ns)} ms)" if step else "trace")
        self.query_one("#tl-title", Static).update(Text(
            f"{visible(head)} · window {fmt_ms(v.start_ns)}–{fmt_ms(v.end_ns)} ms · zoom {zoom:.3g}× · "
            "←/→ cursor  +/− zoom  h/l pan  n/p step"))
        a, _ = v.column_window(v.cursor)
        self.query_one("#tl-detail", Static).update(
            Text.assemble(("at ", "dim"), (f"{fmt_ms(a)} ms\n", "bold"), ("GPU  ", "bold"), describe(message.gpu) + "\n",
                          ("host ", "bold"), describe(message.host)))
