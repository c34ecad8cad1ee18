"""The live rules on injected snapshots: each rule's trigger, warming up, time weighting, the
verdict-change log, threshold overrides, and the JSON-line vocabulary shared with analyze."""

from __future__ import annotations

import json

import pytest

from tests.live_snapshots import GIB
from tests.live_snapshots import snap
from trainscope.analyzers.live.engine import READY
from trainscope.analyzers.live.engine import WARMING_UP
from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.analyzers.live.engine import evaluate
from trainscope.analyzers.live.engine import window_stats
from trainscope.analyzers.rules import Rules
from trainscope.collectors.samples import GpuSample
from trainscope.collectors.samples import HostSample
from trainscope.collectors.samples import Snapshot
from trainscope.collectors.samples import StepSample


def run(snaps, rules=None):
    a = LiveAnalyzer(rules)
    for s in snaps:
        st = a.add(s)
    return st, a


def test_warming_up_until_enough_samples():
    st, _ = run([snap(i, util=95) for i in range(3)])
    assert st.state == WARMING_UP and st.verdict.axis == "insufficient_evidence"
    st, _ = run([snap(i, util=95) for i in range(4)])
    assert st.state == READY


def test_gpu_idle_while_workers_saturate_is_data():
    st, _ = run([snap(i, util=3, cpu=60, workers=(4, 97.0)) for i in range(10)])
    assert st.verdict.axis == "data" and st.verdict.bottleneck == "data/loader-cpu"
    assert st.stats.starved_cpu_pct == 100.0 and st.stats.worker_cpu_pct == pytest.approx(97.0)


def test_gpu_idle_while_iowait_saturates_is_data():
    st, _ = run([snap(i, util=2, cpu=30, iowait=65) for i in range(10)])
    assert st.verdict.bottleneck == "data/io-wait"


def test_starved_gpu_without_loader_evidence_is_not_called_data():
    st, _ = run([snap(i, util=35, cpu=40) for i in range(10)])
    assert st.verdict.axis == "insufficient_evidence"
    assert "launch overhead" in st.verdict.summary
    assert [f.id for f in st.findings] == ["gpu/underutilized"]


def test_starved_share_must_exceed_half_the_samples():
    snaps = [snap(i, util=3 if i % 2 else 60, cpu=95) for i in range(10)]  # exactly 50 %: not more than half
    st, _ = run(snaps)
    assert st.stats.starved_cpu_pct == 50.0
    assert not any(f.id == "data/loader-cpu" for f in st.findings)


def test_gpm_decides_compute_versus_memory():
    st, _ = run([snap(i, util=99, sm=92, tensor=80, dram=20) for i in range(6)])
    assert st.verdict.bottleneck == "algorithm/compute-bound" and st.verdict.confidence == 0.85
    st, _ = run([snap(i, util=99, sm=30, tensor=5, dram=85) for i in range(6)])
    assert st.verdict.bottleneck == "machine/bandwidth" and st.verdict.axis == "machine"


def test_without_gpm_the_memory_controller_share_is_weaker_evidence():
    st, _ = run([snap(i, util=98, mem_ctrl=75) for i in range(6)])
    assert st.verdict.bottleneck == "machine/bandwidth" and st.verdict.confidence == 0.6
    st, _ = run([snap(i, util=98, mem_ctrl=20) for i in range(6)])
    assert st.verdict.bottleneck == "algorithm/compute-bound" and st.verdict.confidence == 0.6


def test_memory_near_capacity_wins_over_the_mix():
    st, _ = run([snap(i, util=97, mem=(76, 80), sm=92, dram=10) for i in range(6)])
    assert st.verdict.bottleneck == "machine/capacity"
    assert {f.id for f in st.findings} >= {"machine/capacity", "algorithm/compute-bound"}


def test_step_exact_wait_decides_a_cpu_job():
    st, _ = run([snap(i, step=StepSample(10, 600_000_000, 1_000_000_000)) for i in range(6)])
    assert st.verdict.bottleneck == "data/input-wait" and st.verdict.axis == "data"
    assert st.stats.data_wait_pct == pytest.approx(60.0) and st.stats.step_ms == pytest.approx(100.0)
    fix = st.fixes[0]
    assert fix.finding == "data/input-wait" and fix.projected_speedup == pytest.approx(2.5)
    st, _ = run([snap(i, step=StepSample(10, 10_000_000, 1_000_000_000)) for i in range(6)])
    assert st.verdict.axis == "algorithm" and st.fixes == ()


