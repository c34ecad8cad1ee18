"""The analysis window: the span of GPU activity without step markers, step-like ranges that tile
the GPU work, stub steps set apart. Cross-checked against the raw events."""

from __future__ import annotations

import pytest

from tests.conftest import KINETO
from tests.conftest import analysis
from tests.conftest import load
from tests.conftest import raw_document
from trainscope.analyzers.trace.steps import segment_steps

VLLM = "tl_mi300x_vllm_gptoss_decode_fullgraph_bs32.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _gpu_span_us(name):
    evs = [
        e for e in raw_document(name)["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS
    ]
    kernel_us = sum(e["dur"] for e in evs if e["cat"].lower() == "kernel")
    return min(e["ts"] for e in evs), max(e["ts"] + e["dur"] for e in evs), kernel_us


def test_without_step_markers_the_window_is_the_gpu_span():
    a = analysis(VLLM)
    seg = a.segmentation
    assert seg.method == "whole_trace" and len(seg.steps) == 1
    lo, hi, kernel_us = _gpu_span_us(VLLM)
    t = load(VLLM)
    trace_lo, trace_hi = t.span_ns
    assert (trace_hi - trace_lo) / 1e3 > 1.5 * (hi - lo)  # the file holds host work around the replay
    assert seg.steps[0].duration_ns / 1e3 == pytest.approx(hi - lo, abs=1.0)
    assert "span of GPU activity" in seg.note and any("span of GPU activity" in w for w in a.warnings)
    # inside the replay the GPU is ≈ 100 % busy: kernel time over the span, from the raw events
    assert kernel_us / (hi - lo) > 0.98
    assert a.breakdown.gpu_busy_pct > 98.0
    assert a.verdict.bottleneck != "host/launch-overhead"
    assert not any(f.id == "host/launch-overhead" for f in a.findings)


def test_stub_profiler_step_is_dropped_and_named():
    name = "hta_mi250_minitoy_train.json.gz"
    steps = {
        e["name"]: e["dur"]
        for e in raw_document(name)["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
    }
    assert len(steps) >= 2 and min(steps.values()) < 0.1 * max(steps.values())
    stub = min(steps, key=steps.get)
    from trainscope.collectors import open_traces

    # A trace as read (the cached one may have been through the invariant pass, which sets the stub
    # aside before segmentation sees it).
    seg = segment_steps(open_traces(str(KINETO / name)).traces[0])
    assert [s.label for s in seg.stubs] == [stub]
    assert stub not in [s.label for s in seg.steps] and len(seg.steps) == len(steps) - 1
    assert stub in seg.stub_note and f"{steps[stub]:.0f} µs" in seg.stub_note
    a = analysis(name)
    assert any(stub in w for w in a.warnings)
    assert a.breakdown.step_ms.mean == pytest.approx(max(steps.values()) / 1e3, rel=0.01)


def test_every_step_kept_when_none_is_a_stub():
    seg = segment_steps(load("resnet50_v100_num_workers_0.pt.trace.json.gz"))
    assert not seg.stubs and seg.stub_note is None and len(seg.steps) == 6
