"""Membership of integer ids (correlation ids) in a pool of ids, by sorting the pool once.

``np.isin`` on two large int64 arrays makes both unique (a hash, then a sort of both together):
0.8 s for 2.2 M runtime calls against 1.1 M kernels' correlation ids. Sorting the pool and a
binary search for each value gives the same answer in half that time on random ids, and in a
tenth where the values come in time order, as a trace's correlation ids nearly do.
"""

from __future__ import annotations

import numpy as np

from trainscope.analyzers.intervals import searchsorted


def isin(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``np.isin(values, pool)`` for integer arrays."""
    values = np.asarray(values)
    if not len(values) or not len(pool):
        return np.zeros(len(values), bool)
    s = np.sort(pool)
    pos = searchsorted(s, values)
    np.minimum(pos, len(s) - 1, out=pos)
    found: np.ndarray = s[pos] == values
    return found
