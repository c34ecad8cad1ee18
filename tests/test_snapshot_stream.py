"""The streaming snapshot reader (collectors/_pickle_stream.c): the model it builds equals the
restricted unpickler's on every real snapshot; hostile or odd input is declined (no object built,
no code run) and read or refused by the unpickler's path in its one-line words."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DATA
from trainscope.collectors import snapshot as S
from trainscope.collectors.errors import TraceError
from trainscope.collectors.safe_pickle import loads_plain

SNAPSHOTS = [
    DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz",
    DATA / "memory" / "mem_oom_flexgen_opt.pickle",
]
GZ, OOM = SNAPSHOTS

needs_stream = pytest.mark.skipif(
    bool(S.STREAMING_MISSING), reason=S.STREAMING_MISSING or "the streaming reader is built"
)


def _ps():
    from trainscope.collectors import _pickle_stream

    return _pickle_stream


def _raw(path: Path = GZ) -> dict:
    data = path.read_bytes()
    return loads_plain(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _write(tmp_path: Path, obj, name: str = "s.pickle", protocol: int = 4) -> str:
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj, protocol=protocol))  # writing plain data; reading goes through the safe path
    return str(p)


def assert_same_model(a, b) -> None:
    assert a.segments == b.segments and a.annotations == b.annotations
    assert a.allocator_settings == b.allocator_settings and a.warnings == b.warnings
    assert len(a.traces) == len(b.traces)
    for x, y in zip(a.traces, b.traces):
        assert x.device == y.device
        for col in ("action", "addr", "size", "time_us"):
            u, v = getattr(x, col), getattr(y, col)
            assert u.dtype == v.dtype and np.array_equal(u, v), col
        assert x.frames == y.frames


def _fallback(path: str, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv(S.READER_ENV, "unpickler")
        assert not S.streaming_available()
        return S.load_snapshot(path)


@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_fallback_reads_every_real_snapshot(path, monkeypatch):
    """Runs whether or not the extension is built: the restricted unpickler's path, forced."""
    snap = _fallback(str(path), monkeypatch)
    raw = _raw(path)
    assert len(snap.segments) == len(raw["segments"])
    assert [len(t) for t in snap.traces] == [len(t) for t in raw["device_traces"]]


@needs_stream
@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.name)
def test_the_streaming_model_equals_the_unpicklers(path, monkeypatch):
    calls = []
    batch = S._Parse.batch
    monkeypatch.setattr(
        S._Parse, "batch", lambda self, st, items: (calls.append((st.index, len(items))), batch(self, st, items))
    )
    streamed = S._read_streaming(str(path), 1 << 30)  # no fallback: a decline would raise here
    raw = _raw(path)
    # both lists were streamed, not built: segments in one batch, device 0's events in one
    assert sorted(calls) == [(-1, len(raw["segments"])), (0, len(raw["device_traces"][0]))]
    assert_same_model(streamed, _fallback(str(path), monkeypatch))
    assert_same_model(S.load_snapshot(str(path)), streamed)  # through the child


@needs_stream
def test_batches_are_chunks_and_the_oldest_format_streams_too(tmp_path, monkeypatch):
    """In batches of 1,000 the model is the one the unpickler's path builds; a bare list of
    segments (the oldest snapshots) streams as the root itself; protocols 2, 3 and 5 read alike."""
    monkeypatch.setattr(S, "CHUNK", 1000)
    raw = _raw()
    raw["device_traces"] = [raw["device_traces"][0], raw["device_traces"][0][:2500], []]
    path = _write(tmp_path, raw)
    assert_same_model(S._read_streaming(path, 1 << 30), _fallback(path, monkeypatch))
    bare = _write(tmp_path, _raw()["segments"], "bare.pickle")
    a = S._read_streaming(bare, 1 << 30)
    assert len(a.segments) == 999 and a.traces == []
    assert_same_model(a, _fallback(bare, monkeypatch))
    for protocol in (2, 3, 5):
        p = _write(tmp_path, raw, f"p{protocol}.pickle", protocol)
        assert_same_model(S._read_streaming(p, 1 << 30), _fallback(p, monkeypatch))


