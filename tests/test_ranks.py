"""Ranks as a map and a reduce (analyzers/ranks/alignment.py, trainscope/api/executor.py).

The alignment is checked on a real two-rank DLRM job (HTA's sampled trace_filter traces: ranks 0
and 1 of 128 on one clock; rank 1 has the heavier embedding shards) against a hand re-derivation
from the raw JSON: NCCL kernels paired by their end instants, arrival = start. The parallel map is
checked to give the serial result, in processes and on a two-worker Dask LocalCluster."""

from __future__ import annotations

import gzip
import json
import pickle

import numpy as np
import pytest

from tests.conftest import GLOO_DELAY_MS
from tests.conftest import KINETO
from tests.conftest import dlrm_rank_dir
from tests.conftest import dlrm_step_kernels
from trainscope.analyzers.ranks.alignment import align_ranks
from trainscope.analyzers.ranks.alignment import ranks_view
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.api.executor import MapOptions
from trainscope.api.executor import map_ranks
from trainscope.api.executor import run_rank_set
from trainscope.api.inputs import rank_files
from trainscope.cli import main
from trainscope.collectors import open_traces

DLRM = KINETO / "hta_dlrm_ws128_2ranks"


@pytest.fixture(scope="module")
def dlrm():
    ts = open_traces(str(DLRM))
    return [summarize(t, analyze_trace(t)) for t in ts.traces]


def _raw_nccl(rank: int) -> list[tuple[float, float]]:
    with gzip.open(DLRM / f"rank{rank}.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    return [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")]


def test_dlrm_rank1_arrives_last_and_rank0_waits(dlrm):
    al = align_ranks(dlrm)
    r0, r1 = al.ranks
    # by hand: pair the two ranks' NCCL kernels whose ends agree within 0.5 ms (one clock)
    k0, k1 = _raw_nccl(0), _raw_nccl(1)
    pairs = [(a, b) for a in k0 for b in k1 if abs(a[1] - b[1]) <= 500]
    assert len(pairs) == al.instances == r0.matched == r1.matched >= 4
    late = [b[0] - a[0] for a, b in pairs]  # µs: rank 1's arrival after rank 0's
    assert all(x > 0 for x in late)  # rank 1 arrives last at every matched collective
    assert r1.last_in == len(pairs) and r0.last_in == 0
    assert r1.mean_late_ms == pytest.approx(np.mean(late) / 1e3, abs=0.01)
    steps = 2  # ProfilerStep#551 and #552
    # rank 0's time inside those collectives before rank 1 arrives is waiting, not transfer
    assert r0.wait_ms_per_step == pytest.approx(sum(late) / 1e3 / steps, abs=0.01)
    assert r1.wait_ms_per_step == 0.0
    transfer = np.sum([min(a[1], b[1]) - b[0] for a, b in pairs]) / 1e3 / steps  # after the last arrival
    assert r0.transfer_ms_per_step == pytest.approx(transfer, rel=0.02)
    assert abs(r1.clock_offset_us) < 500  # one clock: the offset estimate says so
    assert "one clock" in al.offsets_note
    imb = al.imbalance
    assert imb is not None and imb.rank == 1 and imb.others_wait_ms_per_step == r0.wait_ms_per_step
    # its extra work: FBGEMM embedding lookups and sparse-feature permutes (the corpus's "GEMMs 218 vs
    # 156 ms" counted fbgemm kernels as GEMMs); by hand from the raw events inside the two steps
    emb = []
    for rank in (0, 1):
        kernels, _ = dlrm_step_kernels(rank)
        emb.append(
            sum(
                e["dur"]
                for e in kernels
                if (
                    "embedding" in e["name"]
                    or "fbgemm_gpu::" in e["name"]
                    or "bounds_check_indices" in e["name"]
                    or "permute_pooled_embs" in e["name"]
                    or "linearize_index" in e["name"]
                )
                and not any(q in e["name"] for q in ("quantize", "FP8", "hfp8", "qparam"))
            )
            / 1e3
        )
    assert emb[1] > 1.4 * emb[0]  # 147.5 against 92.5 ms
    assert imb.extra_work[0][0] == "embedding" and imb.extra_work[0][1] == pytest.approx(
        (emb[1] - emb[0]) / steps, abs=0.5
    )
    assert all(c != "gemm" or ms < 2 for c, ms in imb.extra_work)


