"""The gate's statistics (analyzers/compare/stats.py) against tabulated and hand-computed values and against
brute-force enumeration of the permutation distribution — independent of the implementation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trainscope.analyzers.compare.diff import GateSide
from trainscope.analyzers.compare.diff import gate_on
from trainscope.analyzers.compare.stats import bootstrap_change
from trainscope.analyzers.compare.stats import mann_whitney
from trainscope.analyzers.compare.stats import rankdata
from trainscope.analyzers.compare.stats import u_distribution


def _u(x, y) -> float:
    """U of y by its definition: pairs with y > x, ties one half."""
    return sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in x for b in y)


def test_u_distribution_is_the_gaussian_binomial():
    # [8 choose 4]_q, the coefficients tabulated for m = n = 4 (they sum to C(8, 4) = 70).
    assert u_distribution(4, 4) == [1, 1, 2, 3, 5, 5, 7, 7, 8, 7, 7, 5, 5, 3, 2, 1, 1]
    assert u_distribution(2, 3) == u_distribution(3, 2) == [1, 1, 2, 2, 2, 1, 1]
    assert sum(u_distribution(10, 10)) == math.comb(20, 10)


@pytest.mark.parametrize("m,n", [(3, 3), (4, 5), (6, 6), (2, 9)])
def test_exact_distribution_matches_enumeration(m, n):
    """Every way of choosing which of m + n distinct ranks belong to y, counted by U."""
    counts = [0] * (m * n + 1)
    for ys in itertools.combinations(range(m + n), n):
        xs = [r for r in range(m + n) if r not in ys]
        counts[int(_u(xs, ys))] += 1
    assert u_distribution(m, n) == counts


# One-tailed α = 0.05 critical values of U for equal samples (the tables printed in statistics
# texts, e.g. Siegel & Castellan, Nonparametric Statistics, table J): reject when U ≤ c, so
# P(U ≤ c) ≤ 0.05 < P(U ≤ c + 1). By symmetry P(U ≤ c) = P(U ≥ m·n − c), the upper tail we compute.
CRITICAL = {5: 4, 6: 7, 7: 11, 8: 15, 9: 21, 10: 27}


@pytest.mark.parametrize("n,c", sorted(CRITICAL.items()))
def test_exact_p_values_agree_with_the_tabulated_critical_values(n, c):
    def p_for_u(u: int) -> float:
        # Samples realizing U = u: y beats exactly u of the pairs.
        x = list(range(n))
        y = []
        left = u
        for j in range(n):
            k = min(n, left)
            y.append(k - 0.5 + j / 100)  # above exactly k of x's values; distinct, so the test is exact
            left -= k
        assert _u(x, y) == u
        return mann_whitney(x, y).p_value

    assert p_for_u(n * n - c) <= 0.05 < p_for_u(n * n - c - 1)


def test_hand_computed_examples():
    # All of y above all of x, 3 and 3: one arrangement of C(6, 3) = 20.
    t = mann_whitney([1, 2, 3], [4, 5, 6])
    assert (t.u, t.p_value, t.test) == (9.0, 1 / 20, "Mann-Whitney U (exact)")
    assert t.min_p == pytest.approx(1 / 20)
    # Interleaved: U = 1 + 2 + 3 + 4 = 10; P(U ≥ 10) = (7 + 5 + 5 + 3 + 2 + 1 + 1) / 70.
    t = mann_whitney([1, 3, 5, 7], [2, 4, 6, 8])
    assert t.u == 10 and t.p_value == pytest.approx(24 / 70)
    # y below x: no evidence that y is larger.
    assert mann_whitney([4, 5, 6], [1, 2, 3]).p_value == 1.0
    assert mann_whitney([4, 5, 6], [1, 2, 3]).effect_size == 0.0


def test_midranks():
    ranks, groups = rankdata(np.array([10.0, 20.0, 20.0, 30.0, 20.0]))
    assert ranks.tolist() == [1.0, 3.0, 3.0, 5.0, 3.0]
    assert sorted(groups.tolist()) == [1, 1, 3]


def test_normal_approximation_with_ties_against_the_permutation_distribution():
    """With ties the null distribution of U (midranks) is enumerated: its mean and variance are
    exactly m·n/2 and the tie-corrected m·n/12·(N + 1 − Σ(t³ − t)/(N(N − 1))); the approximate
    one-sided p-value is within 0.01 of the enumerated one."""
    x = [3, 5, 5, 7, 8, 8, 9, 12]
    y = [5, 8, 9, 9, 11, 12, 13, 15]
    pooled = x + y
    m, n, big = len(x), len(y), len(x) + len(y)
    ranks, groups = rankdata(np.array(pooled, float))
    us = []
    for ys in itertools.combinations(range(big), n):
        us.append(ranks[list(ys)].sum() - n * (n + 1) / 2)
    us = np.array(us)
    tie_var = m * n / 12 * ((big + 1) - ((groups**3 - groups).sum()) / (big * (big - 1)))
    assert us.mean() == pytest.approx(m * n / 2, abs=1e-9)
    assert us.var() == pytest.approx(tie_var, rel=1e-9)
    t = mann_whitney(x, y)
    assert t.test == "Mann-Whitney U (normal approximation, tie-corrected)" and t.ties == 4
    assert t.u == _u(x, y)
    exact = (us >= t.u - 1e-9).mean()
    assert t.p_value == pytest.approx(exact, abs=0.01)


def test_normal_approximation_without_ties_is_close_to_exact_for_large_samples():
    rng = np.random.default_rng(1)
    x = rng.normal(100, 5, 60)
    y = rng.normal(102, 5, 60)  # 60 × 60 pairs: past the exact table
    approx = mann_whitney(x, y)
    assert approx.z is not None
    counts = u_distribution(60, 60)
    exact = sum(counts[int(approx.u) :]) / math.comb(120, 60)
    assert approx.p_value == pytest.approx(exact, abs=0.002)


def test_bootstrap_is_deterministic_and_brackets_the_change():
    x = [100, 102, 98, 101, 99, 103, 97, 100]
    y = [110, 112, 108, 111, 109, 113, 107, 110]
    a, b = bootstrap_change(x, y, "p50"), bootstrap_change(x, y, "p50")
    assert a == b  # the same seed, the same interval
    assert a.change_pct == pytest.approx(100 * (110 / 100 - 1))
    assert a.low_pct < a.change_pct < a.high_pct and a.low_pct > 0
    assert bootstrap_change(x, y, "mean").change_pct == pytest.approx(100 * (np.mean(y) / np.mean(x) - 1))


def test_gate_needs_both_significance_and_size():
    before = [100, 101, 99, 102, 98, 103, 97, 104]
    slower = [v * 1.10 for v in before]
    side = lambda v: GateSide(float(np.percentile(v, 50)), [float(x) for x in v])  # noqa: E731
    g = gate_on("step_p50", side(before), side(slower), 5.0)
    assert g.regressed and g.test.p_value == pytest.approx(1 / math.comb(16, 8))  # every step slower
    assert not gate_on("step_p50", side(before), side(slower), 15.0).regressed  # significant, but within 15 %
    # A large change that the steps do not support: one outlier step moves the p50 of few steps.
    noisy_b, noisy_a = [100, 100, 130, 100], [100, 130, 130, 100]
    g = gate_on("step_p50", side(noisy_b), side(noisy_a), 5.0)
    assert g.change > 5 and not g.test.significant and not g.regressed and "not significant" in g.reason


def test_the_statistical_gate_over_many_noise_draws():
    """Same distribution on both sides: the gate fails at most about α of the time (here: never
    more than 3 of 40 draws); a real 10 % slowdown of every step fails it every time (24 steps)."""
    rng = np.random.default_rng(7)
    side = lambda v: GateSide(float(np.percentile(v, 50)), v.tolist())  # noqa: E731
    false_alarms = misses = 0
    for _ in range(40):
        base = rng.lognormal(np.log(100), 0.08, 24)
        again = rng.lognormal(np.log(100), 0.08, 24)
        slow = rng.lognormal(np.log(110), 0.08, 24)
        false_alarms += gate_on("step_p50", side(base), side(again), 2.0).regressed
        misses += not gate_on("step_p50", side(base), side(slow), 5.0).regressed
    assert false_alarms <= 3 and misses <= 4
