"""The run history (trainscope/api/store.py, `runs`, `baseline`, `analyze --save`, `diff RUN RUN`,
`diff --against baseline`), the statistical gate on recorded traces, and projected against achieved."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import trainscope.api as ts
from tests.conftest import KINETO
from tests.conftest import profile_linear_on_cpu
from tests.conftest import write_json_gz
from trainscope.api.store import MIGRATIONS
from trainscope.api.store import SCHEMA_VERSION

CPU = os.path.join(os.path.dirname(__file__), "data", "cpu")
SLOW, FAST = os.path.join(CPU, "slow.pt.trace.json.gz"), os.path.join(CPU, "fast.pt.trace.json.gz")
LINEAR = str(KINETO / "param_linear_2080ti.json.gz")


def cli(*args: str, env: dict | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainscope", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def _raw_step_ms(path: str) -> list[float]:
    with gzip.open(path) as fh:
        ev = json.load(fh)["traceEvents"]
    steps = {}
    for e in ev:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X":
            steps.setdefault(e["name"], e["dur"] / 1e3)
    return [steps[k] for k in sorted(steps, key=lambda n: int(n.split("#")[1]))]


# -- recorded traces for the gate -----------------------------------------------------------------------


def recut(doc: dict, bounds_us: list[tuple[float, float]], keep: list[int], scale: float, marker: tuple) -> dict:
    """A recording of the steps ``keep`` of a real trace, back to back, every event inside a step
    stretched by ``scale`` about the step's start, with ProfilerStep#k ranges over the kept steps (as
    torch.profiler's schedule writes them). Events outside the kept steps are left out."""
    starts = np.array([b[0] for b in bounds_us])
    ends = np.array([b[1] for b in bounds_us])
    new_start, t = {}, bounds_us[keep[0]][0]
    for i in keep:
        new_start[i] = t
        t += (ends[i] - starts[i]) * scale
    out = []
    for e in doc["traceEvents"]:
        if "ts" not in e or e.get("ph") == "M":
            out.append(e)
            continue
        ts_ = float(e["ts"])
        i = int(np.searchsorted(starts, ts_, side="right")) - 1
        if i < 0 or ts_ >= ends[i] or i not in new_start:
            continue
        e = {**e, "ts": new_start[i] + (ts_ - starts[i]) * scale}
        if "dur" in e:
            e["dur"] = float(e["dur"]) * scale
        out.append(e)
    for k, i in enumerate(keep):
        out.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{k + 1}",
                "pid": marker[0],
                "tid": marker[1],
                "ts": new_start[i],
                "dur": (ends[i] - starts[i]) * scale,
            }
        )
    return {**doc, "traceEvents": out}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """Two recordings of one job, and the second one 10 % slower, built from the bundled real trace of
    a linear model on an RTX 2080 Ti (40 iterations, their real step-to-step noise: 18–49 ms):
    ``a`` holds iterations 1, 3, …, 39 and ``b`` iterations 2, 4, …, 40 — two samples of the same
    job's steps, interleaved so no drift over the run separates them; ``b10`` is ``b`` with every event
    of every step stretched by 1.10 (a real 10 % slowdown of the whole step: kernels, ops, gaps)."""
    out = tmp_path_factory.mktemp("recordings")
    report = ts.analyze(LINEAR)
    origin = report.main_trace.origin_ns
    steps = report.main.segmentation.steps
    assert len(steps) == 40
    bounds = [((origin + s.start_ns) / 1e3, (origin + s.end_ns) / 1e3) for s in steps]
    with gzip.open(LINEAR) as fh:
        doc = json.load(fh)
    main = next(e for e in doc["traceEvents"] if e.get("cat") == "user_annotation")  # the training loop's thread
    original = np.array([s.duration_ns / 1e6 for s in steps])
    paths, expected = {}, {}
    for name, keep, scale in (
        ("a", list(range(0, 40, 2)), 1.0),
        ("b", list(range(1, 40, 2)), 1.0),
        ("b10", list(range(1, 40, 2)), 1.10),
    ):
        paths[name] = str(out / f"{name}.pt.trace.json.gz")
        write_json_gz(paths[name], recut(doc, bounds, keep, scale, (main["pid"], main["tid"])))
        expected[name] = original[keep] * scale
    return paths, expected


def test_the_recordings_hold_the_steps_they_were_built_from(recordings):
    paths, expected = recordings
    for name, path in paths.items():
        r = ts.analyze(path)
        assert r.main.segmentation.method == "profiler_step"
        np.testing.assert_allclose([s.duration_ns / 1e6 for s in r.steps], expected[name], atol=1e-3)


