"""The findings registry: every finding declared once, every consumer knows every finding, the
verdict is the largest sink of step time, and small stakes are findings, not ranked fixes."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import re
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.conftest import KINETO
from tests.conftest import analysis as _analysis
from trainscope.analyzers import findings as registry
from trainscope.analyzers.findings import LIVE_STEPS
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings import validate
from trainscope.analyzers.findings.base import AXES
from trainscope.analyzers.findings.base import GRADES
from trainscope.analyzers.rules import Rules

ROOT = Path(__file__).resolve().parent.parent


def _path(name: str) -> Path:
    for p in (DATA / "kineto" / name, DATA / "cpu" / name):
        if p.exists():
            return p
    return DATA / "labeled" / "kineto" / name


@functools.cache
def analysis(name: str):
    if (DATA / "kineto" / name).exists():
        return _analysis(name)
    from trainscope.analyzers.trace.analysis import analyze_trace
    from trainscope.collectors import open_traces

    return analyze_trace(open_traces(str(_path(name))).traces[0])


def raw_document(name: str):
    with gzip.open(_path(name), "rb") as f:
        return json.load(f)


def consumer_gaps(reg: dict) -> list[str]:
    """Every (finding, consumer) pair where the consumer does not know the finding."""
    from trainscope.analyzers.compare.diff import FINDING_METRICS
    from trainscope.analyzers.deep.critical_path import FAMILY_LABELS
    from trainscope.analyzers.deep.critical_path import FINDING_FAMILY
    from trainscope.reports.document import HEADLINES

    gaps = []
    for fid, s in reg.items():
        if fid not in HEADLINES:
            gaps.append(f"{fid}: reports (no headline)")
        if fid not in FINDING_METRICS:
            gaps.append(f"{fid}: diff (no measure)")
        if s.critical_path != "none" and FINDING_FAMILY.get(fid) not in FAMILY_LABELS:
            gaps.append(f"{fid}: --deep (no critical-path family)")
        if s.live is not None and s.fix is None:
            gaps.append(f"{fid}: live engine (no fix)")
        if s.can_be_primary and s.label_class is None:
            gaps.append(f"{fid}: labeled benchmark (no class)")
        if s.fix is None:
            gaps.append(f"{fid}: recommendations (no fix)")
    return gaps


def test_the_registry_is_complete_and_every_consumer_knows_every_finding():
    assert validate() == []
    assert consumer_gaps(REGISTRY) == []
    assert len(REGISTRY) >= 18  # data 5, host 3, comm 1, memory 4, kernels 2, ranks 1, live 2


@pytest.mark.parametrize("missing", ["fix", "diff_measure", "critical_path"])
def test_a_finding_registered_without_fix_diff_measure_or_critical_path_fails_the_registry_test(missing, monkeypatch):
    base = REGISTRY["host/sync"]
    bad = dataclasses.replace(base, id="host/new-rule", **{missing: None})
    reg = dict(REGISTRY, **{bad.id: bad})
    problems = validate(reg)
    assert problems and all(p.startswith("host/new-rule: ") for p in problems)
    what = {"fix": "no fix", "diff_measure": "no diff measure", "critical_path": "no critical-path category"}[missing]
    assert any(what in p for p in problems)
    # Registered for real (as a new family module would), the consumer walk fails on it too.
    monkeypatch.setitem(REGISTRY, bad.id, bad)
    gaps = consumer_gaps(REGISTRY)
    assert any(g.startswith("host/new-rule: ") for g in gaps)
    # ...and a complete declaration added to a copy passes the declaration check.
    assert validate(dict(REGISTRY_COPY := {k: v for k, v in REGISTRY.items() if k != bad.id})) == []
    assert bad.id not in REGISTRY_COPY


def test_no_consumer_keeps_a_table_of_finding_ids_of_its_own():
    """Finding ids appear as string literals only in their declaration (and in rules that raise
    live findings or say which finding they refine): a table keyed by ids elsewhere is a second
    registry that the next finding would miss."""
    ids = set(REGISTRY)
    families = "|".join(sorted({i.split("/")[0] for i in ids}))
    pattern = re.compile(r'(?:^|[{,])\s*"((?:' + families + r')/[a-z-]+)"\s*:', re.M)
    offenders = []
    for folder in ("analyzers", "reports", "tui", "trainscope"):
        for p in (ROOT / folder).rglob("*.py"):
            if "findings" in p.parts:
                continue
            for m in pattern.finditer(p.read_text()):
                if m.group(1) in ids:
                    offenders.append(f"{p.relative_to(ROOT)}: {m.group(1)}")
    assert offenders == []


# -- properties of the registry: every finding, from every rule, through its spec -------------------


def test_ids_are_unique_and_each_spec_is_declared_in_one_family_module():
    declared = [s for fam in registry.FAMILIES for s in fam.SPECS]
    assert len({s.id for s in declared}) == len(declared) == len(REGISTRY)
    for s in declared:
        assert re.fullmatch(r"[a-z]+/[a-z-]+", s.id), s.id
        assert sum(s in fam.SPECS for fam in registry.FAMILIES) == 1, s.id


def test_every_spec_has_wording_a_rule_and_thresholds_with_default_unit_and_source():
    table = {t.name: t for t in Rules().all()}
    for fid, s in REGISTRY.items():
        assert s.axis in AXES and s.title and s.headline and s.describes, fid
        assert s.fix is not None and s.fix.title and s.fix.pytorch and s.fix.native, fid
        assert s.measure is not None or s.live is not None or s.snapshot, f"{fid}: no rule raises it"
        for n in s.threshold_names:
            t = table[n]  # a KeyError names a threshold the rule table lacks
            assert isinstance(t.value, float) and t.unit and t.meaning and t.source, (fid, n)
        if s.live is not None:
            assert s.live.step in LIVE_STEPS and s.live.reads, fid


def test_each_findings_wording_and_rules_live_in_its_family_module():
    """A finding's headline, detail, fix text and rules are declared beside its spec: the module that
    declares the spec defines every function the spec names."""
    for fam in registry.FAMILIES:
        for s in fam.SPECS:
            fns = [s.measure, s.title_words, s.detail_words, s.live.rule if s.live else None]
            fns += [f.text for f in (s.fix, *s.alternatives) if f is not None]
            fns += [f.cold_start for f in (s.fix, *s.alternatives) if f is not None]
            for fn in fns:
                if fn is not None:
                    assert fn.__module__ == fam.__name__, (s.id, fn.__qualname__, fn.__module__)


class RecordingRules(Rules):
    """The rule table, remembering which thresholds were read."""

    def __init__(self, overrides=None):
        super().__init__(overrides)
        self.read: set[str] = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)

    def value(self, name):
        self.read.add(name)
        return super().value(name)


def _findings_check(found, where: str) -> set[str]:
    """Every finding a rule emitted has a spec whose axis it carries, and a grade."""
    for f in found:
        s = REGISTRY.get(f.id)
        assert s is not None, f"{where}: {f.id} is not declared"
        assert f.axis == s.axis and f.severity in GRADES and f.title, (where, f.id)
    return {f.id for f in found}


# Bundled GPU traces the two tests below run on.
GPU_TRACES = [
    "resnet50_v100_num_workers_0.pt.trace.json.gz",
    "hta_a100_80gb_rank0.json.gz",
    "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz",
    "tracelens_h100_qwen_inference.json.gz",
]


@pytest.mark.parametrize(
    "name",
    [*GPU_TRACES, "slow.pt.trace.json.gz"],  # training on the CPU: the step-exact input wait alone
)
def test_every_finding_analyze_raises_on_a_bundled_trace_has_a_spec(name):
    a = analysis(name)
    ids = _findings_check(a.findings, name)
    assert ids and all(REGISTRY[i].offline for i in ids)
    assert a.verdict.bottleneck is None or a.verdict.bottleneck in REGISTRY
    assert {r.finding for r in a.recommendations} <= ids
    # ...and each trace rule reads only the thresholds its spec declares (default, unit, source).
    for s in registry.specs(offline=True):
        rules = RecordingRules()
        s.measure(a.observations, rules)
        assert rules.read <= set(s.threshold_names), (s.id, rules.read - set(s.threshold_names))


def _snap(t, workers=None, rss=None, **kw):
    """A live sample on a 16 GiB host (8 used) whose ``workers`` DataLoader workers use 40 % CPU each."""
    from tests.live_snapshots import GIB
    from tests.live_snapshots import snap

    return snap(
        float(t), workers=(workers, 40.0) if workers else None, main_rss=rss, host_mem=(8 * GIB, 16 * GIB), **kw
    )


def _step(wait):
    from trainscope.traces.samples import StepSample

    return StepSample(5, int(2e8 * wait), int(2e8))


# Synthetic windows, one per live pattern: (snapshots, the finding it must raise).
LIVE_WINDOWS = {
    "loader CPU saturated while the GPU idles": ([_snap(t, util=3, cpu=95) for t in range(30)], "data/loader-cpu"),
    "I/O wait while the GPU idles": ([_snap(t, util=3, iowait=70) for t in range(30)], "data/io-wait"),
    "step-exact DataLoader wait": (
        [_snap(t, util=30, step=_step(0.5), workers=2) for t in range(30)],
        "data/input-wait",
    ),
    "memory near capacity": ([_snap(t, util=95, mem=(78, 80)) for t in range(30)], "machine/capacity"),
    "GPM: SMs busy, DRAM quiet": ([_snap(t, util=95, sm=90, dram=20) for t in range(30)], "algorithm/compute-bound"),
    "GPM: DRAM busy, SMs quiet": ([_snap(t, util=95, sm=20, dram=90) for t in range(30)], "machine/bandwidth"),
    "NVML: memory controller busy": ([_snap(t, util=95, mem_ctrl=80) for t in range(30)], "machine/bandwidth"),
    "NVML: busy, modest traffic": ([_snap(t, util=95, mem_ctrl=20) for t in range(30)], "algorithm/compute-bound"),
    "bursts and gaps": ([_snap(t, util=100 if t % 3 else 0) for t in range(45)], "gpu/fluctuating"),
    "never busy": ([_snap(t, util=40) for t in range(30)], "gpu/underutilized"),
    "thermal clock events": ([_snap(t, util=95, events=("sw_thermal",)) for t in range(30)], "machine/throttling"),
    "power at the enforced limit": (
        [_snap(t, util=95, power=699.0 - t % 3, limit=700.0) for t in range(30)],
        "machine/power-cap",
    ),
    "GPU memory climbing": (  # no step timings: trends are read after live.trend_after_s (30 s)
        [_snap(t, util=95, mem=(10 + t, 60), mem_ctrl=20) for t in range(45)],
        "machine/memory-creep",
    ),
}


@pytest.mark.parametrize("label", list(LIVE_WINDOWS))
def test_every_finding_the_live_engine_raises_has_a_spec_with_a_live_measure(label):
    from trainscope.analyzers.live.engine import LiveAnalyzer

    snaps, expected = LIVE_WINDOWS[label]
    rules = Rules({"live.min_steps": 2, "live.min_step_seconds": 0.1})
    la = LiveAnalyzer(rules, window_s=10)
    raised: set[str] = set()
    for x in snaps:
        st = la.add(x)
        raised |= _findings_check(st.findings, label)
        assert {fx.finding for fx in st.fixes} <= {f.id for f in st.findings}
    end = la.summary()
    raised |= _findings_check(end.findings, label)
    assert expected in raised, (label, raised)
    assert all(REGISTRY[i].live is not None for i in raised)
    assert end.verdict.bottleneck is None or REGISTRY[end.verdict.bottleneck].live is not None


def test_every_live_measure_is_exercised_and_reads_only_the_thresholds_it_declares():
    from trainscope.analyzers.live.window_stats import window_stats

    assert {e for _, e in LIVE_WINDOWS.values()} == {s.id for s in registry.live_specs()}
    for label, (snaps, _) in LIVE_WINDOWS.items():
        stats = window_stats(snaps, Rules({"live.min_steps": 2, "live.min_step_seconds": 0.1}))
        for s in registry.live_specs():
            rules = RecordingRules({"live.min_steps": 2, "live.min_step_seconds": 0.1})
            s.live.rule(stats, snaps, rules)
            assert rules.read <= set(s.live.thresholds), (label, s.id, rules.read - set(s.live.thresholds))


def test_the_live_engine_evaluates_specs_in_flowchart_order():
    order = [s.live.step for s in registry.live_specs()]
    assert order == sorted(order, key=LIVE_STEPS.index)
    data = [s.id for s in registry.live_specs() if s.live.step == "data"]
    assert data[0] == "data/input-wait"  # measured (step-exact) before inferred (counter patterns)


def test_every_finding_the_snapshot_rules_raise_has_a_spec():
    from trainscope.analyzers.snapshot.summary import snapshot_findings
    from trainscope.analyzers.snapshot.summary import snapshot_memory
    from trainscope.collectors.snapshot import load_snapshot

    raised: set[str] = set()
    for name in ("mem_oom_flexgen_opt.pickle", "mem_cs336_nothanmin_trainstep.pickle.gz"):
        mem = snapshot_memory(load_snapshot(str(DATA / "memory" / name)))
        for cap, rules in ((None, {}), (1.0, {"memory.fragmentation": 0.0})):
            rules = RecordingRules(rules)
            found = snapshot_findings(mem, cap, rules)
            raised |= _findings_check(found, name)
            declared = {n for s in REGISTRY.values() if s.snapshot for n in s.threshold_names}
            assert rules.read <= declared, rules.read - declared
    assert raised == {s.id for s in REGISTRY.values() if s.snapshot}


def test_a_new_live_finding_is_its_spec_alone(monkeypatch):
    """Adding a finding: declare its spec (with its live measure and the thresholds it reads) in its
    family module; the live engine, its fix and the checks pick it up with no other edit."""
    from trainscope.analyzers.findings.base import LiveMeasure
    from trainscope.analyzers.live.engine import evaluate

    def rule(s, _snaps, rules):
        if s.iowait_pct is None or s.iowait_pct < rules.value("live.iowait_saturated"):
            return None
        return new.finding(s.iowait_pct, [], "test", rules, severity="info")

    base = REGISTRY["machine/throttling"]
    new = dataclasses.replace(
        base, id="machine/new-rule", live=LiveMeasure("clocks", "I/O wait", rule, ("live.iowait_saturated",))
    )
    monkeypatch.setitem(REGISTRY, new.id, new)
    assert validate() == []
    st = evaluate([_snap(t, util=95, iowait=60) for t in range(10)], Rules())
    assert "machine/new-rule" in {f.id for f in st.findings}
    assert "machine/new-rule" in {fx.finding for fx in st.fixes}
    bad = dataclasses.replace(new, live=LiveMeasure("later", "", rule, ("live.no_such",)))
    problems = validate(dict(REGISTRY, **{new.id: bad}))
    assert any("live step 'later'" in p for p in problems) and any("live.no_such" in p for p in problems)
    assert any("does not say what it reads" in p for p in problems)


def test_every_fix_renders_for_training_inference_and_native_runs():
    from trainscope.analyzers.trace.context import Context

    for ctx in (None, Context(mode="inference"), Context(mode="training", framework="native")):
        for s in REGISTRY.values():
            title, change = s.fix.render(ctx)
            assert title and change
            if ctx is not None and ctx.native:
                assert "torch" not in change, s.id  # a C++/MPI code gets no PyTorch snippet


# -- sinks and the verdict ---------------------------------------------------------------------------


def test_sinks_are_exclusive_and_sum_to_step_time():
    for name in (
        "resnet50_v100_num_workers_0.pt.trace.json.gz",
        "hta_a100_80gb_rank0.json.gz",
        "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz",
    ):
        a = analysis(name)
        assert sum(s.ns for s in a.sinks.by_key.values()) == pytest.approx(
            a.breakdown.total_ns, abs=len(a.sinks.by_key)
        )
        assert sum(s.pct for s in a.sinks.by_key.values()) == pytest.approx(100.0, abs=1e-6)


def test_blocking_copy_is_the_sync_sink_measured_from_raw_events():
    """SGLang on MI300X: one hipMemcpyWithStream blocks the host ≈ 493 ms while the GPU idles. The
    sync sink is that wait, re-derived from the raw events: the call's overlap with the GPU-activity
    window, less the GPU's busy time inside it."""
    name = "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz"
    a = analysis(name)
    ev = raw_document(name)["traceEvents"]
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    lo, hi = gpu[0][0], max(e for _, e in gpu)
    (cp,) = [e for e in ev if e.get("name") == "hipMemcpyWithStream" and e["dur"] > 1e5]
    s, e = max(cp["ts"], lo), min(cp["ts"] + cp["dur"], hi)
    busy = 0.0
    for gs, ge in gpu:  # kernels do not overlap here; clip each to the call
        busy += max(0.0, min(ge, e) - max(gs, s))
    idle_in_call = (e - s) - busy
    assert a.sinks.pct("sync") == pytest.approx(100 * idle_in_call / (hi - lo), abs=0.5)
    assert a.verdict.bottleneck in ("host/sync", "host/blocking-sync")
    assert "runner-up" in a.verdict.summary and a.verdict.runner_up is not None
    assert any(
        e.metric.startswith("largest sink of step time") and e.value == pytest.approx(a.sinks.pct("sync"), abs=0.01)
        for e in a.verdict.evidence
    )


