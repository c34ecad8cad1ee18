"""A log-log roofline in characters: the device's memory roof (slope = bandwidth) and compute
roofs, with the heaviest kernels as labeled points (A, B, C, … in order of time)."""

from __future__ import annotations

import math

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from trainscope.analyzers.trace.roofline import Roofline

LABELS = "ABCDEFGHIJ"
# Where a label goes when its cell is taken by a heavier kernel's: the nearest free cell, beside
# first (a row is a decade's fraction, a column finer), then above and below.
NUDGES = [(0, 0)] + [
    (dr, dc) for d in (1, 2, 3) for dr, dc in ((0, d), (0, -d), (-d, 0), (d, 0), (-d, d), (d, d), (-d, -d), (d, -d))
]


def roofline_chart(roof: Roofline | None, width: int, height: int) -> list[str]:
    """Lines of the chart (y: achieved TFLOP/s, x: FLOP per byte, both log10), legend last."""
    if roof is None or roof.spec is None or not roof.bandwidth_gbps:
        return ["roofline: no device peaks known (pass --peak-tflops and --peak-bandwidth)"]
    pts = [r for r in roof.rows if r.intensity and r.tflops and r.intensity > 0 and r.tflops > 0]
    if not pts:
        return [f"roofline ({roof.device}): no kernel has both FLOPs and bytes (record with record_shapes=True)"]
    bw = roof.bandwidth_gbps * 1e9
    peak = roof.spec.tensor_tflops
    roofs = sorted({peak, roof.spec.vector.get("fp32", 0.0)} - {0.0})
    xs = [math.log10(r.intensity) for r in pts if r.intensity]  # every point has one (the filter above)
    x0 = math.floor(min(xs + [math.log10(roofs[0] * 1e12 / bw)]) - 0.5)
    x1 = math.ceil(max(xs + [math.log10(peak * 1e12 / bw)]) + 0.5)
    ys = [math.log10(r.tflops) for r in pts if r.tflops]
    y1 = math.ceil(math.log10(peak) + 0.2)
    y0 = max(math.floor(min(ys + [y1 - 4])), y1 - 6)  # kernels far below every roof sit on the bottom row
    plot_w, plot_h = max(20, width - 10), max(5, height - 3 - min(len(pts), len(LABELS)) // 2)
    grid = [[" "] * plot_w for _ in range(plot_h)]

    def col(x: float) -> int:
        return min(plot_w - 1, max(0, int(round((x - x0) / (x1 - x0) * (plot_w - 1)))))

    def row(y: float) -> int:
        return min(plot_h - 1, max(0, int(round((y1 - y) / (y1 - y0) * (plot_h - 1)))))

    for c in range(plot_w):  # the roofs: min(P, I·B) for the tensor peak, dotted for the FP32 vector peak
        x = x0 + (x1 - x0) * c / (plot_w - 1)
        mem = math.log10(10**x * bw / 1e12)
        for p, ch in ((peak, "─"), (roofs[0], "·")) if len(roofs) > 1 else ((peak, "─"),):
            y = min(mem, math.log10(p))
            grid[row(y)][c] = "╱" if mem < math.log10(p) else ch
    taken: set[tuple[int, int]] = set()
    for i in range(len(pts)):  # the heaviest placed first; a label never covers another
        mark = LABELS[i] if i < len(LABELS) else "•"
        r0, c0 = row(ys[i]), col(xs[i])
        cell = (
            next(
                (
                    (r, c)
                    for dr, dc in NUDGES
                    if 0 <= (r := r0 + dr) < plot_h and 0 <= (c := c0 + dc) < plot_w and (r, c) not in taken
                ),
                None,
            )
            if mark != "•"
            else (r0, c0)
        )
        if cell is None or (mark == "•" and cell in taken):
            continue  # an unlabeled kernel where a labeled one sits: the label wins
        grid[cell[0]][cell[1]] = mark
        taken.add(cell)
    lines = []
    for i, g in enumerate(grid):
        y = y1 - (y1 - y0) * i / (plot_h - 1)
        tick = f"{10**y:>7.2g} " if i % max(1, plot_h // 4) == 0 or i == plot_h - 1 else " " * 8
        lines.append(tick + "│" + "".join(g))
    lines.append(" " * 8 + "└" + "─" * plot_w)
    ticks = [" "] * plot_w
    for e in range(x0, x1 + 1):
        s = f"{10**e:g}"
        c = col(e)
        if c + len(s) <= plot_w:
            ticks[c : c + len(s)] = list(s)
    lines.append(" " * 9 + "".join(ticks))
    lines.append(
        f"TFLOP/s vs FLOP/byte · {roof.device}: {roof.bandwidth_gbps:g} GB/s, {peak:g} TFLOP/s tensor (─), "
        f"{roofs[0]:g} FP32 (·)"
    )
    legend = [
        f"{LABELS[i]} {r.short_name[:34]} {r.share_pct:.0f} % {r.bound}" for i, r in enumerate(pts[: len(LABELS)])
    ]
    for i in range(0, len(legend), 2):
        lines.append("  ".join(f"{x:<46}" for x in legend[i : i + 2]).rstrip())
    return lines


class RooflinePlot(Widget):
    """The chart, redrawn at the widget's size."""

    DEFAULT_CSS = "RooflinePlot { height: 18; }"

    roof: reactive[Roofline | None] = reactive(None, always_update=True)  # redrawn whenever set

    def show(self, roof: Roofline | None) -> None:
        self.roof = roof

    def render(self) -> Text:
        w, h = self.size.width or 80, self.size.height or 18
        return Text("\n".join(roofline_chart(self.roof, w, h)))
