"""Every real window answered (issue 36 item 5), on synthetic traces whose figures are known by
construction (traces/builder.py): a window of few GPU operations that one cause clearly leads (copies
included) gets a capped verdict; without step markers, the DataLoader wait that leads into the first
GPU operation is inside the window."""

from __future__ import annotations

import pytest

from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.traces.builder import TraceBuilder
from trainscope.traces.model import COPY_KINDS
from trainscope.traces.model import MEMORY_KINDS

MS = 1_000_000
HTOD, PAGEABLE, DEVICE = COPY_KINDS.index("HtoD"), MEMORY_KINDS.index("pageable"), MEMORY_KINDS.index("device")


def _copy_step(copy_ms: float = 3.89, kernel_ms: float = 0.5, step_ms: float = 10.0):
    """One 10 ms H100 step of 3 GPU operations: two pageable host-to-device copies of 256 MiB
    (``copy_ms`` each) and one kernel."""
    b = TraceBuilder(device_name="NVIDIA H100 80GB HBM3")
    b.step(1, 1 * MS, int(step_ms * MS))
    for k in range(2):
        t = 1 * MS + k * 4 * MS
        c = b.launch(t + 50_000, int(copy_ms * MS) + 10_000, "cudaMemcpyAsync")
        b.copies.add(t + 100_000, int(copy_ms * MS), 0, 7, HTOD, PAGEABLE, DEVICE, 256 << 20, c)
    c = b.launch(9 * MS + 10_000, 5_000)
    b.kernel("ampere_sgemm_128x64_nn", 9 * MS + 100_000, int(kernel_ms * MS), c)
    return b.build()


def test_few_operations_whose_copies_lead_clearly_get_a_capped_copy_verdict():
    """Pageable copies 77.8 % of the step in 3 GPU operations. Before: INSUFFICIENT EVIDENCE ('only 3
    GPU operations'), while the findings said 'pageable copies 77.8 %, high'."""
    a = analyze_trace(_copy_step())
    v = a.verdict
    assert a.sinks.leader.key == "copies" and a.sinks.pct("copies") == pytest.approx(77.8, abs=0.01)
    assert v.axis == "data" and v.bottleneck == "data/pageable-copies"
    assert v.confidence == 0.5  # capped: few operations
    assert "only 3 GPU operations" in v.summary and "copies' own durations" in v.summary
    assert any(e.metric.startswith("GPU operations") and e.value == 3 for e in v.evidence)
    assert a.recommendations and a.recommendations[0].finding == "data/pageable-copies"


def test_few_operations_without_a_clear_lead_stay_insufficient_evidence():
    """Copies 40 % of the step: no cause leads a handful of operations clearly."""
    a = analyze_trace(_copy_step(copy_ms=2.0))
    assert a.sinks.leader.key == "copies" and a.sinks.pct("copies") < 50
    assert a.verdict.axis == "insufficient_evidence" and "only 3 GPU operations" in a.verdict.summary
    assert not a.recommendations


def test_few_operations_of_kernel_work_stay_insufficient_evidence():
    """A handful of kernels busy most of the step: what bounds them cannot be told from three."""
    b = TraceBuilder()
    b.step(1, 1 * MS, 10 * MS)
    for k in range(3):
        c = b.launch(1 * MS + k * 10_000, 5_000)
        b.kernel("ampere_sgemm_128x64_nn", 1 * MS + 100_000 + k * 3 * MS, 3 * MS, c)
    a = analyze_trace(b.build())
    assert a.verdict.axis == "insufficient_evidence"


def _loader_then_work(wait_ms: float = 1500.0, gap_ms: float = 0.5, setup_ms: float = 0.0):
    """No step markers: ``setup_ms`` of host work, one DataLoader ``__next__`` of ``wait_ms`` (the GPU
    idle), ``gap_ms`` later the batch's host-to-device copy, then 40 kernels of 5 ms back to back."""
    b = TraceBuilder()
    t = 1 * MS + int(setup_ms * MS)
    if setup_ms:
        b.cpu_op("aten::empty", 1 * MS, int(setup_ms * MS))
    b.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, int(wait_ms * MS))
    host = t + int(wait_ms * MS) + int(gap_ms * MS)
    c = b.launch(host, 20_000, "cudaMemcpyAsync")
    gpu = host + 30_000
    b.copy(gpu, 2 * MS, 64 << 20, c)
    gpu += 2 * MS
    for k in range(40):
        c = b.launch(host + 40_000 + k * 10_000, 5_000)
        b.kernel("ampere_sgemm_128x64_nn", gpu, 5 * MS, c)
        gpu += 5 * MS
    return b.build()


def test_the_dataloader_wait_before_the_first_gpu_operation_is_in_the_window():
    """Before: the window was the GPU span only (202 ms), the 1.5 s wait cut away, data wait 0 %."""
    a = analyze_trace(_loader_then_work(setup_ms=50.0))
    seg = a.segmentation
    (step,) = seg.steps
    assert seg.method == "whole_trace" and "DataLoader wait that leads into it" in seg.note
    assert "50.0 ms of host-only time before and after it left out" in seg.note  # the set-up before the wait
    gpu_ms = 2 + 40 * 5
    assert step.duration_ns / 1e6 == pytest.approx(1500 + 0.5 + 0.03 + gpu_ms, abs=0.01)
    assert step.start_ns == 51 * MS  # the wait's start
    assert a.breakdown.data_wait_pct == pytest.approx(100 * 1500 / (1500.53 + gpu_ms), abs=0.1)
    assert a.verdict.bottleneck == "data/input-wait"


def test_a_wait_far_from_the_gpu_work_is_not_the_loops():
    """The host reaches the first copy 300 ms after the wait ends, longer than the 202 ms of GPU work:
    the wait is not the loop's input; the window stays the GPU span."""
    a = analyze_trace(_loader_then_work(gap_ms=300.0))
    (step,) = a.segmentation.steps
    assert step.duration_ns / 1e6 == pytest.approx(202, abs=0.01)
    assert a.breakdown.data_wait_pct == 0
