"""The analysis document as a typed model (reports/analysis_document.py; issue 40, "One typed document").

- Every golden analysis document round-trips through the model exactly: ``from_dict(d).to_dict()``
  equals ``d`` and its JSON text is the same.
- A document built from real traces keeps its key order: the JSON of the model's ``to_dict`` is the
  text ``--format json`` writes, byte for byte (the golden files are sorted, so this is checked on
  fresh builds: a single trace, a rank directory with its rank story, a run with a model ledger).
- Renderers and panes read the document by attribute: no ``doc["…"]`` / ``document["…"]`` /
  ``doc.get("…")`` in their source.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import DATA
from trainscope import api
from trainscope.reports.analysis_document import AnalysisDocument
from trainscope.reports.analysis_document import Finding
from trainscope.reports.analysis_document import TopKernel
from trainscope.reports.output import to_json

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
ANALYSES = sorted(GOLDEN.glob("analyze-*.json"))


def test_there_are_golden_analysis_documents():
    assert len(ANALYSES) >= 25


@pytest.mark.parametrize("path", ANALYSES, ids=lambda p: p.stem)
def test_golden_document_round_trips(path):
    d = json.loads(path.read_text(encoding="utf-8"))
    d["tool"]["version"] = "0"  # the golden files drop the volatile version; the model requires it
    typed = AnalysisDocument.from_dict(d)
    back = typed.to_dict()
    assert back == d
    # the golden files are written with sorted keys: the text is compared so (order: the built documents below)
    assert json.dumps(back, ensure_ascii=False, sort_keys=True) == json.dumps(d, ensure_ascii=False, sort_keys=True)
    assert typed.extra == {}  # every key of every golden document is a typed field
    # attribute reads give the JSON's values
    assert typed.verdict.axis == d["verdict"]["axis"]
    assert [f.id for f in typed.findings] == [f["id"] for f in d["findings"]]
    assert isinstance(typed.findings[0] if typed.findings else Finding("", "", "", "", None, "", []), Finding)
    if typed.kernels is not None and typed.kernels.top:
        assert isinstance(typed.kernels.top[0], TopKernel)
        assert typed.kernels.top[0].kernel_class == d["kernels"]["top"][0]["class"]


def _same_text(doc: dict) -> None:
    typed = AnalysisDocument.from_dict(doc)
    assert to_json(typed.to_dict()) == to_json(doc)
    assert AnalysisDocument.from_json(to_json(doc)).to_dict() == doc


def test_built_document_keeps_its_key_order():
    report = api.analyze(str(DATA / "cpu" / "fast.pt.trace.json.gz"))
    doc = report.to_dict()
    _same_text(doc)
    assert report.document.to_dict() == doc
    assert list(doc)[:4] == ["schema", "tool", "input", "source"] and list(doc)[-1] == "thresholds"


def test_rank_set_document_keeps_its_key_order():
    report = api.analyze(str(DATA / "kineto" / "hta_dlrm_ws128_2ranks"))
    doc = report.to_dict()
    assert "ranks" in doc and "stragglers" in doc
    _same_text(doc)
    typed = report.document
    assert [r.rank for r in typed.ranks or []] == [r["rank"] for r in doc["ranks"]]
    assert typed.stragglers is not None and typed.stragglers.to_dict() == doc["stragglers"]
    assert [r.late_in for r in typed.stragglers.ranks] == [r["late_in"] for r in doc["stragglers"]["ranks"]]


def test_unknown_and_optional_keys_survive():
    d = json.loads((GOLDEN / "analyze-cpu-fast.json").read_text(encoding="utf-8"))
    d["tool"]["version"] = "0"
    d["ledger"] = {"items": [], "total_gb": 1.0}
    d["added_by_a_caller"] = {"x": [1, 2.0, None]}
    typed = AnalysisDocument.from_dict(d)
    assert typed.ledger == {"items": [], "total_gb": 1.0}
    assert typed.extra == {"added_by_a_caller": {"x": [1, 2.0, None]}}
    assert typed.to_dict() == d
    del d["ledger"], d["added_by_a_caller"]
    assert "ledger" not in AnalysisDocument.from_dict(d).to_dict()


def test_a_partial_document_reads_missing_keys_as_null_and_keeps_them_missing():
    d = json.loads((GOLDEN / "analyze-cpu-fast.json").read_text(encoding="utf-8"))
    d["tool"]["version"] = "0"
    del d["verdict"]["runner_up"]
    d["gpu_metrics"] = {"sm_active_pct": 71.3, "samples": 12}  # as a test or a caller may build one
    typed = AnalysisDocument.from_dict(d)
    assert typed.verdict.runner_up is None and typed.gpu_metrics is not None
    assert typed.gpu_metrics.tensor_active_pct is None and typed.gpu_metrics.sm_active_pct == 71.3
    assert typed.to_dict() == d


# -- no string-key reads of the document in renderers and panes ---------------------------------------

# The modules that render the analysis document or show it in the app or the MCP tools.
READERS = (
    "reports/text.py",
    "reports/markdown.py",
    "reports/html.py",
    "reports/perfetto.py",
    "reports/deep.py",
    "tui/overview.py",
    "tui/fixes.py",
    "tui/tables.py",
    "trainscope/mcp_server.py",
    "trainscope/api/explore.py",
)
# A key read on a name the modules give the document (``doc``, ``document``, ``self.doc``,
# ``p.doc``): subscript with a string, or .get with a string.
DOC_KEY_READ = re.compile(r"""\b(?:doc|document)\s*(?:\[\s*["']|\.get\(\s*["'])""")


@pytest.mark.parametrize("module", READERS)
def test_readers_read_the_document_by_attribute(module):
    text = (ROOT / module).read_text(encoding="utf-8")
    hits = [
        f"{module}:{i}: {line.strip()}"
        for i, line in enumerate(text.splitlines(), 1)
        if DOC_KEY_READ.search(line) and not line.lstrip().startswith("#")
    ]
    assert not hits, "string-key reads of the document:\n" + "\n".join(hits)


def test_the_grep_finds_what_it_is_for():
    for line in ('x = doc["verdict"]', "y = self.doc.get('rank')", 'document["a"]', 'p.doc["findings"]'):
        assert DOC_KEY_READ.search(line), line
    for line in ("doc.verdict.axis", 'row["name"]', 'stragglers.get("summary")', "docs['x']"):
        assert not DOC_KEY_READ.search(line), line


def test_the_model_has_no_string_key_reads():
    """A renderer cannot fall back to ``doc["…"]`` or ``doc.get("…")`` on the typed document."""
    d = json.loads((GOLDEN / "analyze-cpu-fast.json").read_text(encoding="utf-8"))
    d["tool"]["version"] = "0"
    typed = AnalysisDocument.from_dict(d)
    for part in (typed, typed.verdict, typed.breakdown, typed.mfu):
        assert not hasattr(part, "get") and not hasattr(part, "__getitem__"), type(part).__name__


def test_a_cached_document_is_typed_without_analyzing_again(tmp_path, monkeypatch):
    from trainscope.api import cache

    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    monkeypatch.delenv(cache.ENV_MAX, raising=False)
    path = str(DATA / "cpu" / "fast.pt.trace.json.gz")
    fresh = api.analyze(path, cache=True)
    again = api.analyze(path, cache=True)
    assert isinstance(again, cache.CachedReport) and again.from_cache
    typed = again.document
    assert typed.to_dict() == fresh.to_dict() == again.to_dict()
    assert again.verdict_line() == fresh.verdict_line()
    assert again._report is None  # neither the typed document nor the verdict line analyzed it again
