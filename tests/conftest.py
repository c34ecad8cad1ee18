"""Shared fixtures: the real traces in tests/data (see tests/data/NOTICE.md), loaded once per session."""

from __future__ import annotations

import functools
import gc
import gzip
import json
import os
import pathlib
import shutil
import tempfile

import pytest

DATA = pathlib.Path(__file__).parent / "data"
KINETO = DATA / "kineto"
ALL_KINETO = sorted(p.name for p in KINETO.glob("*.json.gz"))
CPU_ONLY = ("hta_cpu_only.pt.trace.json.gz", "hta_rank_non_gpu.json.gz")


@functools.cache
def load(name: str):
    from trainscope.collectors import open_traces

    return open_traces(str(KINETO / name)).traces[0]


@functools.cache
def analysis(name: str):
    from trainscope.analyzers.trace.analysis import analyze_trace

    return analyze_trace(load(name))


def raw_document(name: str):
    with gzip.open(KINETO / name, "rb") as f:
        return json.load(f)


def write_json_gz(path, doc) -> None:
    """``doc`` as a .json.gz: the text ``json.dump`` writes, compressed at level 1 (the level changes
    no byte a reader sees; streaming json.dump into level-9 gzip took seconds for a bundled trace)."""
    pathlib.Path(path).write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))


@pytest.fixture
def kineto_dir() -> pathlib.Path:
    return KINETO


def exit_code_written(path: pathlib.Path, timeout: float = 30.0) -> str:
    """The exit code a tmux test's shell wrote with ``echo $? > path``: the redirection creates the
    file before echo writes to it, so a reader that only waits for the file can read '' (it did, once,
    under load). Waits for the content; '' after ``timeout``."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            break
        time.sleep(0.1)
    return path.read_text().strip() if path.exists() else ""


def dlrm_rank_dir(out: pathlib.Path, n: int) -> pathlib.Path:
    """``n`` rank files in ``out`` made from the two real DLRM ranks (even ranks copy rank 0, odd
    ranks rank 1), each with its own rank number and world size ``n``."""
    docs = []
    for r in (0, 1):
        with gzip.open(KINETO / "hta_dlrm_ws128_2ranks" / f"rank{r}.json.gz") as f:
            docs.append(json.load(f))
    for i in range(n):
        doc = dict(docs[i % 2])
        doc["distributedInfo"] = dict(doc["distributedInfo"], rank=i, world_size=n)
        (out / f"trace_{i:03d}.json").write_text(json.dumps(doc))
    return out


def dlrm_step_kernels(rank: int) -> tuple[list[dict], int]:
    """Rank ``rank`` of the real DLRM pair read by hand from its raw events: the kernel events that
    start inside its ProfilerStep# spans, and how many steps there are."""
    with gzip.open(KINETO / "hta_dlrm_ws128_2ranks" / f"rank{rank}.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    st = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    lo, hi = min(e["ts"] for e in st), max(e["ts"] + e["dur"] for e in st)
    return [e for e in ev if e.get("cat") == "kernel" and lo <= e["ts"] < hi], len(st)


def edited_sqlite(export: pathlib.Path | None, path: pathlib.Path, *statements: str) -> pathlib.Path:
    """``path``: a copy of the SQLite file ``export`` (``path`` as it is where None) with
    ``statements`` run on it and committed."""
    import sqlite3

    if export is not None:
        shutil.copy(export, path)
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def quiet_cpu_trainer(L, **options):
    """A PyTorch Lightning ``Trainer`` on the CPU that writes and prints nothing of its own (no
    logger, checkpoint, progress bar or model summary); ``L`` is ``lightning.pytorch``."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **options,
    )


def profile_linear_on_cpu(handler, *, width: int, batch: int, active: int, sgd: bool) -> None:
    """A ``Linear(width, width)`` trained on the CPU under torch.profiler for two cycles (no wait, one
    warm-up step, ``active`` recorded steps each), ``handler`` its on_trace_ready; ``sgd``: an SGD
    step in every iteration, else forward and backward only."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile
    from torch.profiler import schedule

    model = torch.nn.Linear(width, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.1) if sgd else None
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=active, repeat=2),
        on_trace_ready=handler,
    ) as prof:
        for _ in range(2 * (1 + active)):
            if opt is not None:
                opt.zero_grad()
            model(torch.randn(batch, width)).sum().backward()
            if opt is not None:
                opt.step()
            prof.step()


GLOO_DELAY_MS = 30.0  # rank 1 of the recorded gloo job sleeps this long at the start of every step


