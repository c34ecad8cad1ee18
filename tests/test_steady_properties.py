"""Fixes fitted to the cause they remove, on every bundled real trace (issue 36 item 3), and the
one-off-cost traces of tests/data/labeled/steady judged right, verdict and fix #1 (item 7).

Properties, checked on every trace, rank directory and Nsight export in tests/data:
- no projection exceeds the time its fix removes (its lever: the finding's stake, less the one-off
  costs inside the judged window; mixed precision: its stake);
- no fix appears twice (one recommendation id, one code, per fix);
- a one-off cost is never projected as a per-step speed-up (its fix states seconds once per process);
- fix text fits the workload the trace shows (no training advice for inference, no PyTorch for a
  native application, no torch.profiler for an Nsight export, LLM-serving advice only with a decode
  loop in the trace).
"""

from __future__ import annotations

import functools
import json
import re

import pytest

from tests.conftest import DATA
from tests.test_fix_fitness import _rules
from trainscope.analyzers import findings as registry
from trainscope.analyzers.trace.recommendations import code_lines
from trainscope.analyzers.trace.recommendations import removable

STEADY = DATA / "labeled" / "steady"
STEADY_LABELS = json.loads((STEADY / "labels.json").read_text())["traces"]
# Labeled here, answered by the other half of issue 36 (items 4-5): allocator churn as a sink, and an
# Nsight export with CUDA tracing on and no CUDA rows (strict: an XPASS fails, so the entry goes).


def _bundled() -> list[str]:
    paths = [
        *sorted(DATA.glob("kineto/*.json.gz")),
        DATA / "kineto" / "hta_dlrm_ws128_2ranks",
        *sorted(DATA.glob("nsys/*.sqlite")),
        *sorted(DATA.glob("cpu/*.json.gz")),
        DATA / "gloo",
        *sorted(DATA.glob("cupti/*.json.gz")),
        *sorted(DATA.glob("labeled/public/*")),
        *sorted(p for p in STEADY.iterdir() if p.suffix in (".gz", ".sqlite")),
    ]
    return [str(p.relative_to(DATA)) for p in paths]


@functools.cache
def _report(rel: str):
    from trainscope.api import analyze
    from trainscope.api.errors import BadInput

    try:
        return analyze(str(DATA / rel), jobs=1)
    except BadInput as e:
        return e


def _analyses(rel: str):
    r = _report(rel)
    assert not isinstance(r, Exception), f"{rel}: refused ({r})"  # every bundled trace is answered
    return r.ranks


BUNDLED = _bundled()


@pytest.mark.parametrize("rel", BUNDLED)
def test_no_projection_exceeds_the_time_its_fix_removes(rel):
    for a in _analyses(rel):
        by_id: dict = {}
        for f in a.findings:  # the first of an id: the one its recommendation is projected from
            by_id.setdefault(f.id, f)  # (two slow regions share one id; recommendations.py, whatif.py)
        b = a.breakdown
        for r in a.recommendations:
            if r.projected_speedup is None:
                continue
            f = by_id[r.finding]
            fx = registry.REGISTRY[f.id].fix_for(a.context)
            assert fx is not None
            removed = 1 - 1 / r.projected_speedup
            if fx.projection == "amdahl":
                assert removed <= f.stake_pct / 100 + 1e-3, (rel, r.id)
                continue
            lever = removable(f, fx, b, a.busy_bound, a.steady)
            assert lever is not None, (rel, r.id)
            idle, busy = lever
            assert removed <= (idle + busy) / 100 + 1e-3, (rel, r.id, removed, lever)
            w = a.steady
            if w is not None and w.one_off_idle_ns:  # never the one-off time in the window
                assert idle <= 100 - b.gpu_busy_pct - w.one_off_idle_pct + 1e-6, (rel, r.id)


@pytest.mark.parametrize("rel", BUNDLED)
def test_no_fix_appears_twice(rel):
    for a in _analyses(rel):
        ids = [r.id for r in a.recommendations]
        assert len(ids) == len(set(ids)), (rel, ids)
        codes = [code_lines(r.change) for r in a.recommendations]
        assert len(codes) == len(set(codes)), (rel, ids)


@pytest.mark.parametrize("rel", BUNDLED)
def test_a_one_off_cost_is_never_a_per_step_speed_up(rel):
    for a in _analyses(rel):
        axis = {f.id: registry.REGISTRY[f.id].axis for f in a.findings}
        for r in a.recommendations:
            if axis.get(r.finding) == "not_representative" or r.once_s is not None:
                assert r.projected_speedup is None and r.projected_step_ms is None, (rel, r.id)
                assert "× faster" not in r.projection_text
            if r.id == "warm-up-kernels":  # the cold-start wording of the launch fix
                assert r.projected_speedup is None, (rel, r.id)
        if a.verdict.axis == "not_representative":
            assert a.recommendations and a.recommendations[0].id == "profile-steady-state", rel
            assert all(r.projected_speedup is None for r in a.recommendations), rel


_SERVING = re.compile(r"(?i)continuous batching|max_num_seqs|speculative|draft model|KV cache")


@pytest.mark.parametrize("rel", BUNDLED)
def test_fix_text_fits_the_workload_the_trace_shows(rel):
    for a in _analyses(rel):
        ctx = a.context
        if ctx is None:
            continue
        for r in a.recommendations:
            broken = _rules(ctx, r.finding, r.title, r.change)
            assert not broken, (rel, r.id, broken)
            if _SERVING.search(r.title + "\n" + r.change):
                assert ctx.decode_loop and ctx.inference, (rel, r.id, "LLM-serving advice without a decode loop")


@pytest.mark.parametrize("name", sorted(STEADY_LABELS))
def test_a_labeled_one_off_trace_gets_its_verdict_and_fix_one(name):
    from trainscope.analyzers.findings.labels import score
    from trainscope.analyzers.findings.labels import verdict_class
    from trainscope.api import analyze

    label = STEADY_LABELS[name]
    r = analyze(str(STEADY / name), jobs=1)
    v = r.verdict
    s = score(verdict_class(v.axis, v.bottleneck), label)
    assert s.right, f"{name}: {s.why} ({v.summary})"
    fix1 = r.recommendations[0].id if r.recommendations else None
    assert fix1 in label["fix1"], f"{name}: fix #1 {fix1} not in {label['fix1']}"
