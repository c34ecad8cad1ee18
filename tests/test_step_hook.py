"""The step-exact hook: injected via sitecustomize, chains an existing sitecustomize, never imports
torch eagerly, reports what the loop did, and never breaks the job when it cannot install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from trainscope.collectors.step_receiver import HOOK_MODULE
from trainscope.collectors.step_receiver import StepReceiver
from trainscope.collectors.step_receiver import child_environment


@pytest.fixture
def receiver():
    r = StepReceiver()
    yield r
    r.close()


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=120
    )


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


LOOP = """
    import time, torch
    from torch.utils.data import DataLoader, Dataset
    class D(Dataset):
        def __len__(self): return 40
        def __getitem__(self, i):
            time.sleep(0.004)
            return torch.zeros(2)
    n = 0
    for epoch in range(2):
        for x in DataLoader(D(), batch_size=2):
            t = time.monotonic()
            while time.monotonic() - t < 0.002: pass
            n += 1
    print("steps", n)
"""


def test_hook_times_every_step_without_code_changes(receiver):
    env, site = child_environment(receiver.path)
    try:
        p = run_child(LOOP, env)
    finally:
        shutil.rmtree(site)
    assert p.returncode == 0 and "steps 40" in p.stdout, p.stderr
    assert wait_for(lambda: receiver.status().mode == "on")
    got = []
    assert wait_for(lambda: bool(got.append(receiver.drain()) or sum(s.steps for s in got if s) >= 41))
    total = [s for s in got if s]
    steps = sum(s.steps for s in total)
    # 2 epochs × 20 batches = 40 batches and 2 StopIteration calls: 42 __next__ calls, 41 completed intervals.
    assert steps == 41
    wait = sum(s.wait_ns for s in total) / sum(s.step_ns for s in total)
    # Each batch loads 2 × 4 ms and computes 2 ms: the loop waits ≈ 80 % of the time.
    assert 0.6 < wait < 0.95


def test_torch_is_not_imported_eagerly_and_existing_sitecustomize_runs(receiver, tmp_path):
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED_SITECUSTOMIZE'] = 'yes'\n")
    env, site = child_environment(receiver.path, base={**os.environ, "PYTHONPATH": str(other)})
    try:
        p = run_child(
            """
            import os, sys
            print("torch" in sys.modules, os.environ.get("CHAINED_SITECUSTOMIZE"), sys.modules["sitecustomize"].__file__)
        """,
            env,
        )
    finally:
        shutil.rmtree(site)
    assert p.returncode == 0, p.stderr
    eager, chained, module_file = p.stdout.split()
    assert eager == "False" and chained == "yes" and module_file == str(other / "sitecustomize.py")
    assert wait_for(lambda: receiver.status().mode == "waiting")  # hook in, no DataLoader iterated


def test_a_hook_that_cannot_install_leaves_the_job_unchanged(receiver):
    env, site = child_environment(receiver.path)
    try:
        with open(os.path.join(site, f"{HOOK_MODULE}.py"), "w") as f:
            f.write("raise ImportError('simulated: hook cannot load')\n")
        p = run_child(LOOP, env)
    finally:
        shutil.rmtree(site)
    assert p.returncode == 0 and "steps 40" in p.stdout and p.stderr == ""
    st = receiver.status()
    assert st.mode == "off" and "no step hook reported in" in st.detail


def test_job_runs_when_no_watcher_listens(tmp_path):
    env, site = child_environment(str(tmp_path / "nobody-listens.sock"))
    try:
        p = run_child(LOOP, env)
    finally:
        shutil.rmtree(site)
    assert p.returncode == 0 and "steps 40" in p.stdout and p.stderr == ""


def test_opt_in_two_lines_after_torch_import(tmp_path):
    path = str(tmp_path / "s.sock")
    r = StepReceiver(path)
    try:
        env = {**os.environ, "TRAINSCOPE_STEP_SOCKET": path}
        p = run_child(
            "import torch\nimport trainscope.collectors.step_hook as step_hook\nstep_hook.install()\n"
            + textwrap.dedent(LOOP),
            env,
        )
        assert p.returncode == 0, p.stderr
        assert wait_for(lambda: r.status().mode == "on")
    finally:
        r.close()


def test_receiver_ignores_garbage(receiver):
    for junk in (
        b"",
        b"\xff\xfe",
        b"[]",
        b'{"type":"steps","pid":1}',
        b'{"type":"steps","pid":1,"n":1,"wait_ns":9,"step_ns":1,"max_wait_ns":0}',
        b'{"type":"steps","pid":"x"}',
    ):
        receiver.handle(junk)
    assert receiver.drain() is None and receiver.status().mode == "off"
    receiver.handle(b'{"type":"steps","pid":1,"n":2,"wait_ns":5,"step_ns":10,"max_wait_ns":3}')
    s = receiver.drain()
    assert (s.steps, s.wait_ns, s.step_ns, s.data_wait_pct) == (2, 5, 10, 50.0)


def test_capture_targets_survive_a_rank_that_is_not_an_ascii_number():
    """A hello whose rank is "²" (str.isdigit() holds, int() refuses) used to raise ValueError out
    of capture_targets, ending the capture request with a traceback; it is ordered after the
    numbered ranks and its trace is named by its pid."""
    import json

    r = StepReceiver()
    try:
        for pid, rank in ((11, "²"), (12, "1"), (13, "0")):
            r.handle(json.dumps({"type": "hello", "pid": pid, "rank": rank}).encode())
            r.handle(
                json.dumps({"type": "steps", "pid": pid, "n": 1, "wait_ns": 1, "step_ns": 2, "max_wait_ns": 1}).encode()
            )
            r._addr[pid] = f"peer{pid}"  # as if each hook had bound its reply socket
        targets, why = r.capture_targets()
        assert targets == [(13, "0"), (12, "1"), (11, "²")] and why == ""
    finally:
        r.close()


def test_step_mode_works_where_tmpdir_is_longer_than_a_socket_address(tmp_path):
    """Both ends address the sockets through their folder's descriptor (/proc/self/fd/N/…), so a
    TMPDIR past the 108 bytes of a socket address (a deep CI or xdist tmp_path) still works."""
    deep = tmp_path / ("d" * 100) / ("e" * 40)
    deep.mkdir(parents=True, mode=0o700)
    r = StepReceiver(str(deep / "steps.sock"))
    try:
        assert len(r.path) > 108
        env, site = child_environment(r.path, folder=str(deep))
        p = run_child(LOOP, env)
        assert p.returncode == 0 and "steps 40" in p.stdout, p.stderr
        assert wait_for(lambda: r.status().mode == "on")
    finally:
        r.close()
    assert sorted(x.name for x in deep.iterdir() if not x.name.startswith("trainscope-site-")) == []
