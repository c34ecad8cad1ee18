"""One rank pipeline (issue 25 item 3): a rank directory gives the same sinks whether it is analyzed
from its path (the rank map and the reduce), from an already-read TraceSet, or as one side of a diff —
rank imbalance is decided once, in the reduce."""

from __future__ import annotations

import pytest

from tests.conftest import KINETO

DLRM = str(KINETO / "hta_dlrm_ws128_2ranks")


def _sinks(analyses) -> list[dict[str, int]]:
    return [{k: s.ns for k, s in a.sinks.by_key.items()} for a in analyses]


@pytest.fixture(scope="module")
def three_ways():
    from trainscope import api
    from trainscope.collectors import open_traces

    by_path = api.analyze(DLRM, jobs=1)
    by_traces = api.analyze(open_traces(DLRM))
    side = api.diff(DLRM, DLRM, jobs=1).diff.before
    return by_path, by_traces, side


def test_analyze_and_diff_report_the_same_sinks_on_a_rank_directory(three_ways):
    by_path, by_traces, side = three_ways
    want = _sinks(by_path.ranks)
    assert _sinks(by_traces.ranks) == want
    assert _sinks([r.analysis for r in side.per_rank]) == want
    # The figure that used to differ: rank 0's wait for rank 1 inside collectives, measured by the
    # alignment (2.59 % of its step) — the diff side used to carry a compute-time estimate (5.01 %).
    rank0 = by_path.ranks[0].sinks
    assert rank0.pct("imbalance") == pytest.approx(2.59, abs=0.01)
    assert side.per_rank[0].analysis.sinks.pct("imbalance") == pytest.approx(rank0.pct("imbalance"))


def test_a_diff_side_keeps_analyze_verdicts_and_compared_rank(three_ways):
    by_path, _, side = three_ways
    assert [(a.verdict.axis, a.verdict.bottleneck, a.verdict.confidence) for a in by_path.ranks] == [
        (r.analysis.verdict.axis, r.analysis.verdict.bottleneck, r.analysis.verdict.confidence) for r in side.per_rank
    ]
    assert side.index == by_path.main_index


def test_diff_takes_the_analysis_options(three_ways, tmp_path):
    from trainscope import api

    with pytest.raises(api.BadInput, match="step-range"):
        api.diff(DLRM, DLRM, step_range="no_such_range", jobs=1)


def test_without_alignment_the_estimate_is_the_fallback():
    """Ranks whose collectives cannot be matched get the compute-time estimate in the reduce: two
    copies of one rank with the other's rank number have identical collectives in time, so the
    alignment matches; the estimate path is exercised by ``with_rank_imbalance`` directly."""
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import analyze_set
    from trainscope.analyzers.trace.analysis import with_rank_imbalance
    from trainscope.collectors import open_traces

    analyses = analyze_set(open_traces(DLRM))
    assert all(a.sinks.pct("imbalance") == 0 for a in analyses)  # each rank judged on its own
    est = with_rank_imbalance(analyses, Rules())
    assert sum(a.sinks.pct("imbalance") > 0 for a in est) == 1  # the less busy rank waits for the busier


def test_max_decompressed_reaches_rank_workers_started_by_spawn(tmp_path):
    """``--max-decompressed`` is a setting of the parent process; MapOptions carries it to workers
    that do not inherit it (spawn, forkserver, Dask): a cap below a rank file's size refuses that
    rank in the worker as in the parent."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from trainscope.api.executor import MapOptions
    from trainscope.api.executor import summarize_rank
    from trainscope.api.inputs import rank_files

    files = rank_files(DLRM)
    opts = MapOptions(max_decompressed=1 << 20)  # 1 MiB: each rank decompresses to more
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = pool.submit(summarize_rank, files[0], opts).result()
        free = pool.submit(summarize_rank, files[0], MapOptions()).result()
    assert isinstance(got, str) and "cap on decompressed input" in got
    assert not isinstance(free, str)
