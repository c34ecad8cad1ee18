"""One straggler story (issue 23 item 4): the aligned method answers, a rank is named only with a
significant binomial test, lateness beyond the collectives' jitter, cold starts left out."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import DATA
from tests.conftest import KINETO
from tests.conftest import dlrm_rank_dir
from trainscope.analyzers.ranks.straggler_test import binomial_tail
from trainscope.analyzers.ranks.straggler_test import straggler_test


def test_sign_flip_exact_and_approximate():
    from trainscope.analyzers.ranks.straggler_test import sign_flip_p

    assert sign_flip_p(np.array([1.0, 1.0, 1.0])) == pytest.approx(1 / 8)
    assert sign_flip_p(np.array([30.0] * 5 + [-1.0])) == pytest.approx(2 / 64)
    rng = np.random.default_rng(1)
    assert sign_flip_p(rng.normal(0, 1, 400)) > 0.01  # no shift: not significant
    assert sign_flip_p(rng.normal(1, 1, 400)) < 1e-6


def test_gloo_sleeping_rank_named_by_lateness_test(gloo_dir):
    s = _stragglers(gloo_dir)
    t = s["alignment"]["test"]
    # six collectives cannot reach 5 % by counts (p = 0.109) but the 30 ms sleep is far beyond chance
    assert t["p_value"] > 0.05 and t["p_lateness"] < 0.05 and t["clear"] and s["stragglers"] == [1]


def test_binomial_tail_against_enumeration():
    assert binomial_tail(5, 5, 0.5) == pytest.approx(1 / 32)
    assert binomial_tail(0, 7, 0.3) == 1.0 and binomial_tail(8, 7, 0.3) == 0.0
    # P(X >= 3 | 4, 1/2) = (4 + 1) / 16
    assert binomial_tail(3, 4, 0.5) == pytest.approx(5 / 16)


def _matrix(late_ms, m=40, n=2, jitter_ms=0.05, seed=0):
    """Rank 1 arrives ``late_ms`` after rank 0 at each of ``m`` collectives, plus noise."""
    rng = np.random.default_rng(seed)
    t0 = np.arange(m) * 10e6
    arrival = np.vstack([t0 + rng.normal(0, jitter_ms * 1e6, m) + (late_ms * 1e6 if r == 1 else 0) for r in range(n)])
    end = np.tile(arrival.max(axis=0) + 1e6, (n, 1))
    return arrival, end


def test_steady_late_rank_is_named():
    t = straggler_test(*_matrix(2.0))
    assert t.clear and t.rank_index == 1 and t.last_in == 40 and t.p_value < 1e-9


def test_coin_flip_names_nobody():
    t = straggler_test(*_matrix(0.0, jitter_ms=0.3))
    assert not t.clear
    assert t.p_value > 0.0


def test_cold_start_collective_left_out():
    arrival, end = _matrix(0.0, jitter_ms=0.3, m=20, seed=3)
    arrival[1, 0] += 30e6  # rank 1 arrives 30 ms late at the first collective only
    end[:, 0] = arrival[:, 0].max() + 1e6
    t = straggler_test(arrival, end)
    assert t.cold_excluded == 1 and t.cold_ms > 25
    assert t.considered <= 19


def test_ties_have_no_last_rank():
    arrival, end = _matrix(2.0, n=2)
    both = np.vstack([arrival[1], arrival[1], arrival[0]])  # ranks 0 and 1 last together
    t = straggler_test(both, np.vstack([end, end[:1]]))
    assert t.considered == 0 and not t.clear


def _stragglers(path):
    from trainscope.api.analysis import analyze

    return analyze(str(path)).to_dict()["stragglers"]


def test_dlrm_two_ranks_one_story():
    s = _stragglers(KINETO / "hta_dlrm_ws128_2ranks")
    test = s["alignment"]["test"]
    assert (test["rank"], test["last_in"], test["considered"]) == (1, 5, 5)
    assert test["p_value"] == pytest.approx(1 / 32, rel=1e-3) and test["clear"]
    assert s["stragglers"] == [1]  # the aligned answer; the step-offset list is kept apart
    from trainscope.api.analysis import analyze

    text = analyze(str(KINETO / "hta_dlrm_ws128_2ranks")).to_text()
    assert "Step-offset comparison" not in text and "disagree" not in text
    assert all(line.split()[0] in ("1", "rank") for line in text.splitlines() if "◀ straggler" in line)


def test_ddp_capture_names_with_its_test():
    s = _stragglers(DATA / "nsys" / "cs336_ddp_2x3090.sqlite")
    t = s["alignment"]["test"]
    assert t["last_in"] == 85 and t["considered"] == 147
    # named only with its test: significant and beyond jitter, and the figures say how thin it is
    assert s["stragglers"] == ([1] if t["clear"] else [])
    assert t["clear"] == (min(t["p_value"], t["p_lateness"]) < t["alpha"] and t["mean_late_ms"] > t["jitter_ms"])
    assert t["mean_late_ms"] < 1.0 and t["max_spread_ms"] > 20


def test_dlrm_eight_ranks_names_no_tied_rank(tmp_path):
    s = _stragglers(dlrm_rank_dir(tmp_path, 8))
    # four identical late ranks arrive last together at every collective: no single straggler
    assert s["stragglers"] == [] and s["straggler"] is None
    assert "no collective has a single last rank" in s["summary"]
    # every view counts the same: no rank is 'last' anywhere (the step-offset list once named 4 ranks)
    assert {(r["late_in"], r["considered"]) for r in s["ranks"]} == {(0, 0)}
    late = {r["rank"]: r["mean_late_ms"] for r in s["ranks"]}
    assert late[1] == late[3] == late[5] == late[7] > 5 and late[0] == late[2] == late[4] == late[6] == 0
