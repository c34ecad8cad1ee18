"""On-demand capture in ``watch``: ask the job's injected hook for a ``torch.profiler`` trace of its
next N iterations, then diagnose that trace with the same engine as ``trainscope analyze``.

The controller is driven by the watch's samples (:meth:`CaptureController.tick`, on whichever
thread feeds the analyzer): it sends requests through the step socket, reads the job's replies,
fires the automatic triggers, and hands each finished trace to a worker thread that runs
:func:`trainscope.api.analyze`, so sampling never waits on an analysis. A capture that cannot
happen ends with one line that says why (:attr:`Capture.why`); nothing here raises into the watch.

Trust: the capture folder is opened once, without following a link, and must be this user's and
closed to others' writes (:func:`open_capture_folder`; created 0700 when missing). The job is told
the folder's identity (device, inode) and refuses any other; it writes under a private temporary
name and renames into place. A finished trace is checked on the folder's descriptor (a regular file
of this user, not a link) and analyzed through that descriptor (``/proc/self/fd/N/…``), so no path
component another user could swap is resolved again.

Cost: the job records with the cheapest settings that still give a verdict (see
:class:`trainscope.collectors.step_hook._Capture`), and every capture states what it cost the job
— the median step during it against the steps around it, from the step hook's own timings — next
to its verdict. The trace's launch/CPU-overhead share is then judged with that cost set apart
(:meth:`Capture.set_apart`): a profiler makes every operator slower on the host, which a trace
reads as the host holding the GPU up.
"""

from __future__ import annotations

import errno
import os
import stat
import statistics
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from trainscope.api import analysis
from trainscope.api.errors import describe
from trainscope.collectors.step_hook import NO_OTHER_WRITE
from trainscope.collectors.step_hook import existing_problem
from trainscope.collectors.step_hook import fd_path
from trainscope.collectors.step_hook import folder_problem
from trainscope.collectors.step_hook import open_folder
from trainscope.collectors.step_hook import same_folder
from trainscope.reports.document import known_parts
from trainscope.reports.live import capture_headline
from trainscope.reports.live import capture_overhead
from trainscope.reports.live import live_headline

TRIGGERS = ("verdict-change", "slowdown")
RANKS = ("all", "lowest")  # --capture-ranks: every stepping rank of the job, or only the lowest
SLOWDOWN_FACTOR = 1.5  # --capture-on slowdown: the interval's mean step above 1.5 × the running median
SLOWDOWN_MIN_STEPS = 20  # steps the running median needs before a slowdown can be judged
AT_MIN_STEPS = 8  # --capture-at waits for this many timed steps: not the start-up, and steps "before" to compare
START_TIMEOUT_S = 30.0  # no answer from the job (no iteration boundary) for this long: given up
DEFAULT_MAX_S = 60.0  # a capture stops after this many seconds even if N iterations did not pass
ANALYSIS_WAIT_S = 120.0  # at the end of a watch, how long to wait for analyses still running
FINAL = ("done", "refused", "failed", "aborted")
LAUNCH_FINDING = "host/launch-overhead"  # the verdict a profiler's own host cost can fake
DEFAULT_FOLDER = "trainscope-captures"  # in the working directory, without --capture-dir or --record


