"""`trainscope watch` usage errors, bare/pid modes, the report and the Prometheus endpoint."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import HostSample
from trainscope.collectors.samples import ProcessGroup
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.samples import StepSample
from trainscope.reports.prometheus import render_prometheus


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainscope", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--interval", "0.1", "--", "true"], "must be ≥ 0.25"),
        (["--pid", "999999999"], "no process with pid"),
        (["--pid", "1", "--", "true"], "choose one of"),
        (["--replay", "/nonexistent.jsonl"], "no such file"),
        (["--", "/nonexistent/binary"], "cannot start"),
        # "inf" (a capture that never comes, silently) and "nan" are not a number of seconds
        (["--capture-at", "inf", "--", "true"], "--capture-at must be a number of seconds ≥ 0"),
        (["--capture-at", "nan", "--", "true"], "--capture-at must be a number of seconds ≥ 0"),
        (["--capture-at", "-1", "--", "true"], "--capture-at must be a number of seconds ≥ 0"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, message):
    p = cli("watch", *args)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr


def test_help_has_examples():
    p = cli("watch", "--help")
    assert p.returncode == 0 and "examples:" in p.stdout and "--replay" in p.stdout


def test_duration_stops_a_launched_job_and_says_so(tmp_path):
    p = cli("watch", "--help")
    assert "a job watch launched is then stopped as Ctrl-C would" in " ".join(p.stdout.split())

    def for_a_job(code: str) -> subprocess.CompletedProcess:
        return cli("watch", "--headless", "--interval", "0.25", "--duration", "1.5", "--", sys.executable, "-c", code)

    p = for_a_job("import time; time.sleep(60)")
    assert p.returncode == 0, p.stderr  # ended on --duration's SIGINT as asked: not 130
    assert "--duration 1.5 s reached: sending SIGINT" in p.stderr
    # A job that handles the interrupt and exits its own way keeps its code.
    p = for_a_job("import sys, time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    sys.exit(5)")
    assert p.returncode == 5, p.stderr


@pytest.mark.parametrize(
    "cmd,text",
    [
        ([], "no step timings (step mode off); launch the job with watch -- COMMAND"),
        (["x"], "no step timings yet: the job has not iterated a torch DataLoader"),
    ],
)
def test_warm_up_step_text_matches_how_the_job_was_started(cmd, text):
    from trainscope.tui.watch_app import step_lines

    snaps = [(None, Snapshot(t=1.0, dt=1.0, step_mode="off"))]
    assert step_lines(snaps, launched=bool(cmd))[0].startswith(text)
    waiting = [(None, Snapshot(t=1.0, dt=1.0, step_mode="waiting"))]
    assert "waiting for its first DataLoader iteration" in step_lines(waiting, launched=bool(cmd))[0]


def test_job_exit_code_and_report(tmp_path):
    report = tmp_path / "r.md"
    p = cli(
        "watch",
        "--headless",
        "--interval",
        "0.25",
        "--report",
        str(report),
        "--",
        sys.executable,
        "-c",
        "import time, sys; time.sleep(1.5); sys.exit(3)",
    )
    assert p.returncode == 3, p.stderr
    text = report.read_text()
    assert text.startswith("# trainscope watch") and "job exit code 3" in text
    assert "step mode was off" in text  # no DataLoader in this job


def test_pid_attach_with_duration(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        p = cli(
            "watch", "--pid", str(job.pid), "--headless", "--format", "json", "--interval", "0.25", "--duration", "1.5"
        )
    finally:
        job.kill()
        job.wait()
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert lines[-1]["type"] == "summary" and len(lines) >= 5
    assert job.pid in lines[-2]["sample"]["host"]["groups"][0]["pids"]


def test_prometheus_exposition_and_server():
    from trainscope import api
    from trainscope.commands.watch import _serve_prometheus

    snaps = [
        Snapshot(
            t=float(i),
            dt=1.0,
            gpus=(GpuSample(0, 'H100 "SXM"', 5.0, 1.0, 10, 100, power_w=None),),
            host=HostSample(95.0, (), 0.0, 1, 2, None, (ProcessGroup("workers", 2, 190.0, 5),)),
            step=StepSample(30, 600_000_000, 1_000_000_000),
        )
        for i in range(6)
    ]
    session = api.Watch()  # fed by hand: no sampler starts
    for s in snaps:
        session.add(s)
    assert session.latest() == (session.last.status, session.last.snapshot)
    text = render_prometheus(*session.latest())
    assert 'trainscope_gpu_utilization_percent{gpu="0",name="H100 \\"SXM\\""} 5' in text
    assert "trainscope_gpu_power_watts" not in text  # n/a is absent, not 0
    assert 'trainscope_verdict{axis="data",bottleneck="data/input-wait"} 1' in text
    assert 'trainscope_verdict{axis="algorithm",bottleneck=""} 0' in text
    assert "trainscope_data_wait_percent 60" in text
    server = _serve_prometheus("127.0.0.1", 0, session)
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert body == text
    finally:
        server.shutdown()


def test_a_replays_report_onto_the_recording_is_refused(tmp_path):
    """``watch --replay rec.jsonl --report rec.jsonl`` replaced the recording by the report: one
    line, exit 2, the recording untouched."""
    rec = tmp_path / "rec.jsonl"
    p = cli("watch", "--headless", "--duration", "1", "--record", str(rec), "--", "sleep", "3")
    assert p.returncode == 0, p.stderr
    before = rec.read_bytes()
    assert before.startswith(b"{")
    p = cli("watch", "--replay", str(rec), "--headless", "--report", str(tmp_path / "." / "rec.jsonl"))
    assert p.returncode == 2, p.stderr
    assert "is the recording replayed: writing the report there would overwrite it" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and rec.read_bytes() == before


def _folder_of_length(root: str, n: int) -> str:
    """A real folder whose path is exactly ``n`` bytes long, under ``root``."""
    path = os.path.join(root, "d")
    while len(path) < n:
        path = os.path.join(path, "x" * min(40, n - len(path) - 1))
    assert len(path) == n, (path, n)
    os.makedirs(path, exist_ok=True)
    return path


def test_a_long_tmpdir_is_named_where_multiprocessing_sockets_stop_fitting(tmp_path):
    """watch names the job's TMPDIR when DataLoader workers could not pass batches under it. The limit
    is checked against Python's own multiprocessing: a listener binds at the longest folder watch
    accepts and fails one byte past it (the drop that made a watched 2-worker job hang)."""
    from trainscope.commands.watch import MULTIPROCESSING_SUFFIX
    from trainscope.commands.watch import SOCKET_PATH_MAX
    from trainscope.commands.watch import socket_folder_problem

    root = tempfile.mkdtemp(prefix="m")  # short (the run's own folder): the lengths below are built on it
    try:
        longest = SOCKET_PATH_MAX - MULTIPROCESSING_SUFFIX
        fits, too_long = _folder_of_length(root, longest), _folder_of_length(root, longest + 1)
        assert socket_folder_problem({"TMPDIR": fits}) is None
        problem = socket_folder_problem({"TMPDIR": too_long})
        assert problem and f"{longest + 1} bytes long" in problem and f"at most {longest} bytes" in problem
        assert socket_folder_problem({}) is None  # /tmp
        code = "from multiprocessing.connection import Listener; Listener(family='AF_UNIX').close(); print('ok')"
        ok = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "TMPDIR": fits}, capture_output=True, text=True
        )
        bad = subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "TMPDIR": too_long}, capture_output=True, text=True
        )
        assert ok.stdout.strip() == "ok", ok.stderr
        assert bad.returncode != 0 and "AF_UNIX path too long" in bad.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
