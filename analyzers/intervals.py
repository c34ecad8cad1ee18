"""Vectorized interval arithmetic over half-open [start, end) int64 intervals.

An *interval set* is a pair of sorted, disjoint, non-empty start/end arrays, as :func:`union`
returns. Everything here is numpy: no Python loop over events.
"""

from __future__ import annotations

from typing import Any
from typing import Literal

import numpy as np

try:  # built by `pip install` where a C compiler is (pyproject.toml: an optional ext-module)
    from trainscope.analyzers import _sorted_search
except ImportError:  # pragma: no cover - a machine without a compiler: numpy answers
    _sorted_search = None  # type: ignore[assignment]

IntervalSet = tuple[np.ndarray, np.ndarray]

SEARCH_BUILT = _sorted_search is not None
_SEARCH_MIN_KEYS = 64  # below this many keys numpy's search is as quick as the call into the extension


def searchsorted(a: np.ndarray, v: Any, side: Literal["left", "right"] = "left") -> Any:
    """``numpy.searchsorted(a, v, side)`` for a sorted 1-d ``a`` and keys ``v`` (any order, or one key),
    answered from the previous key where the keys mostly come in order. The interval arithmetic asks
    millions of these with keys in order (a set's starts against another's ends, times against idle
    pieces); numpy binary-searches each key over the whole column, most probes cache misses. The
    optional C extension (``analyzers/_sorted_search.c``) gallops from the previous key's answer: a
    few comparisons on memory the previous key touched, 2.5–4× quicker on keys in or near order, as
    quick on keys in none. The answers are numpy's, exactly; without the extension, or for other
    dtypes, numpy answers."""
    if (
        _sorted_search is None
        or not isinstance(v, np.ndarray)
        or v.ndim != 1
        or len(v) < _SEARCH_MIN_KEYS
        or a.ndim != 1
        or a.dtype != np.int64
        or v.dtype != np.int64
    ):
        return np.searchsorted(a, v, side=side)  # a scalar key: a scalar index, as numpy gives
    got = np.empty(len(v), np.int64)
    _sorted_search.search(np.ascontiguousarray(a), np.ascontiguousarray(v), got, side == "right")
    return got


EMPTY: IntervalSet = (np.empty(0, np.int64), np.empty(0, np.int64))


def union(starts: np.ndarray, ends: np.ndarray, *, spent: bool = False) -> IntervalSet:
    """Merge possibly overlapping intervals into a sorted disjoint set. ``spent``: the caller's
    ``ends`` are a temporary this may overwrite (no copy of millions of ends)."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    keep = ends > starts
    every = bool(keep.all())
    owned = spent or not every
    if not every:  # no copies of millions of host intervals when every one is kept
        starts, ends = starts[keep], ends[keep]
    del keep
    if len(starts) == 0:
        return EMPTY
    if len(starts) > 1 and not (starts[1:] >= starts[:-1]).all():
        # the starts and the ends sorted each on its own (no sort order, no gathers: 5 M host
        # intervals sort in tens of ms where an argsort and its gathers took half a second)
        s = starts if not every else np.sort(starts)
        if not every:
            s.sort()
        e = ends if owned else ends.copy()
        e.sort()
        return _from_bounds(s, e)
    # already in start order (kernels, a table's rows): one pass, no sort
    s, reach = starts, (ends if owned else ends.copy())
    return _merged(s, reach)


_ROWS = 1 << 20  # rows per piece in union_rows


def union_rows(ts: np.ndarray, dur: np.ndarray, mask: np.ndarray | None = None, *, ends: bool = False) -> IntervalSet:
    """The union of the rows' [ts, ts + dur) (those where ``mask`` is true), a million rows at a
    time: each piece merged on its own, then the pieces' sets (the same set as :func:`union` over
    all rows, without whole start and end columns of millions of host rows alive at once).
    ``ends``: the second column holds the rows' ends, not their durations."""
    sets = []
    for i in range(0, len(ts), _ROWS):
        s, d = ts[i : i + _ROWS], dur[i : i + _ROWS]
        if mask is not None:
            m = mask[i : i + _ROWS]
            s, d = s[m], d[m]
        e = d.copy() if ends else s + d
        sets.append(union(s, e, spent=True))
    if len(sets) > 1 and all(len(a[0]) and len(b[0]) and b[0][0] >= a[0][-1] for a, b in zip(sets, sets[1:])):
        # rows in start order (a table's own): the pieces' sets follow one another, joined at the seams
        s, e = np.concatenate([x[0] for x in sets]), np.concatenate([x[1] for x in sets])
        del sets
        return _merged(s, e)
    return union_sets(sets)


