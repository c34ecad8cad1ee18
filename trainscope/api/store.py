"""The run history: analysis summaries of earlier runs in a local SQLite file, never the traces.

    >>> import trainscope.api as ts
    >>> store = ts.open_store()                      # ~/.local/share/trainscope/runs.db
    >>> run = ts.save_run(ts.analyze("run.pt.trace.json.gz"), tag="resnet50")
    >>> store.set_baseline(run.id, tag="resnet50")
    >>> ts.diff("baseline:resnet50", "pr.pt.trace.json.gz", fail_if_slower=5).gate.reason

The file holds one row per saved run (its context — tag, GPU, ranks, git commit — in columns to list
and filter by, and the :class:`~trainscope.analyzers.compare.history.RunSummary` as JSON), the baseline of
every tag, and the fixes' projected and achieved gains recorded by ``diff --save``. The schema is
versioned (``PRAGMA user_version``) and migrated one version at a time (:data:`MIGRATIONS`); a
store written by a newer trainscope is refused, never rewritten.

Where it lives: ``--store PATH``, else ``$TRAINSCOPE_STORE``, else
``$XDG_DATA_HOME/trainscope/runs.db`` (``~/.local/share/trainscope/runs.db``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import socket
import sqlite3
import subprocess
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.compare.diff import Run
from trainscope.analyzers.compare.history import BadSummary
from trainscope.analyzers.compare.history import RunSummary
from trainscope.analyzers.compare.history import summarize
from trainscope.analyzers.shapes import ShapeSignature
from trainscope.analyzers.shapes import shape_signature
from trainscope.api.errors import BadInput
from trainscope.api.inputs import RUN_REF

if TYPE_CHECKING:
    from trainscope.analyzers.compare.history import FixOutcome
    from trainscope.analyzers.compare.history import RunSummary
    from trainscope.api.cache import CachedReport
    from trainscope.api.report import Report

# One entry per schema version: the statements that take a store from the version before to it.
# Never edit a released entry; add the next one.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created TEXT NOT NULL,            -- ISO 8601, UTC
            source TEXT NOT NULL,             -- the trace's path when it was analyzed
            tag TEXT,                         -- the model or job
            git_commit TEXT,
            git_dirty INTEGER,
            host TEXT,
            saved_by TEXT NOT NULL,           -- analyze | watch | hook | diff | api
            gpu TEXT,
            ranks INTEGER NOT NULL,
            steps INTEGER NOT NULL,
            verdict TEXT NOT NULL,
            bottleneck TEXT,
            confidence REAL NOT NULL,
            step_p50_ms REAL NOT NULL,
            step_mean_ms REAL NOT NULL,
            summary TEXT NOT NULL             -- trainscope.run/1 JSON
        );
        CREATE INDEX runs_by_tag ON runs(tag, id);
        CREATE TABLE baselines (
            tag TEXT PRIMARY KEY,             -- '' for runs without a tag
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            set_at TEXT NOT NULL
        );
    """,
    ),
    (
        2,
        """
        CREATE TABLE fix_outcomes (
            before_run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            after_run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            recommendation TEXT NOT NULL,
            finding TEXT NOT NULL,
            status TEXT NOT NULL,
            projected_speedup REAL,
            achieved_speedup REAL,
            recorded TEXT NOT NULL,
            PRIMARY KEY (before_run, after_run, recommendation)
        );
    """,
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

_TAG = re.compile(r"^[\w.+@/-]{1,100}$")


def default_store_path() -> str:
    """``$TRAINSCOPE_STORE``, else ``$XDG_DATA_HOME/trainscope/runs.db``, else
    ``~/.local/share/trainscope/runs.db`` (the XDG Base Directory default)."""
    if os.environ.get("TRAINSCOPE_STORE"):
        return os.environ["TRAINSCOPE_STORE"]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "trainscope", "runs.db")


def check_tag(tag: str | None) -> str | None:
    if tag is not None and not _TAG.match(tag):
        raise BadInput(f"tag {tag!r}: use 1–100 letters, digits and . _ + @ / - (no spaces)")
    return tag


