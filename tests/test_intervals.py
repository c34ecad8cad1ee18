"""Interval arithmetic behind every share, checked against hand-computed cases."""

import numpy as np
import pytest

from trainscope.analyzers import intervals as iv

A = np.array


def test_union_merges_overlaps_and_touching_and_drops_empty():
    s, e = iv.union(A([5, 0, 2, 10, 12, 20]), A([7, 3, 4, 12, 15, 20]))
    assert s.tolist() == [0, 5, 10] and e.tolist() == [4, 7, 15]  # [10,12)+[12,15) touch; [20,20) empty
    assert iv.total((s, e)) == 4 + 2 + 5


def test_overlap_per_window():
    u = iv.union(A([0, 10, 30]), A([5, 20, 40]))
    got = iv.overlap_per_window(u, A([0, 3, 15, 25, 45]), A([50, 12, 35, 28, 60]))
    assert got.tolist() == [25, 4, 10, 0, 0]


def test_exclusive_layers_priority_and_remainder():
    compute = iv.union(A([0]), A([10]))
    copy = iv.union(A([5]), A([15]))  # overlapped by compute for 5..10
    data = iv.union(A([12]), A([30]))  # host waits 12..30; GPU busy with copy until 15
    out = iv.exclusive_layers([compute, copy, data], A([0, 20]), A([20, 40]))
    # window 0..20: compute 10, copy 10..15 = 5, data 15..20 = 5, nothing 0
    # window 20..40: data 20..30 = 10, nothing 10
    assert out.tolist() == [[10, 5, 5, 0], [0, 0, 10, 10]]
    assert out.sum(axis=1).tolist() == [20, 20]