@needs_stream
@pytest.mark.parametrize(
    "alias",
    [
        lambda raw: raw.__setitem__("copy", raw["segments"]),  # the streamed list read again from the memo
        lambda raw: raw.__setitem__("copy", raw["device_traces"]),
        lambda raw: raw["device_traces"].append(raw["device_traces"][0]),  # one events list for two devices
    ],
    ids=["segments-shared", "device-traces-shared", "events-shared"],
)
def test_a_layout_it_does_not_stream_is_declined_and_read_by_the_unpickler(tmp_path, monkeypatch, alias):
    raw = _raw()
    alias(raw)
    path = _write(tmp_path, raw)
    with pytest.raises(_ps().Decline, match="read again from the memo"):
        S._read_streaming(path, 1 << 30)
    # declined, then read by the fallback: the same outcome as the fallback forced (the model, or
    # for one events list shared by two devices the same refusal: the parse consumes the first)
    outcomes = []
    for read in (lambda: S.load_snapshot(path), lambda: _fallback(path, monkeypatch)):
        try:
            outcomes.append(read())
        except TraceError as e:
            outcomes.append(str(e))
    if isinstance(outcomes[0], str):
        assert outcomes[0] == outcomes[1] and "a trace event is not a dict" in outcomes[0]
    else:
        assert_same_model(*outcomes)


# --- hostile input: declined before any object is built ------------------------------------------

# Every opcode outside plain data, as pickletools names them (the ones that name a global or call
# something, and DUP/POP and the text opcodes of protocols 0-1).
_REFUSED = {
    "GLOBAL": b"cos\nsystem\n",
    "STACK_GLOBAL": b"\x8c\x02os\x8c\x06system\x93",
    "REDUCE": b"N)R",
    "BUILD": b"}}b",
    "INST": b"(ios\nsystem\n",
    "OBJ": b"(No",
    "NEWOBJ": b"N)\x81",
    "NEWOBJ_EX": b"N)}\x92",
    "EXT1": b"\x82\x01",
    "EXT2": b"\x83\x01\x00",
    "EXT4": b"\x84\x01\x00\x00\x00",
    "PERSID": b"P1\n",
    "BINPERSID": b"NQ",
    "DUP": b"N2",
    "POP": b"N0N",
    "POP_MARK": b"(1N",
    "INT": b"I1\n",
    "LONG": b"L1\n",
    "FLOAT": b"F1.0\n",
    "STRING": b"S'a'\n",
    "UNICODE": b"Va\n",
    "BINSTRING": b"T\x01\x00\x00\x00a",
    "SHORT_BINSTRING": b"U\x01a",
    "BYTEARRAY8": b"\x96\x01" + b"\x00" * 7 + b"a",
    "NEXT_BUFFER": b"\x97",
    "READONLY_BUFFER": b"\x97\x98",
    "FROZENSET": b"(\x91",
    "ADDITEMS": b"\x8f(\x90",
    "GET": b"N\x94g0\n",
    "PUT": b"Np0\n",
}


@needs_stream
@pytest.mark.parametrize("name", sorted(_REFUSED))
def test_every_opcode_outside_plain_data_is_declined_by_the_scan(name):
    payload = b"\x80\x04" + _REFUSED[name] + b"."
    with pytest.raises(_ps().Decline, match="outside plain data"):
        _ps().scan(io.BytesIO(payload).readinto)
    # and by build, even given a plan of other bytes (the file changed between the passes)
    plan = _ps().scan(io.BytesIO(b"\x80\x04N.").readinto)
    with pytest.raises(_ps().Decline):
        _ps().build(io.BytesIO(payload).readinto, plan, lambda s, i: None, 10, "segments", "device_traces")


class _Pwn:
    def __reduce__(self):
        import os

        return (os.system, ("touch pwned",))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_global_is_refused_in_one_line_and_runs_nothing(tmp_path, monkeypatch, protocol):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "h.pickle"
    p.write_bytes(pickle.dumps({"segments": [_Pwn()]}, protocol=protocol))  # what a hostile file holds
    with pytest.raises(TraceError, match="refuses to load (os|posix).system"):
        S.load_snapshot(str(p))
    assert not (tmp_path / "pwned").exists()


