"""Steady state first (issue 36): one-off costs found from the trace's evidence, the steady window
judged, NOT REPRESENTATIVE where there is none, and one-off costs cured in seconds once per process.
Synthetic traces (traces/builder.py) whose costs are known by construction."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.one_off import one_off_costs
from trainscope.analyzers.trace.one_off import steady_window
from trainscope.analyzers.trace.steps import segment_steps
from trainscope.reports.document import build_document
from trainscope.reports.document import headline
from trainscope.traces.builder import TraceBuilder

MS = 1_000_000
GEMM = "ampere_sgemm_128x64_nn"


def _iteration(
    b: TraceBuilder, t: int, kernels: int = 10, kernel_ms: float = 0.95, first_launch_ms: float = 0.0
) -> int:
    """One iteration at ``t``: ``kernels`` launches 5 µs apart whose GEMMs run back to back; the first
    launch lasts ``first_launch_ms`` (a lazy module load) when given. Returns the iteration's end."""
    host, gpu = t, t + 20_000
    for i in range(kernels):
        dur = int(first_launch_ms * MS) if (i == 0 and first_launch_ms) else 5_000
        c = b.launch(host, dur)
        host += dur + 1_000
        gpu = max(gpu, host)
        b.kernel(GEMM if i % 2 == 0 else f"{GEMM}_v{i}", gpu, int(kernel_ms * MS), c)
        gpu += int(kernel_ms * MS)
    return max(gpu, host) + 50_000


def _phases_trace(fmt: str = "kineto"):
    """init_model (40 pageable 8 MB host-to-device copies, the weights), warmup (3 iterations, the
    first with 20 ms first launches), benchmark_loop (20 warm iterations, the GPU saturated)."""
    b = TraceBuilder()
    t = 1 * MS
    init0 = t
    for _ in range(40):
        c = b.launch(t, 2_200_000, "cudaMemcpy")
        b.copies.add(t + 100_000, 2 * MS, 0, 7, 1, 1, 3, 8 << 20, c)  # HtoD, pageable -> device
        t += 10 * MS
    b.annotation("init_model", init0, t - init0)
    w0 = t
    for i in range(3):
        t = _iteration(b, t, first_launch_ms=20.0 if i == 0 else 0.0)
    b.annotation("warmup", w0, t - w0)
    l0 = t
    for _ in range(20):
        t = _iteration(b, t)
    b.annotation("benchmark_loop", l0, t - l0)
    return replace(b.build(), format=fmt)


@pytest.mark.parametrize("fmt", ["kineto", "nsys-sqlite"])
def test_init_warmup_benchmark_ranges_judge_the_steady_range_by_default(fmt):
    a = analyze_trace(_phases_trace(fmt))
    w = a.steady
    assert w is not None and w.steady_range == "benchmark_loop" and w.representative
    assert a.segmentation.method == "named_range" and "as --step-range benchmark_loop would" in a.segmentation.note
    # the others are named, with their times
    assert any(x.startswith("init_model (init, 400 ms") for x in w.left_out)
    assert any(x.startswith("warmup (warm-up,") for x in w.left_out)
    # the weights' upload is a one-off cost of init_model, outside the judged window
    up = next(c for c in w.ledger.costs if c.kind == "weight upload")
    assert up.count == 40 and "336 MB" in up.what and w.one_off_copy_ns == 0
    # judged on the steady loop: GPU-saturated GEMMs, not the copies; no pinned-memory fix
    assert a.breakdown.gpu_busy_pct > 80 and a.verdict.axis != "data"
    assert not {"pin-memory", "overlap-copies"} & {r.id for r in a.recommendations}
    # the warm-up's 20 ms first launches are one-off costs too (lazy loading), outside the window
    assert any(c.kind == "lazy loading" and c.count == 1 and c.ns == 20 * MS for c in w.ledger.costs)
    doc = build_document("phases", [a], Rules())
    st = doc["steady_state"]
    assert [r["name"] for r in st["ranges"]] == ["init_model", "warmup", "benchmark_loop"]
    assert [r["judged"] for r in st["ranges"]] == [False, False, True]


def test_an_explicit_step_range_is_judged_as_asked():
    a = analyze_trace(_phases_trace(), step_range="init_model")
    assert a.steady.steady_range is None and a.steady.judged.startswith("init_model")
    assert a.verdict.axis != "not_representative"  # the user chose the window
    # pinned memory cannot speed a copy that is a one-time upload: no copy fix projects it
    assert not any(r.id in ("pin-memory", "overlap-copies") and r.projected_speedup for r in a.recommendations)


