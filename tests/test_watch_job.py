"""`trainscope watch --headless -- python job.py` on a real, unmodified CPU training job (torch CPU build).

The job (tests/jobs/train_job.py) knows nothing about trainscope; the DataLoader timing comes
from the injected hook alone. Its data-wait share is engineered with sleeps (load) and a
time-budgeted compute loop, so it holds on a loaded 2-core machine: sleeping needs no CPU, and the
compute budget is wall time. The job also logs its own data time (as timm does), an independent
measurement to check trainscope's against.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from tests.watching import run_with_short_tmpdir
from tests.watching import watch_argv

JOB = pathlib.Path(__file__).parent / "jobs" / "train_job.py"


def watch_job(tmp_path, *job_args: str, extra: tuple[str, ...] = ()) -> tuple[list[dict], dict, str]:
    cmd = watch_argv("--format", "json", *extra, job=[sys.executable, str(JOB), *job_args])
    p = run_with_short_tmpdir(cmd, tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(line) for line in p.stdout.splitlines()]  # stdout holds only JSON lines
    samples = [d for d in lines if d["type"] == "sample"]
    summary = lines[-1]
    assert summary["type"] == "summary"
    return samples, summary, p.stderr


def job_reported_wait(stderr: str) -> float:
    m = re.search(r"job: steps=(\d+) data_wait_pct=([\d.]+)", stderr)  # the job's stdout went to stderr
    assert m, stderr[-2000:]
    return float(m.group(2))


def first_data_verdict(samples: list[dict]) -> float | None:
    return next((s["t"] for s in samples if s["verdict"]["axis"] == "data"), None)


# batch 8: num_workers=0 → load 8×2 ms = 16 ms in the loop, compute 7 ms: wait 16/23 = 69.6 %.
# num_workers=2 → each worker needs 8×5 = 40 ms per batch, so one arrives every 20 ms; the step
# computes 6 ms and waits 14 ms: 14/20 = 70 %.
@pytest.mark.parametrize(
    "workers,load_ms,compute_ms,engineered",
    [
        (0, 2.0, 7.0, 16 / 23 * 100),
        (2, 5.0, 6.0, 70.0),
    ],
)
def test_slow_dataset_is_data_bound_with_the_engineered_wait(tmp_path, workers, load_ms, compute_ms, engineered):
    samples, summary, err = watch_job(
        tmp_path,
        "--workers",
        str(workers),
        "--load-ms",
        str(load_ms),
        "--compute-ms",
        str(compute_ms),
        "--seconds",
        "7",
    )
    t_data = first_data_verdict(samples)
    # While the job still steps: its 7 s of steps hold the 2 s of step evidence a verdict needs. Time
    # is counted from the first step (a loaded machine can take many seconds to import torch, which
    # is no part of the diagnosis); how fast the verdict comes is a benchmark figure, not a test.
    t_steps = next(s["t"] for s in samples if s["window"]["steps"])
    assert t_data is not None and t_data - t_steps <= 7.0, [(s["t"], s["verdict"]["axis"]) for s in samples]
    assert summary["verdict"]["axis"] == "data"
    assert summary["verdict"]["bottleneck"] == "data/input-wait"
    measured = summary["run"]["data_wait_pct"]
    # Precision: the job's own data-time log measures the same run independently.
    assert abs(measured - job_reported_wait(err)) <= 5.0, (measured, job_reported_wait(err))
    # The engineered share is met on an idle machine (±5 points); on a loaded one the job's Python
    # work stretches past its compute budget and the wait share drops, so only a wide bound holds:
    # well past the 20 % "high" threshold, never above what was engineered.
    assert 35.0 <= measured <= engineered + 5.0, (measured, engineered)
    # The verdict-change log starts warming up and reaches data.
    assert summary["changes"][0]["axis"] == "warming_up"
    assert any(c["bottleneck"] == "data/input-wait" for c in summary["changes"])
    # The process tree tells the DataLoader workers apart from the training process.
    assert summary["run"]["workers"] == workers
    # The finding names the loader running in the training process only when it does.
    detail = next(f["detail"] for f in summary["findings"] if f["id"] == "data/input-wait")
    assert ("in the training process itself" in detail) == (workers == 0)


FAST_LOADER = pathlib.Path(__file__).parent / "data" / "watch" / "fast_loader_compute_heavy.jsonl"


def test_fast_loader_compute_heavy_model_is_not_data_bound(tmp_path):
    # A loader with no load costs ~0.3 ms of Python per batch against 40 ms of compute. Live, its wait
    # is what the scheduler makes of it: 1 % on an idle machine, 2.4 % at load 5, and over the 5 %
    # threshold once under two busy loops (preempted inside __next__). So this replays a recording of
    # that job (`watch --record`, tests/data/NOTICE.md): the same engine, the same samples every run.
    # The live path is the other tests' (the data-bound jobs, whose shares are far from any threshold).
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", "--replay", str(FAST_LOADER), "--headless", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    samples, summary = [d for d in lines if d["type"] == "sample"], lines[-1]
    assert first_data_verdict(samples) is None, [(s["t"], s["verdict"]["axis"]) for s in samples]
    assert summary["verdict"]["axis"] == "algorithm"
    # No comparison with the job's own log here: at a 1 % share both are dominated by when the
    # scheduler preempts the job (under a CPU hog they differ by up to ~7 points); the data-bound
    # tests compare them where the share is large.
    assert summary["run"]["data_wait_pct"] < 5.0
    assert summary["run"]["steps"] > 50
    assert not any(f["id"].startswith("data/") for f in summary["findings"])
    # Hysteresis: the verdict went from warming up to the step itself, and never flapped.
    assert [c["axis"] for c in summary["changes"]] == ["warming_up", "algorithm"]
