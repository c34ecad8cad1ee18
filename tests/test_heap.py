import platform
import sys

import pytest

from trainscope.analyzers.trace import heap


def test_no_trim_outside_linux(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert heap._load() is None


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's"
)
def test_release_hands_freed_blocks_back_on_glibc():
    import numpy as np

    assert heap._load() is not None
    blocks = [np.ones(1 << 18) for _ in range(64)]  # 2 MiB each: below the raised mmap threshold
    del blocks
    heap.release()  # returns 0 or 1; must not raise, and is idempotent
    heap.release()