def test_averages_are_time_weighted():
    # 1 s at 100 % and 3 s at 0 %: 25 %, not the 50 % an unweighted mean gives.
    snaps = [snap(0, util=100, dt=1.0), snap(3, util=0, dt=3.0)]
    assert window_stats(snaps, Rules()).gpu_util == pytest.approx(25.0)


def test_window_slides_and_changes_are_logged():
    snaps = [snap(i, util=3, cpu=95) for i in range(10)] + [snap(10 + i, util=99, sm=95, dram=10) for i in range(40)]
    st, a = run(snaps)
    assert st.verdict.bottleneck == "algorithm/compute-bound"
    log = [(c.t, c.axis, c.bottleneck) for c in a.changes]
    assert log[0] == (0, "warming_up", None)
    assert log[1] == (3, "data", "data/loader-cpu")
    assert log[-1][1:] == ("algorithm", "algorithm/compute-bound")
    assert a.summary().stats.samples == 50  # the summary covers the whole run, not the window


def test_threshold_overrides_apply():
    snaps = [snap(i, util=98, mem=(60, 80)) for i in range(6)]
    assert run(snaps)[0].verdict.bottleneck != "machine/capacity"
    assert run(snaps, Rules({"memory.capacity": 70}))[0].verdict.bottleneck == "machine/capacity"


def test_throttling_is_a_finding():
    st, _ = run([snap(i, util=98, events=("hw_thermal",)) for i in range(6)])
    assert "machine/throttling" in {f.id for f in st.findings}


def test_json_lines_use_analyze_vocabulary(kineto_dir):
    from trainscope.analyzers.trace.analysis import analyze_set
    from trainscope.collectors import open_traces
    from trainscope.reports.document import build_document
    from trainscope.reports.live import status_line_dict
    from trainscope.reports.live import summary_dict

    rules = Rules()
    path = str(kineto_dir / "resnet50_v100_num_workers_0.pt.trace.json.gz")
    doc = build_document(path, analyze_set(open_traces(path), rules), rules)
    snaps = [snap(i, util=3, cpu=95, step=StepSample(10, 5 * 10**8, 10**9)) for i in range(6)]
    st, _ = run(snaps)
    line = json.loads(json.dumps(status_line_dict(st, snaps[-1])))
    assert set(doc["verdict"]) <= set(line["verdict"])
    assert set(doc["findings"][0]) == set(line["findings"][0])
    assert set(doc["verdict"]["evidence"][0]) == set(line["verdict"]["evidence"][0])
    assert line["verdict"]["axis"] == doc["verdict"]["axis"] == "data"
    summary = summary_dict(st, {"target": "x"})
    assert summary["verdict"]["axis"] == "data" and summary["changes"][-1]["axis"] == "data"


# --- stability: minimum evidence, start-up, hysteresis (issue: the flaky watch-job verdict) ------------


def cpu_step_snaps(n, waits_pct, steps_per=10, step_ms=25.0, t0=0.0):
    """A CPU job (no GPU) with the step hook: ``waits_pct[i]`` is snapshot i's data-wait share."""
    out = []
    for i in range(n):
        total = int(steps_per * step_ms * 1e6)
        out.append(snap(t0 + i * 0.25, dt=0.25, step=StepSample(steps_per, int(total * waits_pct[i] / 100), total)))
    return out


def test_a_handful_of_steps_grazing_the_threshold_is_no_verdict():
    # The failure this replaced: 4 steps in the window at 5.03 % wait against "≥ 5" → DATA-BOUND.
    st, a = run(cpu_step_snaps(4, [5.03] * 4, steps_per=1))
    assert st.state == WARMING_UP and st.stats.steps < 20
    assert not any(f.id.startswith("data/") for f in st.findings)


def test_start_up_steps_stay_out_of_the_statistics():
    # The first interval holds the iterator's creation (a 100 % wait); afterwards 1 %.
    waits = [100.0] + [1.0] * 19
    st, a = run(cpu_step_snaps(20, waits))
    assert st.state == READY and st.verdict.axis == "algorithm"
    assert st.stats.data_wait_pct == pytest.approx(1.0)
    assert st.stats.steps == 190  # 19 intervals × 10 steps; the first interval's 10 are start-up
    assert a.summary().stats.data_wait_pct == pytest.approx(1.0)
    assert [c.axis for c in a.changes] == ["warming_up", "algorithm"]


