"""Issue 36 items 4 and 5 on real traces (tests/data/labeled/steady, labels.json there): allocator
churn named and cured as such; every real window answered."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from tests.conftest import DATA
from tests.conftest import edited_sqlite
from trainscope.analyzers.findings.labels import score
from trainscope.analyzers.findings.labels import verdict_class

STEADY = DATA / "labeled" / "steady"
LABELS = json.loads((STEADY / "labels.json").read_text())["traces"]
CHURN = "tl_mi300x_ddp_resnet18_no_pool_hipfree_churn.json.gz"


def _report(name: str):
    from trainscope.api import analyze

    return analyze(str(STEADY / name), jobs=1)


def test_rocm_hipfree_churn_is_allocator_churn_cured_by_the_caching_allocator():
    """1,360 hipFree calls (3,346 ms, raw events) with the caching allocator off. Before: HOST-BOUND
    (launch) 0.95, fix #1 torch.compile 'up to 9.41×', evidence 4.4 ms of launch calls."""
    raw = json.load(gzip.open(STEADY / CHURN))
    frees = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("name") == "hipFree"]
    assert len(frees) == 1360 and sum(e["dur"] for e in frees) / 1e3 == pytest.approx(3346.2, abs=0.1)
    r = _report(CHURN)
    (a,) = r.ranks
    v = a.verdict
    assert score(verdict_class(v.axis, v.bottleneck), LABELS[CHURN]).right
    assert v.bottleneck == "host/allocator-churn" and v.confidence >= 0.9
    idle = a.host_idle
    # the frees cover ≈ 99 % of the GPU idle in the steps (GPU busy 10.6 %)
    assert idle.ns["alloc"] / idle.idle_ns > 0.98
    assert a.breakdown.gpu_busy_pct == pytest.approx(10.6, abs=0.1)
    assert a.sinks.pct("allocator") > 85 and a.sinks.pct("launch") < 2
    f = a.findings[0]
    assert f.id == "host/allocator-churn" and f.severity == "high"
    hip = next(e for e in f.evidence if e.metric.startswith("hipFree ×1360"))
    assert hip.value > 2900  # ms of GPU idle under the frees inside the steps
    rec = a.recommendations[0]
    assert rec.id == "allocator-reuse" and "caching allocator back on" in rec.title
    assert "PYTORCH_HIP_ALLOC_CONF" in rec.change and "PYTORCH_NO_CUDA_MEMORY_CACHING" in rec.change
    assert not any(x.id == "reduce-launch-overhead" for x in a.recommendations)


JACC = "jacc_a100_julia_no_cuda_rows_jit.sqlite"
TRAIN = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"


def _derived(tmp_path, name: str, *sql: str):
    """A copy of the bundled cs336 train-step export changed by ``sql``."""
    return edited_sqlite(TRAIN, tmp_path / name, *sql)


