"""The ``trainscope watch`` dashboard (its own Textual app; the analyze app is separate).

Samplers run in threads that never touch widgets: they post :class:`SampleMessage` objects holding
an immutable (status, snapshot) pair. The app appends them to its history and, unless paused,
re-renders the thin views in :mod:`trainscope.tui.watch_widgets`. Keys: ``p`` pause/resume,
``w`` cycle the history window of the plots, ``q`` quit (ends the watch; the job keeps running
only if it was attached with --pid).
"""
from __future__ import annotations

import time
from typing import Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Footer, Static

from trainscope.analyzers.live import LiveStatus
from trainscope.traces.samples import Snapshot
from trainscope.tui.watch_widgets import GpuPanel, HistoryPanel, banner_text, findings_text, host_lines, process_lines

WINDOWS_S = (60.0, 300.0, 900.0, 3600.0)
MAX_HISTORY = 20_000


class SampleMessage(Message):
    """One interval's immutable result, posted from the sampler thread."""

    def __init__(self, status: LiveStatus, snapshot: Snapshot) -> None:
        super().__init__()
        self.status = status
        self.snapshot = snapshot


class WatchApp(App):
    TITLE = "trainscope watch"
    CSS = """
    #banner { height: auto; min-height: 3; padding: 0 1; border: heavy $accent; }
    #body { height: 1fr; }
    #gpus { width: 1fr; }
    #right { width: 1fr; }
    #findings { height: auto; border: round $warning; padding: 0 1; }
    #status { height: 1; padding: 0 1; background: $boost; }
    #no-gpu { padding: 1; color: $text-muted; }
    """
    BINDINGS = [Binding("p", "toggle_pause", "pause/resume"), Binding("w", "cycle_window", "plot window"),
                Binding("q", "quit", "quit")]

    paused: reactive[bool] = reactive(False)
    window_index: reactive[int] = reactive(0)

    def __init__(self, title: str = "", interval: float = 1.0, replay: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.target = title
        self.interval = interval
        self.replay = replay
        self._clock = clock
        self._started = clock()
        self.items: list[tuple[LiveStatus, Snapshot]] = []
        self.quit_code: int | None = None

    # -- data in -------------------------------------------------------------------------------
    def preload(self, items: list[tuple[LiveStatus, Snapshot]]) -> None:
        """Replay: every sample at once, before the app runs."""
        self.items = list(items)[-MAX_HISTORY:]

    def on_sample_message(self, message: SampleMessage) -> None:
        self.items.append((message.status, message.snapshot))
        if len(self.items) > MAX_HISTORY:
            del self.items[: len(self.items) - MAX_HISTORY]
        if not self.paused:
            self.render_state()

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="banner")
        with Horizontal(id="body"):
            yield VerticalScroll(Static("no GPU samples yet", id="no-gpu"), id="gpus")
            with Vertical(id="right"):
                yield HistoryPanel("Host", id="host")
                yield HistoryPanel("Job processes · data wait", id="procs")
                yield Static(id="findings")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"trainscope watch — {self.target}" if self.target else "trainscope watch"
        self.query_one("#findings", Static).border_title = "Findings and fixes"
        self.render_state()

    # -- actions -------------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS_S)

    def action_quit(self) -> None:
        self.quit_code = 130 if not self.replay else 0
        self.exit()

    def watch_paused(self, _: bool) -> None:
        self.render_state()

    def watch_window_index(self, _: int) -> None:
        self.render_state()

    # -- rendering -----------------------------------------------------------------------------
    @property
    def window_s(self) -> float:
        return WINDOWS_S[self.window_index]

    def visible(self) -> list[tuple[LiveStatus, Snapshot]]:
        if not self.items:
            return []
        last_t = self.items[-1][1].t
        return [it for it in self.items if it[1].t >= last_t - self.window_s]

    def render_state(self) -> None:
        if not self.is_mounted:
            return
        st, snap = self.items[-1] if self.items else (None, None)
        self.query_one("#banner", Static).update(banner_text(st))
        self.query_one("#findings", Static).update(findings_text(st))
        shown = self.visible()
        if snap is not None:
            self._render_gpus(snap, shown)
            self.query_one("#host", HistoryPanel).show(
                host_lines(snap.host), [s.host.cpu_pct or 0.0 for _, s in shown if s.host is not None])
            waits = [s.step.data_wait_pct or 0.0 for _, s in shown if s.step is not None]
            self.query_one("#procs", HistoryPanel).show(process_lines(snap.host, snap, st), waits)
        state = "PAUSED — p resumes" if self.paused else ("replay" if self.replay else "live")
        t = f"t = {snap.t:.1f} s" if snap else "t = —"
        self.query_one("#status", Static).update(Text(
            f"{state}   {t}   samples {len(self.items)}   plots: last {self.window_s:.0f} s   "
            f"interval {self.interval:g} s   watching {self._clock() - self._started:.0f} s"))

    def _render_gpus(self, snap: Snapshot, shown: list[tuple[LiveStatus, Snapshot]]) -> None:
        box = self.query_one("#gpus", VerticalScroll)
        if snap.gpus:
            for w in box.query("#no-gpu"):
                w.remove()
        else:
            note = next((n for _, s in self.items for n in s.notes if "NVML" in n), "no GPU samples")
            if box.query("#no-gpu"):
                self.query_one("#no-gpu", Static).update(Text(note))
        for g in snap.gpus:
            panels = box.query(f"#gpu-{g.index}")
            if panels:
                panel = panels.first(GpuPanel)
            else:
                panel = GpuPanel(g.index)
                box.mount(panel)
            history = [next((x.util_gpu or 0.0 for x in s.gpus if x.index == g.index), 0.0) for _, s in shown]
            if panel.is_mounted and panel.children:
                panel.show(g, history)
            else:
                self.call_after_refresh(panel.show, g, history)
