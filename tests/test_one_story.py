"""One story (issue 23 item 3): the header, the breakdown, the sinks and the verdict come from one
computation, and evidence that needs no GPU carries a CPU-only trace's verdict."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.conftest import analysis
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_set
from trainscope.analyzers.trace.analysis import slowest
from trainscope.analyzers.trace.sinks import SINK_ROW
from trainscope.collectors import open_traces
from trainscope.reports.document import analysis_dict


@pytest.mark.parametrize(
    "name",
    [
        "tl_h100_timesformer_k400_infer.json.gz",
        "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz",
        "param_linear_2080ti.json.gz",
        "resnet50_v100_num_workers_0.pt.trace.json.gz",
    ],
)
def test_the_verdicts_sink_is_a_breakdown_row_with_the_same_figure(name):
    a = analysis(name)
    b = a.breakdown
    for sink, row in SINK_ROW.items():  # every idle sink is its row, to the nanosecond
        assert b.ns[row] == pytest.approx(a.sinks.by_key[sink].ns, abs=len(b.steps) + 1)
    assert sum(b.ns.values()) == b.total_ns  # the rows still partition the step time
    assert all(sum(s.ns.values()) == s.duration_ns for s in b.steps)
    lead = a.sinks.leader
    if lead is not None and lead.key in SINK_ROW:
        assert b.share_pct(SINK_ROW[lead.key]) == pytest.approx(lead.pct, abs=0.01)


def test_timesformer_header_breakdown_and_verdict_agree():
    """Before: header `data wait 0.0 %`, breakdown `GPU idle: other 57.8 %`, verdict DATA-BOUND 56.9 %."""
    a = analysis("tl_h100_timesformer_k400_infer.json.gz")
    doc = analysis_dict(a, Rules())
    assert a.verdict.bottleneck == "data/input-wait"
    stake = next(f.stake_pct for f in a.findings if f.id == "data/input-wait")
    row = doc["breakdown"]["categories"]["idle_data_wait"]["pct"]
    assert 50 < stake < 60
    assert row == pytest.approx(stake, abs=0.01)
    assert doc["breakdown"]["data_wait_pct"] == pytest.approx(stake, abs=0.01)
    assert doc["breakdown"]["categories"]["idle_other"]["pct"] < 2


def test_an_input_finding_only_with_an_input_row_to_match():
    """pipit saxpy: its data/input-wait finding (14.9 %) had a header of `data wait 0.0 %`."""
    (a,) = analyze_set(open_traces(str(DATA / "nsys" / "pipit_saxpy_a100_nsys2022.sqlite")))
    f = next((f for f in a.findings if f.id == "data/input-wait"), None)
    row = a.breakdown.share_pct("idle_data_wait")
    if f is None:
        assert row < 1
    else:
        assert row == pytest.approx(f.stake_pct, abs=0.01) and a.breakdown.data_wait_pct >= row - 0.01


def test_gloo_cpu_ranks_get_an_imbalance_verdict(gloo_dir):
    """Two CPU ranks (gloo): rank 1 arrives ≈ 32 ms late at every all-reduce and rank 0 waits for it.
    Before: INSUFFICIENT EVIDENCE ('trainscope diagnoses only input waits')."""
    from trainscope.api import analyze

    report = analyze(str(gloo_dir))
    verdicts = {a.rank: a.verdict for a in report.ranks}
    assert {v.bottleneck for v in verdicts.values()} == {"ranks/imbalance"}
    slow = slowest(report.ranks)
    assert slow.rank == 1 and slow.verdict.axis == "algorithm"
    f = next(f for f in slow.findings if f.id == "ranks/imbalance")
    others = next(e.value for e in f.evidence if e.metric.startswith("the other ranks' wait"))
    assert 50 < others < 80  # rank 0 waits ≈ 39 ms of a ≈ 58 ms step
    assert f.stake_pct == pytest.approx(others / 2, abs=0.05)  # balanced work sheds (N − 1)/N of the wait, N = 2
    fast = next(a for a in report.ranks if a.rank == 0)
    assert fast.sinks.pct("imbalance") == pytest.approx(others, abs=5)  # rank 0's own wait, measured on its host