def test_kernel_work_cannot_lead_on_a_starved_gpu():
    """ResNet-50 on a V100 with num_workers=0: compute-bound convolutions (≈ 37 % of the step) are a
    larger sink than the input wait (≈ 34 %), but with the GPU busy 56 % the kernels do not set the
    step's length: the input pipeline does (the textbook flowchart's first test)."""
    a = analysis("resnet50_v100_num_workers_0.pt.trace.json.gz")
    assert a.sinks.pct("compute-bound") > a.sinks.pct("input") > 30
    assert not a.sinks.saturated and a.verdict.bottleneck == "data/input-wait"
    assert a.verdict.runner_up == "host/launch-overhead"  # the next cause that could lead


# -- no noise --------------------------------------------------------------------------------------


def test_small_stakes_are_findings_not_ranked_fixes():
    from trainscope.analyzers.trace.recommendations import recommend

    a = analysis("hta_a100_80gb_rank0.json.gz")
    rules = Rules()
    # A 32 µs stake in a 216 ms step is graded info, never [high].
    tiny = 100 * 0.032 / a.breakdown.step_ms.mean
    for s in REGISTRY.values():
        if s.severity.fixed is None:
            assert s.severity.grade(tiny, rules) == "info", s.id
    f = REGISTRY["host/blocking-sync"].finding(tiny, [], "", rules)
    assert f.severity == "info"
    recs = recommend([f], a.breakdown, a.device_spec, a.device_name, a.context, rules)
    assert recs == []  # projected below 1.02×: kept as a finding, not ranked
    big = REGISTRY["host/blocking-sync"].finding(20.0, [], "", rules)
    (r,) = recommend([big], a.breakdown, a.device_spec, a.device_name, a.context, rules)
    assert r.projected_speedup >= 1.02 and big.severity == "high"


