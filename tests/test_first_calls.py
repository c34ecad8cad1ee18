"""one_off._first_calls with a mask by name (read at the long rows only) against the same mask
spread over every row first: the same first calls and medians, on random calls."""

from __future__ import annotations

import numpy as np

from trainscope.analyzers.trace.one_off import _first_calls


def test_a_name_mask_finds_what_the_row_mask_finds():
    rng = np.random.default_rng(39)
    for trial in range(300):
        n = int(rng.integers(1, 80))
        names = rng.integers(0, 8, n).astype(np.int32)
        ts = np.sort(rng.integers(0, 50, n)) if trial % 2 else rng.integers(0, 50, n)
        dur = rng.integers(0, 30, n).astype(np.int64)
        name_ok = rng.random(8) < 0.7
        want = _first_calls(names, ts, dur, name_ok[names], 12.0, 2.0)
        assert _first_calls(names, ts, dur, None, 12.0, 2.0, name_ok=name_ok) == want
        rows = rng.random(n) < 0.8  # a row mask and a name mask together
        want = _first_calls(names, ts, dur, rows & name_ok[names], 12.0, 2.0)
        assert _first_calls(names, ts, dur, rows, 12.0, 2.0, name_ok=name_ok) == want
