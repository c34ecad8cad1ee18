"""``trainscope watch``: live diagnosis beside a running training job."""
from __future__ import annotations

import argparse
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from trainscope.common import EXIT_BAD_INPUT, EXIT_OK, fail, one_line_errors, threshold_arg, to_json_line, write_atomic

MIN_INTERVAL = 0.25


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v < MIN_INTERVAL:
        raise argparse.ArgumentTypeError(f"must be ≥ {MIN_INTERVAL} s (faster sampling costs the job CPU)")
    return v


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError("must be 0–65535")
    return v


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser(
        "watch", help="live diagnosis beside a running training job",
        description="Watch a training job live and tell whether the GPU is starved by the input pipeline, held "
                    "up by memory, or busy computing — and what to change — without restarting it under a "
                    "profiler. `watch -- COMMAND` launches the job and also measures, step by step, how long the "
                    "training loop waits on its DataLoader (no code change). `--pid` attaches to a running job; "
                    "with neither, every GPU and the processes using it are watched.",
        epilog="examples:\n"
               "  trainscope watch -- python train.py --epochs 3        # dashboard, step-exact timing\n"
               "  trainscope watch --headless -- python train.py        # one line per interval (ssh, logs)\n"
               "  trainscope watch --headless --format json -- torchrun --nproc-per-node 8 train.py > live.jsonl\n"
               "  trainscope watch --pid 4242 --record run.jsonl        # attach; crash-safe recording\n"
               "  trainscope watch --replay run.jsonl --headless        # replay a recording (or an nvidia-smi CSV)\n"
               "  trainscope analyze run.jsonl                           # a recording analyzes like a trace\n"
               "  trainscope watch --prometheus-port 9400 -- python train.py\n\n"
               "with --format json the job's own stdout goes to stderr, so stdout holds only JSON lines.\n"
               "exit codes: the job's exit code when watch launched it; otherwise 0; 2 bad usage or input;\n"
               "130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    a.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND …",
                   help="launch this job as a child and watch its process tree")
    a.add_argument("--pid", type=int, help="attach to a running job (its process tree)")
    a.add_argument("--replay", metavar="FILE", help="replay a recording (watch --record) or nvidia-smi CSV log")
    a.add_argument("--interval", type=_interval, default=1.0, metavar="S",
                   help="sampling interval in seconds (default 1, minimum 0.25)")
    a.add_argument("--window", type=float, default=30.0, metavar="S",
                   help="seconds of history the live verdict looks at (default 30)")
    a.add_argument("--duration", type=float, metavar="S", help="stop watching after S seconds")
    a.add_argument("--headless", action="store_true", help="no dashboard: one line per interval on stdout")
    a.add_argument("--format", choices=("text", "json"), default="text",
                   help="headless output: text lines, or JSON lines (same vocabulary as analyze --format json)")
    a.add_argument("--record", metavar="FILE", help="record every sample to FILE (JSON lines, crash-safe)")
    a.add_argument("--report", metavar="FILE.md", help="write a Markdown report when the watch ends")
    a.add_argument("--prometheus-port", type=_port, metavar="N", help="expose metrics and verdict for Prometheus on port N")
    a.add_argument("--prometheus-host", default="127.0.0.1", metavar="ADDR",
                   help="address the Prometheus endpoint binds to (default 127.0.0.1; 0.0.0.0 for all)")
    a.add_argument("--no-step-hook", action="store_true", help="do not inject the DataLoader timing hook into the job")
    a.add_argument("--threshold", type=threshold_arg, action="append", default=[], metavar="NAME=VALUE",
                   help="override a diagnostic threshold (see `trainscope thresholds`)")
    a.set_defaults(run=run)


@dataclass
class WatchSession:
    """What every interval goes through: the analyzer, the recorder, the exporter, the output."""

    analyzer: Any
    emit: Callable[[Any, Any], None] | None = None
    recorder: Any = None
    exporter: Any = None
    notes: list[str] = field(default_factory=list)
    last: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ingest(self, snap) -> Any:
        with self.lock:
            st = self.analyzer.add(snap)
            self.last = (st, snap)
            self.notes.extend(n for n in snap.notes if n not in self.notes)
            if self.recorder is not None:
                try:
                    self.recorder.write(snap)
                except OSError as e:
                    self.notes.append(f"recording stopped: {e.strerror or e}")
                    self.recorder = None
            if self.emit is not None:
                self.emit(st, snap)
            return st


