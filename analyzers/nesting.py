"""The parent of each interval in a nesting of intervals (call stacks, operator trees), at numpy speed.

The sequential definition (one pass over the intervals sorted by start, outer first, with a stack)
is what the analyzers mean by "enclosing operator" or "parent frame":

    for i in order:                      # by (group, start, -duration)
        while stack and closed(top, at=start[i]): pop
        parent[i] = top if stack and end[i] <= end[top] else -1
        push i

Whatever the input — proper nesting, partial overlaps, zero-length intervals — the top of the
stack after the pops is the *latest-started earlier interval of the group that is still open at
start[i]*: an interval is only popped once closed, and one closed at start[i] that stayed buried
under an open one is never the top. :func:`nest_parents` finds that interval for all intervals at
once by pointer jumping: each interval points at its predecessor; while the pointed interval is
closed at its start, it jumps to where the pointed interval points (every interval skipped on the
way closed before the pointed one's start, so before its own). Each round halves the remaining
chains: a few dozen vectorized rounds for millions of intervals, against one Python iteration per
interval for the stack. Same results, bit for bit (tests/test_nesting.py checks it against the
loop on random and adversarial inputs).
"""

from __future__ import annotations

import numpy as np


def nest_parents(
    starts: np.ndarray,
    ends: np.ndarray,
    order: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    closed_at_end: bool = False,
) -> np.ndarray:
    """Parent (an index into ``starts``) of each interval, −1 at top level.

    ``order``: the processing order (intervals sorted by group, start, −duration); None when the
    arrays are already in it. ``groups`` (indexed like ``starts``): the stack starts empty at each
    new group (a thread) along ``order``. ``closed_at_end``: an interval ending exactly at another's start is closed at it
    (``end <= start`` pops); by default it is still open there (``end < start`` pops)."""
    n = len(starts)
    if n == 0:
        return np.empty(0, np.int64)
    if order is None:  # already in order: read in place (nothing below writes s or e)
        s, e = np.asarray(starts), np.asarray(ends)
    else:
        order = np.asarray(order, np.int64)
        s = np.asarray(starts)[order]
        e = np.asarray(ends)[order]
    c = np.arange(-1, n - 1, dtype=np.int64)  # the candidate: the predecessor in order
    if groups is not None:
        new_group = np.zeros(n, bool)
        g = np.asarray(groups) if order is None else np.asarray(groups)[order]
        new_group[1:] = g[1:] != g[:-1]
        del g
        c[new_group] = -1
        _top_level(s, e, new_group, closed_at_end, c)
        del new_group
    elif n > 1:  # one group: the running maximum of the ends itself, no shifted columns
        reach = np.maximum.accumulate(e)
        none_open = np.less_equal(reach[:-1], s[1:]) if closed_at_end else np.less(reach[:-1], s[1:])
        del reach
        c[1:][none_open] = -1
        del none_open
    active = _first_round(s, e, c, closed_at_end)
    while active.size:
        active = active[_closed(s, e, c, active, closed_at_end)]
        if not active.size:
            break
        # skip it: everything it skipped closed before its start. A piece at a time (no gathered
        # columns of millions of nested intervals); a later piece may read a pointer an earlier
        # one moved — a further jump past intervals closed before that one's start, so before
        # this one's too: the same parent in the end.
        live = np.empty(active.size, bool)
        for i in range(0, active.size, _PIECE):
            a = active[i : i + _PIECE]
            nxt = c[c[a]]
            c[a] = nxt
            np.greater_equal(nxt, 0, out=live[i : i + _PIECE])
        active = active[live]
        del live
    del active, s
    ok = np.zeros(n, bool)  # a parent holds its child whole (a piece at a time, as above)
    for i in range(0, n, _PIECE):
        cc = c[i : i + _PIECE]
        has = np.flatnonzero(cc >= 0)
        ok[i + has] = e[i + has] <= e[cc[has]]
    del e
    if order is None:  # the candidate column is the result
        c[~ok] = -1
        return c
    parent = np.full(n, -1, np.int64)
    parent[order[ok]] = order[c[ok]]
    return parent


