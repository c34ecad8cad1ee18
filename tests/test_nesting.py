"""analyzers/nesting.py: the vectorized parent search equals the stack loop, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from trainscope.analyzers.nesting import nest_parents
from trainscope.analyzers.nesting import nest_parents_loop


def _assert_as_the_loop(starts, ends, order=None, groups=None, closed_at_end=False) -> None:
    """The vectorized parents are the stack loop's, bit for bit."""
    want = nest_parents_loop(starts, ends, order, groups, closed_at_end)
    assert np.array_equal(nest_parents(starts, ends, order, groups, closed_at_end), want)


def _random_intervals(rng, most: int, latest_start: int, longest: int):
    """Between 1 and ``most`` - 1 intervals as (starts, durations), one in ten of them zero-length."""
    n = int(rng.integers(1, most))
    s = rng.integers(0, latest_start, n)
    d = rng.integers(0, longest, n)
    d[rng.random(n) < 0.1] = 0  # zero-length intervals
    return s, d


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_random_intervals_with_overlaps_ties_and_zero_lengths(closed_at_end):
    rng = np.random.default_rng(7)
    for _ in range(400):
        s, d = _random_intervals(rng, 250, 60, 25)
        g = rng.integers(0, 3, len(s))
        _assert_as_the_loop(s, s + d, np.lexsort((-d, s, g)), g, closed_at_end)


def test_deep_proper_nesting_and_long_sibling_runs():
    # a 2,000-deep chain, then 5,000 siblings under one parent: pointer jumping must not depend on depth
    n = 2000
    s = np.arange(n, dtype=np.int64)
    e = 10 * n - s
    s2 = 3 * n + 2 * np.arange(5000)
    starts, ends = np.concatenate([s, [3 * n - 1], s2]), np.concatenate([e, [20 * n], s2 + 1])
    order = np.lexsort((-(ends - starts), starts))
    got = nest_parents(starts, ends, order)
    assert np.array_equal(got, nest_parents_loop(starts, ends, order))
    assert got[0] == -1 and got[1] == 0 and got[n - 1] == n - 2


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_runs_of_back_to_back_intervals_match_the_loop(closed_at_end):
    """Runs of intervals each closed at the next one's start (launch calls under a range, the first
    round's runs) broken by nested, touching, partially overlapping and zero-length ones, across
    group changes: the parents are the loop's."""
    rng = np.random.default_rng(39)
    for _ in range(300):
        parts_s, parts_e, t = [], [], 0
        for _ in range(int(rng.integers(1, 12))):
            outer = int(rng.integers(5, 80))
            parts_s.append(t)
            parts_e.append(t + outer + int(rng.integers(-10, 10)))  # sometimes ends inside the run
            u = t
            for _ in range(int(rng.integers(0, 25))):  # back to back, touching or one apart
                d = int(rng.integers(0, 4))
                parts_s.append(u)
                parts_e.append(u + d)
                u += d + int(rng.integers(0, 2))
            t += int(rng.integers(0, outer + 5))
        s, e = np.array(parts_s, np.int64), np.array(parts_e, np.int64)
        e = np.maximum(e, s)
        g = (rng.random(len(s)) < 0.05).cumsum() % 3 if rng.random() < 0.5 else None
        order = np.lexsort((-(e - s), s)) if g is None else np.lexsort((-(e - s), s, g))
        _assert_as_the_loop(s, e, order, g, closed_at_end)


def test_partial_overlaps_have_no_parent_and_shadow_the_buried():
    # [0,10) then [5,20) (partial: no parent) then [12,15): inside [5,20), not [0,10)
    s, e = np.array([0, 5, 12]), np.array([10, 20, 15])
    assert nest_parents(s, e).tolist() == [-1, -1, 1] == nest_parents_loop(s, e).tolist()