def test_union_matches_a_loop_on_random_sets_and_leaves_its_inputs_alone():
    """union works in place on its own sorted copies (memory: millions of host intervals); the
    result is the loop's merge and the caller's arrays are untouched."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 40, 2000):
        for _ in range(10):
            s = rng.integers(0, 500, n)
            e = s + rng.integers(-3, 40, n)  # empty and negative intervals too
            s0, e0 = s.copy(), e.copy()
            got = iv.union(s, e)
            merged: list[list[int]] = []
            for a, b in sorted((int(a), int(b)) for a, b in zip(s, e) if b > a):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            assert got[0].tolist() == [m[0] for m in merged] and got[1].tolist() == [m[1] for m in merged]
            assert np.array_equal(s, s0) and np.array_equal(e, e0)


def test_union_sets_equals_union_of_the_concatenation():
    rng = np.random.default_rng(7)
    for trial in range(40):
        k = int(rng.integers(1, 5))
        sets = []
        for _ in range(k):
            n = int(rng.integers(0, 300))
            s = rng.integers(0, 2_000, n)  # many equal starts across sets, touching intervals
            e = s + rng.integers(0 if trial % 3 == 0 else 1, 40, n)  # some empty: made sets by union first
            sets.append(iv.union(s, e) if trial % 2 else (s, e))
        copies = [(a.copy(), b.copy()) for a, b in sets]
        want = iv.union(np.concatenate([a for a, _ in sets]), np.concatenate([b for _, b in sets]))
        got = iv.union_sets(sets)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(sets, copies))


def test_union_of_sorted_starts_leaves_its_inputs_alone():
    s = np.array([0, 0, 5, 9, 20], np.int64)
    e = np.array([3, 7, 6, 12, 21], np.int64)
    got = iv.union(s, e)
    assert got[0].tolist() == [0, 9, 20] and got[1].tolist() == [7, 12, 21]
    assert e.tolist() == [3, 7, 6, 12, 21]


def test_intersect_equals_the_pairwise_definition():
    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(0, 80))
        a0 = rng.integers(0, 1_000, n)  # any pairs, unsorted, some empty
        a1 = a0 + rng.integers(0, 60, n)
        b = iv.union(
            *(lambda s: (s, s + rng.integers(1, 30, len(s))))(rng.integers(0, 1_000, int(rng.integers(0, 60))))
        )
        want_s, want_e = [], []
        for x0, x1 in zip(a0.tolist(), a1.tolist()):
            for y0, y1 in zip(b[0].tolist(), b[1].tolist()):
                lo, hi = max(x0, y0), min(x1, y1)
                if hi > lo:
                    want_s.append(lo)
                    want_e.append(hi)
        got = iv.intersect((a0, a1), b)
        assert got[0].tolist() == want_s and got[1].tolist() == want_e


def test_union_rows_equals_union_of_the_masked_rows(monkeypatch):
    monkeypatch.setattr(iv, "_ROWS", 37)  # many pieces, a piece boundary inside overlapping runs
    rng = np.random.default_rng(5)
    for sort in (True, False):
        ts = rng.integers(0, 5_000, 500)
        ts = np.sort(ts) if sort else ts
        dur = rng.integers(-3, 80, 500)  # some empty or negative: dropped as union drops them
        mask = rng.random(500) < 0.7
        for m in (mask, None):
            want = iv.union(ts[m] if m is not None else ts, (ts + dur)[m] if m is not None else ts + dur)
            got = iv.union_rows(ts, dur, m)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            end = ts + dur
            end0 = end.copy()
            got = iv.union_rows(ts, end, m, ends=True)  # the ends given: the same set, the column untouched
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert np.array_equal(end, end0)


def _exclusive_layers_by_unit(layers, ws, we) -> None:
    """``exclusive_layers`` against its definition counted one time unit at a time: each unit of each
    window goes to the first layer that covers it, or past the last layer when none does."""
    got = iv.exclusive_layers(layers, ws, we)
    for w, (a, b) in enumerate(zip(ws.tolist(), we.tolist())):
        want = [0] * (len(layers) + 1)
        for t in range(a, b):
            k = next((k for k, (s, e) in enumerate(layers) if ((s <= t) & (t < e)).any()), len(layers))
            want[k] += 1
        assert got[w].tolist() == want


def test_exclusive_layers_matches_an_instant_by_instant_count_across_pieces(monkeypatch):
    """Random layers (some empty) and windows (some overlapping), the per-layer tests cut into
    pieces of a few segments: every window's row is the count of its instants by first covering
    layer."""
    monkeypatch.setattr(iv, "_ROWS", 7)
    rng = np.random.default_rng(3)
    for _ in range(150):
        layers = []
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(0, 12))
            s = rng.integers(0, 200, n)
            layers.append(iv.union(s, s + rng.integers(1, 30, n)))
        ws = np.sort(rng.integers(0, 200, int(rng.integers(1, 5))))
        we = ws + rng.integers(1, 80, len(ws))
        _exclusive_layers_by_unit(layers, ws, we)


def test_union_sets_spent_empties_the_callers_list_and_gives_the_same_union():
    rng = np.random.default_rng(9)
    for _ in range(50):
        sets = []
        for _ in range(int(rng.integers(1, 6))):
            s = rng.integers(0, 300, int(rng.integers(0, 20)))
            sets.append(iv.union(s, s + rng.integers(0, 25, len(s))))
        want = iv.union_sets(list(sets))
        got = iv.union_sets(sets, spent=True)
        assert sets == [] and all(np.array_equal(a, b) for a, b in zip(got, want))


def _union_by_argsort(s: np.ndarray, e: np.ndarray) -> iv.IntervalSet:
    """The merge union used before (a stable start order, then a running maximum of the ends)."""
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return iv.EMPTY
    o = np.argsort(s, kind="stable")
    s, reach = s[o], np.maximum.accumulate(e[o])
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(s) - 1]])
    return s[new], reach[last]


def test_union_by_sorted_bounds_equals_the_argsort_merge():
    """union and union_sets sort the starts and the ends each on its own: the same set as the
    start-order merge, on large unsorted inputs with negative times, ties and touching intervals."""
    rng = np.random.default_rng(13)
    for trial in range(60):
        n = int(rng.integers(1, 5_000))
        s = rng.integers(-1_000, 20_000 if trial % 2 else 500, n)
        e = s + rng.integers(-2, 50, n)
        want = _union_by_argsort(s, e)
        got = iv.union(s.copy(), e.copy(), spent=True)
        assert got[0].dtype == np.int64 and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        cuts = np.sort(rng.integers(0, n, int(rng.integers(1, 6))))
        pieces = [(a, b) for a, b in zip(np.split(s, cuts), np.split(e, cuts))]
        got = iv.union_sets(pieces)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_covered_by_rows_equals_the_measure_of_the_intersection(monkeypatch):
    """The measure of x ∩ the rows' union, slab by slab with a carry of the rows reaching over
    each cut, equals total(intersect(x, union(rows))): rows spanning many slabs, touching, empty,
    masked, two tables, tables out of start order."""
    monkeypatch.setattr(iv, "_SLAB", 5)
    rng = np.random.default_rng(31)
    for trial in range(300):
        tables, s_all, e_all = [], [], []
        for _ in range(int(rng.integers(1, 3))):
            n = int(rng.integers(0, 60))
            ts = rng.integers(0, 400, n)
            ts = ts if trial % 5 == 0 else np.sort(ts)
            dur = rng.integers(-2, 120 if trial % 3 else 5, n)
            m = rng.random(n) < 0.8 if trial % 2 else None
            tables.append((ts, dur, m))
            s_all.append(ts if m is None else ts[m])
            e_all.append((ts + dur) if m is None else (ts + dur)[m])
        xs = rng.integers(-20, 450, int(rng.integers(0, 40)))
        x = iv.union(xs, xs + rng.integers(1, 30, len(xs)))
        want = iv.total(iv.intersect(x, iv.union(np.concatenate(s_all), np.concatenate(e_all))))
        assert iv.covered_by_rows(x, tables) == want, trial


def test_minus_part_equals_the_intersection_with_the_complement():
    """a minus a part of it (a ∩ b), from two sorts, equals a ∩ complement(part) piece for piece —
    a's touching pieces kept apart, parts touching a's bounds."""
    rng = np.random.default_rng(41)
    for trial in range(300):
        n = int(rng.integers(0, 40))
        s = np.sort(rng.integers(0, 500, n))
        a = iv.union(s, s + rng.integers(1, 30, n))
        if trial % 3 == 0 and len(a[0]) > 1:  # touching pieces, as idle split at window bounds
            mid = (a[0][0] + a[1][0]) // 2
            if a[1][0] - a[0][0] > 1:
                a = (np.insert(a[0], 1, mid), np.insert(a[1], 0, mid))
        bs = rng.integers(-10, 520, int(rng.integers(0, 30)))
        b = iv.union(bs, bs + rng.integers(1, 25, len(bs)))
        part = iv.intersect(a, b)
        lo, hi = -100, 1_000
        comp = (np.concatenate([[lo], part[1]]), np.concatenate([part[0], [hi]]))
        keep = comp[1] > comp[0]
        want = iv.intersect(a, (comp[0][keep], comp[1][keep])) if len(part[0]) else a
        got = iv.minus_part(a, part)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), trial


def test_exclusive_layers_of_touching_and_unsorted_layers_count_every_instant_once():
    """Layers whose pieces touch (marked as runs of segments) and layers of one unsorted interval
    pair (searched segment by segment) give every instant of a window to the first layer over it."""
    rng = np.random.default_rng(43)
    for _ in range(150):
        layers = []
        for k in range(int(rng.integers(1, 5))):
            s = np.sort(rng.integers(0, 200, int(rng.integers(1, 8))))
            u = iv.union(s, s + rng.integers(1, 30, len(s)))
            cut = (u[0] + u[1]) // 2  # each piece split in two touching halves
            ok = (cut > u[0]) & (cut < u[1])
            t_s = np.sort(np.concatenate([u[0], cut[ok]]))
            t_e = np.sort(np.concatenate([u[1], cut[ok]]))
            layers.append(
                (t_s, t_e) if k % 2 == 0 else (t_s[::-1].copy(), t_e[::-1].copy()) if len(t_s) == 1 else (t_s, t_e)
            )
        ws = np.sort(rng.integers(0, 200, int(rng.integers(1, 4))))
        we = ws + rng.integers(1, 80, len(ws))
        _exclusive_layers_by_unit(layers, ws, we)


def test_intersect_in_pieces_equals_intersect_whole(monkeypatch):
    """a's rows taken a piece at a time give the same pieces in the same order."""
    rng = np.random.default_rng(53)
    cases = []
    for _ in range(80):
        n = int(rng.integers(0, 60))
        a0 = rng.integers(0, 500, n)
        a1 = a0 + rng.integers(0, 40, n)
        bs = rng.integers(0, 500, int(rng.integers(0, 30)))
        cases.append(((a0, a1), iv.union(bs, bs + rng.integers(1, 30, len(bs)))))
    whole = [iv.intersect(a, b) for a, b in cases]
    monkeypatch.setattr(iv, "_ROWS", 7)
    for (a, b), w in zip(cases, whole):
        got = iv.intersect(a, b)
        assert np.array_equal(got[0], w[0]) and np.array_equal(got[1], w[1])