def test_hysteresis_a_brief_excursion_does_not_flip_the_verdict():
    # A 3 s window: 10 s at 1 % wait, a 1 s stall at 60 %, then 1 % again. The window's own call turns
    # to data for under 3 s (while the stall is inside it), shorter than the 5 s hold.
    waits = [1.0] * 40 + [60.0] * 4 + [1.0] * 40
    snaps = cpu_step_snaps(len(waits), waits)
    a = LiveAnalyzer(Rules({"live.verdict_hold": 5.0}), window_s=3.0)
    raw = LiveAnalyzer(Rules({"live.verdict_hold": 0.0}), window_s=3.0)
    for s in snaps:
        a.add(s), raw.add(s)
    assert "data" in [c.axis for c in raw.changes]  # without hysteresis it flaps
    assert [c.axis for c in a.changes] == ["warming_up", "algorithm"], a.changes
    assert a.summary().verdict_changes == 0


def test_hysteresis_a_lasting_change_is_shown_after_the_hold():
    rules = Rules({"live.verdict_hold": 5.0})
    waits = [1.0] * 40 + [60.0] * 200  # 50 s of data wait: the window's share crosses 20 % early on
    snaps = cpu_step_snaps(len(waits), waits)
    a, raw = LiveAnalyzer(rules), LiveAnalyzer(Rules({"live.verdict_hold": 0.0}))
    shown = [(s.t, a.add(s).verdict.axis, raw.add(s).verdict.axis) for s in snaps]
    t_window = next(t for t, _, axis in shown if axis == "data")  # the window's own call, no hysteresis
    t_switch = next(t for t, axis, _ in shown if axis == "data")
    assert 5.0 <= t_switch - t_window <= 5.25, (t_window, t_switch)
    assert a.summary().verdict_changes == 1


# --- power and clocks -----------------------------------------------------------------------------------


def gpu_snap(t, power, limit=None, events=None, util=99.0):
    g = GpuSample(0, "A100", util, 40.0, 10 * GIB, 80 * GIB, power_w=power, power_limit_w=limit, clock_events=events)
    return Snapshot(t=t, dt=1.0, gpus=(g,), host=None)


def test_clock_event_reasons_name_the_power_cap():
    st, _ = run([gpu_snap(i, 395.0, 400.0, events=("sw_power_cap",)) for i in range(30)])
    f = next(f for f in st.findings if f.id == "machine/throttling")
    assert f.title == "GPU clocks held down by the power cap"
    assert st.stats.throttle_reasons == (("power cap", 100.0),)
    # The clock-event reason says it directly: no second, inferred power-cap finding.
    assert not any(f.id == "machine/power-cap" for f in st.findings)


def test_power_at_the_enforced_limit_is_a_power_cap():
    st, _ = run([gpu_snap(i, 392.0 + (i % 5), 400.0) for i in range(30)])
    f = next(f for f in st.findings if f.id == "machine/power-cap")
    assert st.stats.power_basis == "enforced limit" and st.stats.power_capped_gpus == 1
    assert "no power limit" not in f.detail


def test_steady_power_well_under_the_limit_is_not_capped():
    # Symmetric scatter around 300 W, limit 400 W: steady load, not a cap.
    st, _ = run([gpu_snap(i, 300.0 + ((-1) ** i) * (i % 7), 400.0) for i in range(40)])
    assert st.stats.power_capped_gpus == 0
    assert not any(f.id == "machine/power-cap" for f in st.findings)


def test_symmetric_power_without_a_limit_is_no_ceiling():
    st, _ = run([gpu_snap(i, 300.0 + ((-1) ** i) * (i % 7)) for i in range(40)])
    assert st.stats.power_capped_gpus == 0


def test_pinned_power_without_any_limit_is_no_cap():
    """A maximum of the samples is not a limit (issue 23 item 5): an unknown board with no NVML
    limit gets no power-cap finding however flat its power sits."""
    snaps = [
        Snapshot(
            t=i,
            dt=1.0,
            host=None,
            gpus=(GpuSample(0, None, 99.0, 40.0, 10 * GIB, 80 * GIB, power_w=390.0 + (i % 3) * 0.5),),
        )
        for i in range(40)
    ]
    st, _ = run(snaps)
    assert st.stats.power_capped_gpus == 0
    assert not any(f.id == "machine/power-cap" for f in st.findings)