@pytest.mark.parametrize(
    "name",
    GPU_TRACES,
)
def test_no_ranked_fix_reads_up_to_1_00x_and_severity_follows_the_stake(name):
    a = analysis(name)
    rules = Rules()
    for r in a.recommendations:
        assert r.projected_speedup is None or r.projected_speedup >= rules.value("fix.min_speedup")
        assert "1.00×" not in r.projection_text
    for f in a.findings:
        sev = REGISTRY[f.id].severity
        if sev.fixed is None and f.severity == "high":
            assert f.stake_pct >= rules.value(sev.high), f.id


def test_rank_imbalance_is_the_wait_for_the_busiest_rank():
    """DLRM, 2 ranks: rank 1 carries more kernel work (the label's slower rank); rank 0 waits for it
    inside the all-to-all. That wait, the difference of their compute-kernel time per step, moves
    from rank 0's communication sink to its imbalance sink; rank 1 keeps none."""
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import analyze_set
    from trainscope.analyzers.trace.analysis import analyze_trace
    from trainscope.analyzers.trace.analysis import slowest
    from trainscope.analyzers.trace.analysis import with_rank_imbalance
    from trainscope.collectors import open_traces

    ts = open_traces(str(KINETO / "hta_dlrm_ws128_2ranks"))
    r0, r1 = with_rank_imbalance(analyze_set(ts), Rules())  # the reduce's estimate (no alignment asked)
    alone = analyze_trace(ts.traces[0])  # rank 0 judged by itself

    def per_step(a, c: str) -> float:
        return a.breakdown.ns[c] / len(a.breakdown.steps)

    assert per_step(r1, "compute") > per_step(r0, "compute") and slowest([r0, r1]).rank == 1
    wait = per_step(r1, "compute") - per_step(r0, "compute")
    assert r0.sinks.by_key["imbalance"].ns == pytest.approx(wait * len(r0.breakdown.steps), abs=2)
    assert r0.sinks.pct("comm") + r0.sinks.pct("imbalance") == pytest.approx(alone.sinks.pct("comm"), abs=1e-6)
    assert r1.sinks.pct("imbalance") == 0 and alone.sinks.pct("imbalance") == 0
    assert sum(s.pct for s in r0.sinks.by_key.values()) == pytest.approx(100.0, abs=1e-6)
    f = next(x for x in r0.findings if x.id == "ranks/imbalance")
    assert f.stake_pct == pytest.approx(r0.sinks.pct("imbalance")) and any(
        "busiest rank (rank 1)" in e.metric for e in f.evidence
    )


