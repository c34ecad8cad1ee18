"""diff compares like with like: the same rank, GPU models not indexes, and fixed capture windows
by the work done per window. Figures cross-checked with raw SQL on the Nsight exports."""

from __future__ import annotations

import functools
import sqlite3

import pytest

from tests.conftest import DATA
from trainscope.analyzers.compare.diff import diff_runs
from trainscope.analyzers.compare.diff import gpu_model
from trainscope.analyzers.compare.diff import summarize_run

NSYS = DATA / "nsys"
BEFORE = NSYS / "nsysai_h100x2_wan21_train_before.sqlite"
AFTER = NSYS / "nsysai_h100x2_wan21_train_after.sqlite"


def _sql(path, q):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


@functools.cache
def _diff():
    from trainscope.analyzers.trace.analysis import analyze_set
    from trainscope.collectors import open_traces

    runs = [summarize_run(str(p), ts, analyze_set(ts)) for p in (BEFORE, AFTER) for ts in [open_traces(str(p))]]
    return diff_runs(*runs)


def test_gpu_model_not_index():
    assert gpu_model("GPU 1") is None and gpu_model("") is None and gpu_model(None) is None
    assert gpu_model("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    d = _diff()
    gpu = next(c for c in d.comparability if c.check == "gpu")
    assert gpu.status == "unknown"  # these exports carry no TARGET_INFO_GPU: the model is not recorded
    assert not any(c.status == "differ" for c in d.comparability) and d.comparable
    text = _text(d)
    assert "different GPU" not in text and "NOT COMPARABLE" not in text


def test_same_rank_on_both_sides():
    d = _diff()
    assert d.before.analysis.rank == d.after.analysis.rank
    assert d.after.chosen == "same rank as BEFORE"
    assert [p.rank for p in d.rank_pairs] == [0, 1]


# Kernel count and time by raw SQL, each kernel clipped where the next one on its stream starts: the
# invariant pass's stream-overlap repair (docs/repairs.md; one kernel of the BEFORE export overlaps
# the next by 0.012 ms).
_KERNEL_TIME = (
    "SELECT count(*), sum(min(end, coalesce(nxt, end)) - start) / 1e6 FROM (SELECT deviceId, start, end, "
    "LEAD(start) OVER (PARTITION BY deviceId, streamId ORDER BY start) AS nxt FROM CUPTI_ACTIVITY_KIND_KERNEL)"
)


def test_fixed_windows_compared_by_work_per_window():
    d = _diff()
    assert d.before.fixed_window and d.after.fixed_window and d.work.fixed_windows
    ((nb, msb),) = _sql(BEFORE, _KERNEL_TIME)
    ((na, msa),) = _sql(AFTER, _KERNEL_TIME)
    assert (nb, na) == (4010, 3587)
    assert d.work.before_kernels == nb and d.work.after_kernels == na
    assert d.work.before_kernel_ms == pytest.approx(msb, abs=0.01) and d.work.after_kernel_ms == pytest.approx(
        msa, abs=0.01
    )
    assert 530 < msb < 540 and 485 < msa < 495
    # per rank: rank r is the process on GPU r (the collector's rank assignment)
    for p in d.rank_pairs:
        dev = int(p.before.device_name.split()[-1])
        ((kb, tb),) = _sql(BEFORE, _KERNEL_TIME + f" WHERE deviceId = {dev}")
        ((ka, ta),) = _sql(AFTER, _KERNEL_TIME + f" WHERE deviceId = {dev}")
        assert (p.before.kernels, p.after.kernels) == (kb, ka)
        assert p.before.kernel_ms == pytest.approx(tb, abs=0.01) and p.after.kernel_ms == pytest.approx(ta, abs=0.01)
    # the windows are the same length: the step-time ratio hides the change, work per window shows it
    assert d.p50.speedup == pytest.approx(1.0, abs=0.01)
    assert d.work.kernel_time_ratio == pytest.approx(msb / msa, rel=1e-3) and d.work.kernel_time_ratio > 1.05
    text = _text(d)
    assert "Work per window" in text and f"{msb:.2f}" in text and "4010" in text and "3587" in text


def _text(d):
    from trainscope.reports.diff_document import build_diff_document
    from trainscope.reports.diff_text import render_diff_text

    return render_diff_text(build_diff_document(d))
