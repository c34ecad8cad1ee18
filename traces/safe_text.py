"""The one place where text from a trace is made safe to show.

Kernel, operator, file and GPU names come from files anyone can write. Printed raw, an ESC or
OSC sequence clears the screen or retitles the window, a CR or newline forges report lines, and
in the apps Rich markup (``[link=…]``) becomes a hyperlink. Every renderer passes trace-derived
text through here:

- :func:`visible` — for terminals, Markdown and HTML: C0 and C1 control characters, DEL,
  bidirectional controls (embeddings, overrides, isolates and the marks U+200E, U+200F, U+061C),
  the line and paragraph separators U+2028/U+2029 and lone surrogates are shown as escapes
  (``\\x1b``, ``\\n``, ``\\u202e``, ``\\u2028``, ``\\ud800``), so the text reads the same and does
  nothing: it cannot retitle, clear or link the terminal, reorder what follows it on the line, or
  break a Markdown table row. HTML pages escape with :func:`html.escape` after it.
- :func:`safe_strings` — :func:`visible` over every string of a report document.
- :func:`json_safe` — for JSON: non-finite numbers become ``null`` (JSON has no NaN or Infinity;
  a value that overflowed is unknown, not a number) and lone surrogates (valid in JSON text, not
  encodable as UTF-8) become ``\\ud800`` escapes in the string. C0 controls need nothing: the JSON
  encoder escapes them; :func:`json_escape_text` escapes the rest (C1, bidi, separators) in the
  encoded text, so JSON printed to a terminal is as inert as the text report.
- :func:`markup_safe` — :func:`visible`, then Rich markup escaped, for strings the apps hand to
  widgets that interpret markup.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

# C0 controls, DEL, C1 controls, bidi marks (ALM, LRM, RLM), line/paragraph separators, bidi
# embeddings/overrides, bidi isolates, lone surrogates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# What JSON text may still hold raw after ``json.dumps(ensure_ascii=False)`` (which escapes C0 only).
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def visible(s: str) -> str:
    """``s`` with every control, escape and invisible-direction character shown as an escape."""
    return _UNSAFE.sub(_escape, s) if _UNSAFE.search(s) else s


def json_escape_text(text: str) -> str:
    """Encoded JSON with DEL, C1 controls, bidi controls and line separators written as ``\\uXXXX``
    escapes: the same JSON value, inert on a terminal. Those characters can only be inside strings
    (JSON's own syntax is ASCII), so the substitution is safe on the whole text."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _JSON_UNSAFE.search(text) else text


def _surrogate_free(s: str) -> str:
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return re.sub("[\ud800-\udfff]", _escape, s)


def visible_lines(s: str) -> str:
    """:func:`visible` but keeping line breaks: for trainscope's own multi-line code suggestions."""
    return "\n".join(visible(line) for line in s.split("\n"))


# Document fields that are trainscope's own multi-line text (code suggestions), not trace names.
_MULTILINE_KEYS = frozenset({"change"})


def _walk(
    obj: Any,
    on_str: Callable[[str], Any],
    on_float: Callable[[float], Any],
    multiline: Callable[[str], str] | None = None,
) -> Any:
    t = type(obj)
    if isinstance(obj, str):
        return on_str(obj)
    if isinstance(obj, float):
        return on_float(obj)
    if t is dict:
        return {
            (on_str(k) if isinstance(k, str) else k): (
                multiline(v)
                if multiline and k in _MULTILINE_KEYS and isinstance(v, str)
                else _walk(v, on_str, on_float, multiline)
            )
            for k, v in obj.items()
        }
    if t in (list, tuple):
        return [_walk(v, on_str, on_float, multiline) for v in obj]
    return obj


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def safe_strings(doc: Any) -> Any:
    """A copy of a report document with every string made :func:`visible` (for text and Markdown
    renderers, which print the document's strings as they are) and non-finite numbers kept."""
    return _walk(doc, visible, lambda x: x, visible_lines)


def json_safe(doc: Any) -> Any:
    """A copy of a document that ``json.dumps(allow_nan=False)`` accepts and UTF-8 can encode."""
    return _walk(doc, _surrogate_free, _finite)


def markup_safe(s: str) -> str:
    """For the apps: :func:`visible`, then Rich markup escaped (``[reverse]`` shows as text)."""
    from rich.markup import escape

    return escape(visible(s))
