"""Two-sample statistics for the diff gate: did AFTER's steps get slower than BEFORE's, beyond noise?

* :func:`mann_whitney` — the Mann–Whitney U (Wilcoxon rank-sum) test, one-sided. Exact null
  distribution for small samples without ties (the counts of U are the coefficients of the
  Gaussian binomial coefficient, Mann & Whitney 1947); otherwise the normal approximation with the
  tie-corrected variance and a continuity correction (Lehmann, *Nonparametrics*, 1975, §1.4).
  A rank test makes no assumption about the shape of the step-time distribution (step times are
  skewed, with warm-up and GC outliers) and is unmoved by any single outlier.
* :func:`bootstrap_change` — the relative change of a statistic (median, p95, mean) with a
  percentile bootstrap interval (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993,
  ch. 13), each sample resampled on its own, from a fixed seed: the same inputs give the same
  interval on every machine.

Pure numpy and the standard library; no scipy (one rank test and one resampling loop do not
justify a 40 MB dependency).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Exact null distribution up to this many (m × n) pairs: the table has m·n + 1 entries and the
# Gaussian-binomial recurrence costs O(n · m·n) integer additions (2,500 pairs: a few ms).
EXACT_MAX_PAIRS = 2500
BOOTSTRAP_SEED = 20240601
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class RankTest:
    """One-sided Mann–Whitney U test that ``y`` is stochastically larger than ``x``."""

    test: str  # "Mann-Whitney U (exact)" | "Mann-Whitney U (normal approximation, tie-corrected)"
    n_x: int
    n_y: int
    u: float  # U of y: pairs (x_i, y_j) with y_j > x_i, ties counting one half
    p_value: float
    z: float | None  # the normal approximation's z (None when exact)
    ties: int  # values shared by more than one observation
    min_p: float  # the smallest p-value these sample sizes can give (1 / C(m+n, m))

    @property
    def effect_size(self) -> float:
        """The common-language effect size U / (m·n): the probability that a step of y is longer
        than a step of x (½ when they are alike)."""
        return self.u / (self.n_x * self.n_y) if self.n_x and self.n_y else 0.5


def rankdata(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Midranks (1-based; tied values share the mean of their ranks) and the size of every group of ties."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    sorted_v = values[order]
    n = len(values)
    # Boundaries of runs of equal values.
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]]) if n else np.array([], dtype=int)
    ends = np.r_[starts[1:], n]
    mid = (starts + ends + 1) / 2.0  # mean of ranks starts+1 … ends
    ranks = np.empty(n, dtype=float)
    ranks[order] = np.repeat(mid, ends - starts)
    return ranks, (ends - starts)


def u_distribution(m: int, n: int) -> list[int]:
    """Counts of U = 0 … m·n over the C(m+n, m) equally likely arrangements of two samples of sizes
    m and n without ties: the coefficients of the Gaussian binomial [m+n choose m]_q, built by the
    recurrence c(u; m, n) = c(u − n; m − 1, n) + c(u; m, n − 1) one sample size at a time (exact
    integers)."""
    if m > n:
        m, n = n, m
    # table[j] = counts for sizes (i, j), i the current row; row 0: U is always 0.
    rows = [[1] for _ in range(n + 1)]
    for i in range(1, m + 1):
        new = [[1]]  # (i, 0): U is 0
        for j in range(1, n + 1):
            a = rows[j]  # (i − 1, j), shifted by j
            b = new[j - 1]  # (i, j − 1)
            size = i * j + 1
            c = [0] * size
            for u, v in enumerate(a):
                c[u + j] += v
            for u, v in enumerate(b):
                c[u] += v
            new.append(c)
        rows = new
    return rows[n]


def _phi_upper(z: float) -> float:
    """P(Z ≥ z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney(x: npt.ArrayLike, y: npt.ArrayLike) -> RankTest:
    """One-sided test of H1 "y tends to be larger than x" (AFTER's steps slower than BEFORE's).

    The p-value is P(U ≥ U_observed) under H0 (both samples from one distribution)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        raise ValueError("the rank test needs at least one value in each sample")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("the rank test needs finite values")
    ranks, groups = rankdata(np.r_[x, y])
    u = float(ranks[m:].sum() - n * (n + 1) / 2.0)
    ties = int((groups > 1).sum())
    min_p = 1.0 / math.comb(m + n, m)
    if ties == 0 and m * n <= EXACT_MAX_PAIRS:
        counts = u_distribution(m, n)
        k = int(round(u))
        p = sum(counts[k:]) / math.comb(m + n, m)
        return RankTest("Mann-Whitney U (exact)", m, n, u, float(min(1.0, p)), None, 0, min_p)
    big_n = m + n
    tie_term = float((groups.astype(float) ** 3 - groups).sum()) / (big_n * (big_n - 1))
    var = m * n / 12.0 * ((big_n + 1) - tie_term)
    mean = m * n / 2.0
    if var <= 0:  # every value equal: no evidence either way
        return RankTest("Mann-Whitney U (normal approximation, tie-corrected)", m, n, u, 1.0, 0.0, ties, min_p)
    z = (u - mean - 0.5) / math.sqrt(var)  # continuity correction toward the null
    return RankTest(
        "Mann-Whitney U (normal approximation, tie-corrected)", m, n, u, float(min(1.0, _phi_upper(z))), z, ties, min_p
    )


@dataclass(frozen=True)
class Change:
    """The relative change of a statistic from x to y, in %, with a bootstrap interval."""

    statistic: str  # "p50" | "p95" | "mean"
    before: float
    after: float
    change_pct: float
    low_pct: float  # the interval's bounds
    high_pct: float
    confidence: float  # 0.95
    resamples: int
    seed: int


STATISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    # Along the last axis, so a (resamples × n) array gives one value per resample. Percentiles use
    # numpy's default (linear) interpolation, as the breakdown's step_ms does.
    "p50": lambda a: np.percentile(a, 50, axis=-1),
    "p95": lambda a: np.percentile(a, 95, axis=-1),
    "mean": lambda a: np.mean(a, axis=-1),
}


def bootstrap_change(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    statistic: str = "p50",
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Change:
    """100 · (stat(y) / stat(x) − 1) and its percentile bootstrap interval: both samples resampled
    with replacement ``resamples`` times from ``numpy.random.default_rng(seed)``."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if len(x) == 0 or len(y) == 0:
        raise ValueError("the bootstrap needs at least one value in each sample")
    stat = STATISTICS[statistic]
    before, after = float(stat(x)), float(stat(y))
    if before <= 0:
        raise ValueError(f"the {statistic} of BEFORE is not positive")
    rng = np.random.default_rng(seed)
    bx = stat(x[rng.integers(0, len(x), size=(resamples, len(x)))])
    by = stat(y[rng.integers(0, len(y), size=(resamples, len(y)))])
    ok = bx > 0
    ratios = 100.0 * (by[ok] / bx[ok] - 1.0)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail]) if len(ratios) else (math.nan, math.nan)
    return Change(
        statistic, before, after, 100.0 * (after / before - 1.0), float(low), float(high), confidence, resamples, seed
    )
