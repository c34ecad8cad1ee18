"""analyzers/codes.py: distinct values and groups by counting equal np.unique's, dense or not."""

from __future__ import annotations

import numpy as np

from trainscope.analyzers import codes


def test_distinct_and_grouped_equal_np_unique():
    rng = np.random.default_rng(4)
    for trial in range(200):
        n = int(rng.integers(0, 300))
        lo, hi = [(0, 5), (0, 40_000), (-3, 3), (0, 2**40)][trial % 4]  # dense, 16-bit+, negative, sparse
        x = rng.integers(lo, hi, n).astype(np.int32 if hi < 2**31 else np.int64)
        assert np.array_equal(codes.distinct(x), np.unique(x))
        u, order, first = codes.grouped(x)
        want_u, inv = np.unique(x, return_inverse=True)
        assert np.array_equal(u, want_u)
        assert np.array_equal(order, np.argsort(inv, kind="stable"))  # rows of a value in row order
        if n:
            v = rng.integers(0, 10**12, n)
            assert np.add.reduceat(v[order], first).tolist() == [int(v[x == k].sum()) for k in want_u.tolist()]


def _random_codes(seed: int, most: int, highs: tuple[int, ...], low: int, low_every: int):
    """200 trials of (rng, hi, x): x up to ``most`` - 1 int64 values below hi (highs in turn), from
    ``low`` one trial in ``low_every``, else from 0; the rng goes on for the trial's other draws."""
    rng = np.random.default_rng(seed)
    for trial in range(200):
        n = int(rng.integers(0, most))
        hi = highs[trial % len(highs)]
        yield rng, hi, rng.integers(low if trial % low_every == 0 else 0, hi, n)


def _narrow(x: np.ndarray, hi: int) -> np.ndarray:
    """``x`` as int32 where its values (below ``hi``) fit."""
    return x.astype(np.int32) if hi < 2**31 else x


def test_isin_equals_np_isin():
    for rng, hi, x in _random_codes(6, 200, (4, 50, 2**40), -1, 4):
        w = rng.integers(-3, hi + 3, int(rng.integers(0, 6)))
        assert np.array_equal(codes.isin(_narrow(x, hi), w), np.isin(x, w))
        assert np.array_equal(codes.isin(x, list(w.tolist())), np.isin(x, w))


def test_unique_inverse_equals_np_unique():
    for _, hi, x in _random_codes(8, 300, (3, 1_000, 2**40), -2, 5):
        x = _narrow(x, hi)
        u, inv = codes.unique_inverse(x)
        wu, winv = np.unique(x, return_inverse=True)
        assert np.array_equal(u, wu) and u.dtype == wu.dtype
        assert np.array_equal(inv, winv) and inv.dtype == winv.dtype


def test_ascending_gives_the_stable_sort_or_none_when_in_order():
    rng = np.random.default_rng(10)
    for _ in range(100):
        x = rng.integers(0, 30, int(rng.integers(0, 50)))
        s, order = codes.ascending(x)
        want = np.argsort(x, kind="stable")
        assert np.array_equal(s, x[want])
        assert (order is None and np.array_equal(want, np.arange(len(x)))) or np.array_equal(order, want)
    assert codes.ascending(np.arange(5))[1] is None
