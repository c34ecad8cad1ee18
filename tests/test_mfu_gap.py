"""The Iron Law's gap (busy but below peak) apportions the union of GPU-busy time exclusively, as the
verdict's sinks do: kernels overlapping on concurrent streams count once."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.conftest import analysis
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.traces.builder import TraceBuilder

MS = 1_000_000
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"  # memory-bound by its name
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def _overlapping_trace(copy: bool = False):
    """One 20 ms step: a memory-bound elementwise kernel on stream 7 and an all-reduce on stream 20
    both run over [1, 11) ms (optionally a 2 ms host-to-device copy at [12, 14) ms); one operator
    with 1 GFLOP counted, so an MFU exists."""
    b = TraceBuilder()
    b.step(1, 0, 20 * MS)
    b.cpu_ops.add(MS // 10, 10_000, 0, b.strings.intern("aten::mm"), 1e9)
    c = b.launch(MS // 2, 5_000)
    b.kernel(ELEMENTWISE, 1 * MS, 10 * MS, c, stream=7)
    c = b.launch(MS // 2 + 10_000, 5_000)
    b.kernel(ALLREDUCE, 1 * MS, 10 * MS, c, stream=20)
    if copy:
        c = b.launch(11 * MS, 5_000, "cudaMemcpyAsync")
        b.copy(12 * MS, 2 * MS, 64 << 20, c)
    return b.build()


def test_overlapping_kernels_of_different_bounds_count_once():
    a = analyze_trace(_overlapping_trace())
    law = a.mfu.iron_law
    assert law is not None and a.sinks is not None
    assert law.pipeline_efficiency_pct == pytest.approx(50.0)  # [1, 11) ms of a 20 ms step
    # Summed kernel time (20 ms for 10 ms of busy wall time) shared out the busy 50 % as 25 % memory-bound
    # and 25 % communication; the all-reduce runs entirely under the elementwise kernel, so no
    # communication is exposed and all the busy time is memory-bound kernel time.
    r = a.roofline
    assert r is not None and r.bound_ms["memory"] == pytest.approx(10.0) and r.communication_ms == pytest.approx(10.0)
    summed_reading = r.bound_ms["memory"] * law.pipeline_efficiency_pct / r.total_ms
    assert summed_reading == pytest.approx(25.0)  # the old, double-counting split
    assert law.gap["memory-bound kernels"] == pytest.approx(50.0, abs=0.01)
    assert law.gap["communication kernels"] == 0.0
    assert a.sinks.pct("memory-bound") == pytest.approx(law.gap["memory-bound kernels"], abs=0.01)
    # the MFU is tiny (1 GFLOP in 20 ms), so nothing is left for tensor-core math below peak
    assert law.gap["tensor-core math below peak"] == 0.0


def test_copies_are_their_own_cause_not_tensor_core_math():
    a = analyze_trace(_overlapping_trace(copy=True))
    law = a.mfu.iron_law
    assert law is not None
    assert law.pipeline_efficiency_pct == pytest.approx(60.0)
    assert law.gap["host-device copies"] == pytest.approx(10.0, abs=0.01)  # 2 ms of 20
    assert law.gap["memory-bound kernels"] == pytest.approx(50.0, abs=0.01)
    assert law.gap["tensor-core math below peak"] == 0.0


def test_gap_agrees_with_the_verdict_sinks_on_a_multi_stream_trace():
    """hta_a100_control: all-reduces overlap compute on concurrent streams (163.5 ms of communication
    kernel time, 87.9 ms of it exposed), where the summed split read 46.8 % memory-bound against
    the sinks' 53.6 %. Both read one attribution now: they agree to the gap's rounding (0.01
    percentage point per cause), and the causes plus the MFU add up to the GPU-busy share."""
    a = analysis("hta_a100_control.json.gz")
    law, s = a.mfu.iron_law, a.sinks
    assert law is not None and s is not None
    tol = 0.01
    assert law.gap["memory-bound kernels"] == pytest.approx(s.pct("memory-bound"), abs=tol)
    assert law.gap["memory-bound kernels"] > 50.0  # the exposed share, not the summed one (46.8)
    assert law.gap["communication kernels"] == pytest.approx(s.pct("comm") + s.pct("imbalance"), abs=tol)
    assert law.gap["kernels of unknown bound"] == pytest.approx(s.pct("busy-unknown"), abs=tol)
    assert law.gap["host-device copies"] == pytest.approx(s.pct("copies"), abs=tol)
    off_tc, tc_below = law.gap["compute-bound math off the tensor cores"], law.gap["tensor-core math below peak"]
    assert off_tc + tc_below + law.efficiency_pct == pytest.approx(s.pct("compute-bound"), abs=3 * tol)
    assert sum(law.gap.values()) + law.efficiency_pct == pytest.approx(law.pipeline_efficiency_pct, abs=6 * tol)


def test_the_causes_add_up_to_busy_minus_mfu_when_the_peak_is_not_a_tensor_core_peak():
    """cs336_small_train_step_a100 (Nsight): FP32 GEMMs with no tensor cores, so the MFU (35.0 %)
    is over the A100's 19.5 TFLOP/s FP32 peak and all compute-bound time is math off the tensor
    cores. The MFU is that same math at peak, so it comes out of that cause: the causes add up to
    pipeline efficiency − MFU (63.2 − 35.0), where they read 20.9 + 42.2 + 0.1 = 63.2 % before
    (the whole busy time, the MFU counted twice)."""
    from trainscope.analyzers.trace.analysis import analyze_trace
    from trainscope.collectors import open_traces

    a = analyze_trace(open_traces(str(DATA / "nsys" / "cs336_small_train_step_a100.sqlite")).traces[0])
    law, s = a.mfu.iron_law, a.sinks
    assert law is not None and s is not None and a.mfu.basis == "estimated from shapes"
    assert law.peak_tflops == pytest.approx(19.5) and law.efficiency_pct > 30.0
    off_tc = law.gap["compute-bound math off the tensor cores"]
    assert off_tc == pytest.approx(s.pct("compute-bound") - law.efficiency_pct, abs=0.02)
    assert law.gap["tensor-core math below peak"] == 0.0
    assert law.gap["memory-bound kernels"] == pytest.approx(s.pct("memory-bound"), abs=0.01)
    assert sum(law.gap.values()) == pytest.approx(law.pipeline_efficiency_pct - law.efficiency_pct, abs=0.1)
