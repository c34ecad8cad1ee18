"""Memory creep: a steady climb of a process's RSS or a GPU's memory is a live finding with its
rate and the time left until capacity; a plateau, a one-off step or noise is not (synthetic
windows), and a real leaking CPU job is caught under `watch --headless`."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from trainscope.analyzers.live import LiveAnalyzer
from trainscope.analyzers.findings.live import creep_finding
from trainscope.analyzers.live_memory import memory_creeps
from trainscope.traces.samples import GpuSample, HostSample, ProcessGroup, Snapshot, StepSample

MIB, GIB = 2**20, 2**30
JOB = pathlib.Path(__file__).parent / "jobs" / "capture_job.py"


def host_series(rss_mib):
    return [
        Snapshot(
            t=float(i),
            dt=1.0,
            host=HostSample(
                50.0, mem_used=8 * GIB, mem_total=16 * GIB, groups=(ProcessGroup("main", 1, 90.0, int(v * MIB)),)
            ),
            step=StepSample(10, 0, 10**9),
        )
        for i, v in enumerate(rss_mib)
    ]


def test_a_steady_climb_is_creep_with_rate_and_time_to_capacity():
    f = creep_finding(host_series([1000 + 80 * i for i in range(12)]))  # 80 MiB/s
    assert f is not None and f.id == "machine/memory-creep"
    rate = next(e for e in f.evidence if e.metric.endswith("growth rate"))
    assert rate.value == 80.0 and rate.unit == "MiB/s"
    per = next(e for e in f.evidence if e.metric.endswith("growth per iteration"))
    assert per.value == 8.0  # 80 MiB/s over 10 iterations per second
    eta = next(e for e in f.evidence if e.metric.endswith("projected time until capacity"))
    assert eta.value == round(8 * GIB / (80 * MIB), 1)  # 8 GiB available at 80 MiB/s: 102.4 s
    assert f.severity == "high" and "reaches capacity in 1.7 min" in f.detail


def test_plateau_one_off_step_and_noise_are_not_creep():
    assert creep_finding(host_series([2000.0] * 12)) is None
    assert creep_finding(host_series([1000.0] * 6 + [1500.0] * 6)) is None  # one allocation fits a line poorly
    noisy = [1000 + (300 if i % 2 else -300) + 2 * i for i in range(12)]
    assert creep_finding(host_series(noisy)) is None
    assert creep_finding(host_series([1000 + 2 * i for i in range(12)])) is None  # 22 MiB: below 64 MiB
    assert creep_finding(host_series([1000 + 80 * i for i in range(5)])) is None  # too few samples


def test_gpu_memory_creep_is_per_device():
    snaps = [
        Snapshot(
            t=float(i),
            dt=1.0,
            gpus=(
                GpuSample(0, "G", 90.0, mem_used=10 * GIB, mem_total=80 * GIB),
                GpuSample(1, "G", 90.0, mem_used=10 * GIB + i * 256 * MIB, mem_total=80 * GIB),
            ),
        )
        for i in range(12)
    ]
    creeps = memory_creeps(snaps)
    assert [c.what for c in creeps] == ["GPU 1 memory"] and round(creeps[0].slope_bps / MIB) == 256


def test_the_summary_keeps_a_leak_seen_in_a_window():
    a = LiveAnalyzer()
    for s in host_series([1000 + 80 * i for i in range(12)] + [1880.0] * 40):  # leak, then a long plateau
        a.add(s)
    assert any(f.id == "machine/memory-creep" for f in a.summary().findings)
    assert any(fx.finding == "machine/memory-creep" for fx in a.summary().fixes)


def test_a_leaking_job_gets_the_memory_creep_finding(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "trainscope",
        "watch",
        "--headless",
        "--format",
        "json",
        "--interval",
        "0.25",
        "--",
        sys.executable,
        str(JOB),
        "--steps",
        "300",
        "--compute-ms",
        "30",
        "--leak-mb",
        "2",
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(ln) for ln in p.stdout.splitlines()]
    live = [f for s in lines if s["type"] == "sample" for f in s["findings"] if f["id"] == "machine/memory-creep"]
    assert live, "no memory-creep finding while the job leaked"
    summary = next(f for f in lines[-1]["findings"] if f["id"] == "machine/memory-creep")
    per = next(e["value"] for e in summary["evidence"] if e["metric"].endswith("growth per iteration"))
    assert 1.0 <= per <= 4.0, per  # engineered: 2 MiB kept per iteration