class _Stop(Exception):
    pass


GRACE_S = 10.0  # how long a launched job gets after each signal before the next, harder one


def _stop_job(child: subprocess.Popen | None, sig: int, why: str | None = None) -> None:
    """Ask a launched job to stop as Ctrl-C or kill would (``sig``), then escalate: SIGTERM, then
    SIGKILL, each after GRACE_S. With ``why``, each step is said on stderr."""
    if child is None or child.poll() is not None:
        return
    steps = [sig] + [s for s in (signal.SIGTERM, signal.SIGKILL) if s != sig]
    for i, s in enumerate(steps):
        if i:  # escalation is always said: the job did not stop when asked
            sys.stderr.write(f"trainscope: the job is still running {GRACE_S:g} s after "
                             f"{signal.Signals(steps[i - 1]).name}: sending {signal.Signals(s).name}\n")
        elif why:
            sys.stderr.write(f"trainscope: {why}: sending {signal.Signals(s).name} to the job\n")
        sys.stderr.flush()
        try:
            child.send_signal(s)
            child.wait(timeout=GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
        except OSError:
            return


@one_line_errors
def run(args: argparse.Namespace) -> int:
    from trainscope import api
    from trainscope.analyzers.rules import Rules

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    modes = sum(bool(x) for x in (cmd, args.pid is not None, args.replay))
    if modes > 1:
        return fail("choose one of: -- COMMAND, --pid PID, --replay FILE")
    if args.replay:
        clash = [flag for flag, given in (("--record", args.record), ("--duration", args.duration is not None),
                                          ("--prometheus-port", args.prometheus_port is not None),
                                          ("--no-step-hook", args.no_step_hook)) if given]
        if clash:
            return fail(f"{', '.join(clash)} cannot be used with --replay (a replay samples nothing new)")
    if args.duration is not None and not args.duration > 0:
        return fail("--duration must be > 0")
    for flag, path in (("--record", args.record), ("--report", args.report)):
        problem = _output_problem(path) if path else None
        if problem:  # before any job starts: a typo must not cost a training run
            return fail(f"{flag} {path}: {problem}")
    if args.format == "json" and not args.headless:
        args.headless = True  # JSON lines only make sense without the dashboard
    if not args.headless and not sys.stdout.isatty():
        args.headless = True  # no terminal to draw on (a pipe, a log): fall back to lines
    analyzer = api.live_analyzer(Rules(dict(args.threshold)), window_s=args.window)  # BadInput: --window ≤ 0
    if args.replay:
        return _replay(args, analyzer)
    if args.pid is not None:
        import psutil

        if not psutil.pid_exists(args.pid):
            return fail(f"no process with pid {args.pid}")
    return _live(args, cmd, analyzer)


def _output_problem(path: str) -> str | None:
    """Why ``path`` cannot be written, or None; checked without creating anything."""
    import stat as st_

    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        folder = os.path.dirname(target) or "."
        if not os.path.isdir(folder):
            return "its folder does not exist"
        return None if os.access(folder, os.W_OK | os.X_OK) else "its folder is not writable"
    except OSError as e:
        return e.strerror or str(e)
    if st_.S_ISDIR(st.st_mode):
        return "is a directory"
    return None if os.access(target, os.W_OK) else "not writable"


def _printer(args) -> Callable[[Any, Any], None]:
    from trainscope.reports.live import status_line, status_line_dict
    from trainscope.reports.safe_text import visible

    seen: set[str] = set()

    def emit(st, snap) -> None:
        if args.format == "json":
            line = to_json_line(status_line_dict(st, snap))
        else:
            for n in snap.notes:
                if n not in seen:
                    seen.add(n)
                    sys.stderr.write(f"trainscope: note: {visible(n)}\n")
            line = visible(status_line(st, snap))
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return emit


def _finish(args, session: WatchSession, info: dict[str, Any]) -> int:
    from trainscope.reports.live import summary_dict, summary_markdown, summary_text
    from trainscope.reports.safe_text import visible_lines

    st = session.analyzer.summary()
    info = {**info, "notes": list(dict.fromkeys(info.get("notes", []) + session.notes))}
    if session.recorder is not None:
        try:
            session.recorder.close({"exit_code": info.get("exit_code"), "verdict": st.verdict.axis})
        except OSError:
            pass
    code = EXIT_OK
    if args.report:
        try:
            write_atomic(args.report, visible_lines(summary_markdown(st, info)))
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
    return code


def _replay(args, analyzer) -> int:
    from trainscope import api

    rec = api.open_recording(args.replay)  # BadInput: one line, exit 2
    info = {"target": f"replay of {os.path.basename(args.replay)}", "notes": list(rec.warnings)}
    if args.headless:
        session = WatchSession(analyzer, emit=_printer(args))
        for snap in rec.snapshots:
            session.ingest(snap)
        return _finish(args, session, info)
    from trainscope.tui.watch_app import WatchApp

    session = WatchSession(analyzer)
    app = WatchApp(title=info["target"], replay=True, interval=float(rec.header.get("interval_s") or 1.0))
    app.preload([(session.ingest(s), s) for s in rec.snapshots])
    app.run()
    return _finish(args, session, info)


def _live(args, cmd: list[str], analyzer) -> int:
    """A live watch, in a private temporary folder (the hook's socket, the injected site folder)
    that is removed however the watch ends — the job crashing, Ctrl-C, an error."""
    import shutil
    import tempfile

    run_dir = tempfile.mkdtemp(prefix="trainscope-watch-")
    try:
        return _live_in(args, cmd, analyzer, run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _live_in(args, cmd: list[str], analyzer, run_dir: str) -> int:
    from trainscope.collectors.nvml import NvmlSampler

    gpu = NvmlSampler()
    notes: list[str] = []
    q: queue.Queue = queue.Queue()
    headless = args.headless
    session = WatchSession(analyzer, emit=_printer(args) if headless else None)
    server = None
    if args.prometheus_port is not None:  # before the job starts: a busy port must not cost a run
        try:
            server = _serve_prometheus(args.prometheus_host, args.prometheus_port, session)
        except OSError as e:
            return fail(f"cannot serve Prometheus metrics on {args.prometheus_host}:{args.prometheus_port}: "
                        f"{e.strerror or e}")
    try:
        return _run_watch(args, cmd, run_dir, gpu, session, q, server, notes)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _run_watch(args, cmd, run_dir, gpu, session, q, server, notes) -> int:
    import psutil

    from trainscope.collectors.host import HostSampler
    from trainscope.collectors.monitor import Monitor
    from trainscope.collectors.recording import RecordingWriter
    from trainscope.collectors.step_hook import default_socket_path, private_dir
    from trainscope.collectors.step_receiver import StepReceiver, child_environment, ensure_private_dir

    headless = args.headless
    receiver = None
    child: subprocess.Popen | None = None
    if server is not None:
        notes.append(f"Prometheus metrics on http://{args.prometheus_host}:{server.server_address[1]}/metrics")
        sys.stderr.write(f"trainscope: {notes[-1]}\n")
    if cmd:
        target = " ".join(cmd)
        env = dict(os.environ)
        if not args.no_step_hook:
            try:
                receiver = StepReceiver(os.path.join(run_dir, "steps.sock"))
                env, _ = child_environment(receiver.path, folder=run_dir)
            except OSError as e:
                notes.append(f"step mode off: cannot open the step socket ({e.strerror or e})")
        try:
            child = subprocess.Popen(cmd, env=env, stdout=sys.stderr if args.format == "json" else None)
        except OSError as e:
            if receiver:
                receiver.close()
            return fail(f"cannot start {cmd[0]}: {e.strerror or e}")
        roots: Any = (child.pid,)
    elif args.pid is not None:
        target = f"pid {args.pid}"
        roots = (args.pid,)
        if not args.no_step_hook:
            try:
                ensure_private_dir(private_dir())
                receiver = StepReceiver(default_socket_path(args.pid))
            except OSError as e:
                notes.append(f"step mode off: cannot listen for the opt-in hook ({e.strerror or e}: "
                             f"{getattr(e, 'filename', None) or ''})")
    else:
        target = "all GPUs"
        gpu_pids: set[int] = set()

        def roots() -> tuple[int, ...]:
            return tuple(sorted(gpu_pids))

    header = {"started": time.time(), "interval_s": args.interval, "target": target, "command": cmd or None,
              "pid": args.pid if args.pid is not None else (child.pid if child else None),
              "host": os.uname().nodename, "trainscope": __import__("trainscope").__version__}
    if args.record:
        try:
            session.recorder = RecordingWriter(args.record, header)
        except OSError as e:  # checked before the job started; this is a race or a full disk
            _stop_job(child, signal.SIGINT, "cannot record")
            if receiver:
                receiver.close()
            return fail(f"cannot write {args.record}: {e.strerror or e}")

    app = None
    if not headless:
        from trainscope.tui.watch_app import SampleMessage, WatchApp

        app = WatchApp(title=target, interval=args.interval, launched=bool(cmd))

    def on_snapshot(snap) -> None:
        if not cmd and args.pid is None:  # bare watch: follow whatever uses the GPUs
            gpu_pids.clear()
            gpu_pids.update(p.pid for g in snap.gpus for p in (g.processes or ()))
        if headless:
            q.put(snap)
        else:
            st = session.ingest(snap)
            app.post_message(SampleMessage(st, snap))

    monitor = Monitor(args.interval, on_snapshot, gpu=gpu, host=HostSampler(roots), steps=receiver)

    # SIGTERM ends the watch like Ctrl-C: report, recording end marker; a launched job gets it too.
    def on_term(signum, frame):
        raise _Stop()
    old_term = signal.signal(signal.SIGTERM, on_term)
    monitor.start()
    deadline = time.monotonic() + args.duration if args.duration else None
    interrupted = False
    detached = False  # q in the dashboard left the job running
    exit_code = None

    def job_done() -> bool:
        if child is not None:
            return child.poll() is not None
        if args.pid is not None:
            try:
                p = psutil.Process(args.pid)
                return p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True
        return False

    try:
        if headless:
            while True:
                try:
                    session.ingest(q.get(timeout=0.1))
                except queue.Empty:
                    pass
                if job_done() or (deadline and time.monotonic() >= deadline):
                    break
        else:
            def waiter() -> None:
                while not job_done() and not (deadline and time.monotonic() >= deadline):
                    time.sleep(0.2)
                app.call_from_thread(app.exit)
            threading.Thread(target=waiter, daemon=True).start()
            app.run()
            interrupted = app.quit_code == 130
            detached = app.detached and not job_done()
            if interrupted:  # q / Ctrl-C in the dashboard is a keypress: the job never saw a SIGINT
                _stop_job(child, signal.SIGINT)
    except (KeyboardInterrupt, _Stop) as e:
        interrupted = True
        _stop_job(child, signal.SIGTERM if isinstance(e, _Stop) else signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        monitor.stop(final_sample=True)
        if headless:
            while not q.empty():
                session.ingest(q.get_nowait())
        if receiver is not None:
            status = receiver.status()
            if status.mode != "on" and cmd and not args.no_step_hook:
                notes.append(f"step mode was off: {status.detail}")
            receiver.close()
            if args.pid is not None:  # the per-user socket folder goes too, when no other watch uses it
                try:
                    os.rmdir(os.path.dirname(receiver.path))
                except OSError:
                    pass
    if child is not None and detached:
        notes.append(f"detached: the job (pid {child.pid}) runs on")
    elif child is not None:
        if child.poll() is None and deadline and time.monotonic() >= deadline:
            _stop_job(child, signal.SIGINT, f"--duration {args.duration:g} s reached")
        try:
            exit_code = child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            _stop_job(child, signal.SIGTERM, "the job did not end")
            exit_code = child.wait()
    if gpu.problem:
        notes.append(gpu.problem)
    code = _finish(args, session, {"target": target, "exit_code": exit_code, "notes": notes,
                                   "sampler_cpu_ms_per_sample": _mean_ms(monitor.cost_s)})
    if interrupted:
        return 130
    if code != EXIT_OK:
        return code
    if exit_code is None:
        return EXIT_OK
    return exit_code if exit_code >= 0 else 128 - exit_code  # killed by signal N: 128 + N, as shells report


def _mean_ms(xs: list[float]) -> float | None:
    return round(1000 * sum(xs) / len(xs), 3) if xs else None


def _serve_prometheus(host: str, port: int, session: WatchSession):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from trainscope.reports.prometheus import render_prometheus

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            with session.lock:
                st, snap = session.last or (None, None)
            body = render_prometheus(st, snap).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:  # keep the terminal for the job
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="trainscope-prometheus", daemon=True).start()
    return server
