"""Memory: device memory in use over the trace, against the device's capacity."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from trainscope.analyzers.views.memory_curve import MemoryCurve
from trainscope.reports.plan import ledger_text_lines
from trainscope.tui.chrome import gib

BLOCKS = " ▁▂▃▄▅▆▇█"


class MemoryChart(Widget):
    """Columns of peak bytes in use, scaled to the peak (a 2.6 GiB peak on a 32 GiB device would fill
    a tenth of the rows if scaled to the capacity; the capacity is in the note above)."""

    DEFAULT_CSS = "MemoryChart { height: 1fr; min-height: 6; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.curve: MemoryCurve | None = None
        self.span: tuple[int, int] = (0, 1)

    def set_curve(self, curve: MemoryCurve | None, span: tuple[int, int]) -> None:
        self.curve, self.span = curve, span
        self.refresh()

    def render(self) -> Text:
        if self.curve is None:
            return Text("")
        gutter = 10
        cols = max(10, self.size.width - gutter)
        rows = max(3, self.size.height - 2)
        peaks = self.curve.binned_peak(self.span[0], self.span[1], cols)
        top = float(max(1, peaks.max())) * 1.05
        levels = peaks / top * rows  # in rows
        out = Text(no_wrap=True, overflow="crop")
        for r in range(rows, 0, -1):
            label = gib(top, 2) if r == rows else (gib(top / 2, 2) if r == (rows + 1) // 2 else "")
            out.append(f"{label:>{gutter - 1}} ", style="dim")
            for lv in levels:
                fill = lv - (r - 1)
                ch = "█" if fill >= 1 else BLOCKS[int(max(0.0, fill) * 8)]
                out.append(ch, style="#3d7fd9")
            out.append("\n")
        out.append(" " * gutter + "└" + "─" * (cols - 1) + "\n", style="dim")
        out.append(
            " " * gutter + f"{self.span[0] / 1e6:.0f} ms".ljust(cols - 10) + f"{self.span[1] / 1e6:.0f} ms", style="dim"
        )
        return out


class MemoryPane(Vertical):
    DEFAULT_CSS = """
    MemoryPane #mem-note { height: auto; padding: 0 1; }
    MemoryPane #mem-ledger { height: auto; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="mem-note", markup=False)
        yield MemoryChart(id="mem-chart")
        yield Static("", id="mem-ledger", markup=False)

    def show(self, curves: list[MemoryCurve], span: tuple[int, int], ledger: dict[str, Any] | None = None) -> None:
        note = self.query_one("#mem-note", Static)
        chart = self.query_one(MemoryChart)
        if ledger:  # analyze --model: the planned ledger next to the measured peak
            self.query_one("#mem-ledger", Static).update(Text("\n".join(ledger_text_lines(ledger)).strip("\n")))
        if not curves:
            note.update(
                "No memory events in this trace: record with torch.profiler.profile(profile_memory=True) "
                "to see memory over time."
            )
            chart.set_curve(None, span)
            return
        c = max(curves, key=lambda x: int(x.allocated.max()) if len(x.allocated) else 0)
        peak = int(c.allocated.max()) if len(c.allocated) else 0
        cap = f" of {gib(c.capacity, 2)} ({100 * peak / c.capacity:.0f} %)" if c.capacity else " (capacity unknown)"
        basis = (
            "allocator totals"
            if c.basis == "absolute"
            else "running sum of allocations since profiling began (this trace has no allocator totals)"
        )
        note.update(
            Text.assemble(
                ("Memory in use on GPU ", "bold"),
                (f"{c.device}", "bold"),
                f" · peak {gib(peak, 2)}{cap} · {len(c.ts)} allocator events · basis: {basis}\n",
                ("chart scale: top = the peak + 5 % (the capacity is in the line above)", "dim"),
            )
        )
        chart.set_curve(c, span)
