"""``trainscope watch``: live diagnosis beside a running training job."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from collections.abc import Iterable
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol

from trainscope import api
from trainscope.api.capture import CaptureOptions
from trainscope.api.capture import capture_folder_problem
from trainscope.api.capture import open_capture_folder
from trainscope.api.errors import EXIT_BAD_INPUT
from trainscope.api.errors import EXIT_OK
from trainscope.api.live import make_run_folder
from trainscope.api.live import output_refusal
from trainscope.api.live import write_output
from trainscope.argtypes import number
from trainscope.argtypes import whole
from trainscope.commands.runs import add_save_args
from trainscope.commands.runs import save_recording
from trainscope.commands.runs import watch_save_problem
from trainscope.commands.watch_output import JobOutput
from trainscope.commands.watch_output import write_line
from trainscope.common import add_threshold_arg
from trainscope.common import fail
from trainscope.common import one_line_errors
from trainscope.common import output_problem
from trainscope.common import same_file
from trainscope.common import terminal_app
from trainscope.reports import formats
from trainscope.reports.live import SCHEMA
from trainscope.reports.live import status_line
from trainscope.reports.live import status_line_dict
from trainscope.reports.live import summary_dict
from trainscope.reports.live import summary_text
from trainscope.reports.output import to_json_line
from trainscope.reports.prometheus import render_prometheus
from trainscope.reports.renderers import WatchSummary
from trainscope.traces.safe_text import visible
from trainscope.traces.safe_text import visible_lines

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from trainscope.api.capture import Capture
    from trainscope.api.live import LiveSample
    from trainscope.api.live import Watch


class _Dashboard(Protocol):
    """What a live watch drives of its terminal app (tui/watch_app.py)."""

    quit_code: int | None  # 130: the job was stopped from the dashboard
    detached: bool  # q left the job running

    def feed(self, sample: LiveSample) -> None: ...
    def run(self) -> object: ...
    def exit(self) -> None: ...
    def call_from_thread(self, callback: Callable[[], object]) -> object: ...


MIN_INTERVAL = 0.25


_interval = number(
    float, lambda v: not v < MIN_INTERVAL, f"must be ≥ {MIN_INTERVAL} s (faster sampling costs the job CPU)"
)
_port = number(int, lambda v: 0 <= v <= 65535, "must be 0–65535", "a port number")


def register(a: argparse.ArgumentParser) -> None:
    """The arguments of ``trainscope watch`` on its parser (named, with its help line, by trainscope/cli.py's table)."""
    a.description = (
        "Watch a training job live and tell whether the GPU is starved by the input pipeline, held "
        "up by memory, or busy computing — and what to change — without restarting it under a "
        "profiler. `watch -- COMMAND` launches the job and also measures, step by step, how long the "
        "training loop waits on its DataLoader (no code change). `--pid` attaches to a running job; "
        "with neither, every GPU and the processes using it are watched."
    )
    a.epilog = (
        "examples:\n"
        "  trainscope watch -- python train.py --epochs 3        # dashboard, step-exact timing\n"
        "  trainscope watch --headless -- python train.py        # one line per interval (ssh, logs)\n"
        "  trainscope watch --headless --format json -- torchrun --nproc-per-node 8 train.py > live.jsonl\n"
        "  trainscope watch --pid 4242 --record run.jsonl        # attach; crash-safe recording\n"
        "  trainscope watch --replay run.jsonl --headless        # replay a recording (or an nvidia-smi CSV)\n"
        "  trainscope analyze run.jsonl                           # a recording analyzes like a trace\n"
        "  trainscope watch --prometheus-port 9400 -- python train.py\n\n"
        "with --format json the job's own stdout goes to stderr, so stdout holds only JSON lines.\n"
        "exit codes: the job's exit code when watch launched it (0 when --duration ended it); otherwise 0;\n"
        "2 bad usage or input; 130 interrupted (Ctrl-C, or y at the dashboard's stop prompt)"
    )
    a.formatter_class = argparse.RawDescriptionHelpFormatter
    a.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND …",
        help="launch this job as a child and watch its process tree",
    )
    a.add_argument("--pid", type=int, help="attach to a running job (its process tree)")
    a.add_argument("--replay", metavar="FILE", help="replay a recording (watch --record) or nvidia-smi CSV log")
    a.add_argument(
        "--interval",
        type=_interval,
        default=1.0,
        metavar="S",
        help="sampling interval in seconds (default 1, minimum 0.25)",
    )
    a.add_argument(
        "--window",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds of history the live verdict looks at (default 30)",
    )
    a.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop watching after S seconds; a job watch launched is then stopped as Ctrl-C would stop it "
        "(SIGINT to its whole process group, then SIGTERM and SIGKILL 10 s apart) and watch exits 0 when it "
        "ended on that signal, else with the job's own exit code; a job attached with --pid runs on",
    )
    a.add_argument("--headless", action="store_true", help="no dashboard: one line per interval on stdout")
    a.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="headless output: text lines, or JSON lines (same vocabulary as analyze --format json)",
    )
    a.add_argument("--record", metavar="FILE", help="record every sample to FILE (JSON lines, crash-safe)")
    a.add_argument(
        "--report",
        metavar="FILE.md",
        help="write the report when the watch ends, in the format its name says: " + formats.suffix_help("watch"),
    )
    a.add_argument(
        "--prometheus-port", type=_port, metavar="N", help="expose metrics and verdict for Prometheus on port N"
    )
    a.add_argument(
        "--prometheus-host",
        default="127.0.0.1",
        metavar="ADDR",
        help="address the Prometheus endpoint binds to (default 127.0.0.1; 0.0.0.0 for all)",
    )
    a.add_argument("--no-step-hook", action="store_true", help="do not inject the DataLoader timing hook into the job")
    c = a.add_argument_group(
        "on-demand capture",
        "a torch.profiler trace of the job's next N iterations, taken through the step hook "
        "(watch -- COMMAND, or --pid with the opt-in hook) and diagnosed as `trainscope analyze` would; also the "
        "dashboard's c key. At most one at a time; the overhead on step time is measured and printed with each.",
    )
    c.add_argument(
        "--capture-steps", type=whole(1, 10_000), default=5, metavar="N", help="iterations per capture (default 5)"
    )
    c.add_argument("--capture-at", type=float, metavar="S", help="one capture S seconds into the watch")
    c.add_argument(
        "--capture-on",
        action="append",
        default=[],
        choices=("verdict-change", "slowdown"),
        help="capture when the live verdict changes, or when the step time rises above 1.5 × its "
        "running median (repeatable)",
    )
    c.add_argument(
        "--capture-max", type=whole(1, 1000), default=3, metavar="N", help="at most N captures per watch (default 3)"
    )
    c.add_argument(
        "--capture-dir",
        metavar="DIR",
        help="keep the traces in DIR (default: captures/ beside --record; else trainscope-captures/ in the "
        "working directory); created 0700, and refused when it is a link, another user's, or writable by "
        "group or others",
    )
    c.add_argument(
        "--capture-ranks",
        choices=("all", "lowest"),
        default="all",
        help="in a job of several ranks, capture every rank (a trace each, analyzed as a rank set: "
        "stragglers, collective arrivals) or only the lowest (default: all)",
    )
    c.add_argument("--capture-stack", action="store_true", help="record Python stacks in captures (slower)")
    c.add_argument("--capture-memory", action="store_true", help="record memory allocations in captures (slower)")
    c.add_argument(
        "--capture-shapes",
        action="store_true",
        help="record operators' input shapes in captures: the top kernels' FLOP/s and %% of roof (slower)",
    )
    add_threshold_arg(a, "override a diagnostic threshold (see `trainscope thresholds`)")

    add_save_args(a)
    a.set_defaults(run=run)