@pytest.fixture(scope="session")
def gloo_dir(tmp_path_factory):
    """A real two-rank job (tests/gloo_job.py: DDP over gloo on the CPU, rank 1 sleeping
    GLOO_DELAY_MS per step), recorded once on this project's machine with
    ``record(OUT, steps=5, slow_rank=1, delay_ms=30)`` and kept in tests/data/gloo: recorded
    inputs, so the straggler assertions do not depend on how loaded the test machine is (a live
    recording on a busy 2-core machine could deschedule the punctual rank too).
    ``test_stragglers.py::test_the_gloo_job_still_records`` runs the recorder itself."""

    out = tmp_path_factory.mktemp("gloo")
    for f in sorted((DATA / "gloo").glob("rank*.pt.trace.json.gz")):
        shutil.copy(f, out / f.name)
    return out


# -- one private temporary folder for the whole run -----------------------------------------------
# Every test, worker and subprocess it starts writes its temporary files under one folder made for
# this run (TMPDIR, inherited by pytest-xdist's workers and by the jobs, traces and apps the tests
# start), removed when the run ends: the suite leaves nothing in /tmp, and what a test forgets to
# remove is named at the end of the run instead of piling up there.
_TMP_ENV = "TRAINSCOPE_TEST_TMP"


def pytest_configure(config):
    if hasattr(config, "workerinput") or os.environ.get(_TMP_ENV):
        return  # an xdist worker, or a nested pytest: the controller's folder is already set
    root = tempfile.mkdtemp(prefix="trainscope-tests-")
    os.environ[_TMP_ENV] = os.environ["TMPDIR"] = root
    # The analysis cache (trainscope/api/cache.py) is off for the whole run, workers and the
    # processes tests start included: a test that changes what an analysis computes (a patched
    # analyzer, a rewritten trace with its times kept) must never be served an earlier answer.
    # tests/test_cache.py turns it on, each test with its own folder; the folder here only makes
    # sure nothing ever reaches the user's real cache.
    os.environ["TRAINSCOPE_NO_CACHE"] = "1"
    os.environ["TRAINSCOPE_CACHE_DIR"] = os.path.join(root, "analysis-cache")
    tempfile.tempdir = root
    config._trainscope_tmp = root


def _left_behind(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if not n.startswith("pytest-of-")) if os.path.isdir(root) else []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    root = getattr(config, "_trainscope_tmp", None)
    left = _left_behind(root) if root else []
    if left:
        terminalreporter.write_line(
            f"temporary files left by tests (removed with the run's folder): {', '.join(left[:20])}"
            + (f" and {len(left) - 20} more" if len(left) > 20 else ""),
            yellow=True,
        )


def pytest_unconfigure(config):
    root = getattr(config, "_trainscope_tmp", None)
    if root:
        shutil.rmtree(root, ignore_errors=True)
        os.environ.pop(_TMP_ENV, None)


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/ from the current output (say why in the commit)",
    )


