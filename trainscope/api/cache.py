"""The analysis cache: a second look at the same trace, with the same options, without reading it.

An entry is the analysis document (``Report.to_dict()``, what ``--format json|text|markdown``
print) of one input analyzed with one set of options, keyed by a SHA-256 over

- the input's identity: for a file its size, modification time (ns) and a hash of its bytes (the
  whole file up to :data:`FULL_HASH_BYTES`, else its first and last :data:`HEAD_TAIL_BYTES`); for a
  directory of ranks or a glob every member's identity under its name; for another directory (an
  Nsight arrow/parquet export) every file below it;
- the analysis version: :data:`ANALYSIS_VERSION`, trainscope's version and a hash of the source
  of every package that computes or shapes the document (readers, analyzers, reports, this layer),
  so a changed analyzer never serves an old answer;
- every option that changes a result: the whole threshold table, ``step_range``, the peaks,
  ``deep`` (with HTA's version) and ``deep_step``, ``model``, the decompression cap, and the name of
  the input (a relative path as given: the document prints it).

An absolute path is not part of the key: the document is stored with that path replaced by a
placeholder and named by the path of the look that reads it (the MCP server analyzes each input
under a private folder of its own; a trace moved with its times kept is the same trace).

Entries live in :func:`cache_dir` (``$TRAINSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainscope``,
else ``~/.cache/trainscope``), a folder made 0700 and used only when it is a real folder owned by
this user and closed to others. Each is written under a private temporary name (``O_EXCL``) and
renamed into place, so a reader sees a whole entry or none and two writers of one entry both leave a
valid one (the last rename wins). An entry is data, never code: a checksum, a format line and the
document's shape are checked on every load; a damaged entry is removed, the input analyzed again
and the damage said in one line on stderr and counted (:data:`STATS`). The folder is bounded
(:data:`DEFAULT_MAX_BYTES`, ``$TRAINSCOPE_CACHE_MAX``): a read touches an entry's modification
time, and the least recently used go first. ``TRAINSCOPE_NO_CACHE=1`` (or ``--no-cache``) turns the
cache off; the test suite runs with it off (tests/conftest.py).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from typing import IO
from typing import TYPE_CHECKING
from typing import Any

import trainscope
from trainscope.api.errors import BadInput
from trainscope.api.inputs import describe_input
from trainscope.api.rendered import RenderedAnalysis
from trainscope.api.report import Report
from trainscope.collectors.readers import decompression_cap
from trainscope.collectors.readers import parse_size
from trainscope.collectors.step_hook import PRIVATE
from trainscope.collectors.step_hook import discard_temp
from trainscope.collectors.step_hook import open_folder
from trainscope.collectors.step_hook import process_start
from trainscope.reports.analysis_document import AnalysisDocument

if TYPE_CHECKING:
    from trainscope.analyzers.rules import Rules
    from trainscope.api.report import Report

ANALYSIS_VERSION = 1
"""Bumped when the document changes in a way the source hash cannot see (a dependency's behaviour)."""
ENTRY_FORMAT = 1
MAGIC = b"trainscope-cache 1\n"
SUFFIX = ".entry"
SUFFIXES = (SUFFIX, ".trace")  # a document; a trace's columns (trainscope/api/trace_cache.py)
TMP_PREFIX = ".tmp-"
DEFAULT_MAX_BYTES = 2 << 30
HEAD_TAIL_BYTES = 1 << 20
FULL_HASH_BYTES = 8 << 20
MAX_DIR_FILES = 100_000  # an export directory with more files than this is not identified (not cached)

ENV_DIR = "TRAINSCOPE_CACHE_DIR"
ENV_MAX = "TRAINSCOPE_CACHE_MAX"
ENV_OFF = "TRAINSCOPE_NO_CACHE"
# Tests only: the writer stops half-way through an entry, creates the file this names and waits to
# be killed (tests/test_cache.py kills it with SIGKILL at that point, not after a sleep).
ENV_PAUSE = "TRAINSCOPE_CACHE_PAUSE_WRITE"

_PLACEHOLDER = "\ue000trainscope:source\ue001"  # private-use characters around a name: never in a trace's text
# Where the source of the document's code lies (relative to the installed package): what the key hashes.
_CODE_PACKAGES = ("trainscope.analyzers", "trainscope.collectors", "trainscope.traces", "trainscope.reports")
_CODE_FILES = ("api/analysis.py", "api/report.py", "api/rules.py", "api/executor.py", "api/cache.py", "modelspec.py")


@dataclass
class Stats:
    """What the cache did in this process (tests and ``trainscope cache info`` read it)."""

    hits: int = 0
    misses: int = 0
    stores: int = 0
    damaged: int = 0  # entries that failed their checks: removed and rebuilt
    evicted: int = 0
    uncacheable: int = 0  # documents (or traces) holding a value the entry format cannot keep exactly (not stored)
    trace_hits: int = 0  # traces read from their columns (trainscope/api/trace_cache.py)
    trace_misses: int = 0
    trace_stores: int = 0
    too_large: int = 0  # traces whose columns would take more than their share of the bound (not stored)
    problems: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


STATS = Stats()
_warned_folder = False


def enabled(flag: bool = True) -> bool:
    """The cache is used: asked for, and not turned off by ``$TRAINSCOPE_NO_CACHE``."""
    return flag and os.environ.get(ENV_OFF, "").strip().lower() in ("", "0", "false", "no")


def cache_dir() -> str:
    """``$TRAINSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainscope``, else ``~/.cache/trainscope``."""
    if os.environ.get(ENV_DIR):
        return os.path.abspath(os.environ[ENV_DIR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "trainscope")


def max_bytes() -> int:
    """The folder's bound: ``$TRAINSCOPE_CACHE_MAX`` (``500MB``, ``2GiB``, bytes) or 2 GiB."""
    text = os.environ.get(ENV_MAX, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES

    try:
        return parse_size(text)
    except ValueError as e:
        raise BadInput(f"{ENV_MAX}: {e}") from None


# -- the folder -------------------------------------------------------------------------------------


def open_dir(create: bool = True) -> int | None:
    """A descriptor of the cache folder, checked (a real folder, this user's, closed to others);
    None when it does not exist and ``create`` is False. PermissionError (or OSError) when unsafe."""

    path = cache_dir()
    if create:
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, 0o700, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    elif not os.path.lexists(path):
        return None
    return open_folder(path, PRIVATE)


def _problem(message: str) -> None:
    """One line on stderr, and the count."""
    STATS.problems.append(message)
    sys.stderr.write(f"trainscope: cache: {message}\n")
    sys.stderr.flush()


@dataclass
class Listing:
    entries: list[tuple[str, int, int]]  # (name, bytes, mtime_ns)
    temporary: list[tuple[str, int]]  # (name, bytes): entries being written, or left by a writer that died

    @property
    def bytes(self) -> int:
        return sum(e[1] for e in self.entries)


def listing(dfd: int) -> Listing:
    entries, temporary = [], []
    for name in os.listdir(dfd):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if name.startswith(TMP_PREFIX):
            temporary.append((name, st.st_size))
        elif name.endswith(SUFFIXES):
            entries.append((name, st.st_size, st.st_mtime_ns))
    return Listing(entries, temporary)


def _writer_alive(name: str) -> bool:
    """The process that is writing the temporary file ``name`` (``.tmp-PID-START-…``) still runs."""

    try:
        pid_s, start = name[len(TMP_PREFIX) :].split("-")[:2]
        pid = int(pid_s)
    except ValueError:
        return False
    now = process_start(pid)
    return now == start and now not in ("", "-") or (now == "" and start == "")


def sweep(dfd: int, bound: int | None = None) -> tuple[int, int]:
    """Remove the temporary files of writers that died (a ``kill -9`` mid-write), then the least
    recently used entries until the folder holds at most ``bound`` bytes; (temporary files, entries)
    removed."""
    ls = listing(dfd)
    stray = 0
    for name, _ in ls.temporary:
        if not _writer_alive(name):
            try:
                os.unlink(name, dir_fd=dfd)
                stray += 1
            except FileNotFoundError:
                pass
    evicted = 0
    if bound is not None:
        total = ls.bytes
        for name, size, _ in sorted(ls.entries, key=lambda e: e[2]):
            if total <= bound:
                break
            try:
                os.unlink(name, dir_fd=dfd)
                evicted += 1
            except FileNotFoundError:
                pass
            total -= size
    STATS.evicted += evicted
    return stray, evicted


def clear(dfd: int) -> tuple[int, int]:
    """Remove every entry and every temporary file no live writer holds; (entries, bytes) removed."""
    ls = listing(dfd)
    n = size = 0
    for name, b, _ in ls.entries:
        try:
            os.unlink(name, dir_fd=dfd)
            n, size = n + 1, size + b
        except FileNotFoundError:
            pass
    sweep(dfd)
    return n, size


# -- the key ----------------------------------------------------------------------------------------


def _file_identity(path: str) -> list[object] | None:
    """[size, mtime_ns, sha256] of a regular file (read through one descriptor), None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 61440 != 32768:  # a FIFO, a device: not a stable input
            return None
        h = hashlib.sha256()
        if st.st_size <= FULL_HASH_BYTES:
            while chunk := os.read(fd, 1 << 20):
                h.update(chunk)
        else:
            h.update(os.pread(fd, HEAD_TAIL_BYTES, 0))
            h.update(os.pread(fd, HEAD_TAIL_BYTES, st.st_size - HEAD_TAIL_BYTES))
        return [st.st_size, st.st_mtime_ns, h.hexdigest()]
    except OSError:
        return None
    finally:
        os.close(fd)


def input_identity(path: str) -> list[object] | None:
    """What the input is, for the key (see the module's docstring); None when it cannot be named
    (missing, unreadable, not a regular file): such an input is analyzed without the cache."""

    described = describe_input(path)  # described again each time: the check after an analysis too
    if described.is_rank_set:
        members: list[object] = []
        for f in described.rank_files:
            ident = _file_identity(f)
            if ident is None:
                return None
            members.append([os.path.basename(f), ident])
        return ["ranks", members] if members else None
    if os.path.isdir(path):
        members = []
        for top, dirs, files in os.walk(path):
            dirs.sort()
            if any(os.path.islink(os.path.join(top, d)) for d in dirs):
                return None  # a linked folder the walk would not enter: not named whole
            for name in sorted(files):
                f = os.path.join(top, name)
                ident = _file_identity(f)  # through a link: the file it names
                if ident is None:
                    return None
                members.append([os.path.relpath(f, path), ident])
                if len(members) > MAX_DIR_FILES:
                    return None
        return ["dir", members]
    ident = _file_identity(path)
    return None if ident is None else ["file", ident]


_code: str | None = None


def source_hash(packages: tuple[str, ...], files: tuple[str, ...]) -> str:
    """A hash of the source of ``packages`` and of ``files`` (relative to the installed package)."""
    import importlib.util

    h = hashlib.sha256()
    top = os.path.dirname(os.path.abspath(trainscope.__file__))
    paths = [os.path.join(top, f) for f in files]
    for pkg in packages:
        spec = importlib.util.find_spec(pkg)
        for where in (spec.submodule_search_locations or []) if spec else []:
            for d, dirs, names in os.walk(where):
                dirs[:] = sorted(x for x in dirs if x != "__pycache__")
                paths += [os.path.join(d, n) for n in sorted(names) if n.endswith((".py", ".c"))]
    for f in paths:
        try:
            with open(f, "rb") as fh:
                h.update(os.path.basename(f).encode() + b"\0" + fh.read() + b"\0")
        except OSError:
            h.update(f.encode() + b"\0missing\0")
    return h.hexdigest()


def code_version() -> str:
    """A hash of the source files that compute and shape the document (once per process)."""
    global _code
    if _code is None:
        _code = source_hash(_CODE_PACKAGES, _CODE_FILES)
    return _code


def rules_key(rules: Rules) -> list[str]:
    return [repr(t) for t in rules.all()]


def key_for(path: str, source: str, options: dict[str, Any]) -> tuple[str, bool] | None:
    """(key, whether the document is stored relocated) for analyzing ``path`` named ``source`` with
    ``options`` (JSON-able); None when the input cannot be identified."""

    relocated = source == path and os.path.isabs(path)
    own = {
        "entry": ENTRY_FORMAT,
        "analysis": ANALYSIS_VERSION,
        "code": code_version(),
        "source": None if relocated else source,
        "options": options,
    }
    return entry_key(path, relocated, own)


def entry_key(path: str, relocated: bool, own: dict[str, Any]) -> tuple[str, bool] | None:
    """(the hash that names an entry, ``relocated``) for an input ``path``: its identity
    (:func:`input_identity`), name, path (unless the entry is stored relocated), the decompression
    cap and trainscope's version, with ``own``, what the kind of entry adds (its format, code
    version, options); None when the input cannot be identified. Documents and trace columns
    (:mod:`trainscope.api.trace_cache`) are keyed here."""

    ident = input_identity(path)
    if ident is None:
        return None
    material = {
        "trainscope": trainscope.__version__,
        "input": ident,
        "name": os.path.basename(path.rstrip("/")),
        "path": None if relocated else path,
        "cap": list(decompression_cap()),
        **own,
    }
    text = json.dumps(material, sort_keys=True, ensure_ascii=True, allow_nan=True, default=repr)
    return hashlib.sha256(text.encode("ascii")).hexdigest(), relocated


# -- the value --------------------------------------------------------------------------------------


class Uncacheable(Exception):
    """The document holds a value the entry format would not give back exactly."""


def _plain(v: Any, old: str | None, new: str) -> Any:
    """``v`` as JSON values (floats and ints of numpy made plain; tuples as lists), with ``old``
    replaced by ``new`` in every string and key; :class:`Uncacheable` for anything else."""
    if isinstance(v, str):
        if new in v and old is not None and new == _PLACEHOLDER:
            raise Uncacheable("a string holds the placeholder")
        return v.replace(old, new) if old is not None and old in v else v
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise Uncacheable(f"a key of type {type(k).__name__}")
            out[_plain(k, old, new)] = _plain(x, old, new)
        return out
    if isinstance(v, (list, tuple)):
        return [_plain(x, old, new) for x in v]
    try:
        import numpy as np

        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.floating):
            return float(v)
    except ImportError:  # pragma: no cover
        pass
    raise Uncacheable(f"a value of type {type(v).__name__}")


def encode(key: str, doc: dict[str, Any], source: str, relocated: bool) -> bytes:
    """The bytes of an entry: the magic line, the payload's SHA-256, the payload (JSON, ASCII)."""
    stored = _plain(doc, source if relocated else None, _PLACEHOLDER)
    payload = json.dumps(
        {"format": ENTRY_FORMAT, "key": key, "relocated": relocated, "doc": stored},
        ensure_ascii=True,
        allow_nan=True,
        separators=(",", ":"),
    ).encode("ascii")
    return MAGIC + hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload


class Damaged(Exception):
    pass


_REQUIRED = {"input": dict, "verdict": dict, "breakdown": dict, "findings": list, "warnings": list}


def decode(data: bytes, key: str) -> tuple[str, bool]:
    """An entry's document as JSON text and whether it is relocated; :class:`Damaged` with the reason."""
    if not data.startswith(MAGIC):
        raise Damaged("not a cache entry of this format")
    head, sep, payload = data[len(MAGIC) :].partition(b"\n")
    if not sep or len(head) != 64:
        raise Damaged("truncated")
    if hashlib.sha256(payload).hexdigest().encode("ascii") != head:
        raise Damaged("checksum mismatch (truncated or corrupt)")
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        raise Damaged("not JSON") from None
    if not isinstance(obj, dict) or obj.get("format") != ENTRY_FORMAT or obj.get("key") != key:
        raise Damaged("another entry's content")
    doc = obj.get("doc")
    if not isinstance(doc, dict) or not isinstance(obj.get("relocated"), bool):
        raise Damaged("no document")
    for name, kind in _REQUIRED.items():
        if not isinstance(doc.get(name), kind):
            raise Damaged(f"document without {name}")
    return json.dumps(doc, ensure_ascii=True, allow_nan=True), obj["relocated"]


def open_entry(dfd: int, name: str) -> int | None:
    """The entry file ``name`` in the cache folder ``dfd``, opened to read (never through a link;
    the caller closes it); None when there is none, or when it cannot be opened — a link planted in
    our folder (ELOOP), or worse: not ours to read —, then removed, said and counted as damaged."""
    try:
        return os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        _damaged(dfd, name, f"cannot open: {e.strerror or e}")
        return None


def load(dfd: int, key: str, bound: int) -> tuple[str, bool] | None:
    """The entry ``key`` (its document text, relocated), touched as used; None when there is none.
    A damaged entry is removed, said and counted, and reads as none."""
    name = key + SUFFIX
    fd = open_entry(dfd, name)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o170000 != 0o100000 or st.st_size > bound:
            raise Damaged("not a regular file of a sane size")
        chunks, left = [], st.st_size + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 24))):
            chunks.append(chunk)
            left -= len(chunk)
        result = decode(b"".join(chunks), key)
    except Damaged as e:
        _damaged(dfd, name, str(e))
        return None
    except OSError as e:
        _damaged(dfd, name, f"unreadable: {e.strerror or e}")
        return None
    finally:
        os.close(fd)
    try:
        os.utime(name, dir_fd=dfd, follow_symlinks=False)  # least recently used goes first
    except OSError:
        pass
    return result