def test_no_cuda_rows_although_cuda_tracing_was_on_says_why():
    """No CUPTI table, META_DATA_CAPTURE lists CAPTURE_EVENT_TYPE Cuda, 2,003 CPU samples over 2 s.
    Before: exit 2, 'profile with `nsys profile --trace=cuda,nvtx ...`'."""
    con = sqlite3.connect(f"file:{STEADY / JACC}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    events = {r[0] for r in con.execute("SELECT value FROM META_DATA_CAPTURE WHERE name='CAPTURE_EVENT_TYPE'")}
    con.close()
    assert not any(t.startswith("CUPTI_ACTIVITY_KIND") for t in tables) and "Cuda" in events
    (a,) = _report(JACC).ranks
    v = a.verdict
    assert score(verdict_class(v.axis, v.bottleneck), LABELS[JACC]).right
    assert verdict_class(v.axis, v.bottleneck) == "insufficient-gpu-evidence"
    assert "CUDA tracing was on but nothing was captured" in v.summary
    assert "the profiled process is not the one that used the GPU" in v.summary
    assert "outside the capture range" in v.summary and "(julia)" in v.summary
    assert "54 % in libLLVM" in v.summary and "JIT compilation" in v.summary
    assert "--trace=cuda,nvtx,osrt" in v.summary
    lines = {e.metric: e.value for e in v.evidence}
    assert lines["CPU samples in libLLVM.so.18.1jl"] == pytest.approx(54.1, abs=0.1)
    assert any("No CUDA events collected" in m for m in lines)
    assert a.breakdown.total_ns / 1e6 == pytest.approx(2038.8, abs=0.1)  # the samples' span, not 0 ms
    (rec,) = a.recommendations  # recording advice, never a projection
    assert rec.id == "record-gpu-work" and rec.projected_speedup is None and "nsys profile" in rec.change


def test_an_nvtx_only_export_gets_a_host_time_breakdown_by_range(tmp_path):
    """The cs336 train step recorded with NVTX only (--trace=nvtx): its 17,336 ranges are the host
    time. Before: exit 2 ('holds no CUDA kernels')."""
    path = _derived(
        tmp_path,
        "nvtx_only.sqlite",
        *(f"DROP TABLE CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "RUNTIME", "MEMCPY", "MEMSET")),
        "DROP TABLE OSRT_API",
        "DELETE FROM META_DATA_CAPTURE WHERE name = 'CAPTURE_EVENT_TYPE' AND value <> 'NvtxEvents'",
        "UPDATE META_DATA_CAPTURE SET value = 'false' WHERE name = 'PROCESS_0:COLLECT_CUDA_TRACE'",
        "DELETE FROM DIAGNOSTIC_EVENT WHERE text LIKE '%CUDA%'",
    )
    con = sqlite3.connect(TRAIN)
    dur = dict(
        con.execute(
            "SELECT coalesce(n.text, s.value), n.end - n.start FROM NVTX_EVENTS n LEFT JOIN StringIds s "
            "ON s.id = n.textId WHERE coalesce(n.text, s.value) IN ('backward pass', 'profile')"
        ).fetchall()
    )
    con.close()
    from trainscope.api import analyze

    (a,) = analyze(str(path), jobs=1).ranks
    v = a.verdict
    assert verdict_class(v.axis, v.bottleneck) == "insufficient-gpu-evidence"
    assert "CUDA tracing was off for this capture (traced: NvtxEvents)" in v.summary
    assert "17,334 host ranges" in v.summary and "`nsys profile --trace=cuda,nvtx,osrt`" in v.summary
    line = next(e for e in v.evidence if e.metric == "host range 'backward pass' ×1")
    window = next(e for e in v.evidence if e.metric == "host range 'profile' ×1")
    assert window.value == 100.0  # the umbrella range spans the recorded host activity
    assert line.value == pytest.approx(100 * dur["backward pass"] / dur["profile"], abs=0.01)


def test_cuda_on_with_nothing_captured_breaks_down_the_os_runtime_calls(tmp_path):
    """Every CUDA and NVTX row deleted, CUDA tracing on in the metadata: the 26 OS runtime calls."""
    path = _derived(
        tmp_path,
        "cuda_on_empty.sqlite",
        *(f"DELETE FROM CUPTI_ACTIVITY_KIND_{t}" for t in ("KERNEL", "RUNTIME", "MEMCPY", "MEMSET")),
        "DELETE FROM NVTX_EVENTS",
    )
    from trainscope.api import analyze

    (a,) = analyze(str(path), jobs=1).ranks
    v = a.verdict
    assert "CUDA tracing was on but nothing was captured" in v.summary and "26 OS runtime calls" in v.summary
    poll = next(e for e in v.evidence if e.metric.startswith("OS runtime call poll ×21"))
    assert 85 < poll.value <= 100
    assert any("profiling session using NVTX trigger" in e.metric for e in v.evidence)


def test_an_export_of_copies_without_a_kernel_table_is_analyzed_on_its_copies(tmp_path):
    """Before: exit 2 ('holds no CUDA kernels (no CUPTI_ACTIVITY_KIND_KERNEL table)')."""
    saxpy = DATA / "nsys" / "pipit_saxpy_a100_nsys2022.sqlite"
    path = edited_sqlite(saxpy, tmp_path / "copies.sqlite", "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    from trainscope.collectors import open_traces

    (t,) = open_traces(str(path)).traces
    assert len(t.kernels) == 0 and len(t.copies) == 15 and t.has_gpu_activity


def test_an_export_without_gpu_rows_is_headlined_insufficient_gpu_evidence():
    from trainscope.api import analyze
    from trainscope.reports.document import headline

    doc = analyze(str(STEADY / "jacc_a100_julia_no_cuda_rows_jit.sqlite"), jobs=1).to_dict()
    assert headline(doc) == "INSUFFICIENT GPU EVIDENCE"