@needs_stream
@pytest.mark.parametrize(
    "payload,says",
    [
        (b"\x80\x04h\x05.", "memo get of an index never put"),
        (b"\x80\x04]\x94j\x01\x00\x00\x00.", "memo get of an index never put"),
        (b"\x80\x02]r" + struct.pack("<I", 2**31) + b".", "memo put out of sequence"),
        (b"\x80\x04" + b"(" * 5000 + b".", "too many marks open"),
        (b"\x80\x04" + b"]" * (1 << 22) + b"]" + b".", "objects on the stack"),
        (b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc.", "truncated"),
        (b"\x80\x04\x8d" + struct.pack("<Q", 2**63 + 5) + b"abc.", "declared length beyond any file"),
        (b"\x80\x04X" + struct.pack("<I", 2**32 - 1) + b"abc.", "truncated"),
        (b"\x80\x05\x95" + struct.pack("<Q", 2**60) + b"].", "frame larger"),
        (b"\x80\x04\x8b" + struct.pack("<i", -1) + b".", "integer longer"),
        (b"\x80\x04(e.", "stack underflow"),
        (b"\x80\x04Na.", "stack underflow"),
        (b"\x80\x04}N(NNNu.", "odd number of items for SETITEMS"),
        (b"\x80\x04NN.", "STOP with other than one object"),
        (b"\x80\x07N.", "protocol outside 2-5"),
        (b"(lp0\n.", "not a protocol 2-5 pickle"),
    ],
)
def test_hostile_structure_is_declined_before_building(payload, says):
    with pytest.raises(_ps().Decline, match=says):
        _ps().scan(io.BytesIO(payload).readinto)


@pytest.mark.parametrize(
    "payload,says",
    [
        (b"\x80\x04h\x05.", "not a readable pickle"),
        (b"\x80\x04" + b"(" * 5000 + b".", "not a readable pickle"),
        (b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc.", "declares"),
    ],
)
def test_hostile_structure_is_a_one_line_refusal_either_way(tmp_path, monkeypatch, payload, says):
    p = tmp_path / "h.pickle"
    p.write_bytes(payload)
    for reader in ("", "unpickler"):
        monkeypatch.setenv(S.READER_ENV, reader)
        with pytest.raises(TraceError, match=says) as e:
            S.load_snapshot(str(p))
        assert "\n" not in str(e.value)


def _small_real() -> bytes:
    """A small snapshot of the real one's first 12 segments and 40 events (stacks and all)."""
    raw = _raw()
    raw["segments"] = raw["segments"][:12]
    raw["device_traces"] = [raw["device_traces"][0][:40]]
    return pickle.dumps(raw, protocol=4)


@needs_stream
def test_truncated_at_every_byte_is_declined_by_both_passes():
    """Cut at every byte: the scan declines each (no crash, no hang), and build given the whole
    file's plan declines each too (the file shrank between the passes); no callback sees a
    half-built item."""
    data = _small_real()
    ps = _ps()
    plan = ps.scan(io.BytesIO(data).readinto)
    assert plan.stop_offset == len(data) - 1
    for n in range(len(data)):
        cut = data[:n]
        with pytest.raises(ps.Decline):
            ps.scan(io.BytesIO(cut).readinto)
        with pytest.raises(ps.Decline):
            ps.build(io.BytesIO(cut).readinto, plan, lambda s, items: None, 7, "segments", "device_traces")


def test_truncated_snapshots_are_one_line_refusals(tmp_path):
    """Through the whole reader (child, fallback, messages) at 60 cuts spread over the file."""
    data = _small_real()
    p = tmp_path / "t.pickle"
    for n in np.linspace(1, len(data) - 1, 60).astype(int):
        p.write_bytes(data[:n])
        with pytest.raises(TraceError) as e:
            S.load_snapshot(str(p))
        assert "\n" not in str(e.value) and ("truncated" in str(e.value) or "readable" in str(e.value)), str(e.value)


@needs_stream
def test_a_callback_error_propagates_and_leaves_nothing_behind():
    data = _small_real()
    ps = _ps()
    plan = ps.scan(io.BytesIO(data).readinto)

    def boom(stream, items):
        raise KeyError("from the parse")

    with pytest.raises(KeyError, match="from the parse"):
        ps.build(io.BytesIO(data).readinto, plan, boom, 5, "segments", "device_traces")
    seen = []
    root = ps.build(
        io.BytesIO(data).readinto,
        plan,
        lambda s, items: seen.append((s.index, len(items))),
        5,
        "segments",
        "device_traces",
    )
    assert type(root["segments"]) is ps.Stream and root["segments"].count == 12
    assert type(root["device_traces"][0]) is ps.Stream and root["device_traces"][0].count == 40
    assert sorted(seen) == [(-1, 2)] + [(-1, 5)] * 2 + [(0, 5)] * 8


@needs_stream
def test_streaming_holds_the_columns_not_the_tree(tmp_path, monkeypatch):
    """The point of the streaming reader: on a 4× repeated real snapshot (≈ 14 MiB of pickle, in
    batches of 2,000 events: the file is 39 batches, as a 1 GB one is 67 of 65,536) its traced
    peak (every Python object and buffer) is under half the unpickler path's, which holds the whole
    tree before the parse consumes it (measured: 12.7 against 67.1 MB, 0.19×)."""
    import tracemalloc

    monkeypatch.setattr(S, "CHUNK", 2000)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_snapshot

    path = _write(tmp_path, bench_snapshot._repeated(_raw(), 4))
    peaks = {}
    for name, read in (("stream", S._read_streaming), ("unpickler", S._read_unpickled)):
        tracemalloc.start()
        snap = read(path, 1 << 30)
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(snap.traces[0]) == 4 * 19_464
        del snap
    assert peaks["stream"] < 0.5 * peaks["unpickler"], peaks


@needs_stream
def test_a_gzip_snapshot_streams_in_two_inflations_and_damage_is_refused(tmp_path, monkeypatch):
    assert_same_model(S._read_streaming(str(GZ), 1 << 30), _fallback(str(GZ), monkeypatch))
    data = GZ.read_bytes()
    p = tmp_path / "d.pickle.gz"
    p.write_bytes(data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:])  # the CRC, after the pickle's STOP
    with pytest.raises(Exception, match="corrupt gzip data"):
        S._read_streaming(str(p), 1 << 30)
    with pytest.raises(TraceError, match="gzip data is damaged: corrupt gzip data"):
        S.load_snapshot(str(p))


@pytest.mark.parametrize("reader", ["", "unpickler"])
def test_a_bytearray_bomb_is_one_line_on_the_terminal(tmp_path, reader):
    """Both readers hand a BYTEARRAY8 length bomb to the C unpickler, which (CPython 3.11) prints
    "SystemError: deallocated bytearray object has exported buffers" of its own while refusing it:
    silenced in the reader's child, so stderr holds the one refusal line."""
    import os
    import subprocess

    p = tmp_path / "b.pickle"
    p.write_bytes(b"\x80\x04\x96" + struct.pack("<Q", 2**62) + b"abc.")
    env = dict(os.environ, **{S.READER_ENV: reader})
    r = subprocess.run(
        [sys.executable, "-m", "trainscope", "memory", str(p)], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "declares" in r.stderr, r.stderr


def test_both_readers_agree_on_mutants(tmp_path, monkeypatch):
    """The fuzzer's pickle mutants (byte flips, cuts, hostile opcodes, the snapshot re-pickled at
    protocols 0-5 with hostile leaves), each read by the streaming reader (and, where it declines,
    the fallback) and by the fallback forced: the same model or the same one-line refusal. (150 of
    150 agreed in a longer run; 14 of those streamed whole, the rest were declined or refused.)"""
    import random

    from tests.fuzzing import mutate_pickle

    data = gzip.decompress(GZ.read_bytes())
    rnd = random.Random(5)
    p = tmp_path / "m.pickle"
    for _ in range(20):
        p.write_bytes(mutate_pickle(data, rnd))
        outcomes = []
        for reader in ("", "unpickler"):
            monkeypatch.setenv(S.READER_ENV, reader)
            try:
                outcomes.append(S.load_snapshot(str(p)))
            except TraceError as e:
                outcomes.append(str(e))
        if isinstance(outcomes[0], str) or isinstance(outcomes[1], str):
            assert outcomes[0] == outcomes[1]
        else:
            assert_same_model(*outcomes)


def _random_plain(rnd, depth: int = 0, with_bytes: bool = True):
    """A random tree of every plain type pickle writes with the opcodes the reader admits (bytes from
    protocol 3: protocol 2 writes them through a global, which the reader declines)."""
    leaves = [
        lambda: rnd.choice([0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63)]),
        lambda: rnd.randint(-(2**70), 2**70),
        lambda: rnd.choice([2**64 * 3 + 7, -(2**200), 2**1000, -(2**3000), 2**3000 + 1]),  # LONG1, LONG4
        lambda: rnd.choice([0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"), 1e-310]),
        lambda: "".join(rnd.choice("aé€😀\ud800 \n") for _ in range(rnd.randint(0, 300))),
        lambda: bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 300))) if with_bytes else b"".decode(),
        lambda: rnd.choice([True, False, None]),
    ]
    if depth > 4 or rnd.random() < 0.3:
        return rnd.choice(leaves)()
    k = rnd.randrange(5)
    if depth == 0 and rnd.random() < 0.3:  # around pickle's batches of 1,000 appends and set-items
        items = [rnd.choice(leaves)() for _ in range(rnd.choice([999, 1000, 1001, 2001]))]
    else:
        items = [_random_plain(rnd, depth + 1, with_bytes) for _ in range(rnd.randint(0, 5))]
    if k == 0:
        return items
    if k == 1:
        return tuple(items)
    if k == 2:
        return {str(i) if i % 3 else i: x for i, x in enumerate(items)}
    if k == 3:
        shared = items[:1] or [[]]
        return [shared, shared, {"again": shared}]  # one object, read again from the memo
    return {"segments": items}


