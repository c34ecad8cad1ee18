"""The pure models behind the app: timeline lanes, what-if projections, memory curves."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import ALL_KINETO
from tests.conftest import CPU_ONLY
from tests.conftest import analysis
from tests.conftest import load
from trainscope.analyzers.trace.kernels import kernel_classes
from trainscope.analyzers.trace.whatif import levers
from trainscope.analyzers.trace.whatif import project
from trainscope.analyzers.views.memory_curve import memory_curves
from trainscope.analyzers.views.timeline import TimelineModel

GPU_TRACES = [n for n in ALL_KINETO if n not in CPU_ONLY]


@pytest.mark.parametrize("name", GPU_TRACES)
def test_gpu_lane_over_a_step_is_that_steps_breakdown(name):
    trace, a = load(name), analysis(name)
    model = TimelineModel(trace, a.segmentation, a.device, kernel_classes(trace)[0])
    # the lane is the raw exclusive layering of recorded events; the analysis' own breakdown refiles the
    # idle rows to the sinks (host frames, GPU-idle gaps), so the lane matches the breakdown it started from
    for st, sb in zip(a.segmentation.steps, a.observations.breakdown.steps):
        gpu = model.lane("gpu", st.start_ns, st.end_ns, 1)
        assert dict(zip(gpu.categories, gpu.ns[0].tolist())) == sb.ns
        host = model.lane("host", st.start_ns, st.end_ns, 1)
        assert int(host.ns[0][host.categories.index("data_wait")]) == sb.host_data_wait_ns
        # Columns partition the window: finer sampling loses no time.
        fine = model.lane("gpu", st.start_ns, st.end_ns, 97)
        assert int(fine.ns.sum()) == st.duration_ns
        assert (fine.ns.sum(axis=0) == gpu.ns[0]).all()


def test_host_item_under_a_data_wait_is_inside_the_dataloader_call():
    name = "resnet50_v100_num_workers_0.pt.trace.json.gz"
    trace, a = load(name), analysis(name)
    model = TimelineModel(trace, a.segmentation, a.device, kernel_classes(trace)[0])
    st = a.segmentation.steps[2]
    host = model.lane("host", st.start_ns, st.end_ns, 200)
    col = int(np.flatnonzero(host.dominant == host.categories.index("data_wait"))[5])
    w = st.duration_ns / 200
    item = model.item_at("host", int(st.start_ns + col * w), int(st.start_ns + (col + 1) * w))
    assert item.category == "data_wait"
    assert "DataLoader" in (item.context or item.name)
    assert item.step_label == st.label


@pytest.mark.parametrize("name", GPU_TRACES)
def test_one_what_if_lever_reproduces_its_recommendations_projection(name):
    a = analysis(name)
    table = levers(a)
    for r in a.recommendations:
        if r.id in table:
            assert project(a, [r.id]).speedup == pytest.approx(r.projected_speedup, abs=2e-3), r.id
    if len(table) >= 2:
        both = project(a, list(table))
        assert both.speedup >= max(project(a, [k]).speedup for k in table) - 1e-9
        # Never faster than the GPU's own remaining work allows.
        removed = sum(lv.busy_pct for lv in table.values())
        assert both.projected_step_ms >= a.breakdown.step_ms.mean * (a.breakdown.gpu_busy_pct - removed) / 100 - 1e-6


def test_no_levers_means_no_change():
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")
    p = project(a, [])
    assert p.speedup == pytest.approx(1.0) and p.projected_step_ms == pytest.approx(a.breakdown.step_ms.mean)
    assert project(a, ["no-such-fix"]).speedup == pytest.approx(1.0)


@pytest.mark.parametrize(
    "name", ["resnet50_v100_num_workers_0.pt.trace.json.gz", "tracelens_h100_qwen_inference.json.gz"]
)
def test_memory_curve_peaks_match_the_reported_peak(name):
    trace, a = load(name), analysis(name)
    (curve,) = memory_curves(trace)
    lo, hi = trace.span_ns
    assert int(curve.binned_peak(lo, hi, 50).max()) == a.memory[0].peak_allocated
    assert int(curve.binned_peak(lo, hi, 7).max()) == a.memory[0].peak_allocated


def test_levers_drawing_on_the_same_time_remove_no_more_than_it_holds():
    """GPU idle after a blocking sync is filed under sync / launch / other idle, where the launch
    and sync levers also draw: together they are capped by that pool (qwen H100: 8.22 % of step)."""
    from trainscope.analyzers.trace.whatif import POOL_CATEGORIES
    from trainscope.analyzers.trace.whatif import Lever
    from trainscope.analyzers.trace.whatif import _pooled

    a = analysis("tracelens_h100_qwen_inference.json.gz")
    pool = sum(a.breakdown.share_pct(c) for c in POOL_CATEGORIES["host-idle"])
    launch = Lever("reduce-launch-overhead", "", idle_pct=0.8 * pool)
    sync = Lever("remove-blocking-syncs", "", idle_pct=0.7 * pool)
    data = Lever("dataloader-workers", "", idle_pct=3.0)  # outside every pool: adds as before
    assert _pooled(a, [launch], "idle_pct") == pytest.approx(0.8 * pool)
    assert _pooled(a, [launch, sync], "idle_pct") == pytest.approx(pool)
    assert _pooled(a, [launch, sync, data], "idle_pct") == pytest.approx(pool + 3.0)