# -- lanes: every test module's markers, declared once -------------------------------------------
# The fast lane (`python -m pytest -m "not slow"`, under a minute on 2 cores) holds unit tests on
# synthetic inputs and small real ones; everything else is `slow`. A module not listed here is slow
# (a new heavy test cannot slip into the fast lane); list a new unit-test module under FAST.
# Measured per module with `--durations=0` (tests/README or docs/development.md says how).
FAST = {
    "test_allocator_churn.py",
    "test_analysis.py",
    "test_batch_shapes.py",
    "test_watch_hostile.py",
    "test_api_docs.py",
    "test_api_ranks.py",
    "test_api_watch.py",
    "test_context.py",
    "test_cost.py",
    "test_diagnosis_labels.py",
    "test_diff_like.py",
    "test_findings_registry.py",
    "test_formats.py",
    "test_host_idle.py",
    "test_host_sampler.py",
    "test_layering.py",
    "test_import_graph.py",
    "test_development_doc.py",
    "test_ledger.py",
    "test_live_analyzer.py",
    "test_live_window.py",
    "test_nvml_sampler.py",
    "test_ranks_headline.py",
    "test_snapshot_eras.py",
    "test_stats.py",
    "test_steady_windows.py",
    "test_timeline_whatif.py",
    "test_window.py",
    "test_intervals.py",
    "test_one_pipeline.py",
    "test_store_damage.py",
    "test_one_off.py",
    "test_module_tree.py",
}
# What else a module needs or does (besides being slow): `app` drives a Textual app, `subprocess`
# starts processes (trainscope, jobs, tmux), `needs_torch` / `needs_hta` import those packages.
MODULE_MARKS: dict[str, tuple[str, ...]] = {
    "test_tui.py": ("app", "needs_hta"),
    "test_tui_memory.py": ("app",),
    "test_tui_snapshots.py": ("app",),
    "test_tui_timeline.py": ("app",),
    "test_tui_evidence.py": ("app",),
    "test_tui_tables.py": ("app",),
    "test_tui_keys.py": ("app",),
    "test_tui_tmux.py": ("app", "subprocess"),
    "test_tui_tmux_hostile.py": ("app", "subprocess"),
    "test_tree_app.py": ("app", "subprocess"),
    "test_hostile_strings.py": ("app",),
    "test_diff_app.py": ("app",),
    "test_diff_app_snapshots.py": ("app",),
    "test_plan_app.py": ("app",),
    "test_output_formats.py": ("app",),
    "test_plan_snapshots.py": ("app",),
    "test_watch_app.py": ("app",),
    "test_watch_job.py": ("subprocess", "needs_torch"),
    "test_watch_split.py": ("subprocess", "needs_torch"),
    "test_watch_cli.py": ("subprocess",),
    "test_step_hook.py": ("subprocess", "needs_torch"),
    "test_hardening.py": ("subprocess",),
    "test_readme.py": ("subprocess",),
    "test_packaging.py": ("subprocess",),
    "test_mcp.py": ("subprocess",),
    "test_store_concurrency.py": ("subprocess",),
    "test_mcp_root_race.py": ("subprocess",),
    "test_mcp_shapes.py": ("subprocess",),  # one test kills a server it started with SIGKILL
    "test_tree_diff.py": ("subprocess",),
    "test_plan_cli.py": ("subprocess",),
    "test_recorded.py": ("subprocess", "needs_torch"),
    "test_integrations.py": ("needs_torch",),
    "test_stragglers.py": ("needs_torch", "needs_hta"),
    "test_rank_story.py": ("app", "subprocess"),
    "test_api.py": ("needs_torch",),
    "test_cost.py": ("needs_torch",),
    "test_hta_crosscheck.py": ("needs_hta",),
    "test_deep.py": ("needs_hta",),
    "test_diff.py": ("needs_hta",),
    "test_perfetto.py": ("needs_hta",),
    "test_perfetto_ranks.py": ("app",),
    "test_typecheck.py": ("subprocess",),
    "test_valid_bytes.py": ("subprocess",),  # one test reads a file in two halves, one in a child interpreter
    "test_capture_trust.py": ("subprocess",),  # its one torch test carries needs_torch itself
    "test_cache.py": ("subprocess",),  # writers killed mid-write (SIGKILL), two writers of one entry
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        for mark in MODULE_MARKS.get(name, ()):
            item.add_marker(mark)
        if name not in FAST:
            item.add_marker("slow")


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite a worker's heap holds ≈ 2.6 M objects the cyclic collector tracks
    (apps' caches, snapshot models, hypothesis' state). At exit pytest's unraisable-exception check
    runs ``gc.collect()`` five times, ≈ 2 s each, and pytest-xdist interrupts a worker still tearing
    down after 5 s: a stray ``KeyboardInterrupt`` printed at the end of a passing run (found with
    faulthandler in the worker). One collection here finds what the check would (its hook is still
    installed, so what it finds is reported), then the survivors are frozen: the five passes skip them."""
    gc.collect()
    gc.freeze()


# -- the suite's size, counted by the collection this run already made ---------------------------
# tests/test_readme.py checks the README's "≈ N tests" against what `pytest --collect-only` counts.
# A run that collected the whole suite (every worker of `pytest -n auto` does) has that count
# already: each collected item, as the terminal's "N tests collected" counts them (before -k/-m
# deselect). A run of fewer files, with --ignore, --lf or ini overrides, has not; the test then
# collects the suite itself.
_COLLECTED = pytest.StashKey[int]()


def pytest_itemcollected(item):
    item.config.stash[_COLLECTED] = item.config.stash.get(_COLLECTED, 0) + 1


def suite_collected(config) -> int | None:
    """How many tests this run collected, when it collected exactly the suite; else None."""
    here = pathlib.Path(__file__).resolve().parent
    paths = [pathlib.Path(config.invocation_params.dir, a).resolve() for a in config.args]
    o = config.option
    if (
        paths != [here]
        or config.inipath != here.parent / "pyproject.toml"
        or getattr(o, "override_ini", None)
        or getattr(o, "ignore", None)
        or getattr(o, "ignore_glob", None)
        or getattr(o, "lf", False)
        or getattr(o, "pyargs", False)
        or getattr(o, "confcutdir", None) not in (None, str(here.parent))
    ):
        return None
    return config.stash.get(_COLLECTED, None)
