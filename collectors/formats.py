"""The input kinds trainscope reads, declared once: a row per kind with its name, the suffixes it goes
by, how its first bytes are recognized, the function that loads it, and whether it holds sampled
counters only. ``open_traces`` / ``open_any`` / ``open_file``, the rank executor's file listing,
``memory`` and the report document all read this table; adding a format is its reader plus one row.

Rows are tried in order; the first whose :attr:`Reader.claims` is true reads the file. A row without
a loader is a kind trainscope recognizes but ``analyze`` does not read (it says what does instead).
Loaders are named as ``module:function`` and imported only when a file of that kind is read, so the
table costs nothing to import.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainscope.collectors.errors import TraceError
from trainscope.collectors.readers import GZIP_MAGIC
from trainscope.collectors.readers import SQLITE_MAGIC
from trainscope.collectors.readers import Progress
from trainscope.collectors.readers import sniff

if TYPE_CHECKING:
    from trainscope.traces.model import Trace

Sniff = Callable[[str, bytes], bool]
"""``sniff(path, first 16 bytes)``: the file is of this kind."""


@dataclass(frozen=True)
class Reader:
    name: str  # the Trace.format its traces carry (or the kind's name for rows that load nothing)
    description: str
    suffixes: tuple[str, ...]  # lower-case; what a rank directory lists and what the suffix test accepts
    sniff: Sniff | None = None  # recognizes the kind from its first bytes (None: by suffix only)
    load: str | None = None  # "module:function": (path, progress) -> list[Trace]; None: not an analyze input
    counters_only: bool = False  # sampled counters, no events: the live rules decide
    rank_files: bool = False  # a directory of such files is a set of ranks
    needs_bytes: bool = True  # an empty file is refused before sniffing
    refusal: str | None = None  # what to say when the kind is recognized but not read by analyze
    directory: bool = False  # the input is a directory (one export), not a file

    def claims(self, path: str, head: bytes) -> bool:
        lower = path.lower()
        if self.sniff is not None:
            return self.sniff(path, head)
        return lower.endswith(self.suffixes)

    def loader(self) -> Callable[[str, Progress | None], list[Trace]]:
        assert self.load is not None
        module, fn = self.load.split(":")
        load: Callable[[str, Progress | None], list[Trace]] = getattr(importlib.import_module(module), fn)
        return load


def _suffix(*suffixes: str) -> Sniff:
    return lambda path, head: path.lower().endswith(suffixes)


# The sniffers and loaders below import their reader when a file of its kind is read: each reader
# costs start-up time this table must not (measured with -X importtime after this module: snapshot
# 45 ms, columnar 16, live_trace 11, kineto 43, nsys 95, nsys_report 34).


def _is_pickle(path: str, head: bytes) -> bool:
    from trainscope.collectors.snapshot import is_pickle  # start-up cost: see above

    return is_pickle(head)


def _arrow_dir(path: str, head: bytes) -> bool:
    from trainscope.collectors.columnar import ArrowDir  # start-up cost: see above

    return ArrowDir.looks_like(path)


def _fake_sqlite(path: str, head: bytes) -> bool:
    return path.lower().endswith(".sqlite") and not head.startswith(SQLITE_MAGIC)


def _is_kineto(path: str, head: bytes) -> bool:
    return head[:2] == GZIP_MAGIC or head.lstrip()[:1] in (b"{", b"[") or path.lower().endswith(KINETO_SUFFIXES)


KINETO_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")


def _counters_reader(name: str, description: str, suffix: str) -> Reader:
    """A reader of sampled counters (a recording, an nvidia-smi log): the file's first line names
    its format (:func:`_live`)."""
    return Reader(
        name,
        description,
        (suffix,),
        lambda path, head: _live(path) == name,
        "trainscope.collectors.formats:_load_live",
        counters_only=True,
    )


READERS: tuple[Reader, ...] = (
    Reader(
        "nsys-rep",
        "Nsight Systems report, exported to SQLite with `nsys export` (nsys on PATH)",
        (".nsys-rep", ".qdrep"),
        _suffix(".nsys-rep", ".qdrep"),
        "trainscope.collectors.formats:_load_nsys_rep",
        needs_bytes=False,
    ),
    Reader(
        "cuda-snapshot",
        "CUDA memory snapshot (torch.cuda.memory._snapshot pickle)",
        (".pickle", ".pkl"),
        _is_pickle,
        refusal="is a pickle (a CUDA memory snapshot?): analyze it with `trainscope memory {path}`; analyze reads "
        "profiler traces",
    ),
    Reader(
        "nsys-sqlite",
        "Nsight Systems SQLite export (`nsys export --type sqlite`)",
        (".sqlite",),
        lambda path, head: head.startswith(SQLITE_MAGIC),
        "trainscope.collectors.nsys:load_nsys",
        rank_files=True,
    ),
    Reader(
        "not-sqlite",
        "a .sqlite file that is not an SQLite database",
        (".sqlite",),
        _fake_sqlite,
        refusal="not an SQLite database (an Nsight Systems export is written by `nsys export --type sqlite`)",
    ),
    _counters_reader(
        "trainscope.recording", "`trainscope watch --record` recording (JSON lines of sampled counters)", ".jsonl"
    ),
    _counters_reader("nvidia-smi-csv", "nvidia-smi --format=csv log (sampled counters)", ".csv"),
    Reader(
        "kineto",
        "PyTorch profiler (Kineto) chrome trace, plain or gzipped",
        KINETO_SUFFIXES,
        _is_kineto,
        "trainscope.collectors.formats:_load_kineto",
        rank_files=True,
    ),
    Reader(
        "nsys-columnar",
        "Nsight Systems columnar export, a folder of tables (`nsys export --type arrowdir` or `parquetdir`)",
        (),
        _arrow_dir,
        "trainscope.collectors.nsys:load_nsys_columnar",
        directory=True,
    ),
)

COUNTER_FORMATS: tuple[str, ...] = tuple(r.name for r in READERS if r.counters_only)
RANK_FILE_SUFFIXES: tuple[str, ...] = tuple(s for r in READERS if r.rank_files for s in r.suffixes)


def _live(path: str) -> str | None:
    from trainscope.collectors.live_trace import live_format  # start-up cost: see above

    return live_format(path)


def _load_live(path: str, progress: Progress | None) -> list[Trace]:
    from trainscope.collectors.live_trace import load_live_trace  # start-up cost: see above

    fmt = _live(path)
    if fmt is None:  # (not reached: the row claims only what _live names)
        raise TraceError(path, "not a trainscope recording or an nvidia-smi CSV log")
    return [load_live_trace(path, fmt)]


def _load_kineto(path: str, progress: Progress | None) -> list[Trace]:
    from trainscope.collectors.kineto import load_kineto  # start-up cost: see above

    return [load_kineto(path, progress)]


def _load_nsys_rep(path: str, progress: Progress | None) -> list[Trace]:
    from trainscope.collectors.nsys import load_nsys  # start-up cost: see above
    from trainscope.collectors.nsys_report import export_report  # start-up cost: see above

    return load_nsys(export_report(path, progress), progress)


def directory_reader_for(path: str) -> Reader | None:
    """The row that reads directory ``path`` as one input (a columnar Nsight export), or None: a
    directory of rank traces."""
    return next((r for r in READERS if r.directory and r.claims(path, b"")), None)


def reader_for(path: str) -> Reader:
    """The row that reads ``path`` (a regular, readable file), or TraceError: empty, recognized but not
    an analyze input (with what reads it), or unrecognized."""
    empty = os.path.getsize(path) == 0
    head = b"" if empty else sniff(path)
    for r in READERS:
        if r.directory or (empty and r.needs_bytes):
            continue
        if r.claims(path, head):
            if r.load is None:
                raise TraceError(
                    path, (r.refusal or f"is a {r.description}; analyze does not read it").format(path=path)
                )
            return r
    if empty:
        raise TraceError(path, "file is empty")
    raise TraceError(
        path,
        "unrecognized format: expected a PyTorch profiler trace (.json, .json.gz), "
        "an Nsight Systems export (.sqlite, .nsys-rep), an nvidia-smi --format=csv log (.csv) "
        "or a `trainscope watch --record` recording (.jsonl)",
    )


def describe() -> list[tuple[str, str, str]]:
    """(name, suffixes, description) of every kind analyze reads: for --help and the docs."""
    return [(r.name, " ".join(r.suffixes), r.description) for r in READERS if r.load is not None]


def is_snapshot(path: str) -> bool:
    """``memory``'s choice: a CUDA memory snapshot (the ``cuda-snapshot`` row; a gzipped snapshot is
    still one), else a memory timeline."""
    import gzip

    head = sniff(path)
    if head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(16)
        except (OSError, EOFError):
            pass
    row = next(r for r in READERS if r.name == "cuda-snapshot")
    return row.claims(path, head)