@needs_stream
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_build_makes_what_the_unpickler_makes(protocol):
    """Random plain trees (ints of every width and sign, floats with nan/inf/-0.0, strings with
    astral characters and lone surrogates, bytes, tuples of 0-5+ items, batches of 1,000 around
    their edges, shared objects): build's tree, nothing streamed, is the unpickler's."""
    import random

    ps = _ps()
    rnd = random.Random(protocol)
    for _ in range(60):
        obj = {"tree": _random_plain(rnd, 0, protocol > 2)}  # a root dict: no key streams
        data = pickle.dumps(obj, protocol=protocol)  # writing plain data; reading goes through the safe path
        plan = ps.scan(io.BytesIO(data).readinto)
        got = ps.build(io.BytesIO(data).readinto, plan, None, 5, "no such key", "nor this")
        assert repr(got) == repr(pickle.loads(data))  # trusted: built here


# --- above the unpickler's size limit, the streaming reader alone -------------------------------


@needs_stream
def test_above_the_unpicklers_limit_the_streaming_reader_reads_it(monkeypatch):
    """The unpickler's tree takes ≈ 4× a file, so it keeps its 1 GiB limit; the streaming reader
    (0.7× at 1 GB) reads files beyond it. Scaled down: the unpickler's limit set to 1 MiB, a real
    3.6 MiB snapshot is read whole by the streaming reader, refused by the forced fallback."""
    path = str(GZ)
    assert len(gzip.decompress(GZ.read_bytes())) > 1 << 20  # the limit is on the inflated pickle
    whole = S.load_snapshot(path)
    monkeypatch.setattr(S, "DEFAULT_MAX_BYTES", 1 << 20)
    assert_same_model(S.load_snapshot(path), whole)
    with pytest.raises(TraceError, match="decompresses to more than 1 MiB"):  # the gzip reader's words
        _fallback(path, monkeypatch)


@needs_stream
def test_above_the_unpicklers_limit_a_declined_file_says_why(tmp_path, monkeypatch):
    raw = _raw()
    raw["copy"] = raw["segments"]  # a layout the streaming reader declines (the list read again)
    path = _write(tmp_path, raw)
    assert os.path.getsize(path) > 1 << 20
    monkeypatch.setattr(S, "DEFAULT_MAX_BYTES", 1 << 20)
    with pytest.raises(TraceError) as e:
        S.load_snapshot(path)
    msg = str(e.value)
    assert "the streaming reader declined it (" in msg and "read again from the memo" in msg
    assert "snapshots up to 1 MiB only" in msg and "\n" not in msg