class _Stop(Exception):
    pass


_ENDED_BY_OUR_SIGNAL = {
    -signal.SIGINT,
    -signal.SIGTERM,
    -signal.SIGKILL,
    128 + signal.SIGINT,
    128 + signal.SIGTERM,
    128 + signal.SIGKILL,
}
GRACE_S = 10.0  # how long a launched job gets after each signal before the next, harder one


# Python's multiprocessing (and so a DataLoader with workers sharing tensors through file
# descriptors) binds Unix sockets at $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX: 32 characters past the
# temporary folder, inside the 107 a socket address holds on Linux (sun_path, 108 bytes with its NUL).
SOCKET_PATH_MAX = 107
MULTIPROCESSING_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def socket_folder_problem(env: dict[str, str]) -> str | None:
    """Why the job's temporary folder is too long for the Unix sockets of Python's multiprocessing,
    or None. There a worker's batch is dropped ("OSError: AF_UNIX path too long" in the job's
    output) and the training loop waits for it for ever: the job hangs, with or without watch."""
    tmp = next((env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k)), "/tmp")
    if len(os.fsencode(tmp)) + MULTIPROCESSING_SUFFIX <= SOCKET_PATH_MAX:
        return None
    return (
        f"the job's TMPDIR is {len(os.fsencode(tmp))} bytes long: a DataLoader with workers cannot pass "
        f"batches through Python's multiprocessing sockets under it (a socket path holds {SOCKET_PATH_MAX} "
        f"bytes; 'AF_UNIX path too long') and the job may hang — give it a TMPDIR of at most "
        f"{SOCKET_PATH_MAX - MULTIPROCESSING_SUFFIX} bytes"
    )


