"""The streaming Kineto reader: the ``traceEvents`` array decoded in chunks into typed records.

Measured on a 314 MB trace (the A100 control trace repeated ×10) on a 2-core machine, whole-file
decoders cost 4–9 s and 1–2.3 GB before a single column is built (``json`` 7.9 s / 1.7 GB,
orjson 7.7 s / 2.3 GB, msgspec to dicts 8.9 s / 1.6 GB, msgspec typed 3.9 s / 1.0 GB; simdjson
parses lazily in 1.0 s but holds a 1.45 GB tape, and every field read is a proxy call). Decoding
8 MB slices of the event array with msgspec into :class:`Event` structs that declare only the
fields the model keeps took 1.7 s at 0.4 GB with the whole file in memory; reading the file in
blocks too keeps the memory to the chunk plus the columns. Every string-valued field the model
does not need (call stacks, module hierarchies, input types) is skipped by the decoder, never
allocated.

How a slice is cut: a candidate cut is a ``}`` followed by ``,`` and ``{`` (whitespace allowed).
A candidate inside a string or a nested object leaves the slice unbalanced, so its decode fails
and the previous candidate is tried: a slice that decodes is a run of whole events. A slice
whose events do not fit the typed schema (a string timestamp, ``NaN``, an event that is not an
object) is decoded to plain dicts and read by the general parser, event by event, with its
warnings. A slice msgspec refuses is first repaired — a lone-surrogate escape (valid JSON) or a
byte that is not UTF-8 inside a string becomes visible text
(:func:`~trainscope.collectors.readers.repair_bytes`), counted in one warning — so that only such a
slice pays for the repair. A window where no candidate decodes is read event by event up to the
first event that fails; the rest gets a window of its own. Damage that nothing gets past is where
reading stops: the whole events before it are kept and the loss is said, as for the in-memory
reader. Anything the stream cannot place (no ``traceEvents`` key, a file that is not an object or
an array) goes back to the in-memory reader, whose errors are the precise ones.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import queue
import re
import threading
import zlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import msgspec

from trainscope.collectors.errors import TraceError
from trainscope.collectors.readers import GZIP_MAGIC
from trainscope.collectors.readers import Progress
from trainscope.collectors.readers import byte_offset
from trainscope.collectors.readers import check_expansion
from trainscope.collectors.readers import decompression_cap
from trainscope.collectors.readers import json_text
from trainscope.collectors.readers import loads_repaired
from trainscope.collectors.readers import repair_bytes
from trainscope.collectors.readers import repair_text

_Num = int | float | None
_CHUNK = 8 << 20  # bytes of JSON per decoded slice (measured: 4–16 MB are within 3 % of each other)
_BLOCK = 4 << 20  # bytes read (compressed) per file read
_CUT = re.compile(rb"\}\s*,\s*\{")
_CUT_TEXT = re.compile(r"\}\s*,\s*\{")
_TRIES = 4  # candidate cuts tried from the end of a window before the window is decoded event by event


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields the model reads; every other key is skipped by the decoder."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    flops: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    bytes: Any = None
    kind: Any = None
    name: Any = None
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    # Operator ↔ kernel links and operator input signatures (the cost model).
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_lc: Any = msgspec.field(default=None, name="external id")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    # Autograd: a forward operator and the backward node it created share the sequence number.
    seq_nr: Any = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Any = msgspec.field(default=None, name="Fwd thread id")
    # Collective metadata (record_param_comms and its kernels): matches collectives across ranks.
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    seq: Any = msgspec.field(default=None, name="Seq")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: _Num = None
    dur: _Num = None
    args: Args | None = None


try:  # zlib-ng inflates the same deflate stream ≈ 1.5–2.7× faster than zlib (docs/scale.md)
    from zlib_ng import zlib_ng

    _inflate: ModuleType = zlib_ng
except ImportError:  # pragma: no cover - a dependency; zlib stays correct without it
    _inflate = zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) if _inflate is zlib else (zlib.error, _inflate.error)

# Annotated: msgspec ≥ 0.23 types the constructor with TypeForm, which mypy does not infer from.
_EVENTS: msgspec.json.Decoder[list[Event]] = msgspec.json.Decoder(list[Event])
# Whole events, validated, kept as their bytes.
_RAW_EVENTS: msgspec.json.Decoder[list[msgspec.Raw]] = msgspec.json.Decoder(list[msgspec.Raw])
_ANY = msgspec.json.Decoder()


class Fallback(Exception):
    """The stream cannot place this file; the in-memory reader must read it."""


class _Source:
    """Blocks of the file's bytes, gunzipped when it is gzip, with the in-memory reader's warnings."""

    def __init__(self, path: str, progress: Progress | None, start: int = 0, stop: int | None = None) -> None:
        self.path = path
        self.progress = progress
        self.start, self.stop = start, stop  # a byte range of a plain file (a part read in parallel)
        self.size = ((stop if stop is not None else os.path.getsize(path)) - start) or 1
        self.warnings: list[str] = []
        self.done = 0
        self.stage = "reading"
        self.produced = 0

    def blocks(self) -> Iterator[bytes]:
        """The blocks, read and gunzipped ahead in a thread (file reads and zlib release the GIL:
        decompression runs on another core while the caller decodes)."""
        q: queue.Queue[tuple[Any, ...]] = queue.Queue(maxsize=4)
        stop = threading.Event()

        def put(item: tuple[Any, ...]) -> bool:
            """Queue ``item`` unless the consumer has stopped (a reader that stops early, at
            damage, reads no more: a blocking put of the end marker kept this thread waiting, and
            the consumer 5 s in its join, whenever the whole file was read ahead)."""
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for b in self._blocks():
                    if not put(("block", b, self.done, self.stage)):
                        return
                put(("end", None, 0, ""))
            except BaseException as e:  # handed to the consumer, raised there
                put(("error", e, 0, ""))

        t = threading.Thread(target=produce, name="trainscope-read-ahead", daemon=True)
        t.start()
        try:
            while True:
                kind, value, done, stage = q.get()
                if kind == "block":
                    if self.progress:  # in the caller's thread: progress callbacks draw
                        self.progress(stage, min(1.0, done / self.size))
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            stop.set()
            t.join(timeout=5)

    def _blocks(self) -> Iterator[bytes]:
        with open(self.path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            if not gz or self.start or self.stop is not None:
                f.seek(self.start)
                left = self.stop - self.start if self.stop is not None else None
                while block := f.read(_BLOCK if left is None else min(_BLOCK, left)):
                    self._tick(len(block), "reading")
                    yield block
                    if left is not None:
                        left -= len(block)
                        if left <= 0:
                            return
                return
            cap, check_ratio = decompression_cap()  # the same cap as every other gunzip (a gzip bomb)
            dec = _inflate.decompressobj(16 + zlib.MAX_WBITS)
            damaged = None
            read_in = 0
            while block := f.read(_BLOCK // 8):
                self._tick(len(block), "decompressing")
                read_in += len(block)
                try:
                    pending = block
                    while pending:  # at most _BLOCK bytes out per call: traces compress 20×
                        out = dec.decompress(pending, _BLOCK)
                        pending = dec.unconsumed_tail
                        self.produced += len(out)
                        check_expansion(self.path, self.produced, read_in - len(pending), cap, check_ratio)
                        yield out
                        if dec.eof:  # the rest is unused_data (a second member, padding)
                            break
                except _INFLATE_ERRORS as e:
                    damaged = f"corrupt gzip data ({e})"
                    break
                if dec.eof:
                    if dec.unused_data.strip(b"\x00"):
                        self.warnings.append("data after the end of the gzip stream ignored")
                    break
            else:
                if not dec.eof:
                    damaged = "gzip stream is truncated"
            if damaged is None:
                tail = dec.flush()
                self.produced += len(tail)
                if tail:
                    yield tail
            else:
                if not self.produced:
                    raise TraceError(self.path, f"{damaged}; nothing could be decompressed")
                self.warnings.append(f"{damaged}: analyzed the first {self.produced:,} decompressed bytes")

    def _tick(self, n: int, stage: str) -> None:
        self.done += n
        self.stage = stage


def stream_events(
    path: str,
    parser: Any,
    progress: Progress | None = None,
    start: int = 0,
    stop: int | None = None,
    head: bytes | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Feed ``path``'s events to ``parser`` (``feed_typed(list[Event])``, ``feed_dicts(list)``; or
    ``feed_raw`` where it has ``raw`` set, and ``check_first``, ``damage``, ``text_repairs`` where
    it has them: a duck type, the Kineto reader's or a Perfetto copier) slice by slice; returns the top-level fields (``traceEvents`` left out) and the warnings.

    A part of a plain file read in parallel: ``start`` is the first byte of an event (``head``,
    the document up to the event array's "[", given); ``stop`` ends the part just after an
    event's "}" (the rest is another part's)."""
    src = _Source(path, progress, start, stop)
    blocks = src.blocks()
    buf = b""
    eof = False

    def more() -> bool:
        nonlocal buf, eof
        if eof:
            return False
        try:
            buf += next(blocks)
        except StopIteration:
            eof = True
            return False
        return True

    # -- the head: everything up to the event array's "[" ------------------------------------
    while len(buf) < 64 and more():
        pass
    lead = buf.lstrip()
    if head is not None:
        pos = len(head) if start == 0 else 0  # a first part begins with the head; a later one at an event
    elif not lead:
        raise Fallback
    elif lead[:1] == b"[":
        head, pos = b"", len(buf) - len(lead) + 1
    elif lead[:1] == b"{":
        start = 0
        while True:
            k = buf.find(b'"traceEvents"', max(0, start - 16))
            if k >= 0:
                m = re.compile(rb'"traceEvents"\s*:\s*\[').match(buf, k)
                if m:
                    break
                if len(buf) - k > 64:
                    raise Fallback
            start = len(buf)
            if not more():
                raise Fallback
        head, pos = buf[: m.end()], m.end()
    else:
        raise Fallback

    warnings: list[str] = []
    total = 0  # events read
    checked = False
    consumed = start  # bytes before buf[0] in the file (for byte positions in messages)
    while True:
        # keep at least one slice's worth of JSON ahead
        while not eof and len(buf) - pos < _CHUNK:
            more()
        if pos > _CHUNK:
            buf, consumed, pos = buf[pos:], consumed + pos, 0
        if eof:
            break
        window_end = pos + _CHUNK
        cuts = [m.start() + 1 for m in _CUT.finditer(buf, max(pos, window_end - (1 << 20)), window_end)]
        if not cuts:
            cuts = [m.start() + 1 for m in _CUT.finditer(buf, pos, window_end)]
        done = False
        for cut in reversed(cuts[-_TRIES:]):
            n = _decode_slice(buf, pos, cut, parser)
            if n is not None:
                if not checked:
                    checked = True
                    parser.check_first()
                total += n
                pos = buf.index(b"{", cut)
                done = True
                break
        if not done:  # no clean cut in the window: whole events one by one, up to the damage
            n, reached, damage = _one_by_one(buf, pos, len(buf), parser)
            total += n
            if not checked and n:
                checked = True
                parser.check_first()
            if n:  # the events before the failing one are read; the rest gets a window of its own
                pos = reached
                if damage is None and buf[pos : pos + 1] == b"]":  # the array ends in this window
                    while more():
                        pass
                    break
                continue
            damage = damage or "no whole event in 8 MB"  # nothing decodes from here: damage, or one event past 8 MB
            warnings.append(_damaged(damage, total, consumed + pos, parser))
            if not total:
                raise TraceError(path, f"not valid JSON ({damage}) and no complete trace events before the error")
            return _top(head, b"]}" if head else b"]", parser), src.warnings + warnings

    # -- the last slice: the events, the array's "]", the rest of the document ---------------
    rest = buf[pos:]
    if stop is not None:  # a first part: whole events up to the cut, no "]"
        body = rest.rstrip(b" \t\r\n,")
        n = _decode_slice(body, 0, len(body), parser) if body.strip() else 0
        if n is None:
            raise Fallback
        return {}, src.warnings + warnings
    for ev_end, trailer in _array_ends(head, rest):
        n = _decode_slice(rest, 0, ev_end, parser) if rest[:ev_end].strip() else 0
        if n is None:
            continue  # that "]" closed an array of the trailer: try the previous event
        if not checked and n:
            parser.check_first()
        total += n
        if not total:
            raise Fallback  # an empty event array: the in-memory reader says so
        return _top(head, b"]" + trailer, parser), src.warnings + warnings
    # truncated (or damaged in the last slice): whole events one by one, then say what was lost
    n, stop, damage = _one_by_one(rest, 0, len(rest), parser)
    total += n
    if not checked:
        parser.check_first()  # not chrome-trace events at all: the in-memory reader says what it is
    if not total:
        raise TraceError(
            path, f"not valid JSON ({damage or 'truncated'}) and no complete trace events before the error"
        )
    warnings.append(_damaged(damage or "truncated", total, consumed + pos + stop, parser))
    return _top(head, b"]}" if head else b"]", parser), src.warnings + warnings


