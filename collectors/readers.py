"""Reading trace bytes and JSON defensively: chunked (for progress), gzip-aware, salvaging truncation."""
from __future__ import annotations

import json
import os
import zlib
from typing import Callable

from trainscope.collectors.errors import TraceError

Progress = Callable[[str, float | None], None]
"""``progress(stage, fraction_done_or_None)``; collectors call it, the CLI draws it."""

_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def sniff(path: str, n: int = 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def read_maybe_gzip(path: str, progress: Progress | None = None) -> tuple[bytes, list[str]]:
    """The file's bytes, gunzipped if it is gzip. A truncated or corrupt gzip stream yields what
    decompressed before the damage, with a warning; nothing at all is an error."""
    warnings: list[str] = []
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != GZIP_MAGIC:
            chunks, done = [], 0
            while chunk := f.read(_CHUNK):
                chunks.append(chunk)
                done += len(chunk)
                if progress:
                    progress("reading", done / size if size else None)
            return b"".join(chunks), warnings
        dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out: list[bytes] = []
        done = 0
        damaged = None
        while chunk := f.read(_CHUNK):
            done += len(chunk)
            try:
                out.append(dec.decompress(chunk))
            except zlib.error as e:
                damaged = f"corrupt gzip data ({e})"
                break
            if dec.eof:  # trailing garbage or a second member: ignore, but say so
                if dec.unused_data.strip(b"\x00"):
                    warnings.append("data after the end of the gzip stream ignored")
                break
            if progress:
                progress("decompressing", done / size if size else None)
        else:
            if not dec.eof:
                damaged = "gzip stream is truncated"
        if damaged is None:
            out.append(dec.flush())
        data = b"".join(out)
        if damaged:
            if not data:
                raise TraceError(path, f"{damaged}; nothing could be decompressed")
            warnings.append(f"{damaged}: analyzed the first {len(data):,} decompressed bytes")
        return data, warnings


def parse_json_events(path: str, data: bytes) -> tuple[object, list[str]]:
    """Parse a chrome-trace document. On a truncated or damaged document, salvage the complete
    events before the damage from its event array and say how many were kept."""
    if not data.strip():
        raise TraceError(path, "file is empty")
    try:
        return json.loads(data), []
    except UnicodeDecodeError:
        raise TraceError(path, "not a text (JSON) file") from None
    except (json.JSONDecodeError, RecursionError) as e:
        error = e
    text = data.decode("utf-8", errors="replace")
    events, where = _salvage_events(text)
    if not events:
        raise TraceError(path, f"not valid JSON ({_short(error)}) and no complete trace events before the error")
    return {"traceEvents": events}, [
        f"JSON is truncated or damaged ({_short(error)}): analyzed the {len(events):,} complete events "
        f"before byte {where:,}; top-level fields after the event array are lost"
    ]


def _short(e: Exception) -> str:
    msg = str(e)
    return msg if len(msg) < 90 else msg[:87] + "..."


def _salvage_events(text: str) -> tuple[list[dict], int]:
    """Decode events one by one from the ``traceEvents`` array (or a bare array) until damage."""
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else (0 if text.lstrip().startswith("[") else -1)
    if start < 0:
        return [], 0
    if key < 0:
        start = text.find("[")
    decoder = json.JSONDecoder()
    pos = start + 1
    events: list[dict] = []
    n = len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            break
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break
        if isinstance(obj, dict):
            events.append(obj)
        pos = end
    return events, pos
