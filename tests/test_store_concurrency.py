"""Many processes creating and writing one run store at once (trainscope/api/store.py): none is
refused, no run is lost. Before the schema was created under ``BEGIN IMMEDIATE``, 8 savers into a
fresh file lost a run in most rounds ("table runs already exists")."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sqlite3

import pytest

from trainscope.api.store import RunStore
from trainscope.api.store import report_summary

FAST = os.path.join(os.path.dirname(__file__), "data", "cpu", "fast.pt.trace.json.gz")
SAVERS, ROUNDS = 8, 3


def _saver(summary_json: str, paths: list[str], barrier, results) -> None:
    """One process: in each round, wait for the others, then open the round's (fresh) store and save."""
    from trainscope.analyzers.compare.history import RunSummary

    summary = RunSummary.from_dict(json.loads(summary_json))
    for path in paths:
        barrier.wait(timeout=120)  # every saver opens the fresh file at the same moment
        try:
            with RunStore(path) as store:
                run = store.save(summary, tag="race", saved_by="api", detect_git=False)
            results.put((path, "ok", run.id))
        except Exception as e:  # noqa: BLE001 (the test reports any failure as it is)
            results.put((path, "error", f"{type(e).__name__}: {e}"))


@pytest.fixture(scope="module")
def summary_json() -> str:
    import trainscope.api as ts

    return json.dumps(report_summary(ts.analyze(FAST)).to_dict())


def test_eight_savers_creating_one_fresh_store_lose_nothing(tmp_path, summary_json):
    paths = [str(tmp_path / f"round{i}.db") for i in range(ROUNDS)]
    ctx = mp.get_context("spawn")  # no fork of the test process (it may run threads)
    barrier, results = ctx.Barrier(SAVERS), ctx.Queue()
    procs = [ctx.Process(target=_saver, args=(summary_json, paths, barrier, results)) for _ in range(SAVERS)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=300) for _ in range(SAVERS * ROUNDS)]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    errors = [g for g in got if g[1] != "ok"]
    assert not errors, errors
    for path in paths:
        ids = sorted(g[2] for g in got if g[0] == path)
        assert ids == list(range(1, SAVERS + 1)), (path, ids)  # each saver got its own row
        with RunStore(path, read_only=True) as store:
            runs = store.runs(limit=None)
            assert len(runs) == SAVERS and not store.skipped
            assert all(r.tag == "race" for r in runs)
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.close()
