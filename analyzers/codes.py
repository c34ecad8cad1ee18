"""Distinct values and groups of integer codes (string-table ids, threads), without hashing.

``np.unique`` hashes first in numpy ≥ 2.3: over a million kernel or runtime-call name ids it costs
tens of milliseconds where a count per possible id (the ids index a string table of a few hundred
entries) costs one. Both functions fall back to sorting where the codes are negative or their
range is far larger than the array.
"""

from __future__ import annotations

import numpy as np


def _dense(codes: np.ndarray) -> bool:
    """Whether a count per possible value is cheap: non-negative, a range near the array's length."""
    if not len(codes) or codes.dtype.kind not in "iu":
        return False
    lo, hi = int(codes.min()), int(codes.max())
    return lo >= 0 and hi <= 4 * len(codes) + (1 << 16)


def distinct(codes: np.ndarray) -> np.ndarray:
    """``np.unique(codes)``: the sorted distinct values (int64 where counted)."""
    codes = np.asarray(codes)
    if not _dense(codes):
        return np.unique(codes)
    out: np.ndarray = np.flatnonzero(np.bincount(codes)).astype(codes.dtype, copy=False)
    return out


def grouped(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct values ascending, the row order that groups them — rows of a value in row order —,
    each group's first position along that order): ``np.add.reduceat(x[order], first)`` is the
    per-value sum of a column ``x``, exact for integers."""
    codes = np.asarray(codes)
    if not len(codes):
        z = np.zeros(0, np.int64)
        return codes[:0], z, z
    if _dense(codes) and int(codes.max()) < 1 << 15:
        order = np.argsort(codes.astype(np.int16), kind="stable")  # 16-bit keys sort by radix
    else:
        order = np.argsort(codes, kind="stable")
    s = codes[order]
    first = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    return s[first], order, first


def isin(values: np.ndarray, wanted: np.ndarray | list[int]) -> np.ndarray:
    """``np.isin(values, wanted)`` for codes (threads, name ids): one byte per possible code looked
    up, where np.isin's table method builds an int64 column of every row (40 MiB for the 5 M
    operators of a 1 GB export)."""
    values, wanted = np.asarray(values), np.asarray(wanted)
    if not len(values) or not len(wanted) or values.dtype.kind not in "iu" or wanted.dtype.kind not in "iu":
        return np.isin(values, wanted)
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi > 4 * len(values) + (1 << 16):
        return np.isin(values, wanted)
    lut = np.zeros(hi + 1, bool)
    w = wanted[(wanted >= 0) & (wanted <= hi)]
    lut[w] = True
    out: np.ndarray = lut[values]
    return out


def unique_inverse(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True)``: the sorted distinct values and each row's index
    among them, from a count and a lookup per possible value where the codes are dense."""
    codes = np.asarray(codes)
    if not _dense(codes):
        u, where = np.unique(codes, return_inverse=True)
        return u, where.reshape(-1)
    present = np.flatnonzero(np.bincount(codes))
    lut = np.zeros(int(present[-1]) + 1, np.intp)
    lut[present] = np.arange(len(present))
    inv: np.ndarray = lut[codes]
    return present.astype(codes.dtype, copy=False), inv


def ascending(col: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """``col`` in ascending order and the stable order that sorts it — None (no order column,
    no gathered copy) where it is in order already, as a runtime table's correlation ids are."""
    col = np.asarray(col)
    if len(col) < 2 or bool((col[1:] >= col[:-1]).all()):
        return col, None
    order = np.argsort(col, kind="stable")
    return col[order], order