def nest_gathered(s: np.ndarray, e: np.ndarray, g: np.ndarray | None, order: np.ndarray) -> np.ndarray:
    """``nest_parents(starts, ends, order, groups)`` from the columns already gathered along ``order``
    (``s = starts[order]``, ``e = ends[order]``, ``g = groups[order]``): a caller that gathers each
    column and drops the unordered one holds each column once through the nesting, where
    ``nest_parents`` gathers its own copies beside the caller's (the module tree's 1.75 M ranges and
    launch calls of a 1 GB export: 28 MiB at the analysis' peak)."""
    c = nest_parents(s, e, groups=g)  # positions along ``order``
    parent = np.full(len(c), -1, np.int64)
    has = c >= 0
    parent[order[has]] = order[c[has]]
    return parent


def outer_first(ts: np.ndarray, dur: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """The processing order of :func:`nest_parents`: ``np.lexsort((-dur, ts))`` (by start, outer
    first, ties in row order), by ``groups`` first where given. Rows already in (start, −duration)
    order — a table's own, as Nsight exports its ranges — need a stable sort of the group alone
    (a radix pass over a few threads) or nothing: the same order, where the three-key lexsort took
    0.7 s for the 5 M operators of a 1 GB export. Rows made of such runs (tables joined end to end:
    the module tree's ranges and launch calls) are put in start order by one stable sort, which
    merges the runs, and then grouped the same way."""
    n = len(ts)
    if n > 1 and is_outer_first(ts, dur):
        if groups is None:
            return np.arange(n, dtype=np.int64)
        return _by_group(np.asarray(groups))
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    # by start, ties in row order (a stable sort finds and merges the sorted runs); where the
    # durations fall along it at equal starts, it is the (start, −duration) order itself
    order = np.argsort(ts, kind="stable")
    if is_outer_first(ts, dur, order):
        if groups is None:
            return order
        out: np.ndarray = order[_by_group(np.asarray(groups)[order])]
        return out
    del order
    return np.lexsort((-dur, ts) if groups is None else (-dur, ts, groups))


def _by_group(g: np.ndarray) -> np.ndarray:
    """The stable order of the rows by group (threads: a 16-bit key sorts by radix)."""
    lo, hi = int(g.min()), int(g.max())
    if hi - lo < 1 << 15:
        return np.argsort(np.subtract(g, lo).astype(np.int16), kind="stable")
    return np.argsort(g, kind="stable")


def is_outer_first(ts: np.ndarray, dur: np.ndarray, order: np.ndarray | None = None) -> bool:
    """Whether rows (taken in ``order`` where given) are sorted by start, longer first at equal
    starts (a piece at a time: no whole gathered columns; the durations read at equal starts only)."""
    for i in range(0, len(ts) - 1, _PIECE):
        rows = None if order is None else order[i : i + 1 + _PIECE]
        t = ts[i : i + 1 + _PIECE] if rows is None else ts[rows]
        if not (t[1:] >= t[:-1]).all():
            return False
        tie = np.flatnonzero(t[1:] == t[:-1])
        if len(tie):
            at, nxt = (tie + i, tie + i + 1) if rows is None else (rows[tie], rows[tie + 1])
            if not (dur[nxt] <= dur[at]).all():
                return False
    return True


_PIECE = 1 << 20  # rows per piece where a round's comparison would otherwise gather whole columns


def _closed(s: np.ndarray, e: np.ndarray, c: np.ndarray, active: np.ndarray, closed_at_end: bool) -> np.ndarray:
    """Whether each active interval's candidate is closed at its start, a piece at a time (the
    first round's gathers are three columns of every nested interval: 5 M operators at 1 GB)."""
    out = np.empty(active.size, bool)
    cmp = np.less_equal if closed_at_end else np.less
    for i in range(0, active.size, _PIECE):
        a = active[i : i + _PIECE]
        cmp(e[c[a]], s[a], out=out[i : i + _PIECE])
    return out


def _first_round(s: np.ndarray, e: np.ndarray, c: np.ndarray, closed_at_end: bool) -> np.ndarray:
    """The first round, by runs: an interval whose predecessor is closed at its start jumps past every
    interval of its run — the intervals before it each closed at the next one's start, so (starts
    ascending within a group) all closed at its own — to the interval before the run (−1 where the
    run begins a group or at top level: nothing before it is open). One running maximum for what
    would take a round per doubling: the launch calls a range holds, one after another, resolve at
    once (the module tree's nesting 0.15 → 0.08 CPU-s at 1 GB). Returns the intervals still active."""
    n = len(s)
    link = np.zeros(n, bool)  # the predecessor closed at the start (never across a group's start)
    (np.less_equal if closed_at_end else np.less)(e[:-1], s[1:], out=link[1:])
    link &= c >= 0
    # the run's first interval: the last one not linked (positions in four bytes where they fit: no
    # column beyond the rounds' own at the nesting's peak)
    r0 = np.arange(n, dtype=np.int32 if n < 1 << 31 else np.int64)
    r0[link] = 0
    np.maximum.accumulate(r0, out=r0)
    active = np.flatnonzero(link)
    del link
    seed = c[r0[active]]
    del r0
    c[active] = seed
    out: np.ndarray = active[seed >= 0]
    return out


def _top_level(s: np.ndarray, e: np.ndarray, new_group: np.ndarray, closed_at_end: bool, c: np.ndarray) -> None:
    """Set ``c`` to −1 where every earlier interval of the group is closed at the start (the running
    maximum of ends says so): its chain of closed predecessors would otherwise take a round per
    doubling to walk back to the group's start — 20 rounds for the top-level operators of a 303 MB
    Nsight export. Skipped where the shifted times could overflow (hostile values)."""
    n = len(s)
    if n < 2:
        return
    lo = min(int(s.min()), int(e.min()))
    span = max(int(s.max()), int(e.max())) - lo + 1
    shift = np.cumsum(new_group, dtype=np.int64)  # the group number
    if span * (int(shift[-1]) + 1) >= 2**62:
        return
    # each group above all earlier ones: the running max restarts with it. In place, two columns
    # (5 M operators of a 1 GB Nsight export: 40 MiB each) instead of five.
    shift *= span
    shift -= lo
    reach = e + shift
    np.maximum.accumulate(reach, out=reach)
    shift += s  # the shifted starts
    none_open = np.less_equal(reach[:-1], shift[1:]) if closed_at_end else np.less(reach[:-1], shift[1:])
    del reach, shift
    c[1:][none_open] = -1


def nest_parents_loop(
    starts: np.ndarray,
    ends: np.ndarray,
    order: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    closed_at_end: bool = False,
) -> np.ndarray:
    """The sequential definition (the reference the vectorized one is tested against)."""
    n = len(starts)
    order = np.arange(n) if order is None else np.asarray(order)
    parent = np.full(n, -1, np.int64)
    stack: list[int] = []
    last = object()
    s_l, e_l = np.asarray(starts).tolist(), np.asarray(ends).tolist()
    g_l = np.asarray(groups).tolist() if groups is not None else None
    for i in order.tolist():
        if g_l is not None and g_l[i] != last:
            stack, last = [], g_l[i]
        s = s_l[i]
        while stack and (e_l[stack[-1]] <= s if closed_at_end else e_l[stack[-1]] < s):
            stack.pop()
        if stack and e_l[i] <= e_l[stack[-1]]:
            parent[i] = stack[-1]
        stack.append(i)
    return parent
