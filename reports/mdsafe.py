"""Text made safe for Markdown, for every Markdown renderer (reports/markdown.py, plan.py, memory.py,
live.py, history.py, diff_markdown.py): a module of its own, below them all, so that markdown.py can
import the plan's and the rank story's Markdown lines at its top while plan.py imports the escape."""

from __future__ import annotations

import re
from collections.abc import Iterable

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~-])")


def md_escape(text: object, limit: int | None = None) -> str:
    """Text safe inside Markdown prose and table cells: kernel and file names contain ``<``,
    ``*``, ``_`` and ``|``, which would otherwise turn into HTML, emphasis or new columns."""
    s = str(text)
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _SPECIAL.sub(r"\\\1", s)
    return s.replace("\r", " ").replace("\n", " ")


def md_table(head: str, align: str, rows: Iterable[Iterable[object]]) -> list[str]:
    """A Markdown table: the column names, their alignment, then one line per row of cells (escape
    the cells that come from a trace before)."""
    return [head, align, *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def md_bullets(heading: str, items: list[str]) -> list[str]:
    """A list under its heading (a title, or a bold lead sentence): one escaped bullet per item, a
    blank line after the heading and after the list; nothing where there are no items."""
    if not items:
        return []
    return [heading, "", *(f"- {md_escape(x)}" for x in items), ""]
