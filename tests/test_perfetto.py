"""The Perfetto export: the A100 trace with the findings as tracks, read back with HTA's parser and
with trainscope's own reader; the finding's intervals re-derived from the raw JSON by hand."""

from __future__ import annotations

import functools
import gzip
import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import DATA
from tests.conftest import KINETO

NSYS = DATA / "nsys"

A100 = KINETO / "hta_a100_control.json.gz"


@functools.cache
def exported(tmp: str, name: str) -> str:
    """`trainscope analyze KINETO/name --format json -q --perfetto OUT` in a process of its own, run
    once per folder and trace: the tests that only read an export share it."""
    out = f"{tmp}/{name}.perfetto.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainscope",
            "analyze",
            str(KINETO / name),
            "--format",
            "json",
            "-q",
            "--perfetto",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> str:
    """The module's folder of shared exports (``exported(exports, name)``)."""
    return str(tmp_path_factory.mktemp("perfetto"))


@pytest.fixture(scope="module")
def export(exports) -> str:
    return exported(exports, A100.name)


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, j = [], 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


@functools.cache
def comm_not_overlapped_by_hand() -> tuple[int, list[tuple[int, int]]]:
    """NCCL kernel time outside every other kernel, inside the ProfilerStep ranges, in raw-JSON ns,
    and the raw file's baseTimeNanoseconds (to line the export's times up with the raw ones)."""
    with gzip.open(A100, "rt") as f:
        raw = json.load(f)
    events = raw["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X" and "dur" in e]

    def us_to_ns(v) -> int:  # exact for integer µs (a float of 1.66e15 µs × 1000 would lose the ns)
        return v * 1000 if isinstance(v, int) else round(v * 1000)

    def ns(e) -> tuple[int, int]:
        return us_to_ns(e["ts"]), us_to_ns(e["ts"]) + us_to_ns(e["dur"])

    kernels = [e for e in xs if e.get("cat") == "kernel"]
    nccl = _union([ns(e) for e in kernels if e["name"].startswith("nccl")])
    other = _union([ns(e) for e in kernels if not e["name"].startswith("nccl")])
    steps = sorted(ns(e) for e in xs if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    alone = _subtract(nccl, other)
    inside = [(max(s, a), min(e, b)) for s, e in alone for a, b in steps if max(s, a) < min(e, b)]
    return int(raw.get("baseTimeNanoseconds", 0)), inside


def _finding_slices(doc: dict, finding: str) -> list[dict]:
    return [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "trainscope_finding" and e["args"].get("finding") == finding
    ]


def test_the_export_reads_back_in_trainscope_with_the_findings_tracks(export):
    from trainscope.collectors import open_traces

    doc = json.load(open(export))
    t = open_traces(export).traces[0]
    # The verdict's own finding has its track, holding the time of its category inside the steps
    # (memory-bound kernels are GPU compute time: the breakdown's compute share of the steps).
    verdict = doc["trainscope"]["verdict"]["bottleneck"]
    assert verdict == "machine/bandwidth"
    track = _finding_slices(doc, verdict)
    analysis = json.loads(
        subprocess.run(
            [sys.executable, "-m", "trainscope", "analyze", str(A100), "--format", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    compute_ns = sum(s["ms"]["compute"] for s in analysis["steps"]) * 1e6
    # Merged, not one slice per kernel (16,858 intervals before): each slice says how much of it is the
    # finding's own time, and those add up to the whole category time (nothing capped, nothing lost).
    assert 6 <= len(track) <= 1_000
    got_ns = sum(e["args"]["time_us"] for e in track) * 1e3
    assert 0.99 * compute_ns <= got_ns <= 1.01 * compute_ns
    assert sum(e["args"]["intervals"] for e in track) > 5_000
    assert all(e["args"]["time_us"] <= e["dur"] for e in track)
    # The unoverlapped communication (the runner-up) against the raw JSON: every interval found by hand
    # lies inside one slice of its track, and the slices' own time is theirs.
    base, expected = comm_not_overlapped_by_hand()
    comm = sorted(_finding_slices(doc, "comm/unoverlapped"), key=lambda e: e["ts"])
    spans = [(round(e["ts"] * 1e3) + base, round((e["ts"] + e["dur"]) * 1e3) + base) for e in comm]
    starts = [s for s, _ in spans]
    import bisect

    inside = 0
    for s, e in expected:
        i = bisect.bisect_right(starts, s) - 1
        inside += i >= 0 and spans[i][0] - 1 <= s and e <= spans[i][1] + 1
    assert inside >= 0.99 * len(expected)
    total_exp = sum(e - s for s, e in expected)
    total_got = sum(e["args"]["time_us"] for e in comm) * 1e3
    assert total_got > 10_000_000  # > 10 ms of unoverlapped communication
    assert abs(total_got - total_exp) <= 0.01 * total_exp
    # The verdict range covers the steps; the step markers are there; the kernels all came back, and
    # trainscope's reader takes no finding for an annotation of the trace (its own category).
    names = [t.strings[i] for i in t.annotations.name]
    assert not any(n.startswith(("finding ", "verdict ")) for n in names)
    assert any(e.get("name", "").startswith("verdict machine") for e in doc["traceEvents"])
    assert sum(1 for e in doc["traceEvents"] if e.get("cat") == "trainscope_step") == 6
    with gzip.open(A100, "rt") as f:
        raw_kernels = sum(1 for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X")
    assert len(t.kernels) == raw_kernels
    # trainscope's own categories are known to its reader: re-reading the export warns of none of them.
    assert not any("trainscope_" in w for w in t.warnings), t.warnings
    # The findings are a small share of the file (the issue: +29 % events from one slice per kernel).
    ours = sum(1 for e in doc["traceEvents"] if e.get("cat") == "trainscope_finding")
    assert ours <= 0.02 * len(doc["traceEvents"])


def test_the_export_loads_in_holistic_trace_analysis(export):
    hta = pytest.importorskip("hta.trace_analysis")
    ta = hta.TraceAnalysis(trace_files={0: export}, include_last_profiler_step=True)
    df = ta.t.get_trace(0)
    sym = ta.t.symbol_table.get_sym_table()
    doc = json.load(open(export))
    pid = doc["trainscope"]["findings_pid"]
    comm_tid = 1 + doc["trainscope"]["findings"].index("comm/unoverlapped")
    rows = df[(df["pid"] == pid) & (df["tid"] == comm_tid)]
    assert len(rows) == len(_finding_slices(doc, "comm/unoverlapped"))
    assert len(rows) and all(sym[i].startswith("finding comm/unoverlapped") for i in rows["name"])
    _origin, expected = comm_not_overlapped_by_hand()
    total_exp_us = sum(e - s for s, e in expected) / 1e3
    # The merged slices cover every interval (gaps included): at least the finding's time.
    assert float(rows["dur"].sum()) >= 0.99 * total_exp_us
    kernels = df[df["stream"] >= 0]
    assert len(kernels) >= 8568


def _analyze_resnet(*args: str, **run) -> subprocess.CompletedProcess:
    """`trainscope analyze` of the bundled ResNet-50 trace, JSON, in a process of its own."""
    trace = str(KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz")
    argv = [sys.executable, "-m", "trainscope", "analyze", trace, "--format", "json", *args]
    return subprocess.run(argv, capture_output=True, timeout=300, **run)


def test_perfetto_to_a_path_that_cannot_be_written_is_one_line_and_exit_2(tmp_path):
    r = _analyze_resnet("--perfetto", str(tmp_path / "no" / "such" / "dir.json"), text=True)
    # Refused before the trace is read (the output is checked first): one line naming the option and why.
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--perfetto" in r.stderr and "its folder does not exist" in r.stderr, r.stderr


def test_x_in_the_app_writes_the_same_export(tmp_path, monkeypatch):
    import asyncio

    from tests.test_tui import RESNET
    from tests.test_tui import _ready
    from tests.test_tui import session
    from trainscope.tui.app import AnalyzeApp

    monkeypatch.chdir(tmp_path)

    async def go():
        app = AnalyzeApp(str(KINETO / RESNET), session=session(RESNET))
        async with app.run_test(size=(100, 30)) as pilot:
            await _ready(app, pilot)
            await pilot.press("x")
            for _ in range(200):
                await pilot.pause(0.05)
                if app.exported:
                    break
            return app.exported

    out = tmp_path / "resnet50_v100_num_workers_0.perfetto.json"
    assert asyncio.run(go()) == [str(out)]
    doc = json.loads(out.read_text())
    assert doc["trainscope"]["findings"][0] == "data/input-wait"
    pid = doc["trainscope"]["findings_pid"]
    tracks = {
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e.get("pid") == pid and e["name"] == "thread_name"
    }
    assert "verdict" in tracks and "data/input-wait (high)" in tracks


@pytest.mark.parametrize(
    "name",
    [
        "hta_cpu_only.pt.trace.json.gz",
        "hta_mi250_minitoy_train.json.gz",
        "hta_rank_non_gpu.json.gz",
        "tracelens_mi300x_resnet_ckpt.json.gz",
    ],
)
def test_odd_traces_export_and_read_back_whole(name, tmp_path):
    """CPU-only, AMD, non-GPU and NCCL-on-ROCm traces: every event and every finding interval comes back."""
    from trainscope.analyzers.rules import Rules
    from trainscope.collectors import open_traces
    from trainscope.reports.perfetto import FINDING_PREFIX
    from trainscope.reports.perfetto import finding_intervals
    from trainscope.reports.perfetto import write_perfetto
    from trainscope.tui.state import build_session

    s = build_session(str(KINETO / name), open_traces(str(KINETO / name)), Rules())
    r = s.ranks[s.main_rank]
    out = str(tmp_path / "x.json")
    write_perfetto(out, r.trace, r.analysis, r.doc, r.timeline)
    back = open_traces(out).traces[0]
    for table in ("kernels", "copies", "memsets", "runtime", "cpu_ops"):
        assert len(getattr(back, table)) == len(getattr(r.trace, table)), table
    doc = json.load(open(out))
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name")).startswith(FINDING_PREFIX)]
    cited = sum(len(finding_intervals(r.timeline, f["id"])) for f in r.doc["findings"])
    assert sum(e["args"]["intervals"] for e in slices) == cited and len(slices) <= cited
    # The export copies the input's own events: against the trace as read, before the invariant pass set
    # any marker aside (MI250: one 49 µs stub step). The findings are not annotations of the trace.
    as_read = open_traces(str(KINETO / name)).traces[0]
    assert len(back.annotations) == len(as_read.annotations)


def _phases(events: list[dict]) -> Counter:
    return Counter(str(e.get("ph")) for e in events)


@pytest.mark.parametrize(
    "name",
    [
        "resnet50_v100_num_workers_0.pt.trace.json.gz",
        "hta_a100_control.json.gz",
        "tl_mi300x_norm_layers_fwdbwd.json.gz",
    ],
)
def test_the_export_of_a_kineto_trace_keeps_every_input_event(name, exports):
    """Lossless: every event of the input (X, i, s, f, M, C …, with all its args) is in the export,
    unchanged and in order, with the input's top-level fields; the findings come on top."""
    with gzip.open(KINETO / name, "rt") as f:
        src = json.load(f)
    with open(exported(exports, name)) as f:
        doc = json.load(f)
    pid = doc["trainscope"]["findings_pid"]
    assert all(e.get("pid") != pid for e in src["traceEvents"])
    mine = [e for e in doc["traceEvents"] if e.get("pid") != pid]
    assert _phases(mine) == _phases(src["traceEvents"])
    assert mine == src["traceEvents"]
    assert {k: v for k, v in doc.items() if k not in ("traceEvents", "trainscope")} == {
        k: v for k, v in src.items() if k != "traceEvents"
    }
    findings = [e for e in doc["traceEvents"] if e.get("pid") == pid]
    assert sum(e["ph"] == "M" and e["name"] == "thread_name" for e in findings) == 1 + len(
        doc["trainscope"]["findings"]
    )


def test_the_resnet_export_counts_by_phase(exports):
    """The figures of the issue: the bundled ResNet-50 trace's 75,718 events, by phase, all exported."""
    with open(exported(exports, "resnet50_v100_num_workers_0.pt.trace.json.gz")) as f:
        doc = json.load(f)
    pid = doc["trainscope"]["findings_pid"]
    got = _phases([e for e in doc["traceEvents"] if e.get("pid") != pid])
    assert got == Counter({"X": 44_666, "i": 12_840, "s": 9_096, "f": 9_096, "M": 20})
    labels = [e for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_labels"]
    assert any(e["args"]["labels"] == "GPU 0" for e in labels)


def test_the_export_of_an_nsight_export_names_the_gpus_and_keeps_every_row(tmp_path):
    """No JSON to copy: written from the model; every row of every table comes back, the GPU process
    is named, and every finding interval is there (no cap)."""
    from trainscope.analyzers.rules import Rules
    from trainscope.collectors import open_traces
    from trainscope.reports.perfetto import FINDING_PREFIX
    from trainscope.reports.perfetto import finding_intervals
    from trainscope.reports.perfetto import write_perfetto
    from trainscope.tui.state import build_session

    path = str(NSYS / "cs336_small_train_step_a100.sqlite")
    s = build_session(path, open_traces(path), Rules())
    r = s.ranks[s.main_rank]
    out = str(tmp_path / "n.json")
    write_perfetto(out, r.trace, r.analysis, r.doc, r.timeline)
    doc = json.load(open(out))
    assert doc["trainscope"]["events"] == "written from trainscope's model"
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
    assert {f"GPU {d.id}" for d in r.trace.devices} <= names
    back = open_traces(out).traces[0]
    for table in ("kernels", "copies", "memsets", "runtime", "cpu_ops"):
        assert len(getattr(back, table)) == len(getattr(r.trace, table)), table
    got = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith(FINDING_PREFIX)]
    assert sum(e["args"]["intervals"] for e in got) == sum(
        len(finding_intervals(r.timeline, f["id"])) for f in r.doc["findings"]
    )


@pytest.mark.parametrize("cut", [None, 0.7])
def test_a_plain_file_is_copied_between_its_brackets_and_a_damaged_one_event_by_event(cut, tmp_path):
    """A plain .json that ends in a whole event array is copied as bytes (no parse); a truncated
    one goes through the validated stream: the export then holds the whole events the analysis read."""
    from trainscope.analyzers.rules import Rules
    from trainscope.collectors import open_traces
    from trainscope.reports.perfetto import _array_span
    from trainscope.reports.perfetto import write_perfetto
    from trainscope.tui.state import build_session

    raw = gzip.decompress((KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz").read_bytes())
    src = tmp_path / "r.json"
    src.write_bytes(raw if cut is None else raw[: int(len(raw) * cut)])
    assert (_array_span(str(src)) is None) == (cut is not None)
    s = build_session(str(src), open_traces(str(src)), Rules())
    r = s.ranks[s.main_rank]
    out = tmp_path / "x.json"
    write_perfetto(str(out), r.trace, r.analysis, r.doc, r.timeline)
    doc = json.loads(out.read_text())
    pid = doc["trainscope"]["findings_pid"]
    mine = [e for e in doc["traceEvents"] if e.get("pid") != pid]
    if cut is None:
        assert mine == json.loads(raw)["traceEvents"]
    else:
        from trainscope.collectors.kineto_stream import _EVENTS  # noqa: F401 (the reader's own view)

        back = open_traces(str(out)).traces[0]
        assert len(back.kernels) == len(r.trace.kernels) and len(back.cpu_ops) == len(r.trace.cpu_ops)
        assert 0 < len(mine) < len(json.loads(raw)["traceEvents"])


def test_the_cli_builds_the_timeline_once_for_the_export_and_the_html_report(tmp_path, monkeypatch, capsys, export):
    """``--perfetto`` and ``--report x.html`` take the report's timeline model (RankView.timeline):
    one model per command line, not one per renderer; the export is the same bytes as the app's."""
    from trainscope.analyzers.views import timeline
    from trainscope.cli import main

    built = []
    init = timeline.TimelineModel.__init__

    def counting(self, *a, **k):
        built.append(1)
        init(self, *a, **k)

    monkeypatch.setattr(timeline.TimelineModel, "__init__", counting)
    out, page = tmp_path / "a.perfetto.json", tmp_path / "a.html"
    args = ["analyze", str(A100), "--format", "json", "-q", "--perfetto", str(out), "--report", str(page)]
    assert main(args) == 0
    capsys.readouterr()
    assert len(built) == 1
    assert "Timeline of the median step" in page.read_text()
    with open(export, "rb") as f:
        assert f.read() == out.read_bytes()


@pytest.mark.parametrize("how", ["kernel", "blocks", "kernel-then-blocks"])
def test_the_events_are_copied_whole_however_the_bytes_move(how, tmp_path, monkeypatch):
    """The plain file's events move by ``copy_file_range`` where the kernel does it, by bounded
    blocks where it cannot (another OS, a file system that refuses, a failure half-way): the same
    bytes every way."""
    import errno
    import os

    from trainscope.reports import perfetto

    raw = gzip.decompress((KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz").read_bytes())
    src = tmp_path / "r.json"
    src.write_bytes(raw)
    real = getattr(os, "copy_file_range", None)
    if how == "kernel" and real is None:
        pytest.skip("no os.copy_file_range on this platform (the blocks cases cover it)")
    calls = []

    def fake(fd_in, fd_out, count, offset_src=None):  # copies 1 MiB at the output's offset, then refuses
        calls.append(count)
        if how == "blocks" or len(calls) > 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return os.write(fd_out, os.pread(fd_in, min(count, 1 << 20), offset_src))

    if how != "kernel":
        monkeypatch.setattr(os, "copy_file_range", fake, raising=False)
    monkeypatch.setattr(perfetto, "_COPY_BLOCK", 1 << 16)  # many blocks
    start, end, _top = perfetto._array_span(str(src))
    sink = perfetto._Sink(str(tmp_path / "out.json"))
    sink.write(b"head[")
    assert sink.copy_from(str(src), start, end - start)
    sink.write(b"]tail")
    sink.commit()
    assert (tmp_path / "out.json").read_bytes() == b"head[" + raw[start:end] + b"]tail"
    assert sink.written == len(b"head[") + end - start + len(b"]tail")
    if how == "kernel-then-blocks":
        assert len(calls) == 2  # 1 MiB by the "kernel", then the refusal, then the rest by blocks
    # a file shorter than the span (it changed since it was read): refused, not padded
    short = perfetto._Sink(str(tmp_path / "short.json"))
    assert not short.copy_from(str(src), start, len(raw))
    short.abort()


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_a_tail_cut_inside_a_character_still_finds_the_end_of_the_events(cut, tmp_path, monkeypatch):
    """The end of the event array is searched in the file's last bytes, decoded as UTF-8. A tail
    starting inside a multi-byte character ("é", "→") decoded to replacement characters, whose
    encoding is longer: the end came out 2 bytes late, the copy took "]," with it and the export was
    not JSON. Every cut inside a character gives the true end."""
    from trainscope.reports import perfetto

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op é→ {i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)
    ]
    raw = json.dumps({"traceEvents": events, "traceName": "t"}, ensure_ascii=False).encode()
    src = tmp_path / "u.json"
    src.write_bytes(raw)
    arrow = raw.rfind("→".encode(), 0, len(raw) - 20_000)  # three bytes: the cut lands on each of them
    monkeypatch.setattr(perfetto, "_TAILS", (len(raw) - (arrow + cut),))
    start, end, top = perfetto._array_span(str(src))
    assert raw[start:end] == raw[start : raw.rindex(b"]")] and raw[end - 1 : end] == b"}"
    assert json.loads(b"[" + raw[start:end] + b"]") == events and top == {"traceName": "t"}


def test_a_plain_file_with_text_that_is_not_unicode_exports_as_valid_json(tmp_path):
    """A plain .json whose strings hold a byte that is not UTF-8 and a lone surrogate: copying its
    bytes as they are wrote them into the export (invalid JSON for a strict reader); the export now
    goes through the stream reader and holds the visible repairs the analysis read."""
    from trainscope.analyzers.rules import Rules
    from trainscope.collectors import open_traces
    from trainscope.reports.perfetto import write_perfetto
    from trainscope.tui.state import build_session

    raw = gzip.decompress((KINETO / "resnet50_v100_num_workers_0.pt.trace.json.gz").read_bytes())
    name = b'"name": "aten::conv2d"'
    assert name in raw
    src = tmp_path / "r.json"
    src.write_bytes(raw.replace(name, b'"name": "aten::conv2d\xff\\ud800"', 1))
    s = build_session(str(src), open_traces(str(src)), Rules())
    r = s.ranks[s.main_rank]
    assert any("not Unicode" in w for w in r.trace.warnings)
    out = tmp_path / "x.json"
    write_perfetto(str(out), r.trace, r.analysis, r.doc, r.timeline)
    data = out.read_bytes()
    data.decode("utf-8")  # strict: every byte is UTF-8
    doc = json.loads(data)
    names = {e.get("name") for e in doc["traceEvents"]}
    assert "aten::conv2d\\xff\\ud800" in names
    back = open_traces(str(out)).traces[0]
    assert len(back.kernels) == len(r.trace.kernels) and len(back.cpu_ops) == len(r.trace.cpu_ops)