def _damaged(why: str, n: int, where: int, parser: Any = None) -> str:
    if parser is not None:
        parser.damage = (why, n, where)  # a part read in parallel: the joiner rewrites the count
    return (
        f"JSON is truncated or damaged ({why}): analyzed the {n:,} complete events before byte {where:,}; "
        "top-level fields after the event array are lost"
    )


def _decode_slice(buf: bytes, start: int, end: int, parser: Any) -> int | None:
    """Decode ``buf[start:end]`` (whole events, comma-separated) and feed them; None if it is not.

    The fast path is one msgspec decode. A slice msgspec refuses is repaired (lone-surrogate escapes
    and bytes that are not UTF-8: :func:`~trainscope.collectors.readers.repair_bytes`) and decoded
    again before it is taken for a cut inside a string or for damage; only such a slice pays for the
    repair, and its repairs are counted (:func:`_count_repairs`) once it is read."""
    piece = b"[" + buf[start:end] + b"]"
    raw = getattr(parser, "raw", False)  # a copier (the Perfetto export): each event's own bytes
    decoded = _strict(piece, raw)
    lone = bad = 0
    repaired = False
    if decoded is None:
        fixed, lone, bad = repair_bytes(piece)
        repaired = True
        if fixed is not piece:
            piece = fixed
            decoded = _strict(piece, raw)
    if decoded is None and b"NaN" not in piece and b"Infinity" not in piece:
        return None  # not whole events (a cut inside a string or an object), or damage
    if decoded is not None and decoded is not _OFF_SCHEMA:
        if raw:
            parser.feed_raw(decoded)
            _count_repairs(parser, lone, bad)
            return len(decoded)
        if parser.feed_typed(decoded):
            _count_repairs(parser, lone, bad)
            return len(decoded)
    # The general path: plain JSON values (NaN and Infinity as Python's json accepts them). msgspec may
    # have stopped at a value off the schema before text it would refuse: repaired here too, as
    # Python's json would keep a lone surrogate (and refuse a byte that is not UTF-8).
    if not repaired:
        piece, lone, bad = repair_bytes(piece)
    try:
        events = json.loads(piece)
    except (ValueError, RecursionError):
        return None
    parser.feed_dicts(events)
    _count_repairs(parser, lone, bad)
    return len(events)


