"""The snapshot reader's C-speed path: the restricted C unpickler in a forked child under an
address-space limit, the plain-data check made where the parse reads, equal stacks shared."""

from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from trainscope.collectors.errors import TraceError
from trainscope.collectors.safe_pickle import loads_plain
from trainscope.collectors.snapshot import load_snapshot
from trainscope.collectors.snapshot import load_snapshot_in_process
from trainscope.collectors.snapshot import shared_stacks

SNAPSHOT = DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz"


def _raw() -> dict:
    return loads_plain(gzip.decompress(SNAPSHOT.read_bytes()))


def test_the_child_sends_back_the_model_the_parse_builds():
    a, b = load_snapshot(str(SNAPSHOT)), load_snapshot_in_process(str(SNAPSHOT))
    assert len(a.traces) == len(b.traces) == 1 and len(a.traces[0]) == 19_464
    for x, y in zip(a.traces, b.traces):
        for col in ("action", "addr", "size", "time_us"):
            assert np.array_equal(getattr(x, col), getattr(y, col)) and getattr(x, col).dtype == getattr(y, col).dtype
        assert x.frames == y.frames
    assert a.segments == b.segments and a.annotations == b.annotations and a.allocator_settings == b.allocator_settings
    # against the raw events, independently of the parse
    raw = _raw()["device_traces"][0]
    assert a.traces[0].size.tolist() == [e["size"] for e in raw]
    assert a.traces[0].frames == [e["frames"] for e in raw]
    # equal stacks arrive shared: 19,464 events hold 204 distinct sequences of frame objects
    # (176 distinct by value); no more lists than the former, no fewer than the latter
    by_ids = len({tuple(map(id, e["frames"])) for e in raw})
    by_value = len({tuple((f["name"], f["filename"], f["line"]) for f in e["frames"]) for e in raw})
    assert (by_value, by_ids) == (176, 204)
    assert by_value <= len({id(f) for f in a.traces[0].frames}) <= by_ids


def _write(tmp_path: Path, obj, name: str = "s.pickle") -> str:
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj, protocol=4))  # writing plain data; reading goes through the safe path
    return str(p)


@pytest.mark.parametrize(
    "value,says",
    [({1, 2}, "set"), (frozenset({3}), "frozenset")],
)
def test_a_frame_holding_what_a_snapshot_never_holds_is_refused(tmp_path, value, says):
    raw = _raw()
    raw["device_traces"][0][7]["frames"][3] = dict(raw["device_traces"][0][7]["frames"][3], name=value)
    with pytest.raises(TraceError, match=f"rejected: holds a {says}"):
        load_snapshot(_write(tmp_path, raw))


def test_a_deep_frame_is_refused_and_plain_odd_frames_still_read(tmp_path):
    raw = _raw()
    deep: list = []
    for _ in range(200):
        deep = [deep]
    raw["segments"][0]["blocks"][0]["frames"] = [{"name": deep}]
    with pytest.raises(TraceError, match="deeper"):
        load_snapshot(_write(tmp_path, raw))
    raw = _raw()
    raw["device_traces"][0][0]["frames"] = ["not a dict", {"name": ["a", "list"], "line": 1}]
    raw["device_traces"][0][1]["frames"] = None
    snap = load_snapshot(_write(tmp_path, raw))
    assert snap.traces[0].frames[0] == ["not a dict", {"name": ["a", "list"], "line": 1}]
    assert snap.traces[0].frames[1] == []


def test_a_non_integer_column_is_a_one_line_refusal(tmp_path):
    raw = _raw()
    raw["device_traces"][0][5]["size"] = True
    with pytest.raises(TraceError, match="event size is bool, expected an integer"):
        load_snapshot(_write(tmp_path, raw))
    raw = _raw()
    raw["device_traces"][0][5]["time_us"] = 2**70
    with pytest.raises(TraceError, match="OverflowError"):
        load_snapshot(_write(tmp_path, raw))


def test_unknown_actions_are_named_whatever_their_type(tmp_path):
    raw = _raw()
    raw["device_traces"][0][2]["action"] = ["odd"]
    raw["device_traces"][0][3]["action"] = "teleport"
    raw["device_traces"][0][4]["action"] = 5
    snap = load_snapshot(_write(tmp_path, raw))
    assert snap.warnings == ["device 0: ignored unknown trace actions: 5, <list>, teleport"]


