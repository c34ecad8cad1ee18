"""cost._climb_rows (the nesting of the intervals a climb can read only) against the whole nesting
(the stack loop): the innermost interval each instant climbs to is the same, on random intervals with
ties, zero lengths, partial overlaps and runs of back-to-back ones."""

from __future__ import annotations

import numpy as np

from trainscope.analyzers.nesting import nest_parents
from trainscope.analyzers.nesting import nest_parents_loop
from trainscope.analyzers.trace.cost import _climb_rows
from trainscope.analyzers.trace.cost import _spread


def _climb(parent: np.ndarray, e: np.ndarray, pos: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The climb of cost._innermost: up the enclosing intervals while the current one ended before."""
    pos = pos.copy()
    for _ in range(len(e) + 1):
        c = np.clip(pos, 0, None)
        bad = (pos >= 0) & (e[c] < q)
        if not bad.any():
            break
        pos = np.where(bad, parent[c], pos)
    return pos


def test_climbs_end_where_the_whole_nesting_takes_them():
    rng = np.random.default_rng(39)
    for _ in range(500):
        n = int(rng.integers(1, 80))
        s = rng.integers(0, 60, n).astype(np.int64)
        d = rng.integers(0, 20, n).astype(np.int64)
        d[rng.random(n) < 0.15] = 0
        if rng.random() < 0.5:  # runs of back-to-back calls, as launches under a range
            run = np.sort(rng.integers(0, 60, n // 2 + 1))
            s[: len(run)] = run
            d[: len(run)] = rng.integers(0, 3, len(run))
        o = np.lexsort((-d, s))
        s, e = s[o], (s + d)[o]
        q = rng.integers(-2, 85, int(rng.integers(1, 60))).astype(np.int64)
        pos = np.searchsorted(s, q, side="right") - 1
        want = _climb(nest_parents_loop(s, e), e, pos, q)
        sub = _climb_rows(s, e, pos, q)
        got_parent = nest_parents(s, e) if sub is None else _spread(nest_parents(s[sub], e[sub]), sub, len(s))
        assert _climb(got_parent, e, pos, q).tolist() == want.tolist()
        # where it answers, it answers as the whole nesting does
        full = nest_parents_loop(s, e)
        asked = got_parent >= 0
        assert got_parent[asked].tolist() == full[asked].tolist()


def test_distinct_inverse_is_np_unique():
    """link_kernels' distinct launch rows: np.unique's values and inverse, rows ascending or not."""
    from trainscope.analyzers.trace.cost import _distinct_inverse

    rng = np.random.default_rng(5)
    for trial in range(300):
        rows = rng.integers(0, 50, int(rng.integers(0, 40))).astype(np.int64)
        if trial % 2:
            rows = np.sort(rows)  # kernels in launch order: ascending, a graph's launch repeated
        u, inv = _distinct_inverse(rows)
        want_u, want_inv = np.unique(rows, return_inverse=True)
        assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()
