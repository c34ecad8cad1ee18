"""Every labeled real trace gets a right verdict (expert labels: tests/data/labeled/expected.json, a
copy of the shared corpus's labels plus the public traces labeled for issue 22 under labeled/public/;
classes from the findings registry). A verdict is right when its class is one of the label's "primary"
classes and none of its "must_not" ones. Verdicts come from ``trainscope.api.analyze``."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA
from trainscope.analyzers.findings import REGISTRY
from trainscope.analyzers.findings.base import LABEL_CLASSES
from trainscope.analyzers.findings.labels import score
from trainscope.analyzers.findings.labels import scored
from trainscope.analyzers.findings.labels import verdict_class

LABELS = json.loads((DATA / "labeled" / "expected.json").read_text())


def copy_of(rel: str):
    """The test copy of a labeled trace: with the other test traces, or among the labeled ones."""
    return DATA / rel if (DATA / rel).exists() else DATA / "labeled" / rel


# Labeled traces today's diagnosis gets wrong, each with what it misses; the fixes of issue 22 land in
# parallel, and each entry goes when its trace turns right (strict xfail: an XPASS fails the run).
WRONG_UNTIL_ISSUE_22: dict[str, str] = {}  # every labeled trace is right since issue 22 landed
# Label classes no finding claims yet: a label naming one also names a registry class, so it is scored today.
PENDING_CLASSES = {
    "cold-start": "issue 22 item 1: compiling or loading code (NVRTC/JIT ranges, cuModuleLoad*, cuLibraryLoad*)",
}

_SCORED = sorted(rel for rel, lab in LABELS["traces"].items() if scored(lab) and not rel.startswith("memory/"))
TRACES = [
    pytest.param(rel, marks=pytest.mark.xfail(strict=True, reason=WRONG_UNTIL_ISSUE_22[rel]))
    if rel in WRONG_UNTIL_ISSUE_22
    else rel
    for rel in _SCORED
]


def _verdict(rel: str):
    from trainscope.api import analyze

    return analyze(str(copy_of(rel)), jobs=1).verdict


@pytest.mark.parametrize("rel", TRACES)
def test_labeled_trace_verdict_is_right(rel):
    assert copy_of(rel).exists(), f"copy {rel} from the shared corpus into tests/data/labeled (with its NOTICE line)"
    v = _verdict(rel)
    cls = verdict_class(v.axis, v.bottleneck)
    s = score(cls, LABELS["traces"][rel])
    assert s.right, f"{rel}: {s.why} (verdict: {v.summary})"


def test_the_label_classes_are_the_registry_classes():
    assert set(LABELS["classes"]) == set(LABEL_CLASSES) | set(PENDING_CLASSES)
    assert not set(PENDING_CLASSES) & set(LABEL_CLASSES), (
        "a finding claims a pending class: drop it from PENDING_CLASSES"
    )
    # every class a verdict can name is claimed by some finding that can be primary, except "none"
    claimed = {s.label_class for s in REGISTRY.values() if s.can_be_primary}
    # capacity: memory snapshots and live; gpu-bound: named by the verdict's saturated-GPU branch (kernel
    # time of unknown bound is no primary sink: it cannot be ranked against causes it does not measure);
    # insufficient-gpu-evidence: an Nsight export without GPU rows (analyzers/trace/host_only.py);
    # not-representative: named before any sink is ranked, when the window holds no steady state (issue 36)
    assert set(LABEL_CLASSES) - claimed == {
        "none",
        "capacity",
        "gpu-bound",
        "insufficient-gpu-evidence",
        "not-representative",
    }
    for rel, lab in LABELS["traces"].items():
        if set(lab.get("primary") or []) & set(PENDING_CLASSES):
            assert set(lab["primary"]) & set(LABEL_CLASSES), f"{rel}: no primary class a verdict can give today"


PUBLIC = sorted(rel for rel in LABELS["traces"] if rel.startswith("public/"))


def test_public_traces_are_labeled_with_provenance_and_notice():
    """Each public trace: a file, a source and license, an argument, a NOTICE line; nothing unlabeled."""
    notice = (DATA / "NOTICE.md").read_text()
    files = {f"public/{p.name}" for p in (DATA / "labeled" / "public").iterdir()}
    assert files == set(PUBLIC)
    assert len(PUBLIC) >= 6
    total = 0
    for rel in PUBLIC:
        lab = LABELS["traces"][rel]
        assert lab.get("source") and lab.get("license") and len(lab.get("argument", "")) > 200, rel
        assert set(lab["primary"]) <= set(LABELS["classes"]) and set(lab["must_not"]) <= set(LABELS["classes"]), rel
        assert not set(lab["primary"]) & set(lab["must_not"]), rel
        assert f"labeled/{rel}" in notice, f"{rel}: no NOTICE line"
        size = (DATA / "labeled" / rel).stat().st_size
        assert size <= 2_500_000, rel
        total += size
    assert total <= 12_000_000


def test_wrong_list_names_labeled_traces():
    assert set(WRONG_UNTIL_ISSUE_22) <= set(LABELS["traces"])


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
    from trainscope.analyzers.snapshot.summary import snapshot_findings
    from trainscope.analyzers.snapshot.summary import snapshot_memory
    from trainscope.collectors.snapshot import load_snapshot

    found = snapshot_findings(snapshot_memory(load_snapshot(str(copy_of(rel)))), None, Rules())
    high = [f for f in found if f.severity == "high"]
    cls = REGISTRY[high[0].id].label_class if high else "none"
    assert score(cls, LABELS["traces"][rel]).right, [f.title for f in found]
