"""``watch``: live snapshots of a job, its GPUs and host, judged by the live analyzer over a window;
recordings and their replay."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from trainscope.analyzers.live.engine import LiveAnalyzer
from trainscope.api.capture import DEFAULT_FOLDER
from trainscope.api.capture import CaptureController
from trainscope.api.capture import _counters
from trainscope.api.errors import BadInput
from trainscope.api.errors import bad_input
from trainscope.api.rules import resolve_rules
from trainscope.collectors.host import HostSampler
from trainscope.collectors.live_trace import open_recording as _open_recording
from trainscope.collectors.monitor import Monitor
from trainscope.collectors.nvml import NvmlSampler
from trainscope.collectors.recording import RecordingWriter
from trainscope.collectors.recording import output_refusal as _refusal
from trainscope.collectors.recording import write_output as _write
from trainscope.collectors.step_hook import default_socket_path
from trainscope.collectors.step_hook import private_dir
from trainscope.collectors.step_receiver import StepReceiver
from trainscope.collectors.step_receiver import child_environment
from trainscope.collectors.step_receiver import clean_stale
from trainscope.collectors.step_receiver import ensure_private_dir
from trainscope.collectors.step_receiver import make_run_folder as _make
from trainscope.reports.live import status_line
from trainscope.reports.live import status_line_dict

if TYPE_CHECKING:
    from trainscope.analyzers.live.engine import LiveStatus
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.verdict import Verdict
    from trainscope.api.capture import Capture
    from trainscope.api.capture import CaptureController
    from trainscope.api.capture import CaptureOptions
    from trainscope.collectors.recording import Recording
    from trainscope.traces.samples import Snapshot


@dataclass(frozen=True)
class LiveSample:
    """One interval of a live watch: the analyzer's status (verdict over the window) and the sample."""

    status: LiveStatus
    snapshot: Snapshot
    captures: tuple[
        Capture, ...
    ] = ()  # every on-demand capture so far (:class:`trainscope.api.capture.Capture`), as of this sample

    @property
    def verdict(self) -> Verdict:
        return self.status.verdict

    def line(self) -> str:
        return status_line(self.status, self.snapshot)

    def to_dict(self) -> dict[str, Any]:
        return status_line_dict(self.status, self.snapshot)


def live_analyzer(
    rules: Rules | None = None, window_s: float = 30.0, thresholds: Mapping[str, float] | None = None
) -> LiveAnalyzer:
    """The live analyzer ``watch`` feeds: ``add(snapshot) -> LiveStatus``; ``summary()``."""

    if not window_s > 0:
        raise BadInput("--window must be > 0")
    return LiveAnalyzer(resolve_rules(rules, thresholds), window_s=window_s)


def open_recording(path: str | os.PathLike[str]) -> Recording:
    """A ``watch --record`` recording or an nvidia-smi CSV log (``.snapshots``, ``.header``, ``.warnings``)."""

    path = os.fspath(path)
    with bad_input(path):
        return _open_recording(path)


