"""Golden documents: the JSON document of every bundled real trace, compared whole.

The safety net for refactors and speed work: each command's ``--format json`` output on each trace
in ``tests/data`` (every labeled trace, the rank directories, the Nsight exports, the memory
snapshots, two before/after diffs) is kept in ``tests/golden/`` with its volatile fields removed
(the tool's version, where the checkout lies). A changed number fails here with the paths that
moved; when the change is intended, regenerate with

    python -m pytest tests/test_golden.py --update-golden

and say in the commit message why each number changed (as TraceLens' ``--update-references``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA
from tests.fuzzing import run_in_process

GOLDEN = Path(__file__).parent / "golden"


def _cases() -> dict[str, list[str]]:
    """golden file name → the command line (paths relative to tests/data)."""
    cases: dict[str, list[str]] = {}
    for p in (
        sorted((DATA / "kineto").glob("*.json.gz"))
        + sorted((DATA / "cupti").glob("*.json.gz"))
        + sorted((DATA / "cpu").glob("*.json.gz"))
    ):
        cases[f"analyze-{p.parent.name}-{p.name.split('.')[0]}"] = ["analyze", str(p.relative_to(DATA))]
    for d in ("kineto/hta_dlrm_ws128_2ranks", "gloo"):
        cases[f"analyze-dir-{Path(d).name}"] = ["analyze", d]
    for p in sorted((DATA / "nsys").glob("*.sqlite")):
        cases[f"analyze-nsys-{p.stem}"] = ["analyze", str(p.relative_to(DATA))]
    for kind in ("public", "steady"):  # the labeled traces (tests/data/labeled/*/), every format
        for p in sorted((DATA / "labeled" / kind).iterdir()):
            if p.name.endswith((".json.gz", ".sqlite")):
                cases[f"analyze-labeled-{kind}-{p.name.split('.')[0]}"] = ["analyze", str(p.relative_to(DATA))]
    for p in sorted((DATA / "memory").iterdir()):
        cases[f"memory-{p.name.split('.')[0]}"] = ["memory", str(p.relative_to(DATA))]
    cases["diff-wan21-before-after"] = [
        "diff",
        "nsys/nsysai_h100x2_wan21_train_before.sqlite",
        "nsys/nsysai_h100x2_wan21_train_after.sqlite",
    ]
    cases["diff-cpu-slow-fast"] = ["diff", "cpu/slow.pt.trace.json.gz", "cpu/fast.pt.trace.json.gz"]
    cases["diff-dlrm-ranks"] = ["diff", "kineto/hta_dlrm_ws128_2ranks", "kineto/hta_dlrm_ws128_2ranks"]
    return cases


CASES = _cases()

# Fields that say where and with what the document was made, not what the trace holds.
VOLATILE_KEYS = {"version"}


def normalized(doc, root: str):
    """The document with volatile fields removed and the checkout's location replaced."""
    if isinstance(doc, dict):
        return {k: normalized(v, root) for k, v in doc.items() if k not in VOLATILE_KEYS}
    if isinstance(doc, list):
        return [normalized(v, root) for v in doc]
    if isinstance(doc, str):
        return doc.replace(root, "<data>")
    return doc


def document(argv: list[str]) -> dict:
    import os

    cwd = os.getcwd()
    os.chdir(DATA)  # relative paths in the document, as a user in that folder would see them
    try:
        rc, out, err = run_in_process([*argv, "--format", "json", "-q"])
    finally:
        os.chdir(cwd)
    assert rc in (0, 3), f"{' '.join(argv)}: exit {rc}: {err}"
    return normalized(json.loads(out), str(DATA))


def differences(want, got, path: str = "") -> list[str]:
    """Paths where two JSON values differ, with both values (lists compared item by item)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got), key=str):
            if k not in got:
                out.append(f"{path}.{k}: removed (was {json.dumps(want[k])[:80]})")
            elif k not in want:
                out.append(f"{path}.{k}: added ({json.dumps(got[k])[:80]})")
            else:
                out += differences(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        out = [f"{path}: {len(want)} items → {len(got)}"] if len(want) != len(got) else []
        for i, (a, b) in enumerate(zip(want, got)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    if want != got or type(want) is not type(got):
        return [f"{path}: {json.dumps(want)[:100]} → {json.dumps(got)[:100]}"]
    return []


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_document(name, request):
    got = document(CASES[name])
    path = GOLDEN / f"{name}.json"
    text = json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"no golden document {path.name}: run pytest tests/test_golden.py --update-golden"
    want = json.loads(path.read_text(encoding="utf-8"))
    diff = differences(want, got)
    assert not diff, (
        f"{name}: {len(diff)} fields changed (intended? --update-golden, and say why in the commit):\n"
        + "\n".join(diff[:40])
    )


def test_every_golden_document_has_its_case():
    """A golden file whose trace is gone is stale, not a check."""
    stale = sorted(p.stem for p in GOLDEN.glob("*.json")) if GOLDEN.is_dir() else []
    assert set(stale) <= set(CASES), set(stale) - set(CASES)
    assert len(CASES) >= 30


def test_differences_names_the_moved_fields():
    want = {"a": 1, "b": [1, 2], "c": {"d": "x"}}
    assert differences(want, want) == []
    got = {"a": 1.0, "b": [1, 3, 4], "c": {}, "e": None}
    assert differences(want, got) == [
        ".a: 1 → 1.0",
        ".b: 2 items → 3",
        ".b[1]: 2 → 3",
        '.c.d: removed (was "x")',
        ".e: added (null)",
    ]
