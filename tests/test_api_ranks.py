"""Rank directories through :func:`trainscope.api.analyze`: the executor's map, the reduce, lazy traces.

The reference is the rank pipeline as ``commands/analyze_ranks.py`` ran it before it moved into the
api (map every file with the executor, stragglers by step offset from the summaries, alignment on
collective ends, the many-rank view, the document), rebuilt here from the analyzers' public
functions: the api's document must be that one, key for key, on the recorded two-rank gloo job and
on an eight-rank directory made from the real two-rank DLRM job. Lazily read traces are checked
against the traces read in one piece by the collectors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import trainscope.api as ts
from tests.conftest import DATA
from tests.conftest import KINETO
from tests.conftest import dlrm_rank_dir
from trainscope.analyzers.ranks.alignment import ranks_view
from trainscope.analyzers.ranks.alignment import with_aligned_imbalance
from trainscope.analyzers.ranks.story import rank_story
from trainscope.analyzers.rules import Rules
from trainscope.api.executor import MapOptions
from trainscope.api.executor import run_rank_set
from trainscope.cli import main
from trainscope.collectors import open_traces
from trainscope.reports.deep import stragglers_dict
from trainscope.reports.document import build_document

GLOO = DATA / "gloo"
DLRM = KINETO / "hta_dlrm_ws128_2ranks"


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory):
    """Eight rank files from the two real DLRM ranks (even ranks copy rank 0, odd ranks rank 1)."""
    return dlrm_rank_dir(tmp_path_factory.mktemp("ranks8"), 8)


def _reference(path: str, rules: Rules, **options) -> dict:
    """The rank pipeline as the command ran it before the api took it over, plus each rank re-judged
    with the wait the alignment measured (``with_aligned_imbalance``)."""
    rs = run_rank_set(
        path,
        MapOptions(tuple((t.name, t.value) for t in rules.all() if t.source.startswith("user override")), **options),
        jobs=1,
    )
    analyses = [s.analysis for s in rs.summaries]
    story = rank_story(rs.summaries, rules)
    alignment = story.alignment
    if alignment is not None and alignment.instances:
        analyses = with_aligned_imbalance(rs.summaries, alignment, rules)
    stragglers = stragglers_dict(story, analyses, rules)
    stragglers["ranks_view"] = ranks_view(rs.summaries, alignment)
    from trainscope.reports.output import to_json

    return json.loads(to_json(build_document(path, analyses, rules, rs.warnings, stragglers=stragglers)))


def _cli(capsys, *args) -> dict:
    assert main(["analyze", *args, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("which", ["gloo", "eight"])
def test_api_document_is_the_rank_pipelines(which, eight_ranks, capsys):
    path = str(GLOO if which == "gloo" else eight_ranks)
    report = ts.analyze(path, jobs=1)
    doc = json.loads(report.to_json())
    assert doc == _reference(path, Rules())
    assert _cli(capsys, path, "--jobs", "1") == doc  # the command prints the api's document
    assert report.summaries is not None and report.traces.traces == []  # no whole trace in the parent
    n = 2 if which == "gloo" else 8
    assert [r["rank"] for r in doc["ranks"]] == list(range(n))
    # the main rank is the slowest by median step, as the document's ranks say
    p50 = [a.breakdown.step_ms.p50 for a in report.ranks]
    assert report.main_index == int(np.argmax(p50))
    if which == "gloo":  # the recorded job's rank 1 sleeps at every step start
        assert doc["stragglers"]["alignment"]["rank_imbalance"]["rank"] == 1
    else:  # four identical copies of DLRM rank 1 arrive last together: no single straggler
        assert doc["stragglers"]["alignment"]["rank_imbalance"] is None and doc["stragglers"]["stragglers"] == []


def test_thresholds_and_processes_reach_the_workers(eight_ranks):
    rules = ts.rules_from({"data_wait.high": 25, "step.outlier_ratio": 1.2})
    doc = json.loads(ts.analyze(str(eight_ranks), rules=rules, jobs=2).to_json())
    assert doc == _reference(str(eight_ranks), rules)
    assert {
        t["name"]: t["value"] for t in doc["thresholds"] if t["name"] in ("data_wait.high", "step.outlier_ratio")
    } == {"data_wait.high": 25.0, "step.outlier_ratio": 1.2}


def test_a_rank_trace_is_read_only_when_asked():
    report = ts.analyze(str(DLRM), jobs=1)
    assert report._memo.loaded == {}
    t1 = report.trace(1)
    assert set(report._memo.loaded) == {1} and report.trace(1) is t1  # read once
    whole = open_traces(str(DLRM)).traces[1]
    assert t1.rank == 1 and np.array_equal(t1.kernels.ts, whole.kernels.ts) and len(t1.kernels.ts) > 100
    # the view models of a lazily read rank equal those of the rank read in one piece
    lazy = report.rank_view(1)
    assert report.rank_view(1) is lazy
    eager = ts.analyze(open_traces(str(DLRM)), source=str(DLRM)).rank_view(1)
    top = [(k.name, k.count, k.total_ns) for k in lazy.all_kernels.top]
    assert len(top) > 10 and top == [(k.name, k.count, k.total_ns) for k in eager.all_kernels.top]
    assert lazy.timeline.span == eager.timeline.span
    assert np.array_equal(lazy.timeline.step_starts, report.ranks[1].segmentation.starts)
    assert lazy.label == "rank 1" and lazy.doc["input"]["path"].endswith("rank1.json.gz")


def test_html_of_a_rank_directory_reads_the_slowest_rank_and_perfetto_every_rank(tmp_path, capsys):
    out, html = tmp_path / "p.json", tmp_path / "r.html"
    assert (
        main(
            [
                "analyze",
                str(GLOO),
                "--format",
                "json",
                "-q",
                "--jobs",
                "1",
                "--perfetto",
                str(out),
                "--report",
                str(html),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert html.read_text().lstrip().lower().startswith("<!doctype html")  # the suffix picks HTML
    report = ts.analyze(str(GLOO), jobs=1)
    assert report.main.rank == 1
    # The Perfetto file holds every rank (issue 37: it held the slowest alone), the same bytes as the
    # api's export of the report (tests/test_perfetto_ranks.py checks each rank's events).
    ref = tmp_path / "ref.json"
    ts.export_perfetto(report, ref)
    assert out.read_bytes() == ref.read_bytes()
    doc = json.loads(out.read_text())
    assert [r["rank"] for r in doc["trainscope"]["ranks"]] == [0, 1]
    assert [r["slowest"] for r in doc["trainscope"]["ranks"]] == [False, True]


def test_errors_are_the_apis(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ts.BadInput) as e:
        ts.analyze(str(empty), jobs=1)
    message, code = ts.describe(e.value)
    assert code == 2 and message == f"{empty}: directory holds no trace files (*.json, *.json.gz, *.sqlite)"
    assert main(["analyze", str(empty), "--format", "json", "-q"]) == 2
    assert capsys.readouterr().err == f"trainscope: {message}\n"
    with pytest.raises(ts.BadInput, match="--step-range"):
        ts.analyze(str(GLOO), jobs=1, step_range="no_such_range")
    with pytest.raises(ts.BadInput, match="jobs"):
        ts.analyze(str(GLOO), jobs=0)


def test_app_session_on_a_rank_directory_maps_and_reads_lazily():
    from trainscope.tui.state import build_session

    s = build_session(str(GLOO), None, Rules(), jobs=1)
    assert s.report.summaries is not None and len(s.ranks) == 2
    assert set(s.report._memo.loaded) == {s.main_rank}  # the first screen's timeline: the main rank only
    other = 1 - s.main_rank
    assert s.ranks[other].timeline is s.ranks[other].timeline  # built once
    assert set(s.report._memo.loaded) == {0, 1}
    assert s.document() == json.loads(ts.analyze(str(GLOO), jobs=1).to_json())


def test_the_app_on_a_rank_directory_gets_the_commands_flags(monkeypatch, tmp_path, capsys):
    """`trainscope analyze DIR --jobs 1` at a terminal: the app's session comes from the same api
    call as the printed report (the map's flags reach it) and its document is that report."""
    import trainscope.api.executor as executor
    from trainscope.tui import app as app_mod

    jobs_seen = []
    real_map = executor.map_ranks

    def spy(files, options, jobs=None, dask=None, progress=None, fn=executor.summarize_rank):
        jobs_seen.append((jobs, dask, options.peak_bandwidth))
        return real_map(files, options, jobs, dask, progress, fn)

    def run_without_terminal(self):  # the app's loading step, without drawing
        self.session = self.loader(lambda stage, fraction: None)
        return 0

    monkeypatch.setattr(executor, "map_ranks", spy)
    monkeypatch.setattr("trainscope.commands.analyze.use_tui", lambda args: True)
    monkeypatch.setattr(app_mod.AnalyzeApp, "run", run_without_terminal)
    out = tmp_path / "app.json"
    assert main(["analyze", str(GLOO), "--jobs", "1", "--peak-bandwidth", "900", "--json", str(out)]) == 0
    assert jobs_seen == [(1, None, 900.0)]
    monkeypatch.setattr("trainscope.commands.analyze.use_tui", lambda args: False)
    assert json.loads(out.read_text()) == _cli(capsys, str(GLOO), "--jobs", "1", "--peak-bandwidth", "900")


def test_a_rank_directory_judges_imbalance_by_the_measured_wait():
    """DLRM, 2 ranks: through the api, rank 0's imbalance sink is the wait the alignment measured
    inside its matched collectives (not the compute-difference estimate); rank 1, the straggler,
    waits for no one."""
    report = ts.analyze(str(DLRM), jobs=1)
    al = report.stragglers["alignment"]
    assert al["straggler"] == 1
    waits = {r["rank"]: r["wait_ms_per_step"] for r in al["ranks"]}
    r0, r1 = sorted(report.ranks, key=lambda a: a.rank)
    steps = len(r0.breakdown.steps)
    assert r0.sinks.by_key["imbalance"].ns / steps / 1e6 == pytest.approx(waits[0], rel=0.02)
    assert r1.sinks.by_key["imbalance"].ns == 0
    assert sum(s.pct for s in r0.sinks.by_key.values()) == pytest.approx(100.0, abs=1e-6)
