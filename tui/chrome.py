"""What the trainscope apps share: the key line, the loading screen, the help screen, and the
background-loading machinery (a daemon thread that never touches widgets)."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import Any

from rich.console import RenderableType
from rich.text import Text
from textual.app import App
from textual.app import ComposeResult
from textual.app import SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Size
from textual.screen import ModalScreen
from textual.screen import Screen
from textual.visual import VisualType
from textual.widget import Widget
from textual.widgets import Input
from textual.widgets import ProgressBar
from textual.widgets import Static

from trainscope.traces.safe_text import visible
from trainscope.traces.safe_text import visible_lines
from trainscope.tui.keys import actions
from trainscope.tui.keys import palette_commands
from trainscope.tui.keys import without_duplicates

if TYPE_CHECKING:  # the mixins below are only ever mixed into an App: type-check them as one
    _AppBase = App[Any]
else:
    _AppBase = object


def gib(b: float | None, digits: int = 1, missing: str = "n/a") -> str:
    """Bytes in GiB (2**30), labelled as such: the apps show device memory, sold in GiB."""
    return missing if b is None else f"{b / 2**30:.{digits}f} GiB"


Progress = Callable[[str, "float | None"], None]
KeySection = tuple[str, Iterable[tuple[str, str]]]


def fit_hint(hint: str, width: int) -> str:
    """The key line cut to ``width`` by dropping the tab's own keys from the right, never the
    ``? keys`` and ``q quit`` hints (at 80×24 the line was cut before them)."""
    if len(hint) <= width:
        return hint
    items = hint.split(" · ")
    tail = [i for i in items if i.startswith(("? ", "q "))]
    head = [i for i in items if i not in tail]
    while head and len(" · ".join(head + ["…"] + tail)) > width:
        head.pop()
    out = " · ".join(head + ["…"] + tail) if head else " · ".join(tail)
    return out if len(out) <= width else out[: max(0, width - 1)] + "…"


class KeyBar(Static):
    """The bottom line: the keys that matter on the current tab. A plain Static, not Textual's
    Footer: the Footer rebuilds its widgets on every focus change (~45 ms per tab switch).
    Fitted to the terminal's width, ``? keys`` and ``q quit`` always shown."""

    DEFAULT_CSS = "KeyBar { height: 1; background: $panel; color: $text-muted; padding: 0 1; }"

    def __init__(self, hint: str = "", **kwargs: Any) -> None:
        self.hint = str(hint)
        super().__init__(hint, **kwargs)

    def _width(self) -> int:
        return self.content_size.width or max(1, self.app.size.width - 2)

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        self.hint = str(content)
        super().update(fit_hint(self.hint, self._width()) if self.is_mounted else self.hint, layout=layout)

    def on_resize(self) -> None:
        super().update(fit_hint(self.hint, self._width()), layout=False)


