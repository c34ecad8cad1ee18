"""Findings on the module tree (analyzers/findings/tree.py): synthetic trees at the thresholds' edges,
synthetic traces end to end, and the bundled traces with module ranges for the numbers.

The real-trace figures were read from each trace's tree (shares of the window's GPU time as
tests/test_module_tree.py counts them from the raw events) before the findings were written; the
stakes are re-derived here from the node's own figures with the formula the docs state, so a change
to either the tree or the rule shows."""

from __future__ import annotations

import functools
import pathlib
from types import SimpleNamespace

import pytest

from tests.test_module_tree import _with_frames
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings.tree import BACKWARD_RATIO
from trainscope.analyzers.findings.tree import SLOW_COMPUTE_REGION
from trainscope.analyzers.findings.tree import SLOW_INSTANCE
from trainscope.analyzers.findings.tree import SLOW_MEMORY_REGION
from trainscope.analyzers.findings.tree import backward_ratio
from trainscope.analyzers.findings.tree import instance_excess_ns
from trainscope.analyzers.findings.tree import region_saving_ns
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.analyzers.trace.module_tree import OUTSIDE
from trainscope.analyzers.trace.module_tree import ModuleTree
from trainscope.analyzers.trace.module_tree import Node
from trainscope.collectors.inputs import open_traces
from trainscope.traces.builder import TraceBuilder

DATA = pathlib.Path(__file__).parent / "data"
QWEN = DATA / "kineto" / "tracelens_h100_qwen_inference.json.gz"
TIMESFORMER = DATA / "kineto" / "tl_h100_timesformer_k400_infer.json.gz"
SGLANG = DATA / "kineto" / "tl_mi300x_sglang_qwen3-8b_prefilldecode.json.gz"
RESNET = DATA / "kineto" / "tracelens_mi300x_resnet_ckpt.json.gz"
HTA_DLRM = DATA / "kineto" / "hta_a100_80gb_rank0.json.gz"
V100 = DATA / "kineto" / "hta_v100_test.json.gz"
CS336 = DATA / "nsys" / "cs336_small_train_step_a100.sqlite"
CS336_DDP = DATA / "nsys" / "cs336_ddp_2x3090.sqlite"

MS = 1_000_000
TREE_IDS = {s.id for s in (SLOW_MEMORY_REGION, SLOW_COMPUTE_REGION, SLOW_INSTANCE, BACKWARD_RATIO)}


# --- synthetic trees: the rules at their edges ---------------------------------------------------------


def _node(
    path: tuple[str, ...],
    gpu: int,
    kids=(),
    kind="module",
    bound="memory",
    pct: float | None = 30.0,
    roof_ns: int | None = None,
    instances=1,
    count=1,
    spread=None,
    slowest=None,
    autograd=False,
    comm=0,
) -> Node:
    kids = list(kids)
    bound_ns = {bound: gpu - comm} if gpu - comm else {}
    if comm:
        bound_ns["communication"] = comm
    return Node(
        path=path,
        name=path[-1],
        kind=kind,
        count=count,
        host_ns=gpu,
        gpu_ns_inclusive=gpu,
        gpu_ns_exclusive=gpu - sum(c.gpu_ns_inclusive for c in kids),
        flops=None,
        bytes=None,
        tflops=2.0,
        gbps=400.0,
        bound=bound,
        share_of_peak_pct=pct,
        top_kernels=[("k", 1, gpu)],
        instances=instances,
        spread_ns=spread,
        slowest=slowest,
        children=kids,
        roof_ns=gpu if roof_ns is None else roof_ns,
        bound_ns=bound_ns,
        autograd=autograd,
    )


def _obs(roots: list[Node], total_ns: int, windows: int = 1) -> SimpleNamespace:
    tree = ModuleTree(roots, sum(r.gpu_ns_inclusive for r in roots), windows, {"module": 1}, 0)
    return SimpleNamespace(has_gpu=True, tree=tree, breakdown=SimpleNamespace(total_ns=total_ns))


def _ids(found) -> list[str]:
    return [f.id for f in found]


