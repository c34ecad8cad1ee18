"""Ranks side by side: one lane group per rank on a common time axis (each rank's clock shifted by
the clock offset its collectives' ends give, :mod:`trainscope.analyzers.ranks.lanes`), the
collectives a row under each rank's GPU lane, the ends of the collectives matched across ranks
connected by a rule between the groups, and each collective's late arrival (the rank the others
waited for) marked ``!`` in red."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.widget import Widget

from trainscope.analyzers.views.timeline import TimelineModel
from trainscope.traces.safe_text import visible
from trainscope.tui.palette import GPU_STYLE
from trainscope.tui.timeline import GUTTER
from trainscope.tui.timeline import axis_labels
from trainscope.tui.timeline import window_bindings
from trainscope.tui.timeline import window_label

MAX_RANKS = 8  # lane groups drawn at once (the slowest first); the table lists every rank
LATE = "bold red"
CONNECT = "magenta"


@dataclass
class RankLanes:
    """One rank as the side-by-side view draws it."""

    label: str
    index: int  # position among the report's ranks
    model: TimelineModel
    shift_ns: float  # model time (ns from the rank's trace origin) + shift = the common clock, from its origin


class RanksTimeline(Widget, can_focus=True):
    DEFAULT_CSS = """
    RanksTimeline { height: auto; min-height: 4; }
    RanksTimeline:focus { background: $boost; }
    """
    BINDINGS = [
        *window_bindings(),
        Binding("a", "fit_all", "every rank's whole trace", show=False),
        Binding("n", "next_late(1)", "next late arrival", show=False),
        Binding("N", "next_late(-1)", "previous late arrival", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ranks: list[RankLanes] = []
        self.sb: Any = None  # api.Report.side_by_side(): analyzers.ranks.lanes.SideBySide
        self.origin_ns = 0.0  # the common clock's zero (absolute ns)
        self.start_ns, self.end_ns = 0, 1
        self.late_index = -1

    def show(self, ranks: list[RankLanes], sb: Any, origin_ns: float) -> None:
        self.ranks, self.sb, self.origin_ns = ranks, sb, origin_ns
        self.action_fit_all()
        self.refresh(layout=True)

    # -- geometry ------------------------------------------------------------------------------

    @property
    def columns(self) -> int:
        return max(10, (self.size.width or self.app.size.width) - GUTTER - 1)

    @property
    def span(self) -> tuple[int, int]:
        lo = min(r.model.span[0] + r.shift_ns for r in self.ranks)
        hi = max(r.model.span[1] + r.shift_ns for r in self.ranks)
        return int(lo), int(hi)

    def col(self, t_ns: float) -> int:
        """The column of an instant on the common clock (relative to ``origin_ns``)."""
        return int((t_ns - self.start_ns) / max(1, self.end_ns - self.start_ns) * self.columns)

    def show_window(self, start: float, end: float) -> None:
        lo, hi = self.span
        width = min(max(end - start, 10_000), hi - lo)
        start = max(lo, min(start, hi - width))
        self.start_ns, self.end_ns = int(start), int(start + width)
        self.refresh()
        pane = self.parent
        if pane is not None and hasattr(pane, "on_ranks_timeline_moved"):
            pane.on_ranks_timeline_moved()

    def action_fit_all(self) -> None:
        if self.ranks:
            self.show_window(*self.span)

    def action_zoom(self, factor: float) -> None:
        mid = (self.start_ns + self.end_ns) / 2
        half = (self.end_ns - self.start_ns) * factor / 2
        self.show_window(mid - half, mid + half)

    def action_pan(self, fraction: float) -> None:
        shift = (self.end_ns - self.start_ns) * fraction
        self.show_window(self.start_ns + shift, self.end_ns + shift)

    def late_arrivals(self) -> list[Any]:
        return [c for c in self.sb.shared if c.late_rank is not None] if self.sb else []

    def action_next_late(self, delta: int) -> None:
        late = self.late_arrivals()
        if not late:
            return
        self.late_index = (self.late_index + delta) % len(late)
        c = late[self.late_index]
        a = min(s for s in c.starts if s is not None) - self.origin_ns
        b = max(e for e in c.ends if e is not None) - self.origin_ns
        pad = (b - a) * 0.5
        self.show_window(a - pad, b + pad)

    # -- drawing -------------------------------------------------------------------------------

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 3 * len(self.ranks)  # the axis, then GPU, collectives and joins per rank (no joins under the last)

    def _connectors(self, cols: int) -> list[int]:
        out = []
        for c in self.sb.shared if self.sb else ():
            k = self.col(c.end_ns - self.origin_ns)
            if 0 <= k < cols:
                out.append(k)
        return out

    def render(self) -> Text:
        if not self.ranks or self.sb is None:
            return Text("ranks side by side: preparing…", style="dim")
        cols = self.columns
        out = Text(no_wrap=True, overflow="crop")
        axis = [" "] * cols
        for c, label in axis_labels(self.start_ns, self.end_ns, cols):
            axis[c : c + len(label)] = list(label[: cols - c])
        out.append(f"{'ms':<{GUTTER}}" + "".join(axis), style="dim")
        joins = self._connectors(cols)
        for g, r in enumerate(self.ranks):
            out.append("\n")
            view = r.model.lane("gpu", int(self.start_ns - r.shift_ns), int(self.end_ns - r.shift_ns), cols)
            out.append(f"{visible(r.label):<{GUTTER}}"[:GUTTER], style="bold")
            dom = view.dominant.tolist()
            c = 0
            while c < cols:
                e = c + 1
                while e < cols and dom[e] == dom[c]:
                    e += 1
                glyph, color = GPU_STYLE[view.categories[dom[c]]]
                out.append(glyph * (e - c), style=color)
                c = e
            out.append("\n")
            out.append(f"{'  coll':<{GUTTER}}", style="dim")
            out.append_text(self._collective_row(g, r, cols))
            if g < len(self.ranks) - 1:
                line = [" "] * cols
                for k in joins:
                    line[k] = "│"
                out.append("\n")
                out.append(" " * GUTTER + "".join(line), style=CONNECT)
        return out

    def _collective_row(self, g: int, r: RankLanes, cols: int) -> Text:
        cells = [(" ", "")] * cols
        for s, e, _ in self.sb.own[r.index]:
            a, b = self.col(s - self.origin_ns), self.col(e - self.origin_ns)
            for k in range(max(0, a), min(cols, b + 1)):
                cells[k] = ("─", CONNECT)
            if 0 <= b < cols:
                cells[b] = ("┤", f"bold {CONNECT}")
        for c in self.sb.shared:
            if c.late_rank != r.index or c.starts[r.index] is None:
                continue
            a = self.col(c.starts[r.index] - self.origin_ns)
            b = self.col(c.ends[r.index] - self.origin_ns)
            for k in range(max(0, a), min(cols, b)):
                cells[k] = ("━", LATE)
            if 0 <= a < cols:
                cells[a] = ("!", LATE)
        out = Text()
        for ch, style in cells:
            out.append(ch, style=style)
        return out

    def title(self) -> str:
        if not self.ranks or self.sb is None:
            return ""
        shared = len(self.sb.shared)
        parts = [
            f"{len(self.ranks)} ranks on one clock · window {window_label(self.start_ns, self.end_ns)} ms · "
            f"{shared} collectives matched across ranks (│ joins their ends)"
        ]
        story = self.sb.story
        cold = sum(1 for c in self.sb.shared if c.cold)
        if cold:
            parts.append(f"{cold} left out as cold start{'s' * (cold != 1)}")
        for r in self.ranks:
            rl = story.ranks[r.index] if story is not None and r.index < len(story.ranks) else None
            if rl is None or not rl.last_in:
                continue
            parts.append(  # the story's figures: the same the reports print
                f"{visible(r.label)} last at {rl.last_in} of {story.considered} "
                f"(mean {rl.mean_late_ms:.1f} ms, ! up to {rl.max_late_ms:.1f} ms late)"
            )
        return " · ".join(parts)
