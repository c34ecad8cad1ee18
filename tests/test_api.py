"""trainscope.api: the one application layer. Numbers are checked against the raw trace JSON."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

import trainscope.api as ts
from tests.conftest import profile_linear_on_cpu
from tests.conftest import write_json_gz
from trainscope.cli import main

DATA = Path(__file__).parent / "data"
KINETO = DATA / "kineto"
RESNET = str(KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz")
MINITOY = str(KINETO / "hta_mi250_minitoy_train.json.gz")
SNAPSHOT = str(DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz")


@pytest.fixture(scope="module")
def resnet() -> ts.Report:
    return ts.analyze(RESNET)


@pytest.fixture(scope="module")
def raw_events() -> list[dict]:
    return json.load(gzip.open(RESNET))["traceEvents"]


def test_public_names_exist():
    assert all(hasattr(ts, name) for name in ts.__all__)
    for name in (
        "analyze",
        "diff",
        "plan",
        "memory",
        "watch",
        "on_trace_ready",
        "Report",
        "TrainscopeError",
        "BadInput",
        "Regression",
        "describe",
    ):
        assert name in ts.__all__


def test_analyze_reports_the_data_bound_resnet_run_with_numbers_from_the_raw_trace(resnet, raw_events):
    assert resnet.verdict.axis == "data"
    steps = [e for e in raw_events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    # Independently: six ProfilerStep# ranges, median duration 176.273 ms.
    assert [s.label for s in resnet.steps] == sorted((e["name"] for e in steps), key=lambda n: int(n.split("#")[1]))
    assert resnet.breakdown.step_ms.p50 == pytest.approx(statistics.median(e["dur"] for e in steps) / 1e3, abs=0.01)
    # Host time in the DataLoader's __next__ inside the steps, as a share of step time.
    loads = [e for e in raw_events if e.get("ph") == "X" and "DataLoaderIter.__next__" in str(e.get("name", ""))]
    inside = sum(
        min(ld["ts"] + ld["dur"], s["ts"] + s["dur"]) - max(ld["ts"], s["ts"])
        for ld in loads
        for s in steps
        if ld["ts"] < s["ts"] + s["dur"] and s["ts"] < ld["ts"] + ld["dur"]
    )
    assert resnet.breakdown.data_wait_pct == pytest.approx(100 * inside / sum(s["dur"] for s in steps), abs=0.5)
    assert resnet.findings[0].id == "data/input-wait" and resnet.recommendations
    assert resnet.kernels.count > 0 and resnet.memory and resnet.ranks == [resnet.main]


def test_the_report_document_is_the_clis(resnet, capsys):
    assert main(["analyze", RESNET, "--format", "json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(resnet.to_json())
    assert resnet.to_text().startswith("trainscope — resnet50_v100_num_workers_0")
    assert resnet.to_markdown() == resnet._repr_markdown_() and "## Verdict: DATA" in resnet.to_markdown()
    assert resnet.verdict_line().startswith("trainscope: DATA-BOUND · D·A·M axis: Data (confidence 0.82)")


def test_thresholds_change_the_verdict_as_rules_would():
    # Measured data wait 39.6 %: above the default high bar (20 %) it is a high finding; with the high
    # bar at 45 % it is moderate; with both bars above it, no finding at all.
    default = {f.id: f.severity for f in ts.analyze(RESNET).findings}
    assert default["data/input-wait"] == "high"
    r = ts.analyze(RESNET, thresholds={"data_wait.high": 45})
    assert {f.id: f.severity for f in r.findings}["data/input-wait"] == "moderate"
    r = ts.analyze(RESNET, thresholds={"data_wait.high": 45, "data_wait.moderate": 41})
    assert "data/input-wait" not in [f.id for f in r.findings]
    with pytest.raises(ts.BadInput, match="unknown threshold"):
        ts.analyze(RESNET, thresholds={"no.such": 1})


def test_errors_are_one_family_with_one_mapping(tmp_path):
    with pytest.raises(ts.BadInput) as e:
        ts.analyze(tmp_path / "missing.json")
    assert ts.describe(e.value) == (str(e.value), 2) and "missing.json" in str(e.value)
    with pytest.raises(ts.BadInput, match="--step-range"):
        ts.analyze(RESNET, step_range="no_such_range")
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    with pytest.raises(ts.BadInput):
        ts.analyze(junk)
    assert ts.describe(KeyboardInterrupt()) == ("interrupted", 130)
    assert ts.describe(RuntimeError("x"))[1] == 1
    assert issubclass(ts.DeepUnavailable, ts.BadInput) and ts.Regression("r").exit_code == 3


def test_diff_gate_regression_and_check():
    # Not comparable (another GPU; two steps against six): the gate is not run — exit 2 with the reason.
    r = ts.diff(MINITOY, RESNET, fail_if_slower=5)
    # Independently: the minitoy's two steps and resnet's six; p50 4.67 → 176.27 ms.
    assert r.diff.p50.after_ms == pytest.approx(176.273, abs=0.01)
    assert r.refused and not r.regressed and r.exit_code == 2 and r.gate_line().startswith("gate not run: ")
    with pytest.raises(ts.BadInput):
        r.check()
    # The bundled CPU job, fast loader → slow loader: a regression.
    cpu = os.path.join(os.path.dirname(__file__), "data", "cpu")
    r = ts.diff(
        os.path.join(cpu, "fast.pt.trace.json.gz"), os.path.join(cpu, "slow.pt.trace.json.gz"), fail_if_slower=5
    )
    assert r.regressed and r.exit_code == 3 and r.gate_line().startswith("regression: step time p50 rose")
    with pytest.raises(ts.Regression) as e:
        r.check()
    assert ts.describe(e.value)[1] == 3 and e.value.result is r
    with pytest.raises(ts.BadInput, match="cannot reach significance"):  # one step each: no test can fail
        ts.diff(MINITOY, MINITOY, fail_if_slower=0)
    ok = ts.diff(
        os.path.join(cpu, "fast.pt.trace.json.gz"), os.path.join(cpu, "fast.pt.trace.json.gz"), fail_if_slower=0
    )
    assert not ok.regressed and ok.exit_code == 0 and ok.check() is ok
    assert ok.to_dict()["schema"].startswith("trainscope.diff")
    with pytest.raises(ts.BadInput, match="^AFTER: "):
        ts.diff(RESNET, "/nonexistent/trace.json")


def test_plan_matches_the_hand_computed_ledger():
    # 1.5 B parameters, FP32, Adam: 4 (weights) + 4 (gradients) + 8 (m, v) bytes each = 24 GB static.
    r = ts.plan(params="1.5B", optimizer="adam", precision="fp32", gpu="v100-32")
    assert r.ledger.static_bytes == pytest.approx(24e9)
    assert r.to_dict() == ts.plan("params=1.5B,optimizer=adam,precision=fp32", gpu="v100-32").to_dict()
    with pytest.raises(ts.BadInput, match="unknown GPU"):
        ts.plan(params="1B", gpu="no-such-gpu")
    with pytest.raises(ts.BadInput):
        ts.plan(params="1B", optimizer="nonsense")


def test_memory_reads_the_snapshot():
    import pickle

    m = ts.memory(SNAPSHOT, gpu="h100-80")
    raw = pickle.load(gzip.open(SNAPSHOT))  # the project's own fixture: a plain load is fine in a test
    assert m.kind == "cuda_snapshot"
    assert m.devices[0].peak_reserved == sum(s["total_size"] for s in raw["segments"]) == 23_842_521_088
    assert m.to_dict()["devices"][0]["peak_allocated_bytes"] == 22_827_925_508
    with pytest.raises(ts.BadInput, match="^memory: unknown GPU"):
        ts.memory(SNAPSHOT, gpu="nope")


def test_watch_replays_a_recording_as_an_iterator(tmp_path):
    from trainscope.collectors.recording import RecordingWriter
    from trainscope.traces.samples import HostSample
    from trainscope.traces.samples import ProcessGroup
    from trainscope.traces.samples import Snapshot
    from trainscope.traces.samples import StepSample

    path = tmp_path / "run.jsonl"
    w = RecordingWriter(str(path), {"interval_s": 1.0, "target": "test"})
    for i in range(8):  # the loop waits 60 % of each step inside its DataLoader (measured by the step hook)
        w.write(
            Snapshot(
                t=float(i),
                dt=1.0,
                host=HostSample(20.0, (), 0.0, 1, 2, None, (ProcessGroup("main", 1, 50.0, 1),)),
                step=StepSample(10, 600_000_000, 1_000_000_000),
                step_mode="on",
            )
        )
    w.close({"exit_code": 0})
    with ts.watch(replay=path, window=30) as live:
        samples = list(live)
    assert len(samples) == 8 and all(isinstance(s, ts.LiveSample) for s in samples)
    assert samples[-1].verdict.axis == "data" and live.summary().verdict.axis == "data"
    assert samples[-1].to_dict()["verdict"]["axis"] == "data"
    with pytest.raises(ts.BadInput):
        ts.watch(replay=tmp_path / "none.jsonl")


def test_on_trace_ready_writes_like_tensorboard_and_prints_each_cycle(tmp_path):
    pytest.importorskip("torch")
    lines: list[str] = []
    handler = ts.on_trace_ready(tmp_path / "traces", printer=lines.append)
    profile_linear_on_cpu(handler, width=64, batch=32, active=2, sgd=True)  # 6 steps
    files = sorted(os.listdir(tmp_path / "traces"))
    assert len(files) == 2 and all(f.endswith(".pt.trace.json") for f in files)  # tensorboard_trace_handler's names
    assert len(handler.reports) == 2 and len(lines) == 2
    # CPU only: no GPU activity, so no verdict on the D·A·M axes.
    assert all(r.verdict.axis == "insufficient_evidence" for r in handler.reports)
    assert all(line.startswith("trainscope: INSUFFICIENT EVIDENCE") for line in lines)
    assert len(ts.analyze(tmp_path / "traces").ranks) == 2  # the directory reads back as a trace set


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data):
        self.text.append(data)


def _hostile_trace(tmp_path: Path) -> Path:
    """A real trace with its top kernel renamed to markup (names come from user code)."""
    doc = json.load(gzip.open(MINITOY))
    totals: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if str(e.get("cat", "")).lower() == "kernel":
            totals[e["name"]] = totals.get(e["name"], 0) + e.get("dur", 0)
    name = max(totals, key=totals.get)  # the top kernel: it is in the report's kernel table
    for e in doc["traceEvents"]:
        if e.get("name") == name:
            e["name"] = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    path = tmp_path / "hostile.pt.trace.json.gz"
    write_json_gz(path, doc)
    return path


def test_html_report_is_self_contained_and_escapes_trace_strings(tmp_path):
    out = tmp_path / "run.html"
    assert main(["analyze", str(_hostile_trace(tmp_path)), "--no-tui", "-q", "--report", str(out)]) == 0
    page = out.read_text()
    p = _Tags()
    p.feed(page)
    assert "script" not in p.tags and "img" not in p.tags  # the kernel name stayed text
    assert "<script>alert(1)</script><img src=x onerror=alert(2)>" in "".join(p.text)
    assert not [v for k, v in p.attrs if k in ("src", "href")]  # nothing to fetch
    assert p.tags.count("svg") == 2  # step breakdown and median-step timeline
    assert "Timeline of the median step" in page and "Top kernels" in page
    doc = ts.analyze(tmp_path / "hostile.pt.trace.json.gz").to_dict()
    from trainscope.reports.document import headline

    assert headline(doc) in page
    # One stacked bar per step: each step's categories are rects titled with the step's label.
    for step in doc["steps"]:
        drawn = [c for c, ms in step["ms"].items() if ms and ms > 0]
        assert page.count(f"<title>{step['label']}: ") == len(drawn)


def test_report_suffix_picks_the_format(resnet, tmp_path):
    assert resnet.save(str(tmp_path / "r.md")) and (tmp_path / "r.md").read_text() == resnet.to_markdown()
    assert json.loads((Path(resnet.save(str(tmp_path / "r.json")))).read_text())["verdict"]["axis"] == "data"
    assert (Path(resnet.save(str(tmp_path / "r.html")))).read_text().startswith("<!DOCTYPE html>")
    cell = resnet._repr_html_()
    assert cell.startswith('<div class="trainscope-report"><style>') and "<html" not in cell


@pytest.mark.skipif(
    not shutil.which("chromium"), reason="headless Chromium is not installed (apt-get install chromium)"
)
def test_html_report_renders_in_headless_chromium(resnet, tmp_path):
    page = tmp_path / "run.html"
    resnet.save(str(page))
    shot = tmp_path / "run.png"
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1150,2400",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1150, 2400) and len(png) > 100_000  # a page with pictures, not a blank one
    if os.environ.get("TRAINSCOPE_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["TRAINSCOPE_KEEP_SCREENSHOT"])


def test_import_is_cheap():
    # `import trainscope.api` loads no analyzer, reader or UI module until a function runs.
    code = "import sys, trainscope.api; print(sorted(m for m in sys.modules if m.startswith('trainscope.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["trainscope.api"]


def test_watch_follows_a_live_process_until_it_exits():
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        with ts.watch(pid=job.pid, interval=0.25, duration=30) as live:
            samples = list(live)  # ends when the process exits, long before the 30 s limit
    finally:
        job.wait(timeout=30)
    assert samples and all(s.snapshot.host is not None for s in samples)
    assert samples[-1].status.state in ("warming_up", "ready") and live.summary() is not None
    with pytest.raises(ts.BadInput, match="no process"):
        ts.watch(pid=2**22 + 12345)


def test_importing_the_api_loads_no_heavy_module():
    """`import trainscope.api` stays cheap (issue: under 0.2 s): the package resolves its names on
    first use, so importing it pulls in neither numpy, nor Textual, nor any analyzer or reader."""
    code = (
        "import sys, trainscope.api as ts; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'textual', 'msgspec', 'psutil') or m.startswith(('trainscope.analyzers', "
        "'trainscope.collectors', 'trainscope.reports', 'trainscope.api.'))); print(heavy); "
        "ts.BadInput; print(sorted(m for m in sys.modules if m.startswith('trainscope.api.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["[]", "['trainscope.api.errors']"]