_OFF_SCHEMA: list[Any] = []  # a marker: valid JSON whose values do not fit the typed records


def _strict(piece: bytes, raw: bool) -> list[Any] | None:
    """msgspec's decode of ``piece``: the events, :data:`_OFF_SCHEMA`, or None (not JSON it accepts).
    msgspec checks the UTF-8 of the strings it keeps, not of those it skips (call stacks, every
    field the model does not read): a slice that is not all ASCII is checked whole (:func:`_utf8`)."""
    if not piece.isascii() and not _utf8(piece):
        return None
    try:
        return _RAW_EVENTS.decode(piece) if raw else _EVENTS.decode(piece)
    except msgspec.ValidationError:
        return _OFF_SCHEMA
    except (msgspec.DecodeError, UnicodeDecodeError):  # UnicodeDecodeError: bytes that are not UTF-8
        return None


_UTF8_STEP = 32 << 10


def _utf8(piece: bytes) -> bool:
    """Whether ``piece`` is UTF-8, checked 32 KB at a time. Measured on an 8 MB slice: 0.5 ms to
    find a slice is ASCII; for one that is not, 1.0 ms (Latin letters) to 2.7 ms (CJK) against
    3.6–12 ms decoding it whole, and ≈ 25 ms for msgspec's decode. Whole-slice or 256 KB decodes
    raised the peak memory of a 314 MB read in two halves from 168 to 201–207 MiB (freed strings
    of the allocator's large sizes left the heap fragmented); 32 KB steps leave it at 168 MiB."""
    dec = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(piece)
    try:
        for i in range(0, len(piece), _UTF8_STEP):
            dec.decode(view[i : i + _UTF8_STEP])
        dec.decode(b"", True)
    except UnicodeDecodeError:
        return False
    return True