def _damaged(dfd: int, name: str, why: str) -> None:
    STATS.damaged += 1
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass
    _problem(f"damaged entry {name[:16]}… removed and rebuilt ({why}); {STATS.damaged} this run")


def store(
    dfd: int,
    key: str,
    data: bytes | list[bytes | memoryview],
    bound: int,
    suffix: str = SUFFIX,
    pause_env: str = ENV_PAUSE,
) -> None:
    """Write the entry (its bytes, or its pieces in order) under a private temporary name and rename
    it into place; then sweep."""

    pid = os.getpid()
    tmp = f"{TMP_PREFIX}{pid}-{process_start(pid)}-{secrets.token_hex(6)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as f:
            pieces = [data] if isinstance(data, bytes) else data
            pause = os.environ.get(pause_env)
            if pause:
                _pause_mid_write(f, b"".join(pieces), pause)
            else:
                for piece in pieces:
                    f.write(piece)
        os.rename(tmp, key + suffix, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        discard_temp(-1, tmp, dfd)  # the descriptor is the file object's, closed by its with-block
        raise
    if suffix == SUFFIX:  # a trace's columns are counted by trace_cache (trace_stores)
        STATS.stores += 1
    sweep(dfd, bound)


def _pause_mid_write(f: IO[bytes], data: bytes, signal_file: str) -> None:  # tests only (ENV_PAUSE)
    """Write half the entry, say so by creating ``signal_file`` (holding this pid), and wait for
    SIGUSR1 (then write the rest; the rename follows) or to be killed. SIGUSR1 is blocked before the file appears, so a
    signal sent as soon as it does is never lost."""
    import signal

    f.write(data[: len(data) // 2])
    f.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    with open(signal_file + ".part", "w") as s:
        s.write(str(os.getpid()))
    os.rename(signal_file + ".part", signal_file)
    signal.sigwait({signal.SIGUSR1})
    f.write(data[len(data) // 2 :])


def _document(text: str, relocated: bool, source: str) -> dict[str, Any]:
    """An entry's document (its JSON text) named by ``source``, the look that reads it."""
    doc: dict[str, Any] = json.loads(text)
    if relocated:
        named: dict[str, Any] = _plain(doc, _PLACEHOLDER, source)
        return named
    return doc


# -- the report a cached document stands for ---------------------------------------------------------


class CachedReport(RenderedAnalysis):
    """An analysis whose document came from (or went into) the cache: what the document renders
    (``to_dict``, ``output``, JSON, text, Markdown, ``verdict_line``) is served from it; anything
    else (the typed results, a rank's trace, the HTML page's timeline, ``--perfetto``, ``--save``)
    is the full :class:`~trainscope.api.report.Report`, analyzed on first use (already there after a
    miss). ``from_cache`` says whether the document was read from the cache."""

    def __init__(
        self, source: str, text: str, relocated: bool, load: Callable[[], Report], report: Report | None = None
    ) -> None:
        self.source = source
        self.from_cache = report is None
        self._text, self._relocated, self._load, self._report = text, relocated, load, report
        self._lock = threading.Lock()

    def full(self) -> Report:
        """The full report (analyzed now, once, when the document came from the cache)."""
        with self._lock:
            if self._report is None:
                self._report = self._load()
            return self._report

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("__", "_")):
            raise AttributeError(name)
        return getattr(self.full(), name)

    def to_dict(self) -> dict[str, Any]:
        return _document(self._text, self._relocated, self.source)

    @property
    def document(self) -> AnalysisDocument:
        """The document, typed (reports/analysis_document.py): read from the entry, not analyzed again."""
        return AnalysisDocument.from_dict(self.to_dict())

    def verdict_line(self) -> str:
        return Report.verdict_line(self)  # type: ignore[arg-type]  # reads only to_dict() and source

    def _repr_html_(self) -> str:
        return self.full()._repr_html_()

    def __repr__(self) -> str:
        return repr(self.full())


def peek(path: str, source: str, rules: Rules, options: dict[str, Any]) -> dict[str, Any] | None:
    """The cached document of analyzing ``path`` named ``source`` with ``rules`` and ``options`` (as
    :func:`cached_analysis` keys them), without analyzing: None when the cache is off, the input
    cannot be identified, the folder is missing or unsafe, or there is no (sound) entry. The
    terminal app opens on it while the full analysis runs behind (tui/app.py). Touches the entry as
    used; counts nothing (a peek is not an analysis)."""
    if not enabled():
        return None
    keyed = key_for(path, source, {**options, "rules": rules_key(rules)})
    if keyed is None:
        return None
    try:
        dfd = open_dir(create=False)
    except OSError:
        return None
    if dfd is None:
        return None
    try:
        hit = load(dfd, keyed[0], max_bytes())
    finally:
        os.close(dfd)
    if hit is None:
        return None
    return _document(hit[0], hit[1], source)


def cached_analysis(
    path: str, source: str, rules: Rules, options: dict[str, Any], analyze: Callable[[], Report]
) -> CachedReport | Report:
    """``analyze()`` of ``path`` through the cache (see the module's docstring). ``options``: every
    option besides the rules that changes the document (JSON-able)."""
    global _warned_folder

    bound = max_bytes()
    keyed = key_for(path, source, {**options, "rules": rules_key(rules)})
    dfd = None
    if keyed is not None:
        try:
            dfd = open_dir(create=True)
        except OSError as e:
            if not _warned_folder:
                _warned_folder = True
                _problem(f"not used: {cache_dir()}: {e.strerror or e}")
    if keyed is None or dfd is None:
        return analyze()
    key, relocated = keyed
    try:
        hit = load(dfd, key, bound)
        if hit is not None:
            STATS.hits += 1
            return CachedReport(source, hit[0], hit[1], analyze)
        STATS.misses += 1
        report = analyze()
        try:
            data = encode(key, report.to_dict(), source, relocated)
        except (Uncacheable, RecursionError, ValueError):
            STATS.uncacheable += 1
            return report
        if key_for(path, source, {**options, "rules": rules_key(rules)}) != keyed:
            return report  # the input changed while it was read: its document names neither version
        try:
            store(dfd, key, data, bound)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
                raise
            _problem(f"entry not written: {e.strerror or e}")
        text, rel = decode(data, key)
        return CachedReport(source, text, rel, analyze, report)
    finally:
        os.close(dfd)