def test_a_dominating_region_below_its_roof_is_named_with_the_time_it_would_save():
    # 30 ms of a 100 ms window's GPU time, memory-bound at 30 % of roof: at 80 % its 30 ms of kernels
    # take 30 × 30 / 80 = 11.25 ms — 18.75 ms saved, 18.75 % of a 100 ms step.
    region = _node(("model", "attn"), 30 * MS, pct=30.0)
    rest = _node(("model", "mlp"), 70 * MS, pct=75.0)
    obs = _obs([_node(("model",), 100 * MS, [region, rest], pct=62.0)], 100 * MS)
    (f,) = SLOW_MEMORY_REGION.measure(obs, Rules())
    assert f.id == "machine/slow-region" and f.axis == "machine"
    assert f.stake_pct == pytest.approx(18.75) and f.severity == "high"
    assert "model › attn" in f.title and "30 % of the bandwidth roof" in f.title
    metrics = {e.metric.split(",")[0]: e for e in f.evidence}
    assert metrics["GPU time in model › attn"].value == 30.0 and metrics["GPU time in model › attn"].meets
    assert any(e.unit == "GB/s" and e.value == 400.0 for e in f.evidence)  # achieved bandwidth
    assert SLOW_COMPUTE_REGION.measure(obs, Rules()) == []  # the bound picks the finding


def test_region_edges_share_roof_and_phases():
    rules = Rules()
    share, low = rules.value("tree.region_share"), rules.value("tree.low_pct_of_roof")
    # at the share threshold: raised; just below: not
    at = _obs([_node(("r",), int(share * MS)), _node(("s",), int((100 - share) * MS), pct=90.0)], 100 * MS)
    below = _obs([_node(("r",), int(share * MS) - 1), _node(("s",), int((100 - share) * MS) + 1, pct=90.0)], 100 * MS)
    assert _ids(SLOW_MEMORY_REGION.measure(at, rules)) == ["machine/slow-region"]
    assert SLOW_MEMORY_REGION.measure(below, rules) == []
    # at the low-roof threshold: not raised (below it only); just under: raised
    for pct, raised in ((low, False), (low - 0.01, True)):
        obs = _obs([_node(("r",), 50 * MS, pct=pct), _node(("s",), 50 * MS, pct=90.0)], 100 * MS)
        assert bool(SLOW_MEMORY_REGION.measure(obs, rules)) is raised, pct
    # a phase and the work outside every range are never regions
    obs = _obs([_node(("forward",), 50 * MS, kind="phase"), _node((OUTSIDE,), 50 * MS, kind="outside")], 100 * MS)
    assert SLOW_MEMORY_REGION.measure(obs, rules) == []
    # communication or unknown bound: no roofline to be below
    obs = _obs([_node(("r",), 100 * MS, bound="communication"), _node(("u",), 100 * MS, bound="unknown")], 200 * MS)
    assert SLOW_MEMORY_REGION.measure(obs, rules) == [] and SLOW_COMPUTE_REGION.measure(obs, rules) == []


def test_nested_regions_name_the_innermost_and_stakes_never_exceed_the_node():
    inner = _node(("m", "layer", "attn"), 40 * MS, pct=20.0)
    layer = _node(("m", "layer"), 80 * MS, [inner, _node(("m", "layer", "mlp"), 40 * MS, pct=45.0)], pct=32.0)
    obs = _obs([_node(("m",), 80 * MS, [layer], pct=32.0)], 100 * MS)
    found = SLOW_MEMORY_REGION.measure(obs, Rules())
    # mlp (40 %, 45 % of roof) and attn (40 %, 20 %) both qualify and are leaves: m and layer are not named
    assert sorted(f.title.split(":")[0] for f in found) == ["m › layer › attn", "m › layer › mlp"]
    # a compute-bound region inside a memory-bound one: the inner one alone (no overlapping stakes)
    inner = _node(("m", "gemm"), 60 * MS, bound="compute", pct=20.0)
    obs = _obs([_node(("m",), 90 * MS, [inner], pct=30.0)], 100 * MS)
    assert SLOW_MEMORY_REGION.measure(obs, Rules()) == []
    assert _ids(SLOW_COMPUTE_REGION.measure(obs, Rules())) == ["algorithm/slow-region"]
    # the roof bounds the stake: at 0 % of roof it is the node's whole time at most
    n = _node(("x",), 10 * MS, pct=0.0)
    assert region_saving_ns(n, 80.0) == 10 * MS
    assert region_saving_ns(_node(("x",), 10 * MS, pct=85.0), 80.0) == 0.0
    # only the kernel time whose roof is known is scaled
    assert region_saving_ns(_node(("x",), 10 * MS, pct=40.0, roof_ns=4 * MS), 80.0) == pytest.approx(2 * MS)