def union_sets(sets: list[IntervalSet], spent: bool = False) -> IntervalSet:
    """The union of interval sets (or of any start/end pairs): the same result as :func:`union`
    over their concatenation — the concatenated starts and ends sorted each on its own, in place
    (:func:`_from_bounds`). ``spent``: the caller's list is emptied, so each set is freed once its
    columns are copied (not held by the list throughout)."""
    given = sets
    sets = [x for x in sets if len(x[0])]
    if spent:
        given.clear()
    del given
    if not sets:
        return EMPTY
    if len(sets) == 1:
        x = sets[0]
        return x if _is_set(x) else union(*x)
    starts = [x[0] for x in sets]
    ends = [x[1] for x in sets]
    # a few sets each in order (disjoint sets are): their concatenation is a few sorted runs,
    # which a stable sort merges in one pass (numpy's quicksort re-sorts them whole: 2-10x slower)
    s_kind: Literal["stable", "quicksort"] = "quicksort"
    e_kind: Literal["stable", "quicksort"] = "quicksort"
    if len(starts) <= _MERGE_RUNS:
        s_kind, e_kind = _runs_kind(starts), _runs_kind(ends)
    del sets
    s = np.concatenate(starts)
    del starts  # a spent list's start columns freed before the ends are copied
    e = np.concatenate(ends)
    del ends
    keep = e > s
    if not keep.all():
        s, e = s[keep], e[keep]
    del keep
    if not len(s):
        return EMPTY
    s.sort(kind=s_kind)  # the concatenation's own columns, sorted in place
    e.sort(kind=e_kind)
    return _from_bounds(s, e)


_MERGE_RUNS = 64  # sorted runs a stable sort merges faster than quicksort sorts their concatenation


def _runs_kind(cols: list[np.ndarray]) -> Literal["stable", "quicksort"]:
    """The sort for the concatenation of ``cols``: stable (a merge of the runs) where each is in
    order, else quicksort (a stable sort of unordered int64 is ~10x slower). Same values either way."""
    ordered = all(len(c) < 2 or bool((c[1:] >= c[:-1]).all()) for c in cols)
    return "stable" if ordered else "quicksort"


def _is_set(x: IntervalSet) -> bool:
    """Whether ``x`` is start-sorted with every interval non-empty (returned as it is when it is
    the only set given)."""
    s, e = x
    return bool((e > s).all() and (s[1:] >= s[:-1]).all())


def _from_bounds(s: np.ndarray, e: np.ndarray) -> IntervalSet:
    """The union of non-empty intervals from their starts and their ends, each sorted on its own:
    with the i-th smallest end before the (i+1)-th smallest start, every interval has closed (at
    most i + 1 have started, at least i + 1 have ended) and the union has a gap there; nowhere
    else (touching intervals join, as in :func:`_merged`)."""
    gap = np.flatnonzero(s[1:] > e[:-1])
    out_s = np.empty(len(gap) + 1, np.int64)
    out_e = np.empty(len(gap) + 1, np.int64)
    out_s[0] = s[0]
    out_e[-1] = e[-1]
    out_e[:-1] = e[gap]
    gap += 1
    out_s[1:] = s[gap]
    return out_s, out_e