def test_running_measure_overlap_is_each_windows_share_of_the_set_in_any_piece_size(monkeypatch):
    """RunningMeasure.overlap(s, e)[k] is the measure of the set inside [s[k], e[k]) — by definition
    (total of the intersection with the one window) — and the same when read in pieces of 7 rows;
    intersection_measure is the total of the intersection."""
    rng = np.random.default_rng(59)
    for _ in range(60):
        bs = rng.integers(0, 600, int(rng.integers(0, 40)))
        u = iv.union(bs, bs + rng.integers(1, 40, len(bs)))
        s = rng.integers(-20, 650, int(rng.integers(0, 50)))
        e = s + rng.integers(0, 90, len(s))
        want = [iv.total(iv.intersect((s[k : k + 1], e[k : k + 1]), u)) for k in range(len(s))]
        assert iv.RunningMeasure(u).overlap(s, e).tolist() == want
        monkeypatch.setattr(iv.RunningMeasure, "PIECE", 7)
        assert iv.RunningMeasure(u).overlap(s, e).tolist() == want
        monkeypatch.undo()
        x = iv.union(s, e) if len(s) else iv.EMPTY
        assert iv.intersection_measure(x, u) == iv.total(iv.intersect(x, u))


def _search_cases():
    rng = np.random.default_rng(23)
    for trial in range(2000):
        n = int(rng.integers(0, 300))
        m = int(rng.integers(0, 400))
        a = np.sort(rng.integers(-50, 400 if trial % 2 else 40, n)).astype(np.int64)  # ties where the range is small
        v = rng.integers(-80, 450, m).astype(np.int64)
        if trial % 4 == 0:
            v.sort()  # keys in order: the gallop from the previous key
        elif trial % 4 == 1:
            v = np.sort(v)[::-1].copy()  # in reverse: the gallop downwards
        elif trial % 4 == 2 and m:
            v = np.sort(v) + rng.integers(-20, 20, m)  # near order
        yield a, v


