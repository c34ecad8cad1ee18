"""Reading trace bytes and JSON defensively: chunked (for progress), gzip-aware, salvaging truncation."""

from __future__ import annotations

import bisect
import codecs
import json
import os
import re
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import IO
from typing import Any

from trainscope.collectors.errors import TraceError


def usable_cores(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The cores this process may use: its affinity (else the machine's), capped by its control
    group's CPU quota where one is set (a container's `--cpus`: cgroup v2 ``cpu.max``, v1
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``), rounded down — half a core is no core of its
    own. It says whether a second reading process (Kineto halves, Nsight NVTX chunks) or the
    analysis' second thread has a core to run on."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = cpu_quota(cgroup_root)
    return n if quota is None else max(1, min(n, int(quota)))


def cpu_quota(cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs' worth of time per period this process's control group may use; None where unlimited
    or unreadable. v2: the least ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") in the group named by
    /proc/self/cgroup's ``0::`` line and each group above it (a quota anywhere on the path holds
    it); v1, where v2 has none: the ``cpu`` controller's files."""
    quotas: list[float | None] = []
    for folder in v2_groups(cgroup_root):
        try:
            with open(os.path.join(folder, "cpu.max")) as f:
                quota, period = f.read().split()[:2]
            quotas.append(None if quota == "max" else _ratio(int(quota), int(period)))
        except (OSError, ValueError):
            continue
    if quotas:
        return min((q for q in quotas if q is not None), default=None)
    try:
        with open(os.path.join(cgroup_root, "cpu", "cpu.cfs_quota_us")) as f:
            quota_us = int(f.read())
        with open(os.path.join(cgroup_root, "cpu", "cpu.cfs_period_us")) as f:
            period_us = int(f.read())
    except (OSError, ValueError):
        return None
    return _ratio(quota_us, period_us)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None


def v2_groups(cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> list[str]:
    """The folders of this process's cgroup v2 group and of each group above it up to the mount's
    root, its own first (a group outside this namespace's view: the mount's root alone)."""
    parts = [p for p in own_group("", proc_cgroup).split("/") if p]
    if ".." in parts:
        parts = []
    return [os.path.join(cgroup_root, *parts[:depth]) for depth in range(len(parts), -1, -1)]


def own_group(controller: str, proc_cgroup: str = "/proc/self/cgroup") -> str:
    """This process's control group for ``controller`` as a path under the hierarchy's mount, from
    /proc/self/cgroup ("" names cgroup v2's ``0::`` line; "memory" the v1 line whose controllers
    include it); "" where unnamed or unreadable (the mount's root: a container's own group)."""
    try:
        with open(proc_cgroup) as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                named = controller in controllers.split(",") if controller else controllers == ""
                if named:
                    return path.strip().lstrip("/")
    except (OSError, ValueError):
        pass
    return ""


@dataclass(frozen=True)
class MemoryRoom:
    """What this process may still take, in bytes: ``available`` is the least of its control groups'
    room (the limit less what the group holds, page cache the kernel can drop not counted) and the
    machine's MemAvailable; ``limit`` the least control-group limit. None: none set or readable."""

    limit: int | None
    available: int | None


# cgroup v1 writes "no limit" as 2^63 − 1 rounded down to a page; no machine has 2^60 bytes.
_NO_LIMIT = 1 << 60


def memory_room(
    cgroup_root: str = "/sys/fs/cgroup", meminfo: str = "/proc/meminfo", proc_cgroup: str = "/proc/self/cgroup"
) -> MemoryRoom:
    """The memory this process may still use (:class:`MemoryRoom`), the smallest of: cgroup v2's
    ``memory.max`` less ``memory.current`` in its own group and each group above it (a limit
    anywhere on the path holds it: a systemd slice, a pod above a container); cgroup v1's
    ``memory.limit_in_bytes`` (or the ``hierarchical_memory_limit`` of ``memory.stat``, where lower)
    less ``memory.usage_in_bytes``; and /proc/meminfo's MemAvailable. A group's usage counts the page
    cache of the files it read (a 1 GB trace: ≈ 1 GB), which the kernel drops before it kills
    anything: its ``inactive_file`` is not counted as held. "max", a v1 limit of 2^63, or no file:
    no limit there."""
    limits: list[int] = []
    rooms: list[int] = []
    for folder in v2_groups(cgroup_root, proc_cgroup):  # v2: the own group, then each above it
        limit = _read_int(os.path.join(folder, "memory.max"))
        held = _read_int(os.path.join(folder, "memory.current"))
        if limit is not None and limit < _NO_LIMIT:
            limits.append(limit)
            if held is not None:
                rooms.append(limit - held + _stat(folder, "inactive_file"))
    v1 = os.path.join(cgroup_root, "memory")
    for folder in dict.fromkeys([os.path.join(v1, own_group("memory", proc_cgroup)), v1]):
        limit = _read_int(os.path.join(folder, "memory.limit_in_bytes"))
        if limit is None:
            continue
        limit = min(limit, _stat(folder, "hierarchical_memory_limit") or limit)
        held = _read_int(os.path.join(folder, "memory.usage_in_bytes"))
        if limit < _NO_LIMIT:
            limits.append(limit)
            if held is not None:
                rooms.append(limit - held + _stat(folder, "total_inactive_file"))
        break  # the nearest group that has the files: the one this process is charged to
    free = _meminfo_available(meminfo)
    if free is not None:
        rooms.append(free)
    return MemoryRoom(min(limits, default=None), max(0, min(rooms)) if rooms else None)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # absent, unreadable, or "max"


def _stat(folder: str, key: str) -> int:
    """One counter of a group's ``memory.stat`` (bytes); 0 where absent."""
    try:
        with open(os.path.join(folder, "memory.stat")) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _meminfo_available(meminfo: str) -> int | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


Progress = Callable[[str, float | None], None]
"""``progress(stage, fraction_done_or_None)``; collectors call it, the CLI draws it."""

_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


# --- the decompression cap (one place for every reader of gzip input) -------------------------------
# Real traces expand 9–30× when decompressed (the bundled Kineto traces, memory timelines and
# snapshots); a gzip bomb expands ~1000×. So: beyond RATIO_FLOOR of output, a stream that has
# expanded more than MAX_RATIO× is refused at once (a 20 MB bomb stops after 64 MiB, not at the
# memory limit), and no stream may exceed DEFAULT_MAX_DECOMPRESSED (the JSON parser needs ~10×
# the text in Python objects, so 4 GiB of JSON is already beyond most machines). Asking for a
# size explicitly (``--max-decompressed SIZE`` or TRAINSCOPE_MAX_DECOMPRESSED) sets the cap to
# it and lifts the ratio check: the user vouches for the file.
DEFAULT_MAX_DECOMPRESSED = 4 << 30
MAX_RATIO = 100
RATIO_FLOOR = 64 << 20
MAX_DECOMPRESSED_ENV = "TRAINSCOPE_MAX_DECOMPRESSED"
_override: int | None = None


def set_max_decompressed(n: int | None) -> None:
    """``--max-decompressed``: the cap for this process (None: back to the default / env var)."""
    global _override
    _override = n


def max_decompressed_override() -> int | None:
    """The cap ``--max-decompressed`` set in this process (None: the default / env var): what the
    rank map hands its workers, which run in other processes."""
    return _override


def parse_size(text: str) -> int:
    """``4GiB``, ``500MB``, ``2G``, ``1048576`` → bytes (K/M/G/T are powers of 1024 without ``B``)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", text, re.I)
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 8GiB, 500MB)")
    exp = " kmgt".index(m.group(2).lower() or " ")
    base = 1000 if m.group(3).lower() == "b" else 1024
    n = int(float(m.group(1)) * base**exp)
    if n <= 0:
        raise ValueError("a size must be > 0")
    return n


def decompression_cap() -> tuple[int, bool]:
    """(cap in bytes, whether the ratio check applies)."""
    if _override is not None:
        return _override, False
    env = os.environ.get(MAX_DECOMPRESSED_ENV)
    if env:
        try:
            return parse_size(env), False
        except ValueError:
            pass
    return DEFAULT_MAX_DECOMPRESSED, True


def _human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def check_expansion(path: str, total_out: int, consumed_in: int, cap: int, check_ratio: bool) -> None:
    """The one decompression rule, for every reader that gunzips: past ``cap`` bytes out, or (with
    the ratio check) past RATIO_FLOOR at more than MAX_RATIO× the compressed bytes consumed, a
    TraceError naming the cap and how to raise it."""
    if total_out > cap:
        raise TraceError(
            path,
            f"decompresses to more than {_human(cap)}, the cap on decompressed "
            "input; raise it with --max-decompressed SIZE (or "
            f"{MAX_DECOMPRESSED_ENV}=SIZE)",
        )
    if check_ratio and total_out > RATIO_FLOOR and total_out > MAX_RATIO * consumed_in:
        raise TraceError(
            path,
            f"expands more than {MAX_RATIO}× when decompressed (a gzip bomb? traces "
            "expand 10–30×); --max-decompressed SIZE lifts this check",
        )


def gunzip_limited(
    f: IO[bytes], path: str, size: int, progress: Progress | None = None, max_bytes: int | None = None
) -> tuple[bytes, str | None, list[str]]:
    """Decompress the gzip stream in ``f`` under the cap: ``(data, damage or None, warnings)``.
    Over the cap (or the ratio check): TraceError, one line naming the cap and how to raise it."""
    cap, check_ratio = decompression_cap()
    if max_bytes is not None and max_bytes < cap:
        cap = max_bytes
    dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out: list[bytes] = []
    total = done = 0
    damaged = None
    warnings: list[str] = []
    while chunk := f.read(_CHUNK):
        done += len(chunk)
        while True:
            try:
                piece = dec.decompress(chunk, _CHUNK * 16)  # bounded output per call
            except zlib.error as e:
                damaged = f"corrupt gzip data ({e})"
                break
            chunk = dec.unconsumed_tail
            total += len(piece)
            check_expansion(path, total, done - len(chunk), cap, check_ratio)
            out.append(piece)
            if dec.eof or (not chunk and len(piece) < _CHUNK * 16):
                break
        if damaged:
            break
        if dec.eof:  # trailing garbage or a second member: ignore, but say so
            if dec.unused_data.strip(b"\x00") or f.read(1):
                warnings.append("data after the end of the gzip stream ignored")
            break
        if progress:
            progress("decompressing", done / size if size else None)
    else:
        if not dec.eof:
            damaged = "gzip stream is truncated"
    if damaged is None:
        out.append(dec.flush())
    return b"".join(out), damaged, warnings


def check_regular_file(path: str) -> None:
    """Refuse a FIFO, device or socket before opening it: reading one can block forever (a FIFO
    with no writer) or never end (/dev/zero)."""
    import stat

    st = os.stat(path)
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    kind = (
        "a FIFO (named pipe)"
        if stat.S_ISFIFO(st.st_mode)
        else "a device"
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
        else "a socket"
        if stat.S_ISSOCK(st.st_mode)
        else "a special file"
    )
    raise TraceError(path, f"is {kind}, not a regular file: save the data to a file first")


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
        data, damaged, more = gunzip_limited(f, path, size, progress)
        warnings += more
        if damaged:
            if not data:
                raise TraceError(path, f"{damaged}; nothing could be decompressed")
            warnings.append(f"{damaged}: analyzed the first {len(data):,} decompressed bytes")
        return data, warnings


# --- text a strict decoder refuses inside valid JSON strings ------------------------------------------
# JSON allows any \uXXXX escape, so a lone UTF-16 surrogate (\ud800 without its low half) is valid
# JSON but not Unicode text, and a name written by a C++ profiler can hold bytes that are not UTF-8.
# msgspec (the streaming reader) refuses both; Python's json keeps lone surrogates (strings that
# cannot be encoded) and refuses the bytes. Both readers repair them the same way before decoding,
# count them and say so in one warning: each lone-surrogate escape becomes the visible text
# ``\ud800`` (its JSON escape escaped: ``\\ud800``) and each byte that is not part of valid UTF-8
# the text ``\xff``. Visible, not U+FFFD: two names that differ only there stay two names, and the
# text is what the sanitizer of every output (traces/safe_text.py) shows for a lone surrogate.
# The text is decoded with ``surrogateescape`` (one character per undecodable byte); the repairs
# make it longer, and :class:`Repaired` maps a position in the repaired text back to the original.
_LONE_HINT = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_HINT_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # the surrogateescape stand-ins of undecodable bytes
# An escaped backslash (consumed, so that the next "u" is not taken for an escape), a surrogate pair
# (kept), or one surrogate escape on its own (repaired). It starts with a backslash, so the regex
# engine skips to the next one at C speed (8 MB of ASCII in ≈ 26 ms).
_ESCAPES = re.compile(
    r"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[dD][89a-fA-F][0-9a-fA-F]{2})"
)


def json_text(data: bytes) -> str:
    """``data`` decoded as UTF-8, each byte that is not UTF-8 kept as its surrogateescape stand-in."""
    return data.decode("utf-8", "surrogateescape")


def byte_offset(text: str, i: int) -> int:
    """The byte offset of character ``i`` of :func:`json_text`'s text."""
    return len(text[:i].encode("utf-8", "surrogateescape"))


@dataclass
class Repaired:
    """A text after :func:`repair_text`, with where each repair ended in it (sorted), how many
    characters the repairs up to it added, and whether it was a lone surrogate (else a byte)."""

    text: str
    ends: list[int] = field(default_factory=list)
    shifts: list[int] = field(default_factory=list)
    lone: list[bool] = field(default_factory=list)

    def counts(self, upto: int | None = None) -> tuple[int, int]:
        """(lone-surrogate escapes, bytes that are not UTF-8) repaired before position ``upto``."""
        k = len(self.ends) if upto is None else bisect.bisect_right(self.ends, upto)
        lone = sum(self.lone[:k])
        return lone, k - lone

    def original(self, i: int) -> int:
        """The position in the original text of position ``i`` (outside a repair) of this one."""
        k = bisect.bisect_right(self.ends, i)
        return i - (self.shifts[k - 1] if k else 0)


def repair_text(text: str) -> Repaired:
    """``text`` (from :func:`json_text`) with each lone-surrogate escape and each undecodable byte
    replaced by its visible text (two scans and nothing else when there is none)."""
    edits: list[tuple[int, int, str, bool]] = []  # (start, end, replacement, a lone surrogate)
    if "\\u" in text and _LONE_HINT_TEXT.search(text):
        # a pair (12 characters) or an escaped backslash (2) is kept
        edits += [
            (m.start(), m.end(), "\\" + m.group(), True) for m in _ESCAPES.finditer(text) if m.end() - m.start() == 6
        ]
    if not text.isascii():
        edits += [(m.start(), m.end(), f"\\\\x{ord(m.group()) - 0xDC00:02x}", False) for m in _NOT_UTF8.finditer(text)]
    if not edits:
        return Repaired(text)
    edits.sort()
    r = Repaired(text)
    parts, last, shift = [], 0, 0
    for start, end, rep, lone in edits:
        parts += [text[last:start], rep]
        last = end
        shift += len(rep) - (end - start)
        r.ends.append(end + shift)
        r.shifts.append(shift)
        r.lone.append(lone)
    parts.append(text[last:])
    r.text = "".join(parts)
    return r


def _visible_bytes(e: UnicodeError) -> tuple[str, int]:
    """The ``trainscope-visible`` decoding error handler: each byte that is not UTF-8 as the JSON
    text of ``\\xNN`` (what :func:`repair_text` writes), counted in :data:`_visible`."""
    assert isinstance(e, UnicodeDecodeError)
    bad = e.object[e.start : e.end]
    _visible.n = getattr(_visible, "n", 0) + len(bad)
    return "".join(f"\\\\x{b:02x}" for b in bad), e.end


_visible = threading.local()
codecs.register_error("trainscope-visible", _visible_bytes)


def repair_bytes(data: bytes) -> tuple[bytes, int, int]:
    """``data`` repaired as :func:`repair_text` does, as UTF-8: (bytes, lone-surrogate escapes, bytes
    that are not UTF-8); the same object and 0, 0 when it needs nothing (two C scans for the usual
    ASCII slice, no decoding). The bytes are replaced by the decoder itself (an error handler: the
    slices of the streaming reader need no positions)."""
    bad = 0
    if data.isascii():
        if not _LONE_HINT.search(data):
            return data, 0, 0
        text = data.decode("ascii")
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            _visible.n = 0
            text = data.decode("utf-8", "trainscope-visible")
            bad = _visible.n
    lone = 0
    if "\\u" in text and _LONE_HINT_TEXT.search(text):

        def escape(m: re.Match[str]) -> str:
            nonlocal lone
            s: str = m.group()
            if len(s) != 6:
                return s
            lone += 1
            return "\\" + s

        text = _ESCAPES.sub(escape, text)
    if not (lone or bad):
        return data, 0, 0
    return text.encode("utf-8"), lone, bad


def loads_repaired(data: bytes) -> tuple[Any, int, int]:
    """``json.loads`` of ``data`` after :func:`repair_bytes`: (value, escapes, bytes repaired)."""
    fixed, lone, bad = repair_bytes(data)
    return json.loads(fixed), lone, bad


TEXT_REPAIRED = "text that is not Unicode in JSON strings kept as visible escapes"


def text_repair_warning(lone: int, bad: int) -> list[str]:
    """The one warning line of the text repairs (empty when there were none)."""
    if not (lone or bad):
        return []
    what = []
    if lone:
        what.append(f"{lone:,} lone-surrogate escape{'s' if lone != 1 else ''} (\\udXXX without its pair)")
    if bad:
        what.append(f"{bad:,} byte{'s' if bad != 1 else ''} that {'are' if bad != 1 else 'is'} not UTF-8 (\\xNN)")
    return [f"{TEXT_REPAIRED}: {', '.join(what)}; every event holding one is read"]


def parse_json_events(path: str, data: bytes) -> tuple[object, list[str]]:
    """Parse a chrome-trace document. Lone-surrogate escapes and bytes that are not UTF-8 are
    repaired (:func:`repair_text`) and counted in a warning. On a truncated or damaged document,
    salvage the complete events before the damage from its event array and say how many were kept."""
    if not data.strip():
        raise TraceError(path, "file is empty")
    enc = json.detect_encoding(data)
    if enc not in ("utf-8", "utf-8-sig"):  # UTF-16 or UTF-32: Python's json decodes it as it is
        try:
            return json.loads(data), []
        except UnicodeDecodeError:
            raise TraceError(path, "not a text (JSON) file") from None
        except (json.JSONDecodeError, RecursionError) as e:
            text = data.decode(enc, errors="replace")
            return _salvaged(path, e, text, Repaired(text), 0)
    bom = 3 if enc == "utf-8-sig" else 0
    orig = json_text(data[bom:] if bom else data)
    r = repair_text(orig)
    try:
        return json.loads(r.text), text_repair_warning(*r.counts())
    except (json.JSONDecodeError, RecursionError) as e:
        if r.counts()[1] and orig.lstrip()[:1] not in ("{", "["):
            raise TraceError(path, "not a text (JSON) file") from None
        return _salvaged(path, e, orig, r, bom)


def _salvaged(path: str, error: Exception, orig: str, r: Repaired, bom: int) -> tuple[object, list[str]]:
    """The complete events before the damage in ``r.text`` (``orig`` repaired), with the warnings;
    the repairs are counted in what was read, as the stream reader counts them."""
    events, where = _salvage_events(r.text)
    if not events:
        raise TraceError(path, f"not valid JSON ({_short(error)}) and no complete trace events before the error")
    return {"traceEvents": events}, [
        f"JSON is truncated or damaged ({_short(error)}): analyzed the {len(events):,} complete events "
        f"before byte {bom + byte_offset(orig, r.original(where)):,}; top-level fields after the event array are lost"
    ] + text_repair_warning(*r.counts(where))


def _short(e: Exception) -> str:
    msg = str(e)
    return msg if len(msg) < 90 else msg[:87] + "..."


def _salvage_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """Decode events one by one from the ``traceEvents`` array (or a bare array) until damage."""
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else (0 if text.lstrip().startswith("[") else -1)
    if start < 0:
        return [], 0
    if key < 0:
        start = text.find("[")
    decoder = json.JSONDecoder()
    pos = start + 1
    events: list[dict[str, Any]] = []
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
