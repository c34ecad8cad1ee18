"""``trainscope mcp``: the Model Context Protocol server (stdio) a coding agent calls.

Every tool is a call of :mod:`trainscope.api` with a typed result: the numbers and the sources the
report prints (evidence lines carry their citation, fixes their projection and its basis), never a
free-form guess. The server reads only paths under the ``--root`` directories, opened first and
checked after (see :class:`Roots`: a writer inside the root cannot swap a link in between), opens
the run history read-only, and writes nothing but its private folder (:class:`ServerFolder`). Every
answer names a path as a tool call takes it and stays within :data:`BUDGET` characters by default
(pages, a summary level). Needs the ``mcp`` extra (``pip install 'trainscope-dam[mcp]'``).
"""

from __future__ import annotations

import errno
import functools
import math
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import Protocol
from typing import TypeVar
from typing import cast

from pydantic import BaseModel
from pydantic import Field

from trainscope import __version__
from trainscope.api import explore
from trainscope.api.analysis import analyze
from trainscope.api.comparison import diff
from trainscope.api.errors import BadInput
from trainscope.api.errors import describe
from trainscope.api.inputs import describe_input
from trainscope.api.memory_report import memory
from trainscope.api.owners import folder_entries
from trainscope.api.owners import owner_gone
from trainscope.api.owners import owner_record
from trainscope.api.owners import process_alive
from trainscope.api.store import default_store_path
from trainscope.api.store import open_store
from trainscope.reports import analysis_document as ad
from trainscope.reports.document import headline

if TYPE_CHECKING:
    from trainscope.api.report import Report

INSTRUCTIONS = (
    "trainscope diagnoses why a deep-learning training or inference run is slow from its profiler trace "
    "(PyTorch/Kineto .json/.json.gz, a directory of rank traces, Nsight Systems .sqlite): a D·A·M verdict "
    "(data-, algorithm- or machine-bound) with measured evidence, where step time goes, the top kernels and "
    "fixes ranked by a projected gain that is an upper bound. Start with analyze_trace; use explain_finding "
    "for one finding, list_kernels / list_steps / timeline_window to look closer, diff_runs to compare two "
    "runs (traces or stored runs: 12, latest, baseline:TAG), memory_snapshot for a CUDA memory snapshot, and "
    "list_runs for the run history. Quote the numbers and sources the tools return; do not extrapolate beyond "
    "them. Paths must lie under the server's --root; answers name them as a call takes them (relative to the first "
    "root). Every answer stays within 20,000 characters: lists come in pages (call again with page.next_offset), "
    "`more` says what an answer left out and the call that gives it, and detail='full' gives everything."
)


# -- typed results ---------------------------------------------------------------------------------


class Evidence(BaseModel):
    metric: str
    value: float | None = None
    unit: str = ""
    threshold: str = ""
    source: str = Field(default="", description="where the number or its threshold comes from")
    meets: bool | None = None


class Finding(BaseModel):
    id: str
    axis: str
    severity: str
    title: str
    stake_pct: float = Field(description="share of step time this cause accounts for")
    detail: str = ""
    evidence: list[Evidence] = []


class Verdict(BaseModel):
    axis: str = Field(description="data | algorithm | machine | balanced | insufficient_evidence")
    bottleneck: str | None = Field(default=None, description="the primary finding's id")
    confidence: float
    headline: str
    summary: str
    evidence: list[Evidence] = []
    runner_up: str | None = None


class Sink(BaseModel):
    sink: str
    pct: float = Field(description="% of step time")
    ms_per_step: float
    can_be_primary: bool
    source: str


class Kernel(BaseModel):
    name: str
    kernel_class: str
    count: int
    total_ms: float
    mean_us: float
    share_pct: float = Field(description="% of kernel time in the analyzed steps")
    tensor_core: bool | None = None
    bound: str | None = Field(default=None, description="roofline: memory | compute | unknown")


class Fix(BaseModel):
    rank: int
    id: str
    finding: str
    title: str
    change: str = Field(description="the code or flag to change")
    projected_speedup: float | None = Field(default=None, description="upper bound, ×")
    projected_step_ms: float | None = None
    bound: str | None = None
    basis: str = Field(default="", description="the formula with the measured numbers")


class StepTimes(BaseModel):
    p50: float
    p95: float
    mean: float


class RankLateness(BaseModel):
    rank: int | None = None
    mean_late_ms: float = Field(description="mean arrival after the first rank, warm collectives")
    max_late_ms: float
    last_in: int = Field(description="warm collectives at which it alone arrived last")
    considered: int
    straggler: bool
    headline: bool = Field(description="the rank the analysis leads with")


class Stragglers(BaseModel):
    summary: str = Field(description="the rank story's one line, as the text report leads with it")
    straggler: int | None = None
    headline_rank: int | None = None
    headline: str
    cold_start: dict[str, Any]
    ranks: list[RankLateness]


def _more() -> Any:
    return Field(
        default_factory=list,
        description="what this answer leaves out, one line each, with the call that gives it (empty: nothing)",
    )


class Page(BaseModel):
    offset: int = Field(description="the index of this page's first item among all that match")
    limit: int = Field(description="the most items asked for")
    returned: int = Field(description="items on this page (fewer than limit where the page was cut to fit)")
    total: int = Field(description="items that match the call's filters")
    next_offset: int | None = Field(default=None, description="the offset for the next page; null on the last page")


class Analysis(BaseModel):
    source: str = Field(description="the path, as a tool call takes it (relative to the first --root)")
    format: str
    rank: int | None = None
    ranks: int
    device: str | None = None
    steps: int
    steps_method: str
    step_time_ms: StepTimes
    gpu_busy_pct: float
    data_wait_pct: float
    verdict: Verdict
    findings: list[Finding]
    sinks_basis: str = ""
    sinks: list[Sink]
    top_kernels: list[Kernel]
    fixes: list[Fix]
    warnings: list[str]
    command_line: str = Field(description="the trainscope command that prints the same report")
    stragglers: Stragglers | None = Field(default=None, description="rank sets: the rank story (straggler, lateness)")
    detail: str = Field(default="summary", description="summary (findings without their evidence lines) | full")
    more: list[str] = _more()


class Explanation(BaseModel):
    source: str
    rank: int | None = None
    finding: Finding
    role: str = Field(description="primary (the verdict) | runner-up | secondary")
    verdict: dict[str, Any]
    headline: str
    graded_by: list[dict[str, Any]] = Field(description="thresholds that grade it: name, value, unit, source")
    fixes: list[Fix]
    timeline: dict[str, Any] | None = Field(default=None, description="the step and interval that show it most")
    more: list[str] = _more()


class KernelTable(BaseModel):
    source: str
    rank: int | None = None
    device: str | None = None
    basis: str
    total_kernel_ms: float
    kernel_count: int
    steps: int
    matched: int
    kernels: list[dict[str, Any]]
    page: Page | None = None
    more: list[str] = _more()


class StepTable(BaseModel):
    source: str
    rank: int | None = None
    steps_method: str
    steps_note: str
    step_time_ms: dict[str, float]
    matched: int
    steps: list[dict[str, Any]]
    page: Page | None = None
    more: list[str] = _more()


