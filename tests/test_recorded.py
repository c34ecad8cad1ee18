"""A trace recorded here, now, by the installed PyTorch: the collector must read the current format.

The machine has no GPU, so the recorded job is a CPU training loop with a deliberately slow
dataset and num_workers=0. trainscope must find the DataLoader waits (host side) and, with no GPU
in the trace, call the run data-bound from those waits alone (CPU training), at the lower
confidence that one kind of evidence allows.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="recording a trace needs torch (installed by the [test] extra)")

JOB = r"""
import sys, time, torch
torch.set_num_threads(1)  # no intra-op thread pool to stall on a loaded machine (the verdict must not depend on load)
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        time.sleep(0.010)  # a slow decode: 10 ms per sample, 8 per batch: 80 ms of waiting per step
        return torch.randn(32), torch.randint(0, 4, ())
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched) as prof:
    for x, y in DataLoader(Slow(), batch_size=8, num_workers=0):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        prof.step()
prof.export_chrome_trace(sys.argv[1])
"""


def test_trace_recorded_by_installed_torch(tmp_path):
    out = tmp_path / "cpu_loop.pt.trace.json"
    subprocess.run([sys.executable, "-c", JOB, str(out)], check=True, timeout=300)
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "analyze", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["steps_method"] == "profiler_step" and len(doc["steps"]) == 4
    raw = json.loads(out.read_text())["traceEvents"]
    steps = [e for e in raw if e.get("name", "").startswith("ProfilerStep#")]
    waits = [e for e in raw if "DataLoader" in e.get("name", "") and "__next__" in e.get("name", "")]
    expected = 100 * sum(e["dur"] for e in waits) / sum(e["dur"] for e in steps)
    assert doc["breakdown"]["data_wait_pct"] == pytest.approx(expected, abs=0.5)
    # 8 samples × 10 ms of sleep = 80 ms of waiting in every step, at the least
    assert all(s["data_wait_pct"] * s["duration_ms"] / 100 >= 80 for s in doc["steps"])
    assert doc["verdict"]["axis"] == "data" and doc["verdict"]["bottleneck"] == "data/input-wait"
    assert doc["verdict"]["confidence"] == 0.75
    assert doc["recommendations"][0]["id"] == "dataloader-workers"