class _Job(subprocess.Popen[bytes]):
    """A job :func:`_launch` started in a session of its own: it leads its own process group."""

    pgid: int


def _launch(cmd: list[str], env: dict[str, str], stdout: int, stderr: int | None = None) -> subprocess.Popen[bytes]:
    """Start the job in a session (and process group) of its own, so that stopping it stops every
    process it started (:func:`_stop_job` signals the group), with a working SIGINT, as a shell
    starts a foreground command. A watcher that was itself started with SIGINT ignored (a
    background command of a non-interactive shell, nohup under ``&``, some CI runners) would
    otherwise pass the ignore on through exec: the job could not be stopped gracefully and
    ``--duration`` would end it with SIGTERM. exec resets a *caught* signal to its default, so
    SIGINT is caught here for the moment of the launch. The terminal's Ctrl-C reaches the watch,
    which passes it on to the job's group."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        child = _Job(cmd, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    child.pgid = child.pid  # a new session: its own group
    return child


def _group(child: subprocess.Popen[bytes]) -> int | None:
    """The job's own process group (its pid, as :func:`_launch` made it), or None when the child
    does not lead one (then only the child itself is ever signalled: never the watch's own group)."""
    if isinstance(child, _Job):
        return child.pgid
    try:
        return child.pid if os.getpgid(child.pid) == child.pid else None
    except OSError:
        return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: a member this user may not signal (it changed its uid); still there


def _stop_job(child: subprocess.Popen[bytes] | None, sig: int, why: str | None = None) -> None:
    """Ask a launched job to stop as Ctrl-C or kill would (``sig``), then escalate: SIGTERM, then
    SIGKILL, each after GRACE_S. Every signal goes to the job's whole process group (children it
    forked included) and the next one follows while any of them still runs. With ``why``, each
    step is said on stderr."""
    if child is None:
        return
    pgid = _group(child)
    if child.poll() is not None and (pgid is None or not _group_alive(pgid)):
        return
    steps = [sig] + [s for s in (signal.SIGTERM, signal.SIGKILL) if s != sig]
    for i, s in enumerate(steps):
        if i:  # escalation is always said: the job did not stop when asked
            sys.stderr.write(
                f"trainscope: the job is still running {GRACE_S:g} s after "
                f"{signal.Signals(steps[i - 1]).name}: sending {signal.Signals(s).name}\n"
            )
        elif why:
            sys.stderr.write(f"trainscope: {why}: sending {signal.Signals(s).name} to the job\n")
        sys.stderr.flush()
        try:
            if pgid is not None:
                os.killpg(pgid, s)
            else:
                child.send_signal(s)
        except ProcessLookupError:
            return
        except OSError:
            if pgid is None:
                return
        end = time.monotonic() + GRACE_S
        try:
            child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        while pgid is not None and _group_alive(pgid) and time.monotonic() < end:
            time.sleep(0.05)  # the leader is gone; the processes it forked are given the same grace
        if pgid is None or not _group_alive(pgid):
            return


@one_line_errors
def run(args: argparse.Namespace) -> int:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    modes = sum(bool(x) for x in (cmd, args.pid is not None, args.replay))
    if modes > 1:
        return fail("choose one of: -- COMMAND, --pid PID, --replay FILE")

    save_problem = watch_save_problem(args)
    if save_problem:
        return fail(save_problem)
    if args.replay:
        clash = [
            flag
            for flag, given in (
                ("--record", args.record),
                ("--duration", args.duration is not None),
                ("--prometheus-port", args.prometheus_port is not None),
                ("--no-step-hook", args.no_step_hook),
            )
            if given
        ]
        if clash:
            return fail(f"{', '.join(clash)} cannot be used with --replay (a replay samples nothing new)")
    if args.duration is not None and not args.duration > 0:
        return fail("--duration must be > 0")
    if not args.window > 0:
        return fail("--window must be > 0")
    if args.capture_at is not None and not 0 <= args.capture_at < float("inf"):  # nan and inf too
        return fail("--capture-at must be a number of seconds ≥ 0")
    asked = args.capture_at is not None or args.capture_on or args.capture_dir
    if asked and (args.replay or args.no_step_hook):
        return fail("--capture-* needs the step hook of a live job (watch -- COMMAND, or --pid with the opt-in hook)")
    capture_folder = None
    if not args.replay and not args.no_step_hook:
        capture_folder = args.capture_dir or (
            os.path.join(os.path.dirname(os.path.abspath(args.record)), "captures") if args.record else None
        )
    if capture_folder:  # before any job starts: a folder another user controls is refused
        flag = "--capture-dir" if args.capture_dir else "--record's captures folder"
        problem = capture_folder_problem(capture_folder)
        if problem:
            return fail(
                f"{flag} {capture_folder}: {problem}: refused (captures go only into a folder of yours that "
                "nobody else can write into: `chmod go-w` it, or name another)"
            )
        if args.capture_dir:
            try:
                os.close(open_capture_folder(capture_folder))
            except OSError as e:
                return fail(f"--capture-dir {capture_folder}: {e.strerror or e}")

    for flag, path in (("--record", args.record), ("--report", args.report)):
        problem = (output_refusal(path) or output_problem(path)) if path else None
        if problem:  # before any job starts: a typo must not cost a training run
            return fail(f"{flag} {path}: {problem}")
        if path and args.replay and same_file(path, args.replay):
            return fail(f"{flag} {path}: is the recording replayed: writing the report there would overwrite it")
    if args.format == "json" and not args.headless:
        args.headless = True  # JSON lines only make sense without the dashboard
    if not args.headless and not sys.stdout.isatty():
        args.headless = True  # no terminal to draw on (a pipe, a log): fall back to lines
    # BadInput (one line, exit 2): an unknown threshold, a pid that does not exist, an unreadable replay
    capture = None
    if not args.replay and not args.no_step_hook:
        capture = CaptureOptions(
            steps=args.capture_steps,
            at_s=args.capture_at,
            on=tuple(args.capture_on),
            max_captures=args.capture_max,
            folder=capture_folder,
            stack=args.capture_stack,
            memory=args.capture_memory,
            shapes=args.capture_shapes,
            ranks=args.capture_ranks,
        )
    w = api.watch(
        pid=args.pid,
        replay=args.replay,
        interval=args.interval,
        window=args.window,
        duration=args.duration,
        thresholds=dict(args.threshold),
        record=args.record,
        step_hook=not args.no_step_hook,
        capture=capture,
    )
    if args.replay:
        return _replay(args, w)
    return _live(args, cmd, w)


def _printer(args: argparse.Namespace) -> Callable[[LiveSample], None]:
    """Headless output: one line per :class:`trainscope.api.LiveSample`."""

    seen: set[str] = set()

    def emit(sample: LiveSample) -> None:
        st, snap = sample.status, sample.snapshot
        if args.format == "json":
            line = to_json_line(status_line_dict(st, snap))
        else:
            for n in snap.notes:
                if n not in seen:
                    seen.add(n)
                    write_line(sys.stderr, f"trainscope: note: {visible(n)}\n")
            line = visible(status_line(st, snap))
        write_line(sys.stdout, line + "\n")

    return emit


def _print_captures(args: argparse.Namespace, captures: Iterable[Capture]) -> None:
    """Headless: each finished capture's verdict line, trace path and measured overhead."""

    for c in captures:
        if args.format == "json":
            write_line(sys.stdout, to_json_line({"schema": SCHEMA, **c.to_dict()}) + "\n")
        else:
            text = visible(f"trainscope: {c.line()}") + "\n"
            if c.status == "done":
                text += visible(f"trainscope: capture {c.id} {c.overhead_text()}") + "\n"
                text += "".join(visible(f"trainscope: capture {c.id} {r}") + "\n" for r in c.ranks)
            write_line(sys.stdout, text)


def _finish(args: argparse.Namespace, w: Watch, info: dict[str, Any]) -> int:
    """The end of a watch: the recording closed, ``--report`` written, the summary printed."""

    st = w.finish(info.get("exit_code"))
    info = {**info, "notes": list(dict.fromkeys(info.get("notes", []) + w.notes))}
    if w.captures():
        info["captures"] = [c.to_dict() for c in w.captures()]
    code = EXIT_OK
    if args.report:  # in the format its name says (reports/formats.py), Markdown by default
        try:
            _write_report(args.report, WatchSummary(st, info).output())
        except OSError as e:
            sys.stderr.write(f"trainscope: cannot write {args.report}: {e.strerror or e}\n")
            code = EXIT_BAD_INPUT
    try:
        if args.headless and args.format == "json":
            sys.stdout.write(to_json_line(summary_dict(st, info)) + "\n")
        else:
            sys.stdout.write("\n" + visible_lines(summary_text(st, info)))
        sys.stdout.flush()
    except BrokenPipeError:
        pass

    return save_recording(args) or code


def _write_report(path: str, out: formats.Output) -> None:
    """``--report FILE`` in the format its name says (reports/formats.py; Markdown under a suffix no
    format claims, said on stderr), written whole and never through a link the watch did not
    create nor over another user's file (collectors/recording.write_output)."""

    w, named = formats.for_path(path, out.document)
    if not named:
        sys.stderr.write(
            f"trainscope: {visible(path)}: written as {w.label} (--report writes {formats.suffix_help(out.document)})\n"
        )
    data = formats.render(w, out)
    write_output(path, data if isinstance(data, bytes) else data.encode("utf-8", errors="backslashreplace"))


def _replay(args: argparse.Namespace, w: Watch) -> int:
    info: dict[str, Any] = {"target": f"replay of {os.path.basename(args.replay)}", "notes": []}
    if args.headless:
        emit = _printer(args)
        for sample in w:
            emit(sample)
        return _finish(args, w, info)

    recording = w.recording
    assert recording is not None  # a replay's watch reads its recording
    app = terminal_app("watch")(
        title=info["target"], replay=True, interval=float(recording.header.get("interval_s") or 1.0)
    )
    app.preload(w)
    app.run()
    return _finish(args, w, info)


def _live(args: argparse.Namespace, cmd: list[str], w: Watch) -> int:
    """A live watch, in a private temporary folder (the hook's socket, the injected site folder)
    that is removed however the watch ends — the job crashing, Ctrl-C, SIGTERM or SIGHUP, an
    error. A watch killed with -9 leaves it behind: its ``watch.owner`` names a dead process, so
    the hook stays out of any process the job starts afterwards and the next watch removes it."""
    import shutil
    import tempfile

    server = None
    if args.prometheus_port is not None:  # before the job starts: a busy port must not cost a run
        try:
            server = _serve_prometheus(args.prometheus_host, args.prometheus_port, w)
        except OSError as e:
            return fail(
                f"cannot serve Prometheus metrics on {args.prometheus_host}:{args.prometheus_port}: {e.strerror or e}"
            )

    try:  # in $TMPDIR, 0700, with a watch.owner file; what dead watchers left is removed first
        run_dir = make_run_folder()
    except OSError as e:
        if server is not None:
            server.shutdown()
            server.server_close()
        return fail(f"cannot create the watch's private folder in {tempfile.gettempdir()}: {e.strerror or e}")
    try:
        return _run_watch(args, cmd, run_dir, w, server)
    finally:
        out = getattr(args, "_job_output", None)
        if out is not None:
            out.close()  # the watch's own last lines go out through the relay, then it ends with the job's
        w.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        if server is not None:
            server.shutdown()
            server.server_close()


def _run_watch(
    args: argparse.Namespace, cmd: list[str], run_dir: str, w: Watch, server: ThreadingHTTPServer | None
) -> int:
    """Launch (or attach to) the job, consume the api's live samples, guard the job on the way out."""

    notes: list[str] = []
    child: subprocess.Popen[bytes] | None = None
    output: JobOutput | None = None
    by_duration = False  # --duration ended the launched job
    if server is not None:
        notes.append(f"Prometheus metrics on http://{args.prometheus_host}:{server.server_address[1]}/metrics")
        sys.stderr.write(f"trainscope: {notes[-1]}\n")
    if cmd:
        target = " ".join(cmd)
        env = w.job_environment(run_dir) if not args.no_step_hook else dict(os.environ)
        problem = socket_folder_problem(env)
        if problem:
            notes.append(problem)
            sys.stderr.write(f"trainscope: {problem}\n")
        # The job's output: relayed whole and in order, surviving the watcher (see watch_output.JobOutput).
        output = JobOutput(args.headless, args.format == "json")
        try:
            child = _launch(cmd, env, stdout=output.child_fds[0], stderr=output.child_fds[1])
        except OSError as e:
            output.abandon()
            return fail(f"cannot start {cmd[0]}: {e.strerror or e}")
        output.launched()
        args._job_output = output  # closed by _live however the watch ends
        job = child
        w.follow(job.pid, done=lambda: job.poll() is not None)
    else:
        target = f"pid {args.pid}" if args.pid is not None else "all GPUs"

    headless = args.headless
    emit = _printer(args) if headless else None
    app: _Dashboard | None = None
    if not headless:
        app = terminal_app("watch")(
            title=target,
            interval=args.interval,
            launched=bool(cmd),
            on_capture=(lambda: w.request_capture("key")) if w.capture_options is not None else None,
            output=output.kept.since if output is not None and output.kept is not None else None,
        )

    # SIGTERM (and SIGHUP: the terminal closed, tmux kill-server) ends the watch like Ctrl-C:
    # report, recording end marker, the run folder removed; a launched job gets the same signal.
    def on_term(signum: int, frame: types.FrameType | None) -> None:
        raise _Stop(signum)

    old_term = signal.signal(signal.SIGTERM, on_term)
    old_hup = signal.signal(signal.SIGHUP, on_term) if hasattr(signal, "SIGHUP") else None
    interrupted = False
    detached = False  # q in the dashboard left the job running
    exit_code = None
    try:
        try:
            w.start(on_sample=None if app is None else app.feed, header={"target": target, "command": cmd or None})
        except api.BadInput as e:  # the recording: checked before the job started; a race or a full disk
            _stop_job(child, signal.SIGINT, "cannot record")
            return fail(str(e))
        if emit is not None:  # headless
            for sample in w:
                emit(sample)
                _print_captures(args, w.new_captures())
        elif app is not None:
            dashboard = app

            def waiter() -> None:
                while not w.finished():
                    time.sleep(0.2)
                dashboard.call_from_thread(dashboard.exit)

            threading.Thread(target=waiter, daemon=True).start()
            app.run()
            interrupted = app.quit_code == 130
            detached = app.detached and not w.job_done()
            if interrupted:  # q / Ctrl-C in the dashboard is a keypress: the job never saw a SIGINT
                _stop_job(child, signal.SIGINT)
    except (KeyboardInterrupt, _Stop) as e:
        interrupted = True
        _stop_job(child, (e.args[0] if e.args else signal.SIGTERM) if isinstance(e, _Stop) else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        if old_hup is not None:
            signal.signal(signal.SIGHUP, old_hup)
        for sample in w.stop():  # the last partial interval, and what the loop had not printed
            if emit is not None:
                emit(sample)
        if headless:
            _print_captures(args, w.new_captures())
    notes.extend(w.job_notes)
    if output is not None and output.kept is not None:  # the dashboard is gone: the job's output to the scrollback
        output.drain(timeout=5.0 if child is not None and child.poll() is not None else 0.0)
    if child is not None and detached:
        notes.append(f"detached: the job (pid {child.pid}) runs on")
    elif child is not None:
        if child.poll() is None and w.expired:
            _stop_job(child, signal.SIGINT, f"--duration {args.duration:g} s reached")
            by_duration = True
        try:
            exit_code = child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            _stop_job(child, signal.SIGTERM, "the job did not end")
            exit_code = child.wait()
        if by_duration or interrupted:  # the job's leader ended: what it forked goes with it
            _stop_job(child, signal.SIGTERM, "processes the job started still run")
        if output is not None and output.kept is not None:
            output.drain()  # the job's last lines before the summary
    code = _finish(
        args,
        w,
        {
            "target": target,
            "exit_code": exit_code,
            "notes": notes,
            "sampler_cpu_ms_per_sample": w.sampler_cpu_ms_per_sample,
        },
    )
    if interrupted:
        return 130
    if code != EXIT_OK:
        return code
    if exit_code is None:
        return EXIT_OK
    if by_duration and exit_code in _ENDED_BY_OUR_SIGNAL:
        return EXIT_OK  # the job ended as --duration asked
    return exit_code if exit_code >= 0 else 128 - exit_code  # killed by signal N: 128 + N, as shells report


def _serve_prometheus(host: str, port: int, w: Watch) -> ThreadingHTTPServer:
    """Serve ``w.latest()`` (a :class:`trainscope.api.Watch`) in Prometheus' text format."""
    from http.server import BaseHTTPRequestHandler
    from http.server import ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            st, snap = w.latest()
            body = render_prometheus(st, snap).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # keep the terminal for the job
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="trainscope-prometheus", daemon=True).start()
    return server