def test_a_compute_bound_region_gets_the_compute_finding_and_its_fix():
    obs = _obs([_node(("r",), 60 * MS, bound="compute", pct=25.0), _node(("s",), 40 * MS, pct=90.0)], 100 * MS)
    (f,) = SLOW_COMPUTE_REGION.measure(obs, Rules())
    assert f.id == "algorithm/slow-region" and "compute roof" in f.title
    assert any(e.unit == "TFLOP/s" for e in f.evidence)
    assert SLOW_COMPUTE_REGION.fix.rec_id != SLOW_MEMORY_REGION.fix.rec_id
    title, change = SLOW_COMPUTE_REGION.fix.render(None)
    assert "tensor cores" in title and "allow_tf32" in change
    title, change = SLOW_MEMORY_REGION.fix.render(None)
    assert "bytes" in title and "torch.compile" in change


def test_a_slow_instance_is_raised_above_the_ratio_and_not_at_it():
    rules = Rules()
    r = rules.value("tree.instance_ratio")
    med = 2 * MS

    def block(mx: int, instances=4, autograd=False, bound="memory", count=None):
        return _node(
            ("m", "layer_0…3"),
            20 * MS,
            instances=instances,
            count=instances if count is None else count,
            spread=(med, med, mx),
            slowest="layer_2",
            autograd=autograd,
            bound=bound,
        )

    at = _obs([block(int(r * med))], 10 * MS)
    (f,) = SLOW_INSTANCE.measure(at, rules)
    # (max − median) × 1 occurrence per window = 1 ms of a 10 ms step
    assert f.stake_pct == pytest.approx(100 * (r - 1) * med / (10 * MS)) and "layer_2" in f.title
    assert any("layer_2" in e.metric for e in f.evidence)
    assert SLOW_INSTANCE.measure(_obs([block(int(r * med) - 1)], 10 * MS), rules) == []
    # two instances: the median is their mean, no instance is "slower than its siblings"
    assert SLOW_INSTANCE.measure(_obs([block(5 * med, instances=2)], 10 * MS), rules) == []
    # autograd's operators and collectives are not blocks
    assert SLOW_INSTANCE.measure(_obs([block(5 * med, autograd=True)], 10 * MS), rules) == []
    assert SLOW_INSTANCE.measure(_obs([block(5 * med, bound="communication")], 10 * MS), rules) == []
    # a tiny excess in a long step is not a finding (below the moderate grade)
    assert SLOW_INSTANCE.measure(_obs([block(int(1.6 * med))], 1_000 * MS), rules) == []
    # per window: 3 windows, each instance twice per window → (max − median) × 2 per window
    n = block(3 * med, count=4 * 3 * 2)
    assert instance_excess_ns(n, 3) == pytest.approx(2 * 2 * med)


def test_a_block_below_an_autograd_node_is_not_a_block():
    inner = _node(
        ("backward", "MulBackward0", "nccl:all_reduce"),
        10 * MS,
        kind="range",
        instances=3,
        count=3,
        spread=(MS, MS, 8 * MS),
        slowest="#1",
    )
    op = _node(("backward", "MulBackward0"), 10 * MS, [inner], kind="range", autograd=True)
    obs = _obs([_node(("backward",), 10 * MS, [op], kind="phase")], 10 * MS)
    assert SLOW_INSTANCE.measure(obs, Rules()) == []


