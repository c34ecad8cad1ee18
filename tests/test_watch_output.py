"""The launched job's own output under `trainscope watch -- COMMAND`: whole and in order, beside the
watch's lines (headless) or in the dashboard's Output tab and the terminal's scrollback after it
closes; the exit code is the job's."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import exit_code_written
from tests.tmux import needs_tmux
from tests.tmux import terminal
from tests.tmux import trainscope_line
from tests.watching import watch_argv

JOB = "import sys, time\nfor i in range(1, 201):\n    print(f'line {i}/200', flush=True)\n    time.sleep({pause})\nsys.exit(4)\n"


def numbered(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("line ")]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_headless_relays_every_line_of_the_job_in_order(tmp_path, fmt):
    job = tmp_path / "job.py"
    job.write_text(JOB.replace("{pause}", "0.005"))
    p = subprocess.run(
        watch_argv("--format", fmt, job=[sys.executable, str(job)]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 4, p.stderr[-2000:]
    # text: the job's stdout is the watch's stdout; json: it goes to stderr so stdout holds only JSON lines
    where = p.stdout if fmt == "text" else p.stderr
    assert numbered(where) == [f"line {i}/200" for i in range(1, 201)]
    if fmt == "json":
        assert all(json.loads(ln)["schema"] == "trainscope.watch/1" for ln in p.stdout.splitlines())


@needs_tmux
def test_dashboard_keeps_the_jobs_output_for_the_scrollback(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("import time\ntime.sleep(2)\n" + JOB.replace("{pause}", "0.01"))
    exit_file = tmp_path / "exit.txt"
    line = trainscope_line(["watch", "--interval", "0.5", "--", sys.executable, job], exit_file)
    with terminal(f"trainscope-output-{tmp_path.name}", line, (120, 40)) as tmux:
        tmux.wait_for("q quit", timeout=60)
        assert exit_code_written(exit_file, timeout=90) == "4"
        history = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t")
        assert numbered(history) == [f"line {i}/200" for i in range(1, 201)]
        assert "trainscope watch —" in history and "job exit code 4" in history


def test_output_tab_shows_the_jobs_lines_and_digits_switch_tabs():
    import asyncio

    from trainscope.tui.watch_app import WatchApp

    lines = [f"line {i}/200" for i in range(1, 201)]

    async def go():
        app = WatchApp(
            title="python train.py",
            interval=1.0,
            clock=lambda: 100.0,
            launched=True,
            output=lambda n: (lines[n:], len(lines)),
        )
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("2")
            await pilot.pause(0.6)
            tabs = app.query_one("#tabs").active
            log = app.query_one("#job-output")
            await pilot.press("3")
            await pilot.pause()
            after = app.query_one("#tabs").active
            return tabs, list(log.lines), after

    tab, shown, after = asyncio.run(go())
    assert tab == "tab-output" and after == "tab-capture"
    assert shown == lines  # pulled once, whole and in order


def test_the_job_outlives_a_killed_watcher_and_keeps_its_output(tmp_path):
    """kill -9 of the watcher: the relay process goes on copying, so the job's prints never fail."""
    import os
    import signal

    job = tmp_path / "job.py"
    done = tmp_path / "done.txt"
    job.write_text(
        "import os, time\n"
        "for i in range(1, 61):\n"
        "    print(f'line {i}/60', flush=True)\n"
        "    time.sleep(0.05)\n"
        # written whole, then renamed: the test never reads the file between its creation and its text
        f"open({str(done) + '.part'!r}, 'w').write('finished')\n"
        f"os.replace({str(done) + '.part'!r}, {str(done)!r})\n"
    )
    out = tmp_path / "out.txt"
    with open(out, "wb") as f:
        watcher = subprocess.Popen(
            watch_argv(job=[sys.executable, str(job)]),
            stdout=f,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(tmp_path)},  # the run folder a killed watch leaves: in tmp_path
        )
        end = time.monotonic() + 120
        while "line 1/60" not in out.read_text() and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(watcher.pid, signal.SIGKILL)  # the watcher this test started
        watcher.wait()
    end = time.monotonic() + 60
    while not done.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert done.read_text() == "finished"  # no BrokenPipeError in the job
    # the relay copies the job's last lines after the job ends: waited for, bounded (not a fixed sleep)
    end = time.monotonic() + 60
    while numbered(out.read_text())[-1:] != ["line 60/60"] and time.monotonic() < end:
        time.sleep(0.1)
    assert numbered(out.read_text()) == [f"line {i}/60" for i in range(1, 61)]
