"""The renderers of the built-in output formats (the rows of :mod:`trainscope.reports.formats`): each
takes an :class:`~trainscope.reports.formats.Output` and gives the document in its format, calling
the document's own renderer (reports/text.py, diff_text.py, plan.py, memory.py …). Text and
Markdown show every trace-derived name made visible (control and escape bytes spelled out); JSON
and HTML escape their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainscope.reports.formats import Output
from trainscope.traces.safe_text import safe_strings, visible_lines


@dataclass(frozen=True)
class WatchSummary:
    """The subject of a ``watch`` document: the live verdict at the end of a watch
    (``analyzers.live.engine.LiveStatus``) and what the command adds (target, exit code, notes,
    captures); the document is ``reports.live.summary_dict`` of both."""

    status: Any
    info: dict

    def output(self, color: bool = False) -> Output:
        from trainscope.reports.live import summary_dict

        return Output("watch", summary_dict(self.status, self.info), self, color)

    def __repr__(self) -> str:
        from trainscope.reports.live import live_headline

        return f"trainscope watch: {live_headline(self.status)}"


def _from_summaries(out: Output) -> bool:
    """A diff with a stored run on one side: compared by summaries, a document of its own shape."""
    return bool(getattr(out.subject, "from_summaries", False))


def _text_renderer(out: Output) -> Callable[..., str]:
    if out.document == "analysis":
        from trainscope.reports.text import render_text

        return render_text
    if out.document == "diff":
        if _from_summaries(out):
            from trainscope.reports.history import render_summary_diff_text

            return render_summary_diff_text
        from trainscope.reports.diff_text import render_diff_text

        return render_diff_text
    if out.document == "plan":
        from trainscope.reports.plan import render_plan_text

        return lambda doc, color=False: render_plan_text(doc)
    if out.document == "watch":  # rendered from the live status (the document is its summary)
        from trainscope.reports.live import summary_text

        return lambda doc, color=False: visible_lines(summary_text(out.subject.status, out.subject.info))
    from trainscope.reports.memory import render_memory_text

    return lambda doc, color=False: render_memory_text(doc)


def text(out: Output) -> str:
    return _text_renderer(out)(safe_strings(out.doc), color=out.color)


def markdown(out: Output) -> str:
    shown = safe_strings(out.doc)
    if out.document == "analysis":
        from trainscope.reports.markdown import render_markdown

        return render_markdown(shown)
    if out.document == "diff":
        if _from_summaries(out):
            from trainscope.reports.history import render_summary_diff_markdown

            return render_summary_diff_markdown(shown)
        from trainscope.reports.diff_markdown import render_diff_markdown

        return render_diff_markdown(shown)
    if out.document == "plan":
        from trainscope.reports.plan import render_plan_markdown

        return render_plan_markdown(shown)
    if out.document == "watch":
        from trainscope.reports.live import summary_markdown

        return visible_lines(summary_markdown(out.subject.status, out.subject.info))
    from trainscope.reports.memory import render_memory_markdown

    return render_memory_markdown(shown)


def json_document(out: Output) -> str:
    from trainscope.reports.output import to_json

    return to_json(out.doc)


def html(out: Output) -> str:
    """A self-contained page: the analysis with its charts and the median step's timeline (from the
    report's view of its main rank, when the subject is a report); the other documents as their
    text under a one-line summary (the subject's ``repr``)."""
    from trainscope.reports.html import median_step_index, render_html, render_text_page

    if out.document == "analysis":
        view = out.subject.rank_view() if hasattr(out.subject, "rank_view") else None
        if view is None:
            return render_html(out.doc)
        # the timeline model only where a median step is drawn (the view builds it once for everyone)
        model = view.timeline if median_step_index(view.analysis) is not None else None
        return render_html(out.doc, view.trace, view.analysis, model)
    summary = repr(out.subject) if out.subject is not None else ""
    return render_text_page(f"trainscope {out.document}", summary, text(Output(out.document, out.doc, out.subject)))