def _phases(fwd: int, bwd: int, outside: int = 0, comm: int = 0, recompute: int = 0) -> list[Node]:
    kids = [_node(("backward", "Block_0"), recompute, kind="module")] if recompute else []
    roots = [
        _node(("forward",), fwd, kind="phase"),
        _node(("backward",), bwd + comm, kids, kind="phase", comm=comm),
    ]
    if outside:
        roots.append(_node((OUTSIDE,), outside, kind="outside"))
    return roots


def test_backward_ratio_band_edges_and_direction():
    rules = Rules()
    lo, hi = rules.value("tree.bwd_fwd_low"), rules.value("tree.bwd_fwd_high")
    f = 10 * MS
    assert BACKWARD_RATIO.measure(_obs(_phases(f, int(hi * f)), 100 * MS), rules) is None  # at the edge
    got = BACKWARD_RATIO.measure(_obs(_phases(f, int(hi * f) + 1_000), 100 * MS), rules)
    assert got is not None and got.severity == "info" and got.stake_pct == 0.0
    assert got.evidence[0].threshold == f"≥ {hi:g}" and got.evidence[0].meets
    assert BACKWARD_RATIO.measure(_obs(_phases(f, int(lo * f)), 100 * MS), rules) is None
    low = BACKWARD_RATIO.measure(_obs(_phases(f, int(lo * f) - 1_000), 100 * MS), rules)
    assert low is not None and "frozen" in low.detail and low.evidence[0].threshold == f"< {lo:g}"
    # only with both phases
    assert BACKWARD_RATIO.measure(_obs(_phases(f, 5 * f)[:1], 100 * MS), rules) is None


def test_backward_ratio_leaves_out_communication_and_holds_with_the_outside_work_on_either_side():
    rules = Rules()
    f = 10 * MS
    # 40 ms of all-reduce inside backward: 20 ms of compute is 2× forward — no finding
    assert BACKWARD_RATIO.measure(_obs(_phases(f, 2 * f, comm=40 * MS), 100 * MS), rules) is None
    assert backward_ratio(_obs(_phases(f, 2 * f, comm=40 * MS), 1).tree)[0] == pytest.approx(2.0)
    # 4× with 10 ms outside every range: given to forward it is 40 / 20 = 2× — not judged
    assert BACKWARD_RATIO.measure(_obs(_phases(f, 4 * f, outside=f), 100 * MS), rules) is None
    # 4× with 2 ms outside: 40 / 12 = 3.3× either way — raised, and the recomputation named
    got = BACKWARD_RATIO.measure(_obs(_phases(f, 4 * f, outside=2 * MS, recompute=f), 100 * MS), rules)
    assert got is not None and "activation checkpointing" in got.detail
    assert any("recomputation" in e.metric and e.value == 10.0 for e in got.evidence)


# --- synthetic traces end to end -------------------------------------------------------------------------


def _training(bwd_factor: float, slow_layer: int | None = None):
    """4 steps of 20 ms: a forward range holding Layer_0…3 (one 400 µs kernel each; ``slow_layer``
    takes 1.2 ms), then a backward range with one kernel ``bwd_factor`` × forward's GPU time."""
    b = TraceBuilder()
    frames = []
    for s in range(4):
        t0 = s * 20 * MS
        b.step(s + 1, t0, 20 * MS)
        b.annotation("## forward ##", t0 + 100_000, 4 * MS)
        gpu = t0 + 200_000
        fwd = 0
        for i in range(4):
            frames.append((f"nn.Module: Layer_{i}", t0 + 150_000 + i * 900_000, 800_000, 0))
            dur = 1_200_000 if i == slow_layer else 400_000
            c = b.launch(t0 + 200_000 + i * 900_000, 5_000)
            b.kernel("ampere_sgemm_128x64_nn", gpu, dur, c)
            gpu += dur
            fwd += dur
        b.annotation("## backward ##", t0 + 4_200_000, 15 * MS)
        c = b.launch(t0 + 4_300_000, 5_000)
        b.kernel("ampere_sgemm_128x64_tn", max(gpu, t0 + 4_400_000), int(bwd_factor * fwd), c)
    return _with_frames(b, frames)


