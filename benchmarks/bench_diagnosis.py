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

The one-off-cost traces of tests/data/labeled/steady (labels.json, issue 36) join as ``steady/…``.
A label that gives ``fix1`` (the recommendation ids of the fix an expert expects first) is right only
when the verdict's class is right *and* fix #1 is one of them.
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


def trace_verdict(path: pathlib.Path) -> tuple[str, str, float | None, str, str]:
    """(class, bottleneck finding, confidence, runner-up, fix #1's recommendation id) of ``trainscope
    analyze PATH``'s verdict (for a directory of ranks, the slowest rank's, as the report leads with it)."""
    from trainscope.analyzers.findings.labels import verdict_class
    from trainscope.api import analyze
    from trainscope.api.errors import BadInput

    try:
        report = analyze(str(path), jobs=1)
    except BadInput as e:  # a refusal is an answer too, and a wrong one for a labeled trace
        return "refused", str(e).split(": ", 1)[-1][:60], None, "", ""
    v = report.verdict
    recs = report.recommendations
    fix1 = recs[0].id if recs else ""
    return verdict_class(v.axis, v.bottleneck), v.bottleneck or v.axis, v.confidence, v.runner_up or "", fix1


def with_public_labels(labels: dict, traces: pathlib.Path) -> dict:
    """``labels`` plus the public traces labeled in the test copies (tests/data/labeled/expected.json)
    that ``labels`` does not name, with any classes they add."""
    own = COPIES / "expected.json"
    if not own.is_file() or own.resolve() == (traces / "expected.json").resolve():
        return with_steady_labels(labels)
    extra = json.loads(own.read_text())
    merged = dict(labels, traces=dict(labels["traces"]), classes=dict(labels.get("classes", {})))
    for rel, label in extra["traces"].items():
        merged["traces"].setdefault(rel, label)
    for name, meaning in extra.get("classes", {}).items():
        merged["classes"].setdefault(name, meaning)
    return with_steady_labels(merged)


def with_steady_labels(labels: dict) -> dict:
    """``labels`` plus the one-off-cost traces of tests/data/labeled/steady (issue 36), as ``steady/…``."""
    own = COPIES / "steady" / "labels.json"
    if not own.is_file():
        return labels
    extra = json.loads(own.read_text())
    merged = dict(labels, traces=dict(labels["traces"]))
    for rel, label in extra["traces"].items():
        merged["traces"].setdefault(f"steady/{rel}", label)
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
        from trainscope.analyzers.snapshot.summary import snapshot_findings
        from trainscope.analyzers.snapshot.summary import snapshot_memory
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
    from trainscope.analyzers.findings.labels import score
    from trainscope.analyzers.findings.labels import scored

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
            finding, conf, runner, fix1 = "trainscope memory", None, "", ""
        else:
            cls, finding, conf, runner, fix1 = trace_verdict(path)
        s = score(cls, label)
        want = label.get("fix1") or []
        fix_ok = not want or fix1 in want
        ok = s.right and fix_ok
        judged += 1
        right += ok
        rows.append(
            {
                "trace": rel,
                "status": "right" if ok else "WRONG",
                "class": cls,
                "finding": finding,
                "confidence": conf,
                "runner_up": runner,
                "expected": label.get("primary") or [],
                "must_not": label.get("must_not") or [],
                "fix1": fix1,
                "fix1_expected": want,
                "fix1_right": None if not want else fix_ok,
                "why": s.why
                if s.right
                else s.why + ("" if fix_ok else f"; fix #1 {fix1 or 'none'} not in {', '.join(want)}"),
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
    print(
        f"| {'trace':<60} | {'expected':<38} | {'must not':<54} | {'verdict':<48} | {'fix #1 expected':<40} | "
        f"{'fix #1':<22} | result |"
    )
    print(f"|{'-' * 62}|{'-' * 40}|{'-' * 56}|{'-' * 50}|{'-' * 42}|{'-' * 24}|--------|")
    for r in rows:
        if r["status"] in ("facts only", "missing", "pending"):
            print(
                f"| {r['trace']:<60} | {'':<38} | {'':<54} | {r.get('why', ''):<48} | {'':<40} | {'':<22} | {r['status']} |"
            )
            continue
        conf = f" ({r['confidence']:.2f})" if r["confidence"] is not None else ""
        verdict = f"{r['class']}: {r['finding']}{conf}"
        fix_mark = "" if r["fix1_right"] is None else (" ✔" if r["fix1_right"] else " ✘")
        print(
            f"| {r['trace']:<60} | {', '.join(r['expected']):<38} | {', '.join(r['must_not']):<54} | {verdict:<48} | "
            f"{', '.join(r['fix1_expected']):<40} | {r['fix1'] + fix_mark:<22} | {r['status']} |"
        )
    pct = 100.0 * right / judged if judged else 0.0
    fixes = [r for r in rows if r.get("fix1_right") is not None]
    print(
        f"\naccuracy: {right}/{judged} right ({pct:.0f} %); fix #1 right on "
        f"{sum(1 for r in fixes if r['fix1_right'])}/{len(fixes)} labels that give one"
    )
    return 0 if right == judged else 1


if __name__ == "__main__":
    sys.exit(main())
