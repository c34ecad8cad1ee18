"""The command line as a user meets it: exit codes, one-line errors, JSON schema, reports."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ALL_KINETO
from tests.conftest import CPU_ONLY
from tests.conftest import DATA
from tests.conftest import KINETO
from trainscope.analyzers.findings.base import AXES

RESNET = str(KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz")


def run(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "trainscope", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def assert_one_line_error(p, *needles):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_json_schema_fields():
    p = run("analyze", RESNET, "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["schema"] == "trainscope.analysis/2"
    v = doc["verdict"]
    assert v["axis"] == "data" and 0.8 <= v["confidence"] <= 1
    assert v["evidence"] and all({"metric", "value", "threshold", "source"} <= set(e) for e in v["evidence"])
    assert all("id" in f for f in doc["findings"])
    assert 53 <= doc["breakdown"]["gpu_busy_pct"] <= 59 and 37 <= doc["breakdown"]["data_wait_pct"] <= 43
    assert len(doc["steps"]) == 6
    r = doc["recommendations"][0]
    assert r["id"] == "dataloader-workers" and r["projected_speedup"] > 1.5 and r["bound"] == "upper"


@pytest.mark.parametrize("name", ALL_KINETO)
def test_every_shared_trace_analyzes(name):
    p = run("analyze", str(KINETO / name), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["verdict"]["axis"] in AXES  # not_representative: a window of one-off costs (issue 36)
    if name in CPU_ONLY:
        assert doc["verdict"]["axis"] == "insufficient_evidence"
    else:
        assert doc["breakdown"]["gpu_busy_pct"] > 0 and doc["steps"]


def test_text_summary_and_markdown_report(tmp_path):
    report = tmp_path / "r.md"
    p = run("analyze", RESNET, "--report", str(report))
    assert p.returncode == 0, p.stderr
    assert "VERDICT  DATA-BOUND" in p.stdout and "Fixes, ranked by projected gain" in p.stdout
    md = report.read_text()
    assert "## Verdict: DATA" in md
    # kernel names are escaped: no raw '<' (HTML) and no unescaped '|' breaking table rows
    row = next(line for line in md.splitlines() if "dgrad" in line and line.startswith("|"))
    assert "&lt;float" in row and "<float" not in row
    assert row.count("|") - row.count("\\|") == 7


def test_markdown_escape():
    from trainscope.reports.markdown import md_escape

    assert md_escape("a|b*c_<d>") == "a\\|b\\*c\\_&lt;d&gt;"
    assert md_escape("[x](javascript:alert(1))") == "\\[x\\]\\(javascript:alert\\(1\\)\\)"


def test_rank_directory_reports_every_rank(tmp_path):
    for i, name in enumerate(("resnet50_v100_num_workers_0.pt.trace.json.gz", "hta_v100_rank0.pt.trace.json.gz")):
        (tmp_path / f"worker_rank{i}.pt.trace.json.gz").write_bytes((KINETO / name).read_bytes())
    doc = json.loads(run("analyze", str(tmp_path), "--format", "json").stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0, 0] or len(doc["ranks"]) == 2
    axes = sorted(r["axis"] for r in doc["ranks"])
    assert axes == ["algorithm", "data"]
    # the body is the slowest rank: resnet50's 176 ms steps beat the other's 96 ms
    assert doc["verdict"]["axis"] == "data"


def test_thresholds_command_and_override():
    p = run("thresholds")
    assert p.returncode == 0 and "data_wait.high" in p.stdout and "XProf" in p.stdout
    p = run(
        "analyze",
        RESNET,
        "--format",
        "json",
        "--threshold",
        "data_wait.moderate=45",
        "--threshold",
        "data_wait.high=60",
    )
    assert json.loads(p.stdout)["verdict"]["axis"] != "data"
    assert_one_line_error(run("analyze", RESNET, "--threshold", "nope=1"), "unknown threshold")


# -- bad input: one line naming the file and the problem, exit 2 -----------------------------


def test_missing_path():
    assert_one_line_error(run("analyze", "/no/such/trace.json"), "/no/such/trace.json", "no such file")


def test_empty_file(tmp_path):
    f = tmp_path / "empty.json"
    f.write_bytes(b"")
    assert_one_line_error(run("analyze", str(f)), "empty.json", "empty")


def test_corrupt_gzip(tmp_path):
    f = tmp_path / "bad.json.gz"
    f.write_bytes(b"\x1f\x8b\x08\x00" + os.urandom(200))
    assert_one_line_error(run("analyze", str(f)), "bad.json.gz", "gzip")


def test_truncated_gzip_is_salvaged(tmp_path):
    data = (KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz").read_bytes()
    f = tmp_path / "cut.json.gz"
    f.write_bytes(data[: len(data) * 3 // 4])
    p = run("analyze", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    notes = " ".join(doc["warnings"])
    assert "truncated" in notes and "complete events" in notes
    assert doc["verdict"]["axis"] == "data"  # the steps that survived still tell the story


def test_truncated_json_is_salvaged(tmp_path):
    raw = gzip.decompress((KINETO / "param_linear_2080ti.json.gz").read_bytes())
    f = tmp_path / "cut.json"
    f.write_bytes(raw[: len(raw) // 2])
    p = run("analyze", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    assert any("truncated" in w for w in json.loads(p.stdout)["warnings"])


def test_truncated_before_any_event(tmp_path):
    f = tmp_path / "head.json"
    f.write_text('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na')
    assert_one_line_error(run("analyze", str(f)), "head.json", "not valid JSON")


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"hello": "world"}', "not a PyTorch profiler trace"),
        ("[1, 2, 3]", "no chrome-trace events"),
        (
            "[[0, 1, 4096, 2], [5, 2, -4096, 2]]",
            "memory timeline (export_memory_timeline), not a profiler trace: read it with `trainscope memory",
        ),
        ('{"traceEvents": []}', "no events"),
        ('"just a string"', "not a PyTorch profiler trace"),
        ('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}', "no timed events"),
    ],
)
def test_json_that_is_not_a_trace(tmp_path, content, needle):
    f = tmp_path / "x.json"
    f.write_text(content)
    assert_one_line_error(run("analyze", str(f)), "x.json", needle)


def test_binary_garbage(tmp_path):
    f = tmp_path / "x.bin"
    f.write_bytes(os.urandom(1000).replace(b"{", b"").replace(b"[", b"").replace(b"\x1f", b""))
    assert_one_line_error(run("analyze", str(f)), "x.bin", "unrecognized format")


def test_nsys_rep_says_how_to_export(tmp_path):
    f = tmp_path / "profile.nsys-rep"
    f.write_bytes(b"\x00" * 64)
    assert_one_line_error(run("analyze", str(f)), "profile.nsys-rep", "nsys export --type sqlite")


def test_directory_without_traces(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    assert_one_line_error(run("analyze", str(tmp_path)), str(tmp_path), "no trace files")


def test_negative_and_nan_durations_are_skipped(tmp_path):
    doc = json.loads(gzip.decompress((KINETO / "hta_mi250_minitoy_train.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "cuda_runtime":
            e["dur"] = -1.0
    f = tmp_path / "neg.json"
    f.write_text(json.dumps(doc).replace('"dur": -1.0', '"dur": NaN', 3))
    p = run("analyze", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    notes = " ".join(json.loads(p.stdout)["warnings"])
    assert "negative duration" in notes and "NaN" in notes


def test_usage_errors_exit_2():
    assert run().returncode == 2
    assert run("analyze").returncode == 2
    assert run("analyze", RESNET, "--peak-tflops", "-3").returncode == 2


def test_progress_indicator_draws_on_a_terminal_and_clears(monkeypatch, capsys):
    from trainscope import common as cli

    clock = iter([0.0, 0.5, 0.7, 0.75, 1.0])
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    p = cli.Progress(enabled=True)  # t0 = 0.0
    p("parsing events", 0.42)  # 0.5 s in: shown
    p("parsing events", 0.50)  # 0.2 s later: shown
    p("parsing events", 0.55)  # 0.05 s later: throttled
    p.done()
    err = capsys.readouterr().err
    assert "parsing events…  42 %" in err and " 50 %" in err and " 55 %" not in err
    assert err.endswith("\r\033[K")
    quiet = cli.Progress(enabled=False)
    quiet("reading", 0.1)
    assert capsys.readouterr().err == ""


def test_too_few_gpu_events_is_insufficient_evidence_not_a_guess(tmp_path):
    f = tmp_path / "tiny.json"
    f.write_text(
        '{"traceEvents": [{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":5,"pid":0,"tid":7,'
        '"args":{"device":0,"stream":7}}]}'
    )
    p = run("analyze", str(f), "--format", "json")
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)["verdict"]
    assert v["axis"] == "insufficient_evidence" and "only 1 GPU operation" in v["summary"]
    assert json.loads(p.stdout)["recommendations"] == []
    text = run("analyze", str(f)).stdout
    assert "GPU 0 (GPU 0)" not in text and "INSUFFICIENT EVIDENCE" in text


def test_app_opens_only_for_a_person_at_a_terminal(monkeypatch):
    """A terminal on both ends and no --format/--no-tui: the app; anything else: printed output."""
    import argparse

    from trainscope.commands.analyze import use_tui

    class Tty:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    def decide(stdout_tty=True, stdin_tty=True, fmt=None, no_tui=False, term="xterm-256color", stderr_tty=True):
        monkeypatch.setattr(sys, "stdout", Tty(stdout_tty))
        monkeypatch.setattr(sys, "stdin", Tty(stdin_tty))
        monkeypatch.setattr(sys, "stderr", Tty(stderr_tty))
        monkeypatch.setenv("TERM", term)
        return use_tui(argparse.Namespace(format=fmt, no_tui=no_tui))

    assert decide() is True
    assert decide(stdout_tty=False) is False  # piped: `trainscope analyze t.json | less`
    assert decide(stdin_tty=False) is False
    assert decide(stderr_tty=False) is False  # `2> log`: Textual draws on stderr
    assert decide(fmt="text") is False and decide(fmt="json") is False
    assert decide(no_tui=True) is False
    assert decide(term="dumb") is False


def test_piped_output_is_the_text_summary_not_the_app():
    p = run("analyze", RESNET)  # stdout is a pipe here
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("trainscope — ") and "VERDICT  DATA-BOUND" in p.stdout
    assert "\x1b[?1049h" not in p.stdout  # no alternate screen: the app never started


def test_device_line_for_a_device_the_trace_does_not_name():
    from trainscope.reports.document import device_label

    assert device_label({"device": {"name": "GPU 1", "id": 1}, "rank": 1}) == "GPU 1, rank 1"
    assert device_label({"device": {"name": "Tesla V100", "id": 0}, "rank": None}) == "Tesla V100 (GPU 0)"


def test_device_line_of_a_trace_without_gpu_work_has_no_none():
    """A counters-only trace names its A100 but records no GPU work: the device line said
    "NVIDIA A100-PG509-200 (GPU None)"."""
    from trainscope.reports.document import device_label

    assert (
        device_label({"device": {"id": None, "name": "NVIDIA A100-PG509-200"}, "rank": 0})
        == "NVIDIA A100-PG509-200, rank 0"
    )
    assert device_label({"device": {"id": 1, "name": "GPU 1"}, "rank": 1}) == "GPU 1, rank 1"
    assert device_label({"device": {"id": 0, "name": "Tesla V100"}}) == "Tesla V100 (GPU 0)"


def test_report_under_an_unknown_suffix_says_it_is_markdown(tmp_path):
    """--report x.pdf writes Markdown (as --help says) and says so on stderr; .md says nothing."""
    from tests.fuzzing import run_in_process

    cpu = str(DATA / "cpu" / "fast.pt.trace.json.gz")
    rc, out, err = run_in_process(["analyze", cpu, "--no-tui", "-q", "--report", str(tmp_path / "r.pdf")])
    assert rc == 0 and "written as Markdown" in err and (tmp_path / "r.pdf").read_text().startswith("#")
    rc, out, err = run_in_process(["analyze", cpu, "--no-tui", "-q", "--report", str(tmp_path / "r.md")])
    assert rc == 0 and "written as Markdown" not in err
