"""On-demand capture in ``watch``: ask the job's injected hook for a ``torch.profiler`` trace of its
next N iterations, then diagnose that trace with the same engine as ``trainscope analyze``.

The controller is driven by the watch's samples (:meth:`CaptureController.tick`, on whichever
thread feeds the analyzer): it sends requests through the step socket, reads the job's replies,
fires the automatic triggers, and hands each finished trace to a worker thread that runs
:func:`trainscope.api.analyze`, so sampling never waits on an analysis. A capture that cannot
happen ends with one line that says why (:attr:`Capture.why`); nothing here raises into the watch.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

TRIGGERS = ("verdict-change", "slowdown")
RANKS = ("all", "lowest")  # --capture-ranks: every stepping rank of the job, or only the lowest
SLOWDOWN_FACTOR = 1.5  # --capture-on slowdown: the interval's mean step above 1.5 × the running median
SLOWDOWN_MIN_STEPS = 20  # steps the running median needs before a slowdown can be judged
AT_MIN_STEPS = 8  # --capture-at waits for this many timed steps: not the start-up, and steps "before" to compare
START_TIMEOUT_S = 30.0  # no answer from the job (no iteration boundary) for this long: given up
DEFAULT_MAX_S = 60.0  # a capture stops after this many seconds even if N iterations did not pass
ANALYSIS_WAIT_S = 120.0  # at the end of a watch, how long to wait for analyses still running
FINAL = ("done", "refused", "failed", "aborted")


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
    export_s: float | None = None
    time_limit: bool = False
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
        from trainscope.reports.live import capture_overhead

        return capture_overhead(self.to_dict())

    def line(self) -> str:
        """The headless line for a finished capture."""
        from trainscope.reports.live import capture_headline

        return capture_headline(self.to_dict())

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
            "breakdown": list(self.breakdown),
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
            "start_s": _r(self.start_s),
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
    folder: str | None = None  # where traces go (the watch's private folder when None)
    max_s: float = DEFAULT_MAX_S
    stack: bool = False
    memory: bool = False
    ranks: str = "all"  # one of RANKS


class CaptureController:
    """Requests, replies, triggers and analyses of one watch's captures."""

    def __init__(
        self,
        receiver,
        folder: str,
        options: CaptureOptions | None = None,
        analyze: Callable[[str], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.receiver = receiver
        self.folder = folder
        self.options = options or CaptureOptions()
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
        self._last_key: tuple | None = None
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
                os.makedirs(self.folder, exist_ok=True)
                if len(targets) > 1:  # one trace per rank, in a folder that `trainscope analyze` reads as a rank set
                    cap.path = os.path.join(os.path.abspath(self.folder), f"capture-{cap.id}")
                    os.makedirs(cap.path, exist_ok=True)
            except OSError as e:
                cap.path = None
                return self._end(cap, "failed", f"cannot create {self.folder}: {e.strerror or e}")
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
                    "stack": self.options.stack,
                    "memory": self.options.memory,
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

    def _targets(self) -> tuple[list[tuple[int, str | None]], str]:
        """The processes to ask: every stepping rank the socket can reach, lowest rank first."""
        if self.receiver is None:
            return [], "step hook off"
        if hasattr(self.receiver, "capture_targets"):
            return self.receiver.capture_targets()
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

    def tick(self, t: float, status=None, snapshot=None) -> None:
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

    def _triggers(self, t: float, status, snapshot) -> None:
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

    def _reply(self, msg: dict, t: float) -> None:
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
                if not os.path.isfile(part.path):
                    part.status, part.why = "failed", "the job said it wrote the trace, but it is not there"
                    self._settle(cap, t)
                    return
                part.status = "done"
                if pid == cap.pid or not cap.during_ms:  # the reference rank's times, else the first rank's
                    cap.during_ms, cap.before_ms = _ms(msg.get("steps_ns")), _ms(msg.get("before_ns"))
                    cap.start_s, cap.export_s = _s(msg.get("start_ns")), _s(msg.get("export_ns"))
                    cap.time_limit = bool(msg.get("time_limit"))
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
        target = cap.path if many else done[0].path
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
            analyze = self._analyze
            if analyze is None:
                from trainscope.api.analysis import analyze
            report = analyze(target)
            fields = _report_fields(report)
        except Exception as e:  # noqa: BLE001 (a bad trace must not stop the watch)
            from trainscope.api.errors import describe

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


@dataclass
class _Part:
    """One process's share of a capture."""

    pid: int
    rank: str | None
    path: str
    status: str = "requested"  # requested → capturing → done; or refused / failed / aborted
    why: str = ""

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"


def _reasons(parts, most: int = 4) -> str:
    """Why no process wrote a trace, each reason once with the processes that gave it, in rank
    order: "rank 0: the job exited after 88 of 500 captured iterations; rank 1: its own
    torch.profiler is running" (the first ``most`` reasons, then how many more)."""
    by_why: dict[str, list[str]] = {}
    for p in parts:
        by_why.setdefault(p.why or p.status, []).append(p.label)
    said = [f"{', '.join(labels)}: {why}" for why, labels in by_why.items()]
    more = f"; {len(said) - most} other reasons" if len(said) > most else ""
    return "; ".join(said[:most]) + more


def _ms(xs) -> tuple[float, ...]:
    try:
        return tuple(float(x) / 1e6 for x in (xs or ())[:100_000] if float(x) >= 0)
    except (TypeError, ValueError):
        return ()


def _s(x) -> float | None:
    try:
        return None if x is None else float(x) / 1e9
    except (TypeError, ValueError):
        return None


def _counters(status) -> str:
    """What the live counters said at the moment (the Capture tab shows both side by side)."""
    if status is None:
        return ""
    from trainscope.reports.live import live_headline

    s = status.stats
    parts = [live_headline(status)]
    if s.step_ms is not None:
        parts.append(f"step {s.step_ms:.1f} ms")
    if s.data_wait_pct is not None:
        parts.append(f"data wait {s.data_wait_pct:.1f} %")
    if s.gpu_util is not None:
        parts.append(f"GPU busy {s.gpu_util:.0f} %")
    return " · ".join(parts)


def _report_fields(report) -> dict[str, Any]:
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
    return {
        "ranks": tuple(ranks[:65]),
        "verdict_line": line,
        "headline": str(v.get("axis") or ""),
        "summary": summary,
        "evidence": tuple(ev),
        "top_kernels": tuple(kernels),
        "breakdown": tuple(breakdown),
    }
