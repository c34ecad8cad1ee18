"""The analysis cache (trainscope/api/cache.py): a second look is read from the cache, byte for byte
the first; the cache survives a writer killed mid-write, two writers of one entry, a truncated or
forged entry and a version change; it is bounded, least recently used first; and it never touches
the user's real cache (tests/conftest.py turns it off for the suite and points it at the run's
folder; each test here turns it on in its own folder)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from tests.cache_on import paused
from tests.cache_on import temporary
from tests.cache_on import turn_cache_on
from tests.cache_on import two_writers_of_one_entry
from tests.cache_on import writer
from tests.conftest import DATA
from tests.fuzzing import run_in_process
from tests.test_golden import CASES
from trainscope.api import cache

SMALL = "cpu/fast.pt.trace.json.gz"
ANALYZE_CASES = sorted(name for name, argv in CASES.items() if argv[0] == "analyze")


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    """The cache on, in a folder of this test's own; the counters from zero."""
    where = turn_cache_on(tmp_path, monkeypatch)
    monkeypatch.chdir(DATA)  # relative paths in the documents, as in tests/test_golden.py
    return where


def cli(*argv: str) -> tuple[int, str, str]:
    return run_in_process(["analyze", *argv, "-q"])


def entries(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.endswith(cache.SUFFIX)) if where.is_dir() else []


def test_the_suite_never_uses_the_users_cache():
    """conftest.py: off for the whole run, and pointed at the run's own folder even so."""
    assert os.environ[cache.ENV_OFF] == "1" and not cache.enabled()
    assert cache.cache_dir().startswith(os.environ["TRAINSCOPE_TEST_TMP"])


# -- never changes a result ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ANALYZE_CASES)
def test_golden_inputs_through_the_cache_are_byte_identical(name, cache_on):
    """Every input of the golden documents: the JSON of a cold look (analyzed, stored) is the golden
    document (which tests/test_golden.py holds equal to the uncached analysis), and the JSON, text and
    Markdown of a warm one (read from the cache) are byte for byte what the cold look's document
    renders to. One analysis per input, not two: the golden file is the uncached reference."""
    import json

    from tests.test_golden import GOLDEN
    from tests.test_golden import differences
    from tests.test_golden import normalized
    from trainscope.reports.formats import Output
    from trainscope.reports.formats import render

    path = CASES[name][1]
    rc, cold, err = cli(path, "--format", "json")
    assert rc == 0, err
    golden = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    assert not differences(golden, normalized(json.loads(cold), str(DATA)))
    assert (cache.STATS.hits, cache.STATS.misses, cache.STATS.stores) == (0, 1, 1)
    doc = json.loads(cold)
    want = {"json": cold, **{fmt: str(render(fmt, Output("analysis", doc))) for fmt in ("text", "markdown")}}
    for fmt in ("json", "text", "markdown"):
        rc, warm, err = cli(path, "--format", fmt)
        assert rc == 0, err
        assert warm == want[fmt], fmt
    assert (cache.STATS.hits, cache.STATS.misses, cache.STATS.damaged, cache.STATS.uncacheable) == (3, 1, 0, 0)
    assert len(entries(cache_on)) == 1 and temporary(cache_on) == []


def test_a_hit_reads_no_trace(cache_on, monkeypatch):
    import trainscope.api.analysis as analysis

    rc, first, _ = cli(SMALL, "--format", "json")
    assert rc == 0

    def refuse(*a, **k):
        raise AssertionError("the trace was read on a cache hit")

    monkeypatch.setattr(analysis, "open_input", refuse)
    rc, second, err = cli(SMALL, "--format", "json")
    assert rc == 0, err
    assert second == first
    assert (cache.STATS.hits, cache.STATS.misses) == (1, 1)


def test_no_cache_and_the_environment_switch_analyze_again(cache_on, monkeypatch):
    cli(SMALL, "--format", "json")
    rc, _, _ = cli(SMALL, "--format", "json", "--no-cache")
    assert rc == 0
    monkeypatch.setenv(cache.ENV_OFF, "1")
    cli(SMALL, "--format", "json")
    assert (cache.STATS.hits, cache.STATS.misses, cache.STATS.stores) == (0, 1, 1)