class ModuleTreeTable(BaseModel):
    source: str
    rank: int | None = None
    basis: str
    gpu_ms: float = Field(description="GPU time of the steps' work on the analyzed GPU (the first level sums to it)")
    windows: int = Field(description="step windows the times are summed over")
    nodes_total: int
    notes: list[str]
    matched: int
    nodes: list[dict[str, Any]] = Field(
        description="depth first, each level in the sort's order: path, depth, kind, count, GPU ms inclusive and "
        "exclusive, share of GPU time, host ms, bound, % of roof, TFLOP/s, GB/s, a folded block's instances, "
        "spread and slowest instance, children; with detail='full' its three heaviest kernels"
    )
    detail: str = Field(default="summary", description="summary | full (adds each node's heaviest kernels)")
    page: Page | None = None
    more: list[str] = _more()


class TimelineWindow(BaseModel):
    source: str
    rank: int | None = None
    start_ms: float
    end_ms: float
    window: str = Field(default="", description="why this window: as asked, or the first analyzed step by default")
    steps: list[str]
    matched: int
    shown: int
    busy_ms: dict[str, float]
    events: list[dict[str, Any]]
    page: Page | None = None
    more: list[str] = _more()


class FixAchieved(BaseModel):
    id: str
    finding: str
    title: str
    status: str
    projected_speedup: float | None = None
    achieved_speedup: float | None = None
    line: str | None = None


class Diff(BaseModel):
    before: str
    after: str
    basis: str = Field(description="traces (full comparison) or summaries (a side is a stored run)")
    comparable: bool
    comparability: list[dict[str, Any]]
    verdict: dict[str, Any]
    step_time_ms: dict[str, dict[str, float | None]]
    fixes: list[FixAchieved]
    gate: dict[str, Any] | None = None
    changes: dict[str, Any] = Field(
        default={},
        description="GPU busy, data wait, time per category and per kernel class, work: before, after, change",
    )
    kernels: dict[str, Any] = Field(
        default={}, description="the kernels that grew, shrank, appeared and disappeared, largest change first"
    )
    detail: str = Field(
        default="summary", description="summary (the largest kernel changes) | full (adds the document)"
    )
    document: dict[str, Any] | None = Field(
        default=None, description="with detail='full': the whole trainscope.diff/1 document"
    )
    more: list[str] = _more()


class MemoryDevice(BaseModel):
    device: int
    peak_allocated_bytes: int
    reserved_at_peak_bytes: int
    peak_time_us: int | None = None
    phase: str | None = None
    events: int
    live_at_peak: list[dict[str, Any]] = Field(description="allocations live at the peak, largest first")
    live_count: int
    notes: list[str]


class Memory(BaseModel):
    source: str
    kind: str
    devices: list[MemoryDevice]
    findings: list[dict[str, Any]]
    warnings: list[str]
    detail: str = Field(default="summary", description="summary | full (adds the document)")
    document: dict[str, Any] | None = Field(
        default=None, description="with detail='full': the whole trainscope.memory/1 document"
    )
    more: list[str] = _more()


class Runs(BaseModel):
    store: str
    runs: list[dict[str, Any]]
    skipped: list[str] = Field(default=[], description="damaged runs left out of the listing, one line each")
    page: Page | None = None
    more: list[str] = _more()


_M = TypeVar("_M", bound=BaseModel)


class _Cut(Protocol):
    """An answer that names what it leaves out (:func:`trim`)."""

    more: list[str]


class _Paged(_Cut, Protocol):
    """An answer in pages (:func:`fit_page`)."""

    page: Page | None


_C = TypeVar("_C", bound=_Cut)
_P = TypeVar("_P", bound=_Paged)


# -- paths ---------------------------------------------------------------------------------------------
#
# A writer inside the root may swap any file or folder for a symbolic link at any moment, so a path is
# never checked first and opened later. It is opened first, one component at a time from a descriptor
# of the root, each with O_NOFOLLOW (a link is read with readlink and its target walked the same way
# from the root, so a link that stays inside is followed and one that leads outside is refused), and
# what was opened is checked with fstat. The readers then get the open descriptors, never the path:
# each file appears under its own name in a private folder (mkdtemp, 0700) as a symbolic link to
# /proc/PID/fd/N, which the kernel follows to the open file itself (a child process of the reader
# follows it too), so nothing is looked up in the root again. An SQLite file (and an Nsight report,
# which `nsys` reads) is copied from its descriptor into that folder instead: SQLite resolves links
# by their text, which for /proc/PID/fd/N is the file's path in the root.

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_MAX_LINKS = 40  # symbolic links followed for one path (the kernel's own limit)
_MAX_SWAPS = 100  # a link that turned into something else while it was read: tried again this often
_COPIED_SUFFIXES = (".nsys-rep", ".qdrep")
_SQLITE_MAGIC = b"SQLite format 3\x00"


# The server's private folder: one per server in $TMPDIR (mkdtemp, 0700), named trainscope-mcp-…, with
# an owner file naming the server (pid and start time); each opened path gets a folder inside it. A
# server killed with SIGKILL cannot remove it, so each server removes, when it starts, the folders of
# servers that are gone (:func:`clean_stale`), as `trainscope watch` does with its run folders.

FOLDER_PREFIX = "trainscope-mcp-"
FOLDER_OWNER = "mcp.owner"
# A folder without an owner file is a server's that is starting, or an older server's (one folder per
# opened path; one of a cached analysis lives as long as that server): removed only when it is older
# than this and nothing in it points at a live process.
STALE_S = 24 * 3600.0


def _links_to_live_process(path: str) -> bool:
    """A folder of an older server (no owner file) that is still in use: a link in it (or in a folder
    below) to /proc/PID/fd/N of a live process."""
    import re

    for top, dirs, files in os.walk(path):  # never into a link
        for name in files + dirs:
            try:
                m = re.match(r"/proc/(\d+)/fd/", os.readlink(os.path.join(top, name)))
            except OSError:
                continue
            if m and process_alive(int(m.group(1))):
                return True
    return False


def clean_stale(folder: str | None = None, now: float | None = None) -> list[str]:
    """Remove this user's ``trainscope-mcp-*`` folders in ``folder`` (default ``$TMPDIR``) that servers
    which are gone left behind: the owner file names a process that no longer runs, or (an older
    server's, without one) the folder is older than a day (:data:`STALE_S`) and nothing in it points
    at a live process. Never through a link. Returns what was removed."""
    import shutil
    import time

    now = time.time() if now is None else now
    removed: list[str] = []
    for name, path in folder_entries(folder):
        if not name.startswith(FOLDER_PREFIX):
            continue
        try:
            dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # not a folder, a link, or gone
        try:
            st = os.fstat(dfd)
            if st.st_uid != os.geteuid():
                continue
            gone = owner_gone(dfd, FOLDER_OWNER)
            if gone is None:
                gone = now - st.st_mtime > STALE_S and not _links_to_live_process(path)
        finally:
            os.close(dfd)
        if gone:
            shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: never follows a link
            removed.append(path)
    return removed


class ServerFolder:
    """The server's private folder (made on first use, with its owner file) and the folders in it."""

    def __init__(self) -> None:
        self.path = ""

    def new(self) -> str:
        """A fresh private folder inside the server's (made again if something removed it)."""
        if not self.path or not os.path.isdir(self.path):
            self.path = tempfile.mkdtemp(prefix=FOLDER_PREFIX)
            fd = os.open(
                os.path.join(self.path, FOLDER_OWNER),
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                0o600,
            )
            try:
                os.write(fd, owner_record())
            finally:
                os.close(fd)
        return tempfile.mkdtemp(dir=self.path)

    def remove(self) -> None:
        import shutil

        if self.path:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = ""


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


