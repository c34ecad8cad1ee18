"""The trace cache (trainscope/api/trace_cache.py): a trace read once is read again as its columns.
Every field of every bundled trace comes back exactly (types, dtypes, bytes); the golden documents
analyzed from the cached columns are the golden documents; every consumer — HTML and Perfetto after a
document hit, the app's loader, ``diff``, the rank map — reads the columns instead of the trace, and
``--no-cache`` / ``TRAINSCOPE_NO_CACHE=1`` turn it off; the entry survives a writer killed mid-write,
two writers, damage and a version change; one trace never takes the whole bound. The suite runs with
the cache off (tests/conftest.py): each test here turns it on in its own folder."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from tests.cache_on import paused
from tests.cache_on import temporary
from tests.cache_on import turn_cache_on
from tests.cache_on import two_writers_of_one_entry
from tests.cache_on import writer
from tests.conftest import DATA
from tests.fuzzing import run_in_process
from tests.test_golden import CASES
from tests.test_golden import GOLDEN
from tests.test_golden import differences
from tests.test_golden import normalized
from trainscope.api import cache
from trainscope.api import trace_cache
from trainscope.traces.model import Table

SMALL = "cpu/fast.pt.trace.json.gz"
GPU = "kineto/hta_mi250_minitoy_train.json.gz"
ALL = sorted(glob.glob(str(DATA / "kineto" / "*.json.gz"))) + sorted(glob.glob(str(DATA / "nsys" / "*.sqlite")))


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    where = turn_cache_on(tmp_path, monkeypatch)
    monkeypatch.setattr(trace_cache, "_warned_large", False)
    monkeypatch.chdir(DATA)
    return where


def traces_in(where: Path) -> list[str]:
    return sorted(p.name for p in where.iterdir() if p.name.endswith(trace_cache.SUFFIX)) if where.is_dir() else []


def refuse_reading(monkeypatch) -> None:
    """Every reader refuses: what still works is served from the cache."""
    import trainscope.collectors.inputs as inputs

    def refuse(path):
        raise AssertionError(f"the trace {path} was parsed")

    monkeypatch.setattr(inputs, "reader_for", refuse)


def read(path: str):
    from trainscope.collectors import open_traces

    return trace_cache.open_cached(path, lambda: open_traces(path))


def same(a, b, where: str = "") -> None:
    """Equal, and of the same types all the way down (arrays: dtype, shape and bytes)."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes(), where
    elif isinstance(a, Table):
        assert set(vars(a)) == set(vars(b)), where
        for k in vars(a):
            same(getattr(a, k), getattr(b, k), f"{where}.{k}")
    elif hasattr(a, "__dataclass_fields__"):
        assert set(vars(a)) == set(vars(b)), where
        for f in fields(a):
            same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            same(ka, kb, where)
            same(va, vb, f"{where}[{ka!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, (where, a, b)


# -- exact ---------------------------------------------------------------------------------------------


def test_every_field_of_every_bundled_trace_comes_back_exactly(cache_on):
    from trainscope.collectors import open_traces

    absolute = [p for p in ALL if "hta_v100_rank0" in p or "cs336_ddp" in p]  # relocated entries: a sample
    names = [os.path.relpath(p, DATA) for p in ALL] + absolute
    for name in names:
        want = open_traces(name)
        assert trace_cache.open_cached(name, lambda want=want: want) is want  # read, stored
        got = trace_cache.open_cached(name, lambda: pytest.fail("parsed on a hit"))
        same(want, got, name)
        assert got.traces[0].kernels.ts.flags.writeable  # the analysis may repair in place
    n = len(names)
    assert (cache.STATS.trace_misses, cache.STATS.trace_stores, cache.STATS.trace_hits) == (n, n, n)
    assert cache.STATS.damaged == cache.STATS.uncacheable == 0
    assert len(traces_in(cache_on)) == n


def test_odd_values_come_back_as_they_were(cache_on, tmp_path):
    """Tuples, non-string keys, numpy scalars, NaN, lone surrogates, a NUL inside a name, the path
    inside a name: each back with its type; a value the format cannot hold is not stored."""
    from trainscope.traces.model import TraceSet

    base = read(SMALL)
    t = base.traces[0]
    t.metadata.update(
        odd={"t": (1, 2.5, "x"), 3: [None, True], "nan": float("nan"), "np": np.int64(7), "f": np.float32(0.5)},
    )
    t.strings[:2] = ["a\0b", "lone \udc80 surrogate"]
    t.warnings.append(f"read from {os.path.abspath(SMALL)}")
    copy = tmp_path / "odd.json.gz"
    shutil.copy2(DATA / SMALL, copy)
    ts = TraceSet(str(copy), base.traces, ["w"])
    got = trace_cache.open_cached(str(copy), lambda: ts)
    same(ts, got)
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy2(copy, moved / "odd.json.gz")  # the same bytes and times, elsewhere: the same entry
    hit = trace_cache.open_cached(str(moved / "odd.json.gz"), lambda: pytest.fail("parsed on a hit"))
    assert hit.path == str(moved / "odd.json.gz") and hit.traces[0].metadata["odd"]["t"] == (1, 2.5, "x")
    same(hit.traces[0].strings, ts.traces[0].strings)
    assert cache.STATS.trace_hits == 1
    t.metadata["object"] = object()  # not representable: read, used, not stored
    other = tmp_path / "other.json.gz"
    shutil.copy2(DATA / SMALL, other)
    assert trace_cache.open_cached(str(other), lambda: TraceSet(str(other), [t])).traces[0] is t
    assert cache.STATS.uncacheable == 1 and len(traces_in(cache_on)) == 2  # SMALL's and odd's


def test_a_name_holding_the_placeholder_is_not_stored(cache_on, tmp_path):
    """The placeholder stands for the path in a relocated entry: a trace holding it is read, not kept."""
    from trainscope.traces.model import TraceSet

    t = read(SMALL).traces[0]
    t.strings[0] = f"x{cache._PLACEHOLDER}y"
    copy = tmp_path / "ph.json.gz"
    shutil.copy2(DATA / SMALL, copy)
    for name in (str(copy), os.path.relpath(copy)):  # relocated or not
        assert trace_cache.open_cached(name, lambda name=name: TraceSet(name, [t])).traces[0] is t
    assert cache.STATS.uncacheable == 2 and len(traces_in(cache_on)) == 1


GOLDEN_SET = [
    "analyze-cpu-fast",
    "analyze-cupti-hta_a100_alexnet_cupti_flop_counters",
    "analyze-dir-gloo",
    "analyze-kineto-hta_a100_control",
    "analyze-kineto-hta_v100_rank0",
    "analyze-kineto-tl_h100_timesformer_k400_infer",
    "analyze-nsys-cs336_ddp_2x3090",
    "analyze-nsys-cs336_small_train_step_a100",
]


@pytest.mark.parametrize("name", GOLDEN_SET)
def test_golden_documents_from_the_cached_columns(name, cache_on, monkeypatch):
    """The trace read (and its columns stored) once; then, with every reader refusing, the command
    line analyzes it from the columns: the golden document (the uncached reference)."""
    from trainscope import api

    path = CASES[name][1]
    api.analyze(path, trace_cache=True, jobs=1)  # the columns only, no document
    assert cache.STATS.trace_stores >= 1 and cache.STATS.stores == 0
    refuse_reading(monkeypatch)
    rc, got, err = run_in_process(["analyze", path, "--format", "json", "-q", "--jobs", "1"])
    assert rc == 0, err
    golden = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
    assert not differences(golden, normalized(json.loads(got), str(DATA)))
    assert cache.STATS.misses == 1 and cache.STATS.damaged == 0


# -- every consumer ------------------------------------------------------------------------------------


def test_html_perfetto_the_app_and_diff_read_the_columns(cache_on, monkeypatch, tmp_path):
    from trainscope import api
    from trainscope.tui.state import build_session

    rc, doc, _ = run_in_process(["analyze", GPU, "--format", "json", "-q"])  # document and columns stored
    _, html_plain, _ = run_in_process(["analyze", GPU, "--format", "html", "-q", "--no-cache"])
    _, diff_plain, _ = run_in_process(["diff", GPU, GPU, "--format", "json", "-q", "--no-cache"])
    assert rc == 0 and len(traces_in(cache_on)) == 1
    refuse_reading(monkeypatch)
    rc, html, err = run_in_process(["analyze", GPU, "--format", "html", "-q", "--perfetto", str(tmp_path / "p.json")])
    assert rc == 0, err
    assert html == html_plain and "timeline of the median step" in html and (tmp_path / "p.json").stat().st_size
    session = build_session(GPU, None, api.rules_from({}), cache=True)  # the app's loader
    assert session.report.to_dict() == json.loads(doc)
    rc, diff, err = run_in_process(["diff", GPU, GPU, "--format", "json", "-q"])
    assert rc == 0, err
    assert diff == diff_plain
    hits = cache.STATS.trace_hits
    assert hits >= 4
    for argv in (["analyze", GPU, "--format", "html", "-q", "--no-cache"], ["diff", GPU, GPU, "-q", "--no-cache"]):
        rc, _, err = run_in_process(argv)  # off: the trace is parsed (and refused here)
        assert rc != 0 and "was parsed" in err
    monkeypatch.setenv(cache.ENV_OFF, "1")
    rc, _, err = run_in_process(["diff", GPU, GPU, "-q"])
    assert rc != 0 and "was parsed" in err
    assert cache.STATS.trace_hits == hits


def test_each_rank_file_of_a_directory_reads_its_columns(cache_on, monkeypatch):
    from trainscope import api

    first = api.analyze("gloo", trace_cache=True, jobs=1).to_dict()
    n = len(traces_in(cache_on))
    assert n == len([f for f in os.listdir(DATA / "gloo") if f.endswith((".json", ".json.gz"))]) and n >= 2
    refuse_reading(monkeypatch)
    assert api.analyze("gloo", trace_cache=True, jobs=1).to_dict() == first


# -- damaged, killed, concurrent, changed --------------------------------------------------------------


def _damage(data: bytes) -> dict[str, bytes]:
    at = len(trace_cache.MAGIC)
    return {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "flipped": data[:-100] + bytes([data[-100] ^ 0x01]) + data[-99:],
        "garbage": os.urandom(4096),
        "short header": data[: at + 65 + 4],
        "a document's magic": cache.MAGIC + data[at:],
    }


def test_a_damaged_entry_is_removed_rebuilt_and_counted(cache_on, capfd):
    want = read(SMALL)
    (name,) = traces_in(cache_on)
    data = (cache_on / name).read_bytes()
    capfd.readouterr()
    for i, (why, bad) in enumerate(_damage(data).items(), 1):
        (cache_on / name).write_bytes(bad)
        same(want, read(SMALL), why)
        assert cache.STATS.damaged == i, why
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and err.startswith("trainscope: cache: damaged entry "), (why, err)
        assert (cache_on / name).read_bytes() == data, why  # rebuilt, the same bytes
    assert cache.STATS.trace_hits == 0


def test_a_forged_entry_with_a_valid_checksum_is_refused(cache_on, capfd):
    """A column that points outside the data or has another dtype is damage, whatever the checksum."""
    import hashlib
    import struct

    read(SMALL)
    (name,) = traces_in(cache_on)
    data = (cache_on / name).read_bytes()
    at = len(trace_cache.MAGIC) + 65
    (n,) = struct.unpack("<Q", data[at : at + 8])
    header = json.loads(data[at + 8 : at + 8 + n])
    for why, change in (
        ("outside", lambda h: h["traces"][0]["tables"]["kernels"]["cols"]["ts"].__setitem__(0, 1 << 40)),
        ("object dtype", lambda h: h["traces"][0]["tables"]["kernels"]["cols"]["ts"].__setitem__(1, "|O")),
    ):
        h = json.loads(json.dumps(header))
        change(h)
        head = json.dumps(h).encode()
        head += b" " * (-(8 + len(head)) % trace_cache.ALIGN)
        rest = struct.pack("<Q", len(head)) + head + data[at + 8 + n :]
        (cache_on / name).write_bytes(trace_cache.MAGIC + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest)
        read(SMALL)
        assert "damaged entry" in capfd.readouterr().err, why
    assert cache.STATS.damaged == 2


def test_a_version_change_is_a_miss_an_analyzer_change_is_not(cache_on, monkeypatch):
    import trainscope

    read(SMALL)
    monkeypatch.setattr(cache, "_code", "another analyzer")  # the documents' key changes, not the columns'
    read(SMALL)
    assert cache.STATS.trace_hits == 1
    for attr, value in ((trace_cache, ("_reader", "another reader")), (trainscope, ("__version__", "9.9.9"))):
        monkeypatch.setattr(attr, *value)
        read(SMALL)
    assert (cache.STATS.trace_hits, cache.STATS.trace_misses) == (1, 3)
    monkeypatch.setenv("TRAINSCOPE_MAX_DECOMPRESSED", "1GiB")  # a reader option is in the key
    read(SMALL)
    assert cache.STATS.trace_misses == 4 and len(traces_in(cache_on)) == 4


def test_one_trace_never_takes_the_whole_bound(cache_on, monkeypatch, capfd):
    read(SMALL)
    (name,) = traces_in(cache_on)
    size = (cache_on / name).stat().st_size
    monkeypatch.setenv(cache.ENV_MAX, str(4 * size - 1))
    other = "cpu/slow.pt.trace.json.gz"
    capfd.readouterr()
    read(other)
    read(other)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "are not kept: more than 1/4 of the cache's bound" in err
    assert cache.STATS.too_large == 2 and traces_in(cache_on) == [name]  # nothing evicted for it


WRITER = ["analyze", SMALL, "--format", "html", "-q", "--no-tui"]


def test_a_writer_killed_mid_write_leaves_nothing_anyone_trusts(cache_on, tmp_path):
    p = writer(WRITER, trace_cache.ENV_PAUSE, tmp_path / "paused")
    assert paused(p, tmp_path / "paused") == p.pid
    assert len(temporary(cache_on)) == 1 and traces_in(cache_on) == []
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    same(read(SMALL), read(SMALL))  # the partial file is no entry: read, stored (the stray swept), then a hit
    assert (cache.STATS.trace_misses, cache.STATS.trace_hits, cache.STATS.damaged) == (1, 1, 0)
    assert temporary(cache_on) == [] and len(traces_in(cache_on)) == 1


def test_two_writers_of_one_entry_both_leave_a_valid_one(cache_on, tmp_path):
    outs = two_writers_of_one_entry(WRITER, trace_cache.ENV_PAUSE, cache_on, tmp_path)
    assert outs[0] == outs[1]
    assert len(traces_in(cache_on)) == 1 and temporary(cache_on) == []
    from trainscope.collectors import open_traces

    same(open_traces(SMALL), trace_cache.open_cached(SMALL, lambda: pytest.fail("parsed on a hit")))
    assert cache.STATS.damaged == 0
