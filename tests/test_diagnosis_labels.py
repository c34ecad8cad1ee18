"""Every labeled real trace gets a right verdict (expert labels: tests/data/labeled/expected.json, a
copy of the shared corpus's labels; classes from the findings registry). A verdict is right when its class
is one of the label's "primary" classes and none of its "must_not" ones."""
from __future__ import annotations

import json

import pytest

from tests.conftest import DATA
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings.base import LABEL_CLASSES
from trainscope.analyzers.findings.labels import score, scored, verdict_class

LABELS = json.loads((DATA / "labeled" / "expected.json").read_text())


def copy_of(rel: str):
    """The test copy of a labeled trace: with the other test traces, or among the labeled ones."""
    return DATA / rel if (DATA / rel).exists() else DATA / "labeled" / rel
TRACES = sorted(rel for rel, lab in LABELS["traces"].items() if scored(lab) and not rel.startswith("memory/"))


def _verdict(rel: str):
    from trainscope.analyzers.analysis import analyze_set, slowest
    from trainscope.collectors import open_traces

    analyses = analyze_set(open_traces(str(copy_of(rel))))
    return (slowest(analyses) if len(analyses) > 1 else analyses[0]), analyses


@pytest.mark.parametrize("rel", TRACES)
def test_labeled_trace_verdict_is_right(rel):
    assert copy_of(rel).exists(), f"copy {rel} from the shared corpus into tests/data/labeled (with its NOTICE line)"
    a, _ = _verdict(rel)
    cls = verdict_class(a.verdict.axis, a.verdict.bottleneck)
    s = score(cls, LABELS["traces"][rel])
    assert s.right, f"{rel}: {s.why} (verdict: {a.verdict.summary})"


def test_the_label_classes_are_the_registry_classes():
    assert set(LABELS["classes"]) == set(LABEL_CLASSES)
    # every class a verdict can name is claimed by some finding that can be primary, except "none"
    claimed = {s.label_class for s in REGISTRY.values() if s.can_be_primary}
    assert set(LABEL_CLASSES) - claimed == {"none", "capacity"}  # capacity: memory snapshots and live


def test_scoring():
    lab = {"primary": ["sync", "copies"], "must_not": ["launch"]}
    assert score("copies", lab).right and not score("launch", lab).right and not score("comm", lab).right
    assert score("comm", {"must_not": ["input"]}).right and not score("input", {"must_not": ["input"]}).right
    assert verdict_class("insufficient_evidence", None) == "none"
    assert verdict_class("balanced", None) == "balanced"
    assert verdict_class("data", "data/pageable-copies") == "copies"


SNAPSHOTS = sorted(rel for rel, lab in LABELS["traces"].items() if scored(lab) and rel.startswith("memory/"))


@pytest.mark.parametrize("rel", SNAPSHOTS)
def test_labeled_memory_snapshot_is_right(rel):
    """`trainscope memory`'s diagnosis of a labeled snapshot: the class of its first high finding."""
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.snapshot_memory import snapshot_findings, snapshot_memory
    from trainscope.collectors.snapshot import load_snapshot

    found = snapshot_findings(snapshot_memory(load_snapshot(str(copy_of(rel)))), None, Rules())
    high = [f for f in found if f.severity == "high"]
    cls = REGISTRY[high[0].id].label_class if high else "none"
    assert score(cls, LABELS["traces"][rel]).right, [f.title for f in found]