def test_gate_passes_on_two_recordings_of_the_same_job_and_fails_on_a_10_pct_slowdown(recordings):
    paths, expected = recordings
    # The same job twice: p50 moves 1.8 % by noise alone — past a 1 % allowance, which a comparison of
    # medians alone would call a regression — but the rank test finds no difference: the gate passes.
    same = cli("diff", paths["b"], paths["a"], "--fail-if-slower", "1", "--format", "json")
    g = json.loads(same.stdout)["gate"]
    assert same.returncode == 0, same.stderr
    assert g["worse_by"] == pytest.approx(100 * (np.median(expected["a"]) / np.median(expected["b"]) - 1), abs=0.01)
    assert g["worse_by"] > 1 and g["test"]["p_value"] > 0.3 and not g["test"]["significant"]
    assert "more than the 1 % allowed but not significant" in same.stderr
    # Every step 10 % slower: p50 rises 8.1 % over the other half's steps (noise included), significantly.
    slow = cli("diff", paths["a"], paths["b10"], "--fail-if-slower", "5", "--format", "json")
    g = json.loads(slow.stdout)["gate"]
    assert slow.returncode == 3, slow.stderr
    assert g["test"]["test"] == "Mann-Whitney U (exact)" and g["test"]["n_before"] == g["test"]["n_after"] == 20
    assert g["test"]["p_value"] < 0.01 and g["test"]["interval"][0] > 0
    assert g["worse_by"] == pytest.approx(100 * (np.median(expected["b10"]) / np.median(expected["a"]) - 1), abs=0.01)
    line = slow.stderr.strip()
    assert line.startswith("trainscope: regression: step time p50 rose 8.1 % ") and "Mann-Whitney U p = " in line
    assert "95 % interval +" in line


# -- the store ---------------------------------------------------------------------------------------------


def test_save_list_baseline_and_diff_against_it(tmp_path, recordings):
    paths, _ = recordings
    store = str(tmp_path / "runs.db")
    saved = cli("analyze", paths["a"], "--no-tui", "--format", "json", "--save", "--tag", "linear", "--store", store)
    assert saved.returncode == 0, saved.stderr
    assert saved.stderr.strip() == f"trainscope: saved as run 1 [linear] in {store}"
    assert cli("analyze", SLOW, "--format", "json", "--save", "--store", store).returncode == 0  # untagged
    listed = json.loads(cli("runs", "--store", store, "--format", "json").stdout)["runs"]
    assert [r["id"] for r in listed] == [2, 1] and [r["tag"] for r in listed] == [None, "linear"]
    doc = json.loads(saved.stdout)
    assert listed[1]["verdict"]["axis"] == doc["verdict"]["axis"]
    assert listed[1]["step_time_ms"]["p50"] == pytest.approx(doc["breakdown"]["step_time_ms"]["p50"], abs=1e-3)
    assert listed[1]["gpu"] == doc["device"]["name"] and listed[1]["steps"] == 20
    # Filters.
    assert [
        r["id"] for r in json.loads(cli("runs", "--store", store, "--tag", "linear", "--format", "json").stdout)["runs"]
    ] == [1]
    assert [
        r["id"]
        for r in json.loads(cli("runs", "--store", store, "--verdict", "data/input-wait", "--format", "json").stdout)[
            "runs"
        ]
    ] == [2]
    assert json.loads(cli("runs", "--store", store, "--gpu", "2080", "--format", "json").stdout)["runs"][0]["id"] == 1
    # One run, whole: every step's duration is kept (the gate needs them), never the trace.
    one = json.loads(cli("runs", "1", "--store", store, "--format", "json").stdout)
    assert one["summary"]["step_ms"] == pytest.approx([s["duration_ms"] for s in doc["steps"]], abs=1e-3)
    assert os.path.getsize(store) < 200_000
    # Its text shows the summary, not only the listing row: the verdict's sentence, the step times,
    # the sinks (each the JSON's figure) and the fixes with their saved projections.
    shown = cli("runs", "2", "--store", store).stdout
    two = json.loads(cli("runs", "2", "--store", store, "--format", "json").stdout)["summary"]
    assert two["verdict"]["summary"] in shown
    assert f"p50 {two['step_time_ms']['p50']:.2f} ms" in shown and f"p95 {two['step_time_ms']['p95']:.2f} ms" in shown
    top = max(two["sinks"].values(), key=lambda x: x["pct"])
    assert f"{top['pct']:6.1f} % {top['ms_per_step']:10.2f} ms" in shown
    for f in two["fixes"]:
        assert f"[{f['id']}] — up to {f['projected_speedup']:.2f}×" in shown
    assert len(shown.splitlines()) > 8
    # The baseline of the tag, and a PR's trace against it: the same gate as two traces.
    b = cli("baseline", "set", "1", "--store", store)
    assert b.returncode == 0 and b.stdout.startswith("baseline of linear: run 1 [linear]")
    text = cli("runs", "--store", store).stdout
    assert "← baseline" in text and "linear" in text
    ok = cli("diff", "--against", "baseline", "--tag", "linear", paths["b"], "--fail-if-slower", "5", "--store", store)
    assert ok.returncode == 0 and "stored summaries" in ok.stdout and "trainscope: gate passed" in ok.stderr
    bad = cli(
        "diff",
        "--against",
        "baseline:linear",
        paths["b10"],
        "--fail-if-slower",
        "5",
        "--store",
        store,
        "--save",
        "--tag",
        "linear",
        "--format",
        "json",
    )
    assert bad.returncode == 3 and "regression: step time p50 rose 8.1 %" in bad.stderr
    assert "saved as run 1 [linear] → run 3 [linear]" in bad.stderr
    both_traces = cli("diff", paths["a"], paths["b10"], "--fail-if-slower", "5", "--format", "json")
    assert json.loads(bad.stdout)["gate"]["test"] == json.loads(both_traces.stdout)["gate"]["test"]
    # Two stored runs by id, and latest.
    again = cli("diff", "1", "latest", "--store", store, "--fail-if-slower", "5", "--format", "json")
    assert again.returncode == 3 and json.loads(again.stdout)["after"]["run"]["id"] == 3
    # Unknown runs and stores are one line, exit 2.
    for args in (
        ("diff", "1", "99", "--store", store),
        ("diff", "--against", "baseline:nope", FAST, "--store", store),
        ("runs", "7", "--store", store),
        ("baseline", "set", "42", "--store", store),
    ):
        p = cli(*args)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and p.stderr.startswith("trainscope: "), args


