"""Recordings (`watch --record`) and nvidia-smi CSV logs: crash safety, replay, and `analyze`."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime

import pytest

from tests.watching import watch_argv
from trainscope.collectors.errors import TraceError
from trainscope.collectors.live_trace import open_recording
from trainscope.collectors.live_trace import trace_snapshots
from trainscope.collectors.nvidia_smi_csv import read_nvidia_smi_csv
from trainscope.collectors.recording import SCHEMA
from trainscope.collectors.recording import RecordingWriter
from trainscope.collectors.recording import read_recording
from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import HostSample
from trainscope.collectors.samples import ProcessGroup
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.samples import StepSample

NANOGPT = pathlib.Path(__file__).parent / "data" / "nvml" / "nanogpt_8gpu_gpu_metrics.csv"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainscope", *args], capture_output=True, text=True, timeout=timeout)


# --- nanoGPT nvidia-smi CSV ----------------------------------------------------------------------


def raw_nanogpt() -> dict[str, list[dict]]:
    with open(NANOGPT) as f:
        rows = list(csv.DictReader(f))
    by_ts: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_ts[r["timestamp"]].append(r)
    return by_ts


def test_nanogpt_csv_imports_one_sample_per_timestamp_with_every_gpu():
    rec = read_nvidia_smi_csv(str(NANOGPT))
    raw = raw_nanogpt()
    assert len(rec.snapshots) == len(raw) == 639
    assert all(len(s.gpus) == 8 for s in rec.snapshots)
    assert rec.warnings == []
    first_ts = sorted(raw)[0]
    first = raw[first_ts]
    g1 = rec.snapshots[0].gpus[1]
    assert g1.index == 1
    assert g1.temperature_c == float(first[1]["temperature_C"])
    assert g1.power_w == pytest.approx(float(first[1]["power_W"]))
    assert g1.util_gpu == float(first[1]["utilization_gpu_percent"])
    assert g1.util_mem is None and g1.mem_used is None  # not in this log: n/a, not 0
    span = (
        datetime.fromisoformat(sorted(raw)[-1].replace("Z", "+00:00"))
        - datetime.fromisoformat(first_ts.replace("Z", "+00:00"))
    ).total_seconds()
    assert rec.snapshots[-1].t == pytest.approx(span, abs=1e-3)


def test_nanogpt_csv_analyzes_from_the_counters():
    raw = raw_nanogpt()
    times = sorted(raw)
    secs = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in times]
    # Time-weighted mean utilization re-derived from the raw rows: each sample weighs the gap before it
    # (the first, the median gap).
    gaps = [b - a for a, b in zip(secs, secs[1:])]
    weights = [sorted(gaps)[len(gaps) // 2]] + gaps
    per_sample = [sum(float(r["utilization_gpu_percent"]) for r in raw[t]) / len(raw[t]) for t in times]
    expected = sum(u * w for u, w in zip(per_sample, weights)) / sum(weights)

    p = cli("analyze", str(NANOGPT), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["verdict"]["axis"] == "balanced"  # busy, and no GPM/memory counters to say which
    busy = next(e for e in doc["verdict"]["evidence"] if e["metric"].startswith("GPU utilization"))
    assert busy["value"] == pytest.approx(expected, abs=0.01)
    assert any("sampled counters only (639 samples" in w for w in doc["warnings"])

    text = cli("analyze", str(NANOGPT))
    assert text.returncode == 0 and "BALANCED" in text.stdout


def test_nanogpt_csv_replays_headless_as_json_lines():
    p = cli("watch", "--replay", str(NANOGPT), "--headless", "--format", "json")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == 640 and lines[-1]["type"] == "summary"
    assert lines[0]["state"] == "warming_up" and lines[10]["state"] == "ready"
    assert lines[-1]["verdict"]["axis"] == "balanced"
    assert len(lines[5]["sample"]["gpus"]) == 8


def test_nvidia_smi_native_header_and_units(tmp_path):
    # The layout `nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,utilization.memory,memory.used,
    # memory.total,power.draw --format=csv` prints (units in headers and values, [N/A] where unsupported).
    f = tmp_path / "smi.csv"
    f.write_text(
        "timestamp, index, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], "
        "memory.total [MiB], power.draw [W]\n"
        "2024/01/15 10:23:45.100, 0, NVIDIA A100-SXM4-40GB, 97 %, 31 %, 39000 MiB, 40960 MiB, 301.50 W\n"
        "2024/01/15 10:23:46.100, 0, NVIDIA A100-SXM4-40GB, 95 %, 30 %, 39100 MiB, 40960 MiB, [N/A]\n"
        "garbage line\n"
    )
    rec = read_nvidia_smi_csv(str(f))
    assert len(rec.snapshots) == 2
    g = rec.snapshots[1].gpus[0]
    assert g.name == "NVIDIA A100-SXM4-40GB" and g.util_gpu == 95 and g.util_mem == 30
    assert g.mem_used == 39100 * 2**20 and g.power_w is None
    assert rec.snapshots[1].dt == pytest.approx(1.0)
    assert "1 malformed CSV rows skipped" in rec.warnings[0]


def test_csv_that_is_not_a_gpu_log_is_one_line_error(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b,c\n1,2,3\n")
    p = cli("analyze", str(f))
    assert p.returncode == 2 and p.stderr.startswith("trainscope: ") and "Traceback" not in p.stderr


# --- recordings ----------------------------------------------------------------------------------


def snap(t: float, **kw) -> Snapshot:
    return Snapshot(t=t, dt=0.5, wall=1_700_000_000 + t, **kw)


def test_recording_round_trips_every_field(tmp_path):
    path = tmp_path / "r.jsonl"
    s = snap(
        1.0,
        gpus=(
            GpuSample(
                0,
                "H100",
                88.0,
                40.0,
                10,
                20,
                300.0,
                700.0,
                1980.0,
                61.0,
                ("sw_power_cap",),
                1e9,
                2e9,
                (),
                55.0,
                30.0,
                20.0,
            ),
        ),
        host=HostSample(50.0, (40.0, 60.0), 1.5, 5, 10, 1000.0, (ProcessGroup("main", 1, 99.0, 123, (7,)),)),
        step=StepSample(10, 30, 100, 5),
        step_mode="on",
        notes=("hello",),
    )
    w = RecordingWriter(str(path), {"interval_s": 0.5})
    w.write(s)
    w.close({"exit_code": 0})
    rec = read_recording(str(path))
    assert rec.header["schema"] == SCHEMA
    assert rec.snapshots == [s]
    assert rec.end["exit_code"] == 0 and rec.warnings == []


def test_truncated_and_damaged_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    w = RecordingWriter(str(path), {})
    for i in range(3):
        w.write(snap(i * 0.5))
    w._f.close()  # no end marker: as after kill -9
    with open(path, "a") as f:
        f.write('{"type":"sample","t":1.5,"dt"')  # killed mid-write
    rec = read_recording(str(path))
    assert len(rec.snapshots) == 3 and "truncated" in rec.warnings[0]

    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1], "{not json", lines[2]]) + "\n")
    rec = read_recording(str(path))
    assert len(rec.snapshots) == 1 and "damaged" in rec.warnings[0]


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"schema": "trainscope.recording/9"}\n', "not supported"),
        ('{"type": "sample"}\n', "not a PyTorch profiler trace"),
        ("", "empty"),
    ],
)
def test_bad_recordings_are_one_line_errors(tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    p = cli("analyze", str(f))
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    with pytest.raises(TraceError):
        open_recording(str(f))


def test_recording_survives_kill_9_and_replays(tmp_path):
    rec_path = tmp_path / "run.jsonl"
    job = [sys.executable, "-c", "import time\nfor _ in range(600): time.sleep(0.1)"]
    watch = subprocess.Popen(
        watch_argv("--record", str(rec_path), job=job),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the run folder the killed watch leaves: in tmp_path
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if rec_path.exists() and rec_path.read_text().count('"type":"sample"') >= 6:
                break
            time.sleep(0.1)
        written = rec_path.read_text().count('"type":"sample"')
        assert written >= 6
        watch.send_signal(signal.SIGKILL)
        watch.wait(timeout=10)
    finally:
        if watch.poll() is None:
            watch.kill()
        header = json.loads(rec_path.read_text().splitlines()[0])
        try:
            os.kill(header["pid"], signal.SIGKILL)  # the orphaned job we launched
        except (ProcessLookupError, KeyError, TypeError):
            pass
    rec = read_recording(str(rec_path))
    # Everything written before the kill was fsync'd: at most the interval being sampled is lost.
    assert len(rec.snapshots) >= written
    assert rec.end is None and any("no end marker" in w or "truncated" in w for w in rec.warnings)
    assert [s.t for s in rec.snapshots] == sorted(s.t for s in rec.snapshots)
    main = rec.snapshots[-1].host.group("main")
    assert main is not None and header["pid"] in main.pids

    p = cli("watch", "--replay", str(rec_path), "--headless", "--format", "json")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(lines) == len(rec.snapshots) + 1
    p = cli("analyze", str(rec_path), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    # No GPU and no DataLoader in this job: nothing measures where time goes, and analyze says so.
    assert doc["verdict"]["axis"] == "insufficient_evidence"
    assert any("sampled counters only" in w for w in doc["warnings"])


def test_counters_round_trip_through_the_trace_model(tmp_path):
    path = tmp_path / "r.jsonl"
    w = RecordingWriter(str(path), {})
    snaps = [
        snap(
            i * 0.5,
            gpus=(GpuSample(0, "A100", 50.0 + i, 10.0, 100, 1000, clock_events=("hw_thermal", "gpu_idle")),),
            host=HostSample(
                30.0, (), 2.0, 1, 2, None, (ProcessGroup("main", 1, 90.0, 5), ProcessGroup("workers", 2, 150.0, 9))
            ),
            step=StepSample(4, 10, 40, 3),
        )
        for i in range(5)
    ]
    for s in snaps:
        w.write(s)
    w.close()
    from trainscope.collectors.inputs import open_file

    trace = open_file(str(path))
    assert trace.format == "trainscope.recording" and not trace.has_gpu_activity
    back = trace_snapshots(trace)
    assert len(back) == 5
    for a, b in zip(snaps, back):
        assert b.t == pytest.approx(a.t) and b.dt == a.dt
        assert b.gpus[0].util_gpu == a.gpus[0].util_gpu and b.gpus[0].mem_total == 1000
        assert b.gpus[0].clock_events == ("throttled",)  # one throttle reason; gpu_idle is not one
        assert b.host.group("workers").cpu_pct == 150.0 and b.host.group("workers").count == 2
        assert b.step == a.step
