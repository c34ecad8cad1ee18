"""What balancing the ranks' work can take off a step (issue 37, "the headline rank"): the
``ranks/imbalance`` stake is the wait for the slowest rank, capped by the late rank's measured extra
work per step — (N − 1)/N of its work beyond the other ranks' median (GPU kernel time outside
collectives on GPU ranks, host time outside collectives on CPU ranks). Work that is not there cannot
be balanced away: where the extra work is under ``ranks.work_explains_pct`` (50 %) of the wait, the
finding says the wait comes from elsewhere, and "Give every rank the same work" projects below
``fix.min_speedup`` and is not offered.

Figures by hand from the raw events: DLRM rank 1 runs 135.99 ms of non-NCCL kernels per step
against rank 0's 105.16 ms (+30.83 ms); gloo rank 1 spends 52.64 ms per step outside its gloo
ranges against rank 0's 7.39 ms (+45.26 ms: the 30 ms sleep and its own work)."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from tests.conftest import DATA
from tests.conftest import KINETO
from tests.conftest import dlrm_rank_dir
from tests.conftest import dlrm_step_kernels
from trainscope.analyzers.findings.ranks import NOT_WORK_TITLE
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import rejudged
from trainscope.api import analyze

DLRM = KINETO / "hta_dlrm_ws128_2ranks"
WAN_BEFORE = DATA / "nsys" / "nsysai_h100x2_wan21_train_before.sqlite"
DDP_3090 = DATA / "nsys" / "cs336_ddp_2x3090.sqlite"
WORK_TITLE = "Ranks wait for a slower rank (work imbalance)"


def _finding(a):
    return next((f for f in a.findings if f.id == "ranks/imbalance"), None)


def _balance_fix(a):
    return next((r for r in a.recommendations if r.id == "balance-ranks"), None)


def _mean_step_ms(a) -> float:
    return a.sinks.total_ns / 1e6 / a.sinks.steps


def _by_rank(report) -> dict:
    return {a.rank: a for a in report.ranks}


def _evidence(f, prefix: str):
    return next(e for e in f.evidence if e.metric.startswith(prefix))


def test_dlrm_extra_work_is_the_kernel_time_outside_collectives():
    """The straggler's extra work, from the raw events: kernel time in the steps less NCCL kernels."""
    work = []
    for r in (0, 1):
        kernels, steps = dlrm_step_kernels(r)
        work.append(sum(e["dur"] for e in kernels if "nccl" not in e["name"].lower()) / 1e3 / steps)
    assert work == pytest.approx([105.16, 135.987], abs=0.01)
    report = analyze(str(DLRM), jobs=1)
    imb = report.story.imbalance
    assert imb is not None and imb.rank == 1
    assert imb.work_basis == "GPU kernel time outside collectives"
    assert imb.extra_work_ms_per_step == pytest.approx(work[1] - work[0], abs=0.01)  # 30.83 ms
    assert imb.others_wait_ms_per_step == pytest.approx(15.933, abs=0.001)
    # the wait is explained: rank 1 does more work than the others wait for it; the 2.6 % wait is no finding
    assert imb.extra_work_ms_per_step > imb.others_wait_ms_per_step
    r0 = _by_rank(report)[0]
    assert _finding(r0) is None and _balance_fix(r0) is None
    doc = report.to_dict()["stragglers"]["alignment"]["rank_imbalance"]
    assert doc["extra_work_ms_per_step"] == pytest.approx(30.827, abs=0.001)
    assert doc["work_basis"] == "GPU kernel time outside collectives"
    text = " ".join(report.to_text().split())  # the text wraps at 90 columns
    assert "median: 30.8 ms of GPU kernel time outside collectives (embedding +27.5 ms" in text