class Loading(Vertical):
    DEFAULT_CSS = """
    Loading { align: center middle; height: 1fr; }
    Loading Static { width: auto; margin: 1; }
    Loading ProgressBar { width: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("reading the trace…", id="loading-stage", markup=False)
        yield ProgressBar(total=100, show_eta=False, id="loading-bar")


class KeysText(Text):
    """The keys of an app, one per line; ``hang``: the column where a key's description starts, so
    a description too long for the screen wraps under itself, not to column 0."""

    hang: int = 0


class HangingText(Widget):
    """Text whose indented lines wrap with a hanging indent at ``hang`` (the help screen's keys)."""

    DEFAULT_CSS = "HangingText { height: auto; }"

    def __init__(self, text: Text, hang: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.text, self.hang = text, hang

    def wrapped(self, width: int) -> Text:
        out = Text(no_wrap=True, overflow="fold")
        console = self.app.console
        for i, line in enumerate(self.text.split("\n", allow_blank=True)):
            if i:
                out.append("\n")
            if line.cell_len <= width or width < self.hang + 12 or not line.plain.startswith("  "):
                out.append_text(line)
                continue
            for j, part in enumerate(line[self.hang :].wrap(console, width - self.hang)):
                if j:
                    out.append("\n")
                out.append_text(line[: self.hang] if j == 0 else Text(" " * self.hang))
                out.append_text(part)
        return out

    def render(self) -> Text:
        return self.wrapped(self.content_size.width or self.app.size.width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.wrapped(width).plain.split("\n"))


def keys_text(title: str, sections: Iterable[KeySection], key_width: int = 28) -> Text:
    """Every key of an app, by where it applies (an empty ``where`` prints no heading)."""
    out = KeysText()
    out.hang = 2 + key_width
    out.append(f"{title} — keys", style="bold")
    out.append("   (Esc closes; ↑/↓ scroll)\n")
    for where, keys in sections:
        if where:
            out.append(f"\n{where}\n", style="bold underline")
        else:
            out.append("\n")
        for key, does in keys:
            out.append(f"  {key:<{key_width}}", style="bold")
            out.append(f"{does}\n")
    return out


class HelpScreen(ModalScreen[None]):
    """A scrollable modal of Rich renderables (the keys first, then legends or notes)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 110; height: 90%; border: round $accent;
                                  background: $surface; padding: 0 1; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def __init__(self, keys: Text, *more: RenderableType) -> None:
        super().__init__()
        self.keys, self.more = keys, more

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            hang = getattr(self.keys, "hang", 0)
            yield HangingText(self.keys, hang, id="help-keys") if hang else Static(self.keys, id="help-keys")
            for i, part in enumerate(self.more):
                yield Static(part, id=f"help-more-{i}")


class Palette(_AppBase):
    """Mixin for an App: ``t`` toggles the theme, and the command palette (ctrl+p) offers the app's
    own bindings first, then Textual's commands less those one of ours already is."""

    def palette_skip(self, action: str) -> bool:
        """Whether the palette leaves ``action`` out now (the analyze app: a tab that is off)."""
        return False

    def palette_more(self) -> list[SystemCommand]:
        """Commands beyond the app's own bindings (the memory app: its table's keys)."""
        return []

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        ours = [*palette_commands(self, self.BINDINGS, skip=self.palette_skip), *self.palette_more()]
        yield from without_duplicates(ours, super().get_system_commands(screen), actions(self.BINDINGS))

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"


class SafeChrome(_AppBase):
    """Mixin for an App: what the app draws around its panes (the header's title and sub-title, the
    notifications) shows a trace's text made visible (traces/safe_text.py). The sub-title is the
    trace's file name and a notification may quote an export path built from it: a name holding
    ``ESC ] 0 ;`` would otherwise retitle the terminal, ``ESC [ 2 J`` clear it."""

    def format_title(self, title: str, sub_title: str) -> Content:
        return super().format_title(visible(title), visible(sub_title))

    def notify(self, message: str, *, title: str = "", **kwargs: Any) -> None:
        super().notify(visible_lines(str(message)), title=visible(title), **kwargs)


class BackgroundLoading(SafeChrome):
    """Mixin for an App: long work (parsing, analysis, HTA) in a daemon thread. Not a Textual
    worker: those live in the default executor, which Python joins at exit, so quitting
    mid-parse would hang until the parse was done. Progress reaches ``#loading-stage`` and
    ``#loading-bar`` through ``call_from_thread``, at most every 50 ms."""

    _last_progress = 0.0

    def _start_daemon(self, target: Callable[[], None]) -> None:
        threading.Thread(target=target, daemon=True, name=f"trainscope-{target.__name__}").start()

    @property
    def _leaving(self) -> bool:
        """The app has been asked to exit (Textual sets ``_exit`` in ``App.exit``)."""
        return bool(getattr(self, "_exit", False))

    def _post(self, fn: Callable[..., object], *args: object) -> None:
        """call_from_thread that tolerates an app that has exited, or is tearing its widgets down
        because the user quit while this thread worked."""
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:
            pass
        except Exception:
            if not self._leaving:
                raise

    def _throttled_progress(self, stage: str, fraction: float | None) -> None:
        """The progress callback to hand to readers running in the daemon thread."""
        now = time.monotonic()
        if now - self._last_progress > 0.05:
            self._last_progress = now
            self._post(self._progress, stage, fraction)

    def _progress(self, stage: str, fraction: float | None) -> None:
        self.query_one("#loading-stage", Static).update(f"{visible(stage)}…")
        bar = self.query_one("#loading-bar", ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=100, progress=100 * fraction)


class PathPrompt(ModalScreen["str | None"]):
    """Where to write an export when the default place cannot be written (Enter writes, Esc cancels)."""

    DEFAULT_CSS = """
    PathPrompt { align: center middle; }
    PathPrompt > Vertical { width: 90%; max-width: 100; height: auto; border: heavy $warning; background: $surface;
                            padding: 0 1; }
    """
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, what: str, default: str, why: str) -> None:
        super().__init__()
        self.what, self.default, self.why = what, default, why

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text.assemble((f"Write the {self.what} where?\n", "bold"), (self.why, "dim")), id="prompt-why")
            yield Input(value=self.default, id="prompt-path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(os.path.abspath(os.path.expanduser(event.value.strip())) if event.value.strip() else None)

    def action_cancel(self) -> None:
        self.dismiss(None)


def writable_dir(path: str) -> bool:
    """Whether a file can be created beside ``path`` (tried, not guessed: root passes os.access checks
    on read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path)) or "."):
            return True
    except OSError:
        return False


def ask_path(app: App[Any], name: str, what: str, write: Callable[[str], None]) -> None:
    """Write ``name`` in the current directory, as an absolute path; when that directory cannot be
    written, ask where (the home directory is offered)."""
    path = os.path.abspath(name)
    if writable_dir(path):
        write(path)
        return
    home = os.path.join(os.path.expanduser("~"), name)
    why = f"{os.path.dirname(path)} is not writable."

    def done(chosen: str | None) -> None:
        if chosen:
            write(chosen)

    app.push_screen(PathPrompt(what, home, why), done)