def _merged(s: np.ndarray, reach: np.ndarray) -> IntervalSet:
    """Start-sorted intervals merged; ``reach`` (the ends, the caller's own copy) is overwritten."""
    np.maximum.accumulate(reach, out=reach)  # in place: one column fewer at the peak
    # A new merged interval begins where a start lies beyond everything that came before.
    new = np.empty(len(s), bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    idx = np.flatnonzero(new)
    del new
    out_s = s[idx]
    del s
    idx[:-1] = idx[1:] - 1
    idx[-1] = len(reach) - 1
    out_e = reach[idx]
    return out_s, out_e


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """a ∩ b, ``b`` sorted and disjoint (``a`` any pairs): every overlapping pair's common part,
    in the order of ``a``'s rows then ``b``'s. Built in place — the pair indices and one gathered
    column at a time (millions of idle pieces against millions of host intervals)."""
    a0, a1 = a
    b0, b1 = b
    if not len(a0) or not len(b0):
        return EMPTY
    if len(a0) > _ROWS:  # a million of a's rows at a time: the pair columns of one piece at once
        parts = [intersect((a0[i : i + _ROWS], a1[i : i + _ROWS]), b) for i in range(0, len(a0), _ROWS)]
        parts = [x for x in parts if len(x[0])]
        if not parts:
            return EMPTY
        if len(parts) == 1:
            return parts[0]
        s_parts = [x[0] for x in parts]
        e_parts = [x[1] for x in parts]
        del parts
        s = np.concatenate(s_parts)
        del s_parts
        return s, np.concatenate(e_parts)
    i = searchsorted(b1, a0, side="right")  # the first b ending after each a starts
    n = searchsorted(b0, a1, side="left")  # the b starting before each a ends
    n -= i
    np.maximum(n, 0, out=n)
    ai = np.repeat(np.arange(len(a0)), n)
    offs = np.cumsum(n)
    offs -= n
    offs -= i
    del i
    bi = np.arange(len(ai), dtype=np.int64)
    bi -= np.repeat(offs, n)
    del offs, n
    s = a0[ai]
    np.maximum(s, b0[bi], out=s)
    e = a1[ai]
    del ai
    np.minimum(e, b1[bi], out=e)
    del bi
    keep = e > s
    if keep.all():
        return s, e
    return (s[keep], e[keep]) if keep.any() else EMPTY


def within(ivs: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """``ivs`` (sorted, disjoint) ∩ [lo, hi): two binary searches and a slice, not a pass over
    the whole set (the same pieces as :func:`intersect` with the one interval)."""
    s, e = ivs
    a = int(np.searchsorted(e, lo, side="right"))
    b = int(np.searchsorted(s, hi, side="left"))
    if b <= a:
        return EMPTY
    s2, e2 = np.maximum(s[a:b], lo), np.minimum(e[a:b], hi)
    keep = e2 > s2
    return (s2, e2) if keep.all() else (s2[keep], e2[keep])


def minus_part(a: IntervalSet, part: IntervalSet) -> IntervalSet:
    """``a`` (sorted, disjoint) minus ``part``, a sorted disjoint set inside it (``a ∩ b`` for
    some b): the pieces of ``a`` between its own bounds and the part's, from two sorts — a piece
    starts at a start of ``a`` or an end of the part, and ends at the next start of the part or end
    of ``a`` — instead of a binary search of every piece against the part's complement. The
    pieces of ``a`` are kept apart where they touch (as an intersection with the complement
    keeps them)."""
    if not len(part[0]) or not len(a[0]):
        return a
    s = np.concatenate([a[0], part[1]])
    s.sort(kind="stable")  # two sorted runs: a stable sort merges them in one pass
    e = np.concatenate([part[0], a[1]])
    e.sort(kind="stable")
    keep = e > s
    if keep.all():
        return s, e
    s = s[keep]  # one column compacted at a time
    return s, e[keep]


def total(iv: IntervalSet) -> int:
    return int((iv[1] - iv[0]).sum())


def contains(iv: IntervalSet, points: np.ndarray) -> np.ndarray:
    """For each point, whether it lies inside the interval set."""
    s, e = iv
    if len(s) == 0:
        return np.zeros(len(points), bool)
    i = searchsorted(s, points, side="right")  # intervals starting at or before each point
    i -= 1
    inside: np.ndarray = i >= 0
    np.maximum(i, 0, out=i)  # one gather of every point's interval, no masked copies
    inside &= points < e[i]
    return inside


def clip(iv: IntervalSet, lo: int, hi: int) -> IntervalSet:
    s, e = iv
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def overlap_per_window(iv: IntervalSet, win_s: np.ndarray, win_e: np.ndarray) -> np.ndarray:
    """Length of the interval set inside each window (windows may overlap each other)."""
    s, e = iv
    if len(s) == 0 or len(win_s) == 0:
        return np.zeros(len(win_s), np.int64)
    # Prefix sums of covered length let each window be answered with two lookups.
    cum = np.concatenate([[0], np.cumsum(e - s)])
    win_s, win_e = np.asarray(win_s, np.int64), np.asarray(win_e, np.int64)
    # a million windows at a time (the 2.2 M runtime calls of a 1 GB export as windows: ten
    # whole-column temporaries were ≈ 130 MiB)
    parts = [
        _covered_before(s, e, cum, win_e[i : i + _ROWS]) - _covered_before(s, e, cum, win_s[i : i + _ROWS])
        for i in range(0, len(win_s), _ROWS)
    ]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _covered_before(s: np.ndarray, e: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the (sorted, disjoint) set ``(s, e)`` before each time ``t``; ``cum``: its prefix sums."""
    i = searchsorted(s, t, side="right")  # intervals starting at or before t
    j = np.maximum(i - 1, 0)
    partial = np.minimum(e[j], t)
    partial -= s[j]
    np.clip(partial, 0, None, out=partial)
    partial += cum[j]
    out: np.ndarray = np.where(i > 0, partial, 0)
    return out


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values. (np.unique hashes first in numpy ≥ 2.3: nanosecond times built from
    microseconds are all multiples of 1000 and collide, 3.6 s for 4 M values against 0.3 s sorted.)"""
    a = np.sort(a, kind="stable")
    if len(a) < 2:
        return a
    keep = np.empty(len(a), bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def exclusive_layers(layers: list[IntervalSet], win_s: np.ndarray, win_e: np.ndarray) -> np.ndarray:
    """Attribute every instant of each window to the first layer that covers it.

    Returns an array ``[n_windows, len(layers) + 1]`` of nanoseconds; the last column is the time
    no layer covers. Rows sum to the window lengths exactly.
    """
    win_s = np.asarray(win_s, np.int64)
    win_e = np.asarray(win_e, np.int64)
    n_layers = len(layers)
    # the bounds: every window's and layer's ends, sorted in place and deduplicated (millions of
    # host intervals at 1 GB: no sorted copy beside the concatenation)
    runs = [win_s, win_e] + [x for iv in layers for x in iv]
    # each a sorted run where the layers are sets (starts and ends both in order): a stable sort
    # merges the runs in one pass where quicksort sorted millions of bounds whole
    kind: Literal["stable", "quicksort"] = _runs_kind(runs) if len(runs) <= _MERGE_RUNS else "quicksort"
    bounds = np.concatenate(runs)
    del runs
    bounds.sort(kind=kind)
    if len(bounds) > 1:
        keep = np.empty(len(bounds), bool)
        keep[0] = True
        np.not_equal(bounds[1:], bounds[:-1], out=keep[1:])
        bounds = bounds[keep]
        del keep
    out = np.zeros((len(win_s), n_layers + 1), np.int64)
    if len(bounds) < 2:
        return out
    seg_s = bounds[:-1]
    # the owning layer's index, one byte a segment where the layers are few; each layer's test a
    # piece at a time (``contains``'s gathers would be four columns of every segment)
    owner = np.full(len(seg_s), n_layers, np.int8 if n_layers < 127 else np.int64)
    for k in range(n_layers - 1, -1, -1):  # lowest index wins: apply it last
        ls, le = layers[k]
        if not len(ls):
            continue
        if bool((le > ls).all()) and (len(ls) == 1 or bool((ls[1:] >= le[:-1]).all())):
            # a sorted, disjoint layer: its intervals are runs of segments (the bounds hold its
            # ends), marked from a +1/−1 at each run's ends — a search per interval, not per segment
            run = np.zeros(len(seg_s) + 1, np.int8)
            run[searchsorted(bounds, ls)] = 1  # starts, and ends, are distinct
            run[searchsorted(bounds, le)] -= 1  # (an end may meet the next start: 0 there)
            np.cumsum(run, dtype=np.int8, out=run)
            owner[run[:-1] > 0] = k
            del run
            continue
        for i in range(0, len(seg_s), _ROWS):
            p = seg_s[i : i + _ROWS]
            j = searchsorted(ls, p, side="right")
            j -= 1
            inside = j >= 0
            np.maximum(j, 0, out=j)
            inside &= p < le[j]
            owner[i : i + _ROWS][inside] = k
    # Segments are elementary, so each lies entirely inside or outside every window. Windows
    # may overlap (rare, malformed step markers); each window is summed independently.
    for w, (ws, we) in enumerate(zip(win_s, win_e)):
        lo, hi = np.searchsorted(seg_s, ws, "left"), np.searchsorted(seg_s, we, "left")
        if hi > lo:
            length = bounds[lo + 1 : hi + 1] - bounds[lo:hi]
            out[w] = np.bincount(owner[lo:hi], weights=length, minlength=n_layers + 1).astype(np.int64)
    return out


_SLAB = 1 << 19  # rows per slab in covered_by_rows


def covered_by_rows(x: IntervalSet, tables: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]) -> int:
    """The measure of ``x`` (sorted, disjoint) ∩ the union of the rows [ts, ts + dur) of
    ``tables`` ((ts, dur, mask) each, ts in start order): ``total(intersect(x, union(rows)))``
    without the union of millions of rows built. Time is cut into slabs of about ``_SLAB`` rows;
    each slab's rows and the parts of earlier rows reaching into it are merged, the part before
    the next slab measured against ``x`` and the rest carried on. Tables not in start order are
    merged whole."""
    if not len(x[0]) or not tables:
        return 0
    if any(len(ts) > 1 and not (ts[1:] >= ts[:-1]).all() for ts, _, _ in tables):
        s = np.concatenate([ts if m is None else ts[m] for ts, _, m in tables])
        e = np.concatenate([(ts + d) if m is None else (ts[m] + d[m]) for ts, d, m in tables])
        return total(intersect(x, union(s, e, spent=True)))
    big = max(tables, key=lambda t: len(t[0]))[0]
    cuts: list[int | None] = [*big[_SLAB::_SLAB].tolist(), None]  # slab k ends at cuts[k] (None: open)
    carry: IntervalSet = EMPTY
    got = 0
    done = [0] * len(tables)
    for hi in cuts:
        ss, es = [carry[0]], [carry[1]]
        for j, (ts, dur, m) in enumerate(tables):
            a = done[j]
            b = len(ts) if hi is None else int(np.searchsorted(ts, hi, side="left"))
            done[j] = max(a, b)
            s, d = ts[a:b], dur[a:b]
            if m is not None:
                s, d = s[m[a:b]], d[m[a:b]]
            ss.append(s)
            es.append(s + d)
        u = union(np.concatenate(ss), np.concatenate(es), spent=True)
        del ss, es
        if hi is not None and len(u[0]):
            k = int(np.searchsorted(u[1], hi, side="right"))  # the intervals ending after the cut
            carry = (np.maximum(u[0][k:], hi), u[1][k:])  # their part from the cut on: the next slab's
            strad = u[0][k:] < hi  # (at most one, the set being disjoint) reaches over the cut
            u = (
                np.concatenate([u[0][:k], u[0][k:][strad]]),
                np.concatenate([u[1][:k], np.full(int(strad.sum()), hi, np.int64)]),
            )
        else:
            carry = EMPTY
        got += intersection_measure(x, u)
    return got


class RunningMeasure:
    """The measure of an interval set (sorted, disjoint) below a time: its overlap with [s, e) is
    ``at(e) − at(s)`` — a prefix sum and a binary search per time, no array per overlapping pair."""

    PIECE = 1 << 18  # times per piece in :meth:`overlap`: the searches' temporaries are not whole columns

    def __init__(self, ivs: IntervalSet) -> None:
        self.s, self.e = ivs
        self.before = np.zeros(len(self.s) + 1, np.int64)  # built in place: no temporaries of millions
        np.subtract(self.e, self.s, out=self.before[1:])
        np.cumsum(self.before[1:], out=self.before[1:])

    def at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, np.int64)
        if not len(self.s):
            return np.zeros(t.shape, np.int64)
        k = searchsorted(self.s, t, side="right")  # intervals starting at or before t
        j = np.maximum(k - 1, 0)
        part = np.minimum(t, self.e[j]) - self.s[j]
        cum: np.ndarray = np.where(k > 0, self.before[j] + part, 0)
        return cum

    def overlap(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Each [s, e)'s overlap with the set, a piece of :attr:`PIECE` rows at a time."""
        inside: np.ndarray = np.empty(len(s), np.int64)
        for i in range(0, len(s), self.PIECE):
            inside[i : i + self.PIECE] = self.at(e[i : i + self.PIECE]) - self.at(s[i : i + self.PIECE])
        return inside


def intersection_measure(x: IntervalSet, u: IntervalSet) -> int:
    """The measure of x ∩ u (both sorted, disjoint), ``total(intersect(x, u))`` without an array per
    overlapping pair: from u's running measure, over the part of ``x`` that reaches u's span only."""
    us, ue = u
    if not len(us):
        return 0
    xs, xe = x
    a = int(np.searchsorted(xe, us[0], side="right"))
    b = int(np.searchsorted(xs, ue[-1], side="left"))
    if b <= a:
        return 0
    return int(RunningMeasure(u).overlap(xs[a:b], xe[a:b]).sum())