def test_dlrm_the_cap_binds_on_the_waiting_rank():
    """With the finding's grade lowered to 2 %, rank 0's 15.93 ms wait is raised; balanced work takes
    off at most half of rank 1's 30.83 ms extra (15.41 ms), a little less than the wait."""
    report = analyze(str(DLRM), jobs=1, thresholds={"comm.moderate": 2})
    r0 = _by_rank(report)[0]
    f = _finding(r0)
    assert f is not None and f.title == WORK_TITLE
    wait = r0.sinks.pct("imbalance")
    cap = 100 * (30.827 / 2) / _mean_step_ms(r0)
    assert cap < wait
    assert f.stake_pct == pytest.approx(cap, abs=0.01)
    assert _evidence(f, "waiting inside collectives per step").value == pytest.approx(15.933, abs=0.001)
    assert _evidence(f, "extra work per step of rank 1 (the straggler)").value == pytest.approx(30.827, abs=0.001)
    fix = _balance_fix(r0)
    assert fix is not None and fix.projected_speedup == pytest.approx(1 / (1 - f.stake_pct / 100), abs=0.001)


def test_gloo_rank_1_really_does_more_work(gloo_dir):
    """CPU ranks: host time outside the gloo ranges, per step. Rank 1's extra (45.26 ms) exceeds the
    39.18 ms the others wait for it, so its stake is still (N − 1)/N of the wait; rank 0's own stake,
    the whole 39.18 ms wait before, is now capped at half the extra work (22.63 ms)."""
    work = []
    for r in (0, 1):
        with gzip.open(DATA / "gloo" / f"rank{r}.pt.trace.json.gz") as f:
            ev = json.load(f)["traceEvents"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))
        coll = sorted(
            (e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("gloo:") and e.get("ph") == "X"
        )
        outside = 0.0
        for a, b in steps:
            covered, reach = 0.0, a
            for x, y in coll:
                x, y = max(x, reach), min(y, b)
                if y > x:
                    covered += y - x
                    reach = y
            outside += (b - a) - covered
        work.append(outside / len(steps) / 1e3)
    assert work == pytest.approx([7.386, 52.643], abs=0.01)
    report = analyze(str(gloo_dir), jobs=1)
    imb = report.story.imbalance
    assert imb is not None and imb.rank == 1 and imb.work_basis == "host time outside collectives"
    assert imb.extra_work_ms_per_step == pytest.approx(work[1] - work[0], abs=0.01)  # 45.26 ms
    assert imb.others_wait_ms_per_step == pytest.approx(39.18, abs=0.01)
    ranks = _by_rank(report)
    for a in ranks.values():  # the verdict stays, on both ranks
        assert a.verdict.bottleneck == "ranks/imbalance" and _finding(a).title == WORK_TITLE
    r1 = _finding(ranks[1])
    assert r1.stake_pct == pytest.approx(imb.others_wait_pct / 2, abs=0.01)  # 33.44 %: the wait binds
    assert _evidence(r1, "the other ranks' wait for this rank per step").value == pytest.approx(39.18, abs=0.01)
    assert _evidence(r1, "extra work per step of rank 1").meets is True  # 45.26 ≥ 50 % of 39.18
    assert "it does 45.3 ms more work per step (host time outside collectives)" in r1.detail
    r0 = _finding(ranks[0])
    assert ranks[0].sinks.pct("imbalance") == pytest.approx(66.41, abs=0.01)  # its stake before
    assert r0.stake_pct == pytest.approx(100 * (45.256 / 2) / _mean_step_ms(ranks[0]), abs=0.01)  # 38.36 %
    assert r0.stake_pct < ranks[0].sinks.pct("imbalance")
    for a in ranks.values():
        fix = _balance_fix(a)
        assert fix is not None and fix.projected_speedup == pytest.approx(
            1 / (1 - _finding(a).stake_pct / 100), abs=0.001
        )
    assert _balance_fix(ranks[1]).projected_speedup == pytest.approx(1.502, abs=0.001)
    assert _balance_fix(ranks[0]).projected_speedup == pytest.approx(1.622, abs=0.001)  # was 2.98×


def test_a_cpu_straggler_without_extra_work_is_not_called_imbalance(gloo_dir):
    """The gloo pair's measured waits, re-judged as if rank 1 did only 0.5 ms more work per step:
    the stake falls to what that work allows, the title says the wait is not work imbalance, and
    the fix is not offered."""
    report = analyze(str(gloo_dir), jobs=1)
    rules = Rules()
    for a in report.ranks:
        obs = a.observations
        weak = rejudged(a, a.sinks, obs.imbalance_evidence, rules, extra={**obs.extra, "balance_work_ms": 0.5})
        f = _finding(weak)
        assert f is not None and f.title == NOT_WORK_TITLE
        assert "the wait is not work imbalance — it comes from elsewhere" in f.detail
        assert f.stake_pct < 0.5 and f.severity == "info"
        assert _balance_fix(weak) is None
    straggler = next(a for a in report.ranks if a.rank == 1)
    weak = rejudged(
        straggler, straggler.sinks, (), rules, extra={**straggler.observations.extra, "balance_work_ms": 0.5}
    )
    # (N − 1)/N of the others' 66.87 % wait, scaled by 0.5 / 39.18 ms
    assert _finding(weak).stake_pct == pytest.approx(66.87 / 2 * 0.5 / 39.18, abs=0.01)


def test_wan21_before_the_wait_is_not_work_and_no_balance_fix_is_offered():
    """Two H100s (Nsight): rank 1 is the straggler and rank 0 waits 11.40 ms per step for it (3.8 %),
    but rank 1 runs only 2.405 ms more kernel time per step. The 1.04× "Give every rank the same work"
    the report offered is gone; the finding stays, saying the wait comes from elsewhere."""
    report = analyze(str(WAN_BEFORE), jobs=1)
    imb = report.story.imbalance
    assert imb is not None and imb.rank == 1
    assert imb.others_wait_ms_per_step == pytest.approx(11.399, abs=0.001)
    assert imb.extra_work_ms_per_step == pytest.approx(2.405, abs=0.001)
    # the total is the per-class extras (no kernel class is shorter on rank 1 here)
    assert imb.extra_work_ms_per_step == pytest.approx(sum(ms for _, ms in imb.extra_work), abs=0.002)
    r0 = _by_rank(report)[0]
    f = _finding(r0)
    assert f is not None and f.title == NOT_WORK_TITLE and f.severity == "info"
    assert f.stake_pct == pytest.approx(100 * (2.405 / 2) / _mean_step_ms(r0), abs=0.01)  # 0.40 %, not 3.8 %
    assert r0.sinks.pct("imbalance") == pytest.approx(3.8, abs=0.01)
    assert _evidence(f, "waiting inside collectives per step").value == pytest.approx(11.399, abs=0.001)
    extra = _evidence(f, "extra work per step of rank 1 (the straggler)")
    assert extra.value == pytest.approx(2.405, abs=0.001) and extra.meets is False
    assert all(_balance_fix(a) is None for a in report.ranks)


def test_cs336_ddp_the_straggler_does_almost_no_extra_work():
    """Two RTX 3090s under DDP: the others wait 42.3 ms per step for rank 1, which runs 1.59 ms more
    kernel time: the wait is not work imbalance."""
    report = analyze(str(DDP_3090), jobs=1)
    imb = report.story.imbalance
    assert imb is not None and imb.rank == 1
    assert imb.others_wait_ms_per_step == pytest.approx(42.334, abs=0.001)
    assert imb.extra_work_ms_per_step == pytest.approx(1.587, abs=0.001)
    f = _finding(_by_rank(report)[0])
    assert f is not None and f.title == NOT_WORK_TITLE
    assert f.stake_pct == pytest.approx(100 * (1.587 / 2) / _mean_step_ms(_by_rank(report)[0]), abs=0.01)
    assert all(_balance_fix(a) is None for a in report.ranks)


def test_eight_ranks_without_a_straggler_bound_by_the_most_extra_work(tmp_path):
    """Eight DLRM ranks (even ranks copy rank 0, odd ranks rank 1): every last arrival is a tie, so no
    straggler; the bound is the most extra work of any rank — rank 1's 30.83 ms over the others'
    median (four rank-0 copies of seven) — and 7/8 of it (26.97 ms) exceeds the even ranks' 15.93 ms
    wait, so with the grade lowered to 2 % their stake is the wait itself."""
    report = analyze(str(dlrm_rank_dir(tmp_path, 8)), jobs=1, thresholds={"comm.moderate": 2})
    assert report.story.straggler is None and report.story.imbalance is None
    for a in report.ranks:
        f = _finding(a)
        if a.rank % 2:
            assert f is None  # the late ranks wait for no one
            continue
        assert f is not None and f.title == WORK_TITLE
        assert f.stake_pct == pytest.approx(a.sinks.pct("imbalance"), abs=1e-9)
        extra = _evidence(f, "extra work per step of rank 1 (the most of any rank; no clear straggler)")
        assert extra.value == pytest.approx(30.827, abs=0.001)
        assert "(N − 1)/N of that extra work, N = 8" in _evidence(f, "step time balanced work").metric


def test_the_diff_no_longer_offers_balancing_for_wan21():
    import contextlib
    import io

    from trainscope.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(
            [
                "diff",
                str(WAN_BEFORE),
                str(DATA / "nsys" / "nsysai_h100x2_wan21_train_after.sqlite"),
                "--format",
                "json",
                "-q",
            ]
        )
    assert rc in (0, 3)
    doc = json.loads(buf.getvalue())
    assert "balance-ranks" not in [r["id"] for r in doc["recommendations"]]


def test_the_rule_is_declared():
    t = Rules()["ranks.work_explains_pct"]
    assert t.value == 50.0 and t.unit == "% of the wait" and t.source
    assert dataclasses.is_dataclass(t)


def test_a_wait_that_is_not_work_imbalance_is_not_headlined_as_imbalance(gloo_dir):
    """A verdict whose bottleneck is ``ranks/imbalance`` raised under the "not work imbalance" title
    reads LATE-RANK-BOUND in every view (text, Markdown, HTML, the app's badge, a diff side, the
    one-line form), never RANK-IMBALANCE-BOUND; the work-imbalance title keeps its headline. No
    bundled rank set has that verdict (its stake is capped by the small extra work, so other findings
    lead): the gloo document is given the verdict the not-work finding would write."""
    from trainscope.reports.diff_document import verdict_headline
    from trainscope.reports.document import headline
    from trainscope.reports.document import headline_word
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.oneline import report_line
    from trainscope.reports.text import render_text

    doc = analyze(str(gloo_dir), jobs=1).to_dict()
    v = doc["verdict"]
    assert v["bottleneck"] == "ranks/imbalance" and v["summary"].startswith(WORK_TITLE)
    assert headline(doc).startswith("RANK-IMBALANCE-BOUND")
    late = {**doc, "verdict": {**v, "summary": NOT_WORK_TITLE + " — 0.4 % of step time"}}
    assert headline(late) == "LATE-RANK-BOUND · D·A·M axis: Algorithm"
    for view in (render_text(late), render_markdown(late).replace("\\", ""), render_html(late)):
        assert "LATE-RANK-BOUND" in view and "RANK-IMBALANCE-BOUND" not in view
    assert verdict_headline("algorithm", "ranks/imbalance", late["verdict"]["summary"]).startswith("LATE-RANK-BOUND")
    verdict = dataclasses.make_dataclass("V", ["axis", "bottleneck", "confidence", "summary"])
    line = report_line("x", verdict("algorithm", "ranks/imbalance", 0.8, late["verdict"]["summary"]), 3, 5.0, 1, 2)
    assert "LATE-RANK-BOUND · D·A·M axis: Algorithm (0.80)" in line
    assert headline_word("ranks/imbalance", WORK_TITLE, "X") == "RANK-IMBALANCE-BOUND"
    assert headline_word("data/input-wait", NOT_WORK_TITLE, "X") == "DATA-BOUND"  # a variant is its finding's own