def test_sinks_split_a_breakdown_exclusively_and_rank_by_eligibility():
    """Hand-built breakdown (one 100 ms step): every ns lands in one sink; host frames move idle
    'other' time to input; a blocking-sync bubble beyond the sync idle comes out of launch; kernel
    work leads only when the GPU is saturated; a sink below its floor is no verdict."""
    from trainscope.analyzers.trace.breakdown import Breakdown
    from trainscope.analyzers.trace.breakdown import Percentiles
    from trainscope.analyzers.trace.breakdown import StepBreakdown
    from trainscope.analyzers.trace.sinks import split_sinks

    ms = 1_000_000
    ns = {
        "compute": 40 * ms,
        "communication": 5 * ms,
        "copy": 2 * ms,
        "memset": 1 * ms,
        "idle_data_wait": 10 * ms,
        "idle_sync": 2 * ms,
        "idle_host_overhead": 15 * ms,
        "idle_other": 25 * ms,
    }
    step = StepBreakdown("s", 0, 100 * ms, ns, 10 * ms)
    p = Percentiles(100.0, 100.0, 100.0)
    b = Breakdown(0, [step], 100 * ms, ns, 10 * ms, p, dict.fromkeys(ns, p))
    s = split_sinks(
        b,
        busy_split={"memory": 3, "compute": 1, "unknown": 0},
        busy_source="test",
        host_idle_ns={"input-preprocessing": 20 * ms},
        sync_bubble_ns=5 * ms,
        saturated=False,
        floors={"input": 5.0, "launch": 3.0, "memory-bound": 30.0},
    )
    assert sum(x.ns for x in s.by_key.values()) == 100 * ms
    assert s.pct("input") == pytest.approx(30) and s.pct("idle-unexplained") == pytest.approx(5)
    assert s.pct("sync") == pytest.approx(5) and s.pct("launch") == pytest.approx(12)
    assert s.pct("memory-bound") == pytest.approx(31) and s.pct("compute-bound") == pytest.approx(10)
    assert s.leader.key == "input"  # memory-bound is larger but the GPU is starved
    assert s.runner_up.key == "launch"
    sat = split_sinks(
        b, busy_split={"memory": 3, "compute": 1}, busy_source="test", saturated=True, floors={"memory-bound": 50.0}
    )
    assert sat.pct("memory-bound") == pytest.approx(31) and sat.leader.key == "launch"  # 31 % < its 50 % floor
    assert sat.explained_ns >= sat.by_key["memory-bound"].ns  # below its floor, still an explained sink


def test_docs_list_every_finding_of_the_registry():
    """docs/analysis.md's findings table is the registry's own (it named 19 of 24 when written by hand)."""
    doc = (ROOT / "docs" / "analysis.md").read_text(encoding="utf-8")
    table = doc.split("<!-- findings:begin -->\n", 1)[1].split("<!-- findings:end -->", 1)[0]
    assert table == registry.findings_markdown()
    listed = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    assert listed == list(REGISTRY) and len(listed) == len(REGISTRY)
    for fam in registry.FAMILIES:  # the families named in the prose are the registry's
        assert f"`{fam.__name__.rsplit('.', 1)[1]}`" in doc.split("<!-- findings:begin -->")[0]
