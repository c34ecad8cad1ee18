"""On-demand capture in `trainscope watch`: the job's injected hook runs torch.profiler over its
next N iterations when asked through the two-way step socket, the trace is diagnosed by the
analyze engine, and every way a capture cannot happen ends in one line that says why.

The end-to-end tests run real CPU training jobs (tests/jobs/capture_job.py) under the watch; their
asserts are on counts and strings (markers in the trace, the verdict line, exit codes, the job's
own lines), never on timings. The dashboard test uses a scripted receiver and a recorded trace.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.watching import watch_argv
from trainscope.api.capture import Capture
from trainscope.api.capture import CaptureController
from trainscope.api.capture import CaptureOptions

HERE = pathlib.Path(__file__).parent
JOB = HERE / "jobs" / "capture_job.py"
CPU_TRACE = HERE / "data" / "kineto" / "hta_cpu_only.pt.trace.json.gz"


def watch(tmp_path, *args: str, job_args: tuple[str, ...] = (), timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = watch_argv(*args, job=[sys.executable, str(JOB), *job_args])
    # TMPDIR: the watch's run folder (and anything a killed watch leaves) stays under tmp_path.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


def profiler_steps(path: pathlib.Path) -> list[str]:
    events = json.loads(path.read_text())["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_capture_at_seconds_writes_a_trace_of_n_steps_and_prints_its_verdict(tmp_path):
    cap_dir = tmp_path / "DIR"
    p = watch(
        tmp_path,
        "--capture-steps",
        "3",
        "--capture-at",
        "3",
        "--capture-dir",
        str(cap_dir),
        job_args=("--steps", "150", "--compute-ms", "30", "--lines", "5", "--exit", "3"),
    )
    assert p.returncode == 3, p.stderr[-2000:]  # the job's exit code, unchanged
    traces = sorted(cap_dir.glob("capture-1-pid*.pt.trace.json"))
    assert len(traces) == 1, list(cap_dir.iterdir())
    # Step 0 is the profiler's warm-up (recorded and discarded: its start-up cost lands there).
    assert profiler_steps(traces[0]) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("trainscope: capture 1 ("))
    assert "3 steps at" in line and f"trace {traces[0]}" in line
    assert "profiler overhead" in line and "per step" in line  # the cost, next to the verdict
    assert "step p50" in line  # the analyze engine's verdict line
    assert any(ln.startswith("trainscope: capture 1 overhead") and "per step" in ln for ln in p.stdout.splitlines())
    # The job's own output: all its lines, in order, and nothing from the profiler on its stderr.
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("line ")] == [f"line {i}/5" for i in range(1, 6)]
    assert all(ln.startswith("trainscope:") for ln in p.stderr.splitlines() if ln.strip()), p.stderr[-2000:]


@pytest.mark.parametrize(
    "job_args,why",
    [
        (("--own-profiler", "--steps", "150"), "own torch.profiler is running"),
        (("--no-torch", "--steps", "100"), "has not iterated a torch DataLoader"),
        (("--steps", "40", "--compute-ms", "40"), "the job exited after"),
    ],
)
def test_no_capture_ends_cleanly_with_one_line_saying_why(tmp_path, job_args, why):
    # Mid-capture exit: 200 steps asked of a job with 40 (the at-trigger waits for 8 of them).
    steps = "200" if "40" in job_args else "3"
    p = watch(
        tmp_path,
        "--capture-steps",
        steps,
        "--capture-at",
        "0.5",
        "--capture-dir",
        str(tmp_path / "c"),
        "--format",
        "json",
        job_args=(*job_args, "--exit", "0"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    caps = [d for d in map(json.loads, p.stdout.splitlines()) if d["type"] == "capture"]
    assert len(caps) == 1 and caps[0]["status"] in ("refused", "aborted"), caps
    assert why in caps[0]["why"], caps[0]["why"]
    assert not list((tmp_path / "c").glob("*.json"))
    assert "Traceback" not in p.stderr
    summary = json.loads(p.stdout.splitlines()[-1])
    assert summary["type"] == "summary" and summary["captures"][0]["why"] == caps[0]["why"]


def captured(msg: dict, pid: int, steps_ns: list[int], before_ns: list[int], **more) -> list[dict]:
    """What a step hook answers to capture request ``msg`` it carried out: started, then done with the
    captured steps' and the steps before's durations (``more``: the done message's other fields)."""
    started = {"type": "capture", "id": msg["id"], "status": "started", "pid": pid}
    return [started, {**started, "status": "done", "steps_ns": steps_ns, "before_ns": before_ns, **more}]


class ScriptedReceiver:
    """Stands for the step socket: one stepping process that answers a request as a hook would."""

    def __init__(self, trace: pathlib.Path | None) -> None:
        self.trace, self.sent, self.replies = trace, [], []

    def capture_target(self):
        return 4242, ""

    def send(self, pid, msg) -> bool:
        self.sent.append((pid, msg))
        if self.trace is not None:
            shutil.copy(self.trace, msg["path"])
            self.replies += captured(
                msg,
                pid,
                [30_000_000, 32_000_000, 31_000_000],
                [20_000_000] * 16,
                start_ns=5_000_000,
                export_ns=40_000_000,
                time_limit=False,
            )
        return True

    def drain_capture_messages(self):
        out, self.replies = self.replies, []
        return out


def plain_trace(tmp_path) -> pathlib.Path:
    out = tmp_path / "recorded.pt.trace.json"
    out.write_bytes(gzip.decompress(CPU_TRACE.read_bytes()))
    return out


def test_controller_limits_captures_and_measures_overhead(tmp_path):
    rx = ScriptedReceiver(plain_trace(tmp_path))
    c = CaptureController(rx, str(tmp_path / "caps"), CaptureOptions(steps=3, max_captures=1))
    first = c.request("key", 1.0)
    assert first.status == "requested" and rx.sent[0][1]["steps"] == 3
    second = c.request("key", 1.5)
    assert second.status == "refused" and "one capture at a time" in second.why
    c.tick(2.0)
    c.finish()
    done = [x for x in c.snapshot() if x.id == 1][0]
    assert done.status == "done", done.why
    d, around, pct = done.overhead()
    assert (d, around) == (31.0, 20.0) and round(pct) == 55
    assert "+55 % per step" in done.overhead_text() and "trace export 0.04 s" in done.overhead_text()
    third = c.request("key", 3.0)
    assert third.status == "refused" and "--capture-max 1" in third.why
    # The --report Markdown: a section per capture, the refused one saying why.
    from trainscope.analyzers.live.engine import LiveAnalyzer
    from trainscope.reports.live import summary_markdown
    from trainscope.reports.live import summary_text

    st = LiveAnalyzer().summary()
    info = {"target": "job", "captures": [x.to_dict() for x in c.snapshot()]}
    md = summary_markdown(st, info)
    assert "## Capture 1: key" in md and r"| overhead | overhead \+55 % per step" in md and "Step breakdown:" in md
    assert "## Capture 2: key" in md and "No capture: capture 1 is still requested: one capture at a time" in md
    assert "capture 3 (key): no capture: --capture-max 1 reached" in summary_text(st, info)


def test_the_c_key_fills_the_capture_tab(tmp_path):
    asyncio.run(_test_the_c_key_fills_the_capture_tab(tmp_path))


async def _test_the_c_key_fills_the_capture_tab(tmp_path):
    from tests.test_watch_app import data_bound_samples
    from tests.test_watch_app import statuses
    from trainscope import api
    from trainscope.tui.watch_app import SampleMessage
    from trainscope.tui.watch_app import WatchApp

    rx = ScriptedReceiver(plain_trace(tmp_path))
    ctl = CaptureController(rx, str(tmp_path / "caps"), CaptureOptions(steps=3))
    app = WatchApp(
        title="python train.py",
        interval=1.0,
        clock=lambda: 100.0,
        launched=True,
        on_capture=lambda: ctl.request("key", 5.0, "DATA-BOUND · step 200.0 ms"),
    )
    items = statuses(data_bound_samples())
    async with app.run_test(size=(140, 44)) as pilot:
        for st, s in items[:6]:
            app.post_message(SampleMessage(st, s))
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        assert app.query_one("#tabs").active == "tab-capture"
        text = str(app.query_one("#capture-text").render())
        assert "capture 1 · key" in text and "asked the job for its next 3 iterations" in text
        ctl.tick(6.0)  # the sampler's next tick reads the job's replies
        ctl.finish()  # waits for the analysis worker
        for st, s in items[6:8]:
            app.post_message(SampleMessage(st, s, ctl.snapshot()))
        await pilot.pause()
        await pilot.pause()
        text = str(app.query_one("#capture-text").render())
        report = api.analyze(str(tmp_path / "recorded.pt.trace.json"))
        assert "trace says:" in text and report.verdict_line().removeprefix("trainscope: ").split(" — ")[0] in text
        assert "counters then:  DATA-BOUND · step 200.0 ms" in text
        assert "overhead +55 % per step" in text and "step breakdown:" in text
        # The cost is stated next to the verdict, not only further down.
        trace_says = next(ln for ln in text.splitlines() if "trace says:" in ln)
        assert trace_says.endswith("(profiler overhead +55 % per step)"), trace_says


def test_c_without_the_hook_says_why(tmp_path):
    async def go():
        from trainscope.tui.watch_app import WatchApp

        app = WatchApp(title="pid 1", interval=1.0, clock=lambda: 100.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("c")
            await pilot.pause()
            return str(app.query_one("#capture-text").render())

    assert "captures need the step hook" in asyncio.run(go())


def test_capture_line_and_dict_for_a_refusal():
    c = Capture(2, "verdict change", 5, 12.0, status="refused", why="the job has not imported torch")
    assert c.line() == "capture 2 (verdict change): no capture: the job has not imported torch"
    assert c.to_dict()["overhead"] is None and c.finished


def test_pid_attach_with_the_opt_in_hook_captures_too(tmp_path):
    """`watch --pid` of a job that called step_hook.install() itself: the same two-way socket."""
    job = tmp_path / "job.py"
    job.write_text(
        "import trainscope.collectors.step_hook as step_hook\n"
        "step_hook.install()\n"
        f"import runpy, sys\nsys.argv = ['capture_job', '--steps', '400', '--compute-ms', '30']\n"
        f"runpy.run_path({str(JOB)!r}, run_name='__main__')\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the job's hook and the watch meet in tmp_path/trainscope-UID
    child = subprocess.Popen(
        [sys.executable, str(job)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        cap_dir = tmp_path / "caps"
        p = subprocess.run(
            watch_argv(
                "--pid",
                str(child.pid),
                "--capture-steps",
                "3",
                "--capture-at",
                "1",
                "--capture-dir",
                str(cap_dir),
                "--duration",
                "60",
            ),
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        traces = list(cap_dir.glob(f"capture-1-pid{child.pid}.pt.trace.json"))
        assert len(traces) == 1 and len(profiler_steps(traces[0])) == 3, p.stdout[-2000:]
        assert any(ln.startswith("trainscope: capture 1 (at 1 s, 3 steps at") for ln in p.stdout.splitlines())
    finally:
        child.kill()
        child.wait()


def cpu_steps(waits_pct, step_ms=25.0, steps_per=10):
    from trainscope.collectors.samples import Snapshot
    from trainscope.collectors.samples import StepSample

    out = []
    for i, (w, ms) in enumerate(zip(waits_pct, step_ms if isinstance(step_ms, list) else [step_ms] * len(waits_pct))):
        total = int(steps_per * ms * 1e6)
        out.append(Snapshot(t=i * 0.5, dt=0.5, step=StepSample(steps_per, int(total * w / 100), total), step_mode="on"))
    return out


def drive(controller, snaps):
    from trainscope.analyzers.live.engine import LiveAnalyzer

    a = LiveAnalyzer()
    for s in snaps:
        controller.tick(s.t, a.add(s), s)


def test_verdict_change_trigger_fires_once_the_shown_verdict_changes(tmp_path):
    rx = ScriptedReceiver(None)  # requests go out; the job never answers in this test
    c = CaptureController(rx, str(tmp_path), CaptureOptions(steps=2, on=("verdict-change",)))
    drive(c, cpu_steps([60.0] * 30 + [1.0] * 120))  # data-bound, then the step itself (after the 5 s hold)
    caps = c.snapshot()
    assert [x.trigger for x in caps] == ["verdict change"], caps
    assert caps[0].counters.startswith("COMPUTE-BOUND") and len(rx.sent) == 1


def test_slowdown_trigger_compares_with_the_running_median(tmp_path):
    rx = ScriptedReceiver(None)
    c = CaptureController(rx, str(tmp_path), CaptureOptions(steps=2, on=("slowdown",)))
    drive(c, cpu_steps([1.0] * 30, step_ms=[25.0] * 20 + [30.0] * 5 + [80.0] * 5))
    caps = c.snapshot()
    assert len(caps) == 1 and caps[0].trigger.startswith("slowdown: step 80.0 ms > 1.5 × median 25.0 ms"), caps
    assert caps[0].requested_t == 12.5  # the first 80 ms interval; 30 ms (1.2 ×) did not fire


def test_a_replay_lists_the_capture_instants_of_the_recording():
    from trainscope.analyzers.live.engine import LiveAnalyzer
    from trainscope.collectors.samples import Snapshot
    from trainscope.tui.watch_app import WatchApp

    snaps = [
        Snapshot(t=float(i), dt=1.0, notes=("capture 1: started at 3.0 s (CPU)",) if i == 3 else ()) for i in range(6)
    ]
    a = LiveAnalyzer()
    app = WatchApp(title="replay", replay=True, clock=lambda: 100.0)
    app.preload([(a.add(s), s) for s in snaps])

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("3")
            await pilot.pause()
            return str(app.query_one("#capture-text").render())

    text = asyncio.run(go())
    assert "Captures noted in the recording" in text and "3.0 s  capture 1: started at 3.0 s (CPU)" in text


DLRM = HERE / "data" / "kineto" / "hta_dlrm_ws128_2ranks"


class TwoRanks:
    """Stands for the step socket of a two-rank job: each rank's hook answers for itself; ``refuse``
    names the ranks whose hook says no."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        self.refuse, self.sent, self.replies = refuse, [], []
        self.targets = [(101, "0"), (102, "1")]

    def capture_targets(self):
        return list(self.targets), ""

    def send(self, pid, msg) -> bool:
        self.sent.append((pid, msg))
        rank = dict(self.targets)[pid]
        if rank in self.refuse:
            self.replies.append({"type": "capture", "id": msg["id"], "pid": pid, "status": "refused", "why": "busy"})
            return True
        pathlib.Path(msg["path"]).write_bytes(gzip.decompress((DLRM / f"rank{rank}.json.gz").read_bytes()))
        self.replies += captured(msg, pid, [600_000_000 + 10_000_000 * int(rank)] * 3, [500_000_000] * 8)
        return True

    def drain_capture_messages(self):
        out, self.replies = self.replies, []
        return out


def test_every_rank_is_captured_and_the_set_is_analyzed_as_ranks(tmp_path):
    rx = TwoRanks()
    c = CaptureController(rx, str(tmp_path / "caps"), CaptureOptions(steps=3))
    first = c.request("key", 1.0)
    assert first.pids == (101, 102) and first.pid == 101
    folder = tmp_path / "caps" / "capture-1"
    assert [m["path"] for _, m in rx.sent] == [
        str(folder / "rank0-pid101.pt.trace.json"),
        str(folder / "rank1-pid102.pt.trace.json"),
    ]
    c.tick(2.0)
    c.finish()
    done = c.snapshot()[0]
    assert done.status == "done", done.why
    assert done.path == str(folder)
    # The overhead is the reference (lowest) rank's: 600 ms during against 500 ms around.
    assert done.overhead()[:2] == (600.0, 500.0)
    # The rank set's own reading: one line per rank, then the rank story's straggler line (the same
    # line the analysis of the rank set leads its Stragglers section with).
    assert done.ranks[0].startswith("rank 0: step p50 615.12 ms") and done.ranks[1].startswith("rank 1: step p50")
    assert done.ranks[2].startswith("straggler: rank 1 is last at 5 of 5 collectives"), done.ranks[2]
    assert "the others wait 15.9 ms per step for it" in done.ranks[2]
    d = done.to_dict()
    assert d["pids"] == [101, 102] and d["ranks"] == list(done.ranks)
    from trainscope.analyzers.live.engine import LiveAnalyzer
    from trainscope.reports.live import summary_markdown

    md = summary_markdown(LiveAnalyzer().summary(), {"target": "job", "captures": [d]})
    assert "2 ranks (pids 101, 102)" in md and "Ranks:" in md and "- straggler: rank 1 is last at 5 of 5" in md


def test_the_end_of_a_watch_lists_a_captures_ranks_in_text_and_html(tmp_path):
    """The end-of-watch summary on stdout and ``--report x.html`` (the same text as a page) list a
    rank set's per-rank lines and its straggler line, as the headless lines and the Markdown
    report do (they listed only the capture's headline and overhead)."""
    from trainscope.analyzers.live.engine import LiveAnalyzer
    from trainscope.reports import formats
    from trainscope.reports.live import summary_text
    from trainscope.reports.renderers import WatchSummary

    rx = TwoRanks()
    c = CaptureController(rx, str(tmp_path / "caps"), CaptureOptions(steps=3))
    c.request("key", 1.0)
    c.tick(2.0)
    c.finish()
    done = c.snapshot()[0]
    assert done.status == "done" and len(done.ranks) == 3, done.why
    st, info = LiveAnalyzer().summary(), {"target": "job", "captures": [done.to_dict()]}
    text = summary_text(st, info)
    assert "      rank 0: step p50 615.12 ms" in text and "      rank 1: step p50" in text
    assert "      straggler: rank 1 is last at 5 of 5 collectives" in text
    page = tmp_path / "w.html"
    formats.write(str(page), WatchSummary(st, info).output())
    assert "straggler: rank 1 is last at 5 of 5 collectives" in page.read_text()


def test_a_rank_that_refuses_is_named_and_the_others_are_still_analyzed(tmp_path):
    c = CaptureController(TwoRanks(refuse=("1",)), str(tmp_path / "caps"), CaptureOptions(steps=3))
    c.request("key", 1.0)
    c.tick(2.0)
    notes = c.drain_notes()
    c.finish()
    done = c.snapshot()[0]
    assert done.status == "done", done.why
    assert done.ranks[-1] == "rank 1: no trace (refused: busy)"
    assert any("1 of 2 ranks captured; rank 1: refused: busy" in n for n in notes), notes
    # Every rank refusing: no capture, the reason once with the ranks that gave it.
    c2 = CaptureController(TwoRanks(refuse=("0", "1")), str(tmp_path / "c2"), CaptureOptions(steps=3))
    c2.request("key", 1.0)
    c2.tick(2.0)
    c2.finish()
    cap = c2.snapshot()[0]
    assert cap.status == "refused" and cap.why == "rank 0, rank 1: busy" and cap.path is None


def test_when_no_rank_writes_a_trace_every_ranks_reason_is_said(tmp_path):
    """Rank 0's job exits mid-capture while rank 1's hook refuses (its own profiler runs): the
    line names both reasons, not only the lowest rank's (which hid rank 1's)."""

    class Mixed(TwoRanks):
        def send(self, pid, msg) -> bool:
            self.sent.append((pid, msg))
            rank = dict(self.targets)[pid]
            if rank == "0":
                self.replies += [
                    {"type": "capture", "id": msg["id"], "status": "started", "pid": pid},
                    {
                        "type": "capture",
                        "id": msg["id"],
                        "pid": pid,
                        "status": "aborted",
                        "why": "the job exited after 88 of 500 captured iterations",
                    },
                ]
            else:
                self.replies.append(
                    {
                        "type": "capture",
                        "id": msg["id"],
                        "pid": pid,
                        "status": "refused",
                        "why": "its own torch.profiler is running",
                    }
                )
            return True

    c = CaptureController(Mixed(), str(tmp_path / "caps"), CaptureOptions(steps=500))
    c.request("key", 1.0)
    c.tick(2.0)
    c.finish()
    cap = c.snapshot()[0]
    assert cap.status == "aborted" and cap.path is None
    assert cap.why == (
        "rank 0: the job exited after 88 of 500 captured iterations; rank 1: its own torch.profiler is running"
    )


def test_capture_ranks_lowest_asks_one_process(tmp_path):
    rx = TwoRanks()
    c = CaptureController(rx, str(tmp_path / "caps"), CaptureOptions(steps=3, ranks="lowest"))
    c.request("key", 1.0)
    assert [pid for pid, _ in rx.sent] == [101]
    assert rx.sent[0][1]["path"] == str(tmp_path / "caps" / "capture-1-pid101.pt.trace.json")
    c.tick(2.0)
    c.finish()
    done = c.snapshot()[0]
    assert done.status == "done" and done.pids == (101,)


def test_a_captures_evidence_line_gives_the_threshold_its_unit():
    """The Capture tab, the headless line and --report print a capture's evidence as analyze's
    Markdown table does: the threshold with its unit ("≥ 15 % of step time", not "≥ 15")."""
    from trainscope.api.analysis import analyze
    from trainscope.api.capture import _report_fields

    report = analyze(str(DLRM))
    fields = _report_fields(report)
    ev = [e for e in report.to_dict()["verdict"]["evidence"][:6] if e["threshold"] and e["unit"]]
    assert ev, "the DLRM pair's verdict has thresholded evidence with a unit"
    for e in ev:
        line = next(x for x in fields["evidence"] if f" {e['metric']}: " in x)
        assert line.endswith(f"{e['threshold']} {e['unit']}"), line
    assert "✔ communication with no compute running: 24.51 % of step time ≥ 15 % of step time" in fields["evidence"]


def test_a_rank_sets_capture_says_whose_verdict_it_shows():
    """A capture of several ranks shows the rank set's report body, one rank's verdict, whose
    summary speaks of "this rank": the summary names the rank (rank 1 on the DLRM pair, the
    report's main rank); a one-rank capture's summary is the verdict's as it is."""
    from trainscope.api.analysis import analyze
    from trainscope.api.capture import _report_fields

    report = analyze(str(DLRM))
    main_rank = report.to_dict()["rank"]
    assert main_rank == 1
    fields = _report_fields(report)
    assert fields["summary"] == f"rank 1's trace: {report.to_dict()['verdict']['summary']}"
    assert fields["verdict_line"] == f"{report.verdict_line()} (rank 1's trace)"  # the headless line's
    one = analyze(str(HERE / "data" / "kineto" / "hta_mi250_minitoy_train.json.gz"))
    assert _report_fields(one)["summary"] == one.to_dict()["verdict"]["summary"]
    assert _report_fields(one)["verdict_line"] == one.verdict_line()
