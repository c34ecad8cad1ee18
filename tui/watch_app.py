"""The ``trainscope watch`` dashboard (its own Textual app; the analyze app is separate).

Samplers run in threads that never touch widgets: they post :class:`SampleMessage` objects holding
an immutable (status, snapshot) pair. The app appends them to its history and, unless paused,
re-renders the thin views in :mod:`trainscope.tui.watch_widgets`. Keys: ``p`` pause/resume,
``w`` cycle the history window of the plots, ``c`` capture the job's next iterations with
torch.profiler (the Capture tab shows it and its diagnosis), ``?`` help, ``t`` theme, ``q`` leave.

``q`` never stops a job watch did not start: it detaches (``quit_code`` 0, ``detached``). For a job
watch launched, it asks "stop job? y/N": ``y`` stops it (``quit_code`` 130: the caller passes the
interrupt on), ``d`` detaches and leaves it running, ``n``, Enter or Esc go back to the dashboard.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import App
from textual.app import ComposeResult
from textual.app import SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.containers import Vertical
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets import Log
from textual.widgets import Static
from textual.widgets import TabbedContent
from textual.widgets import TabPane

from trainscope.analyzers.live.engine import LiveStatus
from trainscope.api.capture import Capture
from trainscope.api.live import LiveSample
from trainscope.reports.live import split_lines
from trainscope.traces.samples import Snapshot
from trainscope.tui.chrome import HelpScreen
from trainscope.tui.chrome import SafeChrome
from trainscope.tui.chrome import keys_text
from trainscope.tui.keys import binding_rows
from trainscope.tui.keys import common_bindings
from trainscope.tui.keys import palette_commands
from trainscope.tui.watch_widgets import GpuPanel
from trainscope.tui.watch_widgets import HistoryPanel
from trainscope.tui.watch_widgets import banner_text
from trainscope.tui.watch_widgets import capture_text
from trainscope.tui.watch_widgets import findings_text
from trainscope.tui.watch_widgets import host_lines
from trainscope.tui.watch_widgets import process_lines

WINDOWS_S = (60.0, 300.0, 900.0, 3600.0)
SPLIT_BAR = 20  # cells of the where-in-the-step bar (reports.live.split_bar: a letter per part)


def step_lines(shown: list[tuple[LiveStatus, Snapshot]], launched: bool = False) -> list[str]:
    """The step panel's text: the last interval's steps and mean step time, or why there are none
    (said for the state the watch is in: a job watch launched already has the hook)."""
    last = next((s for _, s in reversed(shown) if s.step is not None and s.step.steps), None)
    if last is None:
        mode = shown[-1][1].step_mode if shown else "off"
        if mode == "waiting":
            return ["step hook in the job; waiting for its first DataLoader iteration"]
        if launched:
            return [
                "no step timings yet: the job has not iterated a torch DataLoader"
                if mode in ("off", "on")
                else f"no step timings (step mode {mode})"
            ]
        return [
            f"no step timings (step mode {mode}); launch the job with watch -- COMMAND, or use the opt-in "
            "hook with --pid, for step-exact timing"
        ]
    st = last.step
    return [
        f"{st.steps} steps in the last interval · mean {st.step_ns / st.steps / 1e6:.1f} ms · "
        f"data wait {st.data_wait_pct or 0:.1f} % · longest wait {st.max_wait_ns / 1e6:.1f} ms"
    ] + split_lines(shown[-1][0], bar=SPLIT_BAR, short=True)


MAX_HISTORY = 20_000


class SampleMessage(Message):
    """One interval's immutable result, posted from the sampler thread."""

    def __init__(self, status: LiveStatus, snapshot: Snapshot, captures: tuple[Capture, ...] = ()) -> None:
        super().__init__()
        self.status = status
        self.snapshot = snapshot
        self.captures = captures


EXIT_STOPPED = 130  # the user chose to stop the launched job


class ConfirmStop(ModalScreen[bool | None]):
    """ "stop job? y/N" for a job watch launched: True stop, False detach (``d``), None back to the
    dashboard (``n``, the default: Enter; Esc)."""

    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    ConfirmStop > Static { width: auto; max-width: 80; border: heavy $warning; background: $surface; padding: 1 2; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "stop the job"),
        Binding("d", "answer(False)", "detach"),
        Binding("n,enter,escape,q", "answer(None)", "back"),
    ]

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(
                ("stop job? y/N\n\n", "bold"),
                f"{self.target}\n\n",
                "y  stop it (interrupt, as Ctrl-C would; killed after 10 s)\n"
                "n  no: back to the dashboard (default, also Enter and Esc)\n"
                "d  leave watch; the job runs on",
            ),
            id="confirm-text",
        )

    def action_answer(self, answer: bool | None) -> None:
        self.dismiss(answer)


