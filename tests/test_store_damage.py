"""A run store with damaged rows, a schema that is not ours, or a path that cannot hold one
(trainscope/api/store.py, `runs`, `baseline show`): the readable runs still list, each damaged one
is named, and everything else is one line with exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

import trainscope.api as ts
from trainscope.api.store import MIGRATIONS
from trainscope.api.store import DamagedRun
from trainscope.api.store import RunStore
from trainscope.api.store import report_summary
from trainscope.cli import main

FAST = os.path.join(os.path.dirname(__file__), "data", "cpu", "fast.pt.trace.json.gz")


@pytest.fixture(scope="module")
def summary():
    return report_summary(ts.analyze(FAST))


def _store(path, summary, n: int) -> str:
    with RunStore(str(path)) as st:
        for _ in range(n):
            st.save(summary, tag="t", detect_git=False)
    return str(path)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_damaged_rows_are_skipped_and_named_while_the_rest_lists(tmp_path, summary, capsys):
    path = _store(tmp_path / "runs.db", summary, 5)
    db = sqlite3.connect(path)
    # The runs table without NOT NULL (as a hand or another program may leave it), then one damage per row.
    create = MIGRATIONS[0][1].split(";")[0].replace("CREATE TABLE runs", "CREATE TABLE r2")
    db.executescript(
        f"{create.replace('summary TEXT NOT NULL', 'summary TEXT')}; INSERT INTO r2 SELECT * FROM runs;"
        "DROP TABLE runs; ALTER TABLE r2 RENAME TO runs;"
        "UPDATE runs SET summary = '{not json' WHERE id = 2;"
        "UPDATE runs SET summary = NULL WHERE id = 3;"
        f"UPDATE runs SET summary = '{'[' * 100_000}' WHERE id = 4;"
    )
    db.execute("UPDATE runs SET summary = json_set(summary, '$.step_ms', json('[1, \"x\"]')) WHERE id = 5")
    db.commit()
    db.close()
    with RunStore(path, read_only=True) as st:
        assert [r.id for r in st.runs()] == [1]
        assert st.skipped == [
            "run 5 is damaged (summary.step_ms[]: expected float, got str): skipped",
            "run 4 is damaged (its summary is nested too deeply): skipped",
            "run 3 is damaged (its summary is empty (NULL)): skipped",
            "run 2 is damaged (its summary is not JSON): skipped",
        ]
        with pytest.raises(DamagedRun) as e:
            st.get(3)
        assert str(e.value) == f"{path}: run 3 is damaged: its summary is empty (NULL)"
    assert [r.id for r in ts.list_runs(path)] == [1]
    code, out, err = _cli(capsys, "runs", "--store", path)
    assert code == 0 and "(1 run from" in out
    assert err.splitlines() == [
        f"trainscope: warning: {path}: run {i} is damaged ({why}): skipped"
        for i, why in (
            (5, "summary.step_ms[]: expected float, got str"),
            (4, "its summary is nested too deeply"),
            (3, "its summary is empty (NULL)"),
            (2, "its summary is not JSON"),
        )
    ]
    code, out, err = _cli(capsys, "runs", "--store", path, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and [r["id"] for r in doc["runs"]] == [1] and len(doc["skipped"]) == 4
    code, out, err = _cli(capsys, "runs", "2", "--store", path)
    assert code == 2 and err == f"trainscope: {path}: run 2 is damaged: its summary is not JSON\n" and not out
    # A damaged baseline: named, the other baselines still shown.
    assert _cli(capsys, "baseline", "set", "1", "--tag", "good", "--store", path)[0] == 0
    db = sqlite3.connect(path)
    db.execute("INSERT INTO baselines (tag, run_id, set_at) VALUES ('bad', 2, '2026-01-01')")
    db.commit()
    db.close()
    code, out, err = _cli(capsys, "baseline", "show", "--store", path)
    assert code == 0 and out.startswith("good") and "run 1" in out
    assert err == f"trainscope: warning: {path}: run 2 is damaged (its summary is not JSON): skipped\n"


def test_a_schema_that_is_not_ours_is_one_line(tmp_path, summary, capsys):
    dropped = _store(tmp_path / "dropped.db", summary, 2)
    db = sqlite3.connect(dropped)
    db.execute("ALTER TABLE runs DROP COLUMN summary")
    db.commit()
    db.close()
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, x)")
    db.commit()
    db.close()
    for path, why in (
        (dropped, "not a trainscope run store any more: table runs has no column summary"),
        (str(other), "not a trainscope run store (no trainscope schema in it)"),
    ):
        for argv in (("runs",), ("baseline", "show")):
            code, out, err = _cli(capsys, *argv, "--store", path)
            assert code == 2 and len(err.splitlines()) == 1 and not out, (argv, err)
            assert err.startswith(f"trainscope: {path}: {why}"), (argv, err)
    with pytest.raises(ts.BadInput, match="that is not a trainscope run store \\(it holds runs\\)"):
        RunStore(str(other)).save(summary, detect_git=False)


def _unwritable_folder(tmp_path) -> str:
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return str(folder)
    # root writes through any mode bits; /sys refuses new files even to root
    try:
        os.close(os.open("/sys/trainscope-probe", os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        return "/sys"
    os.unlink("/sys/trainscope-probe")
    pytest.skip("no folder here that this user cannot write")


def test_paths_that_cannot_hold_a_store_say_what_is_wrong_and_where(tmp_path, summary, capsys):
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all\n" * 200)
    ro = _unwritable_folder(tmp_path)
    cases = (
        (str(folder), "is a directory; the run store is a file"),
        (os.path.join(ro, "new", "runs.db"), f"cannot create the run store's folder {ro}/new: "),
        (os.path.join(str(junk), "a", "runs.db"), f"cannot create the run store's folder {junk}/a: Not a directory"),
        (str(junk), "not a trainscope run store (not an SQLite file)"),
        (os.path.join(ro, "runs.db"), f"cannot write the run store (folder {ro}: Permission denied)"),
        (os.path.join(str(junk), "runs.db"), f"{junk} is not a folder"),
    )
    for path, why in cases:
        with pytest.raises(ts.BadInput) as e:
            RunStore(path).save(summary, detect_git=False)
        assert str(e.value).startswith(f"{path}: ") and why in str(e.value), (path, str(e.value))
        code, out, err = _cli(capsys, "baseline", "set", "1", "--store", path)
        assert code == 2 and len(err.splitlines()) == 1 and why in err and "Traceback" not in err, (path, err)


def test_a_stores_missing_folders_are_made_private(tmp_path, summary, monkeypatch):
    monkeypatch.delenv("TRAINSCOPE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    run = ts.save_run(ts.analyze(FAST), tag="t")
    assert run.id == 1 and (tmp_path / "xdg" / "trainscope" / "runs.db").is_file()
    assert oct(os.stat(tmp_path / "xdg" / "trainscope").st_mode & 0o777) == "0o700"
    assert oct(os.stat(tmp_path / "xdg" / "trainscope" / "runs.db").st_mode & 0o777) == "0o600"
    with RunStore(str(tmp_path / "ci" / "deep" / "runs.db")) as st:  # --store or TRAINSCOPE_STORE alike
        assert st.save(summary, detect_git=False).id == 1
    assert oct(os.stat(tmp_path / "ci" / "deep").st_mode & 0o777) == "0o700"


def test_the_mcp_list_runs_lists_the_rest_and_names_the_damaged(tmp_path, summary):
    pytest.importorskip("mcp", reason="the mcp extra provides the server")
    import anyio

    from trainscope.mcp_server import build_server

    path = _store(tmp_path / "runs.db", summary, 3)
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET summary = '{not json' WHERE id = 2")
    db.commit()
    db.close()
    server = build_server([str(tmp_path)], path)
    try:
        result = anyio.run(server.call_tool, "list_runs", {})
    finally:
        server.trainscope_close()
    got = result.structured_content
    assert [r["id"] for r in got["runs"]] == [3, 1]
    assert got["skipped"] == ["run 2 is damaged (its summary is not JSON): skipped"]
