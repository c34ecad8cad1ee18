"""Memory creep: a steady climb of a process's RSS or a GPU's memory is a live finding with its
rate and the time left until capacity; a plateau, a one-off step or noise is not (synthetic
windows), and a real leaking CPU job is caught under `watch --headless`."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.watching import watch_argv
from trainscope.analyzers.findings.live import creep_finding
from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.analyzers.live.memory_creep import memory_creeps
from trainscope.traces.samples import GpuSample
from trainscope.traces.samples import HostSample
from trainscope.traces.samples import ProcessGroup
from trainscope.traces.samples import Snapshot
from trainscope.traces.samples import StepSample

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


def test_the_summary_keeps_a_leak_seen_in_the_last_window():
    a = LiveAnalyzer()
    for s in host_series([1000 + 80 * i for i in range(40)] + [4120.0] * 8):  # leak to the end, short tail
        a.add(s)
    assert any(f.id == "machine/memory-creep" for f in a.summary().findings)
    assert any(fx.finding == "machine/memory-creep" for fx in a.summary().fixes)


def test_a_climb_that_levelled_off_a_window_before_the_end_did_not_persist():
    a = LiveAnalyzer()
    raised = False
    for s in host_series([1000 + 80 * i for i in range(12)] + [1880.0] * 40):  # climb, then 40 s flat
        raised |= any(f.id == "machine/memory-creep" for f in a.add(s).findings)
    assert raised  # shown while it climbed
    assert not any(f.id == "machine/memory-creep" for f in a.summary().findings)


def _ramp_then_flat(steps_from: int | None) -> list[Snapshot]:
    """An import of torch as watch saw it: RSS 89 → 305 MiB over 17 s (12.8 MiB/s), then flat at
    310 MiB for a minute; the DataLoader's steps start at sample ``steps_from`` (None: untimed)."""
    rss = [89 + 216 * i / 17 for i in range(17)] + [305 + 5 * min(1, i / 3) for i in range(60)]
    out = host_series(rss)
    return [
        Snapshot(
            t=x.t,
            dt=x.dt,
            host=x.host,
            step=StepSample(10, 0, 10**9) if steps_from is not None and i >= steps_from else None,
            step_mode="on" if steps_from is not None else "off",
        )
        for i, x in enumerate(out)
    ]


def test_an_import_ramp_then_flat_is_no_creep_live_or_in_the_summary():
    """Before, watch showed MEMORY CREEP 12.8 MiB/s while torch imported and kept it in the summary
    and the report. Trends are read from the steady state on: after the first
    ``live.trend_after_steps`` steps, or ``live.trend_after_s`` seconds for an untimed job."""
    for steps_from in (17, None):  # steps start once imported; a job with no step timings
        a = LiveAnalyzer()
        for s in _ramp_then_flat(steps_from):
            st = a.add(s)
            assert not any(f.id == "machine/memory-creep" for f in st.findings), (steps_from, s.t)
        assert not any(f.id == "machine/memory-creep" for f in a.summary().findings), steps_from
    # Steps already running while memory still climbs: shown live while it climbs, but it did not
    # persist, so the summary (and the report) clear it.
    a = LiveAnalyzer()
    seen = [any(f.id == "machine/memory-creep" for f in a.add(s).findings) for s in _ramp_then_flat(5)]
    assert any(seen) and not any(seen[-30:])
    assert not any(f.id == "machine/memory-creep" for f in a.summary().findings)


def test_a_leak_after_the_warm_up_is_still_creep():
    rss = [89 + 216 * i / 17 for i in range(17)] + [305 + 6 * i for i in range(40)]  # then 6 MiB/s
    snaps = [
        Snapshot(t=x.t, dt=x.dt, host=x.host, step=StepSample(10, 0, 10**9) if i >= 17 else None, step_mode="on")
        for i, x in enumerate(host_series(rss))
    ]
    a = LiveAnalyzer()
    for s in snaps:
        a.add(s)
    f = next(f for f in a.summary().findings if f.id == "machine/memory-creep")
    rate = next(e for e in f.evidence if e.metric.endswith("growth rate"))
    assert 5.5 <= rate.value <= 6.5  # the leak's rate, not the import's 12.8 MiB/s


def _watch(job_args: list[str], cwd) -> list[dict]:
    cmd = watch_argv("--format", "json", job=[sys.executable, str(JOB), *job_args])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert p.returncode == 0, p.stderr[-2000:]
    return [json.loads(ln) for ln in p.stdout.splitlines()]


def test_a_job_that_imports_torch_then_runs_flat_has_no_creep(tmp_path):
    lines = _watch(["--steps", "300", "--compute-ms", "30"], tmp_path)
    samples = [s for s in lines if s["type"] == "sample"]
    rss = [g["rss"] for s in samples for g in (s["sample"].get("host") or {}).get("groups", []) if g["role"] == "main"]
    # The ramp was there to be misread: the import grew the RSS by half or more (95 → 314 MiB here).
    assert rss and max(rss) > 1.5 * min(rss), rss
    live = [f for s in samples for f in s["findings"] if f["id"] == "machine/memory-creep"]
    assert not live, live[0]
    assert not any(f["id"] == "machine/memory-creep" for f in lines[-1]["findings"])


def test_a_leaking_job_gets_the_memory_creep_finding(tmp_path):
    lines = _watch(["--steps", "300", "--compute-ms", "30", "--leak-mb", "2"], tmp_path)
    live = [f for s in lines if s["type"] == "sample" for f in s["findings"] if f["id"] == "machine/memory-creep"]
    assert live, "no memory-creep finding while the job leaked"
    summary = next(f for f in lines[-1]["findings"] if f["id"] == "machine/memory-creep")
    per = next(e["value"] for e in summary["evidence"] if e["metric"].endswith("growth per iteration"))
    assert 1.0 <= per <= 4.0, per  # engineered: 2 MiB kept per iteration
