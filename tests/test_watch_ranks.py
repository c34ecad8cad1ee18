"""Every rank of `watch -- torchrun …`: per-rank figures in the JSON lines, and the rank holding the
others back named only with clear evidence (a real 2-process gloo job on the CPU; synthetic
windows for the rule's edges)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests.watching import TORCHRUN_2
from tests.watching import watch_argv
from trainscope.analyzers.live.rank_window import binomial_tail
from trainscope.analyzers.live.rank_window import rank_window
from trainscope.analyzers.rules import Rules
from trainscope.traces.samples import RankSample
from trainscope.traces.samples import Snapshot

JOB = pathlib.Path(__file__).parent / "jobs" / "ddp_job.py"


def test_torchrun_job_reports_every_rank_and_names_the_slow_one(tmp_path):
    cmd = watch_argv(
        "--format", "json", job=[*TORCHRUN_2, str(JOB), "--seconds", "6", "--slow-rank", "1", "--load-ms", "5"]
    )
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(ln) for ln in p.stdout.splitlines()]
    summary = lines[-1]
    assert summary["type"] == "summary"
    ranks = {r["rank"]: r for r in summary["ranks"]["ranks"]}
    assert set(ranks) == {"0", "1"}
    # Engineered: rank 1 loads 8 samples × 5 ms = 40 ms per iteration; rank 0 loads from memory.
    assert ranks["1"]["wait_ms"] >= 25.0 and ranks["0"]["wait_ms"] < 10.0, ranks
    for r in ranks.values():
        assert r["steps"] > 20 and r["step_ms"] > 0 and r["own_ms"] is not None and r["rss"] > 10 * 2**20
    # The ranks stretch alike (synchronous): their iteration times agree within 20 %.
    assert abs(ranks["0"]["step_ms"] - ranks["1"]["step_ms"]) <= 0.2 * ranks["1"]["step_ms"]
    assert summary["ranks"]["straggler"] == "1", summary["ranks"]["evidence"]
    # The JSON sample lines carry the per-rank window too.
    assert any(s.get("ranks", {}).get("ranks") for s in lines if s["type"] == "sample")
    # Two ranks are not "2 DataLoader workers", and the fix is not num_workers=8 on this machine.
    assert summary["run"]["workers"] == 0
    assert all("num_workers=8" not in f["change"] for f in summary["fixes"])
    assert "rank 0: steps=" in p.stderr and "rank 1: steps=" in p.stderr  # the job's own lines (stdout → stderr)


def window(waits_ms: dict[str, float], n: int = 12, step_ms: float = 50.0) -> list[Snapshot]:
    steps = 5
    return [
        Snapshot(
            t=float(i),
            dt=1.0,
            ranks=tuple(
                RankSample(r, 100 + k, steps, int(w * 1e6 * steps), int(step_ms * 1e6 * steps), 0, 2**28)
                for k, (r, w) in enumerate(waits_ms.items())
            ),
        )
        for i in range(n)
    ]


def test_the_rule_names_a_rank_only_with_clear_evidence():
    rules = Rules()
    rw = rank_window(window({"0": 0.5, "1": 30.0}), rules)
    assert rw.straggler == "1" and "12 of 12 samples" in rw.evidence
    assert rank_window(window({"0": 2.0, "1": 3.0}), rules).straggler is None  # 1 ms < 5 % of 50 ms
    assert rank_window(window({"0": 0.5, "1": 30.0}, n=4), rules).straggler is None  # too few samples
    # Alternating leaders: no rank is longest in a share chance does not explain.
    snaps = window({"0": 0.5, "1": 30.0}, n=6) + window({"0": 30.0, "1": 0.5}, n=6)
    assert rank_window(snaps, rules).straggler is None
    assert rank_window([Snapshot(t=0.0, dt=1.0)], rules) is None  # single process: no rank view
    assert abs(binomial_tail(12, 12, 0.5) - 0.5**12) < 1e-12 and abs(binomial_tail(0, 5, 0.3) - 1.0) < 1e-12


def test_each_rank_gets_the_gpu_nvml_lists_it_on():
    from trainscope.collectors.monitor import Monitor
    from trainscope.collectors.samples import GpuProcess
    from trainscope.collectors.samples import GpuSample
    from trainscope.collectors.step_receiver import HookStatus

    class Steps:
        def drain(self):
            return None

        def status(self):
            return HookStatus("on", "x", (11, 12))

        def drain_per_process(self):
            return {11: (10, 10**6, 5 * 10**8, 10**5), 12: (10, 4 * 10**8, 5 * 10**8, 10**7)}

        def rank_pids(self):
            return {11: "0", 12: "1"}

    class Gpu:
        available = True

        def sample(self):
            return (
                GpuSample(0, "G", 97.0, processes=(GpuProcess(11, 3 * 2**30),)),
                GpuSample(1, "G", 41.0, processes=(GpuProcess(12, 5 * 2**30),)),
            )

        def drain_notes(self):
            return []

    class Host:
        def sample(self):
            return None

        def drain_notes(self):
            return []

        def rss(self, pid):
            return pid * 2**20

    m = Monitor(1.0, lambda s: None, gpu=Gpu(), host=Host(), steps=Steps())
    snap = m.sample()
    r0, r1 = snap.ranks
    assert (r0.rank, r0.gpu, r0.gpu_mem, r0.gpu_util, r0.rss) == ("0", 0, 3 * 2**30, 97.0, 11 * 2**20)
    assert (r1.rank, r1.gpu, r1.gpu_util, r1.steps, r1.data_wait_pct) == ("1", 1, 41.0, 10, 80.0)


def test_pid_of_a_launcher_sees_its_ranks_through_the_opt_in_hook(tmp_path):
    """`watch --pid <launcher>`: ranks that call step_hook.install() find the launcher's watcher."""
    import time

    rank = tmp_path / "rank.py"
    rank.write_text(
        "import trainscope.collectors.step_hook as step_hook\n"
        "step_hook.install()\n"
        "import runpy, sys\n"
        f"sys.argv = ['capture_job', '--steps', '500', '--compute-ms', '20']\n"
        f"runpy.run_path({str(pathlib.Path(__file__).parent / 'jobs' / 'capture_job.py')!r}, run_name='__main__')\n"
    )
    launcher = tmp_path / "launch.py"
    launcher.write_text(
        "import os, subprocess, sys\n"
        f"procs = [subprocess.Popen([sys.executable, {str(rank)!r}], env={{**os.environ, 'RANK': str(r), "
        "'LOCAL_RANK': str(r), 'WORLD_SIZE': '2'}, stdout=subprocess.DEVNULL) for r in range(2)]\n"
        "sys.exit(max(p.wait() for p in procs))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the ranks' hooks and the watch meet in tmp_path/trainscope-UID
    job = subprocess.Popen([sys.executable, str(launcher)], env=env)
    try:
        time.sleep(0.5)
        p = subprocess.run(
            watch_argv("--pid", str(job.pid), "--format", "json", "--duration", "90"),
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        summary = json.loads(p.stdout.splitlines()[-1])
        ranks = {r["rank"]: r for r in summary["ranks"]["ranks"]}
        assert set(ranks) == {"0", "1"} and all(r["steps"] > 20 for r in ranks.values()), summary["ranks"]
        assert summary["run"]["workers"] == 0  # the launcher's two children are ranks, not DataLoader workers
    finally:
        job.kill()
        job.wait()


def test_a_capture_of_a_torchrun_job_traces_every_rank_and_names_the_late_one(tmp_path):
    """`--capture-at` in a two-rank job: each rank's hook writes its own trace of the same 3
    iterations into one folder, which is analyzed as a rank set (per-rank lines, the straggler)."""
    cap_dir = tmp_path / "caps"
    cmd = watch_argv(
        "--capture-at",
        "2",
        "--capture-steps",
        "3",
        "--capture-dir",
        str(cap_dir),
        job=[*TORCHRUN_2, str(JOB), "--seconds", "8", "--slow-rank", "1", "--load-ms", "5"],
    )
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    assert p.returncode == 0, p.stderr[-3000:]
    traces = sorted((cap_dir / "capture-1").glob("*.pt.trace.json"))
    assert [t.name.split("-")[0] for t in traces] == ["rank0", "rank1"], list(cap_dir.rglob("*"))
    for t in traces:
        events = json.loads(t.read_text())["traceEvents"]
        assert len({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}) == 3
    out = p.stdout.splitlines()
    assert any(ln.startswith("trainscope: capture 1 (") and f"trace {cap_dir / 'capture-1'}" in ln for ln in out), out
    assert any(ln.startswith("trainscope: capture 1 rank 0: step p50") for ln in out), out
    # Engineered: rank 1 sleeps 40 ms per iteration loading its shard; its own trace says so.
    assert any(ln.startswith("trainscope: capture 1 rank 1: step p50") and "data / data/input-wait" in ln for ln in out)
    # The launcher (torchrun) imported torch but never iterates: it is not asked for a trace.
    assert not any("no trace" in ln for ln in out), out
