"""Regression tests for what a mutation fuzzer and a security review found: readers that crashed
or ballooned on hostile input, output that harmed what it wrote over or what it printed to, and
holes in ``watch``. Each test fails on the code before the fix."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import socket
import sqlite3
import stat
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fuzzing import DATA
from tests.fuzzing import run_in_process
from trainscope.collectors import open_traces

KINETO = DATA / "kineto" / "hta_cpu_only.pt.trace.json.gz"
NSYS = DATA / "nsys" / "pipit_saxpy_a100_nsys2022.sqlite"
SNAPSHOT = DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz"
CSV = DATA / "nvml" / "nanogpt_8gpu_head.csv"
RECORDING = DATA / "nvml" / "nanogpt_8gpu_head.recording.jsonl"


def one_line_refusal(rc: int, err: str) -> bool:
    return rc == 2 and err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err


def kineto_doc() -> dict:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


def cpu_ops(doc: dict) -> list[dict]:
    return [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in ("cpu_op", "operator")
        and not str(e.get("name", "")).startswith("ProfilerStep#")
    ]


# --- readers: out-of-range values are salvaged per event -------------------------------------------


def test_values_beyond_int64_skip_their_event_not_the_analysis(tmp_path):
    doc = kineto_doc()
    ops = cpu_ops(doc)
    ops[0]["ts"] = 9_300_000_000_000_000  # µs → 9.3e18 ns: beyond int64
    ops[1]["dur"] = 2**64
    ops[2]["pid"] = 2**63  # a thread key, not a column: harmless, still counted as an event
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = open_traces(str(path)).traces[0]
    # Independent count: the CPU operators in the JSON, minus the two that cannot be stored.
    assert len(trace.cpu_ops) == len(ops) - 2
    assert any("2 events skipped" in w for w in trace.warnings), trace.warnings
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q"])
    assert rc == 0, err
    assert any("2 events skipped" in w for w in json.loads(out)["warnings"])


def test_csv_gpu_index_beyond_int16_skips_the_row(tmp_path):
    lines = CSV.read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = "9200000000000000"
    lines[1] = ",".join(cells)
    path = tmp_path / "g.csv"
    path.write_text("\n".join(lines) + "\n")
    for argv in (
        ["analyze", str(path), "--format", "json", "-q"],
        ["watch", "--replay", str(path), "--headless", "--format", "json"],
    ):
        rc, out, err = run_in_process(argv)
        assert rc == 0, err
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q"])
    assert any("1 malformed CSV rows skipped" in w for w in json.loads(out)["warnings"])


def test_csv_huge_utilization_never_reaches_json_as_infinity(tmp_path):
    lines = CSV.read_text().splitlines()
    for i in (1, 2):
        cells = lines[i].split(",")
        cells[3] = "9" * 400  # float() of this is inf
        lines[i] = ",".join(cells)
    path = tmp_path / "u.csv"
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = run_in_process(["watch", "--replay", str(path), "--headless", "--format", "json"])
    assert rc == 0, err
    for line in out.splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))


def test_recording_time_beyond_int64_ns_is_a_damaged_line_not_a_crash(tmp_path):
    lines = RECORDING.read_text().splitlines()
    sample = json.loads(lines[5])
    sample["t"] = 1e12
    lines[5] = json.dumps(sample)
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q"])
    assert rc == 0, err
    assert any("line 6 is damaged" in w for w in json.loads(out)["warnings"])


@pytest.mark.parametrize("where", [2, 40])
def test_deeply_nested_recording_line_replays_what_came_before(tmp_path, where):
    lines = RECORDING.read_text().splitlines()
    lines[where] = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "n.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = run_in_process(["watch", "--replay", str(path), "--headless", "--format", "json"])
    assert rc == 0, err
    assert len(out.splitlines()) == where  # the samples before it, then the summary line
    lines[0] = "[" * 100_000 + "]" * 100_000  # the header itself: not a recording at all
    path.write_text("\n".join(lines) + "\n")
    rc, out, err = run_in_process(["watch", "--replay", str(path), "--headless"])
    assert one_line_refusal(rc, err), err


@pytest.mark.parametrize("fmt", ["json", "text", "markdown"])
def test_lone_surrogate_in_a_name_prints_in_every_format(tmp_path, fmt):
    doc = json.loads(gzip.decompress((DATA / "kineto" / "hta_mi250_minitoy_train.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "k\ud800"  # valid JSON ("k\\ud800"), not encodable as UTF-8
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    rc, out, err = run_in_process(["analyze", str(path), "--format", fmt, "-q"])
    assert rc == 0, err
    assert "ud800" in out  # the name is shown, as an escape


def test_names_are_clipped_once_so_no_regex_runs_over_megabytes(tmp_path):
    from trainscope.traces.builder import MAX_NAME

    doc = kineto_doc()
    for i, e in enumerate(cpu_ops(doc)[:3]):
        e["name"] = f"op{i}_" + "x" * 1_000_000
    path = tmp_path / "long.json"
    path.write_text(json.dumps(doc))
    trace = open_traces(str(path)).traces[0]
    long = [s for s in trace.strings if s.startswith(("op0_", "op1_", "op2_"))]
    assert len(long) == 3 and all(len(s) < MAX_NAME + 40 for s in long)


# --- pickles: declared sizes bounded before allocating ----------------------------------------------


@pytest.mark.parametrize(
    "payload,says",
    [
        (b"\x80\x04\x96" + struct.pack("<Q", 2**62) + b"abc.", "declares"),  # BYTEARRAY8
        (b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"abc.", "declares"),  # BINBYTES8
        (b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc.", "declares"),  # BINUNICODE8
        (b"\x80\x05\x95" + struct.pack("<Q", 2**60) + b"].", "frame"),
        (b"\x80\x02]r" + struct.pack("<I", 2**31) + b".", "memo index"),  # LONG_BINPUT far ahead
        (b"\x80\x04](X\x04\x00\x00\x00abcd" + b"2" * 1_100_000 + b"e.", "DUP"),
        (b"\x80\x02F1e\r\x1b[2J\n.", "not a readable pickle"),  # bad FLOAT text with CR and ESC
        (b"cos\nsystem\n(S'echo pwned'\ntR.", "refuses to load os.system"),  # protocol 0, a global
    ],
)
def test_hostile_pickles_are_one_line_refusals(tmp_path, payload, says):
    path = tmp_path / "h.pickle"
    path.write_bytes(payload)
    rc, out, err = run_in_process(["memory", str(path), "--format", "json"])
    assert one_line_refusal(rc, err), err
    assert says in err and "\x1b" not in err


@pytest.mark.parametrize("protocol", [0, 1])
def test_protocol_0_and_1_snapshots_are_read_as_pickles(tmp_path, protocol):
    from trainscope.collectors.safe_pickle import loads_plain

    obj = loads_plain(gzip.decompress(SNAPSHOT.read_bytes()))
    path = tmp_path / f"p{protocol}.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    rc, out, err = run_in_process(["memory", str(path), "--format", "json"])
    assert rc == 0, err
    rc4, out4, _ = run_in_process(["memory", str(SNAPSHOT), "--format", "json"])
    assert json.loads(out)["devices"] == json.loads(out4)["devices"]
    assert (
        json.loads(out)["devices"][0]["peak_allocated_bytes"] == 22_827_925_508
    )  # checked by replay of the raw events (test_memory_snapshot)


# --- gzip bombs: a cap with a one-line refusal and a flag to raise it -------------------------------


def bomb(path: Path, compressed_mb: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from fuzz import gzip_bomb

    gzip_bomb(str(path), compressed_mb)


def test_gzip_bomb_is_refused_by_its_ratio_at_once(tmp_path):
    path = tmp_path / "bomb.json.gz"
    bomb(path, 1)  # ≈ 1 GiB of zeros
    t0 = time.monotonic()
    for argv in (
        ["analyze", str(path), "--format", "json", "-q"],
        ["memory", str(path)],
        ["diff", str(path), str(KINETO), "--format", "json", "-q"],
    ):
        rc, out, err = run_in_process(argv)
        assert one_line_refusal(rc, err), err
        assert "expands more than 100×" in err and "--max-decompressed" in err
    assert time.monotonic() - t0 < 30  # stops after 64 MiB, not at the end of 1 GiB


def test_max_decompressed_sets_the_cap_and_names_it(tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    bomb(path, 1)
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q", "--max-decompressed", "16MiB"])
    assert one_line_refusal(rc, err) and "more than 16 MiB" in err, err
    monkeypatch.setenv("TRAINSCOPE_MAX_DECOMPRESSED", "8MiB")
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q"])
    assert one_line_refusal(rc, err) and "more than 8 MiB" in err, err
    # A real trace passes under a cap that fits it (25 KB decompressed).
    rc, out, err = run_in_process(["analyze", str(KINETO), "--format", "json", "-q", "--max-decompressed", "1MB"])
    assert rc == 0, err


# --- SQLite: immutable, one-line errors -------------------------------------------------------------


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_nsight_export_is_opened_writing_nothing_beside_it(tmp_path, journal):
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(NSYS, folder / NSYS.name)
    con = sqlite3.connect(folder / NSYS.name)
    con.execute(f"PRAGMA journal_mode={journal}")  # a WAL database gets -wal/-shm even read-only
    con.close()
    assert sorted(os.listdir(folder)) == [NSYS.name]
    folder.chmod(0o555)
    try:
        rc, out, err = run_in_process(["analyze", str(folder / NSYS.name), "--format", "json", "-q"])
        assert rc == 0, err
        assert sorted(os.listdir(folder)) == [NSYS.name]  # no -wal, -shm or -journal beside it
    finally:
        folder.chmod(0o755)


def test_malformed_sqlite_schema_is_one_line_without_its_sql(tmp_path):
    path = tmp_path / "bad.sqlite"
    shutil.copy(NSYS, path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")
    table = con.execute("SELECT name FROM sqlite_master WHERE type='table' LIMIT 1").fetchone()[0]
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", ("CREATE TABLE x(\n  a INT,\n  b", table))
    con.commit()
    con.close()
    rc, out, err = run_in_process(["analyze", str(path), "--format", "json", "-q"])
    assert one_line_refusal(rc, err), err
    assert "CREATE TABLE" not in err


def test_unreadable_file_is_exit_2_in_memory_too(tmp_path, monkeypatch):
    # As root, chmod 000 does not stop reading: make the sniffer fail as it would for a user.
    import trainscope.collectors.formats as formats

    def denied(path, n=16):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(formats, "sniff", denied)  # the reader table (collectors/formats.py) sniffs through it
    for argv in (["memory", str(SNAPSHOT)], ["analyze", str(KINETO), "--format", "json", "-q"]):
        rc, out, err = run_in_process(argv)
        assert one_line_refusal(rc, err) and "Permission denied" in err, (argv, err)


@pytest.mark.parametrize("command", ["analyze", "memory", "replay"])
def test_a_fifo_is_refused_not_waited_on(tmp_path, command):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    argv = {
        "analyze": ["analyze", str(fifo), "--format", "json", "-q"],
        "memory": ["memory", str(fifo)],
        "replay": ["watch", "--replay", str(fifo), "--headless"],
    }[command]
    p = subprocess.run([sys.executable, "-m", "trainscope", *argv], capture_output=True, text=True, timeout=60)
    assert one_line_refusal(p.returncode, p.stderr), p.stderr


# --- output: atomic only over regular files ---------------------------------------------------------


def test_write_atomic_keeps_mode_and_writes_through_a_symlink(tmp_path):
    from trainscope.reports.output import write_atomic

    real = tmp_path / "real.md"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(real)
    write_atomic(str(link), "new ✓")
    assert link.is_symlink() and real.read_text() == "new ✓"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["link.md", "real.md"]


def test_write_atomic_refuses_a_directory_before_writing_anything(tmp_path):
    from trainscope.reports.output import write_atomic

    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomic(str(target), "x" * 1000)
    assert os.listdir(tmp_path) == ["out"] and os.listdir(target) == []
    rc, out, err = run_in_process(["analyze", str(KINETO), "--format", "json", "-q", "--report", str(target)])
    assert one_line_refusal(rc, err) and os.listdir(tmp_path) == ["out"]


def test_a_fifo_given_to_report_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "report.md"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    rc, out, err = run_in_process(["analyze", str(KINETO), "--format", "json", "-q", "--report", str(fifo)])
    reader.join(30)
    assert rc == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a regular file
    assert got and got[0].startswith(b"#")


# --- terminal and markup injection ------------------------------------------------------------------

EVIL = "evil\x1b[2J\x1b]0;pwned\x07\rforged\nline\x9b31m[link=http://evil]x[/link][reverse]r"


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_escape_sequences_in_a_name_never_reach_the_terminal(tmp_path, fmt):
    doc = json.loads(gzip.decompress((DATA / "kineto" / "hta_mi250_minitoy_train.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = EVIL  # every kernel: the name then tops the kernels list
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    rc, out, err = run_in_process(["analyze", str(path), "--format", fmt, "-q", "--color", "never"])
    assert rc == 0, err
    assert "evil" in out
    assert not any(c in out for c in "\x1b\x07\r\x9b"), repr(out[:400])
    assert "forged\nline" not in out and "\\x1b" in out  # shown, as \x1b (Markdown escapes it further)


def test_sanitizer_shows_every_control_character():
    from trainscope.traces.safe_text import json_safe
    from trainscope.traces.safe_text import markup_safe
    from trainscope.traces.safe_text import visible

    assert visible(EVIL) == (
        "evil\\x1b[2J\\x1b]0;pwned\\x07\\rforged\\nline\\x9b31m[link=http://evil]x[/link][reverse]r"
    )
    assert visible("k\ud800\u202e") == "k\\ud800\\u202e"
    assert markup_safe("[reverse]r") == "\\[reverse]r"
    assert json_safe({"a": [float("inf"), float("nan"), 1.5], "k\ud800": "x\udfff"}) == {
        "a": [None, None, 1.5],
        "k\\ud800": "x\\udfff",
    }


def test_a_markup_kernel_name_renders_as_text_in_the_app():
    from rich.text import Text

    from trainscope.tui.timeline import short_name

    cell = Text(short_name(EVIL, 200))
    assert cell.plain.startswith("evil\\x1b[2J") and "[link=http://evil]" in cell.plain
    assert not cell.spans  # no style, no link: the markup stayed text


# --- watch ----------------------------------------------------------------------------------------


def watch(*args: str, env: dict | None = None, timeout: float = 120, **run) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainscope", "watch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **run,
    )


def test_watch_pid_leaves_a_planted_file_alone_and_no_folder_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        planted = tmp / f"trainscope-steps-{job.pid}.sock"  # the old predictable path
        planted.write_text("precious")
        p = watch("--pid", str(job.pid), "--headless", "--duration", "1", env=env)
        assert p.returncode == 0, p.stderr
        assert planted.read_text() == "precious"
        assert sorted(os.listdir(tmp)) == [planted.name]  # no socket folder, no temporary folder left
    finally:
        job.kill()
        job.wait()


def test_watch_pid_refuses_a_planted_file_in_its_private_folder(tmp_path):
    from trainscope.collectors.step_receiver import StepReceiver

    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    planted = folder / "steps-1.sock"
    planted.write_text("precious")
    with pytest.raises(FileExistsError):
        StepReceiver(str(planted))
    assert planted.read_text() == "precious"


def test_launched_job_that_crashes_leaves_no_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = watch("--headless", "--", sys.executable, "-c", "import os; os.abort()", env={**os.environ, "TMPDIR": str(tmp)})
    assert p.returncode == 128 + 6, p.stderr
    assert os.listdir(tmp) == []


def test_busy_prometheus_port_is_refused_before_the_job_starts(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    marker = tmp_path / "started"
    try:
        p = watch(
            "--headless",
            "--prometheus-port",
            str(busy.getsockname()[1]),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        )
    finally:
        busy.close()
    assert one_line_refusal(p.returncode, p.stderr), p.stderr
    assert not marker.exists()


def test_unwritable_record_path_is_refused_before_the_job_starts(tmp_path):
    marker = tmp_path / "started"
    p = watch(
        "--headless",
        "--record",
        str(tmp_path / "no" / "such" / "r.jsonl"),
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w')",
    )
    assert one_line_refusal(p.returncode, p.stderr), p.stderr
    assert not marker.exists()


@pytest.mark.parametrize("extra", [["--record", "r.jsonl"], ["--duration", "5"], ["--prometheus-port", "0"]])
def test_flags_that_contradict_replay_are_refused(extra):
    rc, out, err = run_in_process(["watch", "--replay", str(RECORDING), "--headless", *extra])
    assert one_line_refusal(rc, err) and "--replay" in err, err


def test_stop_job_escalates_and_says_so(monkeypatch, capsys):
    import signal

    from trainscope.commands import watch as watch_cmd

    monkeypatch.setattr(watch_cmd, "GRACE_S", 0.5)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    child.stdout.readline()
    watch_cmd._stop_job(child, signal.SIGINT, "--duration 1 s reached")
    assert child.wait(5) == -signal.SIGKILL
    err = capsys.readouterr().err
    assert "--duration 1 s reached: sending SIGINT" in err
    assert "after SIGINT: sending SIGTERM" in err and "after SIGTERM: sending SIGKILL" in err


_EXITS_7_ON_SIGINT = "try:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n    raise SystemExit(7)"


def test_duration_ends_a_launched_job_with_sigint_first():
    t0 = time.monotonic()
    # 6 s, not 2: the SIGINT must reach the job inside its try block. A job that is still starting
    # (the injected step hook imports while site runs) when SIGINT comes cannot handle it; on a loaded
    # machine that start took over 2 s and the test saw SIGTERM's 143.
    p = watch("--headless", "--duration", "6", "--", sys.executable, "-c", "import time\n" + _EXITS_7_ON_SIGINT)
    assert "--duration 6 s reached: sending SIGINT to the job" in p.stderr
    assert p.returncode == 7  # the job's own handler ran: it got SIGINT, not SIGKILL
    assert time.monotonic() - t0 < 60


def test_duration_stops_the_job_with_sigint_when_watch_itself_ignores_sigint():
    """A watcher started with SIGINT ignored (a background command of a non-interactive shell:
    ``nohup … &``, as the suite itself may run) launches the job with a working SIGINT: --duration
    stops it through its own handler, not by SIGTERM 10 s later. Found when the whole suite ran in
    the background and the test above failed with 143."""
    import signal

    job = "import signal, time\nassert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
    p = watch(
        *("--headless", "--duration", "6", "--", sys.executable, "-c", job + _EXITS_7_ON_SIGINT),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert p.returncode == 7, p.stderr
    assert "sending SIGTERM" not in p.stderr


def _fuzz():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fuzz

    return fuzz


def test_peak_rss_of_a_command_is_its_own_even_from_a_1gib_parent(tmp_path):
    """The measurement behind the bomb test and benchmarks/fuzz.py: a child forked from a big parent
    and exec'd is charged the parent's pages by ``ru_maxrss`` (a 1.2 GiB pytest made
    ``trainscope --version`` "use" 1,234 MiB and failed the bomb test late in a full run). Measured
    through the launcher, a trivial command stays small whatever the parent holds."""
    import signal

    fuzz = _fuzz()
    ballast = b"\x01" * (1 << 30)  # touched pages: this process now holds 1 GiB more
    try:
        rc, out, err, rss, _ = fuzz.run_measured([sys.executable, "-c", "print('ok')"], 0, 60, str(tmp_path))
        assert (rc, out) == (0, "ok\n"), err
        assert rss < 100 << 20, f"peak RSS {rss / 2**20:.0f} MiB"
        rc, out, err, rss, _ = fuzz.run_cli(["--version"], 4 << 30, 60, str(tmp_path))
        assert rc == 0 and "trainscope" in out, err
        assert rss < 200 << 20, f"peak RSS {rss / 2**20:.0f} MiB"
        # The naive measurement on this machine really is inflated (else this test shows nothing).
        p = subprocess.Popen(
            [sys.executable, "-c", "pass"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
        )
        _, _, usage = os.wait4(p.pid, 0)
        assert usage.ru_maxrss * 1024 > 1 << 30
    finally:
        del ballast


def test_20mb_gzip_bomb_is_refused_in_one_line_under_1gb_rss(tmp_path):
    fuzz = _fuzz()
    path = tmp_path / "bomb.json.gz"
    bomb(path, 20)  # ≈ 20 GiB of zeros
    rc, out, err, rss, seconds = fuzz.run_cli(
        ["analyze", str(path), "--format", "json", "-q"], 4 << 30, 120, str(tmp_path)
    )
    assert one_line_refusal(rc, err), err
    assert rss < 400 << 20, f"peak RSS {rss / 2**20:.0f} MiB"  # measured ≈ 140 MiB

    # The decompressing thread runs ahead of the decoder only by its bounded queue: a decoder slowed
    # 20 ms a block does not let inflated blocks pile up.
    slowed = (
        "import sys, time\n"
        "from trainscope.collectors import kineto_stream as ks\n"
        "blocks = ks._Source.blocks\n"
        "def slow(self):\n"
        "    for b in blocks(self):\n"
        "        time.sleep(0.02)\n"
        "        yield b\n"
        "ks._Source.blocks = slow\n"
        "from trainscope.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRAINSCOPE_DEBUG"}
    rc2, _, err2, rss2, seconds2 = fuzz.run_measured(
        [sys.executable, "-c", slowed, "analyze", str(path), "--format", "json", "-q"], 4 << 30, 120, str(tmp_path), env
    )
    assert one_line_refusal(rc2, err2), err2
    assert err2 == err
    assert rss2 < rss + (64 << 20), f"slowed decoder: peak RSS {rss2 / 2**20:.0f} MiB against {rss / 2**20:.0f} MiB"


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_snapshot_frame_names_with_lone_surrogates_and_escapes_print(tmp_path, fmt):
    """Found by benchmarks/fuzz.py (mutant 1844 of the memory snapshot): a lone surrogate in a
    frame's file name crashed `memory --format text` (UnicodeEncodeError, exit 1). Every rendering
    now spells such names out; no raw escape reaches the terminal."""
    from trainscope.collectors.safe_pickle import loads_plain

    obj = loads_plain(gzip.decompress(SNAPSHOT.read_bytes()))
    hit = 0
    for seg in obj["segments"]:
        for b in seg["blocks"]:
            for fr in b.get("frames") or ():
                fr["filename"] = "evil\ud800\x1b[2J.py"
                hit += 1
    for tr in obj.get("device_traces") or ():
        for e in tr:
            for fr in e.get("frames") or ():
                fr["filename"] = "evil\ud800\x1b[2J.py"
                hit += 1
    assert hit > 0
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    rc, out, err = run_in_process(["memory", str(path), "--format", fmt, "-q"])
    assert rc == 0, err
    assert "\x1b" not in out and "\ud800" not in out
    if fmt != "json":
        assert "evil" in out  # the name is shown, spelled out