def _count_repairs(parser: Any, lone: int, bad: int) -> None:
    """Add a read slice's text repairs to ``parser.text_repairs`` (escapes, bytes): one warning says them."""
    if lone or bad:
        a, b = getattr(parser, "text_repairs", (0, 0))
        parser.text_repairs = (a + lone, b + bad)


def _one_by_one(buf: bytes, pos: int, end: int, parser: Any) -> tuple[int, int, str | None]:
    """Decode events one at a time from ``buf[pos:end]``; (events, position reached, damage or None).
    The position is that of the first event not read (or of the array's "]")."""
    orig = json_text(buf[pos:end])
    r = repair_text(orig)
    text = r.text
    decoder = json.JSONDecoder()
    i, n, batch = 0, 0, []
    damage = None
    while i < len(text):
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            break
        try:
            obj, i2 = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError) as e:
            damage = _short(getattr(e, "msg", None) or str(e))  # no line/char: they count from a slice, not the file
            break
        batch.append(obj)
        i = i2
        if len(batch) >= 4096:
            parser.feed_dicts(batch)
            n += len(batch)
            batch = []
    if batch:
        parser.feed_dicts(batch)
        n += len(batch)
    _count_repairs(parser, *r.counts(i))  # the repairs in what was read
    return n, pos + byte_offset(orig, r.original(i)), damage


