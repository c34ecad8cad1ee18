"""The renderers of the built-in output formats (the rows of :mod:`trainscope.reports.formats`): each
takes an :class:`~trainscope.reports.formats.Output` and gives the document in its format, calling
the document's own renderer (reports/text.py, diff_text.py, plan.py, memory.py …). Text and
Markdown show every trace-derived name made visible (control and escape bytes spelled out); JSON
and HTML escape their own."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainscope.reports.formats import Output
from trainscope.reports.output import to_json
from trainscope.traces.safe_text import safe_strings
from trainscope.traces.safe_text import visible_lines

# Each document's renderer per format, as "module:function" of trainscope.reports, imported when a
# document of that kind is rendered (as formats.py names the renderers of its rows): one import of
# them all made `import trainscope.api.planning, trainscope.reports.renderers` take 1.73 s against
# 0.29 s with the plan's renderer alone (memory 1.46 s against 0.97 s, analyze 1.54 s against
# 1.12 s; the fastest of 5 runs each). "diff*" is a diff with a stored run on one side, compared by
# summaries (a document of its own shape); "watch" renders from the live status, not the document.
# Besides the renderers: the page the other documents' text goes into, whether a median step is
# drawn (the HTML analysis), and a watch's document and headline (WatchSummary).
RENDERERS: dict[tuple[str, str], str] = {
    ("text", "analysis"): "text:render_text",
    ("text", "diff"): "diff_text:render_diff_text",
    ("text", "diff*"): "history:render_summary_diff_text",
    ("text", "plan"): "plan:render_plan_text",
    ("text", "memory"): "memory:render_memory_text",
    ("text", "watch"): "live:summary_text",
    ("markdown", "analysis"): "markdown:render_markdown",
    ("markdown", "diff"): "diff_markdown:render_diff_markdown",
    ("markdown", "diff*"): "history:render_summary_diff_markdown",
    ("markdown", "plan"): "plan:render_plan_markdown",
    ("markdown", "memory"): "memory:render_memory_markdown",
    ("markdown", "watch"): "live:summary_markdown",
    ("html", "analysis"): "html:render_html",
    ("html", "page"): "html:render_text_page",
    ("html", "median step"): "html:median_step_index",
    ("watch", "document"): "live:summary_dict",
    ("watch", "headline"): "live:live_headline",
}
_TAKE_COLOR = ("analysis", "diff", "diff*")  # the text renderers that take color=


def _renderer(fmt: str, kind: str) -> Callable[..., Any]:
    """The function :data:`RENDERERS` names for ``kind`` in ``fmt``, imported now."""
    module, name = RENDERERS[fmt, kind].split(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(f"trainscope.reports.{module}"), name)
    return fn


@dataclass(frozen=True)
class WatchSummary:
    """The subject of a ``watch`` document: the live verdict at the end of a watch
    (``analyzers.live.engine.LiveStatus``) and what the command adds (target, exit code, notes,
    captures); the document is ``reports.live.summary_dict`` of both."""

    status: Any
    info: dict[str, Any]

    def output(self, color: bool = False) -> Output:
        return Output("watch", _renderer("watch", "document")(self.status, self.info), self, color)

    def __repr__(self) -> str:
        return f"trainscope watch: {_renderer('watch', 'headline')(self.status)}"


def _kind(out: Output) -> str:
    """The document's row in :data:`RENDERERS`: a diff with a stored run on one side (compared by
    summaries) is "diff*"."""
    if out.document == "diff" and getattr(out.subject, "from_summaries", False):
        return "diff*"
    return out.document


def text(out: Output) -> str:
    shown = safe_strings(out.doc)
    kind = _kind(out)
    render = _renderer("text", kind)
    if kind == "watch":  # rendered from the live status (the document is its summary)
        return visible_lines(render(out.subject.status, out.subject.info))
    result: str = render(shown, color=out.color) if kind in _TAKE_COLOR else render(shown)
    return result


def markdown(out: Output) -> str:
    shown = safe_strings(out.doc)
    kind = _kind(out)
    render = _renderer("markdown", kind)
    if kind == "watch":
        return visible_lines(render(out.subject.status, out.subject.info))
    result: str = render(shown)
    return result


def json_document(out: Output) -> str:
    return to_json(out.doc)


def html(out: Output) -> str:
    """A self-contained page: the analysis with its charts and the median step's timeline (from the
    report's view of its main rank, when the subject is a report); the other documents as their
    text under a one-line summary (the subject's ``repr``)."""
    page: str
    if out.document == "analysis":
        render_html = _renderer("html", "analysis")
        view = out.subject.rank_view() if hasattr(out.subject, "rank_view") else None
        if view is None:
            page = render_html(out.doc)
            return page
        # the timeline model only where a median step is drawn (the view builds it once for everyone)
        model = view.timeline if _renderer("html", "median step")(view.analysis) is not None else None
        page = render_html(out.doc, view.trace, view.analysis, model)
        return page
    summary = repr(out.subject) if out.subject is not None else ""
    body = text(Output(out.document, out.doc, out.subject))
    page = _renderer("html", "page")(f"trainscope {out.document}", summary, body)
    return page
