"""Run context (training/inference, graphs, compiled, framework, collectives) and the wording it picks."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.conftest import DATA
from tests.conftest import analysis
from tests.conftest import load
from tests.conftest import raw_document
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings import fix_text
from trainscope.analyzers.findings import title_for as title
from trainscope.analyzers.trace.context import TRAINING
from trainscope.analyzers.trace.context import Context
from trainscope.analyzers.trace.context import detect_context
from trainscope.analyzers.trace.recommendations import code_lines
from trainscope.analyzers.trace.recommendations import recommend
from trainscope.analyzers.trace.verdict import Evidence
from trainscope.analyzers.trace.verdict import Finding

# Every finding whose fix is worded for the run's context.
_FIXES = [s.id for s in REGISTRY.values() if s.fix is not None and s.fix.text is not None]
VLLM = "tl_mi300x_vllm_gptoss_decode_fullgraph_bs32.json.gz"


def test_vllm_full_graph_decode_is_compiled_graph_inference():
    c = detect_context(load(VLLM))
    assert (c.mode, c.framework, c.graphs, c.compiled) == ("inference", "pytorch", True, True)
    # one hipGraphLaunch in the raw events, and Triton kernels
    evs = raw_document(VLLM)["traceEvents"]
    assert sum(e.get("name") == "hipGraphLaunch" for e in evs) == 1
    assert any("graph replays: 1 hipGraphLaunch" in e for e in c.evidence)


def test_training_trace_and_collective_time_by_kind_match_raw_events():
    name = "hta_a100_nccl.json.gz"
    c = detect_context(load(name))
    assert c.mode == "training" and c.framework == "pytorch" and not c.graphs
    evs = raw_document(name)["traceEvents"]
    raw = (
        sum(
            e["dur"]
            for e in evs
            if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel" and "AllReduce" in e.get("name", "")
        )
        / 1e3
    )
    assert raw > 1.0
    assert c.collectives["all-reduce"] == pytest.approx(raw, rel=1e-3)
    assert c.main_collective == "all-reduce"


def test_sendrecv_counts_as_all_to_all():
    from trainscope.collectors import open_traces

    t = open_traces(str(DATA / "kineto" / "hta_a100_control.json.gz")).traces[0]
    c = detect_context(t)
    assert c.main_collective == "all-to-all"


def test_native_mpi_cuda_application():
    from trainscope.collectors import open_traces

    t = open_traces(str(DATA / "nsys" / "pipit_saxpy_a100_nsys2022.sqlite")).traces[0]
    c = detect_context(t)
    assert c.framework == "native" and c.mode == "unknown" and not c.collectives


def _every_finding():
    ev = [Evidence("x", 1.0, "%", "", "test")]
    return [Finding(fid, "data", "high", fid, 10.0, ev, "") for fid in _FIXES]


@pytest.mark.parametrize(
    "ctx, forbidden",
    [
        (Context(mode="inference", framework="pytorch"), r"(?i)\btrain(ing)?\b|AdamW|optimizer|loss\.|backward"),
        (Context(mode="unknown", framework="native"), r"loss\.item|DataLoader|torch\.|model\("),
        (
            Context(mode="training", framework="pytorch", collectives={"all-to-all": 50.0, "all-reduce": 5.0}),
            r"bucket_cap_mb|DDP\(",
        ),
    ],
)
def test_fix_text_follows_the_context(ctx, forbidden):
    b = analysis("hta_a100_nccl.json.gz").breakdown
    recs = recommend(_every_finding(), b, None, None, ctx)
    from trainscope.analyzers.findings import spec

    # live findings share the record-trace fix; one-off costs' fixes are worded from a judged window
    # (none here); the same code under two titles is one fix (pinned memory for copies and for
    # pageable copies, one native sync fix)
    distinct = {spec(fid).fix.rec_id for fid in _FIXES if spec(fid).fix.situated is None}
    codes = {code_lines(r.change) for r in recs}
    assert len(codes) == len(recs) and len(recs) >= len(distinct) - 3
    for r in recs:
        assert not re.search(forbidden, r.title + "\n" + r.change), (r.id, r.title, r.change)


def test_default_context_keeps_training_advice():
    assert "bucket_cap_mb" in fix_text("comm/unoverlapped", None).change
    # a fused optimizer only where the trace records an unfused Adam-family optimizer
    assert "fused=True" in fix_text("host/launch-overhead", replace(TRAINING, optimizer="AdamW")).change
    assert "fused=True" not in fix_text("host/launch-overhead", TRAINING).change
    assert "fused=True" not in fix_text("host/launch-overhead", replace(TRAINING, optimizer="SGD")).change
    assert (
        "fused=True"
        not in fix_text("host/launch-overhead", replace(TRAINING, optimizer="FusedAdam", fused_optimizer=True)).change
    )
    a2a = Context(mode="training", collectives={"all-to-all": 9.0})
    assert "balance" in fix_text("comm/unoverlapped", a2a).change.lower()
    assert title("data/input-wait", Context(mode="inference"), "") == "The pipeline waits on input"
    assert title("data/input-wait", TRAINING, "") == "Training waits on the input pipeline"


@pytest.mark.parametrize("name", [VLLM, "tracelens_h100_qwen_inference.json.gz"])
def test_inference_traces_get_no_training_wording(name):
    a = analysis(name)
    assert a.context is not None and a.context.mode == "inference"
    text = "\n".join(
        [a.verdict.summary]
        + [f.title + " " + f.detail for f in a.findings]
        + [r.title + "\n" + r.change for r in a.recommendations]
    )
    assert not re.search(r"(?i)\btraining\b|AdamW|loss\.item", text), text


def test_the_capacity_fix_basis_follows_the_context():
    """Declared on the spec (an alternative fix for runs known not to train): an inference run is
    not told that recomputation costs forward time; training and unknown runs are."""
    b = analysis("hta_a100_nccl.json.gz").breakdown
    cap = [Finding("machine/capacity", "machine", "high", "", 0.0, [Evidence("x", 95.0, "%", "", "test")], "")]
    inference = recommend(cap, b, None, None, Context(mode="inference", framework="pytorch"))
    training = recommend(cap, b, None, None, TRAINING)
    unknown = recommend(cap, b, None, None, None)
    assert [r.basis for r in inference] == ["no speed projection: frees memory for larger batches"]
    assert all("recomputation costs" in r.basis for r in training + unknown) and len(training + unknown) == 2
    assert {r.id for r in inference + training + unknown} == {"reduce-memory"}
