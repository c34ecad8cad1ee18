"""A hostile trace in a real terminal (issue 35, item 3): tmux runs `trainscope analyze` on a trace
whose device name, thread, step, range, operator, kernel and file names hold an OSC 0 title
escape, a screen clear, an OSC 8 link, BEL/NUL/CR, bidi and separator characters
(tests/hostile.py). The pane's title must stay what it was, the screen must keep the app's header,
tab bar and key line on every tab (a clear would blank what the app does not redraw), and the
names must show spelled out (``\\x1b]0;PWNED``)."""

from __future__ import annotations

import time

from tests.conftest import exit_code_written
from tests.hostile import PAYLOAD
from tests.hostile import write_kineto
from tests.tmux import needs_tmux
from tests.tmux import terminal
from tests.tmux import trainscope_line

pytestmark = needs_tmux

TITLE = "trainscope-hostile-pane"


def test_hostile_trace_leaves_the_pane_title_and_the_screen_alone(tmp_path):
    trace = write_kineto(tmp_path / f"k{PAYLOAD[:12]}.json")  # the file name holds the title escape too
    exit_file = tmp_path / "exit.txt"
    # printf sets the title the app must leave alone; the sleep lets the test read it first
    line = trainscope_line(["analyze", trace], exit_file, before=f"printf '\\033]2;{TITLE}\\033\\\\'; sleep 1; ")
    with terminal(f"trainscope-hostile-{tmp_path.name}", line, (160, 45), cwd=tmp_path) as tmux:

        def title() -> str:
            return tmux("display", "-p", "-t", "t", "#{pane_title}").strip()

        end = time.monotonic() + 10
        while title() != TITLE and time.monotonic() < end:
            time.sleep(0.1)
        assert title() == TITLE
        screen = tmux.wait_for("DEV:x\\x1b]0;PWNED")  # the overview's device line, spelled out
        for key, shows in (
            ("2", "ProfilerStep#"),  # the timeline: step, thread, range and kernel names
            ("3", "times in ms"),  # steps: the note quotes the step ranges
            ("4", "KERNEL:x\\x1b]0;PWNED"),  # kernels, and the selected kernel's detail
            ("5", "change:"),  # fixes
            ("1", "DEV:x\\x1b]0;PWNED"),
        ):
            tmux.keys(key)
            screen = tmux.wait_for(shows)
            time.sleep(0.5)  # what the tab draws after its first line
            screen = tmux.screen()
            lines = screen.splitlines()
            assert title() == TITLE, f"tab {key} retitled the pane: {title()!r}"
            assert "PWNED" not in title()
            # not cleared: the header, the tab bar and the key line are still on the screen
            assert "trainscope — kx\\x1b]0;PWNED\\x07y.json" in lines[0], (key, screen)
            assert "1 Overview" in lines[1] and "q quit" in lines[-1], (key, screen)
            assert "\x1b" not in screen and "\x07" not in screen
        assert "\\u202e" in screen and "\\u2028" in screen  # bidi and separators spelled out too
        tmux.keys("q")
        assert exit_code_written(exit_file) == "0"
        assert title() == TITLE
