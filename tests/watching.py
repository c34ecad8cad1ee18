"""The headless watch the live tests launch (test_watch_*.py, test_live_*.py, test_hardening.py):
``python -m trainscope watch --headless --interval 0.25 OPTIONS -- JOB``, four samples a second, and
the two-rank torchrun launcher the multi-rank jobs run under."""

from __future__ import annotations

import sys
from collections.abc import Sequence

TORCHRUN_2 = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def watch_argv(*options: str, job: Sequence[str] | None = None) -> list[str]:
    """The command line: with ``job``, watch launches it (after ``--``); without, ``options`` say what
    to attach to (``--pid``)."""
    argv = [sys.executable, "-m", "trainscope", "watch", "--headless", "--interval", "0.25", *options]
    return argv if job is None else [*argv, "--", *job]