def _cold_start_trace():
    """A 2.0 s first CUDA call (context creation), then three tiny kernels: nothing steady."""
    b = TraceBuilder()
    b.launch(1 * MS, 2_000 * MS, "cudaFree")
    t = 2_002 * MS
    for i in range(3):
        c = b.launch(t, 5_000)
        b.kernel(f"k{i}", t + 10_000, 3_000, c)
        t += 100_000
    return b.build()


def test_a_cold_start_only_window_is_not_representative_with_its_ledger():
    a = analyze_trace(_cold_start_trace())
    v = a.verdict
    assert v.axis == "not_representative" and v.bottleneck == "startup/not-representative"
    (ctx,) = [c for c in a.steady.ledger.costs if c.kind == "context creation"]
    assert ctx.ns == 2_000 * MS and "cudaFree" in ctx.what and "startup.context_ms" in ctx.rule
    ids = [r.id for r in a.recommendations]
    assert ids == ["profile-steady-state", "persistent-process"]
    assert a.recommendations[1].once_s == pytest.approx(2.0)
    # a one-off cost is never a per-step speed-up
    assert all(r.projected_speedup is None for r in a.recommendations)
    doc = build_document("cold", [a], Rules())
    assert headline(doc) == "NOT REPRESENTATIVE (start-up)"
    assert doc["recommendations"][1]["once_per_process_s"] == pytest.approx(2.0)


def _capture_trace(replays: int = 0):
    """A stream capture recording 50 launches (no kernel runs), its instantiation, then ``replays``
    graph replays of 40 kernels each; two eager kernels before the capture."""
    b = TraceBuilder()
    t = 1 * MS
    for i in range(2):
        c = b.launch(t, 5_000)
        b.kernel(f"warm{i}", t + 10_000, 50_000, c)
        t += 100_000
    b.launch(t, 2_000, "cudaStreamBeginCapture")
    t += 10_000
    for _ in range(50):
        b.launch(t, 5_000)  # recorded into the graph: no kernel
        t += 200_000
    b.launch(t, 2_000, "cudaStreamEndCapture")
    b.launch(t + 5_000, 1_500_000, "cudaGraphInstantiate")
    t += 2 * MS
    for _ in range(replays):
        c = b.launch(t, 10_000, "cudaGraphLaunch")
        g = t + 20_000
        for k in range(40):
            b.kernel(f"node{k}", g, 100_000, c)
            g += 100_000
        t = g + 100_000
    return b.build()


def test_a_capture_without_replay_is_not_representative_and_profiles_the_replays():
    a = analyze_trace(_capture_trace())
    assert a.verdict.axis == "not_representative" and a.steady.headline_phases == ("capture",)
    (cap,) = [c for c in a.steady.ledger.costs if c.kind == "graph capture"]
    assert "recording 50 launch calls" in cap.what and "then 0 replays" in cap.what
    first = a.recommendations[0]
    assert first.id == "profile-steady-state" and "replay" in first.title
    # never "use CUDA graphs" for a window that is capturing them
    assert not any(r.id == "reduce-launch-overhead" for r in a.recommendations)


def test_replays_after_the_capture_are_the_steady_state():
    """Twenty replays after the capture: the steady state is there, and the window is judged."""
    a = analyze_trace(_capture_trace(replays=20))
    assert a.verdict.axis != "not_representative"
    assert any(c.kind == "graph capture" and "then 20 replays" in c.what for c in a.steady.ledger.costs)


def _steps_trace(durations_ms, compile_every_step=False):
    b = TraceBuilder()
    t = 1 * MS
    for n, d in enumerate(durations_ms):
        dur = int(d * MS)
        b.step(n + 1, t, dur)
        if compile_every_step:
            b.annotation("compile_fx (dynamo_timed)", t + 10_000, 6 * MS)
        host = t + (6 * MS + 20_000 if compile_every_step else 20_000)
        for _ in range(6):
            c = b.launch(host, 5_000)
            b.kernel(GEMM, host + 10_000, 900_000, c)
            host += 1 * MS
        t += dur
    return b.build()


def test_a_warm_up_step_is_left_out_by_the_modified_z_score():
    tr = _steps_trace([60, 10, 10.4, 9.8, 10.1, 10.3, 9.9])
    seg = segment_steps(tr)
    seg2, w = steady_window(tr, seg, one_off_costs(tr, steps=seg))
    assert [s.label for s in seg2.warmup] == ["ProfilerStep#1"] and len(seg2.steps) == 6
    assert "modified z-score" in w.left_out[0] and w.representative


