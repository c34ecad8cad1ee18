"""Issue 36 items 4 and 5 on real traces (tests/data/labeled/steady, labels.json there): allocator
churn named and cured as such; every real window answered."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import DATA
from trainscope.analyzers.findings.labels import score, verdict_class

STEADY = DATA / "labeled" / "steady"
LABELS = json.loads((STEADY / "labels.json").read_text())["traces"]
CHURN = "tl_mi300x_ddp_resnet18_no_pool_hipfree_churn.json.gz"


def _report(name: str):
    from trainscope.api import analyze

    return analyze(str(STEADY / name), jobs=1)


def test_rocm_hipfree_churn_is_allocator_churn_cured_by_the_caching_allocator():
    """1,360 hipFree calls (3,346 ms, raw events) with the caching allocator off. Before: HOST-BOUND
    (launch) 0.95, fix #1 torch.compile 'up to 9.41×', evidence 4.4 ms of launch calls."""
    raw = json.load(gzip.open(STEADY / CHURN))
    frees = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("name") == "hipFree"]
    assert len(frees) == 1360 and sum(e["dur"] for e in frees) / 1e3 == pytest.approx(3346.2, abs=0.1)
    r = _report(CHURN)
    (a,) = r.ranks
    v = a.verdict
    assert score(verdict_class(v.axis, v.bottleneck), LABELS[CHURN]).right
    assert v.bottleneck == "host/allocator-churn" and v.confidence >= 0.9
    idle = a.host_idle
    # the frees cover ≈ 99 % of the GPU idle in the steps (GPU busy 10.6 %)
    assert idle.ns["alloc"] / idle.idle_ns > 0.98
    assert a.breakdown.gpu_busy_pct == pytest.approx(10.6, abs=0.1)
    assert a.sinks.pct("allocator") > 85 and a.sinks.pct("launch") < 2
    f = a.findings[0]
    assert f.id == "host/allocator-churn" and f.severity == "high"
    hip = next(e for e in f.evidence if e.metric.startswith("hipFree ×1360"))
    assert hip.value > 2900  # ms of GPU idle under the frees inside the steps
    rec = a.recommendations[0]
    assert rec.id == "allocator-reuse" and "caching allocator back on" in rec.title
    assert "PYTORCH_HIP_ALLOC_CONF" in rec.change and "PYTORCH_NO_CUDA_MEMORY_CACHING" in rec.change
    assert not any(x.id == "reduce-launch-overhead" for x in a.recommendations)
