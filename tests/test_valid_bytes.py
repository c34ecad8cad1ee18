"""Reading every valid byte (issue 35): lone-surrogate escapes and bytes that are not UTF-8 inside
JSON strings are repaired and counted, never taken for truncation.

A property test over every bundled Kineto trace: escapes and bytes are inserted at random (fixed
seeds) into string values — event names, args, thread names, the top-level fields before and after
the event array — and the trace must read as the clean one does: the same number of rows in every
table, the same top-level fields, no "truncated" note, one warning that counts exactly what was
inserted; the streaming reader (with slices shrunk so that the faults fall on hundreds of slice
boundaries, plain and gzip) and the in-memory reader give the same tables."""

from __future__ import annotations

import gzip
import json
import random
import re

import numpy as np
import pytest

from tests.conftest import ALL_KINETO
from tests.conftest import KINETO
from tests.test_kineto_stream import _same
from tests.test_kineto_stream import in_halves_and_serially
from trainscope.collectors import kineto_stream
from trainscope.collectors import readers
from trainscope.collectors.kineto import load_kineto
from trainscope.collectors.kineto import load_kineto_in_memory

TABLES = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "memory", "python_frames")

# What is inserted: (bytes, lone-surrogate escapes, bytes that are not UTF-8). Each goes before an
# ASCII character that is not a backslash, so none joins the text around it into something valid.
_LONE = {b"\\ud800": 1, b"\\udbff": 1, b"\\udc00": 1, b"\\uDFFF": 1, b"\\udc00\\ud800": 2, b"\\ud83d\\u0041": 1}
LONE = tuple(_LONE)
BAD = (b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf0\x9f\x98")
_COUNT = {t: (n, 0) for t, n in _LONE.items()} | {t: (0, len(t)) for t in BAD}

# A string value: its key, then the value's opening quote. Values that decide which table or lane
# an event belongs to are left alone (categories, phases, pid and tid, "[memory]" and "ProfilerStep#"
# names, metadata kinds); every other string value may take a fault.
_VALUE = re.compile(rb'"([^"\\]{0,40})"\s*:\s*"(?!\[memory\]|ProfilerStep|thread_name|process_name)')
_KEEP = {b"ph", b"cat", b"pid", b"tid"}
_PLAIN = re.compile(rb'[^"\\\x80-\xff]+')  # the plain ASCII run a fault goes into


def insert_faults(data: bytes, n: int, seed: int, at: list[int] | None = None) -> tuple[bytes, int, int]:
    """``data`` with ``n`` faults (LONE and BAD, both) inserted into distinct string values chosen at
    random, always with the document's first and last (top-level fields before and after the event
    array, where it has them), or into the first value at or after each offset of ``at``; (bytes,
    escapes, bytes inserted)."""
    rng = random.Random(seed)
    starts = [m.end() for m in _VALUE.finditer(data) if m.group(1) not in _KEEP]
    if at is not None:
        starts = sorted({starts[min(np.searchsorted(starts, a), len(starts) - 1)] for a in at})
    else:
        starts = sorted({starts[0], starts[-1], *rng.sample(starts, min(n, len(starts)))})
    out, last, lone, bad = [], 0, 0, 0
    for i, s in enumerate(starts):
        run = _PLAIN.match(data, s)
        if not run:
            continue  # an empty string, or one that starts with an escape or a multi-byte character
        j = rng.randrange(run.start(), run.end())
        token = (LONE, BAD)[i % 2][rng.randrange(len((LONE, BAD)[i % 2]))]
        out += [data[last:j], token]
        last = j
        lone, bad = lone + _COUNT[token][0], bad + _COUNT[token][1]
    out.append(data[last:])
    return b"".join(out), lone, bad


def repair_line(lone: int, bad: int) -> str:
    return readers.text_repair_warning(lone, bad)[0]


def _shape(t) -> dict:
    return {
        **{tab: len(getattr(t, tab)) for tab in TABLES},
        "devices": len(t.devices),
        "threads": len(t.threads),
        "metadata": sorted(t.metadata),
        "rank": t.rank,
    }


def _same_tables(a, b) -> None:
    _same(a, b, TABLES)
    assert a.metadata == b.metadata and a.warnings == b.warnings


def _clean(name: str) -> bytes:
    return gzip.decompress((KINETO / name).read_bytes())


@pytest.fixture
def slices(monkeypatch):
    """Slices of 64 KB (blocks of 16 KB): a 35 MB trace crosses ~550 slice boundaries."""
    monkeypatch.setattr(kineto_stream, "_CHUNK", 64 << 10)
    monkeypatch.setattr(kineto_stream, "_BLOCK", 16 << 10)


EVERY_KINETO = ALL_KINETO + sorted(
    f"hta_dlrm_ws128_2ranks/{p.name}" for p in (KINETO / "hta_dlrm_ws128_2ranks").glob("*.json.gz")
)


@pytest.mark.parametrize("name", EVERY_KINETO)
def test_faults_in_every_bundled_trace_are_repaired_and_counted(slices, tmp_path, name):
    data = _clean(name)
    clean = load_kineto(str(KINETO / name))
    assert clean.warnings == []
    dirty, lone, bad = insert_faults(data, n=60, seed=sum(name.encode()))
    assert lone and bad
    path = tmp_path / "dirty.json"
    path.write_bytes(dirty)
    streamed = load_kineto(str(path))
    assert _shape(streamed) == _shape(clean)
    assert streamed.warnings == [repair_line(lone, bad)]
    # the repaired names are the visible escapes, not U+FFFD
    assert not any("\ufffd" in s for s in streamed.strings if s not in clean.strings)


@pytest.mark.parametrize(
    "name",
    [
        "tl_mi300x_norm_layers_fwdbwd.json.gz",  # top-level fields after the event array
        "hta_mi250_minitoy_train.json.gz",
        "hta_a100_nccl.json.gz",
        "tl_mi300x_vllm_gptoss_decode_fullgraph_bs32.json.gz",
    ],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_both_readers_plain_and_gzip_give_the_same_repaired_trace(slices, tmp_path, name, seed):
    dirty, lone, bad = insert_faults(_clean(name), n=40, seed=seed)
    plain, gz = tmp_path / "d.json", tmp_path / "d.json.gz"
    plain.write_bytes(dirty)
    gz.write_bytes(gzip.compress(dirty, compresslevel=1))
    clean = load_kineto(str(KINETO / name))
    reads = [load_kineto(str(plain)), load_kineto(str(gz)), load_kineto_in_memory(str(plain))]
    reads.append(load_kineto_in_memory(str(gz)))
    for t in reads:
        assert _shape(t) == _shape(clean)
        assert t.warnings == [repair_line(lone, bad)]
    for t in reads[1:]:
        _same_tables(reads[0], t)


def _synthetic(n_events: int, pad: int) -> dict:
    """A trace of ``n_events`` kernels and their launches with ``pad``-character names and args,
    a device property and top-level fields after the events."""
    ev = []
    for i in range(n_events):
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 2,
                "ts": 10 * i,
                "dur": 2,
                "args": {"correlation": i, "note": f"launch {i} " + "n" * (i % pad)},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kernel_{i % 40}_" + "k" * (pad - i % 7),
                "pid": 0,
                "tid": 7,
                "ts": 10 * i + 3,
                "dur": 5,
                "args": {"device": 0, "stream": 7, "correlation": i, "grid": [1, 1, 1]},
            }
        )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA Test GPU", "totalGlobalMem": 1 << 30}],
        "traceEvents": ev,
        "distributedInfo": {"rank": 3, "world_size": 8, "backend": "nccl"},
        "traceName": "synthetic trace",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