class Opened:
    """A path under a root, opened: its regular files as open descriptors (:attr:`key` says which
    files they are). :meth:`show` presents them to the readers in a private folder and gives the path
    to hand to the api; :meth:`public` turns that folder's paths in an answer back into the client's
    path. :meth:`close` closes the descriptors and removes the folder."""

    def __init__(self, given: str, name: str, is_dir: bool, folder: ServerFolder | None = None) -> None:
        self.given, self.name, self.is_dir, self.folder = given, name, is_dir, folder
        self.files: list[tuple[str, int]] = []  # (name in the folder, or "" for the file itself; descriptor)
        self.key: tuple[Any, ...] = ()
        self.tmp = self.local = ""

    def show(self) -> str:
        """The private folder's view of what was opened (made on first use): each file a symbolic link
        to its open descriptor under its own name, or a copy read from the descriptor."""
        if self.local:
            return self.local
        import shutil

        self.tmp = self.folder.new() if self.folder is not None else tempfile.mkdtemp(prefix=FOLDER_PREFIX)
        self.local = os.path.join(self.tmp, self.name)
        if self.is_dir:
            os.mkdir(self.local, 0o700)
        proc = f"/proc/{os.getpid()}/fd"
        has_proc = os.path.isdir(proc)
        for entry, fd in self.files:
            dest = os.path.join(self.local, entry) if self.is_dir else self.local
            if has_proc and not (
                os.pread(fd, 16, 0).startswith(_SQLITE_MAGIC) or dest.lower().endswith(_COPIED_SUFFIXES)
            ):
                os.symlink(f"{proc}/{fd}", dest)
                continue
            with os.fdopen(os.dup(fd), "rb") as src, open(dest, "xb") as dst:
                src.seek(0)
                shutil.copyfileobj(src, dst, 1 << 20)
        return self.local

    def public(self, value: Any, shown: str | None = None) -> Any:
        """``value`` (a string, or lists and dicts of them) with the private folder's paths replaced by
        the client's (``shown``, default :attr:`given`: a cached analysis is named as this call names it)."""
        if not self.tmp:
            return value
        shown = self.given if shown is None else shown
        if isinstance(value, str):
            return value.replace(self.local, shown).replace(self.tmp + os.sep, "") if self.tmp in value else value
        if isinstance(value, list):
            return [self.public(v, shown) for v in value]
        if isinstance(value, dict):
            return {self.public(k, shown): self.public(v, shown) for k, v in value.items()}
        return value

    def close(self) -> None:
        for _, fd in self.files:
            try:
                os.close(fd)
            except OSError:
                pass
        self.files = []
        if self.tmp:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


class Roots:
    """The directories the server may read, and the one way to read under them (:meth:`open`)."""

    def __init__(self, roots: list[str], folder: ServerFolder | None = None) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self.given = [os.path.abspath(r) for r in roots]
        self.folder = folder

    def shown(self, root: int, parts: list[str]) -> str:
        """The path ``parts`` under root ``root`` as every answer names it, one form per file: relative
        to the first root (the form a tool call takes), else absolute under its root as given."""
        rest = [p for p in parts if p not in ("", ".")]
        if root == 0:
            return "/".join(rest) or "."
        return os.path.join(self.given[root], *rest)

    def show_path(self, path: str | None) -> str | None:
        """A path that was not opened (a stored run's source) in the answers' form where it lies under
        a root (absolute, without ``..``); else unchanged."""
        if not isinstance(path, str) or not path.startswith("/") or ".." in _parts(path):
            return path
        try:
            return self.shown(*self._root_of(path, path))
        except Exception:  # noqa: BLE001 (outside every root: left as it is)
            return path

    def _refused(self, path: str, what: str = "") -> BadInput:
        lead = f"{path}: refused — {what + ' leads ' if what else ''}"
        return BadInput(f"{lead}outside the allowed roots ({', '.join(self.roots)})")

    def _root_of(self, path: str, absolute: str, what: str = "") -> tuple[int, list[str]]:
        """The root an absolute path (or link target) starts in, and the components after it."""
        parts = _parts(absolute)
        best: tuple[int, list[str]] | None = None
        for i, forms in enumerate(zip(self.roots, self.given)):
            for form in forms:
                head = _parts(form)
                if parts[: len(head)] == head and (best is None or len(head) > len(parts) - len(best[1])):
                    best = (i, parts[len(head) :])
        if best is None:
            raise self._refused(path, what)
        return best

    def _walk(
        self, path: str, root: int, parts: list[str], what: str = ""
    ) -> tuple[int, os.stat_result, list[str], int]:
        """Open ``parts`` from root ``root`` without following a link by the kernel: (descriptor,
        its fstat, the components actually walked, the root they are under). Links are read and
        walked again from where they are; ``..`` may not climb above the root."""
        stack = [os.open(self.roots[root], os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))]
        walked: list[str] = []
        todo = list(parts)
        links = swaps = 0
        try:
            while todo:
                name = todo.pop(0)
                if name == "..":
                    if len(stack) == 1:
                        raise self._refused(path, what)
                    os.close(stack.pop())
                    walked.pop()
                    continue
                try:
                    fd = os.open(name, _OPEN_FLAGS, dir_fd=stack[-1])
                except OSError as e:
                    if e.errno != errno.ELOOP:  # not a link: missing, not a folder, no permission
                        raise BadInput(f"{path}: {_os_problem(e)}") from None
                    try:
                        target = os.readlink(name, dir_fd=stack[-1])
                    except OSError:  # no longer a link: open it again
                        swaps += 1
                        if swaps > _MAX_SWAPS:
                            raise BadInput(f"{path}: changed while it was opened; try again") from None
                        todo.insert(0, name)
                        continue
                    links += 1
                    if links > _MAX_LINKS:
                        raise BadInput(f"{path}: too many levels of symbolic links") from None
                    if target.startswith("/"):
                        root, rest = self._root_of(path, target, what)
                        for d in stack:
                            os.close(d)
                        stack = [os.open(self.roots[root], os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))]
                        walked = []
                        todo = rest + todo
                    else:
                        todo = _parts(target) + todo
                    continue
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(fd)
                    walked.append(name)
                    continue
                if todo or not stat.S_ISREG(st.st_mode):
                    os.close(fd)
                if todo:
                    raise BadInput(f"{path}: not a directory: {'/'.join(walked + [name])}")
                if not stat.S_ISREG(st.st_mode):
                    raise BadInput(f"{path}: {_kind(st.st_mode)}, not a regular file")
                return fd, st, walked + [name], root
            fd = stack.pop()
            return fd, os.fstat(fd), walked, root
        finally:
            for d in stack:
                os.close(d)

    def open(self, path: str) -> Opened:
        """Open ``path`` (absolute, or relative to the first root) under the roots: a regular file, or
        a folder and each regular file in it (what a rank folder's readers list; they read no
        subfolder). Raises BadInput when it, or a file in the folder, leads outside the roots."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise BadInput("give a path")
        if any(c in path for c in "*?["):
            raise BadInput(f"{path}: glob patterns are not accepted here; give a file or a directory")
        root, parts = self._root_of(path, path) if path.startswith("/") else (0, _parts(path))
        opened: Opened | None = None
        fd = -1
        try:
            fd, st, walked, end = self._walk(path, root, parts)
            name = walked[-1] if walked else (os.path.basename(self.roots[end]) or "root")
            # As the server names it back: the path as given, relative to its root; with a ``..`` in
            # it (which a link before it may bend), the path that was walked.
            shown = self.shown(end, walked) if ".." in parts else self.shown(root, parts)
            opened = Opened(shown, name, stat.S_ISDIR(st.st_mode), self.folder)
            if not opened.is_dir:
                opened.files.append(("", fd))
                fd = -1
                opened.key = ("file", name, *_identity(st))
                return opened
            key: list[Any] = ["dir", name, st.st_dev, st.st_ino]  # its files below, not its mtime (any rename in it)
            for entry in sorted(os.listdir(fd)):
                got = self._entry(path, fd, end, walked, entry)
                if got is not None:
                    opened.files.append((entry, got[0]))
                    key.append((entry, *_identity(got[1])))
            opened.key = tuple(key)
            return opened
        except BaseException as e:
            if opened is not None:
                opened.close()
            if isinstance(e, OSError):
                if e.errno == errno.EMFILE:
                    raise BadInput(
                        f"{path}: too many files to open at once; raise the server's open-file limit (ulimit -n)"
                    ) from None
                raise BadInput(f"{path}: {_os_problem(e)}") from None
            raise
        finally:
            if fd >= 0:
                os.close(fd)

    def _entry(
        self, path: str, dir_fd: int, root: int, walked: list[str], entry: str
    ) -> tuple[int, os.stat_result] | None:
        """A folder's entry opened as :meth:`_walk` opens a path: (descriptor, fstat) of a regular file,
        None for anything else (a subfolder, a FIFO, a link to nothing); a link outside: refused."""
        try:
            fd = os.open(entry, _OPEN_FLAGS, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.EMFILE:
                raise
            if e.errno != errno.ELOOP:
                return None  # vanished or unreadable: not a rank file
            try:  # a link: walked from the root as a path is, where it stands
                fd, _, _, _ = self._walk(path, root, [*walked, entry], what=os.path.join(path, entry))
            except BadInput as refused:
                if "outside the allowed roots" in str(refused):
                    raise
                return None  # a link to nothing, or to a folder
            except OSError as e2:
                if e2.errno == errno.EMFILE:
                    raise
                return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return None
        return fd, st


def _identity(st: os.stat_result) -> tuple[Any, ...]:
    """Which file, as the analysis cache knows it: the same inode, size and modification time."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _os_problem(e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return "no such file or directory"
    if e.errno == errno.ENOTDIR:
        return "not a directory"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or str(e)


