"""Trust boundaries of `trainscope watch`'s capture channel (issue 35, item 4) and what a capture
costs (item 6).

Another user must not be able to swap a capture, receive the job's datagrams, or make the job
write a file; `--record`/`--report` never write through a link the watch did not create;
`--duration` stops the job's whole process group; a `kill -9`ed watch leaves nothing that changes
the job's next start. The tests that play the other user drop privileges to uid/gid 65534
(nobody) in a forked child, which needs root: elsewhere they skip and say so. Everything they
create is under pytest's tmp_path (TMPDIR included). Verdicts are on files, counts and exit codes,
never on timings (margins are wide: 60 s stands for "did not wait for the children").
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import select
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from trainscope.api.capture import Capture
from trainscope.api.capture import CaptureController
from trainscope.api.capture import CaptureOptions
from trainscope.collectors import step_hook
from trainscope.collectors.recording import output_refusal
from trainscope.collectors.recording import write_output
from trainscope.collectors.step_receiver import StepReceiver
from trainscope.collectors.step_receiver import clean_stale
from trainscope.collectors.step_receiver import make_run_folder

HERE = pathlib.Path(__file__).parent
KINETO = HERE / "data" / "kineto"
REAL = KINETO / "hta_cpu_only.pt.trace.json.gz"  # what the job really wrote: INSUFFICIENT EVIDENCE
FORGED = KINETO / "hta_mi250_minitoy_train.json.gz"  # what the other user plants: a verdict unlike the real one
NOBODY = 65534
as_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="plays another user by dropping to uid/gid 65534 (nobody) with os.setuid in a forked child, "
    "which only root may do; as a normal user there is no second user to be",
)


# -- another user, in a forked child -------------------------------------------------------------


def start_as_nobody(fn, *args, cwd: pathlib.Path | None = None) -> tuple[int, int]:
    """Fork; the child enters ``cwd`` (as root: the ancestors of tmp_path are closed to others, so
    the other user works relative to a folder it may use), drops to uid/gid 65534 and runs
    ``fn(*args)``; its JSON-able result comes back through a pipe (:func:`result`)."""
    cwd_fd = os.open(cwd, os.O_RDONLY) if cwd is not None else None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os-level calls, and never back into pytest
        try:
            os.close(r)
            if cwd_fd is not None:
                os.fchdir(cwd_fd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {"ok": fn(*args)}
        except BaseException as e:  # noqa: BLE001 (reported to the parent)
            out = {"error": f"{type(e).__name__}: {e}"}
        try:
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    if cwd_fd is not None:
        os.close(cwd_fd)
    return pid, r


def result(child: tuple[int, int], timeout: float = 120.0):
    pid, r = child
    data = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([r], [], [], 0.5)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out = json.loads(data or b'{"error": "no answer"}')
    if "error" in out:
        raise AssertionError(f"the other user's process failed: {out['error']}")
    return out["ok"]


def as_nobody(fn, *args, cwd: pathlib.Path | None = None):
    return result(start_as_nobody(fn, *args, cwd=cwd))


def shared_folder(path: pathlib.Path, mode: int) -> pathlib.Path:
    path.mkdir()
    os.chmod(path, mode)
    return path


def trace_file(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    dst.write_bytes(gzip.decompress(src.read_bytes()))
    return dst


# -- 1. nobody else receives the job's datagrams or makes it write a file ------------------------------


def _squat(job_pid: int, victim: str, seconds: float) -> dict:
    """The other user (in the 1777 folder that is the job's TMPDIR): pre-creates the job's
    per-user socket folder open to all, binds the socket the job's hook looks for, forges a live
    owner file (its own pid and start time), and for ``seconds`` takes whatever arrives, asking
    every job that says hello for a capture written over ``victim``."""
    os.umask(0)
    os.mkdir("trainscope-0", 0o777)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(f"trainscope-0/steps-{job_pid}.sock")
    with open(f"trainscope-0/steps-{job_pid}.owner", "w") as f:
        f.write(step_hook.owner_record().decode())
    s.settimeout(0.2)
    got, asked = 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            _, addr = s.recvfrom(65536)
        except TimeoutError:
            continue
        got += 1
        if addr:
            req = {"type": "capture", "id": 1, "steps": 2, "max_s": 5, "path": victim, "stack": False}
            try:
                s.sendto(json.dumps(req).encode(), "trainscope-0/" + os.path.basename(addr))
                asked += 1
            except OSError:
                pass
    return {"received": got, "asked": asked, "job_sockets": sorted(os.listdir("trainscope-0"))}


JOB_WITH_OPT_IN = """
    import os, sys, time
    os.umask(0)  # as in the report: a root job with umask 000
    import torch
    from torch.utils.data import DataLoader
    import trainscope.collectors.step_hook as step_hook
    step_hook.install()
    print(os.getpid(), flush=True)
    sys.stdin.readline()  # the other user is in place
    end = time.monotonic() + {seconds}
    while time.monotonic() < end:
        for x in DataLoader(range(64), batch_size=1):
            time.sleep(0.01)
    print("done", flush=True)
"""


@as_root
@pytest.mark.needs_torch
def test_another_user_who_pre_creates_the_socket_folder_gets_no_datagram_and_no_file(tmp_path):
    """The report: another user who pre-creates ``$TMPDIR/trainscope-UID`` received the job's
    datagrams and, with umask 000, made a root job overwrite a file of its choosing with a trace."""
    shared = shared_folder(tmp_path / "shared", 0o1777)  # the job's TMPDIR, like /tmp
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    env = {**os.environ, "TMPDIR": str(shared)}
    env.pop(step_hook.ENV_SOCKET, None)
    code = textwrap.dedent(JOB_WITH_OPT_IN.format(seconds=7))
    job = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        pid = int(job.stdout.readline())
        squatter = start_as_nobody(_squat, pid, str(victim), 10.0, cwd=shared)
        time.sleep(0.5)
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "done"
        job.wait(timeout=60)
        got = result(squatter)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert got["received"] == 0 and got["asked"] == 0, got  # the hook sent nothing to that folder
    assert got["job_sockets"] == [f"steps-{pid}.owner", f"steps-{pid}.sock"], got  # and bound nothing there
    assert victim.read_text() == "precious\n"


def test_the_hook_refuses_folders_and_watchers_that_are_not_its_own(tmp_path):
    """The checks behind that test, without a second user: a socket folder open to others, a
    link in its place, a dead watcher's owner file."""
    open_dir = shared_folder(tmp_path / "open", 0o777)
    assert "open to group or others" in step_hook.watcher_problem(str(open_dir / "steps.sock"))
    real = shared_folder(tmp_path / "real", 0o700)
    (tmp_path / "link").symlink_to(real)
    assert "symbolic link" in step_hook.watcher_problem(str(tmp_path / "link" / "steps.sock"))
    r = StepReceiver(str(real / "steps.sock"))
    try:
        assert step_hook.watcher_problem(r.path) is None
        (real / "steps.owner").write_text("999999999 1\n")  # a watcher that is gone
        assert step_hook.watcher_problem(r.path) == "the watcher that made the socket is gone"
    finally:
        r.close()
    assert not (real / "steps.sock").exists() and not (real / "steps.owner").exists()


# -- 2. nobody else swaps a capture -------------------------------------------------------------------


class HookWriting:
    """Stands for the job: on a request it writes the real trace exactly as the hook does
    (:func:`step_hook.place_file`, with the folder identity the watcher sent). ``meanwhile``
    runs between the request and the write (the other user's move)."""

    def __init__(self, meanwhile=None, after=None) -> None:
        self.meanwhile, self.after, self.replies, self.sent = meanwhile, after, [], []

    def capture_target(self):
        return 4242, ""

    def send(self, pid, msg) -> bool:
        self.sent.append(msg)
        if self.meanwhile:
            self.meanwhile()
        src = pathlib.Path(msg["path"]).parent.parent / "job-export.json"
        folder, name = os.path.split(msg["path"])
        self.replies.append({"type": "capture", "id": msg["id"], "status": "started", "pid": pid})
        try:
            step_hook.place_file(str(src), folder, name, tuple(msg["folder_id"]))
        except OSError as e:
            self.replies.append({"type": "capture", "id": msg["id"], "pid": pid, "status": "failed", "why": e.strerror})
            return True
        if self.after:
            self.after()
        self.replies.append(
            {
                "type": "capture",
                "id": msg["id"],
                "pid": pid,
                "status": "done",
                "steps_ns": [30_000_000] * 3,
                "before_ns": [30_000_000] * 8,
            }
        )
        return True

    def drain_capture_messages(self):
        out, self.replies = self.replies, []
        return out


def _run_capture(rx, caps: pathlib.Path, notes: list[str] | None = None) -> Capture:
    c = CaptureController(rx, str(caps), CaptureOptions(steps=3))
    c.request("key", 1.0)
    c.tick(2.0)
    c.finish()
    c.close()
    if notes is not None:
        notes += c.drain_notes()
    return c.snapshot()[0]


def _swap_folder(forged: bytes, name: str) -> None:
    """The other user, in a folder everyone may write (not sticky): moves the capture folder
    away and puts its own in its place, with a forged trace under the capture's name."""
    os.rename("caps", "caps.moved")
    os.mkdir("caps", 0o777)
    with open(os.path.join("caps", name), "wb") as f:
        f.write(forged)


def _rename_over(forged: bytes, name: str) -> str:
    """The other user, the way of the report: writes a forged trace and renames it over the capture."""
    with open("forged.json", "wb") as f:
        f.write(forged)
    try:
        os.rename("forged.json", os.path.join("caps", name))
        return "renamed"
    except OSError as e:
        return type(e).__name__


@as_root
def test_another_user_cannot_swap_a_capture(tmp_path):
    forged = gzip.decompress(FORGED.read_bytes())
    name = "capture-1-pid4242.pt.trace.json"

    # (a) The report's attack: rename a forged trace over the capture. The capture folder is
    # created 0700 by the watch, so the other user cannot even reach it.
    shared = shared_folder(tmp_path / "a", 0o1777)
    trace_file(REAL, shared / "job-export.json")
    tried = []
    cap = _run_capture(
        HookWriting(after=lambda: tried.append(as_nobody(_rename_over, forged, name, cwd=shared))), shared / "caps"
    )
    assert tried == ["PermissionError"]
    assert cap.status == "done" and cap.verdict_line.startswith("trainscope: INSUFFICIENT EVIDENCE"), cap

    # (b) The folder itself swapped before the job writes (its parent lets everyone rename): the
    # job refuses the other user's folder, and nothing forged is read.
    shared = shared_folder(tmp_path / "b", 0o777)
    trace_file(REAL, shared / "job-export.json")
    cap = _run_capture(
        HookWriting(meanwhile=lambda: as_nobody(_swap_folder, forged, name, cwd=shared)), shared / "caps"
    )
    assert cap.status == "failed" and "belongs to uid 65534" in cap.why, cap
    assert cap.verdict_line is None

    # (c) Swapped after the job wrote, before the watch reads: the watch reads through the folder
    # it opened, so the verdict is the job's trace's, never the forged one's.
    shared = shared_folder(tmp_path / "c", 0o777)
    trace_file(REAL, shared / "job-export.json")
    notes: list[str] = []
    swap = HookWriting(after=lambda: as_nobody(_swap_folder, forged, name, cwd=shared))
    cap = _run_capture(swap, shared / "caps", notes)
    assert (shared / "caps" / name).read_bytes() == forged  # planted where the path leads now
    assert cap.status == "done" and "HOST-BOUND" not in (cap.verdict_line or ""), cap
    assert cap.verdict_line.startswith("trainscope: INSUFFICIENT EVIDENCE")
    assert any("was replaced during the watch" in n for n in notes), notes


def test_the_job_never_writes_through_a_link_nor_into_a_folder_open_to_others(tmp_path):
    src = trace_file(REAL, tmp_path / "export.json")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    caps = tmp_path / "caps"
    caps.mkdir(mode=0o700)
    (caps / "t.pt.trace.json").symlink_to(victim)  # a link at the trace's name: replaced, not followed
    step_hook.place_file(str(src), str(caps), "t.pt.trace.json")
    assert victim.read_text() == "precious\n" and not (caps / "t.pt.trace.json").is_symlink()
    assert stat.S_IMODE((caps / "t.pt.trace.json").stat().st_mode) == 0o600
    assert [p.name for p in caps.iterdir()] == ["t.pt.trace.json"]  # no temporary left
    os.chmod(caps, 0o777)
    with pytest.raises(PermissionError, match="writable by group or others"):
        step_hook.place_file(str(src), str(caps), "u.pt.trace.json")
    os.chmod(caps, 0o700)
    (tmp_path / "caps-link").symlink_to(caps)
    with pytest.raises(PermissionError, match="symbolic link"):
        step_hook.place_file(str(src), str(tmp_path / "caps-link"), "u.pt.trace.json")
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    with pytest.raises(PermissionError, match="not the folder the watcher asked for"):
        st = caps.stat()
        step_hook.place_file(str(src), str(other), "u.pt.trace.json", (st.st_dev, st.st_ino))
    for bad in ("../x.json", ".hidden.json", ""):
        with pytest.raises(ValueError):
            step_hook.place_file(str(src), str(caps), bad)


def _watch_pass(tmp_path: pathlib.Path, *args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    """``trainscope watch --headless ARGS -- python -c pass`` run to its end, TMPDIR in ``tmp_path``."""
    return subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", "--headless", *args, "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )


def test_a_capture_folder_that_others_can_write_is_refused_at_the_start(tmp_path):
    def watch(*args: str) -> subprocess.CompletedProcess:
        return _watch_pass(tmp_path, *args, cwd=tmp_path)

    shared_folder(tmp_path / "open", 0o777)
    p = watch("--capture-dir", str(tmp_path / "open"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "writable by group or others (mode 0777): refused" in p.stderr
    (tmp_path / "rec").mkdir()
    shared_folder(tmp_path / "rec" / "captures", 0o775)  # --record's captures/ beside it
    p = watch("--record", str(tmp_path / "rec" / "run.jsonl"))
    assert p.returncode == 2 and "--record's captures folder" in p.stderr and "mode 0775" in p.stderr, p.stderr
    (tmp_path / "link").symlink_to(tmp_path / "rec")
    p = watch("--capture-dir", str(tmp_path / "link"))
    assert p.returncode == 2 and "is a symbolic link" in p.stderr, p.stderr
    p = watch("--capture-dir", str(tmp_path / "new" / "caps"))  # created 0700
    assert p.returncode == 0, p.stderr
    assert stat.S_IMODE((tmp_path / "new" / "caps").stat().st_mode) == 0o700
    assert not list(tmp_path.glob("trainscope-watch-*"))  # the run folder, in TMPDIR, removed


@as_root
def test_a_capture_folder_of_another_user_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    p = _watch_pass(tmp_path, "--capture-dir", str(theirs))
    assert p.returncode == 2 and "belongs to uid 65534" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# -- 3. --record and --report: no link followed, no other user's file replaced -----------------------------


def test_record_and_report_refuse_a_link_planted_in_a_sticky_folder(tmp_path):
    sticky = shared_folder(tmp_path / "sticky", 0o1777)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (sticky / "run.jsonl").symlink_to(victim)
    (sticky / "r.md").symlink_to(victim)
    for flag, name in (("--record", "run.jsonl"), ("--report", "r.md")):
        p = _watch_pass(tmp_path, flag, str(sticky / name))
        assert p.returncode == 2 and "is a symbolic link: refused" in p.stderr, p.stderr
    assert victim.read_text() == "precious\n"


def test_a_link_planted_after_the_check_is_replaced_not_followed(tmp_path, monkeypatch):
    from trainscope.collectors import recording

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "r.md"
    out.symlink_to(victim)
    monkeypatch.setattr(recording, "output_refusal", lambda path: None)  # as if planted after the check
    write_output(str(out), b"report\n")
    assert victim.read_text() == "precious\n" and not out.is_symlink() and out.read_text() == "report\n"
    out.unlink()
    out.symlink_to(victim)
    w = recording.RecordingWriter(str(out), {"interval_s": 1.0})
    w.close()
    assert victim.read_text() == "precious\n" and out.read_text().startswith('{"schema":"trainscope.recording/1"')


def test_an_existing_file_of_ours_is_replaced_whole_and_keeps_its_mode(tmp_path):
    out = tmp_path / "r.md"
    out.write_text("old\n")
    os.chmod(out, 0o640)
    write_output(str(out), b"new\n")
    assert out.read_text() == "new\n" and stat.S_IMODE(out.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]
    assert output_refusal("/dev/null") is None  # a device: written in place, as tee would


@as_root
def test_another_users_file_is_not_replaced(tmp_path):
    sticky = shared_folder(tmp_path / "sticky", 0o1777)
    theirs = sticky / "r.md"
    theirs.write_text("theirs\n")
    os.chown(theirs, NOBODY, NOBODY)
    assert (
        output_refusal(str(theirs))
        == "belongs to uid 65534, not to this user: refused (remove it, or name another file)"
    )
    with pytest.raises(PermissionError):
        write_output(str(theirs), b"ours\n")
    assert theirs.read_text() == "theirs\n"


# -- 4. stopping the whole job; a watch killed -9 -------------------------------------------------------------

FORKING_JOB = """
import multiprocessing as mp, os, sys, time
def child():
    time.sleep(120)
if __name__ == "__main__":
    mp.set_start_method("fork")
    kids = [mp.Process(target=child) for _ in range(8)]
    for k in kids:
        k.start()
    with open(sys.argv[1], "w") as f:
        f.write(" ".join(str(k.pid) for k in kids))
    for k in kids:
        k.join()  # as a pool's exit does: the job waits for what it forked
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_duration_stops_every_process_the_job_forked(tmp_path):
    """Before: only the job's first process got the signal; the ones it forked kept it (and the
    watch) waiting until they ended by themselves (50 forked children: 57 s). Now the whole
    process group is signalled: the watch ends well within the children's 120 s."""
    job = tmp_path / "job.py"
    job.write_text(FORKING_JOB)
    pids = tmp_path / "pids.txt"
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", "--headless", "--interval", "0.5", "--duration", "4"]
        + ["--", sys.executable, str(job), str(pids)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    took = time.monotonic() - t0
    kids = [int(x) for x in pids.read_text().split()]
    try:
        assert p.returncode == 0, p.stderr[-2000:]
        assert "--duration 4 s reached: sending SIGINT to the job" in p.stderr
        assert took < 100, took  # not the children's 120 s
        end = time.monotonic() + 10
        while any(_alive(k) for k in kids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(k) for k in kids)
    finally:
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)  # a child of the job this test started


def test_stop_job_never_signals_a_group_the_child_does_not_lead(monkeypatch, capsys):
    """A child started without a session of its own (as tests do) shares the caller's process
    group: only the child is signalled, never the group (that would be pytest's own)."""
    from trainscope.commands import watch as watch_cmd

    monkeypatch.setattr(watch_cmd, "GRACE_S", 0.5)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE
    )
    child.stdout.readline()
    assert watch_cmd._group(child) is None
    watch_cmd._stop_job(child, signal.SIGINT)
    assert child.wait(5) != 0


REPORTING_JOB = """
import json, os, sys, time
with open(sys.argv[1], "w") as f:
    json.dump({"pid": os.getpid(), "env": dict(os.environ)}, f)
time.sleep(120)
"""


def test_a_killed_watch_leaves_nothing_that_changes_the_jobs_next_start(tmp_path):
    """kill -9 of the watch: its run folder stays behind (nothing can remove it), but a process
    the job starts afterwards, with the job's environment, runs without the hook; the next watch
    removes the folder."""
    job = tmp_path / "job.py"
    job.write_text(REPORTING_JOB)
    info = tmp_path / "job.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "trainscope", "watch", "--headless", "--interval", "0.5"]
        + ["--", sys.executable, str(job), str(info)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    job_pid = None
    try:
        end = time.monotonic() + 120
        while not (info.exists() and info.read_text().endswith("}")) and time.monotonic() < end:
            time.sleep(0.1)
        seen = json.loads(info.read_text())
        job_pid = seen["pid"]
        os.kill(watcher.pid, signal.SIGKILL)  # the watcher this test started
        watcher.wait(timeout=30)
        left = list(tmp_path.glob("trainscope-watch-*"))
        assert len(left) == 1 and (left[0] / "watch.owner").exists()
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import os, sys; print('trainscope_step_hook' in sys.modules, "
                "any('trainscope-site-' in p for p in sys.path))",
            ],
            env=seen["env"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert probe.stdout.split() == ["False", "False"], probe.stdout + probe.stderr
        p = _watch_pass(tmp_path, "--duration", "1")  # TMPDIR in tmp_path, as ``env``
        assert p.returncode == 0, p.stderr[-2000:]
        assert not list(tmp_path.glob("trainscope-watch-*"))  # the dead watch's folder, and this watch's own
    finally:
        if watcher.poll() is None:
            watcher.kill()
        if job_pid is not None:
            try:
                os.kill(job_pid, signal.SIGKILL)  # the job this test launched (it outlives its watch)
            except ProcessLookupError:
                pass


def test_stale_folders_of_dead_watchers_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    live = pathlib.Path(make_run_folder())
    dead = tmp_path / "trainscope-watch-dead"
    dead.mkdir(mode=0o700)
    (dead / "watch.owner").write_text(f"{os.getpid()} 1\n")  # this pid, another start time: not us
    old = tmp_path / "trainscope-watch-old"  # an older version's folder: no owner file, nobody bound
    old.mkdir(mode=0o700)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    young = tmp_path / "trainscope-watch-young"  # a watch that is starting
    young.mkdir(mode=0o700)
    open_one = tmp_path / "trainscope-watch-open"  # not private: not ours to judge
    open_one.mkdir()
    os.chmod(open_one, 0o777)
    (open_one / "watch.owner").write_text("999999999 1\n")
    removed = clean_stale(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(old)])
    assert live.exists() and young.exists() and open_one.exists()


# -- 5. captures that say what they cost ---------------------------------------------------------------------


def test_a_launch_verdict_within_the_profilers_measured_cost_is_not_presented_as_the_jobs():
    from trainscope.api.analysis import analyze
    from trainscope.api.capture import _report_fields
    from trainscope.reports.live import capture_headline

    # HOST-BOUND (launch/CPU overhead) at 7.5 ms steps (the minitoy trace FORGED was this test's
    # before its one step became NOT REPRESENTATIVE: a 6.5 ms first launch is start-up, issue 36)
    fields = _report_fields(analyze(str(KINETO / "tl_mi300x_norm_layers_fwdbwd.json.gz")))
    assert fields["host"]["bottleneck"] == "host/launch-overhead"
    launch, step = fields["host"]["launch_ms"], fields["host"]["step_ms"]
    cap = Capture(1, "key", 5, 3.0, status="done", **fields)
    # The profiler added more than the trace's launch/CPU-overhead time per step: the job's is ~0.
    cap.during_ms = (step,) * 5
    cap.before_ms = (step - launch - 0.5,) * 16
    sa = cap.set_apart()
    assert sa["verdict_is_profilers"] and sa["launch_pct_set_apart"] < 3.0, sa
    line = capture_headline(cap.to_dict())
    assert "profiler overhead +" in line and "the profiler's cost, not the job's" in line, line
    # A profiler that cost little: the verdict stands, with the share it leaves said.
    cap.before_ms = (step - 0.1,) * 16
    sa = cap.set_apart()
    assert not sa["verdict_is_profilers"] and sa["launch_pct_set_apart"] > 15.0, sa
    line = capture_headline(cap.to_dict())
    assert "not the job's" not in line and "with the profiler's own 0.10 ms per step set apart" in line, line
    assert any("with the profiler's cost set apart" in b for b in cap.to_dict()["breakdown"])


def test_every_capture_states_its_cost_and_settings(tmp_path):
    rx = HookWriting()
    (tmp_path / "job-export.json").write_bytes(gzip.decompress(REAL.read_bytes()))
    cap = _run_capture(rx, tmp_path / "caps")
    assert cap.status == "done"
    d = cap.to_dict()
    from trainscope.reports.live import capture_headline

    assert "profiler overhead +0 % per step" in capture_headline(d)
    assert rx.sent[0]["shapes"] is False and rx.sent[0]["stack"] is False and rx.sent[0]["memory"] is False
    assert stat.S_IMODE((tmp_path / "caps").stat().st_mode) == 0o700


@pytest.mark.needs_torch
def test_a_capture_without_a_folder_named_lands_where_it_outlives_the_watch(tmp_path):
    """No --capture-dir, no --record: the trace goes to trainscope-captures/ in the working
    directory (0700; the trace 0600), not into the watch's run folder, which is removed: the
    path printed leads to it after the watch has ended."""
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", "--headless", "--format", "json", "--interval", "0.25"]
        + ["--capture-at", "1", "--capture-steps", "2"]
        + ["--", sys.executable, str(HERE / "jobs" / "capture_job.py"), "--steps", "150", "--compute-ms", "20"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    caps = [c for c in map(json.loads, p.stdout.splitlines()) if c.get("type") == "capture"]
    assert len(caps) == 1 and caps[0]["status"] == "done", caps
    path = pathlib.Path(caps[0]["path"])
    assert path.parent == tmp_path / "trainscope-captures" and path.is_file()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    # What it cost, and what was recorded: a CPU-only job, so user scopes only.
    assert caps[0]["overhead"] is not None
    assert caps[0]["settings"] == {"ops": False, "shapes": False, "stack": False, "memory": False}
    assert not list(tmp_path.glob("trainscope-watch-*"))
