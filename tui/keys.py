"""One key map for every trainscope app (analyze, diff, plan, watch).

The same letter does the same thing everywhere: ``?`` help, ``/`` search, ``s`` sort, ``t`` theme,
``e`` export, ``y`` copy, ``q`` quit. ``t`` was chosen for the theme because no app uses it for
anything else (``d`` is the device in plan). An app binds only the entries that apply to it, and
its help screen and command palette are built from the bindings it has, so they never drift.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from textual.app import App
from textual.app import SystemCommand
from textual.binding import Binding
from textual.binding import BindingType
from textual.widget import Widget


@dataclass(frozen=True)
class Key:
    key: str  # Textual's key name(s), comma-separated
    shown: str  # how the help writes it
    action: str
    does: str


KEYMAP: dict[str, Key] = {
    "help": Key("question_mark", "?", "help", "every key of this app (Esc closes)"),
    "search": Key("slash", "/", "search", "search / filter"),
    "sort": Key("s", "s", "sort_next", "sort by the next column (again on a header click: reverse)"),
    "reverse": Key("r", "r", "reverse", "reverse the sort"),
    "theme": Key("t", "t", "toggle_dark", "toggle dark / light theme"),
    "export": Key("e", "e", "export", "export the Markdown report"),
    "copy": Key("y", "y", "copy_name", "copy the selected name to the clipboard (OSC 52)"),
    "quit": Key("q", "q", "quit", "quit"),
}


def bind(
    name: str, does: str | None = None, *, action: str | None = None, show: bool = False, priority: bool = False
) -> Binding:
    """The shared binding ``name`` (optionally with this app's own wording or action)."""
    k = KEYMAP[name]
    return Binding(k.key, action or k.action, does or k.does, show=show, priority=priority)


def common_bindings(*names: str, show: bool = False) -> list[Binding]:
    """The app-level bindings every app has, plus ``names`` (e.g. "export"); ``show``: in a Footer."""
    out = [
        bind("quit", show=show),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        bind("help", "help" if show else None, show=show),
        bind("theme", "theme" if show else None, show=show),
    ]
    return out + [bind(n) for n in names]


_KEY_NAMES = {
    "question_mark": "?",
    "slash": "/",
    "plus": "+",
    "minus": "−",
    "equals_sign": "=",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "space": "space",
    "enter": "Enter",
    "escape": "Esc",
    "left": "←",
    "right": "→",
    "up": "↑",
    "down": "↓",
    "shift+left": "shift+←",
    "shift+right": "shift+→",
}


def key_label(keys: str) -> str:
    """A binding's key string as a person writes it: "plus,equals_sign,i" → "+ / = / i"."""
    return " / ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))


def bindings(declared: Iterable[BindingType]) -> Iterator[Binding]:
    """A ``BINDINGS`` list as Binding objects (Textual also accepts (key, action[, description]) tuples)."""
    for b in declared:
        yield b if isinstance(b, Binding) else Binding(*b)


def actions(declared: Iterable[BindingType]) -> Iterator[str]:
    """The actions a ``BINDINGS`` list runs."""
    return (b.action for b in bindings(declared))


def binding_rows(declared: Iterable[BindingType]) -> list[tuple[str, str]]:
    """(keys, what it does) for the help screen, from the bindings themselves."""
    rows: list[tuple[str, str]] = []
    for b in bindings(declared):
        if b.key == "ctrl+c":
            continue
        rows.append((key_label(b.key), b.description or b.action))
    return rows


# Textual's own palette entries that one of ours already is (ours runs the same action).
_TEXTUAL_DUPLICATES = {"quit": "quit", "keys": "help"}


def without_duplicates(
    ours: Iterable[SystemCommand], textual: Iterable[SystemCommand], actions: Iterable[str]
) -> Iterable[SystemCommand]:
    """Our commands, then Textual's system commands less those an action of ours already offers
    (the palette listed Quit twice)."""
    have = set(actions)
    yield from ours
    for c in textual:
        if _TEXTUAL_DUPLICATES.get(c.title.lower()) not in have:
            yield c


def palette_commands(
    app: App[Any] | Widget, declared: Iterable[BindingType], skip: Callable[[str], bool] | None = None
) -> Iterable[SystemCommand]:
    """The app's own actions for the command palette (ctrl+p), one per binding; ``skip(action)``
    leaves out what does not apply now (a tab that is off)."""
    seen: set[str] = set()
    for b in bindings(declared):
        if b.key == "ctrl+c" or b.action in seen or not b.description or (skip is not None and skip(b.action)):
            continue
        seen.add(b.action)

        def run(action: str = b.action) -> None:
            app.call_later(app.run_action, action)

        yield SystemCommand(f"{b.description[:1].upper()}{b.description[1:]}", f"key: {key_label(b.key)}", run)