@dataclass(frozen=True)
class StoredRun:
    """One saved run: its context and its summary."""

    id: int
    created: str
    source: str
    tag: str | None
    git_commit: str | None
    git_dirty: bool | None
    host: str | None
    saved_by: str
    summary: RunSummary
    baseline_for: tuple[str, ...] = ()  # the tags it is the baseline of ('' = untagged)

    @property
    def label(self) -> str:
        tag = f" [{self.tag}]" if self.tag else ""
        return f"run {self.id}{tag}"

    def to_dict(self, full: bool = False) -> dict[str, Any]:
        """The listing's fields; with ``full``, the whole summary (every step's duration)."""
        s = self.summary
        d = {
            "id": self.id,
            "created": self.created,
            "source": self.source,
            "tag": self.tag,
            "git_commit": self.git_commit,
            "git_dirty": self.git_dirty,
            "host": self.host,
            "saved_by": self.saved_by,
            "gpu": s.device,
            "ranks": s.ranks,
            "steps": s.steps,
            "verdict": {"axis": s.verdict_axis, "bottleneck": s.verdict_bottleneck, "confidence": s.verdict_confidence},
            "step_time_ms": {"p50": s.step_p50_ms, "p95": s.step_p95_ms, "mean": s.step_mean_ms},
            "fixes": [{"id": f.id, "finding": f.finding, "projected_speedup": f.projected_speedup} for f in s.fixes],
            "baseline_for": list(self.baseline_for),
        }
        if full:
            d["summary"] = s.to_dict()
        return d


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def git_context(cwd: str | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git work tree at ``cwd``, or (None, None) outside one or without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    commit = head.stdout.strip()
    if not re.fullmatch(r"[0-9a-f]{40,64}", commit):
        return None, None
    return commit, (bool(status.stdout.strip()) if status.returncode == 0 else None)


# How long an open waits for another process's write or schema transaction before giving up.
BUSY_TIMEOUT_S = 30.0

# The columns the code reads, by table (a store missing one is not ours, or was edited).
_COLUMNS = {
    "runs": ("id", "created", "source", "tag", "git_commit", "git_dirty", "host", "saved_by", "summary"),
    "baselines": ("tag", "run_id", "set_at"),
}
_OUTCOME_COLUMNS = ("before_run", "after_run", "recommendation", "finding", "status", "recorded")


def _statements(script: str) -> list[str]:
    """A migration script cut into its statements (``executescript`` would commit first, and a
    migration must run inside the caller's transaction)."""
    out, buf = [], ""
    for piece in script.split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\n;"):
                out.append(buf.strip())
            buf = ""
    if buf.strip(" \t\n;"):
        out.append(buf.strip())
    return out


def _sqlite_problem(e: BaseException) -> str:
    """SQLite's message in words that say what is wrong with the file."""
    msg = " ".join(str(e).split())
    low = msg.lower()
    if "file is not a database" in low or "file is encrypted" in low:
        return "not an SQLite file"
    if "locked" in low or "busy" in low:
        return f"busy: another process held it locked for more than {BUSY_TIMEOUT_S:g} s"
    if "readonly" in low or "read-only" in low:
        return "read-only: the file or its folder cannot be written"
    if "unable to open" in low:
        return "cannot open the file (is its folder writable?)"
    if "disk is full" in low or "database or disk is full" in low:
        return "the disk is full"
    if "malformed" in low or "corrupt" in low:
        return "the file is damaged (malformed database)"
    return msg[:200]


class _Damage(ValueError):
    """What is wrong with a stored row (said as is)."""


def _damage(e: BaseException) -> str:
    if isinstance(e, (BadSummary, _Damage)):
        return str(e)
    if isinstance(e, (json.JSONDecodeError, UnicodeDecodeError)):
        return "its summary is not JSON"
    if isinstance(e, RecursionError):
        return "its summary is nested too deeply"
    if isinstance(e, (IndexError, KeyError)):
        return f"a column is missing ({e})"
    return f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


class DamagedRun(BadInput):
    """A stored run that cannot be read (its summary edited, truncated, or not written by
    trainscope): what :meth:`RunStore.get` raises for it; a listing skips it instead."""

    def __init__(self, path: str, run_id: Any, why: str) -> None:
        super().__init__(f"{path}: run {run_id} is damaged: {why}")
        self.run_id, self.why = run_id, why

    @property
    def skipped_line(self) -> str:
        """What a listing says of it: ``run 3 is damaged (why): skipped``."""
        return f"run {self.run_id} is damaged ({self.why}): skipped"


class RunStore:
    """A run history file. ``read_only`` opens it without creating, migrating or writing anything
    (what the MCP server does).

    Opening is safe against other processes opening, creating or writing the same file at once:
    the schema is created (or migrated) in one ``BEGIN IMMEDIATE`` transaction that re-reads the
    version inside it, so of many processes creating a fresh store one creates it and the others
    find it made; the journal is WAL (readers never wait for a writer) and every wait for a lock
    is bounded by :data:`BUSY_TIMEOUT_S`. A row that cannot be read is skipped by the listing and
    named in :attr:`skipped`."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> None:
        self.path = os.fspath(path) if path is not None else default_store_path()
        self.read_only = read_only
        self._db: sqlite3.Connection | None = None
        self.skipped: list[str] = []  # the damaged rows the last listing left out, one line each

    # -- the connection --------------------------------------------------------------------------

    def _fail(self, what: str) -> BadInput:
        return BadInput(f"{self.path}: {what}")

    def _check_path(self) -> None:
        """Say what is wrong with the path before SQLite does (it says only 'unable to open')."""
        path = self.path
        if os.path.isdir(path):
            raise self._fail("is a directory; the run store is a file (give --store DIR/runs.db)")
        if self.read_only:
            if not os.path.exists(path):
                raise self._fail("no run store here (save a run with `trainscope analyze --save`)")
            if not os.path.isfile(path):
                raise self._fail("not a regular file, so not a run store")
            return
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            if os.path.exists(parent):
                raise self._fail(f"cannot create the run store: {parent} is not a folder")
            try:
                os.makedirs(parent, mode=0o700, exist_ok=True)
            except OSError as e:
                raise self._fail(f"cannot create the run store's folder {parent}: {e.strerror or e}") from None
        if os.path.exists(path) and not os.path.isfile(path):
            raise self._fail("not a regular file, so not a run store")
        try:  # creates an empty (private) file, or proves the existing one writable
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as e:
            where = path if os.path.exists(path) else f"folder {parent}"
            raise self._fail(f"cannot write the run store ({where}: {e.strerror or e})") from None
        os.close(fd)

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        self._check_path()
        db: sqlite3.Connection | None = None
        try:
            if self.read_only:
                uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=ro"
                db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            else:
                db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            db.execute("PRAGMA foreign_keys = ON")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if version < SCHEMA_VERSION and not self.read_only:
                version = self._migrate(db)
            elif version == 0:
                raise self._fail("not a trainscope run store (no trainscope schema in it)")
            if not self.read_only:
                self._use_wal(db)
            self._check_schema(db, version)
        except BadInput:
            if db is not None:
                db.close()
            raise
        except sqlite3.DatabaseError as e:
            if db is not None:
                db.close()
            problem = _sqlite_problem(e)
            if problem == "not an SQLite file":
                raise self._fail("not a trainscope run store (not an SQLite file)") from None
            raise self._fail(f"cannot open the run store: {problem}") from None
        except OSError as e:
            if db is not None:
                db.close()
            raise self._fail(f"cannot open the run store: {e.strerror or e}") from None
        # Each write (`with db:` in _write) is one transaction begun IMMEDIATE: it takes the write
        # lock at its start, so the busy timeout applies to it as a whole.
        db.isolation_level = "IMMEDIATE"
        self._db = db
        self.version = version
        return db

    @staticmethod
    def _use_wal(db: sqlite3.Connection) -> None:
        """Put the store in WAL mode (persistent: readers then never wait for a writer). SQLite
        answers a journal-mode change that meets another process's lock with "locked" at once,
        without its busy handler, so the wait for it is here, bounded by BUSY_TIMEOUT_S."""
        import random
        import time

        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                if db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() == "wal":
                    return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e):
                    raise
            if time.monotonic() > deadline:  # still the rollback journal: slower to read, as correct
                return
            time.sleep(random.uniform(0.005, 0.05))

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise self._fail(
                f"run store schema {version} is newer than this trainscope's ({SCHEMA_VERSION}); upgrade trainscope"
            )

    def _check_schema(self, db: sqlite3.Connection, version: int) -> None:
        """The tables and columns the code reads are there (one line naming the first one missing)."""
        need = dict(_COLUMNS)
        if version >= 2:
            need["fix_outcomes"] = _OUTCOME_COLUMNS
        for table, columns in need.items():
            have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
            if not have:
                raise self._fail(f"not a trainscope run store (schema {version} but no table {table})")
            missing = [c for c in columns if c not in have]
            if missing:
                raise self._fail(
                    f"not a trainscope run store any more: table {table} has no column {missing[0]} "
                    "(was the file edited by another program?)"
                )

    def _migrate(self, db: sqlite3.Connection) -> int:
        """Create or migrate the schema in one ``BEGIN IMMEDIATE`` transaction: the version is read
        again under the write lock, so a process that lost the race to another creating the same
        store finds it created and does nothing. Returns the version now."""
        db.execute("BEGIN IMMEDIATE")
        try:
            version: int = db.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if version == 0:
                names = [r[0] for r in db.execute("SELECT name FROM sqlite_master ORDER BY name LIMIT 4")]
                if names:
                    raise self._fail(f"an SQLite file that is not a trainscope run store (it holds {', '.join(names)})")
            for target, script in MIGRATIONS:
                if target <= version:
                    continue
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {int(target)}")
                version = target
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return version

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        db = self._connect()
        try:
            cur = db.execute(sql, tuple(args))
            # typeshed declares the factory's second argument a Row; sqlite3.Row takes the row's tuple
            cur.row_factory = sqlite3.Row  # type: ignore[assignment]
            return cur.fetchall()
        except sqlite3.DatabaseError as e:
            raise self._fail(f"cannot read the run store: {_sqlite_problem(e)}") from None

    def _write(self, sql: str, args: Iterable[Any] = ()) -> int:
        if self.read_only:
            raise self._fail("the run store is open read-only")
        db = self._connect()
        try:
            with db:
                return db.execute(sql, tuple(args)).lastrowid or 0
        except sqlite3.DatabaseError as e:
            raise self._fail(f"cannot write the run store: {_sqlite_problem(e)}") from None

    # -- runs ------------------------------------------------------------------------------------

    def save(
        self,
        summary: RunSummary,
        *,
        tag: str | None = None,
        saved_by: str = "api",
        git_commit: str | None = None,
        git_dirty: bool | None = None,
        cwd: str | None = None,
        detect_git: bool = True,
    ) -> StoredRun:
        """Store ``summary``; the git commit of the work tree at ``cwd`` (default: the current
        directory) unless ``git_commit`` is given or ``detect_git`` is False."""
        check_tag(tag)
        if git_commit is None and detect_git:
            git_commit, git_dirty = git_context(cwd)
        s = summary
        run_id = self._write(
            "INSERT INTO runs (created, source, tag, git_commit, git_dirty, host, saved_by, gpu, ranks, steps, verdict, "
            "bottleneck, confidence, step_p50_ms, step_mean_ms, summary) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                _now(),
                s.source,
                tag,
                git_commit,
                None if git_dirty is None else int(git_dirty),
                socket.gethostname(),
                saved_by,
                s.device,
                s.ranks,
                s.steps,
                s.verdict_axis,
                s.verdict_bottleneck,
                s.verdict_confidence,
                s.step_p50_ms,
                s.step_mean_ms,
                json.dumps(s.to_dict(), allow_nan=False),
            ),
        )
        return self.get(run_id)

    def _row(self, row: sqlite3.Row) -> StoredRun:
        """The stored run of ``row``, or BadInput naming it as damaged (one line, with why)."""
        try:
            rid = row["id"]
        except (IndexError, KeyError):
            raise self._fail("not a trainscope run store any more: table runs has no column id") from None
        try:
            return self._build(row)
        except BadInput:
            raise
        except Exception as e:  # noqa: BLE001 (any row a hand or another program wrote: named, never trusted)
            raise DamagedRun(self.path, rid, _damage(e)) from None

    def _build(self, row: sqlite3.Row) -> StoredRun:
        text = row["summary"]
        if text is None:
            raise _Damage("its summary is empty (NULL)")
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise _Damage(f"its summary is a number ({text!r}), not JSON text")
        summary = RunSummary.from_dict(json.loads(text))
        tags = tuple(
            r["tag"] for r in self._query("SELECT tag FROM baselines WHERE run_id = ? ORDER BY tag", (row["id"],))
        )
        dirty = row["git_dirty"]
        return StoredRun(
            int(row["id"]),
            str(row["created"]),
            str(row["source"]),
            _opt_str(row["tag"]),
            _opt_str(row["git_commit"]),
            None if dirty is None else bool(dirty),
            _opt_str(row["host"]),
            str(row["saved_by"]),
            summary,
            tags,
        )

    def _rows(self, rows: list[sqlite3.Row]) -> list[StoredRun]:
        """Every readable row as a run; each damaged one skipped and named in :attr:`skipped`."""
        self.skipped = []
        return [run for run in (self._listed(r) for r in rows) if run is not None]

    def _listed(self, row: sqlite3.Row) -> StoredRun | None:
        try:
            return self._row(row)
        except DamagedRun as e:
            self.skipped.append(e.skipped_line)
            return None

    def get_listed(self, ref: str | int) -> StoredRun | None:
        """:meth:`get` for a listing: a damaged run is None and named in :attr:`skipped` (not reset)."""
        try:
            return self.get(ref)
        except DamagedRun as e:
            self.skipped.append(e.skipped_line)
            return None

    def get(self, ref: str | int) -> StoredRun:
        """The run ``ref`` names: an id (``12``, ``run:12``), ``latest[:TAG]`` or ``baseline[:TAG]``.
        Raises :class:`BadInput` when there is none."""
        text = str(ref)
        m = RUN_REF.match(text)
        if not m:
            raise BadInput(f"{text!r} is not a run reference (an id such as 12, latest[:TAG], baseline[:TAG])")
        if m["id"]:
            rows = self._query("SELECT * FROM runs WHERE id = ?", (int(m["id"]),))
            if not rows:
                raise BadInput(f"no run {m['id']} in {self.path} (see `trainscope runs`)")
            return self._row(rows[0])
        tag = check_tag(m["tag"])
        if m["kind"] == "latest":
            rows = self._query(
                "SELECT * FROM runs WHERE tag IS ? ORDER BY id DESC LIMIT 1"
                if tag is not None
                else "SELECT * FROM runs ORDER BY id DESC LIMIT 1",
                (tag,) if tag is not None else (),
            )
            if not rows:
                raise BadInput(f"no runs{f' tagged {tag}' if tag else ''} in {self.path}")
            return self._row(rows[0])
        return self.baseline(tag)

    def runs(
        self,
        *,
        tag: str | None = None,
        verdict: str | None = None,
        gpu: str | None = None,
        commit: str | None = None,
        source: str | None = None,
        since: str | None = None,
        limit: int | None = 50,
    ) -> list[StoredRun]:
        """Saved runs, newest first, filtered: ``tag`` (exact), ``verdict`` (axis or finding id),
        ``gpu`` / ``source`` (substring), ``commit`` (prefix), ``since`` (ISO date or time)."""
        where: list[str] = []
        args: list[object] = []
        if tag is not None:
            where.append("tag = ?")
            args.append(tag)
        if verdict is not None:
            where.append("(verdict = ? OR bottleneck = ?)")
            args += [verdict, verdict]
        if gpu is not None:
            where.append("instr(lower(coalesce(gpu, '')), lower(?)) > 0")
            args.append(gpu)
        if source is not None:
            where.append("instr(source, ?) > 0")
            args.append(source)
        if commit is not None:
            where.append("substr(coalesce(git_commit, ''), 1, ?) = ?")
            args += [len(commit), commit.lower()]
        if since is not None:
            where.append("created >= ?")
            args.append(since)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return self._rows(self._query(sql, args))

    # -- baselines -------------------------------------------------------------------------------

    def set_baseline(self, ref: str | int, tag: str | None = None) -> StoredRun:
        """Make run ``ref`` the baseline of ``tag`` (default: the run's own tag; none: the untagged
        baseline)."""
        run = self.get(ref)
        key = check_tag(tag) if tag is not None else (run.tag or "")
        self._write(
            "INSERT INTO baselines (tag, run_id, set_at) VALUES (?, ?, ?) "
            "ON CONFLICT(tag) DO UPDATE SET run_id = excluded.run_id, set_at = excluded.set_at",
            (key, run.id, _now()),
        )
        return self.get(run.id)

    def baseline(self, tag: str | None = None) -> StoredRun:
        key = tag or ""
        rows = self._query(
            "SELECT runs.* FROM baselines JOIN runs ON runs.id = baselines.run_id WHERE baselines.tag = ?", (key,)
        )
        if not rows:
            raise BadInput(
                f"no baseline{f' for tag {tag}' if tag else ''} in {self.path} "
                f"(set one with `trainscope baseline set RUN{f' --tag {tag}' if tag else ''}`)"
            )
        return self._row(rows[0])

    def baselines(self) -> dict[str, int]:
        return {r["tag"]: int(r["run_id"]) for r in self._query("SELECT tag, run_id FROM baselines ORDER BY tag")}

    # -- projected against achieved --------------------------------------------------------------

    def record_outcomes(self, before: StoredRun, after: StoredRun, outcomes: Iterable[FixOutcome]) -> int:
        """Keep each addressed fix's projected and achieved speedup (``diff --save``). Returns how many."""
        n = 0
        for o in outcomes:
            if not o.addressed:
                continue
            self._write(
                "INSERT OR REPLACE INTO fix_outcomes (before_run, after_run, recommendation, finding, status, "
                "projected_speedup, achieved_speedup, recorded) VALUES (?,?,?,?,?,?,?,?)",
                (
                    before.id,
                    after.id,
                    o.recommendation,
                    o.finding,
                    o.status,
                    o.projected_speedup,
                    o.achieved_speedup,
                    _now(),
                ),
            )
            n += 1
        return n

    def outcomes(self, run: str | int | None = None) -> list[dict[str, Any]]:
        """Recorded fix outcomes (of run ``run`` as BEFORE or AFTER, or all), oldest first."""
        if self._connect() and self.version < 2:  # an old store opened read-only has none yet
            return []
        sql = "SELECT * FROM fix_outcomes"
        args: tuple[int, ...] = ()
        if run is not None:
            rid = self.get(run).id
            sql, args = sql + " WHERE before_run = ? OR after_run = ?", (rid, rid)
        rows = self._query(sql + " ORDER BY recorded, before_run, after_run, recommendation", args)
        return [
            {
                "before_run": r["before_run"],
                "after_run": r["after_run"],
                "recommendation": r["recommendation"],
                "finding": r["finding"],
                "status": r["status"],
                "projected_speedup": r["projected_speedup"],
                "achieved_speedup": r["achieved_speedup"],
                "recorded": r["recorded"],
            }
            for r in rows
        ]


def open_store(path: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> RunStore:
    """The run history at ``path`` (default: :func:`default_store_path`)."""
    return RunStore(path, read_only=read_only)


def report_summary(report: Report | CachedReport) -> RunSummary:
    """The summary of an analyzed report's main rank (what ``analyze --save`` stores)."""

    # Batch shapes need the trace; a rank directory mapped in worker processes keeps only summaries.
    loaded = len(report.traces.traces) == len(report.ranks)
    shapes = shape_signature(report.traces.traces[report.main_index]) if loaded else ShapeSignature(False, {}, {})
    main = report.main
    run = Run(
        path=report.source,
        analysis=main,
        ranks=len(report.ranks),
        kernels=[],
        shapes=shapes,
        device_names=tuple(a.device_name or "" for a in report.ranks),
        warnings=report.warnings,
        index=report.main_index,
    )
    return summarize(run)


def save_run(
    report: Report | CachedReport,
    store: RunStore | str | os.PathLike[str] | None = None,
    *,
    tag: str | None = None,
    saved_by: str = "api",
    git_commit: str | None = None,
    cwd: str | None = None,
) -> StoredRun:
    """Save ``report``'s summary in the run history (``store``: a :class:`RunStore` or a path)."""
    st = store if isinstance(store, RunStore) else RunStore(store)
    return st.save(report_summary(report), tag=tag, saved_by=saved_by, git_commit=git_commit, cwd=cwd)


def list_runs(store: RunStore | str | os.PathLike[str] | None = None, **filters: Any) -> list[StoredRun]:
    """``RunStore.runs(**filters)`` of ``store``."""
    st = store if isinstance(store, RunStore) else RunStore(store)
    return st.runs(**filters)