def test_shared_stacks_merges_only_equal_lists():
    a, b, c = {"name": "a"}, {"name": "b"}, {"name": "c"}
    s1, s2 = [a, b, c], [a, b, c]  # equal, different objects
    s3 = [a, c, c]  # same first, last and length as s1 but another middle: must stay apart
    out = shared_stacks([s1, [], s2, s3, [], [a]])
    assert out == [s1, [], s2, s3, [], [a]]
    assert out[0] is out[2] and out[3] is not out[0] and out[3] == s3


def test_a_memory_bomb_costs_the_child_not_the_caller(tmp_path):
    """24 MB of EMPTY_LIST opcodes unpickle to 24 M lists (≈ 1.9 GB with the stack's pointers): no
    structural flaw the opcode scan would see; refused in one line by the child's limit (its
    parent's address space + 512 MiB + 8 × 24 MB). The peak RSS measured (the command and the
    reader it forks) stays under 1 GiB, far below what the lists would take."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fuzz

    bomb = tmp_path / "bomb.pickle"
    bomb.write_bytes(b"\x80\x04(" + b"]" * 24_000_000 + b"l.")
    rc, out, err, rss, _ = fuzz.run_cli(["memory", str(bomb), "--format", "json"], 0, 120, str(tmp_path))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "memory limit" in err and "memory bomb" in err
    assert rss < 1 << 30, f"peaked at {rss / 2**20:.0f} MiB"


def test_the_child_reports_a_bug_a_death_and_a_foreign_result_apart():
    import os
    from collections import OrderedDict

    from trainscope.collectors.isolated import ChildError
    from trainscope.collectors.isolated import run_limited

    assert run_limited(lambda x: np.arange(x), (3,), 256 << 20).tolist() == [0, 1, 2]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        run_limited(lambda: 1 // 0, (), 256 << 20)
    with pytest.raises(ChildError, match="signal 9"):
        run_limited(lambda: os.kill(os.getpid(), 9), (), 256 << 20)
    with pytest.raises(ChildError, match="collections.OrderedDict"):
        run_limited(OrderedDict, (), 256 << 20)
    with pytest.raises(ChildError, match="memory limit"):
        run_limited(lambda: bytearray(1 << 30), (), 256 << 20)


@pytest.mark.parametrize(
    "payload,says",
    [
        (b"\x80\x04\x8e" + (2**40).to_bytes(8, "little") + b"abc.", "declares"),  # BINBYTES8
        (b"\x80\x02]r" + (2**31).to_bytes(4, "little") + b".", "memo index"),  # LONG_BINPUT far ahead
        (b"cos\nsystem\n(S'echo pwned'\ntR.", "refuses to load os.system"),
    ],
)
def test_without_fork_the_opcode_scan_bounds_the_read(tmp_path, monkeypatch, payload, says):
    """Where no child can be forked (Windows), the read runs in-process and the opcode scan comes
    first, as it did before the child existed."""
    from trainscope.collectors import snapshot

    monkeypatch.setattr(snapshot, "can_isolate", lambda: False)
    monkeypatch.setattr(snapshot, "run_limited", lambda fn, args, limit: fn(*args))
    path = tmp_path / "h.pickle"
    path.write_bytes(payload)
    with pytest.raises(TraceError, match=says):
        load_snapshot(str(path))
    assert len(load_snapshot(str(SNAPSHOT)).traces[0]) == 19_464


def test_the_parse_converts_in_chunks_and_drops_what_it_converted(monkeypatch):
    """The parse consumes the unpickled tree: each chunk of events (and each segment) is dropped
    once converted, so the tree and the model are never both whole (the child's peak is the tree's,
    not the tree's plus the columns'). Chunks of 1,000 events give the model one chunk gives."""
    from trainscope.collectors import snapshot as S

    whole = load_snapshot_in_process(str(SNAPSHOT))
    monkeypatch.setattr(S, "CHUNK", 1000)  # 19,464 events: 20 chunks, the last one short
    raw = _raw()
    events, segments = raw["device_traces"][0], raw["segments"]
    raw["device_traces"][0][2]["action"] = "teleport"  # unknown actions in two chunks: one warning
    raw["device_traces"][0][19_000]["action"] = 5
    snap = S._parse("s", raw)
    assert "device_traces" not in raw and "segments" not in raw
    assert set(map(type, events)) == {type(None)} and set(map(type, segments)) == {type(None)}
    (a,), (b,) = snap.traces, whole.traces
    assert len(a) == len(b) == 19_464
    for col in ("addr", "size", "time_us"):
        assert np.array_equal(getattr(a, col), getattr(b, col)) and getattr(a, col).dtype == np.int64
    assert a.action.dtype == np.int8 and (a.action != b.action).sum() == 2
    assert a.frames == b.frames and snap.segments == whole.segments
    assert snap.warnings == ["device 0: ignored unknown trace actions: 5, teleport"]
    # stacks are shared across chunks too: no more distinct lists than one chunk found
    assert len({id(f) for f in a.frames}) == len({id(f) for f in b.frames})


def test_a_bad_event_in_a_later_chunk_is_refused_in_one_line(tmp_path, monkeypatch):
    from trainscope.collectors import snapshot as S

    monkeypatch.setattr(S, "CHUNK", 1000)
    raw = _raw()
    raw["device_traces"][0][15_001]["addr"] = "0x7f"
    with pytest.raises(TraceError, match="event addr is str, expected an integer"):
        load_snapshot(_write(tmp_path, raw))
    raw = _raw()
    raw["device_traces"][0][12_345] = ["not", "a", "dict"]
    with pytest.raises(TraceError, match="a trace event is not a dict"):
        load_snapshot(_write(tmp_path, raw))


def _bench():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_snapshot

    return bench_snapshot


def test_a_gzip_snapshot_streams_to_the_unpickler(tmp_path):
    """A .pickle.gz is inflated piece by piece as the unpickler reads, never whole beside the
    objects: reading a 4× repeated snapshot (≈ 14 MiB inflated) gzipped peaks within 8 MiB of
    reading it uncompressed (traced allocations; inflating it first cost its whole size, twice
    while the pieces were joined), and gives the same model."""
    import tracemalloc

    big = pickle.dumps(_bench()._repeated(_raw(), 4), protocol=4)
    plain, gz = tmp_path / "s.pickle", tmp_path / "s.pickle.gz"
    plain.write_bytes(big)
    gz.write_bytes(gzip.compress(big, compresslevel=1))
    peaks = {}
    for p in (plain, gz):
        tracemalloc.start()
        snap = load_snapshot_in_process(str(p))
        peaks[p.name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(snap.traces[0]) == 4 * 19_464
    assert len(big) > 12 << 20
    assert peaks["s.pickle.gz"] - peaks["s.pickle"] < 8 << 20, peaks
    a, b = load_snapshot(str(plain)), load_snapshot(str(gz))
    assert np.array_equal(a.traces[0].time_us, b.traces[0].time_us) and a.traces[0].frames == b.traces[0].frames
    assert a.segments == b.segments


@pytest.mark.parametrize(
    "damage,says",
    [
        (lambda b: b[:-6], "gzip stream is truncated"),  # cut in the trailer: the pickle's STOP was read
        (lambda b: b[:-8] + bytes([b[-8] ^ 0xFF]) + b[-7:], "corrupt gzip data"),  # CRC: after STOP too
        (lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0xFF]) + b[len(b) // 2 + 1 :], "corrupt gzip data"),
    ],
)
def test_gzip_damage_is_refused_even_past_the_pickles_end(tmp_path, damage, says):
    p = tmp_path / "s.pickle.gz"
    p.write_bytes(damage(SNAPSHOT.read_bytes()))
    with pytest.raises(TraceError, match=f"gzip data is damaged: {says}"):
        load_snapshot(str(p))


def test_a_gzip_snapshot_over_the_limit_is_refused_while_inflating():
    with pytest.raises(TraceError, match="decompresses to more than"):
        load_snapshot(str(SNAPSHOT), max_bytes=1 << 20)