class WatchApp(SafeChrome, App[None]):
    TITLE = "trainscope watch"
    CSS = """
    #banner { height: auto; min-height: 3; padding: 0 1; border: heavy $accent; }
    #body { height: 1fr; }
    #gpus { width: 1fr; }
    #right { width: 1fr; }
    #findings { height: auto; border: round $warning; padding: 0 1; }
    #status { height: 1; padding: 0 1; background: $boost; }
    #no-gpu { padding: 1; color: $text-muted; }
    #tabs { height: 1fr; }
    #tabs > ContentSwitcher { height: 1fr; }
    #tab-live, #tab-capture, #tab-output { height: 1fr; padding: 0; }
    #capture-text { padding: 0 1; }
    """
    BINDINGS = [
        *common_bindings(show=True),
        Binding("p", "toggle_pause", "pause/resume"),
        Binding("w", "cycle_window", "plot window"),
        Binding("c", "capture", "capture"),
        Binding("1", "tab('tab-live')", "Live tab", show=False),
        Binding("2", "tab('tab-output')", "Output tab", show=False),
        Binding("3", "tab('tab-capture')", "Capture tab", show=False),
    ]

    paused: reactive[bool] = reactive(False)
    window_index: reactive[int] = reactive(0)

    def __init__(
        self,
        title: str = "",
        interval: float = 1.0,
        replay: bool = False,
        clock: Callable[[], float] = time.monotonic,
        launched: bool = False,
        on_capture: Callable[[], Capture | None] | None = None,
        output: Callable[[int], tuple[list[str], int]] | None = None,
    ) -> None:
        super().__init__()
        self.output = output  # the launched job's output: lines numbered n on, and the next number
        self._output_next = 0
        self.on_capture = on_capture  # asks the job for a capture (trainscope.api.Watch.request_capture)
        self.captures: tuple[Capture, ...] = ()  # the latest state of every capture, from the samples
        self.capture_message = ""
        self.target = title
        self.interval = interval
        self.replay = replay
        self.launched = launched  # watch started the job: q asks before stopping it
        self.detached = False  # q left the job running
        self._clock = clock
        self._started = clock()
        self.items: list[tuple[LiveStatus, Snapshot]] = []
        self.quit_code: int | None = None

    # -- data in -------------------------------------------------------------------------------
    def preload(self, items: Iterable[tuple[LiveStatus, Snapshot] | LiveSample]) -> None:
        """Replay: every sample at once, before the app runs (a replaying :class:`trainscope.api.Watch`
        iterates its samples)."""
        self.items = [(i.status, i.snapshot) if isinstance(i, LiveSample) else i for i in items][-MAX_HISTORY:]

    def feed(self, sample: LiveSample) -> None:
        """A live sample of :class:`trainscope.api.Watch` in push mode (``watch.start(on_sample=app.feed)``),
        called on the sampler thread: posted, never drawn there."""
        self.post_message(SampleMessage(sample.status, sample.snapshot, getattr(sample, "captures", ())))

    def on_sample_message(self, message: SampleMessage) -> None:
        self.items.append((message.status, message.snapshot))
        if message.captures or self.captures:
            self.captures = tuple(message.captures)
        if len(self.items) > MAX_HISTORY:
            del self.items[: len(self.items) - MAX_HISTORY]
        if not self.paused:
            self.render_state()

    # -- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="banner")
        with TabbedContent(id="tabs", initial="tab-live"):
            with TabPane("Live", id="tab-live"), Horizontal(id="body"):
                with VerticalScroll(id="gpus"):
                    yield Static("no GPU samples yet", id="no-gpu")
                    yield HistoryPanel("Steps", id="steps", plot="step time ms")
                    yield HistoryPanel("Host", id="host", plot="host CPU %")
                with Vertical(id="right"):
                    yield HistoryPanel("Job processes · data wait", id="procs", plot="data wait % of step")
                    yield Static(id="findings")
            with TabPane("Output", id="tab-output"):
                yield Log(id="job-output", max_lines=5000)
            with TabPane("Capture", id="tab-capture"), VerticalScroll():
                yield Static(id="capture-text")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.title = f"trainscope watch — {self.target}" if self.target else "trainscope watch"
        self.query_one("#findings", Static).border_title = "Findings and fixes"
        self.render_state()
        if self.output is not None:
            self.set_interval(0.25, self.pull_output)
        else:
            self.query_one("#job-output", Log).write_line(
                "the job's output shows here for a job watch launched (watch -- COMMAND)"
            )

    def pull_output(self) -> None:
        """The job's new output lines into the Output tab (they also go to the scrollback on exit)."""
        if self.output is None:
            return
        lines, self._output_next = self.output(self._output_next)
        if lines:
            self.query_one("#job-output", Log).write_lines(lines)

    # -- actions -------------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS_S)

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_capture(self) -> None:
        """c: ask the job for a kernel-level capture of its next iterations; the Capture tab follows it."""
        if self.replay:
            self.capture_message = "a replay cannot capture: the job is not running"
        elif self.on_capture is None:
            self.capture_message = (
                "captures need the step hook in the job: launch it with watch -- COMMAND "
                "(or the opt-in hook with --pid)"
            )
        else:
            cap = self.on_capture()
            if cap is None:
                self.capture_message = "captures are off in this watch"
            else:
                self.capture_message = (
                    f"capture {cap.id}: no capture: {cap.why}"
                    if cap.finished
                    else f"capture {cap.id}: asked the job for its next {cap.steps} iterations"
                )
                self.captures = tuple(c for c in self.captures if c.id != cap.id) + (cap,)
        self.query_one("#tabs", TabbedContent).active = "tab-capture"
        self.render_state()

    async def action_quit(self) -> None:
        if self.launched and not self.replay:
            self.push_screen(ConfirmStop(self.target), self._answered)
            return
        self.detached = not self.replay
        self.quit_code = 0
        self.exit()

    def _answered(self, stop: bool | None) -> None:
        if stop is None:
            return
        self.quit_code = EXIT_STOPPED if stop else 0
        self.detached = not stop
        self.exit()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        rows = binding_rows(self.BINDINGS)
        does = {
            "quit": "leave watch: detach from the job (it runs on); for a job watch launched, asks "
            '"stop job? y/N" (d detaches, n goes back)',
            "capture": "capture the job's next iterations with torch.profiler; diagnosis in the Capture tab",
            "help": "this help (Esc closes)",
            "theme": "toggle dark / light theme",
            "plot window": "plot window: 1 → 5 → 15 → 60 min",
            "pause/resume": "pause / resume the dashboard",
        }
        rows = [(k, does.get(d, d)) for k, d in rows]
        text = keys_text("trainscope watch", [("", rows + [("ctrl+p", "command palette")])], key_width=12)
        text.append(
            "\nPlots are sparklines over the chosen window; the line above each gives its range. "
            "Steps come from the DataLoader hook (watch -- COMMAND).",
            style="dim",
        )
        self.push_screen(HelpScreen(text))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from palette_commands(self, self.BINDINGS)
        yield from super().get_system_commands(screen)

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def watch_paused(self, _: bool) -> None:
        self.render_state()

    def watch_window_index(self, _: int) -> None:
        self.render_state()

    # -- rendering -----------------------------------------------------------------------------
    @property
    def window_s(self) -> float:
        return WINDOWS_S[self.window_index]

    def in_window(self) -> list[tuple[LiveStatus, Snapshot]]:
        """The samples of the plots' window (the last ``window_s`` seconds)."""
        if not self.items:
            return []
        last_t = self.items[-1][1].t
        return [it for it in self.items if it[1].t >= last_t - self.window_s]

    def render_state(self) -> None:
        st, snap = self.items[-1] if self.items else (None, None)
        instants = [(s.t, n) for _, s in self.items for n in s.notes if n.startswith("capture ")] if self.replay else []
        self.query_one("#capture-text", Static).update(capture_text(self.captures, self.capture_message, instants))
        self.query_one("#banner", Static).update(banner_text(st))
        self.query_one("#findings", Static).update(findings_text(st))
        shown = self.in_window()
        if snap is not None:
            self._render_gpus(snap, shown)
            self.query_one("#host", HistoryPanel).show(
                host_lines(snap.host),
                [s.host.cpu_pct or 0.0 for _, s in shown if s.host is not None],
                f"{self.window_s / 60:.0f} min",
            )
            waits = [s.step.data_wait_pct or 0.0 for _, s in shown if s.step is not None]
            window = f"{self.window_s / 60:.0f} min"
            self.query_one("#procs", HistoryPanel).show(process_lines(snap.host, snap, st), waits, window)
            steps = [s.step.step_ns / s.step.steps / 1e6 for _, s in shown if s.step is not None and s.step.steps]
            self.query_one("#steps", HistoryPanel).show(step_lines(shown, self.launched), steps, window)
        state = "PAUSED — p resumes" if self.paused else ("replay" if self.replay else "live")
        t = f"t = {snap.t:.1f} s" if snap else "t = —"
        self.query_one("#status", Static).update(
            Text(
                f"{state}   {t}   samples {len(self.items)}   plots: last {self.window_s:.0f} s   "
                f"interval {self.interval:g} s   watching {self._clock() - self._started:.0f} s"
            )
        )

    def _render_gpus(self, snap: Snapshot, shown: list[tuple[LiveStatus, Snapshot]]) -> None:
        box = self.query_one("#gpus", VerticalScroll)
        if snap.gpus:
            for w in box.query("#no-gpu"):
                w.remove()
        else:
            note = next((n for _, s in self.items for n in s.notes if "NVML" in n), "no GPU samples")
            if box.query("#no-gpu"):
                self.query_one("#no-gpu", Static).update(
                    Text(f"{note}\nNo GPU panels: the host, the job's processes and its steps are still watched.")
                )
        for g in snap.gpus:
            panels = box.query(f"#gpu-{g.index}")
            if panels:
                panel = panels.first(GpuPanel)
            else:
                panel = GpuPanel(g.index)
                box.mount(panel, before=box.query_one("#steps"))
            history = [next((x.util_gpu or 0.0 for x in s.gpus if x.index == g.index), 0.0) for _, s in shown]
            window = f"{self.window_s / 60:.0f} min"
            if panel.is_mounted and panel.children:
                panel.show(g, history, window)
            else:
                self.call_after_refresh(panel.show, g, history, window)