def test_searchsorted_is_numpys_for_keys_in_any_order():
    """The interval arithmetic's search answers what numpy.searchsorted answers, for both sides: keys
    in order, in reverse, near order and in none, ties, keys past either end, an empty column, and
    sizes either side of where the C extension takes over; a scalar key gives numpy's scalar."""
    for a, v in _search_cases():
        for side in ("left", "right"):
            got = iv.searchsorted(a, v, side)
            assert np.array_equal(got, np.searchsorted(a, v, side=side)), (a, v, side)
    a = np.arange(0, 100, 2, dtype=np.int64)
    assert iv.searchsorted(a, np.int64(7), "right") == 4 and iv.searchsorted(a, 8, "left") == 4


def test_the_sorted_search_extension_gallops_to_numpys_answer():
    """The C extension itself (analyzers/_sorted_search.c), called directly on every case above: a key
    far from the previous one (past the gallop's doublings) and one below it included."""
    if not iv.SEARCH_BUILT:
        pytest.skip("the optional C extension was not built here (no C compiler at install): numpy answers")
    from trainscope.analyzers import _sorted_search

    rng = np.random.default_rng(5)
    far = np.sort(rng.integers(0, 10**9, 100_000)).astype(np.int64)
    keys = np.concatenate([np.sort(rng.integers(0, 10**9, 500)), rng.integers(0, 10**9, 500)]).astype(np.int64)
    for a, v in [*_search_cases(), (far, keys)]:
        for right in (False, True):
            out = np.empty(len(v), np.int64)
            _sorted_search.search(a, v, out, right)
            assert np.array_equal(out, np.searchsorted(a, v, side="right" if right else "left"))


def test_contains_says_which_points_lie_in_the_set():
    """Each point against the set's intervals one by one (half-open: a start is in, an end is out),
    points in order and in none, before the first interval and past the last."""
    rng = np.random.default_rng(11)
    for trial in range(500):
        s = rng.integers(0, 500, int(rng.integers(0, 50)))
        x = iv.union(s, s + rng.integers(1, 20, len(s)))
        p = rng.integers(-10, 600, int(rng.integers(0, 300)))
        if trial % 2:
            p = np.sort(p)
        want = np.array([any(a <= q < b for a, b in zip(*x)) for q in p], bool)
        assert np.array_equal(iv.contains(x, p), want), trial