def test_end_to_end_a_slow_layer_and_a_heavy_backward_are_findings_with_fixes():
    a = analyze_trace(_training(3.0, slow_layer=2))
    by_id = {f.id: f for f in a.findings}
    inst = by_id["algorithm/slow-instance"]
    # Layer_2: 1.2 ms against a median of 0.4 ms: 0.8 ms per 20 ms step
    assert "Layer_2" in inst.title and inst.stake_pct == pytest.approx(4.0, abs=0.05)
    ratio = by_id["algorithm/backward-ratio"]
    # forward 2.4 ms per step (0.4 × 3 + 1.2), backward 3 × that
    assert "3.0×" in ratio.title and ratio.evidence[1].value == pytest.approx(2.4)
    assert "even-out-instance" in {r.id for r in a.recommendations}
    assert a.verdict.bottleneck not in TREE_IDS  # never the verdict: can_be_primary is False
    even = _training(2.0)
    assert TREE_IDS.isdisjoint(f.id for f in analyze_trace(even).findings)


# --- the bundled traces: the numbers ------------------------------------------------------------------------


@functools.cache
def _analysis(path: pathlib.Path):
    return analyze_trace(open_traces(str(path)).traces[0])


def _mine(a, fid: str):
    return [f for f in a.findings if f.id == fid]


def test_qwen_attention_is_a_memory_bound_region_at_40_percent_of_roof():
    """Qwen2 on an H100: the attention blocks hold 34.28 % of the window's GPU time (the raw-event
    count of tests/test_module_tree.py) at 39.6 % of the bandwidth roof. The decoder layer around them
    (68.8 %) runs at 53.9 % and the MLP at 68.6 %: only the attention is named."""
    a = _analysis(QWEN)
    (f,) = _mine(a, "machine/slow-region")
    node = a.tree.find("Qwen2Model_0", "Qwen2DecoderLayer_0…23", "Qwen2Attention_0…23")
    assert f.title.startswith("Qwen2Model_0 › Qwen2DecoderLayer_0…23 › Qwen2Attention_0…23:")
    assert f.evidence[0].value == pytest.approx(34.28, abs=0.05)
    assert f.evidence[1].value == pytest.approx(39.64, abs=0.05)
    want = 100 * node.roof_ns * (1 - node.share_of_peak_pct / 80) / a.breakdown.total_ns
    assert f.stake_pct == pytest.approx(want) and f.stake_pct == pytest.approx(15.79, abs=0.05)
    assert f.severity == "high" and not _mine(a, "algorithm/slow-region")
    # ranked after the broader fusion fix, which remains fix #1
    ids = [r.id for r in a.recommendations]
    assert ids[0] == "fuse-memory-bound" and "region-memory-traffic" in ids
    rec = next(r for r in a.recommendations if r.id == "region-memory-traffic")
    assert rec.projected_speedup == pytest.approx(1 / (1 - f.stake_pct / 100), abs=0.002)


def test_timesformer_self_attention_is_a_slow_region_on_softmax():
    a = _analysis(TIMESFORMER)
    (f,) = _mine(a, "machine/slow-region")
    assert "TimesformerSelfAttention_0…23" in f.title
    assert f.evidence[0].value == pytest.approx(87.71, abs=0.05)
    assert f.evidence[1].value == pytest.approx(33.26, abs=0.05)
    assert f.stake_pct == pytest.approx(21.22, abs=0.05)
    assert any("cunn_SoftMaxForward" in e.metric for e in f.evidence)
    assert a.recommendations[0].id == "dataloader-workers"  # the verdict's fix stays first


