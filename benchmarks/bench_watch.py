"""What watching costs: the sampler's CPU time per sample, the step hook's cost per DataLoader
``__next__``, the cost of replaying recordings of many GPUs, and the slowdown of a real CPU training job run with and without ``trainscope watch``.

    python benchmarks/bench_watch.py [--seconds 8] [--repeats 2]

Prints figures; asserts nothing (timings on a shared machine are for reading, not for tests).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "jobs", "train_job.py")


def sampler_cost(n: int = 200) -> None:
    from trainscope.collectors.host import HostSampler
    from trainscope.collectors.monitor import Monitor
    from trainscope.collectors.nvml import NvmlSampler

    gpu = NvmlSampler()
    m = Monitor(1.0, lambda s: None, gpu=gpu, host=HostSampler([os.getpid()]))
    gpu.start()
    m.host.start()
    for _ in range(n):
        m.sample()
    costs = m.cost_s
    gpus = "no GPU (NVML unavailable)" if not gpu.available else f"{len(gpu.device_names)} GPU(s)"
    print(
        f"sampler: {1e3 * statistics.mean(costs):.2f} ms CPU per sample (median {1e3 * statistics.median(costs):.2f} ms, "
        f"{n} samples, {gpus}) → {100 * statistics.mean(costs) / 1.0:.2f} % of one core at 1 s, "
        f"{100 * statistics.mean(costs) / 0.25:.2f} % at 0.25 s"
    )


def hook_cost(n: int = 200_000) -> None:
    """The wrapper's own cost: a trivial iterator's __next__ with and without the hook."""
    import types

    from trainscope.collectors import step_hook

    class Iter:
        def __next__(self):
            return 1

    module = types.SimpleNamespace(_BaseDataLoaderIter=Iter)
    it = Iter()
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    plain = (time.perf_counter() - t0) / n
    step_hook._state = step_hook._Stream("/nonexistent/trainscope-bench.sock")
    step_hook._wrap_iterator_class(module)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    hooked = (time.perf_counter() - t0) / n
    print(
        f"step hook: {1e6 * (hooked - plain):.2f} µs added per DataLoader __next__ "
        f"({1e6 * plain:.2f} → {1e6 * hooked:.2f} µs, {n:,} calls; batches flushed every 0.1 s)"
    )


def job_steps(cmd: list[str]) -> tuple[int, float]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    m = re.search(r"job: steps=(\d+)", p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"job failed: {p.stderr[-500:]}")
    return int(m.group(1)), wall


def job_slowdown(seconds: float, repeats: int) -> None:
    # A compute-bound job (fast loader, fixed work per step): steps completed in a fixed time measure its speed.
    job = [sys.executable, JOB, "--load-ms", "0", "--compute-ms", "0", "--matmuls", "20", "--seconds", str(seconds)]
    watch = [sys.executable, "-m", "trainscope", "watch", "--headless", "--format", "json", "--interval"]
    rows = []
    for _ in range(repeats):
        rows.append(("plain", job_steps(job)[0]))
        rows.append(("watch 1 s", job_steps(watch + ["1", "--"] + job)[0]))
        rows.append(("watch 0.25 s", job_steps(watch + ["0.25", "--"] + job)[0]))
    base = statistics.mean(s for k, s in rows if k == "plain")
    print(f"CPU training job, {seconds:g} s of steps (fast loader, 20 matmuls 256×256 per step), {repeats} runs each:")
    for kind in ("plain", "watch 1 s", "watch 0.25 s"):
        vals = [s for k, s in rows if k == kind]
        mean = statistics.mean(vals)
        print(
            f"  {kind:13s} {mean:8.0f} steps  ({', '.join(map(str, vals))})  slowdown {100 * (1 - mean / base):+.1f} %"
        )


def replay_cost(shapes=((40, 1000), (40, 4000), (160, 1000))) -> None:
    """Replay (``watch --replay --headless``) of synthetic recordings of samples × GPUs: the cost
    should follow samples × GPUs (the window's statistics read per-snapshot digests)."""
    import random
    import tempfile

    from trainscope.collectors.recording import RecordingWriter
    from trainscope.traces.samples import GpuSample
    from trainscope.traces.samples import HostSample
    from trainscope.traces.samples import Snapshot
    from trainscope.traces.samples import StepSample

    rnd = random.Random(1)
    with tempfile.TemporaryDirectory() as d:
        for n, g in shapes:
            path = os.path.join(d, f"rec{n}x{g}.jsonl")
            w = RecordingWriter(path, {"started": 1.7e9, "interval_s": 1.0, "command": ["bench"]})
            for k in range(n):
                gpus = tuple(
                    GpuSample(
                        i,
                        "GPU",
                        90 + 10 * rnd.random(),
                        40.0,
                        50 << 30,
                        80 << 30,
                        650 + 20 * rnd.random(),
                        700.0,
                        1980.0,
                        60.0,
                        ("sw_power_cap",) if rnd.random() < 0.1 else (),
                    )
                    for i in range(g)
                )
                w.write(
                    Snapshot(
                        t=k + 1.0,
                        dt=1.0,
                        wall=1.7e9 + k,
                        gpus=gpus,
                        host=HostSample(cpu_pct=50.0),
                        step=StepSample(10, 1_000_000, 100_000_000),
                        step_mode="on",
                    )
                )
            w.close()
            t0, c0 = time.perf_counter(), os.times()
            subprocess.run(
                [sys.executable, "-m", "trainscope", "watch", "--replay", path, "--headless"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
            )
            c1 = os.times()
            cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
            print(
                f"replay {n} samples × {g} GPUs ({os.path.getsize(path) / 1e6:.0f} MB): "
                f"{time.perf_counter() - t0:.1f} s wall, {cpu:.1f} s CPU, "
                f"{1e6 * cpu / (n * g):.1f} µs CPU per GPU-sample"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--replay-only", action="store_true", help="only the replay cost figures")
    a = p.parse_args()
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    replay_cost()
    if a.replay_only:
        return
    sampler_cost()
    hook_cost()
    job_slowdown(a.seconds, a.repeats)


if __name__ == "__main__":
    main()