def test_device_table_limit_stands_in_for_a_missing_nvml_limit():
    # an A100 (40 GB SXM: 400 W default limit) at 392–396 W with no NVML limit reported: at its limit
    st, _ = run([gpu_snap(i, 392.0 + (i % 5)) for i in range(30)])
    assert st.stats.power_capped_gpus == 1
    assert any(f.id == "machine/power-cap" for f in st.findings)


def test_nanogpt_log_is_stable_and_not_called_capped():
    """The recorded 8-GPU nanoGPT log (A100s at 100 %, power pinned under ~400 W, no GPU name and no
    limit in the log): at most two verdict changes, no power-cap finding from the sample maxima, and
    no 'fluctuates' from its start-up and tail."""
    import pathlib
    import subprocess
    import sys

    csv = pathlib.Path(__file__).parent / "data" / "nvml" / "nanogpt_8gpu_gpu_metrics.csv"
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", "--replay", str(csv), "--headless", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    summary = lines[-1]
    assert summary["verdict_changes"] <= 2 and len(summary["changes"]) <= 3, summary["changes"]
    ids = [f["id"] for f in summary["findings"]]
    assert "machine/power-cap" not in ids and "gpu/fluctuating" not in ids
    # Per sample, too: the shown verdict never flaps.
    shown = [s["verdict"]["axis"] for s in lines[:-1]]
    assert sum(1 for a, b in zip(shown, shown[1:]) if a != b) <= 2
    # The samples do sit under a flat maximum (within 1.5 % of the median) — which is no limit.
    import csv as csvmod

    per: dict[int, list[float]] = {}
    with open(csv) as fh:
        for r in csvmod.DictReader(fh):
            if float(r["utilization_gpu_percent"]) >= 70:
                per.setdefault(int(r["gpu_index"]), []).append(float(r["power_W"]))
    import statistics

    assert all(max(v) - statistics.median(v) <= 0.015 * statistics.median(v) for v in per.values())


def data_bound_cpu_job(cores: int, cpu_pct: float, gpus: int = 0):
    out = []
    for i in range(12):
        g = tuple(GpuSample(k, "G", 5.0) for k in range(gpus))
        out.append(
            Snapshot(
                t=float(i),
                dt=1.0,
                gpus=g,
                host=HostSample(cpu_pct, (cpu_pct,) * cores),
                step=StepSample(10, 150_000_000, 250_000_000, 20_000_000),
                step_mode="on",
            )
        )
    return evaluate(out, Rules())


def test_the_worker_fix_fits_the_machines_cores():
    # Issue 28: "num_workers=8 # ≈ CPU cores per GPU" and "up to 5.99×" on a 2-core machine at 100 % CPU.
    st = data_bound_cpu_job(cores=2, cpu_pct=100.0)
    fx = next(f for f in st.fixes if f.finding == "data/input-wait")
    assert "num_workers=1,  # 2 CPU cores here" in fx.change and "num_workers=8" not in fx.change
    assert fx.projected_speedup is None and "already 100 % busy" in fx.basis
    # Spare cores: the projection stands, and the count is cores per GPU minus one for the training process.
    st = data_bound_cpu_job(cores=64, cpu_pct=20.0, gpus=8)
    fx = next(f for f in st.fixes if f.finding == "data/input-wait")
    assert "num_workers=7,  # 64 CPU cores here, 8 GPUs" in fx.change
    assert fx.projected_speedup == round(1 / (1 - 0.6), 3)


def test_the_loader_fix_of_a_job_whose_dataloader_was_timed_does_not_say_it_has_none():
    """Issue 37: watch's fix said "no DataLoader in the trace: wrap the loading code in a Dataset"
    for a job whose DataLoader it had measured step by step (the step hook times its batches)."""
    st = data_bound_cpu_job(cores=8, cpu_pct=20.0)
    fx = next(f for f in st.fixes if f.finding == "data/input-wait")
    assert "DataLoader(" in fx.change and "no DataLoader" not in fx.change
