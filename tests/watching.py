"""The headless watch the live tests launch (test_watch_*.py, test_live_*.py, test_hardening.py):
``python -m trainscope watch --headless --interval 0.25 OPTIONS -- JOB``, four samples a second, and
the two-rank torchrun launcher the multi-rank jobs run under."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TORCHRUN_2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def watch_argv(*options: str, job: Sequence[str] | None = None) -> list[str]:
    """The command line: with ``job``, watch launches it (after ``--``); without, ``options`` say what
    to attach to (``--pid``)."""
    argv = [sys.executable, "-m", "trainscope", "watch", "--headless", "--interval", "0.25", *options]
    return argv if job is None else [*argv, "--", *job]


def run_with_short_tmpdir(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """``argv`` run to its end (text output captured) with a short TMPDIR for the job.

    Under pytest's long tmp_path the Unix sockets that DataLoader workers pass batches through
    (Python's multiprocessing, $TMPDIR/pymp-…/listener-…) overflow the 107 bytes of a socket
    address, a batch is dropped and the job hangs (watch names that; see
    test_watch_cli.py's test_a_long_tmpdir_is_named_…). A short one under the run's own folder is
    removed with it."""
    job_tmp = tempfile.mkdtemp(prefix="w", dir=os.environ.get("TRAINSCOPE_TEST_TMP"))
    try:
        env = {**os.environ, "TMPDIR": job_tmp}
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    finally:
        shutil.rmtree(job_tmp, ignore_errors=True)
