"""What every result object of the api does with its one document: the output format table
(:mod:`trainscope.reports.formats`) renders, writes and names it, so a report, a diff, a plan and a
memory report cannot disagree with the command line's output. A class mixes in :class:`Rendered`,
names its document's ``KIND`` (a kind of that table) and gives ``to_dict()`` and ``to_text()``."""

from __future__ import annotations

from abc import ABC
from abc import abstractmethod
from typing import Any
from typing import ClassVar

from trainscope.reports.formats import Output
from trainscope.reports.formats import render
from trainscope.reports.formats import render_for_path
from trainscope.reports.formats import write
from trainscope.reports.html import render_text_cell


class Rendered(ABC):
    KIND: ClassVar[str]

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The object's one document (the JSON output)."""

    @abstractmethod
    def to_text(self) -> str:
        """The document for a terminal."""

    @abstractmethod
    def to_markdown(self) -> str:
        """The document as Markdown."""

    def output(self, doc: dict[str, Any] | None = None, color: bool = False) -> Output:
        """This object for the output format table: the document (``doc`` when the caller built it
        already, or added sections to it) and the object itself, for what the document does not
        hold (the trace behind an analysis's HTML timeline)."""

        return Output(self.KIND, self.to_dict() if doc is None else doc, self, color)

    def render(self, fmt: str) -> str | bytes:
        """The object in output format ``fmt`` (a name in :data:`trainscope.reports.formats.WRITERS`)."""

        return render(fmt, self.output())

    def to_json(self) -> str:
        return str(self.render("json"))

    def to_html(self) -> str:
        """A self-contained HTML page (inline SVG, no scripts, no external files)."""

        return str(self.render("html"))

    def render_for(self, path: str) -> str | bytes:
        """The object in the format the file name ``path`` says (reports/formats.py: .html/.htm,
        .json, .md; Markdown for any other)."""

        return render_for_path(str(path), self.output())

    def save(self, path: str) -> str:
        """Write the object; the format follows the suffix (see :meth:`render_for`)."""

        write(str(path), self.output())
        return path

    # Jupyter
    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _repr_html_(self) -> str:
        return render_text_cell(f"trainscope {self.KIND}", repr(self), self.to_text())

    def __str__(self) -> str:
        return self.to_text()


class RenderedAnalysis(Rendered):
    """An analysis's renderings (:class:`~trainscope.api.report.Report`, and
    :class:`~trainscope.api.cache.CachedReport` from the cache's document): text and Markdown
    through the same table as every other format."""

    KIND = "analysis"

    def to_text(self, color: bool = False) -> str:
        return str(render("text", self.output(color=color)))

    def to_markdown(self) -> str:
        return str(self.render("markdown"))
