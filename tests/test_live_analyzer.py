"""The live rules on injected snapshots: each rule's trigger, warming up, time weighting, the
verdict-change log, threshold overrides, and the JSON-line vocabulary shared with analyze."""
from __future__ import annotations

import json

import pytest

from trainscope.analyzers.live import READY, WARMING_UP, LiveAnalyzer, evaluate, window_stats
from trainscope.analyzers.rules import Rules
from trainscope.collectors.samples import GpuSample, HostSample, ProcessGroup, Snapshot, StepSample

GIB = 2**30


def snap(t, util=None, mem_ctrl=5.0, mem=(10, 80), cpu=20.0, iowait=0.0, workers=None, main_cpu=50.0,
         sm=None, tensor=None, dram=None, step=None, dt=1.0, events=None) -> Snapshot:
    gpus = () if util is None else (GpuSample(0, "H100", util, mem_ctrl, mem[0] * GIB, mem[1] * GIB, sm_util=sm,
                                              tensor_util=tensor, dram_bw_util=dram, clock_events=events),)
    groups = [ProcessGroup("main", 1, main_cpu, 1)]
    if workers:
        groups.append(ProcessGroup("workers", workers[0], workers[1] * workers[0], 1))
    return Snapshot(t=t, dt=dt, gpus=gpus, host=HostSample(cpu, (), iowait, 1, 2, None, tuple(groups)),
                    step=step, step_mode="on" if step else "off")


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
    from trainscope.analyzers.analysis import analyze_set
    from trainscope.collectors import open_traces
    from trainscope.reports.document import build_document
    from trainscope.reports.live import status_line_dict, summary_dict

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