def test_sglang_prefill_gemms_are_compute_bound_regions_below_roof():
    """SGLang prefill on an MI300X: the gate/up projection (49.4 % of GPU time) and attention (25.9 %)
    run their hipBLASLt GEMMs at ≈ 457 TFLOP/s, 35–38 % of the bf16 roof."""
    a = _analysis(SGLANG)
    found = sorted(_mine(a, "algorithm/slow-region"), key=lambda f: -f.stake_pct)
    assert [f.title.split(":")[0].rsplit(" › ", 1)[1] for f in found] == [
        "MergedColumnParallelLinear_0…35",
        "Qwen3Attention_0…35",
    ]
    assert [round(f.evidence[0].value, 1) for f in found] == [49.4, 25.9]
    # the headline keeps the last three names of the path; the detail holds it whole
    assert found[0].title.startswith("… › Qwen3DecoderLayer_0…35 › Qwen2MLP_0…35 › MergedColumnParallelLinear_0…35:")
    assert found[0].detail.startswith("execute_15360_context_15(")
    assert [round(f.stake_pct, 1) for f in found] == [13.9, 5.4]
    assert found[0].evidence[2].value == pytest.approx(456.9, abs=0.5) and found[0].evidence[2].unit == "TFLOP/s"
    assert a.recommendations[0].id == "remove-syncs"


def test_backward_ratio_on_training_traces():
    # CS336 train step (A100, NVTX): 2.11× — in the band
    assert backward_ratio(_analysis(CS336).tree)[0] == pytest.approx(2.11, abs=0.01)
    assert not _mine(_analysis(CS336), "algorithm/backward-ratio")
    # ResNet with activation checkpointing and DDP: 29 % of GPU time is all-reduce in backward;
    # without it, 2.13× — in the band
    assert backward_ratio(_analysis(RESNET).tree)[0] == pytest.approx(2.13, abs=0.01)
    assert not _mine(_analysis(RESNET), "algorithm/backward-ratio")
    # DLRM: 4.45× between the phases, but 34.6 ms of GPU work outside every range could be forward's:
    # 106.7 / (24.0 + 34.6) = 1.82× — not judged
    a = _analysis(HTA_DLRM)
    assert backward_ratio(a.tree)[0] == pytest.approx(4.45, abs=0.01)
    assert not _mine(a, "algorithm/backward-ratio")
    # CS336 DDP on two 3090s: 15.5 ms of backward compute against 2.5 ms of forward, with 32.8 ms of
    # all-reduce left out
    a = _analysis(CS336_DDP)
    (f,) = _mine(a, "algorithm/backward-ratio")
    assert f.evidence[0].value == pytest.approx(6.15, abs=0.01)
    assert [e.value for e in f.evidence[1:4]] == [
        pytest.approx(2.52, abs=0.01),
        pytest.approx(15.51, abs=0.01),
        pytest.approx(32.77, abs=0.01),
    ]
    assert f.severity == "info" and f.stake_pct == 0.0


def test_no_slow_instance_from_collectives_or_autograd_operators():
    """The V100 test trace's DDP all-reduce buckets (12.4 ms against a 0.95 ms median) sit under
    autograd's AccumulateGrad: different buckets, not instances of one block."""
    a = _analysis(V100)
    node = a.tree.find("backward", "torch::autograd::AccumulateGrad", "nccl:all_reduce")
    assert node is not None and node.spread_ns[2] > 10 * node.spread_ns[1]
    assert not _mine(a, "algorithm/slow-instance")
    assert "even-out-instance" not in {r.id for r in a.recommendations}


def test_tree_findings_are_registered_and_explainable():
    from trainscope.api import analyze
    from trainscope.api import explain_finding

    for s in (SLOW_MEMORY_REGION, SLOW_COMPUTE_REGION, SLOW_INSTANCE, BACKWARD_RATIO):
        assert REGISTRY[s.id] is s and not s.can_be_primary
    rep = analyze(str(QWEN), jobs=1)
    e = explain_finding(rep, "machine/slow-region")
    assert e["role"] == "secondary" and e["finding"]["stake_pct"] == pytest.approx(15.79, abs=0.05)
    assert [t["name"] for t in e["graded_by"]] == ["stake.moderate", "stake.high"]
    assert [r["id"] for r in e["fixes"]] == ["region-memory-traffic"]