@pytest.mark.parametrize("chunk", [8 << 10, 32 << 10])
@pytest.mark.parametrize("delta", [-300, -40, 0, 40, 300])
def test_faults_at_every_slice_boundary(monkeypatch, tmp_path, chunk, delta):
    """A fault in the strings of the events where the clean trace's slices were cut (and either
    side of it), as a trace read in 8 MB slices has them every 8 MB."""
    monkeypatch.setattr(kineto_stream, "_CHUNK", chunk)
    monkeypatch.setattr(kineto_stream, "_BLOCK", chunk // 4)
    data = json.dumps(_synthetic(3000, 120), indent=1).encode()
    q = tmp_path / "clean.json"
    q.write_bytes(data)
    sizes: list = []  # events per slice the clean read decoded
    real = kineto_stream._decode_slice
    monkeypatch.setattr(kineto_stream, "_decode_slice", lambda *a: sizes.append(real(*a)) or sizes[-1])
    clean = load_kineto(str(q))
    monkeypatch.setattr(kineto_stream, "_decode_slice", real)
    firsts = np.cumsum([n for n in sizes if n])[:-1]  # the first event of every slice but the first
    starts = [data.index(b"{", data.index(b"[")) + 0] + [m.end() - 1 for m in kineto_stream._CUT.finditer(data)]
    at = [starts[i] + delta for i in firsts]
    assert len(at) > 20
    dirty, lone, bad = insert_faults(data, n=0, seed=delta & 0xFFFF, at=at)
    assert lone + bad >= len(at)
    p = tmp_path / "b.json"
    p.write_bytes(dirty)
    t = load_kineto(str(p))
    assert _shape(t) == _shape(clean) and len(t.kernels) == 3000
    assert t.warnings == [repair_line(lone, bad)]
    assert t.metadata["traceName"] == "synthetic trace" and t.rank == 3  # the fields after the events
    _same_tables(t, load_kineto_in_memory(str(p)))


def test_the_issue_file_one_lone_surrogate_in_one_of_40_names(tmp_path):
    """Issue 35's case, at the real slice size: one of 40 kernel names holds ``\\ud800`` (24 MB).
    Before the repair the reader stopped at byte 12,582,693 (the end of what it had buffered) with
    20,913 of 40,000 kernels, a "truncated or damaged" note and the fields after the event array
    lost; every kernel and field is read now."""
    doc = _synthetic(40_000, 180)
    text = json.dumps(doc).replace('"kernel_17_', '"kernel_\\ud800_17_')
    p = tmp_path / "surrogate.json"
    p.write_text(text)
    assert p.stat().st_size > 2 * kineto_stream._CHUNK
    t = load_kineto(str(p))
    assert len(t.kernels) == 40_000
    assert t.warnings == [repair_line(1000, 0)]
    assert t.metadata["traceName"] == "synthetic trace" and t.rank == 3
    assert any(s.startswith("kernel_\\ud800_17_") for s in t.strings)
    assert not any(s.startswith("kernel_17_") for s in t.strings)


def test_text_in_the_head_and_trailer_is_counted_once_in_two_halves(tmp_path, monkeypatch):
    """A plain file read in two halves (the second in a child interpreter): the faults of both
    halves and of the top-level fields are counted once, as the serial reader counts them."""
    monkeypatch.setattr(kineto_stream, "_CHUNK", 1 << 20)
    doc = _synthetic(30_000, 60)
    doc["deviceProperties"][0]["name"] = "NVIDIA \udc00GPU"  # json.dumps writes "\udc00"
    doc["traceName"] = "synthetic \ud800 trace"
    data = json.dumps(doc).encode()
    dirty, lone, bad = insert_faults(data, n=30, seed=7)
    p = tmp_path / "halves.json"
    p.write_bytes(dirty)
    halves, serial = in_halves_and_serially(monkeypatch, p)
    _same_tables(halves, serial)
    assert serial.warnings == [repair_line(lone + 2, bad)]
    # the escapes put into the top-level fields (insert_faults adds one of its own to each) are text
    assert "\\udc00GPU" in serial.devices[0].name and "\\ud800 trace" in serial.metadata["traceName"]


@pytest.mark.parametrize("cut", [0.4, 0.93])
def test_a_truncated_file_with_faults_is_still_truncated(slices, tmp_path, cut):
    """Repairs never hide damage: a file cut short still says so, and counts the repairs in what
    was read."""
    dirty, _, _ = insert_faults(_clean("hta_a100_nccl.json.gz"), n=50, seed=5)
    p = tmp_path / "cut.json"
    p.write_bytes(dirty[: int(len(dirty) * cut)])
    for t in (load_kineto(str(p)), load_kineto_in_memory(str(p))):
        assert any("truncated or damaged" in w for w in t.warnings)
        assert any(w.startswith("text that is not Unicode") for w in t.warnings)
        assert 0 < len(t.kernels) < 2700


@pytest.mark.parametrize(
    "text,expected,lone,bad",
    [
        (b'"a\\ud800b"', b'"a\\\\ud800b"', 1, 0),
        (b'"\\ud83d\\ude00"', b'"\\ud83d\\ude00"', 0, 0),  # a pair is left alone
        (b'"\\\\ud800"', b'"\\\\ud800"', 0, 0),  # an escaped backslash, then text
        (b'"\\\\\\ud800"', b'"\\\\\\\\ud800"', 1, 0),  # an escaped backslash, then an escape
        (b'"\\uDC00\\uD800"', b'"\\\\uDC00\\\\uD800"', 2, 0),  # a pair in the wrong order
        (b'"a\xffb\xc3"', b'"a\\\\xffb\\\\xc3"', 0, 2),
        (b'"\xc3\xa9"', b'"\xc3\xa9"', 0, 0),
    ],
)
def test_repair_bytes(text, expected, lone, bad):
    fixed, n_lone, n_bad = readers.repair_bytes(text)
    assert (fixed, n_lone, n_bad) == (expected, lone, bad)
    json.loads(fixed)  # and it is JSON (that encodes as UTF-8)
    json.loads(fixed).encode("utf-8")


def test_positions_map_back_to_the_original():
    orig = readers.json_text(b'[{"a": "x\\ud800y\xff"}, {"b": 1}]')
    r = readers.repair_text(orig)
    i = r.text.index(', {"b"')
    assert orig[r.original(i) :].startswith(', {"b"')
    assert r.counts(i) == (1, 1) and r.counts(3) == (0, 0)


def test_the_slice_repair_and_the_text_repair_agree():
    """The streaming reader's slices are repaired from bytes (an error handler of the decoder), the
    other paths from text (positions kept); on any soup of escapes, bytes and backslashes both give
    the same text and counts, and every position of the repaired text maps back to the original."""
    rng = random.Random(3)
    parts = [b"q", b'"', b"\\", b"\\\\", b"u", b"\\ud800", b"\\uDC00", b"\\ud83d\\ude00", b"\\u0041"]
    parts += [b"\xff", b"\xc3", b"\xa9", b"\xe2\x82\xac", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xf0\x9f"]
    for _ in range(3000):
        data = b"".join(rng.choice(parts) for _ in range(rng.randrange(1, 24)))
        orig = readers.json_text(data)
        r = readers.repair_text(orig)
        expected = (r.text.encode("utf-8"), *r.counts()) if r.ends else (data, 0, 0)
        assert readers.repair_bytes(data) == expected, data
        for j, c in enumerate(r.text):
            if c in 'q"':  # characters no repair writes: each is the original's, moved
                assert orig[r.original(j)] == c, (data, j)


@pytest.mark.parametrize("step", [1, 2, 3, 5])
def test_the_utf8_check_across_its_steps(monkeypatch, step):
    """The slice's UTF-8 check goes in steps (32 KB); a character cut by a step is still one."""
    monkeypatch.setattr(kineto_stream, "_UTF8_STEP", step)
    rng = random.Random(step)
    parts = [b"q", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff", b"\xc3", b"\xa9", b"\xed\xa0\x80"]
    for _ in range(2000):
        data = b"".join(rng.choice(parts) for _ in range(rng.randrange(1, 12)))
        try:
            data.decode("utf-8")
            ok = True
        except UnicodeDecodeError:
            ok = False
        assert kineto_stream._utf8(data) == ok, data


@pytest.mark.parametrize("where", [0.3, 0.6])
def test_damage_in_the_middle_stops_where_the_in_memory_salvage_stops(slices, tmp_path, where):
    """A window whose cuts all fail is read event by event up to the failing event, then the rest
    gets a window of its own (a fault-free window past a damaged one is not skipped): real damage
    still stops the read, at the same event and byte as the whole-document salvage."""
    data, _, _ = insert_faults(_clean("hta_a100_nccl.json.gz"), n=50, seed=11)
    cut = kineto_stream._CUT.search(data, int(len(data) * where)).start() + 1
    p = tmp_path / "damaged.json"
    p.write_bytes(data[:cut] + b" @@ " + data[cut:])
    said = []
    for t in (load_kineto(str(p)), load_kineto_in_memory(str(p))):
        line = next(w for w in t.warnings if "truncated or damaged" in w)
        said.append(re.search(r"the ([\d,]+) complete events before byte ([\d,]+)", line).groups())
        assert any(w.startswith("text that is not Unicode") for w in t.warnings)
    assert said[0] == said[1] and int(said[0][1].replace(",", "")) == cut + 1


def test_a_window_whose_last_cuts_fall_in_strings_is_read_whole(slices, tmp_path):
    """Found with this work: an event whose string holds many "}, {" (a signature of dicts), long
    enough that a slice ends inside it, leaves the slice no clean cut among the last four tried; the
    window was read event by event up to the end of the buffer, whose last event is cut short, and
    that was taken for damage (36 MB at 8 MB slices: 5,110 of 15,000 kernels and a "truncated" note)."""
    doc = _synthetic(600, 40)
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["args"]["sig"] = "f(" + "{a}, " * 12 + "x" * 2000 + ")"
    p = tmp_path / "cuts.json"
    p.write_text(json.dumps(doc))
    t = load_kineto(str(p))
    assert len(t.kernels) == 600 and t.warnings == [] and t.metadata["traceName"] == "synthetic trace"
    _same_tables(t, load_kineto_in_memory(str(p)))


def test_a_read_that_stops_early_leaves_no_reading_thread(tmp_path, monkeypatch):
    """Found with this work: when the whole file had been read ahead (the queue full, the end
    marker next) and the reader stopped early, at damage, the read-ahead thread blocked forever on
    queueing its end marker and the reader waited 5 s in its join (a 28 MB trace damaged at 4 MB
    read in 5.5 s, 0.5 s of it CPU). Now the thread ends with the read."""
    import threading
    import time

    monkeypatch.setattr(kineto_stream, "_BLOCK", 16 << 10)
    p = tmp_path / "five_blocks.json"
    p.write_bytes(b" " * (5 * (16 << 10)))  # one block taken, four queued, then the end marker
    blocks = kineto_stream._Source(str(p), None).blocks()
    next(blocks)
    time.sleep(0.3)  # the thread reads the rest ahead and fills the queue
    blocks.close()  # the reader stops here
    assert not [th for th in threading.enumerate() if th.name == "trainscope-read-ahead"]


def test_an_nsight_export_with_bytes_that_are_not_utf8_reads_every_row_and_counts_them(tmp_path):
    """A TEXT cell of an Nsight export with bytes that are not UTF-8 (a damaged export, or a name a
    program wrote in another encoding): every kernel is read, the bytes are kept as visible \\xNN (not
    U+FFFD, which hides what was there) and counted in one warning; the verdict does not move."""
    import shutil
    import sqlite3

    import trainscope.api as ts
    from tests.conftest import DATA

    src = DATA / "nsys" / "cs336_small_fwd_ctx4096_a100.sqlite"
    bad = tmp_path / "bad.sqlite"
    shutil.copy(src, bad)
    con = sqlite3.connect(bad)
    name_id, name = con.execute(
        "SELECT s.id, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
        "GROUP BY s.id ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    n_kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    # two bytes that are not UTF-8 in the commonest kernel's name, stored as TEXT
    con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = ?", (name.encode() + b"\xff\xfe", name_id))
    con.commit()
    con.close()
    base, got = ts.analyze(str(src)), ts.analyze(str(bad))
    t, t0 = got.trace(0), base.trace(0)
    assert len(t.kernels) == len(t0.kernels) == n_kernels
    names = {t.strings[i] for i in t.kernels.name}
    assert name + "\\xff\\xfe" in names and not any("\ufffd" in n for n in names)
    warned = [w for w in got.warnings if "not UTF-8" in w]
    assert len(warned) == 1 and " 2 bytes" in warned[0], got.warnings
    assert (got.verdict.axis, got.verdict.bottleneck) == (base.verdict.axis, base.verdict.bottleneck)