@dataclass
class Capture:
    """One capture, from the request to its diagnosis (a copy is handed out with every sample)."""

    id: int
    trigger: str
    steps: int
    requested_t: float
    counters: str = ""  # what the live counters said when it was asked for
    pid: int | None = None  # the reference process (the lowest rank): its step times give the overhead
    pids: tuple[int, ...] = ()  # every process asked (one per rank in a job of several ranks)
    status: str = "requested"  # requested → capturing → analyzing → done; or refused / failed / aborted
    why: str = ""
    path: str | None = None
    started_t: float | None = None
    done_t: float | None = None
    cuda: bool = False
    during_ms: tuple[float, ...] = ()
    before_ms: tuple[float, ...] = ()
    after_ms: tuple[float, ...] = ()
    start_s: float | None = None
    warmup_s: float | None = None
    export_s: float | None = None
    time_limit: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what the job recorded (shapes, stack, memory)
    host: dict[str, Any] = field(default_factory=dict)  # the trace's launch/CPU-overhead share, for set_apart()
    verdict_line: str | None = None
    headline: str | None = None
    summary: str | None = None
    evidence: tuple[str, ...] = ()
    top_kernels: tuple[str, ...] = ()
    breakdown: tuple[str, ...] = ()
    ranks: tuple[str, ...] = ()  # per rank: which were captured, their step and verdict; the stragglers
    report: Any = field(default=None, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.status in FINAL

    def overhead(self) -> tuple[float, float, float] | None:
        """(median step during, median step around, % more per step) — around = before and after."""
        around = list(self.before_ms) + list(self.after_ms)
        if not self.during_ms or not around:
            return None
        d, a = statistics.median(self.during_ms), statistics.median(around)
        return d, a, (100.0 * (d / a - 1.0) if a > 0 else 0.0)

    def overhead_text(self) -> str:
        return capture_overhead(self.to_dict())

    def set_apart(self) -> dict[str, Any] | None:
        """The trace's launch/CPU-overhead share judged with the profiler's own cost set apart.

        The profiler's cost per step is measured by the step hook: the median captured step minus
        the median step around the capture. A profiler slows the host side of every operator, which
        the trace's breakdown counts as launch/CPU overhead (the GPU waiting on the host), so that
        cost is taken off the trace's launch/CPU-overhead time and off its step:
        ``job share = (launch ms − cost ms) / (trace step ms − cost ms)``. When the capture's
        verdict is launch/CPU overhead and the share left is under ``host_overhead.moderate``, the
        verdict is the profiler's, not the job's (``verdict_is_profilers``). None when there is
        nothing to set apart (no cost measured, or no launch/CPU-overhead time in the trace)."""
        o, h = self.overhead(), self.host
        if o is None or not h or not h.get("launch_ms") or not h.get("step_ms"):
            return None
        cost = max(0.0, o[0] - o[1])
        launch, step = float(h["launch_ms"]), float(h["step_ms"])
        job_step = step - cost
        job = 0.0 if job_step <= 0 else 100.0 * max(0.0, launch - cost) / job_step
        moderate = float(h.get("moderate") or 3.0)
        is_verdict = h.get("bottleneck") == LAUNCH_FINDING
        return {
            "cost_ms_per_step": round(cost, 3),
            "launch_pct_in_trace": round(100.0 * launch / step, 2),
            "launch_pct_set_apart": round(job, 2),
            "moderate_pct": moderate,
            "verdict_is_launch": is_verdict,
            "verdict_is_profilers": bool(is_verdict and job < moderate),
            "method": "launch/CPU-overhead ms and step ms of the trace, each less the profiler's cost per step "
            "(median captured step − median step around it, from the step hook)",
        }

    def line(self) -> str:
        """The headless line for a finished capture."""

        return capture_headline(self.to_dict())

    def breakdown_lines(self) -> tuple[str, ...]:
        """The trace's step breakdown, its launch/CPU-overhead entry with the profiler's cost set apart."""
        sa, label = self.set_apart(), self.host.get("label")
        if sa is None or not label:
            return self.breakdown
        return tuple(
            f"{b} (≈ {sa['launch_pct_set_apart']:.1f} % with the profiler's cost set apart)"
            if b.startswith(f"{label}:")
            else b
            for b in self.breakdown
        )

    def to_dict(self) -> dict[str, Any]:
        o = self.overhead()
        return {
            "type": "capture",
            "id": self.id,
            "trigger": self.trigger,
            "status": self.status,
            "why": self.why,
            "steps": self.steps,
            "steps_captured": len(self.during_ms),
            "pid": self.pid,
            "pids": list(self.pids),
            "path": self.path,
            "requested_t": _r(self.requested_t),
            "started_t": _r(self.started_t),
            "done_t": _r(self.done_t),
            "cuda": self.cuda,
            "counters": self.counters,
            "verdict_line": self.verdict_line,
            "headline": self.headline,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "top_kernels": list(self.top_kernels),
            "breakdown": list(self.breakdown_lines()),
            "ranks": list(self.ranks),
            "overhead": None
            if o is None
            else {
                "during_ms": _r(o[0]),
                "around_ms": _r(o[1]),
                "pct": _r(o[2]),
                "before_steps": len(self.before_ms),
                "after_steps": len(self.after_ms),
            },
            "set_apart": self.set_apart(),
            "settings": dict(self.settings),
            "start_s": _r(self.start_s),
            "warmup_s": _r(self.warmup_s),
            "export_s": _r(self.export_s),
            "time_limit": self.time_limit,
        }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


@dataclass(frozen=True)
class CaptureOptions:
    """What ``--capture-*`` asked for."""

    steps: int = 5
    at_s: float | None = None  # one capture this many seconds into the watch
    on: tuple[str, ...] = ()  # automatic triggers: "verdict-change", "slowdown"
    max_captures: int = 3
    folder: str | None = None  # where traces go (DEFAULT_FOLDER in the working directory when None)
    max_s: float = DEFAULT_MAX_S
    stack: bool = False
    memory: bool = False
    shapes: bool = False  # operators' input shapes (kernels' FLOP/s and % of roof); costs the job more
    ranks: str = "all"  # one of RANKS


class CaptureController:
    """Requests, replies, triggers and analyses of one watch's captures."""

    def __init__(
        self,
        receiver: Any,  # collectors.step_receiver.StepReceiver, or a fake with its capture calls
        folder: str,
        options: CaptureOptions | None = None,
        analyze: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.receiver = receiver
        self.folder = os.path.abspath(folder)
        self.options = options or CaptureOptions()
        self._fd: int | None = None  # the capture folder, opened and checked at the first capture
        self._analyze = analyze
        self._clock = clock
        self._lock = threading.Lock()
        self.captures: list[Capture] = []
        self._sent_at: dict[int, float] = {}  # id -> clock() when the request went out
        self._parts: dict[int, dict[int, _Part]] = {}  # id -> pid -> that process's share of the capture
        self._workers: list[threading.Thread] = []
        self._reported: set[int] = set()
        self._notes: list[str] = []
        self._at_done = False
        self._last_key: tuple[Any, ...] | None = None
        self._step_history: list[float] = []
        self._steps_seen = 0
        self._t = 0.0

    # -- asking -------------------------------------------------------------------------------------

    @property
    def active(self) -> Capture | None:
        return next((c for c in self.captures if c.status in ("requested", "capturing")), None)

    def request(self, trigger: str, t: float | None = None, counters: str = "") -> Capture:
        """Ask for a capture now; the returned capture says at once when it cannot happen."""
        with self._lock:
            t = self._t if t is None else t
            cap = Capture(len(self.captures) + 1, trigger, self.options.steps, t, counters)
            self.captures.append(cap)
            busy = next((c for c in self.captures[:-1] if c.status in ("requested", "capturing", "analyzing")), None)
            if busy is not None:
                return self._end(cap, "refused", f"capture {busy.id} is still {busy.status}: one capture at a time")
            if len([c for c in self.captures[:-1] if c.status != "refused"]) >= self.options.max_captures:
                return self._end(cap, "refused", f"--capture-max {self.options.max_captures} reached")
            targets, why = self._targets()
            if not targets:
                return self._end(cap, "refused", why)
            if self.options.ranks == "lowest":
                targets = targets[:1]
            try:
                dfd = self._folder_fd()
                folder_id = _ident(dfd)
                if len(targets) > 1:  # one trace per rank, in a folder that `trainscope analyze` reads as a rank set
                    sub = _new_subfolder(dfd, f"capture-{cap.id}")
                    cap.path = os.path.join(self.folder, sub)
                    sfd = os.open(sub, _DIR_FLAGS, dir_fd=dfd)
                    try:
                        folder_id = _ident(sfd)
                    finally:
                        os.close(sfd)
            except OSError as e:
                cap.path = None
                return self._end(cap, "failed", f"cannot use {self.folder}: {e.strerror or e}")
            parts: dict[int, _Part] = {}
            for pid, rank in targets:
                if cap.path is None:
                    path = os.path.join(os.path.abspath(self.folder), f"capture-{cap.id}-pid{pid}.pt.trace.json")
                else:
                    name = (
                        f"rank{rank}-pid{pid}"
                        if rank is not None and rank.isascii() and rank.isdigit()
                        else f"pid{pid}"
                    )
                    path = os.path.join(cap.path, f"{name}.pt.trace.json")
                msg = {
                    "type": "capture",
                    "id": cap.id,
                    "steps": cap.steps,
                    "max_s": self.options.max_s,
                    "path": path,
                    "folder_id": list(folder_id),
                    "stack": self.options.stack,
                    "memory": self.options.memory,
                    "shapes": self.options.shapes,
                }
                if self.receiver.send(pid, msg):
                    parts[pid] = _Part(pid, rank, path)
            if not parts:
                cap.path = None
                return self._end(cap, "refused", "the request could not be sent to the job")
            cap.pid, cap.pids = next(iter(parts)), tuple(parts)
            if cap.path is None:
                cap.path = parts[cap.pid].path
            self._parts[cap.id] = parts
            self._sent_at[cap.id] = self._clock()
            who = f"pid {cap.pid}" if len(parts) == 1 else f"{len(parts)} ranks (pids {', '.join(map(str, parts))})"
            self._notes.append(f"capture {cap.id} ({trigger}): asked at {t:.1f} s for {cap.steps} iterations of {who}")
            return replace(cap)

    def _folder_fd(self) -> int:
        """The capture folder's descriptor: created 0700 when missing, refused (PermissionError)
        when it is a link, another user's, or writable by others (see :func:`open_capture_folder`)."""
        if self._fd is None:
            self._fd = open_capture_folder(self.folder)
        return self._fd

    def _checked(self, path: str) -> tuple[str | None, str]:
        """Where to read the trace the job says it wrote at ``path`` (a file, or a rank folder):
        reached through the capture folder's descriptor, and only when it is this user's regular
        file (a folder of this user's for a rank set), not a link; (None, why) otherwise."""

        if self._fd is None:
            return None, "the capture folder is not open"
        rel = os.path.relpath(path, self.folder)
        parts = rel.split(os.sep)
        if rel.startswith(os.pardir) or any(p in ("", os.curdir, os.pardir) for p in parts):
            return None, "the trace is not inside the capture folder"
        fd = self._fd
        opened: list[int] = []
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
                nfd = os.open(part, flags if last else _DIR_FLAGS, dir_fd=fd)
                opened.append(nfd)
                st = os.fstat(nfd)
                ok = stat.S_ISDIR(st.st_mode) or (last and stat.S_ISREG(st.st_mode))
                if not ok or st.st_uid != os.geteuid():
                    return None, "the trace is not a regular file of this user: not read"
                fd = nfd
        except OSError as e:
            why = "it is a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
            return None, f"the trace cannot be opened safely ({why}): not read"
        finally:
            for o in opened:
                os.close(o)
        via = fd_path(self._fd, rel)
        if via is not None:
            return via, ""

        if not same_folder(self._fd, self.folder):  # no /proc: the path, once it is known to lead here
            return None, "the capture folder was replaced during the watch: not read"
        return path, ""

    def close(self) -> None:
        """Release the capture folder (after :meth:`finish`)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _targets(self) -> tuple[list[tuple[int, str | None]], str]:
        """The processes to ask: every stepping rank the socket can reach, lowest rank first."""
        if self.receiver is None:
            return [], "step hook off"
        if hasattr(self.receiver, "capture_targets"):
            targets: tuple[list[tuple[int, str | None]], str] = self.receiver.capture_targets()
            return targets
        pid, why = self.receiver.capture_target()
        return ([(pid, None)] if pid is not None else []), why

    def _end(self, cap: Capture, status: str, why: str) -> Capture:
        cap.status, cap.why = status, why
        cap.done_t = self._t
        if status != "done":
            cap.path = cap.path if status == "done" else None
            self._notes.append(f"capture {cap.id}: no capture: {why}")
        return replace(cap)

    # -- driven by samples ----------------------------------------------------------------------------

    def tick(self, t: float, status: Any = None, snapshot: Any = None) -> None:
        """One sample: read the job's replies, time out silent requests, fire the triggers."""
        self._t = t
        for msg in self.receiver.drain_capture_messages() if self.receiver is not None else []:
            self._reply(msg, t)
        with self._lock:
            for c in self.captures:
                if c.status not in ("requested", "capturing"):
                    continue
                if self._clock() - self._sent_at.get(c.id, self._clock()) <= START_TIMEOUT_S:
                    continue
                late = [p for p in self._parts.get(c.id, {}).values() if p.status == "requested"]
                for part in late:
                    part.status = "refused"
                    part.why = f"the job began no iteration within {START_TIMEOUT_S:g} s of the request"
                if late:
                    self._settle(c, t)
        self._triggers(t, status, snapshot)

    def _triggers(self, t: float, status: Any, snapshot: Any) -> None:
        o = self.options
        if o.at_s is not None and not self._at_done and t >= o.at_s:
            # Due: asked once the job steps (a job still importing torch at that moment is waited for).
            pid, _ = self.receiver.capture_target() if self.receiver is not None else (None, "")
            if pid is not None and self._steps_seen >= AT_MIN_STEPS:
                self._at_done = True
                self.request(f"at {o.at_s:g} s", t, _counters(status))
        if status is not None and "verdict-change" in o.on and status.state == "ready":
            key = (status.verdict.axis, status.verdict.bottleneck)
            if self._last_key is not None and key != self._last_key and self.active is None:
                self.request("verdict change", t, _counters(status))
            self._last_key = key
        step = getattr(snapshot, "step", None) if snapshot is not None else None
        if step is not None and step.steps:
            self._steps_seen += step.steps
            ms = step.step_ns / step.steps / 1e6
            hist = self._step_history
            if (
                "slowdown" in o.on
                and len(hist) >= SLOWDOWN_MIN_STEPS
                and self.active is None
                and ms > SLOWDOWN_FACTOR * statistics.median(hist)
            ):
                self.request(
                    f"slowdown: step {ms:.1f} ms > {SLOWDOWN_FACTOR:g} × median {statistics.median(hist):.1f} ms",
                    t,
                    _counters(status),
                )
            hist.extend([ms] * min(step.steps, 50))
            del hist[:-2000]

    def _reply(self, msg: dict[str, Any], t: float) -> None:
        try:
            cid = int(msg["id"])
        except (KeyError, TypeError, ValueError):
            return
        with self._lock:
            cap = next((c for c in self.captures if c.id == cid), None)
            parts = self._parts.get(cid, {})
            try:
                pid = int(msg["pid"])
            except (KeyError, TypeError, ValueError):
                pid = next(iter(parts)) if len(parts) == 1 else -1  # an unsigned reply: the only process asked
            part = parts.get(pid)
            if cap is None or part is None:
                return
            if msg.get("type") == "capture_cost":
                if pid == cap.pid:
                    cap.after_ms = _ms(msg.get("after_ns"))
                return
            status = msg.get("status")
            why = str(msg.get("why") or "")[:300]
            if status == "started" and part.status == "requested":
                part.status = "capturing"
                if cap.status == "requested":
                    cap.status, cap.started_t, cap.cuda = "capturing", t, bool(msg.get("cuda"))
                    self._notes.append(
                        f"capture {cid}: started at {t:.1f} s" + (" (CPU and CUDA)" if cap.cuda else " (CPU)")
                    )
            elif status in ("refused", "failed", "aborted") and part.status in ("requested", "capturing"):
                part.status, part.why = status, why or status
                self._settle(cap, t)
            elif status == "done" and part.status in ("requested", "capturing"):
                via, why = self._checked(part.path)
                if via is None:
                    part.status, part.why = "failed", why
                    self._settle(cap, t)
                    return
                part.status, part.via = "done", via
                if pid == cap.pid or not cap.during_ms:  # the reference rank's times, else the first rank's
                    cap.during_ms, cap.before_ms = _ms(msg.get("steps_ns")), _ms(msg.get("before_ns"))
                    cap.start_s, cap.export_s = _s(msg.get("start_ns")), _s(msg.get("export_ns"))
                    cap.warmup_s = _s(msg.get("warmup_ns"))
                    cap.time_limit = bool(msg.get("time_limit"))
                    settings = msg.get("settings")
                    if isinstance(settings, dict):
                        cap.settings = {k: bool(settings.get(k)) for k in ("ops", "shapes", "stack", "memory")}
                cap.started_t = cap.started_t if cap.started_t is not None else t
                self._settle(cap, t)

    def _settle(self, cap: Capture, t: float) -> None:
        """Once every process asked has answered for good: diagnose what was written, or say why
        nothing was (under the lock)."""
        parts = self._parts.get(cap.id, {})
        if (
            cap.finished
            or cap.status == "analyzing"
            or any(p.status in ("requested", "capturing") for p in parts.values())
        ):
            return
        done = [p for p in parts.values() if p.status == "done"]
        many = len(parts) > 1
        if not done:
            first = next(iter(parts.values()))
            self._end(cap, first.status, _reasons(parts.values()) if many else first.why)
            return
        if many:
            missing = [f"{p.label}: {p.status}: {p.why}" for p in parts.values() if p.status != "done"]
            cap.ranks = tuple(
                f"{p.label}: no trace ({p.status}: {p.why})" for p in parts.values() if p.status != "done"
            )
            if missing:
                self._notes.append(
                    f"capture {cap.id}: {len(done)} of {len(parts)} ranks captured; " + "; ".join(missing)
                )
        target = done[0].via or done[0].path
        if many and cap.path is not None:  # the rank folder, through the capture folder's descriptor as each file was
            via, why = self._checked(cap.path)
            if via is None:
                self._end(cap, "failed", why)
                return
            target = via

        if self._fd is not None and not same_folder(self._fd, self.folder):
            self._notes.append(
                f"capture {cap.id}: the folder {self.folder} was replaced during the watch (its parent lets "
                "others rename it): the trace analyzed is the one the job wrote, no longer at the path shown"
            )
        cap.status = "analyzing"
        self._notes.append(f"capture {cap.id}: {len(cap.during_ms)} iterations captured by {t:.1f} s: {cap.path}")
        th = threading.Thread(
            target=self._diagnose, args=(cap, target), name=f"trainscope-capture-{cap.id}", daemon=True
        )
        self._workers.append(th)
        th.start()

    def _diagnose(self, cap: Capture, target: str) -> None:
        """The worker: the same engine as ``trainscope analyze`` (on the rank folder when several
        ranks were captured), never raising."""
        try:
            analyze = self._analyze or analysis.analyze
            report = analyze(target)
            fields = _report_fields(report)
        except Exception as e:  # noqa: BLE001 (a bad trace must not stop the watch)
            with self._lock:
                cap.status, cap.why, cap.done_t = (
                    "failed",
                    f"the trace could not be analyzed: {describe(e)[0]}",
                    self._t,
                )
            return
        with self._lock:
            missing = cap.ranks
            for k, v in fields.items():
                setattr(cap, k, v)
            cap.ranks = tuple(fields.get("ranks", ())) + missing
            cap.report = report
            cap.status, cap.done_t = "done", self._t

    # -- reading -------------------------------------------------------------------------------------------

    def snapshot(self) -> tuple[Capture, ...]:
        with self._lock:
            return tuple(replace(c) for c in self.captures)

    def newly_finished(self) -> list[Capture]:
        """Finished captures not yet handed out by this call (the headless printer's feed)."""
        with self._lock:
            out = [replace(c) for c in self.captures if c.finished and c.id not in self._reported]
            self._reported.update(c.id for c in out)
            return out

    def drain_notes(self) -> list[str]:
        with self._lock:
            out, self._notes = self._notes, []
            return out

    def finish(self, wait_s: float = ANALYSIS_WAIT_S) -> None:
        """The watch ends: read the last replies, say why a capture still open got no trace, and
        wait (bounded) for analyses still running."""
        for msg in self.receiver.drain_capture_messages() if self.receiver is not None else []:
            self._reply(msg, self._t)
        if self.options.at_s is not None and not self._at_done:
            self._at_done = True
            if self._t < self.options.at_s:
                why = f"the watch ended at {self._t:.1f} s, before --capture-at {self.options.at_s:g} s"
            elif self.receiver is None:
                why = "the step hook is off"
            else:
                pid, why = self.receiver.capture_target()
                if pid is not None:
                    why = (
                        f"the job timed only {self._steps_seen} iterations; a --capture-at capture waits for "
                        f"{AT_MIN_STEPS} so that it is not of the start-up"
                    )
            with self._lock:
                cap = Capture(len(self.captures) + 1, f"at {self.options.at_s:g} s", self.options.steps, self._t)
                self.captures.append(cap)
                self._end(cap, "refused", why)
        with self._lock:
            for c in self.captures:
                if c.status in ("requested", "capturing"):
                    parts = self._parts.get(c.id, {})
                    for part in parts.values():
                        if part.status in ("requested", "capturing"):
                            part.status, part.why = "aborted", "the job ended before the capture finished"
                    if parts:
                        self._settle(c, self._t)
                    if c.status in ("requested", "capturing"):
                        self._end(c, "aborted", "the job ended before the capture finished")
            workers = list(self._workers)
        end = time.monotonic() + wait_s
        for th in workers:
            th.join(max(0.0, end - time.monotonic()))
        with self._lock:
            for c in self.captures:
                if c.status == "analyzing":
                    c.status, c.why = "failed", f"the analysis did not finish within {wait_s:g} s"


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _new_subfolder(dir_fd: int, name: str) -> str:
    """A new folder ``name`` (0700) in the folder ``dir_fd``; ``name.2``, ``name.3``, … when taken
    (a previous watch's capture of the same number keeps its traces, and none is mixed in)."""
    for n in range(1, 1000):
        candidate = name if n == 1 else f"{name}.{n}"
        try:
            os.mkdir(candidate, 0o700, dir_fd=dir_fd)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free capture folder name", name)


def capture_folder_problem(path: str) -> str | None:
    """Why the existing folder ``path`` cannot hold captures (a link, another user's, writable by
    group or others, not a folder), or None (also when it does not exist yet: it is created 0700)."""

    return existing_problem(path, lambda st: folder_problem(st, NO_OTHER_WRITE))


def open_capture_folder(path: str) -> int:
    """A descriptor of the capture folder ``path``: created 0700 when missing (its parents as
    ``mkdir -p`` would), opened without following a link and checked on the descriptor — this
    user's, not writable by group or others. PermissionError (or the OSError) otherwise."""

    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return open_folder(path, NO_OTHER_WRITE)


@dataclass
class _Part:
    """One process's share of a capture."""

    pid: int
    rank: str | None
    path: str
    status: str = "requested"  # requested → capturing → done; or refused / failed / aborted
    why: str = ""
    via: str | None = None  # where the checked trace is read (through the capture folder's descriptor)

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"


def _reasons(parts: Iterable[_Part], most: int = 4) -> str:
    """Why no process wrote a trace, each reason once with the processes that gave it, in rank
    order: "rank 0: the job exited after 88 of 500 captured iterations; rank 1: its own
    torch.profiler is running" (the first ``most`` reasons, then how many more)."""
    by_why: dict[str, list[str]] = {}
    for p in parts:
        by_why.setdefault(p.why or p.status, []).append(p.label)
    said = [f"{', '.join(labels)}: {why}" for why, labels in by_why.items()]
    more = f"; {len(said) - most} other reasons" if len(said) > most else ""
    return "; ".join(said[:most]) + more


def _ms(xs: Any) -> tuple[float, ...]:
    try:
        return tuple(float(x) / 1e6 for x in (xs or ())[:100_000] if float(x) >= 0)
    except (TypeError, ValueError):
        return ()


def _s(x: Any) -> float | None:
    try:
        return None if x is None else float(x) / 1e9
    except (TypeError, ValueError):
        return None


def _counters(status: Any) -> str:
    """What the live counters said at the moment (the Capture tab shows both side by side)."""
    if status is None:
        return ""

    s = status.stats
    return " · ".join(
        [
            live_headline(status),
            *known_parts(
                ("step {:.1f} ms", s.step_ms),
                ("data wait {:.1f} %", s.data_wait_pct),
                ("GPU busy {:.0f} %", s.gpu_util),
            ),
        ]
    )


def _report_fields(report: Any) -> dict[str, Any]:
    """What the Capture tab, the headless line and the report show of an analysis."""
    d = report.to_dict() if hasattr(report, "to_dict") else {}
    v = d.get("verdict") or {}
    ev = []
    for e in (v.get("evidence") or [])[:6]:
        mark = {True: "✔", False: "✘"}.get(e.get("meets"), " ")
        unit = e.get("unit") or ""
        val = "n/a" if e.get("value") is None else f"{e.get('value'):g} {unit}".strip()
        thr = f"{e.get('threshold')} {unit}".strip() if e.get("threshold") else ""  # "≥ 3 % of step time"
        ev.append(f"{mark} {e.get('metric')}: {val} {thr}".rstrip())
    kernels = []
    for k in ((d.get("kernels") or {}).get("top") or [])[:5]:
        roof = "" if k.get("tflops") is None else f", {k['tflops']:.1f} TFLOP/s"
        roof += "" if k.get("pct_of_roof") is None else f", {k['pct_of_roof']:.0f} % of roof"
        kernels.append(
            f"{str(k.get('name'))[:56]}  {k.get('total_ms', 0):.2f} ms ({k.get('share_pct', 0):.1f} %)"
            f"  {k.get('bound') or '?'}-bound{roof}"
        )
    bd = d.get("breakdown") or {}
    breakdown = []
    p50 = (bd.get("step_time_ms") or {}).get("p50")
    if p50 is not None:
        breakdown.append(f"step p50 {p50:.2f} ms")
    cats = sorted((bd.get("categories") or {}).values(), key=lambda c: -(c.get("pct") or 0))
    breakdown += [f"{c.get('label')}: {c.get('pct'):.1f} %" for c in cats if (c.get("pct") or 0) >= 0.5][:6]
    ranks = []
    for r in d.get("ranks") or []:
        p50 = r.get("step_p50_ms")
        ranks.append(
            f"rank {r.get('rank')}: step p50 {'n/a' if p50 is None else f'{p50:.2f} ms'}, "
            f"{r.get('axis') or '?'} / {r.get('bottleneck') or '?'}"
        )
    stragglers = (d.get("stragglers") or {}).get("summary")
    if ranks and stragglers:
        ranks.append(str(stragglers))
    line = report.verdict_line() if hasattr(report, "verdict_line") else str(v.get("summary", ""))
    summary = str(v.get("summary") or "")
    if ranks and d.get("rank") is not None:  # a rank set: the verdict is its slowest rank's
        summary = f"rank {d['rank']}'s trace: {summary}" if summary else summary
        line = f"{line} (rank {d['rank']}'s trace)" if line else line
    launch = ((d.get("sinks") or {}).get("by_sink") or {}).get("launch") or {}
    mean = (bd.get("step_time_ms") or {}).get("mean")
    moderate = next(
        (t.get("value") for t in d.get("thresholds") or [] if t.get("name") == "host_overhead.moderate"), None
    )
    host = {}
    if launch.get("ms_per_step") and mean:
        host = {
            "launch_ms": launch["ms_per_step"],
            "step_ms": mean,
            "bottleneck": v.get("bottleneck"),
            "moderate": moderate,
            "label": ((bd.get("categories") or {}).get("idle_host_overhead") or {}).get("label"),
        }
    return {
        "host": host,
        "ranks": tuple(ranks[:65]),
        "verdict_line": line,
        "headline": str(v.get("axis") or ""),
        "summary": summary,
        "evidence": tuple(ev),
        "top_kernels": tuple(kernels),
        "breakdown": tuple(breakdown),
    }
