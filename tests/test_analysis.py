"""Verdicts, breakdowns and recommendations on real traces, against facts measured from raw events."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import CPU_ONLY
from tests.conftest import analysis
from tests.conftest import load
from tests.conftest import raw_document
from trainscope.analyzers.trace.breakdown import CATEGORIES
from trainscope.analyzers.trace.steps import segment_steps


def _raw_share(name, pattern_cat, step_pattern="ProfilerStep#"):
    """Independent reference from the raw JSON: union of intervals of `cat` events inside step windows."""
    ev = raw_document(name)["traceEvents"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("ph") == "X" and str(e.get("name", "")).startswith(step_pattern)
    )
    total = sum(b - a for a, b in steps)
    ivs = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and pattern_cat(e))
    covered = 0
    for a, b in steps:
        cur_s = cur_e = None
        for s, e in ivs:
            s, e = max(s, a), min(e, b)
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    covered += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            covered += cur_e - cur_s
    return 100.0 * covered / total


def test_resnet50_num_workers_0_is_data_bound():
    name = "resnet50_v100_num_workers_0.pt.trace.json.gz"
    a = analysis(name)
    assert a.verdict.axis == "data" and a.verdict.bottleneck == "data/input-wait"
    assert a.verdict.confidence >= 0.8
    b = a.breakdown
    assert len(b.steps) == 6 and [s.label for s in b.steps][0] == "ProfilerStep#5"
    # The facts in shared/traces/README.md: data wait ≈ 40 %, GPU busy ≈ 56 % of step time (±3).
    assert b.data_wait_pct == pytest.approx(40, abs=3)
    assert b.gpu_busy_pct == pytest.approx(56, abs=3)

    # ... and from the raw events, independently of the analyzer's code:
    def gpu(e: dict) -> bool:
        return e.get("cat") in ("Kernel", "Memcpy", "Memset")

    def data(e: dict) -> bool:
        return "DataLoader" in str(e.get("name")) and "__next__" in str(e.get("name"))

    assert b.gpu_busy_pct == pytest.approx(_raw_share(name, gpu), abs=0.2)
    assert b.data_wait_pct == pytest.approx(_raw_share(name, data), abs=0.2)
    first = a.recommendations[0]
    assert first.id == "dataloader-workers" and "num_workers" in first.change and "pin_memory" in first.change
    # removing a 39.6 % wait: 1 / (1 − 0.396) = 1.66×, bounded by GPU busy time
    assert first.projected_speedup == pytest.approx(1 / (1 - b.data_wait_pct / 100), rel=1e-3)
    assert any("num_workers=0" in e.metric for e in a.verdict.evidence)


def test_breakdown_is_exclusive_and_sums_to_step_time():
    for name in (
        "resnet50_v100_num_workers_0.pt.trace.json.gz",
        "hta_a100_control.json.gz",
        "param_resnet_2080ti.json.gz",
    ):
        b = analysis(name).breakdown
        for s in b.steps:
            assert sum(s.ns.values()) == s.duration_ns
        assert sum(b.share_pct(c) for c in CATEGORIES) == pytest.approx(100.0)


def test_param_linear_is_launch_bound_not_data_bound():
    a = analysis("param_linear_2080ti.json.gz")
    assert a.verdict.axis != "data"
    assert a.verdict.bottleneck == "host/launch-overhead"
    ids = [f.id for f in a.findings]
    assert "host/launch-overhead" in ids and "data/input-wait" not in ids
    assert a.segmentation.method == "iteration_markers" and len(a.segmentation.steps) == 40
    assert a.recommendations[0].id == "reduce-launch-overhead"


def test_param_resnet_iterations_and_periodic_stalls():
    a = analysis("param_resnet_2080ti.json.gz")
    seg = a.segmentation
    assert seg.method == "iteration_markers" and len(seg.steps) == 29 and "DataLoader" in seg.note
    # the first iteration (4.45 s: worker start-up ≈ 1.9 s, cuDNN's first calls, lazy loading) is a
    # warm-up step, left out of the judged steps and named (issue 36)
    (warm,) = seg.warmup
    assert warm.label == "iteration 1" and warm.duration_ns / 1e6 > 1500
    assert any("warm-up step iteration 1" in x for x in a.steady.left_out)
    durs = np.array([s.duration_ns for s in seg.steps]) / 1e6
    med = np.median(durs)
    stalls = np.flatnonzero(durs > 1.5 * med)
    assert len(stalls) >= 3  # ≈ 212 ms stalls every ~10 iterations
    assert a.verdict.axis == "data"


@pytest.mark.parametrize("name", CPU_ONLY)
def test_cpu_only_traces_are_insufficient_evidence(name):
    a = analysis(name)
    assert a.verdict.axis == "insufficient_evidence" and a.verdict.confidence == 0.0
    assert "no GPU activity" in a.verdict.summary
    assert a.recommendations == []


def test_compute_and_bandwidth_verdicts_follow_the_kernel_mix():
    v100 = analysis("hta_v100_rank0.pt.trace.json.gz")  # ≈ 97 % busy, fp32 convolutions
    assert v100.breakdown.gpu_busy_pct == pytest.approx(97, abs=2)
    assert v100.verdict.bottleneck == "algorithm/compute-bound" and v100.verdict.axis == "algorithm"
    assert v100.recommendations[0].id == "mixed-precision"
    qwen = analysis("tracelens_h100_qwen_inference.json.gz")  # bf16 GEMMs on tensor cores, elementwise-heavy
    assert qwen.breakdown.gpu_busy_pct == pytest.approx(92, abs=2)
    assert qwen.kernels.tensor_core_pct_of_matmul > 90
    assert qwen.verdict.bottleneck == "machine/bandwidth"


def test_unoverlapped_communication():
    a = analysis("tracelens_mi300x_resnet_ckpt.json.gz")
    assert a.verdict.bottleneck == "comm/unoverlapped" and a.verdict.axis == "machine"
    comm = a.breakdown.share_pct("communication")
    assert comm > 50
    r = a.recommendations[0]
    assert r.id == "overlap-communication"
    assert r.projected_speedup == pytest.approx(1 / (1 - comm / 100), rel=1e-2)


def test_kernel_summary_numbers():
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")
    k = a.kernels
    assert k.tensor_core_pct_of_matmul == 0.0  # fp32 cuDNN/sgemm on V100
    assert k.class_share_pct("convolution") == pytest.approx(61, abs=2)
    assert sum(k.by_class_ns.values()) == k.total_ns
    assert k.top[0].name.startswith("void cudnn::detail::dgrad_engine")
    h100 = analysis("hta_a100_80gb_rank0.json.gz")
    assert h100.kernels.class_share_pct("communication") > 40


def test_memory_peaks():
    qwen = analysis("tracelens_h100_qwen_inference.json.gz")
    (m,) = qwen.memory
    ev = [
        e["args"]
        for e in raw_document("tracelens_h100_qwen_inference.json.gz")["traceEvents"]
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1
    ]
    assert m.basis == "absolute"
    assert m.peak_allocated == max(a["Total Allocated"] for a in ev)
    assert m.peak_reserved == max(a["Total Reserved"] for a in ev)
    assert m.capacity == 85018279936 and m.peak_pct < 10
    (r,) = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz").memory
    assert r.basis == "relative" and r.peak_allocated > 1e9


def test_mfu_estimated_from_shapes_without_flops_and_computed_with_them():
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")  # record_shapes, no with_flops
    assert a.mfu.recorded_pct is None and a.mfu.basis == "estimated from shapes"
    assert a.mfu.value_pct is not None and a.mfu.reason.startswith("estimated from shapes")
    from trainscope.analyzers.trace.mfu import model_flops_utilization

    t = load("resnet50_v100_num_workers_0.pt.trace.json.gz")
    import copy

    t2 = copy.copy(t)
    from trainscope.traces.model import CpuOps

    flops = np.full(len(t.cpu_ops), np.nan)
    flops[:10] = 1e12  # 10 TFLOP over the trace
    t2.cpu_ops = CpuOps(ts=t.cpu_ops.ts, dur=t.cpu_ops.dur, thread=t.cpu_ops.thread, name=t.cpu_ops.name, flops=flops)
    seg = segment_steps(t2)
    inside = sum(1 for i in range(10) if any(s.start_ns <= t.cpu_ops.ts[i] < s.end_ns for s in seg.steps))
    m = model_flops_utilization(t2, seg, 0, peak_tflops=100.0)
    total_s = sum(s.duration_ns for s in seg.steps) / 1e9
    assert m.value_pct == pytest.approx(100 * inside * 1e12 / total_s / 100e12)
    m2 = model_flops_utilization(t2, seg, 0)  # V100 from the device table: 125 TFLOP/s
    assert m2.peak_tflops == 125.0


def test_threshold_override_changes_the_verdict():
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import analyze_trace

    t = load("resnet50_v100_num_workers_0.pt.trace.json.gz")
    strict = analyze_trace(t, Rules({"data_wait.moderate": 45, "data_wait.high": 60}))
    assert strict.verdict.axis != "data"


def test_printed_percentiles_and_kernel_figures_match_the_raw_events():
    name = "resnet50_v100_num_workers_0.pt.trace.json.gz"
    a = analysis(name)
    ev = raw_document(name)["traceEvents"]
    steps = sorted((e["ts"], e["dur"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
    durs_ms = np.array([d for _, d in steps]) / 1e3
    assert a.breakdown.step_ms.p50 == pytest.approx(np.percentile(durs_ms, 50), abs=1e-6)
    assert a.breakdown.step_ms.p95 == pytest.approx(np.percentile(durs_ms, 95), abs=1e-6)
    # per-category percentiles are over the per-step values the steps table shows
    per_step = np.array([s.ns["idle_data_wait"] for s in a.breakdown.steps]) / 1e6
    assert a.breakdown.category_ms["idle_data_wait"].p95 == pytest.approx(np.percentile(per_step, 95))
    # kernel figures over the kernels that start inside the steps, straight from the JSON
    k = [e["dur"] for e in ev if e.get("cat") == "Kernel" and any(s <= e["ts"] < s + d for s, d in steps)]
    assert a.kernels.count == len(k)
    assert a.kernels.median_kernel_ns == pytest.approx(np.median(k) * 1e3)
    assert a.kernels.total_ns == sum(k) * 1000


def test_outlier_flags_in_the_json_document():
    from trainscope.analyzers.rules import Rules
    from trainscope.reports.document import analysis_dict

    doc = analysis_dict(analysis("param_resnet_2080ti.json.gz"), Rules())
    durs = np.array([s["duration_ms"] for s in doc["steps"]])
    expected = durs > 1.5 * np.median(durs)
    assert [s["outlier"] for s in doc["steps"]] == expected.tolist()
    assert expected.sum() >= 3  # the periodic stalls (the warm-up iteration is left out of the steps)
    assert any(x.startswith("warm-up step iteration 1") for x in doc["steady_state"]["left_out"])