def _short(msg: str) -> str:
    return msg if len(msg) < 90 else msg[:87] + "..."


def _array_ends(head: bytes, rest: bytes) -> Iterator[tuple[int, bytes]]:
    """Where the event array ends in ``rest``: (byte end of the last event, the document after "]").
    The last event is the last object, starting at an event cut, that a "]" follows and after which
    the head and the trailer make one valid document (the trailer may hold "]" in strings and
    objects of its own). Text a strict decoder refuses is repaired for the search, not in what is
    returned: the trailer's own bytes (:func:`_top` repairs and counts them)."""
    orig = json_text(rest)
    r = repair_text(orig)
    text = r.text
    first = len(text) - len(text.lstrip())
    if text[first : first + 1] == "]":
        trailer = rest[byte_offset(orig, r.original(first + 1)) :]
        if _document(head, trailer):
            yield 0, trailer
        return
    starts = [first] + [m.end() - 1 for m in _CUT_TEXT.finditer(text)]
    decoder = json.JSONDecoder()
    for c in reversed(starts):
        try:
            _, end = decoder.raw_decode(text, c)
        except (json.JSONDecodeError, RecursionError):
            continue
        j = end
        while j < len(text) and text[j] in " \t\r\n":
            j += 1
        if text[j : j + 1] != "]":
            continue
        trailer = rest[byte_offset(orig, r.original(j + 1)) :]
        if _document(head, trailer):
            yield byte_offset(orig, r.original(end)), trailer


def _document(head: bytes, trailer: bytes) -> bool:
    """Whether ``head`` + "]" + ``trailer`` is one whole JSON document (a bare array: no trailer)."""
    if not head:
        return not trailer.strip()
    try:
        loads_repaired(head + b"]" + trailer)
    except (ValueError, RecursionError):
        return False
    return True


def _top(head: bytes, trailer: bytes, parser: Any = None) -> dict[str, Any]:
    """The top-level fields of the document ``head`` + ``trailer`` (its text repaired, the repairs
    counted on ``parser``), ``traceEvents`` left out."""
    if not head:
        return {}
    try:
        top, lone, bad = loads_repaired(head + trailer)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(top, dict):
        return {}
    if parser is not None:
        _count_repairs(parser, lone, bad)
    top.pop("traceEvents", None)
    return top


def finite(v: Any) -> bool:
    return not isinstance(v, float) or math.isfinite(v)


def split_point(path: str, head_limit: int = 64 << 20) -> tuple[int, bytes] | None:
    """A byte offset near the middle of a plain trace file where an event starts, verified by
    decoding the whole events that follow it, and the document's head (up to the event array's
    "["); None when the file does not allow it (gzip, no head found, no verified cut)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        first = f.read(min(size, head_limit))
        if first[:2] == GZIP_MAGIC:
            return None
        lead = first.lstrip()
        if lead[:1] == b"[":
            head = first[: len(first) - len(lead) + 1]
        else:
            m = re.compile(rb'"traceEvents"\s*:\s*\[').search(first)
            if not m or lead[:1] != b"{":
                return None
            head = first[: m.end()]
        mid = max(len(head), size // 2)
        f.seek(mid)
        window = f.read(2 * _CHUNK)
    cuts = [m.end() - 1 for m in _CUT.finditer(window, 0, _CHUNK)]
    for c in cuts[:_TRIES]:
        ends = [m.start() + 1 for m in _CUT.finditer(window, c + 1)]
        if not ends:
            return None
        piece = b"[" + window[c : ends[-1]] + b"]"
        decoded = _strict(piece, False)
        if decoded is None:  # text a strict decoder refuses, a cut inside a string, or damage
            decoded = _strict(repair_bytes(piece)[0], False)
        if decoded is None or decoded is _OFF_SCHEMA:
            continue
        return mid + c, head
    return None