def test_the_default_store_follows_xdg_and_the_current_repository_commit(tmp_path):
    repo = tmp_path / "job"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (repo / "train.py").write_text("print('hi')\n")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg"), "TRAINSCOPE_STORE": ""}
    p = cli("analyze", FAST, "--format", "json", "--save", env=env, cwd=str(repo))
    assert p.returncode == 0, p.stderr
    assert os.path.isfile(tmp_path / "xdg" / "trainscope" / "runs.db")
    runs = json.loads(cli("runs", "--format", "json", env=env).stdout)["runs"]
    assert runs[0]["git_commit"] == head and runs[0]["git_dirty"] is False
    assert json.loads(cli("runs", "--commit", head[:7], "--format", "json", env=env).stdout)["runs"]


def test_an_empty_history_is_not_an_error_and_reading_creates_nothing(tmp_path):
    store = tmp_path / "none.db"
    p = cli("runs", "--store", str(store))
    assert p.returncode == 0 and "no saved runs" in p.stdout and not store.exists()
    assert cli("baseline", "show", "--store", str(store)).returncode == 0 and not store.exists()


def test_migrations_take_an_old_store_forward_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "runs.db"
    summary = ts.diff(FAST, FAST).diff.before  # a Run; its summary is what version 1 already stored
    from trainscope.analyzers.compare.history import summarize

    s = summarize(summary)
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0][1] + "; PRAGMA user_version = 1;")
    db.execute(
        "INSERT INTO runs (created, source, tag, saved_by, gpu, ranks, steps, verdict, confidence, step_p50_ms, "
        "step_mean_ms, summary) VALUES ('2026-01-01T00:00:00+00:00', ?, 'old', 'analyze', NULL, 1, ?, ?, ?, ?, ?, ?)",
        (
            s.source,
            s.steps,
            s.verdict_axis,
            s.verdict_confidence,
            s.step_p50_ms,
            s.step_mean_ms,
            json.dumps(s.to_dict()),
        ),
    )
    db.commit()
    db.close()
    # Read-only (the MCP server): the old store is read as it is, never migrated.
    with ts.open_store(path, read_only=True) as st:
        assert [r.id for r in st.runs()] == [1] and st.outcomes() == []
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    with ts.open_store(path) as st:
        run = st.get("latest:old")
        assert run.summary == s and st.version == SCHEMA_VERSION == 2
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "fix_outcomes" in tables
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    p = cli("runs", "--store", str(path))
    assert p.returncode == 2 and "newer than this trainscope's" in p.stderr


