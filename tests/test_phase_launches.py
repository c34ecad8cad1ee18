"""phases._launch_phases (one search and one sort for every phase) against the plain definition: per
phase, the runtime calls starting inside its own time, and the kernels whose correlation id one of
them carries (np.isin)."""

from __future__ import annotations

import numpy as np
import pytest

from trainscope.analyzers import intervals as iv
from trainscope.analyzers.trace import phases
from trainscope.analyzers.trace.phases import _launch_phases


def _reference(owns: list[iv.IntervalSet], r_ts: np.ndarray, r_corr: np.ndarray, k_corr: np.ndarray) -> np.ndarray:
    out = np.zeros(len(k_corr), np.uint64)
    for j, own in enumerate(owns):
        launched = iv.contains(own, r_ts) & (r_corr >= 0)
        out |= np.isin(k_corr, r_corr[launched]).astype(np.uint64) << np.uint64(j)
    return out


def _disjoint_sets(rng: np.random.Generator, n_sets: int) -> list[iv.IntervalSet]:
    """Disjoint sorted sets over a small time range: cut points shared out among the sets, some
    pieces empty (equal bounds), some touching their neighbours."""
    cuts = np.sort(rng.integers(0, 60, int(rng.integers(0, 24))))
    owner = rng.integers(-1, n_sets, max(len(cuts) - 1, 0))
    sets = []
    for j in range(n_sets):
        pick = np.flatnonzero(owner == j)
        sets.append((cuts[pick].astype(np.int64), cuts[pick + 1].astype(np.int64)))
    return sets


@pytest.mark.parametrize(("piece", "n_sets"), [(None, 3), (5, 3), (None, 11)])
def test_launch_phases_matches_the_definition_on_random_inputs(piece, n_sets, monkeypatch):
    """Three phases as today, and eleven: more than a byte of bits holds."""
    if piece is not None:  # the calls placed a few at a time, as a large trace's are
        monkeypatch.setattr(phases, "_PIECE", piece)
    rng = np.random.default_rng(39)
    for _ in range(400):
        owns = _disjoint_sets(rng, n_sets)
        n_r, n_k = int(rng.integers(0, 40)), int(rng.integers(0, 40))
        r_ts = rng.integers(-2, 62, n_r).astype(np.int64)
        # repeated ids (two calls of one id, in different phases or none), negative ids, unsorted ids
        r_corr = rng.integers(-2, 25, n_r).astype(np.int64)
        if rng.random() < 0.5:
            r_corr = np.sort(r_corr)
        k_corr = rng.integers(-2, 30, n_k).astype(np.int64)
        got = _launch_phases(owns, r_ts, r_corr, k_corr)
        assert got.tolist() == _reference(owns, r_ts, r_corr, k_corr).tolist()


def test_a_call_in_two_phases_marks_its_kernels_in_both():
    owns = [(np.array([0]), np.array([10])), (np.array([10]), np.array([20])), iv.EMPTY]
    r_ts = np.array([5, 15, 25, 3], np.int64)
    r_corr = np.array([7, 7, 8, -1], np.int64)
    k_corr = np.array([7, 8, -1, 9], np.int64)
    assert _launch_phases(owns, r_ts, r_corr, k_corr).tolist() == [3, 0, 0, 0]
