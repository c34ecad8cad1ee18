"""Thin views for the watch dashboard: each widget renders one immutable (status, snapshot,
history) state it is handed and keeps none of its own. Pure formatting helpers sit beside them so
the headless output and the panels agree on "n/a"."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline
from textual.widgets import Static

from trainscope.analyzers.live.engine import READY
from trainscope.analyzers.live.engine import LiveStatus
from trainscope.api.capture import Capture
from trainscope.reports.document import AXIS_NAMES
from trainscope.reports.live import capture_cost
from trainscope.reports.live import capture_judgement
from trainscope.reports.live import live_headline
from trainscope.reports.live import rank_lines
from trainscope.traces.safe_text import visible_lines
from trainscope.traces.samples import GpuSample
from trainscope.traces.samples import HostSample
from trainscope.traces.samples import Snapshot
from trainscope.tui.chrome import gib

_AXIS_STYLE = {
    "data": "bold white on dark_orange3",
    "algorithm": "bold white on dark_green",
    "machine": "bold white on purple4",
    "balanced": "bold white on grey30",
    "insufficient_evidence": "bold white on grey23",
}


def na(v: float | None, fmt: str = "{:.0f}", unit: str = "") -> str:
    return "n/a" if v is None else fmt.format(v) + unit


def bar(pct: float | None, width: int = 20) -> str:
    if pct is None:
        return "·" * width
    n = int(round(max(0.0, min(100.0, pct)) / 100 * width))
    return "█" * n + "·" * (width - n)


def gpu_lines(g: GpuSample) -> list[str]:
    if g.lost:
        return [f"GPU {g.index} {g.name or ''}".rstrip(), "LOST: NVML reports the GPU fell off the bus"]
    lines = [
        f"GPU {g.index}  {g.name or ''}".rstrip(),
        f"util  {bar(g.util_gpu)} {na(g.util_gpu, unit=' %')}   mem ctrl {na(g.util_mem, unit=' %')}",
        f"mem   {bar(g.mem_pct)} {gib(g.mem_used)} / {gib(g.mem_total)}",
        f"power {na(g.power_w, unit=' W')} / {na(g.power_limit_w, unit=' W')}   SM {na(g.sm_clock_mhz, unit=' MHz')}   "
        f"{na(g.temperature_c, unit=' °C')}",
        f"PCIe  tx {na(None if g.pcie_tx_bps is None else g.pcie_tx_bps / 1e9, '{:.2f}', ' GB/s')}  "
        f"rx {na(None if g.pcie_rx_bps is None else g.pcie_rx_bps / 1e9, '{:.2f}', ' GB/s')}",
        f"GPM   SM {na(g.sm_util, unit=' %')}  tensor {na(g.tensor_util, unit=' %')}  DRAM {na(g.dram_bw_util, unit=' %')}",
    ]
    events = [e for e in (g.clock_events or ()) if e != "gpu_idle"]
    lines.append("clocks " + (", ".join(events) if events else ("n/a" if g.clock_events is None else "no slowdown")))
    if g.processes:
        lines.append("procs " + ", ".join(f"{p.pid} ({gib(p.used_bytes)})" for p in g.processes[:4]))
    return lines


def host_lines(h: HostSample | None) -> list[str]:
    if h is None:
        return ["host: n/a"]
    cores = " ".join(f"{c:3.0f}" for c in h.per_core[:16]) + (" …" if len(h.per_core) > 16 else "")
    return [
        f"CPU   {bar(h.cpu_pct)} {na(h.cpu_pct, unit=' %')}   I/O wait {na(h.iowait_pct, '{:.1f}', ' %')}",
        f"cores {cores}" if h.per_core else "cores n/a",
        f"mem   {gib(h.mem_used)} / {gib(h.mem_total)}   disk read "
        f"{na(None if h.disk_read_bps is None else h.disk_read_bps / 1e6, '{:.1f}', ' MB/s')}",
    ]


def process_lines(h: HostSample | None, snap: Snapshot, st: LiveStatus | None) -> list[str]:
    out = []
    for role, label in (("main", "training process"), ("workers", "DataLoader workers"), ("other", "other")):
        g = h.group(role) if h else None
        if g is None:
            continue
        if role == "main" and g.count > 1:
            label = "ranks (training)"
        per = f" ({g.cpu_pct / g.count:.0f} % each)" if role == "workers" and g.count and g.cpu_pct is not None else ""
        out.append(f"{label:19s} ×{g.count:<3d} CPU {na(g.cpu_pct, unit=' %')}{per}  RSS {gib(g.rss)}")
    out += rank_lines(st)
    s = st.stats if st else None
    mode = snap.step_mode
    if s is not None and s.data_wait_pct is not None:
        out.append(
            f"step-exact  {s.steps} steps, mean {na(s.step_ms, '{:.1f}', ' ms')}, "
            f"waiting on data {s.data_wait_pct:.1f} %  {bar(s.data_wait_pct, 16)}"
        )
    else:
        out.append(f"step-exact  {mode}")
    return out or ["no process tree (watching GPUs only)"]


def banner_text(st: LiveStatus | None) -> Text:
    if st is None:
        return Text(" waiting for the first sample… ", style="bold")
    style = _AXIS_STYLE.get(st.verdict.axis, "bold") if st.state == READY else "bold black on yellow"
    t = Text(f" {live_headline(st)} ", style=style)
    if st.state == READY and st.verdict.bottleneck:
        t.append(f"  confidence {st.verdict.confidence:.2f}", style="bold")
    t.append("\n" + st.verdict.summary)
    for e in st.verdict.evidence[:4]:
        mark = {True: "✔", False: "✘", None: " "}[e.meets]
        val = "n/a" if e.value is None else f"{e.value:g} {e.unit}"
        t.append(f"\n {mark} {e.metric}: {val} {e.threshold}".rstrip())
    return t


def findings_text(st: LiveStatus | None) -> Text:
    """Plain text (never markup: ids and code hold brackets)."""
    return Text(visible_lines(_findings_lines(st)))


def _findings_lines(st: LiveStatus | None) -> str:
    if st is None or (st.state != READY and not st.findings):
        return "Findings appear once the window holds enough samples."
    lines = [f"[{f.severity}] {f.id}: {f.title}" for f in st.findings] or ["no findings"]
    for fx in st.fixes[:3]:
        proj = f"  (up to {fx.projected_speedup:.2f}× faster)" if fx.projected_speedup else ""
        lines.append(f"fix: {fx.title}{proj}")
        lines += [f"     {line}" for line in fx.change.splitlines()]
    if len(st.changes) > 1:
        lines.append("changes: " + " → ".join(f"{c.t:.0f}s {AXIS_NAMES.get(c.axis, c.axis)}" for c in st.changes[-4:]))
    return "\n".join(lines)


def capture_text(captures: Sequence[Capture], message: str = "", instants: Sequence[tuple[float, str]] = ()) -> Text:
    """The Capture tab: each capture (newest first), its diagnosis beside what the counters said;
    in a replay, the capture instants the recording noted (``instants``: (t, note))."""
    lines: list[str] = [message, ""] if message else []
    if not captures and instants:
        lines.append("Captures noted in the recording (the traces are where the notes say):")
        lines += [f"  {t:7.1f} s  {note}" for t, note in instants]
        return Text(visible_lines("\n".join(lines)))
    if not captures:
        lines.append(
            "No capture yet. c asks the job for a torch.profiler trace of its next iterations "
            "(also --capture-at, --capture-on); it is diagnosed as `trainscope analyze` would."
        )
        return Text(visible_lines("\n".join(lines)))
    for c in reversed(list(captures)):
        lines.append(f"capture {c.id} · {c.trigger} · asked at {c.requested_t:.1f} s · {c.status}")
        if c.counters:
            lines.append(f"  counters then:  {c.counters}")
        if c.status in ("requested", "capturing"):
            lines.append(
                f"  {'waiting for an iteration boundary' if c.status == 'requested' else 'profiling'} "
                f"({c.steps} iterations)…"
            )
        elif c.status == "analyzing":
            lines.append(f"  {len(c.during_ms)} iterations captured; analyzing {c.path}…")
        elif c.status != "done":
            lines.append(f"  no capture: {c.why}")
        else:
            d = c.to_dict()
            lines.append(
                f"  trace says:     {(c.verdict_line or '').removeprefix('trainscope: ')}  ({capture_cost(d)})"
            )
            if capture_judgement(d):
                lines.append(f"  judged:         {capture_judgement(d)}")
            if c.summary:
                lines.append(f"  {c.summary}")
            lines += [f"    {e}" for e in c.evidence]
            if c.breakdown:
                lines.append("  step breakdown: " + " · ".join(c.breakdown_lines()))
            if c.top_kernels:
                lines.append("  top kernels:")
                lines += [f"    {k}" for k in c.top_kernels]
            if c.ranks:
                lines.append("  ranks:")
                lines += [f"    {r}" for r in c.ranks]
            lines.append(f"  {c.overhead_text()}")
            lines.append(f"  trace: {c.path}")
        lines.append("")
    return Text(visible_lines("\n".join(lines)))


class GpuPanel(Vertical):
    """One GPU: its numbers and its utilization history."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; border: round $accent; padding: 0 1; }
    GpuPanel Sparkline { height: 2; }
    GpuPanel .plot-label { color: $text-muted; }
    """

    def __init__(self, index: int) -> None:
        super().__init__(id=f"gpu-{index}")
        self.index = index

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-text")
        yield Static("", classes="plot-label")
        yield Sparkline([], id="gpu-history")

    def show(self, g: GpuSample, history: Sequence[float], window: str = "") -> None:
        self.border_title = f"GPU {g.index}"
        self.query_one("#gpu-text", Static).update(Text("\n".join(gpu_lines(g))))
        self.query_one(".plot-label", Static).update(plot_label("GPU utilization %", history, window))
        self.query_one("#gpu-history", Sparkline).data = list(history) or [0.0]


def plot_label(what: str, history: Sequence[float], window: str = "") -> Text:
    """The line above a plot: what it shows, over which window, and its range (a sparkline has no axis)."""
    xs = [x for x in history if x is not None]
    rng = f"min {min(xs):.1f} · max {max(xs):.1f} · now {xs[-1]:.1f}" if xs else "no samples yet"
    return Text(f"▁▃▅ {what}{f', last {window}' if window else ''}: {rng}")


class HistoryPanel(Vertical):
    """Text above a labeled history plot (host CPU, data wait, step time)."""

    DEFAULT_CSS = """
    HistoryPanel { height: auto; border: round $primary; padding: 0 1; }
    HistoryPanel Sparkline { height: 2; }
    HistoryPanel .plot-label { color: $text-muted; }
    """

    def __init__(self, title: str, id: str, plot: str = "") -> None:
        super().__init__(id=id)
        self.border_title = title
        self.plot = plot  # what the plot shows, with its unit

    def compose(self) -> ComposeResult:
        yield Static(classes="panel-text")
        yield Static("", classes="plot-label")
        yield Sparkline([], classes="panel-history")

    def show(self, lines: list[str], history: Sequence[float], window: str = "") -> None:
        self.query_one(".panel-text", Static).update(Text("\n".join(lines)))
        self.query_one(".plot-label", Static).update(plot_label(self.plot, history, window))
        self.query_one(".panel-history", Sparkline).data = list(history) or [0.0]