def test_hostile_stores_are_one_line_errors(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    p = cli("runs", "--store", str(junk))
    assert p.returncode == 2 and "not a trainscope run store" in p.stderr and len(p.stderr.splitlines()) == 1
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    p = cli("analyze", FAST, "--format", "json", "--save", "--store", str(other))
    assert p.returncode == 2 and "not a trainscope run store" in p.stderr
    # A damaged summary (edited by hand, or truncated) is named, never trusted.
    store = tmp_path / "runs.db"
    assert cli("analyze", FAST, "--format", "json", "--save", "--store", str(store)).returncode == 0
    db = sqlite3.connect(store)
    db.execute("UPDATE runs SET summary = json_set(summary, '$.step_ms', json('[1, \"x\"]'))")
    db.commit()
    db.close()
    p = cli("diff", "1", FAST, "--store", str(store))
    assert p.returncode == 2 and "run 1 is damaged: summary.step_ms[]: expected float" in p.stderr
    bad_tag = cli("analyze", FAST, "--format", "json", "--save", "--tag", "a b\x1b[31m", "--store", str(store))
    assert bad_tag.returncode == 2 and "\x1b" not in bad_tag.stderr


# -- projected against achieved ------------------------------------------------------------------------------


def test_the_dataloader_pair_prints_the_projected_and_achieved_gain_of_the_input_fix(tmp_path):
    """The bundled job with a slow DataLoader (num_workers=0, 4 ms of work per sample) and the same job
    with the fix: the fix's projection is the slow run's report; the achieved speedup is the mean
    ProfilerStep duration before over after, read from the raw events."""
    before = json.loads(cli("analyze", SLOW, "--format", "json").stdout)
    fix = next(r for r in before["recommendations"] if r["finding"] == "data/input-wait")
    slow_ms, fast_ms = _raw_step_ms(SLOW), _raw_step_ms(FAST)
    achieved = np.mean(slow_ms) / np.mean(fast_ms)
    expected = f"fix {fix['id']}: projected up to {fix['projected_speedup']:.2f}×, achieved {achieved:.2f}×"
    assert expected == "fix dataloader-workers: projected up to 3.54×, achieved 2.15×"
    p = cli("diff", SLOW, FAST, "--no-tui")
    assert p.returncode == 0 and "  " + expected in p.stdout.splitlines()
    js = json.loads(cli("diff", SLOW, FAST, "--format", "json").stdout)
    (f,) = js["fixes_achieved"]
    assert f["status"] == "resolved" and f["achieved_speedup"] == pytest.approx(achieved, abs=1e-3)
    # Stored: diff --save keeps both runs and the outcome; the stored runs give the same line.
    store = str(tmp_path / "runs.db")
    saved = cli("diff", SLOW, FAST, "--save", "--store", store, "--format", "json")
    assert "1 fix outcome recorded" in saved.stderr
    rows = json.loads(cli("runs", "--fixes", "--store", store, "--format", "json").stdout)["fix_outcomes"]
    assert [(r["before_run"], r["after_run"], r["recommendation"]) for r in rows] == [(1, 2, "dataloader-workers")]
    assert rows[0]["projected_speedup"] == pytest.approx(fix["projected_speedup"], abs=1e-3)
    assert rows[0]["achieved_speedup"] == pytest.approx(achieved, abs=1e-3)
    assert expected in cli("diff", "1", "2", "--store", store).stdout
    assert expected in cli("runs", "--fixes", "--store", store).stdout.replace("run 1 → run 2  ", "").replace(
        " (resolved)", ""
    )


def test_on_trace_ready_saves_each_cycle(tmp_path):
    pytest.importorskip("torch", reason="the profiler handler needs torch (installed by the [test] extra)")
    lines: list[str] = []
    store = tmp_path / "runs.db"
    handler = ts.on_trace_ready(tmp_path / "traces", printer=lines.append, save=True, store=store, tag="tiny")
    profile_linear_on_cpu(handler, width=32, batch=16, active=3, sgd=False)  # 8 steps
    assert len(handler.runs) == 2 and [r.saved_by for r in handler.runs] == ["hook", "hook"]
    with ts.open_store(store, read_only=True) as st:
        runs = st.runs(tag="tiny")
    assert [r.id for r in runs] == [2, 1]
    assert [r.summary.steps for r in runs] == [len(rep.steps) for rep in reversed(handler.reports)]
    with pytest.raises(ts.BadInput):
        ts.on_trace_ready(tmp_path / "t2", save=True, tag="no spaces please")


def test_watch_save_keeps_the_recordings_analysis(tmp_path):
    rec = os.path.join(os.path.dirname(__file__), "data", "nvml", "nanogpt_8gpu_head.recording.jsonl")
    store = str(tmp_path / "runs.db")
    p = cli("watch", "--replay", rec, "--headless", "--save", "--store", store, "--tag", "nanogpt")
    assert p.returncode == 0, p.stderr
    run = json.loads(cli("runs", "--store", store, "--format", "json").stdout)["runs"][0]
    assert run["tag"] == "nanogpt" and run["saved_by"] == "watch"
    assert run["verdict"]["axis"] == json.loads(cli("analyze", rec, "--format", "json").stdout)["verdict"]["axis"]
    p = cli("watch", "--pid", str(os.getpid()), "--save", "--store", store)
    assert p.returncode == 2 and "--save needs --record" in p.stderr
