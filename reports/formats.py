"""The output formats trainscope writes, declared once: a row per format with its name (what
``--format`` takes), the suffixes a report file goes by, the function that renders it, its media
type, whether it is bytes, and the documents it renders. ``--format`` of every report command
(analyze, diff, plan, memory), ``--report FILE`` (analyze, diff, watch; and the api's ``save`` /
``render_for``) and the apps' export all read this table; adding an output format is its renderer plus one row.

A file's format is the row whose suffix ends its name (the longest suffix wins); a name no row
claims gets :data:`FILE_DEFAULT` (Markdown), and the CLI says so on stderr unless the name has no
suffix at all. Renderers are named as ``module:function`` and imported only when their format is
written, so the table costs nothing to import. A renderer takes an :class:`Output` — the document,
built once by the caller (with any section a caller added), and the object it came from — and
returns text, or bytes for a binary format.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainscope.reports.output import write_atomic

DOCUMENTS: tuple[str, ...] = ("analysis", "diff", "plan", "memory", "watch")
"""The documents trainscope renders: ``analyze`` (api.Report), ``diff`` (api.DiffResult), ``plan``
(api.PlanResult), ``memory`` (api.MemoryReport) and the end of a ``watch``
(:class:`trainscope.reports.renderers.WatchSummary`)."""

Rendered = str | bytes


@dataclass(frozen=True)
class Output:
    """What a renderer is given."""

    document: str  # one of DOCUMENTS
    doc: dict[str, Any]  # the JSON document, built once by the caller
    subject: Any = None  # the api object the document came from (what the document does not hold: the trace)
    color: bool = False  # bold headings (text for a terminal that shows them)


@dataclass(frozen=True)
class Writer:
    name: str  # the --format value
    label: str  # how messages and help name it ("HTML")
    suffixes: tuple[str, ...]  # lower-case; a report file whose name ends so is written in this format
    render: str  # "module:function": (Output) -> str, or bytes when binary
    mime: str  # the media type (for a caller serving the report)
    binary: bool = False  # the renderer returns bytes
    documents: tuple[str, ...] = DOCUMENTS  # the documents it renders
    aliases: tuple[str, ...] = ()  # other names --format takes for it ("md"); help lists only ``name``

    def renderer(self) -> Callable[[Output], Rendered]:
        module, fn = self.render.split(":")
        render: Callable[[Output], Rendered] = getattr(importlib.import_module(module), fn)
        return render


_R = "trainscope.reports.renderers"

WRITERS: tuple[Writer, ...] = (
    Writer("text", "text", (), f"{_R}:text", "text/plain; charset=utf-8"),
    Writer("json", "JSON", (".json",), f"{_R}:json_document", "application/json"),
    Writer(
        "markdown",
        "Markdown",
        (".md", ".markdown", ".txt"),
        f"{_R}:markdown",
        "text/markdown; charset=utf-8",
        aliases=("md",),
    ),
    Writer("html", "HTML", (".html", ".htm"), f"{_R}:html", "text/html; charset=utf-8", aliases=("htm",)),
)

FILE_DEFAULT = "markdown"  # a report file whose suffix no row claims


def writer(name: str) -> Writer:
    """The row named ``name`` or one of its aliases, in any case (KeyError when there is none)."""
    low = name.lower()
    for w in WRITERS:
        if w.name == low or low in w.aliases:
            return w
    raise KeyError(name)


def canonical(name: str) -> str:
    """The row's name for ``name`` (an alias such as ``md``, any case), or ``name`` unchanged when no
    row has it: the ``type`` of every ``--format`` whose choices are :func:`names`, so argparse's
    "invalid choice" still names the real choices."""
    try:
        return writer(name).name
    except KeyError:
        return name


def names(document: str) -> tuple[str, ...]:
    """Every format that renders ``document``, in table order: the command's ``--format`` choices."""
    return tuple(w.name for w in WRITERS if document in w.documents)


def for_path(path: str, document: str) -> tuple[Writer, bool]:
    """The format a report file named ``path`` is written in, and whether its name says so: the row
    with the longest suffix that ends it and renders ``document``; else :data:`FILE_DEFAULT`,
    named (True) only when the name has no suffix at all."""
    low = os.fspath(path).lower()
    hits = [(len(s), w) for w in WRITERS if document in w.documents for s in w.suffixes if low.endswith(s)]
    if hits:
        return max(hits, key=lambda h: h[0])[1], True
    return writer(FILE_DEFAULT), os.path.splitext(os.path.basename(low))[1] == ""


def render(fmt: Writer | str, out: Output) -> Rendered:
    """``out`` in format ``fmt`` (a row or its name); ValueError when it does not render that document."""
    w = writer(fmt) if isinstance(fmt, str) else fmt
    if out.document not in w.documents:
        raise ValueError(f"the {w.label} format does not render a {out.document} report")
    return w.renderer()(out)


def render_for_path(path: str, out: Output) -> Rendered:
    """``out`` in the format the file name ``path`` says (:func:`for_path`)."""
    return render(for_path(path, out.document)[0], out)


def write(path: str, out: Output) -> tuple[Writer, bool]:
    """Write ``out`` to the file ``path`` atomically, in the format its name says; the row written and
    whether the name said it (False: the default, under a suffix no row claims). OSError as
    :func:`trainscope.reports.output.write_atomic`."""
    w, named = for_path(path, out.document)
    write_atomic(path, render(w, out))
    return w, named


def suffix_help(document: str) -> str:
    """The suffix rule in words, from the table: "HTML for .html/.htm, JSON for .json, Markdown
    otherwise" (for --help and the note on stderr)."""
    default = writer(FILE_DEFAULT)
    parts = [
        f"{w.label} for {'/'.join(w.suffixes)}"
        for w in WRITERS
        if w.suffixes and w.name != FILE_DEFAULT and document in w.documents
    ]
    return ", ".join(parts + [f"{default.label} otherwise"])
