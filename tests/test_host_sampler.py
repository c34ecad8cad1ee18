"""The host sampler on a real process tree: the training process and its DataLoader workers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from trainscope.collectors.host import HostSampler

TREE = textwrap.dedent("""
    import multiprocessing as mp, time, subprocess, sys
    def burn():
        end = time.monotonic() + 6
        while time.monotonic() < end: pass
    if __name__ == "__main__":
        ps = [mp.get_context("fork").Process(target=burn) for _ in range(2)]
        for p in ps: p.start()
        other = subprocess.Popen(["sleep", "6"])
        print("ready", flush=True)
        time.sleep(6)
""")


def test_process_tree_split_into_main_workers_and_other():
    job = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        h = HostSampler([job.pid])
        h.start()
        time.sleep(1.0)
        s = h.sample()
        main, workers, other = s.group("main"), s.group("workers"), s.group("other")
        assert main.pids == (job.pid,)
        assert workers.count == 2 and len(set(workers.pids)) == 2
        assert other.count == 1  # `sleep` is a child but not a Python worker
        # Two busy-looping workers against a sleeping main process: the workers' share is the larger
        # whatever else loads the machine (a fixed floor such as 30 % failed at load average 9 on 2
        # cores, where the two loops got 25.8 %), and the sleeping main stays near idle.
        assert workers.cpu_pct > max(1.0, 2 * main.cpu_pct)
        assert main.cpu_pct < 30 and main.rss > 1_000_000
        assert 0 <= s.cpu_pct <= 100 and len(s.per_core) >= 1 and s.mem_total > s.mem_used > 0
    finally:
        import psutil

        for p in psutil.Process(job.pid).children(recursive=True):  # end the workers we started
            p.kill()
        job.kill()
        job.wait()
    gone = h.sample()
    assert gone.group("workers").count == 0 and gone.group("main") is None  # tree gone: no crash


def test_ranks_from_the_environment_and_their_workers(tmp_path):
    """A launcher's children with RANK/WORLD_SIZE are ranks; a rank's own Python child (a DataLoader
    worker inherits the rank's environment) is a worker, not a rank."""
    import os
    import subprocess
    import sys
    import time

    from trainscope.collectors.host import HostSampler

    rank_code = (
        "import subprocess, sys, time\n"
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "time.sleep(600)\n"
    )
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, subprocess, sys, time\n"
            f"ps = [subprocess.Popen([sys.executable, '-c', {rank_code!r}], env={{**os.environ, "
            "'RANK': str(r), 'WORLD_SIZE': '2'}) for r in range(2)]\n"
            "time.sleep(600)\n",
        ],
        start_new_session=True,  # its own process group: the whole tree is ended below, however far it got
    )
    try:
        h = HostSampler([launcher.pid])
        end = time.monotonic() + 120
        while time.monotonic() < end:
            mains, workers, other = h.tree()
            if len(mains) == 2 and len(workers) == 2:
                break
            time.sleep(0.2)
        assert len(mains) == 2 and all(m.environ().get("RANK") in ("0", "1") for m in mains)
        assert len(workers) == 2 and {w.ppid() for w in workers} == {m.pid for m in mains}
        assert [o.pid for o in other] == [launcher.pid]
    finally:
        # The processes live until ended here (they slept 30 s, which a machine at load 8 outlasted:
        # one rank had exited before the sampler saw both); the launcher's group is the whole tree.
        os.killpg(launcher.pid, 9)
        launcher.wait()