def test_membership_isin_is_numpys_isin():
    """Membership by a sorted pool and binary search: np.isin's answer, on random, repeated,
    negative and empty ids."""
    from trainscope.analyzers import membership

    rng = np.random.default_rng(5)
    for n, m in ((0, 3), (3, 0), (1, 1), (50, 7), (1000, 1000), (5000, 20)):
        for _ in range(5):
            v = rng.integers(-20, 60, n)
            p = rng.integers(-20, 60, m)
            assert np.array_equal(membership.isin(v, p), np.isin(v, p)), (n, m)


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_long_top_level_runs_and_extreme_times_match_the_loop(closed_at_end):
    """Top-level intervals (every earlier one closed) are settled at once by the running maximum of
    ends; long runs of them, negative times, and times near int64's ends (where that shortcut is
    skipped) give the loop's parents."""
    rng = np.random.default_rng(11)
    for base in (0, -(10**12), 2**62, -(2**62)):
        for _ in range(60):
            n = int(rng.integers(2, 300))
            s = base + np.sort(rng.integers(0, 20 * n, n))  # sparse: mostly top level, some nesting
            d = rng.integers(0, 40, n)
            g = rng.integers(0, 2, n)
            _assert_as_the_loop(s, s + d, np.lexsort((-d, s, g)), g, closed_at_end)


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_presorted_columns_nest_in_place_as_the_loop_does(closed_at_end):
    """Columns already in (group, start, -duration) order with order=None (kernel linking gathers
    them once): the loop's parents, as positions, and the inputs left as they were."""
    rng = np.random.default_rng(13)
    for _ in range(200):
        n = int(rng.integers(1, 200))
        s = rng.integers(-50, 60, n)
        d = rng.integers(0, 25, n)
        g = rng.integers(0, 3, n).astype(np.int32)
        o = np.lexsort((-d, s, g))
        s_o, e_o, g_o = s[o], (s + d)[o], g[o]
        keep = (s_o.copy(), e_o.copy(), g_o.copy())
        got = nest_parents(s_o, e_o, None, g_o, closed_at_end)
        assert np.array_equal(got, nest_parents_loop(s_o, e_o, None, g_o, closed_at_end))
        # the same nesting as the row-order call, mapped through the order
        rows = nest_parents(s, s + d, o, g, closed_at_end)
        assert np.array_equal(np.where(got >= 0, o[np.clip(got, 0, None)], -1), rows[o])
        assert all(np.array_equal(a, b) for a, b in zip(keep, (s_o, e_o, g_o)))


def test_outer_first_is_the_three_key_lexsort():
    """outer_first skips the lexsort for rows already by (start, −duration) — an export's own
    order — or made of such runs; the order is np.lexsort's, ties in row order, on every input."""
    from trainscope.analyzers.nesting import outer_first

    rng = np.random.default_rng(21)
    for trial in range(300):
        n = int(rng.integers(0, 60))
        ts = rng.integers(0, 30, n)  # many equal starts
        dur = rng.integers(0, 6, n)  # equal durations too
        if trial % 3 == 0:  # in order already
            o = np.lexsort((-dur, ts))
            ts, dur = ts[o], dur[o]
        elif trial % 3 == 1 and n > 2:  # two runs each in order (operators, then annotations)
            k = n // 2
            o1, o2 = np.lexsort((-dur[:k], ts[:k])), np.lexsort((-dur[k:], ts[k:]))
            ts = np.concatenate([ts[:k][o1], ts[k:][o2]])
            dur = np.concatenate([dur[:k][o1], dur[k:][o2]])
        groups = rng.integers(0, 3, n).astype(np.int32) + (40_000 if trial % 7 == 0 else 0)
        assert np.array_equal(outer_first(ts, dur), np.lexsort((-dur, ts)))
        assert np.array_equal(outer_first(ts, dur, groups), np.lexsort((-dur, ts, groups)))


def test_is_outer_first_is_the_plain_pairwise_check():
    """Against every adjacent pair compared whole (start ascending, longer first at equal starts)."""
    from trainscope.analyzers.nesting import is_outer_first

    rng = np.random.default_rng(31)
    for trial in range(400):
        n = int(rng.integers(0, 40))
        ts = rng.integers(0, 12, n)
        dur = rng.integers(0, 4, n)
        if trial % 2:
            o = np.lexsort((-dur, ts))
            if n > 1 and trial % 4 == 1:  # one swapped pair, often between equal starts
                j = int(rng.integers(0, n - 1))
                o[[j, j + 1]] = o[[j + 1, j]]
        else:
            o = rng.permutation(n)
        t, d = ts[o], dur[o]
        want = bool(((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (d[1:] <= d[:-1]))).all())
        assert is_outer_first(ts, dur, o) == want
        assert is_outer_first(t, d) == want


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_one_group_in_order_equals_the_loop(closed_at_end):
    """No groups, rows already in order (read in place; the top level from the ends' running max)."""
    rng = np.random.default_rng(29)
    for _ in range(300):
        s, d = _random_intervals(rng, 200, 80, 30)
        o = np.lexsort((-d, s))
        _assert_as_the_loop(s[o], (s + d)[o], closed_at_end=closed_at_end)


@pytest.mark.parametrize("closed_at_end", [False, True])
def test_jumps_in_small_pieces_equal_the_loop(monkeypatch, closed_at_end):
    """The pointer jumps a piece at a time (a later piece may read a pointer an earlier one moved):
    the same parents as the stack loop, grouped or not, deep chains included."""
    from trainscope.analyzers import nesting

    monkeypatch.setattr(nesting, "_PIECE", 3)
    rng = np.random.default_rng(37)
    for trial in range(300):
        n = int(rng.integers(1, 150))
        s = rng.integers(0, 60, n)
        d = rng.integers(0, 40 if trial % 2 else 8, n)
        g = rng.integers(0, 3, n)
        _assert_as_the_loop(s, s + d, np.lexsort((-d, s, g)), g, closed_at_end)
        o = np.lexsort((-d, s))
        _assert_as_the_loop(s[o], (s + d)[o], closed_at_end=closed_at_end)
