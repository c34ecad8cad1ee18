"""The analysis steps rewritten for the 1 GB Nsight export's speed (issue 39, item 3) give what the
code they replaced gave: each old version is kept here as the reference and both run on random
inputs — unsorted, tied, negative and empty cases included (docs/scale.md, *Every input at the
speed of its format*)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from trainscope.analyzers.trace import one_off


def _old_ops_in(trace, lo: int, hi: int) -> int:
    return int(sum(((t.ts >= lo) & (t.ts < hi)).sum() for t in (trace.kernels, trace.copies, trace.memsets)))


def _old_steady_mix(k, kstep, first: int, n: int, share: float) -> bool:
    if n - first < 2:
        return False
    on = kstep >= first
    names, steps_of, dur = k.name[on], kstep[on], k.dur[on].astype(np.float64)
    if not len(names):
        return False
    pairs = np.unique(np.stack([names.astype(np.int64), steps_of.astype(np.int64)]), axis=1)
    ids, counts = np.unique(pairs[0], return_counts=True)
    recurring = ids[counts >= 2]
    again = np.isin(names, recurring)
    tot = np.bincount(steps_of - first, weights=dur, minlength=n - first)
    rec = np.bincount(steps_of - first, weights=np.where(again, dur, 0.0), minlength=n - first)
    has = tot > 0
    return bool(has.any() and (rec[has] >= share * tot[has]).all())


def _old_first_calls(names, ts, dur, candidates, min_ns: float, ratio: float):
    rows = np.flatnonzero(candidates)
    if not len(rows):
        return []
    t = ts[rows]
    if len(t) < 2 or bool((t[1:] >= t[:-1]).all()):
        order = rows[np.argsort(names[rows], kind="stable")]
    else:
        order = rows[np.lexsort((t, names[rows]))]
    nm = names[order]
    starts = np.flatnonzero(np.concatenate([[True], nm[1:] != nm[:-1]]))
    ends = np.concatenate([starts[1:], [len(order)]])
    firsts = order[starts]
    long = dur[firsts] >= min_ns
    out = []
    for g in np.flatnonzero(long).tolist():
        first = int(firsts[g])
        later = dur[order[starts[g] + 1 : ends[g]]]
        med = float(np.median(later)) if len(later) else None
        if med is None or dur[first] >= ratio * max(med, 1.0):
            out.append((first, med))
    return out


def _table(rng, n: int, sort: bool):
    ts = rng.integers(0, 10_000, n).astype(np.int64)
    return SimpleNamespace(ts=np.sort(ts) if sort else ts)


def test_ops_in_windows_counts_as_the_pass_per_window():
    for seed in range(40):
        rng = np.random.default_rng(seed)
        trace = SimpleNamespace(
            kernels=_table(rng, int(rng.integers(0, 300)), seed % 2 == 0),
            copies=_table(rng, int(rng.integers(0, 30)), False),
            memsets=_table(rng, int(rng.integers(0, 5)), True),
        )
        lo = rng.integers(-100, 10_100, int(rng.integers(0, 12)))
        hi = lo + rng.integers(-50, 3_000, len(lo))  # empty, inverted and overlapping windows too
        windows = [(int(a), int(b)) for a, b in zip(lo, hi)]
        assert one_off._ops_in_windows(trace, windows) == sum(_old_ops_in(trace, a, b) for a, b in windows)
        for a, b in windows:
            assert one_off._ops_in(trace, a, b) == _old_ops_in(trace, a, b)


def test_steady_mix_decides_as_before():
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n_k = int(rng.integers(1, 400))
        n_steps = int(rng.integers(1, 9))
        k = SimpleNamespace(
            name=rng.integers(0, int(rng.integers(1, 12)), n_k).astype(np.int32),
            dur=rng.integers(1, 1000, n_k).astype(np.int64),
        )
        kstep = rng.integers(-1, n_steps, n_k).astype(np.int64)  # −1: in no step
        first = int(rng.integers(0, n_steps))
        for share in (0.0, 0.5, 0.9, 1.0):
            assert one_off._steady_mix(k, kstep, first, n_steps, share) == _old_steady_mix(
                k, kstep, first, n_steps, share
            )


def test_first_calls_as_before():
    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, 500))
        names = rng.integers(0, int(rng.integers(1, 40)), n).astype(np.int32)
        ts = rng.integers(0, 5000, n).astype(np.int64)
        if seed % 3 == 0:
            ts = np.sort(ts)  # a table's rows in time order
        elif seed % 3 == 1 and n > 4:  # unsorted, but the candidates in time order
            ts = np.sort(ts)
            ts[0], ts[-1] = ts[-1], ts[0]
        dur = rng.integers(0, 2000, n).astype(np.int64)
        cand = rng.random(n) < 0.8
        if seed % 3 == 1 and n > 4:
            cand[0] = cand[-1] = False
        for min_ns, ratio in ((0.0, 1.0), (500.0, 2.0), (1500.0, 1.5)):
            assert one_off._first_calls(names, ts, dur, cand, min_ns, ratio) == _old_first_calls(
                names, ts, dur, cand, min_ns, ratio
            )


def _old_launch_rows(r_corr, w_corr):
    out = np.full(len(w_corr), -1, np.int64)
    if len(r_corr) and len(w_corr):
        rsel = np.flatnonzero(r_corr >= 0)
        rc = r_corr[rsel]
        o = np.argsort(rc, kind="stable")
        rc, rrow = rc[o], rsel[o]
        if len(rc):
            pos = np.clip(np.searchsorted(rc, w_corr), 0, len(rc) - 1)
            hit = (w_corr >= 0) & (rc[pos] == w_corr)
            out[hit] = rrow[pos[hit]]
    return out


def test_launch_rows_as_before():
    from trainscope.analyzers.trace.module_tree import _launch_rows

    for seed in range(40):
        rng = np.random.default_rng(seed)
        r_corr = rng.integers(-2, 60, int(rng.integers(0, 80))).astype(np.int64)  # −: no id; repeats
        if seed % 2:
            r_corr = np.sort(r_corr)  # a runtime table's ids, in order
        w_corr = rng.integers(-2, 70, int(rng.integers(0, 80))).astype(np.int64)
        assert np.array_equal(_launch_rows(r_corr, w_corr), _old_launch_rows(r_corr, w_corr))


def _old_overlap_per_window(iv_, win_s, win_e):
    s, e = iv_
    if len(s) == 0 or len(win_s) == 0:
        return np.zeros(len(win_s), np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])

    def covered_before(t):
        i = np.searchsorted(s, t, side="right")
        full = cum[np.maximum(i - 1, 0)]
        last_s = s[np.maximum(i - 1, 0)]
        last_e = e[np.maximum(i - 1, 0)]
        partial = np.clip(np.minimum(last_e, t) - last_s, 0, None)
        return np.where(i > 0, full + partial, 0)

    return covered_before(np.asarray(win_e, np.int64)) - covered_before(np.asarray(win_s, np.int64))


def test_overlap_per_window_as_before(monkeypatch):
    from trainscope.analyzers import intervals as iv

    for seed in range(60):
        if seed % 4 == 0:
            monkeypatch.setattr(iv, "_ROWS", 7)  # windows a piece at a time
        else:
            monkeypatch.setattr(iv, "_ROWS", 1 << 20)
        rng = np.random.default_rng(seed)
        a = rng.integers(-50, 5_000, int(rng.integers(0, 60)))
        b = a + rng.integers(0, 300, len(a))
        u = iv.union(a.astype(np.int64), b.astype(np.int64))
        ws = rng.integers(-200, 5_500, int(rng.integers(0, 80))).astype(np.int64)
        we = ws + rng.integers(-20, 800, len(ws))  # empty and inverted windows too
        got = iv.overlap_per_window(u, ws, we)
        want = _old_overlap_per_window(u, ws, we)
        assert got.dtype == want.dtype
        assert np.array_equal(got, want)


def test_nest_gathered_as_nest_parents():
    from trainscope.analyzers.nesting import nest_gathered
    from trainscope.analyzers.nesting import nest_parents
    from trainscope.analyzers.nesting import outer_first

    for seed in range(60):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, 120))
        ts = rng.integers(0, 300, n).astype(np.int64)
        end = ts + rng.integers(0, 120, n)  # zero-length, tied and partly overlapping intervals
        th = rng.integers(0, int(rng.integers(1, 4)), n).astype(np.int32)
        if seed % 3 == 0:  # already outer first per thread: the order is the identity or a radix pass
            o = np.lexsort((-(end - ts), ts))
            ts, end = ts[o], end[o]
        order = outer_first(ts, end - ts, th)
        got = nest_gathered(ts[order], end[order], th[order], order)
        assert np.array_equal(got, nest_parents(ts, end, order=order, groups=th))


def test_outer_first_is_the_lexsort():
    from trainscope.analyzers.nesting import outer_first

    for seed in range(120):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(0, 150))
        ts = rng.integers(0, int(rng.integers(1, 400)), n).astype(np.int64)  # few values: many ties
        dur = rng.integers(0, int(rng.integers(1, 50)), n).astype(np.int64)
        th = rng.integers(-1, int(rng.integers(1, 5)), n).astype(np.int32)
        if seed % 4 == 0:  # runs each in (start, -duration) order, joined end to end
            cut = int(rng.integers(0, n + 1))
            for part in (slice(0, cut), slice(cut, n)):
                o = np.lexsort((-dur[part], ts[part]))
                ts[part], dur[part] = ts[part][o], dur[part][o]
        elif seed % 4 == 1:  # distinct starts, in two runs
            ts = rng.permutation(10 * n)[:n].astype(np.int64)
            cut = int(rng.integers(0, n + 1))
            ts[:cut].sort()
            ts[cut:].sort()
        if seed % 8 == 5:
            th = (th.astype(np.int64) * 100_000).astype(np.int32)  # groups too wide for 16 bits
        assert np.array_equal(outer_first(ts, dur, th), np.lexsort((-dur, ts, th)))
        assert np.array_equal(outer_first(ts, dur), np.lexsort((-dur, ts)))


def test_union_sets_merging_sorted_runs_is_the_union():
    from trainscope.analyzers import intervals as iv

    for seed in range(60):
        rng = np.random.default_rng(seed)
        sets = []
        for _ in range(int(rng.integers(1, 90))):  # past _MERGE_RUNS sets too
            a = rng.integers(0, 3_000, int(rng.integers(0, 20))).astype(np.int64)
            b = a + rng.integers(-5, 60, len(a))
            sets.append(iv.union(a, b) if seed % 3 else (a, b))  # disjoint sets, or any pairs
        s_all = np.concatenate([x[0] for x in sets])
        e_all = np.concatenate([x[1] for x in sets])
        got = iv.union_sets(list(sets))
        want = iv.union(s_all, e_all)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        if seed % 3 and len(sets) > 1 and len(want[0]):  # minus_part: the set less a part of it
            part = iv.intersect(want, iv.union(*sets[0])) if len(sets[0][0]) else iv.EMPTY
            rest = iv.minus_part(want, part)
            assert iv.total(rest) == iv.total(want) - iv.total(part)
