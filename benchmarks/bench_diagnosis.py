"""Benchmark: diagnosis accuracy on the labeled real traces (expert classes per trace).

Run on demand (not a test):  python benchmarks/bench_diagnosis.py [--traces DIR] [--labels FILE]

Each labeled trace is analyzed as ``trainscope analyze`` does (a directory of ranks: the slowest
rank's verdict); the verdict's class comes from the findings registry (``label_class``). A verdict
is right when its class is one of the label's "primary" classes and none of its "must_not" ones;
a label with "must_not" only is right unless the verdict gives a forbidden class. Memory snapshots
(class "capacity") are judged by the memory-snapshot analysis where it classifies OOMs, else shown
as pending. Default traces: the shared corpus beside the repository when present, else the copies
in tests/data ($TRAINSCOPE_TRACES names another directory); default labels: expected.json there, plus
the labels of the public traces held only in tests/data/labeled (``public/…``: found and labeled for
issue 22, copies with their NOTICE lines) wherever the chosen directory does not label them itself.
Each trace is analyzed through ``trainscope.api.analyze`` (serially: ``jobs=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
COPIES = ROOT / "tests" / "data" / "labeled"


def default_traces() -> pathlib.Path:
    """The shared corpus beside the checkout (or named by $TRAINSCOPE_TRACES), else the test copies."""
    env = os.environ.get("TRAINSCOPE_TRACES")
    for cand in ([pathlib.Path(env)] if env else []) + [ROOT.parent / "shared" / "traces"]:
        if (cand / "expected.json").is_file():
            return cand
    return COPIES


def trace_verdict(path: pathlib.Path) -> tuple[str, str, float, str]:
    """(class, bottleneck finding, confidence, runner-up) of ``trainscope analyze PATH``'s verdict (for a
    directory of ranks, the slowest rank's, as the report leads with it)."""
    from trainscope.analyzers.findings.labels import verdict_class
    from trainscope.api import analyze

    v = analyze(str(path), jobs=1).verdict
    return verdict_class(v.axis, v.bottleneck), v.bottleneck or v.axis, v.confidence, v.runner_up or ""


def with_public_labels(labels: dict, traces: pathlib.Path) -> dict:
    """``labels`` plus the public traces labeled in the test copies (tests/data/labeled/expected.json)
    that ``labels`` does not name, with any classes they add."""
    own = COPIES / "expected.json"
    if not own.is_file() or own.resolve() == (traces / "expected.json").resolve():
        return labels
    extra = json.loads(own.read_text())
    merged = dict(labels, traces=dict(labels["traces"]), classes=dict(labels.get("classes", {})))
    for rel, label in extra["traces"].items():
        merged["traces"].setdefault(rel, label)
    for name, meaning in extra.get("classes", {}).items():
        merged["classes"].setdefault(name, meaning)
    return merged


def locate(traces: pathlib.Path, rel: str) -> pathlib.Path:
    """Where a labeled trace lies: in the chosen directory, beside it (the test copies of the shared
    traces), or among the labeled copies in tests/data/labeled."""
    for cand in (traces / rel, traces.parent / rel, COPIES / rel):
        if cand.exists():
            return cand
    return traces / rel


def snapshot_class(path: pathlib.Path) -> str | None:
    """The class of ``trainscope memory PATH``'s diagnosis: the benchmark class of its first high
    finding (capacity for a capacity OOM), "none" without one; None while the snapshot analysis is
    not available."""
    try:
        from trainscope.analyzers.snapshot_memory import snapshot_findings, snapshot_memory
        from trainscope.collectors.snapshot import load_snapshot
    except ImportError:
        return None
    from trainscope.analyzers.findings import REGISTRY
    from trainscope.analyzers.rules import Rules

    found = snapshot_findings(snapshot_memory(load_snapshot(str(path))), None, Rules())
    high = [f for f in found if f.severity == "high"]
    if not high:
        return "none"
    spec = REGISTRY.get(high[0].id)
    return spec.label_class if spec is not None and spec.label_class else "balanced"


def run(traces: pathlib.Path, labels: dict) -> tuple[list[dict], int, int]:
    from trainscope.analyzers.findings.labels import score, scored

    rows, right, judged = [], 0, 0
    for rel, label in labels["traces"].items():
        if not scored(label):
            rows.append({"trace": rel, "status": "facts only"})
            continue
        path = locate(traces, rel)
        if not path.exists():
            rows.append({"trace": rel, "status": "missing"})
            continue
        t0 = time.perf_counter()
        if rel.startswith("memory/"):
            cls = snapshot_class(path)
            if cls is None:
                rows.append(
                    {"trace": rel, "status": "pending", "why": "memory snapshots: OOM classification not available"}
                )
                continue
            finding, conf, runner = "trainscope memory", None, ""
        else:
            cls, finding, conf, runner = trace_verdict(path)
        s = score(cls, label)
        judged += 1
        right += s.right
        rows.append(
            {
                "trace": rel,
                "status": "right" if s.right else "WRONG",
                "class": cls,
                "finding": finding,
                "confidence": conf,
                "runner_up": runner,
                "expected": label.get("primary") or [],
                "must_not": label.get("must_not") or [],
                "why": s.why,
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    return rows, right, judged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--traces", type=pathlib.Path, default=None, help="directory of the labeled traces and expected.json"
    )
    ap.add_argument("--labels", type=pathlib.Path, default=None)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    args.traces = args.traces or default_traces()
    labels_path = args.labels or (args.traces / "expected.json")
    try:
        labels = json.loads(labels_path.read_text())
    except (OSError, ValueError) as e:
        sys.stderr.write(f"bench_diagnosis: {labels_path}: {e}\n")
        return 2
    if args.labels is None:
        labels = with_public_labels(labels, args.traces)
    rows, right, judged = run(args.traces, labels)
    if args.json:
        print(json.dumps({"rows": rows, "right": right, "judged": judged}, indent=1))
        return 0
    print(f"labeled traces in {args.traces}\n")
    print(f"| {'trace':<60} | {'expected':<38} | {'must not':<54} | {'verdict':<48} | result |")
    print(f"|{'-' * 62}|{'-' * 40}|{'-' * 56}|{'-' * 50}|--------|")
    for r in rows:
        if r["status"] in ("facts only", "missing", "pending"):
            print(f"| {r['trace']:<60} | {'':<38} | {'':<54} | {r.get('why', ''):<48} | {r['status']} |")
            continue
        conf = f" ({r['confidence']:.2f})" if r["confidence"] is not None else ""
        verdict = f"{r['class']}: {r['finding']}{conf}"
        print(
            f"| {r['trace']:<60} | {', '.join(r['expected']):<38} | {', '.join(r['must_not']):<54} | {verdict:<48} | "
            f"{r['status']} |"
        )
    pct = 100.0 * right / judged if judged else 0.0
    print(f"\naccuracy: {right}/{judged} right ({pct:.0f} %)")
    return 0 if right == judged else 1


if __name__ == "__main__":
    sys.exit(main())