def test_dlrm_cli_names_rank1_and_shows_the_many_rank_view(capsys):
    assert main(["analyze", str(DLRM), "--format", "json", "-q", "--jobs", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    al = doc["stragglers"]["alignment"]
    assert al["rank_imbalance"]["rank"] == 1
    view = doc["stragglers"]["ranks_view"]
    assert [r["rank"] for r in view["by_lateness"]] == [1, 0]
    assert view["steps"] == ["ProfilerStep#551", "ProfilerStep#552"]
    assert view["heat_ms"][1] == [607.312, 622.928]  # rank 0's ProfilerStep durations in the raw JSON (µs / 1e3)
    assert main(["analyze", str(DLRM), "--no-tui", "-q", "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "straggler: rank 1 is last at 5 of 5" in text and "Step time across ranks" in text
    assert main(["analyze", str(DLRM), "--format", "markdown", "-q", "--jobs", "1"]) == 0
    md = capsys.readouterr().out
    assert "**Straggler: rank 1 is last at 5 of 5" in md
    assert (
        "Rank 1's extra work per step against the others' median: 30.8 ms of GPU kernel time outside "
        "collectives \\(embedding \\+27.5 ms" in md
    )


def test_summary_is_small_and_picklable(dlrm):
    for s in dlrm:
        blob = pickle.dumps(s)
        assert len(blob) < 200_000  # 256 ranks: < 51 MB in the parent (the analysis now carries the roofline and sinks)
        back = pickle.loads(blob)
        assert back.rank == s.rank and np.array_equal(back.collectives.end, s.collectives.end)


def test_clock_offset_is_recovered(dlrm):
    """Rank 1 on a clock 2.5 s ahead: the offset is estimated from the matched ends and the answer stands."""
    import dataclasses

    c = dlrm[1].collectives
    shifted = dataclasses.replace(
        dlrm[1], collectives=dataclasses.replace(c, start=c.start + 2_500_000_000, end=c.end + 2_500_000_000)
    )
    al = align_ranks([dlrm[0], shifted])
    assert al.ranks[1].clock_offset_us == pytest.approx(2.5e6, abs=500)
    assert al.imbalance.rank == 1 and "+2500" in al.offsets_note


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory):
    """24 rank files made from the two real DLRM ranks (even ranks from rank 0, odd from rank 1): enough
    for the pool and Dask to split the map unevenly and for a glob to pick a subset; the speed at 64+
    ranks is measured in benchmarks/bench_scale.py, not here."""
    return dlrm_rank_dir(tmp_path_factory.mktemp("ranks24"), 24)


def _doc(capsys, *args) -> dict:
    assert main(["analyze", *args, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def test_24_ranks_serial_processes_and_dask_agree(many_ranks, capsys):
    serial = _doc(capsys, str(many_ranks), "--jobs", "1")
    assert [r["rank"] for r in serial["ranks"]] == list(range(24))
    # 12 identical copies of rank 1 arrive last together: no single straggler, the tie is not counted
    assert serial["stragglers"]["alignment"]["rank_imbalance"] is None and serial["stragglers"]["stragglers"] == []
    pool = _doc(capsys, str(many_ranks), "--jobs", "2")
    assert pool == serial
    glob_doc = _doc(capsys, str(many_ranks / "trace_00*.json"), "--jobs", "1")  # ranks 0–9
    assert [r["rank"] for r in glob_doc["ranks"]] == list(range(10))
    distributed = pytest.importorskip("distributed", reason="the dask extra runs the map on a cluster")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        on_dask = _doc(capsys, str(many_ranks), "--dask", cluster.scheduler_address)
    assert on_dask == serial


def test_progress_counts_ranks_and_bad_files_are_skipped(many_ranks, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for f in rank_files(str(many_ranks))[:3]:
        (d / f.rsplit("/", 1)[1]).write_bytes(open(f, "rb").read())
    (d / "broken.json").write_text("{not json")
    seen = []
    rs = run_rank_set(str(d), MapOptions(), jobs=1, progress=lambda done, n: seen.append((done, n)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [s.rank for s in rs.summaries] == [0, 1, 2] and len(rs.warnings) == 1 and "broken.json" in rs.warnings[0]
    assert isinstance(map_ranks([str(d / "broken.json")], jobs=1)[0], str)


def test_unreachable_dask_scheduler_is_one_line(many_ranks, capsys):
    pytest.importorskip("distributed")
    assert main(["analyze", str(many_ranks), "--format", "json", "-q", "--dask", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Dask scheduler" in err


def test_view_without_alignment(dlrm):
    v = ranks_view(dlrm, None)
    assert v["step_ms_distribution"]["max"] == pytest.approx(630.639)


def test_gloo_sleeping_rank_arrives_last(gloo_dir):
    """The recorded gloo job (rank 1 sleeps GLOO_DELAY_MS at every step start): blocking host
    ranges, their ends scattered by OS scheduling on a busy host, still matched."""
    ts = open_traces(str(gloo_dir))
    sums = [summarize(t, analyze_trace(t)) for t in ts.traces]
    al = align_ranks(sums)
    assert al.source == "host ranges" and al.imbalance.rank == 1
    # (How many of the 7 collectives match depends on the host's load: ends scatter by OS scheduling.)
    assert al.instances >= 3
    late = al.ranks[1].mean_late_ms
    assert late > 0.5 * GLOO_DELAY_MS and al.ranks[0].mean_late_ms < 0.2 * late
    assert al.ranks[0].wait_ms_per_step > 3 * al.ranks[1].wait_ms_per_step


def test_app_ranks_tab_shows_the_alignment_and_the_heat_strip():
    import asyncio

    pytest.importorskip("textual")
    from tests.test_tui import until
    from trainscope.tui.app import AnalyzeApp

    async def go():
        app = AnalyzeApp(str(DLRM))
        async with app.run_test(size=(120, 60)) as pilot:
            await until(pilot, lambda: app.session is not None and app.query_one("#tabs").display, 15)
            await pilot.pause()
            await pilot.press("7")
            await pilot.pause(0.2)
            text = str(app.query_one("#stragglers").render())
            assert "straggler: rank 1 is last at" in text and "the report leads with rank 1" in text
            assert "Step time across ranks" in text

    asyncio.run(go())


def test_the_aligned_story_is_the_only_answer(capsys):
    """The step-offset comparison (rank 0 'last in 6 of 10' on this pair) is no longer a second answer
    beside the aligned one: the document holds one straggler list and one table of lateness."""
    from trainscope.reports.deep import straggler_headline
    from trainscope.reports.deep import stragglers_markdown_lines
    from trainscope.reports.deep import stragglers_text_lines

    assert main(["analyze", str(DLRM), "--format", "json", "-q", "--jobs", "1"]) == 0
    s = json.loads(capsys.readouterr().out)["stragglers"]
    assert s["stragglers"] == [1] and s["alignment"]["test"]["clear"] and "step_offset_stragglers" not in s
    assert [(r["rank"], r["late_in"], r["considered"]) for r in s["ranks"]] == [(0, 0, 5), (1, 5, 5)]
    text = stragglers_text_lines(s, str)
    assert text[1].startswith("  straggler: rank 1")
    assert [line.split()[0] for line in text if "◀" in line] == ["1"]  # the straggler's row only
    assert not any("Step-offset" in line for line in text)
    assert straggler_headline(s)[1] is None
    md = stragglers_markdown_lines(s, lambda x, n=0: x)
    assert md[2].startswith("**Straggler: rank 1") and not any("Step-offset" in line for line in md)
