"""The watch app shows trace text made visible too: a capture note or finding text from a replayed
recording cannot retitle or clear the terminal (issue 35, item 3; the other apps: test_hostile_strings)."""

from __future__ import annotations

from trainscope.tui.chrome import SafeChrome
from trainscope.tui.watch_app import WatchApp
from trainscope.tui.watch_widgets import capture_text

EVIL = "x\x1b]0;PWNED\x07y\x1b[2J\u202e\u2028z"


def test_capture_notes_from_a_recording_are_shown_escaped():
    t = capture_text([], EVIL, [(1.5, EVIL)])
    assert "\x1b" not in t.plain and "\x07" not in t.plain and "\u202e" not in t.plain and "\u2028" not in t.plain
    assert "x\\x1b]0;PWNED\\x07y" in t.plain and "\\u202e" in t.plain and "\\u2028" in t.plain
    assert not t.spans  # plain text: no markup read from the note


def test_the_watch_apps_header_and_notifications_are_escaped():
    assert issubclass(WatchApp, SafeChrome)
    assert WatchApp.__mro__.index(SafeChrome) < [c.__name__ for c in WatchApp.__mro__].index("App")
