"""What the cache tests share (test_cache.py, test_trace_cache.py, test_tui_cached.py): the cache
turned on in a folder of the test's own (the suite runs with it off: tests/conftest.py), and writers
in other processes paused half-way through an entry, to be killed or let go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DATA
from trainscope.api import cache


def turn_cache_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache on, in ``tmp_path/cache``; its counters from zero. Returns the folder."""
    where = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_DIR, str(where))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    monkeypatch.delenv(cache.ENV_MAX, raising=False)
    monkeypatch.setattr(cache, "_warned_folder", False)
    cache.STATS.reset()
    return where


def temporary(where: Path) -> list[str]:
    """The half-written entries (under their private names) in the cache folder."""
    return sorted(p.name for p in where.iterdir() if p.name.startswith(cache.TMP_PREFIX)) if where.is_dir() else []


def writer(args: list[str], pause_env: str, signal_file: Path) -> subprocess.Popen:
    """``trainscope ARGS`` (in tests/data) that pauses half-way through writing its entry, writes its
    pid to ``signal_file`` and waits for SIGUSR1 (``pause_env`` names the file; cache.ENV_PAUSE or
    trace_cache.ENV_PAUSE)."""
    return subprocess.Popen(
        [sys.executable, "-m", "trainscope", *args],
        env={**os.environ, pause_env: str(signal_file)},
        cwd=DATA,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def paused(p: subprocess.Popen, signal_file: Path) -> int:
    """Wait until the writer says it is half-way through its entry (a condition, not a sleep); its pid."""
    deadline = time.monotonic() + 300
    while not signal_file.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the writer never reached the middle of its entry"
        time.sleep(0.05)
    return int(signal_file.read_text())


def two_writers_of_one_entry(args: list[str], pause_env: str, where: Path, tmp_path: Path) -> list[bytes]:
    """Two writers of one entry, both held half-way (neither seeing the other), then let go: each
    exits 0 without a word about the cache. Their outputs."""
    import signal

    writers = [(writer(args, pause_env, tmp_path / f"w{i}"), tmp_path / f"w{i}") for i in range(2)]
    for p, f in writers:
        paused(p, f)
    assert len(temporary(where)) == 2  # both half-way, neither seeing the other
    for p, _ in writers:
        os.kill(p.pid, signal.SIGUSR1)
    outs = []
    for p, _ in writers:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert b"cache" not in err
        outs.append(out)
    return outs