class Watch:
    """Live snapshots of a job, GPU and host: iterate for :class:`LiveSample` per interval; use as a
    context manager so sampling stops on exit. ``summary()`` is the verdict over the whole watch.

    ``replay``: a recording (``watch --record``) or nvidia-smi CSV, replayed without waiting.
    Otherwise NVML and the host are sampled every ``interval`` s: the process tree of ``pid``
    (until it exits), or every GPU and its processes; ``duration`` ends it after that many seconds.
    ``record`` writes every sample to a crash-safe JSON-lines recording. Step timing: ``step_hook``
    listens for a job's opt-in DataLoader hook (``pid``), and a job launched by the caller gets the
    injected hook through :meth:`job_environment` then :meth:`follow` (what ``trainscope watch --
    COMMAND`` does).

    Two ways to consume it: pull (``for sample in w``, the samples queued by the sampler thread) or
    push (:meth:`start` with ``on_sample``, called on the sampler thread). :meth:`stop` takes a last
    sample of the partial interval, closes the samplers and returns what was not yet consumed;
    :meth:`finish` closes the recording and returns the verdict over the whole watch."""

    def __init__(
        self,
        *,
        pid: int | None = None,
        replay: str | os.PathLike[str] | None = None,
        interval: float = 1.0,
        window: float = 30.0,
        duration: float | None = None,
        rules: Rules | None = None,
        thresholds: Mapping[str, float] | None = None,
        record: str | os.PathLike[str] | None = None,
        step_hook: bool = False,
        capture: CaptureOptions | None = None,
    ) -> None:
        if pid is not None and replay is not None:
            raise BadInput("choose one of: pid, replay")
        if replay is not None and (record is not None or duration is not None):
            raise BadInput("a replay samples nothing new: record and duration do not apply")
        if interval < 0.25:
            raise BadInput("interval must be ≥ 0.25 s (faster sampling costs the job CPU)")
        if duration is not None and not duration > 0:
            raise BadInput("duration must be > 0")
        self.analyzer = live_analyzer(rules, window, thresholds)
        self.pid, self.interval, self.duration = pid, interval, duration
        self.record = os.fspath(record) if record is not None else None
        self.step_hook = step_hook
        self.recording = open_recording(replay) if replay is not None else None
        if pid is not None:
            import psutil

            if not psutil.pid_exists(pid):
                raise BadInput(f"no process with pid {pid}")
        self.lock = threading.Lock()
        self.last: LiveSample | None = None
        self.notes: list[str] = list(self.recording.warnings) if self.recording else []  # from the samples
        self.job_notes: list[str] = []  # from the samplers: step mode, NVML
        self.sampler_cost_s: list[float] = []
        self._job_done: Callable[[], bool] | None = None
        self._launched = False
        self._receiver: StepReceiver | None = None
        self._recorder: RecordingWriter | None = None
        self._monitor: Monitor | None = None
        self._gpu: NvmlSampler | None = None
        self._queue: Any = None  # a queue.Queue of Snapshot, once sampling starts
        self._on_sample: Callable[[LiveSample], None] | None = None
        self._gpu_pids: set[int] = set()
        self._deadline: float | None = None
        self._started = False
        self.capture_options = capture
        self.capture: CaptureController | None = None  # made once the step socket is open

    # -- feeding -------------------------------------------------------------------------------------

    def add(self, snap: Snapshot) -> LiveSample:
        """Feed one snapshot (from any sampler) to the analyzer and the recording."""
        with self.lock:
            status = self.analyzer.add(snap)
            captures: tuple[Capture, ...] = ()
            if self.capture is not None:
                self.capture.tick(snap.t, status, snap)
                notes = self.capture.drain_notes()
                if notes:  # the capture instants go into the sample, so --record keeps them
                    from dataclasses import replace

                    snap = replace(snap, notes=tuple(snap.notes) + tuple(notes))
                captures = self.capture.snapshot()
            s = LiveSample(status, snap, captures)
            self.last = s
            self.notes.extend(n for n in snap.notes if n not in self.notes)
            if self._recorder is not None:
                try:
                    self._recorder.write(snap)
                except OSError as e:
                    self.notes.append(f"recording stopped: {e.strerror or e}")
                    self._recorder = None
            return s

    def latest(self) -> tuple[LiveStatus | None, Snapshot | None]:
        """The last status and sample (what a metrics endpoint serves), read under the lock."""
        with self.lock:
            return (self.last.status, self.last.snapshot) if self.last else (None, None)

    def summary(self) -> LiveStatus:
        return self.analyzer.summary()

    # -- a job the caller launches ---------------------------------------------------------------------

    def job_environment(self, folder: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a job the caller is about to launch: with the DataLoader step hook
        injected (its socket and site folder inside ``folder``, a private directory the caller
        removes), or ``base`` unchanged with a note when the socket cannot be opened."""

        self._launched = True
        env = dict(os.environ if base is None else base)
        try:
            receiver = self._receiver = StepReceiver(os.path.join(folder, "steps.sock"))
            env, _ = child_environment(receiver.path, base=env, folder=folder)
        except OSError as e:
            self.job_notes.append(f"step mode off: cannot open the step socket ({e.strerror or e})")
        return env

    def follow(self, pid: int, done: Callable[[], bool] | None = None) -> None:
        """Watch the process tree of ``pid`` (a job the caller launched) until ``done()``."""
        self.pid, self._launched = pid, True
        self._job_done = done

    # -- sampling --------------------------------------------------------------------------------------

    def start(
        self, on_sample: Callable[[LiveSample], None] | None = None, header: Mapping[str, Any] | None = None
    ) -> None:
        """Open the recording (``header`` adds to its first line) and start the sampler thread;
        ``on_sample(sample)`` (push mode) is called on that thread for each interval. Raises
        :class:`BadInput` when the recording cannot be written."""
        if self.recording is not None or self._started:
            return

        self._started = True
        if self.pid is not None and not self._launched and self.step_hook:
            self._listen_for_hook(self.pid)
        if self.record is not None:
            head = {
                "started": time.time(),
                "interval_s": self.interval,
                "target": self.target,
                "command": None,
                "pid": self.pid,
                "host": os.uname().nodename,
                "trainscope": __import__("trainscope").__version__,
                **dict(header or {}),
            }
            try:
                self._recorder = RecordingWriter(self.record, head)
            except OSError as e:
                self.close()
                raise BadInput(f"cannot write {self.record}: {e.strerror or e}") from None
        import queue

        self._on_sample = on_sample
        self._queue = queue.Queue()
        self._start_capture()
        roots: Any = (self.pid,) if self.pid is not None else (lambda: tuple(sorted(self._gpu_pids)))

        def on_snapshot(snap: Snapshot) -> None:
            if self.pid is None:  # every GPU: follow whatever uses them
                self._gpu_pids.clear()
                self._gpu_pids.update(p.pid for g in snap.gpus for p in (g.processes or ()))
            if self._on_sample is not None:
                self._on_sample(self.add(snap))
            else:
                self._queue.put(snap)

        self._gpu = NvmlSampler()
        monitor = self._monitor = Monitor(
            self.interval,
            on_snapshot,
            gpu=self._gpu,
            host=HostSampler(roots, rank_pids=self._receiver.rank_pids if self._receiver is not None else None),
            steps=self._receiver,
        )
        monitor.start()
        self._deadline = time.monotonic() + self.duration if self.duration else None

    def _start_capture(self) -> None:
        if self.capture_options is None or self._receiver is None:
            return

        # Never a folder that is removed when the watch ends: the printed trace path must still
        # lead somewhere afterwards. Created (0700) at the first capture, and checked then.
        folder = self.capture_options.folder or os.path.abspath(DEFAULT_FOLDER)
        self.capture = CaptureController(self._receiver, folder, self.capture_options)

    def request_capture(self, trigger: str = "key") -> Capture | None:
        """Ask the job for a capture now (the dashboard's ``c``); None when captures are off."""
        if self.capture is None:
            return None

        st = self.last.status if self.last is not None else None
        return self.capture.request(trigger, self.last.snapshot.t if self.last else 0.0, _counters(st))

    def captures(self) -> tuple[Capture, ...]:
        return self.capture.snapshot() if self.capture is not None else ()

    def new_captures(self) -> list[Capture]:
        """Captures finished since the last call (refused, failed, or analyzed)."""
        return self.capture.newly_finished() if self.capture is not None else []

    def _listen_for_hook(self, pid: int) -> None:
        try:
            clean_stale()  # what killed watchers left: their sockets and owner files
            ensure_private_dir(private_dir())
            self._receiver = StepReceiver(default_socket_path(pid))
        except OSError as e:
            self.job_notes.append(
                f"step mode off: cannot listen for the opt-in hook ({e.strerror or e}: "
                f"{getattr(e, 'filename', None) or ''})"
            )

    @property
    def target(self) -> str:
        if self.recording is not None:
            return "replay"
        return f"pid {self.pid}" if self.pid is not None else "all GPUs"

    @property
    def expired(self) -> bool:
        """``duration`` has passed since sampling started."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def job_done(self) -> bool:
        """The watched job has ended (never, when every GPU is watched)."""
        if self._job_done is not None:
            return self._job_done()
        if self.pid is None:
            return False
        import psutil

        try:
            return bool(psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE)  # psutil is untyped
        except psutil.NoSuchProcess:
            return True

    def finished(self) -> bool:
        return self.job_done() or self.expired

    def __iter__(self) -> Iterator[LiveSample]:
        if self.recording is not None:
            for snap in self.recording.snapshots:
                yield self.add(snap)
            return
        import queue

        self.start()
        while True:
            try:
                yield self.add(self._queue.get(timeout=0.1))
            except queue.Empty:
                pass
            if self.finished():
                break
        yield from self.stop()

    def stop(self) -> list[LiveSample]:
        """Stop sampling after one last sample of the partial interval, close the step socket and
        NVML; return the samples taken but not yet consumed (pull mode). Idempotent."""
        if self._monitor is not None:
            self._monitor.stop(final_sample=True)
            self.sampler_cost_s = list(self._monitor.cost_s)
            self._monitor = None
        tail = []
        while self._queue is not None and not self._queue.empty():
            tail.append(self.add(self._queue.get_nowait()))
        if self.capture is not None:
            self.capture.finish()  # before the socket closes: the job's last replies are read
            self.capture.close()
        if self._receiver is not None:
            status = self._receiver.status()
            if status.mode != "on" and self._launched:
                self.job_notes.append(f"step mode was off: {status.detail}")
            self._receiver.close()
            if not self._launched:  # the per-user socket folder goes too, when no other watch uses it
                try:
                    os.rmdir(os.path.dirname(self._receiver.path))
                except OSError:
                    pass
            self._receiver = None
        if self._gpu is not None:
            if self._gpu.problem:
                self.job_notes.append(self._gpu.problem)
            self._gpu = None
        return tail

    @property
    def sampler_cpu_ms_per_sample(self) -> float | None:
        xs = self.sampler_cost_s
        return round(1000 * sum(xs) / len(xs), 3) if xs else None

    def finish(self, exit_code: int | None = None) -> LiveStatus:
        """Stop (if still sampling), close the recording with the job's exit code and the verdict,
        and return the verdict over the whole watch."""
        self.stop()
        st = self.summary()
        if self._recorder is not None:
            try:
                self._recorder.close({"exit_code": exit_code, "verdict": st.verdict.axis})
            except OSError:
                pass
            self._recorder = None
        return st

    def close(self) -> None:
        """Stop sampling and release the samplers (the recording stays open until :meth:`finish`)."""
        if self._monitor is not None:
            self._monitor.stop(final_sample=False)
            self._monitor = None
        if self._receiver is not None:
            self._receiver.close()
            self._receiver = None
        if self.capture is not None:
            self.capture.close()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._recorder is not None:
            self.finish()


def output_refusal(path: str) -> str | None:
    """Why ``watch`` refuses to write ``path`` (``--record``, ``--report``): a symbolic link it did not
    create, or another user's file (:func:`trainscope.collectors.recording.output_refusal`); None when it may."""

    return _refusal(path)


def write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole, never through a link nor over another user's file
    (:func:`trainscope.collectors.recording.write_output`); OSError when it cannot be done."""

    _write(path, data)


def make_run_folder() -> str:
    """A live watch's private folder in ``$TMPDIR`` (0700, with ``watch.owner``), after removing
    what killed watchers left (:func:`trainscope.collectors.step_receiver.make_run_folder`)."""

    return _make()


# ``with watch(pid=…) as w: for s in w: print(s.line())``: the api's name for :class:`Watch`, whose
# keywords it takes (``capture``, a :class:`trainscope.api.capture.CaptureOptions`, turns
# on-demand kernel-level captures on).
watch = Watch