def test_ordinary_step_jitter_leaves_every_step_in():
    tr = _steps_trace([12, 10, 11, 9.5, 10.5, 11.5])
    seg = segment_steps(tr)
    seg2, w = steady_window(tr, seg, one_off_costs(tr, steps=seg))
    assert len(seg2.steps) == 6 and not seg2.warmup and not w.left_out


def test_a_recompilation_in_every_step_is_steady_state_work():
    tr = _steps_trace([12, 12, 12, 12], compile_every_step=True)
    assert not [c for c in one_off_costs(tr, steps=segment_steps(tr)).costs if c.kind == "compilation"]
    # the same trace compiling in its first step only: a one-off compilation
    ann = tr.annotations
    later = (ann.name == tr.strings.index("compile_fx (dynamo_timed)")) & (ann.ts > 2 * MS)
    once = replace(tr, annotations=ann.select(~later))
    (c,) = [c for c in one_off_costs(once, steps=segment_steps(once)).costs if c.kind == "compilation"]
    assert c.count == 1 and c.ns == 6 * MS and "compile_fx" in c.what


def test_a_first_call_that_waits_on_a_sync_is_not_a_one_off_cost():
    """An operator whose first call blocks 400 ms in a synchronizing copy (the GPU busy on earlier work
    or not) waits on the device: not initialization (the SGLang prefill's 493 ms blocking copy)."""
    b = TraceBuilder()
    t = 1 * MS
    for i in range(4):
        b.cpu_op("aten::to", t, (401 if i == 0 else 1) * MS)
        b.launch(t + 100_000, (400 if i == 0 else 0.5) * MS if i else 400 * MS, "cudaMemcpy")
        t += 402 * MS if i == 0 else 2 * MS
        c = b.launch(t, 5_000)
        b.kernel(GEMM, t + 10_000, 1 * MS, c)
        t += 2 * MS
    costs = one_off_costs(b.build()).costs
    assert not [c for c in costs if c.kind in ("first call", "first use")]


def test_a_steady_state_projection_never_removes_the_one_off_time():
    """A whole-trace window whose 30 ms lazy first launches sit inside it (not at its edges) while the
    rest is launch-bound: the launch fix is capped at the GPU idle left after them."""
    b = TraceBuilder()
    t = 1 * MS
    for i in range(200):
        launch = 30 * MS if i == 100 else 5_000
        b.cpu_op("aten::mm", t, 200_000 + launch)  # framework work on the host, then the launch
        c = b.launch(t + 200_000, launch)
        t += 200_000 + launch
        b.kernel(f"k{i % 4}" if i != 100 else "late_first", t + 5_000, 100_000, c)
        t += 110_000
    a = analyze_trace(b.build())
    w = a.steady
    assert w.representative and w.one_off_idle_pct > 20
    r = next(r for r in a.recommendations if r.id == "reduce-launch-overhead")
    idle = 100 - a.breakdown.gpu_busy_pct
    assert 1 - 1 / r.projected_speedup <= (idle - w.one_off_idle_pct) / 100 + 1e-3  # speed-ups are rounded
    assert "one-off costs" in r.basis


def test_reports_say_which_window_was_judged_and_show_the_ledger():
    from trainscope.reports.html import render_html
    from trainscope.reports.markdown import render_markdown
    from trainscope.reports.text import render_text
    from trainscope.tui.overview import key_figures
    from trainscope.tui.overview import ledger_rows

    doc = build_document("cold", [analyze_trace(_cold_start_trace())], Rules())
    text = render_text(doc)
    assert "VERDICT  NOT REPRESENTATIVE (start-up)" in text and "Start-up ledger" in text
    assert "saves up to 2.00 s once per process (not per step)" in text
    md = render_markdown(doc)
    assert "## Start-up ledger" in md and "NOT REPRESENTATIVE \\(start\\-up\\)" in md
    html = render_html(doc)
    assert "<h2>Start-up ledger</h2>" in html and "once per process" in html
    assert ledger_rows(doc)[0][0] == "2,000.0 ms"
    doc2 = build_document("phases", [analyze_trace(_phases_trace())], Rules())
    rows = dict(key_figures(doc2))
    assert rows["window"].startswith("judged benchmark_loop") and "step time" in rows and "GPU busy" in rows
    assert "init_model" in render_text(doc2).split("VERDICT")[0]