def test_every_option_that_changes_the_result_is_in_the_key(cache_on):
    looks = [
        (),
        ("--threshold", "data_wait.high=25"),
        ("--threshold", "data_wait.high=26"),
        ("--peak-tflops", "100"),
        ("--peak-bandwidth", "900"),
        ("--step-range", "ProfilerStep"),
        ("--model", "params=25.6M,optimizer=adam,precision=fp32"),
    ]
    docs = {}
    for extra in looks:
        rc, out, err = cli(SMALL, "--format", "json", *extra)
        assert rc == 0, (extra, err)
        docs[extra] = out
    assert cache.STATS.hits == 0 and cache.STATS.misses == len(looks)
    for extra in looks:  # each again: a hit, and its own document
        rc, out, _ = cli(SMALL, "--format", "json", *extra)
        assert out == docs[extra]
    assert cache.STATS.hits == len(looks)
    assert docs[()] != docs[("--threshold", "data_wait.high=25")]


def test_a_rank_directory_is_keyed_by_every_member(cache_on, tmp_path):
    ranks = tmp_path / "ranks"
    shutil.copytree(DATA / "gloo", ranks)
    rc, first, _ = cli(str(ranks), "--format", "json")
    rc, again, _ = cli(str(ranks), "--format", "json")
    assert again == first and cache.STATS.hits == 1
    member = ranks / "rank1.pt.trace.json.gz"
    st = member.stat()
    os.utime(member, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # one member touched
    cli(str(ranks), "--format", "json")
    assert (cache.STATS.hits, cache.STATS.misses) == (1, 2)


def test_a_moved_trace_is_the_same_trace_named_where_it_is(cache_on, tmp_path):
    """An absolute path is not in the key: the document is named by the look that reads it, and
    equals the uncached analysis at that path (the MCP server's private folders depend on it)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy2(DATA / SMALL, a / "t.pt.trace.json.gz")
    shutil.copy2(DATA / SMALL, b / "t.pt.trace.json.gz")  # copy2: the same times
    cli(str(a / "t.pt.trace.json.gz"), "--format", "json")
    rc, warm, _ = cli(str(b / "t.pt.trace.json.gz"), "--format", "json")
    _, plain, _ = cli(str(b / "t.pt.trace.json.gz"), "--format", "json", "--no-cache")
    assert (cache.STATS.hits, cache.STATS.misses) == (1, 1)
    assert warm == plain and str(b) in warm and str(a) not in warm


def test_html_and_perfetto_after_a_hit_analyze_in_full(cache_on, tmp_path):
    """What the document does not hold (the HTML page's timeline, the Perfetto export) comes from
    the full analysis, made on first use: the same page as without the cache."""
    gpu = "kineto/hta_mi250_minitoy_train.json.gz"
    cli(gpu, "--format", "json")
    rc, html, err = cli(gpu, "--format", "html", "--perfetto", str(tmp_path / "p.json"))
    assert rc == 0, err
    _, plain, _ = cli(gpu, "--format", "html", "--no-cache")
    assert html == plain and "timeline of the median step" in html
    assert (tmp_path / "p.json").stat().st_size > 0
    assert cache.STATS.hits == 1


# -- never trusted when damaged -------------------------------------------------------------------


def _damage_cases(data: bytes) -> dict[str, bytes]:
    import hashlib
    import json

    magic = cache.MAGIC
    head, _, payload = data[len(magic) :].partition(b"\n")
    obj = json.loads(payload)
    obj["doc"]["verdict"] = "forged"  # a valid checksum over a document of the wrong shape
    forged = json.dumps(obj).encode()
    return {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "flipped": data[:-100] + bytes([data[-100] ^ 0x01]) + data[-99:],
        "garbage": os.urandom(4096),
        "other key": magic + head + b"\n" + payload.replace(obj["key"].encode(), b"0" * 64),
        "forged": magic + hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged,
        "deep": magic + hashlib.sha256(b"[" * 100000).hexdigest().encode() + b"\n" + b"[" * 100000,
    }


def test_a_damaged_entry_is_removed_rebuilt_and_counted(cache_on, capfd):
    _, want, _ = cli(SMALL, "--format", "json")
    (name,) = entries(cache_on)
    data = (cache_on / name).read_bytes()
    cases = _damage_cases(data)
    for i, (why, bad) in enumerate(cases.items(), 1):
        (cache_on / name).write_bytes(bad)
        rc, got, err = cli(SMALL, "--format", "json")
        assert rc == 0 and got == want, why
        assert cache.STATS.damaged == i, why
        assert err.count("trainscope: cache: damaged entry") == 1, (why, err)
        assert (cache_on / name).read_bytes() == data, why  # rebuilt, the same bytes
    assert (cache.STATS.hits, cache.STATS.misses) == (0, 1 + len(cases))
    rc, got, _ = cli(SMALL, "--format", "json")
    assert got == want and cache.STATS.hits == 1


def test_a_link_planted_as_an_entry_is_not_followed(cache_on, tmp_path):
    _, want, _ = cli(SMALL, "--format", "json")
    (name,) = entries(cache_on)
    target = tmp_path / "elsewhere"
    target.write_bytes((cache_on / name).read_bytes())
    (cache_on / name).unlink()
    (cache_on / name).symlink_to(target)
    rc, got, _ = cli(SMALL, "--format", "json")
    assert got == want and cache.STATS.damaged == 1
    assert not (cache_on / name).is_symlink() and target.exists()


def test_a_version_change_is_a_miss(cache_on, monkeypatch):
    import trainscope

    _, want, _ = cli(SMALL, "--format", "json")
    changes = [
        (trainscope, "__version__", "99.0"),
        (cache, "ANALYSIS_VERSION", cache.ANALYSIS_VERSION + 1),
        (cache, "_code", "another analyzer"),
    ]
    for i, (where, attr, value) in enumerate(changes, 2):
        cache.code_version()
        monkeypatch.setattr(where, attr, value)
        rc, got, _ = cli(SMALL, "--format", "json")
        assert got == want
        assert (cache.STATS.hits, cache.STATS.misses) == (0, i), attr
    assert len(entries(cache_on)) == 1 + len(changes)


def test_an_unsafe_folder_is_not_used(cache_on, capfd):
    cache_on.mkdir(mode=0o700)
    os.chmod(cache_on, 0o755)
    for _ in range(2):
        rc, _, err = cli(SMALL, "--format", "json")
        assert rc == 0
    assert entries(cache_on) == [] and len(cache.STATS.problems) == 1
    assert "open to group or others" in cache.STATS.problems[0]


# -- bounded, least recently used first ---------------------------------------------------------------


def test_the_least_recently_used_entry_goes_first(cache_on, monkeypatch):
    from trainscope.api import trace_cache

    # documents only here (a trace's columns share the bound: tests/test_trace_cache.py)
    monkeypatch.setattr(trace_cache, "open_cached", lambda path, read, progress=None: read())
    a, b, c = "cpu/fast.pt.trace.json.gz", "cpu/slow.pt.trace.json.gz", "cpu/fast@16.pt.trace.json.gz"
    cli(a, "--format", "json")
    (ea,) = entries(cache_on)
    cli(b, "--format", "json")
    (eb,) = set(entries(cache_on)) - {ea}
    cli(c, "--format", "json")
    (ec,) = set(entries(cache_on)) - {ea, eb}
    size = {e: (cache_on / e).stat().st_size for e in (ea, eb, ec)}
    (cache_on / ec).unlink()
    os.utime(cache_on / ea, ns=(1_000_000_000, 1_000_000_000))  # a older than b …
    os.utime(cache_on / eb, ns=(2_000_000_000, 2_000_000_000))
    cli(a, "--format", "json")  # … until a is read: the hit touches it
    assert cache.STATS.hits == 1 and (cache_on / ea).stat().st_mtime_ns > 2_000_000_000
    monkeypatch.setenv(cache.ENV_MAX, str(size[ea] + size[ec]))
    cli(c, "--format", "json")  # stored; b, the least recently used, goes
    assert entries(cache_on) == sorted([ea, ec]) and cache.STATS.evicted == 1
    cli(b, "--format", "json")  # a miss now, stored: a goes, then c while the folder is over its bound
    left, gone = [ea, ec, eb], 0
    while sum(size[e] for e in left) > size[ea] + size[ec]:
        left, gone = left[1:], gone + 1
    assert gone >= 1 and entries(cache_on) == sorted(left)
    assert cache.STATS.misses == 5 and cache.STATS.evicted == 1 + gone


def test_a_bad_bound_is_one_line_and_exit_2(cache_on, monkeypatch):
    monkeypatch.setenv(cache.ENV_MAX, "lots")
    rc, _, err = cli(SMALL, "--format", "json")
    assert rc == 2 and err.strip() == "trainscope: TRAINSCOPE_CACHE_MAX: not a size: 'lots' (e.g. 8GiB, 500MB)"
    rc, _, err = run_in_process(["cache", "info"])
    assert rc == 2 and err.count("\n") == 1


# -- a writer killed mid-write, two writers at once ----------------------------------------------------


WRITER = ["analyze", SMALL, "--format", "json", "-q"]


def test_a_writer_killed_mid_write_leaves_nothing_anyone_trusts(cache_on, tmp_path):
    p = writer(WRITER, cache.ENV_PAUSE, tmp_path / "paused")
    pid = paused(p, tmp_path / "paused")
    assert pid == p.pid
    assert len(temporary(cache_on)) == 1 and entries(cache_on) == []  # half an entry, under its private name
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL
    rc, got, err = cli(SMALL, "--format", "json")  # the partial file is no entry: analyzed, stored, swept
    assert rc == 0, err
    _, plain, _ = cli(SMALL, "--format", "json", "--no-cache")
    assert got == plain
    assert (cache.STATS.hits, cache.STATS.misses, cache.STATS.damaged) == (0, 1, 0)
    assert temporary(cache_on) == [] and len(entries(cache_on)) == 1
    rc, again, _ = cli(SMALL, "--format", "json")
    assert again == plain and cache.STATS.hits == 1


def test_two_writers_of_one_entry_both_leave_a_valid_one(cache_on, tmp_path):
    outs = [out.decode() for out in two_writers_of_one_entry(WRITER, cache.ENV_PAUSE, cache_on, tmp_path)]
    assert outs[0] == outs[1]
    assert len(entries(cache_on)) == 1 and temporary(cache_on) == []
    rc, got, _ = cli(SMALL, "--format", "json")
    assert got == outs[0] and (cache.STATS.hits, cache.STATS.damaged) == (1, 0)


# -- trainscope cache {info,clear} ---------------------------------------------------------------------


def test_cache_info_and_clear(cache_on):
    import json

    rc, out, _ = run_in_process(["cache", "info", "--format", "json"])
    assert rc == 0 and json.loads(out)["exists"] is False and json.loads(out)["entries"] == 0
    cli("cpu/fast.pt.trace.json.gz", "--format", "json")
    cli("cpu/slow.pt.trace.json.gz", "--format", "json")
    traces = sorted(p for p in cache_on.iterdir() if p.name.endswith(".trace"))  # each trace's columns
    assert len(traces) == 2
    total = sum((cache_on / e).stat().st_size for e in entries(cache_on)) + sum(p.stat().st_size for p in traces)
    rc, out, _ = run_in_process(["cache", "info", "--format", "json"])
    info = json.loads(out)
    assert (info["entries"], info["bytes"], info["path"]) == (4, total, str(cache_on))
    assert (info["documents"], info["traces"], info["trace_bytes"]) == (2, 2, sum(p.stat().st_size for p in traces))
    rc, out, _ = run_in_process(["cache", "info"])
    assert rc == 0 and str(cache_on) in out and "entries  4," in out and "2 analysis documents, 2 traces'" in out
    rc, out, _ = run_in_process(["cache", "clear"])
    assert rc == 0 and out.startswith(f"removed 4 entries ({total / 1024:.1f} KiB) from {cache_on}")
    assert entries(cache_on) == [] and list(cache_on.iterdir()) == []
    rc, _, err = run_in_process(["cache"])
    assert rc == 2 and err.count("\n") == 1


def test_cache_commands_refuse_a_linked_folder(cache_on, tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    cache_on.symlink_to(real)
    for argv in (["cache", "info"], ["cache", "clear"]):
        rc, out, err = run_in_process(argv)
        assert rc == 2 and "symbolic link" in err and err.count("\n") == 1


# -- MCP: one analysis serves the tools; a second server reads the first one's entry ---------------------


def test_mcp_analyze_trace_reads_the_cache_across_servers(cache_on):
    """Each server analyzes under a private folder of its own: the entry is keyed without it, and
    the second server's answers equal the first's (list_kernels analyzes in full after the hit)."""
    import asyncio

    pytest.importorskip("mcp")
    from trainscope.mcp_server import build_server

    path = str(DATA / "kineto/hta_mi250_minitoy_train.json.gz")
    answers = []
    for _ in range(2):
        server = build_server([str(DATA)])

        async def ask(server=server):
            a = await server.call_tool("analyze_trace", {"path": path, "detail": "full"})
            k = await server.call_tool("list_kernels", {"path": path, "limit": 3})
            return str(a), str(k)

        try:
            answers.append(asyncio.run(ask()))
        finally:
            server.trainscope_close()
    assert answers[0] == answers[1] and "hta_mi250_minitoy_train" in answers[0][0]
    assert (cache.STATS.hits, cache.STATS.misses, cache.STATS.stores) == (1, 1, 1)
