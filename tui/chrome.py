"""What the trainscope apps share: the key line, the loading screen, the help screen, and the
background-loading machinery (a daemon thread that never touches widgets)."""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, ProgressBar, Static

def gib(b: float | None, digits: int = 1, missing: str = "n/a") -> str:
    """Bytes in GiB (2**30), labelled as such: the apps show device memory, sold in GiB."""
    return missing if b is None else f"{b / 2**30:.{digits}f} GiB"


Progress = Callable[[str, "float | None"], None]
KeySection = tuple[str, Iterable[tuple[str, str]]]


class KeyBar(Static):
    """The bottom line: the keys that matter on the current tab. A plain Static, not Textual's
    Footer: the Footer rebuilds its widgets on every focus change (~45 ms per tab switch)."""

    DEFAULT_CSS = "KeyBar { height: 1; background: $panel; color: $text-muted; padding: 0 1; }"


class Loading(Vertical):
    DEFAULT_CSS = """
    Loading { align: center middle; height: 1fr; }
    Loading Static { width: auto; margin: 1; }
    Loading ProgressBar { width: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("reading the trace…", id="loading-stage")
        yield ProgressBar(total=100, show_eta=False, id="loading-bar")


def keys_text(title: str, sections: Iterable[KeySection], key_width: int = 28) -> Text:
    """Every key of an app, by where it applies (an empty ``where`` prints no heading)."""
    out = Text()
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

    def __init__(self, keys: Text, *more) -> None:
        super().__init__()
        self.keys, self.more = keys, more

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.keys, id="help-keys")
            for i, part in enumerate(self.more):
                yield Static(part, id=f"help-more-{i}")


class BackgroundLoading:
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

    def _post(self, fn: Callable, *args) -> None:
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
        self.query_one("#loading-stage", Static).update(f"{stage}…")
        bar = self.query_one("#loading-bar", ProgressBar)
        if fraction is None:
            bar.update(total=None)
        else:
            bar.update(total=100, progress=100 * fraction)

    def action_toggle_dark(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"


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
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path)) or "."):
            return True
    except OSError:
        return False


def ask_path(app, name: str, what: str, write: Callable[[str], None]) -> None:
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
