"""The real app in a real terminal: tmux runs `trainscope analyze` on a pseudo-terminal, the test
reads the screen, presses keys, exports the report and quits."""

from __future__ import annotations

import sys
import time

from tests.conftest import KINETO
from tests.conftest import exit_code_written
from tests.tmux import needs_tmux
from tests.tmux import terminal
from tests.tmux import trainscope_line

TRACE = KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz"
pytestmark = needs_tmux


def test_analyze_app_in_tmux_navigates_exports_and_quits(tmp_path):
    exit_file = tmp_path / "exit.txt"
    line = trainscope_line(["analyze", TRACE], exit_file)
    with terminal(f"trainscope-test-{tmp_path.name}", line, (100, 30), cwd=tmp_path) as tmux:
        screen = tmux.wait_for("DATA-BOUND")
        assert "confidence 0.82" in screen and "1 Overview" in screen
        tmux.keys("2")
        tmux.wait_for("ProfilerStep#9 (5/6")
        screen = tmux.wait_for("waiting for data")  # the box under the lanes: the whole tab is drawn
        assert "GPU all" in screen and "T main" in screen and "waiting for data" in screen
        tmux.keys("n")
        tmux.wait_for("ProfilerStep#10 (6/6")
        tmux.keys("e")
        report = tmp_path / "resnet50_v100_num_workers_0.trainscope.md"
        end = time.monotonic() + 30
        while not report.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert report.exists() and "Load batches in parallel worker processes" in report.read_text()
        tmux.keys("q")
        assert exit_code_written(exit_file) == "0"
        # The terminal is given back: no alternate screen left behind, the shell's output is visible.
        assert "DATA-BOUND" not in tmux.screen()


def test_quitting_while_the_trace_loads_exits_0(tmp_path):
    """q during parsing: the app leaves at once with exit 0; the loader thread, still running,
    must not turn the widgets it can no longer reach into an 'internal error' exit code."""
    big = KINETO / "hta_a100_control.json.gz"  # ~1–2 s to load here: long enough to quit mid-way
    exit_file = tmp_path / "exit.txt"
    with terminal(f"trainscope-quit-{tmp_path.name}", trainscope_line(["analyze", big], exit_file), (100, 30)) as tmux:
        tmux.wait_for("q quit")  # the loading screen's key line: the app is up and reading
        tmux.keys("q")
        assert exit_code_written(exit_file) == "0"


def _watch_line(job, exit_file) -> str:
    return trainscope_line(["watch", "--interval", "0.5", "--", sys.executable, job], exit_file)


def test_stopping_the_launched_job_from_the_dashboard_interrupts_it(tmp_path):
    """q asks "stop job? y/N"; y passes the interrupt on to the job (which can then save its work)
    rather than wait 10 s and kill it."""
    marker = tmp_path / "got_sigint"
    job = tmp_path / "job.py"
    job.write_text(
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(marker)!r}, 'w').write('yes')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "time.sleep(120)\n"
    )
    exit_file = tmp_path / "exit.txt"
    with terminal(f"trainscope-watch-{tmp_path.name}", _watch_line(job, exit_file), (120, 40)) as tmux:
        tmux.wait_for("q quit", timeout=60)
        time.sleep(1.0)
        tmux.keys("q")
        tmux.wait_for("stop job? y/N", timeout=60)
        assert not marker.exists()  # asking stops nothing
        tmux.keys("y")
        code = exit_code_written(exit_file)
        assert marker.exists(), "the job never got SIGINT"  # its handler wrote it: no SIGKILL after a wait
        assert code == "130"  # ended by that SIGINT (no wall-clock bound: a loaded machine stretches it)


def test_q_in_watch_leaves_the_job_running(tmp_path):
    """q, then d (detach) at "stop job? y/N": watch leaves with exit 0 and the job runs on."""
    import os
    import signal

    pid_file = tmp_path / "job.pid"
    marker = tmp_path / "got_signal"
    job = tmp_path / "job.py"
    job.write_text(
        "import os, signal, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        f"def stop(*_):\n    open({str(marker)!r}, 'w').write('yes')\n    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "time.sleep(120)\n"
    )
    exit_file = tmp_path / "exit.txt"
    pid = None
    try:
        with terminal(f"trainscope-detach-{tmp_path.name}", _watch_line(job, exit_file), (120, 40)) as tmux:
            tmux.wait_for("q quit", timeout=60)
            end = time.monotonic() + 30
            while not pid_file.exists() and time.monotonic() < end:
                time.sleep(0.1)
            pid = int(pid_file.read_text())
            tmux.keys("q")
            tmux.wait_for("stop job? y/N", timeout=60)
            tmux.keys("d")
            assert exit_code_written(exit_file) == "0"
            time.sleep(1.0)
            os.kill(pid, 0)  # still running (raises ProcessLookupError otherwise)
            assert not marker.exists()
            assert "runs on" in tmux.screen()
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)  # the job this test started
            except ProcessLookupError:
                pass
