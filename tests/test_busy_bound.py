"""analyzers/trace/busy_bound.py: the fusion runs, vectorized, equal the kernel-by-kernel loop bit for bit."""

from __future__ import annotations

import numpy as np

from trainscope.analyzers.trace.busy_bound import fused_runs
from trainscope.analyzers.trace.busy_bound import fused_runs_loop


def test_fused_runs_equals_the_loop_on_random_lanes_and_bytes():
    rng = np.random.default_rng(17)
    for trial in range(400):
        n = int(rng.integers(0, 400))
        fusable = rng.random(n) < (0.3 if trial % 2 else 0.9)  # short runs, then long ones
        lane = rng.integers(0, 3, n) * (1 << 32) + (rng.random(n) < 0.05)  # lane changes inside runs
        lane = np.maximum.accumulate(lane) if trial % 3 else lane
        dur = rng.random(n) * 10.0 ** rng.integers(-4, 3, n)
        byts = rng.random(n) * 10.0 ** rng.integers(0, 9, n)
        byts[rng.random(n) < (0.02 if trial % 4 else 0.0)] = np.nan  # bytes unknown in some runs
        byts[rng.random(n) < 0.05] = 0.0
        if trial % 5 == 0:
            byts[:] = 0.0  # no bytes at all: the count share
        got, want = fused_runs(fusable, lane, dur, byts), fused_runs_loop(fusable, lane, dur, byts)
        assert got == want and type(got[0]) is type(want[0]), (trial, got, want)