def _stragglers(story: ad.Stragglers | dict[str, Any] | None) -> Stragglers | None:
    """The rank story as the document holds it (``stragglers``): the same figures every view prints."""
    if not story:
        return None
    s = ad.Stragglers.of(story)
    return Stragglers(
        summary=s.summary,
        straggler=s.straggler,
        headline_rank=s.headline_rank,
        headline=s.headline or "",
        cold_start=s.cold_start or {},
        ranks=[
            RankLateness(
                rank=r.rank,
                mean_late_ms=r.mean_late_ms,
                max_late_ms=r.max_late_ms,
                last_in=r.late_in,
                considered=r.considered,
                straggler=r.late,
                headline=r.headline,
            )
            for r in s.ranks
        ],
    )


# -- the tools' inputs ---------------------------------------------------------------------------------

# A time on the trace's clock, in ms: within ±9e12 (its nanoseconds stay inside int64).
_MAX_MS = 9e12


def _shown(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return f"a {v.bit_length()}-bit number"
    return repr(v)


def whole(name: str, v: Any, lo: int, hi: int) -> Any:
    """``v`` if it is a whole number in [lo, hi] (or None); else BadInput naming the range."""
    if v is None:
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadInput(f"{name}: {_shown(v)} is not a whole number")
    if not lo <= v <= hi:
        raise BadInput(f"{name}: {_shown(v)} is out of range (a whole number from {lo} to {hi})")
    return v


def number(name: str, v: Any, lo: float, hi: float) -> Any:
    """``v`` if it is a finite number in [lo, hi] (or None); else BadInput naming the range."""
    if v is None:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput(f"{name}: {_shown(v)} is not a number")
    if isinstance(v, int) and v.bit_length() > 64 or not math.isfinite(v):
        raise BadInput(f"{name}: {_shown(v)} is not a finite number")
    if not lo <= v <= hi:
        raise BadInput(f"{name}: {v!r} is out of range ({lo:g} to {hi:g})")
    return v


def server_flags(message: str) -> str:
    """A read limit's message as a client of the server can act on it: the limits are the server's
    flags (its MCP configuration), which a tool call cannot set."""
    import re

    message = re.sub(
        r"(?<!mcp )--max-decompressed SIZE",
        "`trainscope mcp --max-decompressed SIZE` (the server's flag, in its MCP configuration; a tool call "
        "cannot set it)",
        message,
    )
    return message.replace(
        "TRAINSCOPE_MAX_DECOMPRESSED=SIZE", "TRAINSCOPE_MAX_DECOMPRESSED=SIZE in the server's environment"
    )


# -- the server ---------------------------------------------------------------------------------------

# Every answer's text (the JSON the client is sent, as the SDK indents it) stays within BUDGET characters
# by default: lists come in pages (offset, limit; the answer's page says how many more and the offset to
# ask for them) and cut a page short where its items are long; other answers have a summary level whose
# longest lists are cut to fit, each cut named in the answer's `more` with the call that gives the rest.
BUDGET = 20_000
NAME_CHARS = 240  # a kernel's (or an event's, a frame's) name beyond this is cut, with "…", unless detail='full'
Detail = Literal["summary", "full"]


def answer_chars(result: object) -> int:
    """The characters of ``result``'s text as the client receives it (the SDK's JSON, indented by 2)."""
    import pydantic_core

    return len(pydantic_core.to_json(result, fallback=str, indent=2).decode())


def _clip(text: Any, full: bool = False) -> Any:
    if full or not isinstance(text, str) or len(text) <= NAME_CHARS:
        return text
    return text[: NAME_CHARS - 1] + "…"


def _fits(result: object) -> bool:
    return answer_chars(result) <= BUDGET


def fit_page(result: _P, rows: list[Any], offset: int, limit: int, total: int, noun: str, again: str, attr: str) -> _P:
    """Put ``rows`` (the items from ``offset`` on, at most ``limit``) into ``result.<attr>`` as one page:
    as many as fit the budget (at least one), the page's numbers and, where more follow, the line that
    says how to ask for them (``again``: the call, with ``{offset}`` where the next offset goes)."""
    base = list(result.more)

    def put(k: int) -> int:
        setattr(result, attr, rows[:k])
        after = offset + k
        result.page = Page(
            offset=offset, limit=limit, returned=k, total=total, next_offset=after if after < total else None
        )
        result.more = list(base)
        if after < total:
            cut = " (this page was cut short to fit 20,000 characters)" if k < len(rows) else ""
            result.more.append(f"{total - after} more {noun} after these{cut}: call {again.format(offset=after)}")
        return answer_chars(result)

    import pydantic_core

    # No page holds more rows than fit the budget written without indentation (the answer indents them).
    room, most = BUDGET, 0
    while most < len(rows) and room >= 0:
        room -= len(pydantic_core.to_json(rows[most], fallback=str).decode())
        most += 1
    if put(most) > BUDGET and most > 1:
        lo, hi = 1, most - 1  # the largest k that fits, at least 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if put(mid) <= BUDGET:
                lo = mid
            else:
                hi = mid - 1
        put(lo)
    return result


def trim(
    result: _C, parts: list[tuple[str, Callable[[], list[Any]], int, str]], totals: dict[str, int] | None = None
) -> _C:
    """Cut ``result``'s lists from the end until it fits the budget: first each down to its floor, in
    the order given, then to nothing; each cut list gets a line in ``result.more`` (its label, how many
    of how many, and ``hint``: the call that gives them all). ``parts``: (label, the list, floor, hint);
    ``totals``: how long a list was before it was shortened already (by label), for its line."""
    every = [(totals or {}).get(label, len(get())) for label, get, _, _ in parts]
    if _fits(result) and all(len(get()) == n for (_, get, _, _), n in zip(parts, every)):
        return result
    lines = {label: f"{label}: cut to fit 20,000 characters; {hint}" for label, _, _, hint in parts}
    result.more = list(result.more) + list(lines.values())  # the lines' room is kept while cutting
    for pass_floor in (True, False):
        for _, get, floor, _ in parts:
            items = get()
            while len(items) > (floor if pass_floor else 0) and not _fits(result):
                items.pop()
    kept = [len(get()) for _, get, _, _ in parts]
    result.more = [m for m in result.more if m not in lines.values()] + [
        f"{label}: {k} of {n} shown; {hint}" for (label, _, _, hint), k, n in zip(parts, kept, every) if k < n
    ]
    return result


def _given(x: float | None) -> float:
    """A figure an answer's model requires, passed on as the typed document holds it (which declares
    every figure optional, a JSON null): pydantic refuses a null there."""
    return cast(float, x)


def _finding(f: ad.Finding | dict[str, Any], evidence: bool = True) -> Finding:
    t = f if isinstance(f, ad.Finding) else ad.Finding.from_dict(f)
    return Finding(
        id=t.id,
        axis=t.axis,
        severity=t.severity,
        title=t.title,
        stake_pct=_given(t.stake_pct),
        detail=t.detail or "",
        evidence=[Evidence(**e.to_dict()) for e in t.evidence or []] if evidence else [],
    )


def _fix(r: ad.Recommendation | dict[str, Any]) -> Fix:
    t = r if isinstance(r, ad.Recommendation) else ad.Recommendation.from_dict(r)
    return Fix(
        rank=t.rank,
        id=t.id,
        finding=t.finding,
        title=t.title,
        change=t.change,
        projected_speedup=t.projected_speedup,
        projected_step_ms=t.projected_step_ms,
        bound=t.bound,
        basis=t.basis or "",
    )


def analysis_result(
    report: Any, path: str, detail: str = "full", public: Callable[[Any], Any] = lambda v: v
) -> Analysis:
    """The analysis as the tool answers it (``public`` names the paths in the report's document as the
    client does); with ``detail="summary"`` the findings come without their evidence lines
    (explain_finding gives them), long kernel names are cut, and the lists are cut to fit the budget,
    each cut named in ``more``."""
    full = detail == "full"
    d = ad.AnalysisDocument.of(public(report.to_dict()))
    v = d.verdict
    b = d.breakdown
    assert d.input is not None and b is not None, "an analysis document has its input and breakdown"
    sinks = d.sinks
    top = d.kernels.top if d.kernels is not None else []
    result = Analysis(
        source=path,
        format=d.input.format,
        rank=d.rank,
        ranks=d.input.traces,
        device=d.device.name,
        steps=len(d.steps),
        steps_method=d.steps_method,
        step_time_ms=StepTimes(**b.step_time_ms.to_dict()),
        gpu_busy_pct=_given(b.gpu_busy_pct),
        data_wait_pct=_given(b.data_wait_pct),
        verdict=Verdict(
            axis=v.axis,
            bottleneck=v.bottleneck,
            confidence=v.confidence,
            headline=headline(d),
            summary=v.summary,
            evidence=[Evidence(**e.to_dict()) for e in v.evidence],
            runner_up=v.runner_up,
        ),
        findings=[_finding(f, evidence=full) for f in d.findings],
        sinks_basis=sinks.basis if sinks else "",
        sinks=sorted(
            (
                Sink(
                    sink=k,
                    pct=_given(s.pct),
                    ms_per_step=_given(s.ms_per_step),
                    can_be_primary=s.can_be_primary,
                    source=s.source,
                )
                for k, s in (sinks.by_sink if sinks else {}).items()
            ),
            key=lambda s: -s.pct,
        ),
        top_kernels=[
            Kernel(
                name=_clip(k.name, full),
                kernel_class=k.kernel_class,
                count=k.count,
                total_ms=_given(k.total_ms),
                mean_us=_given(k.mean_us),
                share_pct=_given(k.share_pct),
                tensor_core=k.tensor_core,
                bound=k.bound,
            )
            for k in top
        ],
        fixes=[_fix(r) for r in d.recommendations],
        warnings=list(d.warnings),
        command_line=f"trainscope analyze {path} --format json",
        stragglers=_stragglers(d.stragglers),
        detail=detail,
    )
    if full:
        return result
    if any(f.evidence for f in d.findings):
        result.more.append(
            "findings' evidence lines: explain_finding(path, finding) gives one finding's, each with its "
            "source; analyze_trace with detail='full' gives them all"
        )
    if any(len(k.name) > NAME_CHARS for k in top):
        result.more.append(f"kernel names over {NAME_CHARS} characters are cut (…); detail='full' gives them whole")
    return trim(
        result,
        [
            ("top_kernels", lambda: result.top_kernels, 5, "list_kernels gives every kernel, in pages"),
            ("sinks", lambda: result.sinks, 5, "detail='full' gives them all"),
            ("warnings", lambda: result.warnings, 3, "detail='full' gives them all"),
            ("verdict.evidence", lambda: result.verdict.evidence, 5, "detail='full' gives every line"),
            ("findings", lambda: result.findings, 1, "explain_finding gives any raised finding"),
            ("fixes", lambda: result.fixes, 1, "detail='full' gives every fix"),
        ],
    )


def _diff_kernels(kernels: dict[str, Any], full: bool, top: int = 5) -> dict[str, Any]:
    """The diff's kernel changes, each list cut to its ``top`` largest, each row without the names that
    repeat its label (its names only where several were matched as one), names cut."""
    out: dict[str, Any] = {k: v for k, v in kernels.items() if not isinstance(v, list)}
    for key, rows in kernels.items():
        if not isinstance(rows, list):
            continue
        shown = []
        for row in rows[:top]:
            row = dict(row)
            if row.get("key") == row.get("label"):
                row.pop("key", None)
            for field in ("before_names", "after_names"):
                names = row.get(field)
                if isinstance(names, list) and (
                    len(names) <= 1 and row.get("match") in ("exact", "appeared", "disappeared")
                ):
                    row.pop(field)
                elif isinstance(names, list):
                    row[field] = [_clip(n, full) for n in names[:3]] + (
                        [f"… {len(names) - 3} more"] if len(names) > 3 else []
                    )
            for field in ("label", "key"):
                if field in row:
                    row[field] = _clip(row[field], full)
            shown.append(row)
        out[key] = shown
    return out


class _Call:
    """What one tool call opened: to show the client its own paths, and to close at its end."""

    def __init__(self) -> None:
        self.shown: list[tuple[Opened, str]] = []
        self.owned: list[Opened] = []

    def reset(self) -> None:
        """Forget the last call's paths and files: a new call begins."""
        self.shown = []
        self.owned = []

    def public(self, value: Any) -> Any:
        for o, shown in self.shown:
            value = o.public(value, shown)
        return value

    def model(self, result: _M) -> _M:
        """``result`` (a typed result) with the private folder's paths replaced by the client's."""
        return type(result).model_validate(self.public(result.model_dump())) if self.shown else result


def _one_line(e: Any) -> str:
    """A pydantic ValidationError of a tool's arguments as one line: each wrong argument, what it
    should be, and what was given."""
    said = []
    for err in e.errors():
        where = ".".join(str(x) for x in err.get("loc", ())) or "arguments"
        if err.get("type") == "missing":
            said.append(f"{where}: required")
            continue
        msg = str(err.get("msg", "invalid")).replace("\n", " ")
        given = repr(err.get("input"))
        given = given if len(given) <= 60 else given[:59] + "…"
        said.append(f"{where}: {msg[:1].lower() + msg[1:]} (given: {given})")
    return "; ".join(said) or "invalid arguments"


class McpServer(Protocol):
    """What :func:`build_server` gives: the SDK's ``MCPServer`` with the tools and ``trainscope_close``
    (which closes what the cache holds open and removes the private folder). The class itself is made
    where ``mcp``, an optional dependency, is imported."""

    trainscope_close: Callable[[], None]

    def run(self, transport: Literal["stdio"] = "stdio") -> None: ...

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any: ...


def build_server(roots: list[str], store: str | None = None, cache_size: int = 4) -> McpServer:
    """The MCP server over ``roots`` (and the run history at ``store``, read-only)."""
    import collections

    from mcp.server import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.exceptions import UnexpectedToolError
    from mcp_types import ToolAnnotations
    from pydantic import ValidationError

    class Server(MCPServer):
        trainscope_close: Callable[[], None]

        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as e:  # the SDK's arguments check: one line, as the tools' own errors
                if isinstance(e, UnexpectedToolError) or not isinstance(e.__cause__, ValidationError):
                    raise
                raise ToolError(f"Error executing tool {name}: {_one_line(e.__cause__)}") from e.__cause__

    clean_stale()  # the folders of servers killed before they could remove theirs
    folder = ServerFolder()
    guard = Roots(roots, folder)
    server = Server("trainscope", instructions=INSTRUCTIONS, version=__version__)
    # the model's own field names (it takes its camelCase aliases too: populate_by_name)
    read_only = ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    )
    # One call at a time, whole: traces are large and this machine may be small, and a report's
    # open files (a rank folder's traces are read again on demand) must stay open while it is used.
    lock = threading.Lock()
    # The last analyses, by what was opened (device, inode, size, times of every file) and options.
    cache: collections.OrderedDict[tuple[Any, ...], tuple[Opened, Report]] = collections.OrderedDict()
    call = _Call()

    def opened(path: str) -> Opened:
        o = guard.open(path)
        call.shown.append((o, o.given))
        call.owned.append(o)
        return o

    def report(
        path: str, thresholds: dict[str, float] | None = None, step_range: str | None = None
    ) -> tuple[Report, str]:
        """The analysis of ``path`` (from the cache when the same files were analyzed with the same
        options) and the path as the answers name it."""
        for name, value in (thresholds or {}).items():
            number(f"thresholds.{name}", value, -1e15, 1e15)
        o = guard.open(path)
        call.shown.append((o, o.given))
        key = (o.key, tuple(sorted((thresholds or {}).items())), step_range)
        if key in cache:
            o.close()
            cache.move_to_end(key)
            hit, rep = cache[key]
            call.shown.append((hit, o.given))  # named as this call names it
            return rep, o.given
        try:
            # cache=True gives a CachedReport: the document's renderings from the disk cache, every other
            # attribute from the full Report it analyzes on first use; the explore functions take it as one.
            rep = cast("Report", analyze(o.show(), thresholds=thresholds, step_range=step_range, jobs=1, cache=True))
        except BaseException:
            o.close()
            raise
        cache[key] = (o, rep)
        while len(cache) > cache_size:
            cache.popitem(last=False)[1][0].close()
        return rep, o.given

    def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with lock:
                call.reset()
                try:
                    result = fn(*args, **kwargs)
                    if isinstance(result, BaseModel):
                        result = call.model(result)
                    return result
                except Exception as e:  # noqa: BLE001 (every failure is one line for the agent)
                    message, _ = describe(e)
                    raise ToolError(" ".join(server_flags(call.public(message)).split("\n"))) from None
                finally:
                    for o in call.owned:
                        o.close()
                    call.reset()

        return server.tool(annotations=read_only)(wrapper)

    def close_all() -> None:
        while cache:
            cache.popitem()[1][0].close()
        folder.remove()

    server.trainscope_close = close_all

    def offset_of(offset: int) -> int:
        checked: int = whole("offset", offset, 0, 2**31 - 1)
        return checked

    @tool
    def analyze_trace(
        path: str,
        thresholds: dict[str, float] | None = None,
        step_range: str | None = None,
        detail: Detail = "summary",
    ) -> Analysis:
        """Diagnose a recorded profiler trace (file or directory of rank traces under the root): the D·A·M
        verdict with its evidence, step time, the sinks of step time, the top kernels and the fixes ranked
        by projected gain (upper bounds). The same analysis as `trainscope analyze PATH --format json`.
        thresholds overrides diagnostic thresholds by name (see `trainscope thresholds`). detail="summary"
        (default, at most 20,000 characters) leaves the findings' evidence lines to explain_finding;
        detail="full" gives everything, however long."""
        rep, shown = report(path, thresholds, step_range)
        return analysis_result(rep, shown, detail, call.public)

    @tool
    def explain_finding(path: str, finding: str, rank: int | None = None) -> Explanation:
        """One finding of a trace's analysis (e.g. data/input-wait): its grade and stake, every evidence line
        with its source, its role in the verdict, the thresholds that grade it, the fixes for it with their
        projections, and the step and interval of the timeline that show it most."""
        rep, shown = report(path)
        e = explore.explain_finding(rep, finding, rank=whole("rank", rank, 0, 2**31 - 1))
        result = call.model(
            Explanation(
                source=shown,
                rank=e["rank"],
                finding=_finding(e["finding"]),
                role=e["role"],
                verdict=e["verdict"],
                headline=e["headline"],
                graded_by=e["graded_by"],
                fixes=[_fix(r) for r in e["fixes"]],
                timeline=e["timeline"],
            )
        )
        return trim(
            result,
            [
                ("finding.evidence", lambda: result.finding.evidence, 5, "analyze_trace with detail='full'"),
                ("fixes", lambda: result.fixes, 1, "analyze_trace gives every fix"),
                ("graded_by", lambda: result.graded_by, 1, "`trainscope thresholds` lists every threshold"),
            ],
        )

    @tool
    def list_kernels(
        path: str,
        name_contains: str | None = None,
        kernel_class: str | None = None,
        min_total_ms: float | None = None,
        limit: int = 30,
        rank: int | None = None,
        sort: str = "total",
        offset: int = 0,
        detail: Detail = "summary",
    ) -> KernelTable:
        """Every kernel that ran in the analyzed steps on the analyzed GPU, filtered by name substring, class
        (gemm, convolution, attention, elementwise, normalization, softmax, reduction, embedding,
        communication, other) and least total time; largest total time first, or with sort="pct_of_roof"
        the kernels furthest from their own roofline roof first. In pages: `limit` kernels from `offset`
        (a page is cut short to stay within 20,000 characters; its `page.next_offset` asks for the
        next). detail="summary" cuts names over 240 characters (…); "full" gives them whole."""
        number("min_total_ms", min_total_ms, 0, _MAX_MS)
        whole("limit", limit, 1, 1000)
        whole("rank", rank, 0, 2**31 - 1)
        offset_of(offset)
        rep, shown = report(path)
        t = explore.kernel_table(
            rep,
            name_contains=name_contains,
            kernel_class=kernel_class,
            min_total_ms=min_total_ms,
            limit=offset + limit,
            rank=rank,
            sort=sort,
        )
        rows = [{**k, "name": _clip(k["name"], detail == "full")} for k in call.public(t["kernels"][offset:])]
        result = call.model(KernelTable(**{**t, "source": shown, "kernels": []}))
        if detail != "full" and any(k["name"] != r["name"] for k, r in zip(t["kernels"][offset:], rows)):
            result.more.append(f"names over {NAME_CHARS} characters are cut (…); detail='full' gives them whole")
        return fit_page(
            result, rows, offset, limit, t["matched"], "kernels", "list_kernels again with offset={offset}", "kernels"
        )

    @tool
    def list_steps(
        path: str,
        min_duration_ms: float | None = None,
        outliers_only: bool = False,
        limit: int = 50,
        rank: int | None = None,
        offset: int = 0,
    ) -> StepTable:
        """The analyzed steps: start (ms, the clock timeline_window uses), duration, GPU busy and data-wait
        shares, time per breakdown category, and whether the step is an outlier; filtered. In pages:
        `limit` steps from `offset` (a page is cut short to stay within 20,000 characters; its
        `page.next_offset` asks for the next)."""
        number("min_duration_ms", min_duration_ms, 0, _MAX_MS)
        whole("limit", limit, 1, 10000)
        whole("rank", rank, 0, 2**31 - 1)
        offset_of(offset)
        rep, shown = report(path)
        t = explore.step_table(rep, min_duration_ms=min_duration_ms, outliers_only=outliers_only, rank=rank)
        rows = call.public(t["steps"][offset : offset + limit])
        result = call.model(StepTable(**{**t, "source": shown, "steps": []}))
        return fit_page(
            result, rows, offset, limit, t["matched"], "steps", "list_steps again with offset={offset}", "steps"
        )

    @tool
    def module_tree(
        path: str,
        under: str | None = None,
        name_contains: str | None = None,
        max_depth: int | None = 2,
        sort: str = "gpu_ms",
        limit: int = 50,
        rank: int | None = None,
        offset: int = 0,
        detail: Detail = "summary",
    ) -> ModuleTreeTable:
        """Where in the model the GPU time goes: the trace's own hierarchy (phases, nn.Module frames,
        record_function and NVTX ranges, autograd nodes; repeated blocks folded, `Qwen2DecoderLayer_0…23`)
        with every node's GPU time (inclusive and its own), share, host time, bound, % of roof (share of
        peak), achieved TFLOP/s and GB/s, and a folded block's spread. Depth first, each level sorted by
        `sort` (gpu_ms, gpu_exclusive_ms, pct_of_roof); `under` keeps the subtree of the node whose path
        ends with it (names joined by '.', '/' or ' › '), `max_depth` the levels below it (null: all),
        `name_contains` the nodes whose name holds it. In pages: `limit` nodes from `offset` (cut short to
        stay within 20,000 characters; `page.next_offset` asks for the next). detail="full" adds each
        node's three heaviest kernels."""
        whole("limit", limit, 1, 1000)
        whole("rank", rank, 0, 2**31 - 1)
        whole("max_depth", max_depth, 0, 1000)
        offset_of(offset)
        rep, shown = report(path)
        t = explore.tree_table(rep, under=under, name_contains=name_contains, max_depth=max_depth, sort=sort, rank=rank)
        full = detail == "full"
        rows = []
        for n in call.public(t["nodes"][offset : offset + limit]):
            row = {**n, "path": [_clip(p) for p in n["path"]], "slowest": _clip(n["slowest"])}
            if full:
                row["top_kernels"] = [{**k, "name": _clip(k["name"])} for k in n["top_kernels"]]
            else:
                row.pop("top_kernels")
            rows.append(row)
        result = call.model(ModuleTreeTable(**{**t, "source": shown, "nodes": [], "detail": detail}))
        if not full and rows:
            result.more.append("each node's heaviest kernels: module_tree with detail='full'")
        if max_depth is not None and t["nodes_total"] > t["matched"] and not name_contains:
            result.more.append(
                "deeper nodes: module_tree with a larger max_depth (null: all), or under=<a node's path>"
            )
        return fit_page(
            result, rows, offset, limit, t["matched"], "nodes", "module_tree again with offset={offset}", "nodes"
        )

    @tool
    def timeline_window(
        path: str,
        start_ms: float | None = None,
        end_ms: float | None = None,
        kinds: list[str] | None = None,
        name_contains: str | None = None,
        limit: int = 100,
        rank: int | None = None,
        offset: int = 0,
        detail: Detail = "summary",
    ) -> TimelineWindow:
        """Every event overlapping [start_ms, end_ms) — kernels, copies, memsets, cpu ops, annotations,
        runtime calls (kinds filters them) — by start time, with its lane and step, and the busy time per
        kind in the window. Times are on the clock of list_steps' start_ms; without start_ms and end_ms,
        the first analyzed step. In pages: `limit` events from `offset` (a page is cut short to stay within
        20,000 characters; its `page.next_offset` asks for the next). detail="summary" cuts names over
        240 characters (…); "full" gives them whole."""
        number("start_ms", start_ms, -_MAX_MS, _MAX_MS)
        number("end_ms", end_ms, -_MAX_MS, _MAX_MS)
        whole("limit", limit, 1, 5000)
        whole("rank", rank, 0, 2**31 - 1)
        offset_of(offset)
        if (start_ms is None) != (end_ms is None):
            raise BadInput("give both start_ms and end_ms, or neither (the first analyzed step)")
        rep, shown = report(path)
        why = "as asked"
        if start_ms is None or end_ms is None:
            steps = explore.step_table(rep, limit=1, rank=rank)["steps"]
            if not steps:
                raise BadInput(f"{shown}: no analyzed step; give start_ms and end_ms")
            start_ms = steps[0]["start_ms"]
            end_ms = round(steps[0]["start_ms"] + steps[0]["duration_ms"], 6)
            why = f"the first analyzed step ({steps[0]['label']}); give start_ms and end_ms for another window"
        if not end_ms > start_ms:
            raise BadInput(f"end_ms ({end_ms!r}) must be after start_ms ({start_ms!r})")
        w = explore.timeline_window(
            rep, start_ms, end_ms, kinds=kinds, name_contains=name_contains, limit=offset + limit, rank=rank
        )
        rows = [{**e, "name": _clip(e["name"], detail == "full")} for e in call.public(w["events"][offset:])]
        result = call.model(TimelineWindow(**{**w, "source": shown, "window": why, "events": []}))
        if detail != "full" and any(e["name"] != r["name"] for e, r in zip(w["events"][offset:], rows)):
            result.more.append(f"names over {NAME_CHARS} characters are cut (…); detail='full' gives them whole")
        again = "timeline_window again with " + ("" if why == "as asked" else f"start_ms={start_ms}, end_ms={end_ms}, ")
        again += "offset={offset}"
        result.shown = len(rows)  # as many digits as the page's count can have
        fit_page(result, rows, offset, limit, w["matched"], "events", again, "events")
        result.shown = len(result.events)
        return result

    @tool
    def diff_runs(
        before: str,
        after: str,
        metric: str = "step_p50",
        fail_if_slower: float | None = None,
        gate_anyway: bool = False,
        detail: Detail = "summary",
    ) -> Diff:
        """Compare two runs — traces under the root, or stored runs of the history (12, latest[:TAG],
        baseline[:TAG]) — as `trainscope diff` does: verdict, step time, comparability, each earlier fix's
        projected against achieved gain, the changes per category and kernel class, the kernels that
        changed most, and with fail_if_slower the statistical gate (Mann-Whitney test over the steps,
        p-value, the change with its interval). detail="summary" (default, at most 20,000 characters)
        gives the 5 largest kernel changes of each kind; detail="full" adds the whole trainscope.diff/1
        document, however long."""
        number("fail_if_slower", fail_if_slower, 0, 1e6)
        full = detail == "full"
        names = [before, after]
        sides = []
        for i, s in enumerate((before, after)):
            if describe_input(s, runs=True).kind == "run":
                sides.append(s)
            else:
                o = opened(s)
                names[i] = o.given
                sides.append(o.show())
        stored = any(describe_input(s, runs=True).kind == "run" for s in sides)
        st = open_store(store, read_only=True) if stored else None
        try:
            r = diff(  # jobs=1: no process pool or analysis thread inside the server (as its reports)
                sides[0],
                sides[1],
                metric=metric,
                fail_if_slower=fail_if_slower,
                store=st,
                gate_anyway=gate_anyway,
                jobs=1,
            )
        finally:
            if st is not None:
                st.close()
        d = call.public(r.to_dict())
        kernels = _diff_kernels(d.get("kernels") or {}, full) if not full else d.get("kernels") or {}
        result = Diff(
            before=names[0],
            after=names[1],
            basis="summaries" if r.from_summaries else "traces",
            comparable=d["comparable"],
            comparability=d["comparability"],
            verdict=d["verdict"],
            step_time_ms=d["step_time_ms"],
            gate=d["gate"],
            fixes=[FixAchieved(**{k: f[k] for k in FixAchieved.model_fields}) for f in d["fixes_achieved"]],
            changes={k: d[k] for k in ("gpu_busy", "data_wait", "categories", "kernel_classes", "work") if k in d},
            kernels=kernels,
            detail=detail,
            document=d if full else None,
        )
        if full:
            return result
        order = ("appeared", "disappeared", "grew", "shrank")
        lists = sorted(
            (k for k, v in kernels.items() if isinstance(v, list)),
            key=lambda k: (k not in order, order.index(k) if k in order else 0),
        )
        return trim(
            result,
            [(f"kernels.{k}", (lambda k=k: result.kernels[k]), 3, "detail='full' gives them all") for k in lists]
            + [("fixes", lambda: result.fixes, 1, "detail='full' gives every fix")],
            totals={f"kernels.{k}": len(d["kernels"][k]) for k in lists},
        )

    @tool
    def memory_snapshot(path: str, top: int = 10, detail: Detail = "summary") -> Memory:
        """A CUDA memory snapshot (torch.cuda.memory._dump_snapshot, .pickle[.gz]; read with a restricted
        unpickler) or a memory timeline: per device the peak allocated and reserved memory, when and in which
        phase, and the `top` allocations live at the peak with their sites; capacity findings.
        detail="summary" (default, at most 20,000 characters); detail="full" adds the whole
        trainscope.memory/1 document and whole frame names, however long."""
        whole("top", top, 1, 100)
        full = detail == "full"
        o = opened(path)
        m = memory(o.show(), top=top)
        peaks = m.peaks()
        memory_doc = m.to_dict()  # the trainscope.memory/1 document (not the analysis document)
        devices = [
            MemoryDevice(
                device=p.device,
                peak_allocated_bytes=p.peak_bytes,
                reserved_at_peak_bytes=p.reserved_at_peak,
                peak_time_us=p.peak_time_us,
                phase=p.phase,
                events=p.events,
                live_count=len(p.allocations),
                notes=list(p.notes),
                live_at_peak=[
                    {
                        "size_bytes": a.size,
                        "share_of_peak_pct": round(a.share_of(p.peak_bytes), 2),
                        "site": _clip(a.site, full),
                        "origin": a.origin,
                        "stack": [_clip(f"{fr.filename}:{fr.line} ({fr.name})", full) for fr in a.stack[:12]],
                    }
                    for a in p.allocations[:top]
                ],
            )
            for p in peaks
        ]
        result = call.model(
            Memory(
                source=o.given,
                kind=m.kind,
                devices=devices,
                findings=memory_doc.get("findings", []),
                warnings=memory_doc.get("warnings", []),
                detail=detail,
                document=memory_doc if full else None,
            )
        )
        if full:
            return result
        return trim(
            result,
            [
                (
                    f"devices[{i}].live_at_peak",
                    (lambda i=i: result.devices[i].live_at_peak),
                    3,
                    "ask with a smaller top",
                )
                for i in range(len(result.devices))
            ]
            + [("findings", lambda: result.findings, 1, "detail='full' gives them all")],
        )

    @tool
    def list_runs(
        tag: str | None = None,
        verdict: str | None = None,
        gpu: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> Runs:
        """The runs saved in the run history (analyze --save, watch --save, the on_trace_ready hook), newest
        first: id, when, tag, git commit, GPU, steps, step time, verdict, fixes with their projections, and
        which are baselines; filtered by tag, verdict (axis or finding id) and GPU name. In pages: `limit`
        runs from `offset` (a page is cut short to stay within 20,000 characters; its `page.next_offset`
        asks for the next)."""
        whole("limit", limit, 1, 500)
        offset_of(offset)
        path = store or default_store_path()
        if not os.path.exists(path):
            return Runs(store=path, runs=[], page=Page(offset=offset, limit=limit, returned=0, total=0))
        with open_store(path, read_only=True) as st:
            every = st.runs(tag=tag, verdict=verdict, gpu=gpu, limit=None)
            rows = []
            for r in every[offset : offset + limit]:
                row = r.to_dict()
                row["source"] = guard.show_path(row.get("source"))
                rows.append(row)
            result = Runs(store=path, runs=[], skipped=list(st.skipped))
        return fit_page(result, rows, offset, limit, len(every), "runs", "list_runs again with offset={offset}", "runs")

    return server


def serve(roots: list[str], store: str | None = None) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    import logging

    logging.getLogger("mcp").setLevel(logging.WARNING)
    import signal

    _raise_open_file_limit()  # a rank folder's files are all held open while it is analyzed
    server = build_server(roots, store)

    def terminated(signum: int, frame: object) -> None:  # the client's SIGTERM: leave no private folder behind
        server.trainscope_close()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        server.run("stdio")
    finally:
        server.trainscope_close()


def _raise_open_file_limit() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 16
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):
        pass
