"""The streaming Kineto reader (collectors/kineto_stream.py) against the in-memory reader.

Slices are shrunk to a few kilobytes so that real traces cross hundreds of slice boundaries;
the tables must come out identical to the whole-document reader's, and damage anywhere must be
salvaged to the same complete events the whole-document salvage keeps."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

from tests.conftest import KINETO
from tests.conftest import raw_document
from trainscope.collectors import kineto_stream
from trainscope.collectors import readers
from trainscope.collectors.kineto import load_kineto
from trainscope.collectors.kineto import load_kineto_in_memory
from trainscope.collectors.readers import _salvage_events

TABLES = ("kernels", "copies", "memsets", "runtime", "cpu_ops", "annotations", "memory")


@pytest.fixture
def small_slices(monkeypatch):
    monkeypatch.setattr(kineto_stream, "_CHUNK", 16 << 10)
    monkeypatch.setattr(kineto_stream, "_BLOCK", 8 << 10)


def _same(a, b, tables: tuple[str, ...] = TABLES) -> None:
    for tab in tables:
        ta, tb = getattr(a, tab), getattr(b, tab)
        for f in ta.FIELDS:
            x, y = getattr(ta, f), getattr(tb, f)
            assert len(x) == len(y) and np.array_equal(x, y, equal_nan=True), (tab, f)
    for attr in ("strings", "devices", "threads", "rank", "world_size", "input_dims", "origin_ns"):
        assert getattr(a, attr) == getattr(b, attr), attr


@pytest.mark.parametrize(
    "name",
    [
        "hta_a100_nccl.json.gz",
        "tracelens_h100_qwen_inference.json.gz",
        "tracelens_mi300x_resnet_ckpt.json.gz",
        "hta_cpu_only.pt.trace.json.gz",
        "hta_mi250_minitoy_train.json.gz",
    ],
)
def test_many_small_slices_give_the_in_memory_tables(small_slices, name, tmp_path):
    path = KINETO / name
    a, b = load_kineto(str(path)), load_kineto_in_memory(str(path))
    _same(a, b)
    assert a.metadata == b.metadata and a.warnings == b.warnings == []


def test_cut_markers_inside_strings_and_objects(small_slices, tmp_path):
    """'}, {' inside names and nested args objects: a wrong cut must never split an event."""
    doc = raw_document("hta_mi250_minitoy_train.json.gz")
    ev = doc["traceEvents"]
    k = next(e for e in ev if e.get("cat") == "kernel")
    tricky = [
        dict(
            k, name=f"kernel<{{a}}, {{b}}>#{i}" + "x" * 3000, args=dict(k.get("args", {}), nested=[{"a": 1}, {"b": 2}])
        )
        for i in range(40)
    ]
    doc["traceEvents"] = ev + tricky
    p = tmp_path / "tricky.json"
    p.write_text(json.dumps(doc, indent=1))
    a, b = load_kineto(str(p)), load_kineto_in_memory(str(p))
    _same(a, b)
    assert len(a.kernels) == 14 + 40


@pytest.mark.parametrize("cut", [0.3, 0.77])
def test_truncation_keeps_the_same_complete_events(small_slices, tmp_path, cut):
    data = gzip.decompress((KINETO / "hta_a100_nccl.json.gz").read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(data[: int(len(data) * cut)])
    a = load_kineto(str(p))
    kept, _ = _salvage_events(p.read_text(errors="replace"))  # the whole-document salvage, by hand
    assert any("truncated or damaged" in w and f"the {len(kept):,} complete events" in w for w in a.warnings)
    for table, cat in (("kernels", "kernel"), ("cpu_ops", "cpu_op"), ("runtime", "cuda_runtime")):
        n = sum(1 for e in kept if e.get("ph") == "X" and e.get("cat") == cat)
        assert len(getattr(a, table)) == n
    assert len(a.cpu_ops) > 0
    # fields before the event array survive the truncation (the in-memory salvage loses them)
    assert a.devices and a.devices[0].name.startswith("NVIDIA")


def test_odd_slices_go_through_the_general_path(small_slices, tmp_path):
    """NaN, string timestamps and non-object events in the middle of a streamed file."""
    doc = raw_document("hta_a100_nccl.json.gz")
    ev = doc["traceEvents"]
    k = next(e for e in ev if e.get("cat") == "kernel")
    mid = len(ev) // 2
    doc["traceEvents"] = ev[:mid] + [dict(k, dur=float("nan")), dict(k, ts="garbage"), "not an event"] + ev[mid:]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc))
    a = load_kineto(str(p))
    b = load_kineto(str(KINETO / "hta_a100_nccl.json.gz"))
    assert len(a.kernels) == len(b.kernels)
    text = " ".join(a.warnings)
    assert "NaN" in text and "malformed" in text


def in_halves_and_serially(monkeypatch, path) -> tuple:
    """``path`` read in two halves at once (the split forced: any size, two cores; the second half
    in a child interpreter), then serially: (halves, serial). Asserts the file was split."""
    from trainscope.collectors import kineto

    calls = []
    real = kineto._load_halves
    monkeypatch.setattr(kineto, "_load_halves", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(readers, "usable_cores", lambda: 2)
    halves = load_kineto(str(path))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1 << 62)
    serial = load_kineto(str(path))
    assert calls == [1]
    assert kineto_stream.split_point(str(path)) is not None  # the file was split, not read serially
    return halves, serial


@pytest.mark.parametrize("cut", [None, 0.8])
def test_two_halves_read_at_once_give_the_serial_tables(tmp_path, monkeypatch, cut):
    """Large plain files are read in two parts, the second in a child interpreter; the tables,
    names, threads and warnings must be the serial reader's (whole file, and truncated in the
    second half)."""
    data = gzip.decompress((KINETO / "hta_a100_control.json.gz").read_bytes())
    p = tmp_path / "big.json"
    p.write_bytes(data if cut is None else data[: int(len(data) * cut)])
    monkeypatch.setattr(kineto_stream, "_CHUNK", 1 << 20)
    halves, serial = in_halves_and_serially(monkeypatch, p)
    _same(halves, serial)
    assert halves.warnings == serial.warnings and halves.metadata == serial.metadata


def test_a_file_is_read_in_halves_only_where_their_memory_fits(tmp_path, monkeypatch):
    """The two-process read holds ≈ 0.53 byte per byte of the file (parent and child together): where
    that, with its margin, does not fit in the room this process may still take, one process reads
    the file — the same trace. No room known (no limit): halves, as before."""
    from trainscope.collectors import kineto

    p = tmp_path / "big.json"
    p.write_bytes(gzip.decompress((KINETO / "hta_a100_control.json.gz").read_bytes()))
    size = p.stat().st_size
    need = size * kineto.HALVES_BYTES_PER_BYTE * kineto.HALVES_MARGIN
    assert kineto.halves_fit(size, None) and kineto.halves_fit(size, int(need) + 1)
    assert not kineto.halves_fit(size, int(need) - 1)
    calls: list[int] = []
    real = kineto._load_halves
    monkeypatch.setattr(kineto, "_load_halves", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(readers, "usable_cores", lambda: 2)
    got = {}
    for room in (int(need) - 1, int(need) + 1, None):
        monkeypatch.setattr(readers, "memory_room", lambda room=room: readers.MemoryRoom(None, room))
        got[room] = load_kineto(str(p))
    assert calls == [1, 1]  # the two rooms it fits in: no halves where it does not
    _same(got[int(need) - 1], got[None])


def _mm_and_its_gemm(mm_args: dict, gemm_external: int) -> list[dict]:
    """An aten::mm operator (``mm_args``) and the gemm kernel it launches, whose External id is
    ``gemm_external``."""
    gemm_args = {"device": 0, "stream": 7, "correlation": 1, "External id": gemm_external}
    return [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": mm_args},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3, "args": gemm_args},
    ]


def test_a_slice_off_the_typed_schema_is_read_through_the_general_path(tmp_path):
    """Found by benchmarks/fuzz.py on the merged reader: a list where a pid belongs made the typed
    path raise TypeError (an internal error). The slice is undone and read event by event instead,
    with the same tables as the in-memory reader."""
    from trainscope.collectors.kineto import load_kineto
    from trainscope.collectors.kineto import load_kineto_in_memory

    mm = {"External id": 7, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}
    events = _mm_and_its_gemm(mm, 7)
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": [1], "tid": 1, "ts": 20, "dur": 2})
    path = tmp_path / "odd.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    streamed, whole = load_kineto(str(path)), load_kineto_in_memory(str(path))
    assert len(streamed.kernels) == len(whole.kernels) == 1
    assert len(streamed.cpu_ops) == len(whole.cpu_ops)
    assert streamed.op_inputs.kernel_external.tolist() == whole.op_inputs.kernel_external.tolist() == [7]
    assert (streamed.op_inputs.cpu_signature >= 0).sum() == (whole.op_inputs.cpu_signature >= 0).sum() == 1


def test_the_stream_keeps_what_the_cost_model_and_host_attribution_read():
    """External ids, operator signatures and Python frames come out of the typed slices exactly as
    from the in-memory reader (the roofline links kernels to operators through them; host-idle
    attribution reads the frames)."""
    from tests.conftest import KINETO
    from trainscope.collectors.kineto import load_kineto
    from trainscope.collectors.kineto import load_kineto_in_memory

    path = str(KINETO / "tl_h100_timesformer_k400_infer.json.gz")
    streamed, whole = load_kineto(path), load_kineto_in_memory(path)
    a, b = streamed.op_inputs, whole.op_inputs
    assert a.kernel_external.tolist() == b.kernel_external.tolist() and (a.kernel_external >= 0).any()
    assert a.cpu_external.tolist() == b.cpu_external.tolist()
    assert [a.signatures[i] if i >= 0 else None for i in a.cpu_signature.tolist()] == [
        b.signatures[i] if i >= 0 else None for i in b.cpu_signature.tolist()
    ]
    assert len(streamed.python_frames) == len(whole.python_frames) > 1000


def test_an_external_id_beyond_int64_links_nothing_instead_of_failing(tmp_path):
    """Found by benchmarks/fuzz.py on the merged reader: an "External id" of 2**64 aborted the
    analysis (OverflowError building the operator links). It now links nothing (-1)."""
    from trainscope.collectors.kineto import load_kineto

    path = tmp_path / "big_id.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": _mm_and_its_gemm({"External id": 2**64}, 3)}))
    t = load_kineto(str(path))
    assert t.op_inputs.cpu_external.tolist() == [-1] and t.op_inputs.kernel_external.tolist() == [3]


def test_bytes_that_are_not_utf8_are_repaired_not_an_internal_error(tmp_path):
    """Found by benchmarks/fuzz.py on the merged reader: a 0xff byte inside a name raised
    UnicodeDecodeError from the typed decoder (an internal error). Such a byte is repaired (issue 35):
    every event is read, the byte is kept as the visible text \\xff, one line counts it."""
    from trainscope.collectors.kineto import load_kineto

    good = (
        b'{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12, "dur": 3, "args": {"device": 0}}'
    )
    bad = (
        b'{"ph": "X", "cat": "kernel", "name": "g\xffm", "pid": 0, "tid": 7, "ts": 20, "dur": 3, "args": {"device": 0}}'
    )
    path = tmp_path / "latin.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [' + good + b", " + bad + b"]}")
    t = load_kineto(str(path))
    assert [t.strings[i] for i in t.kernels.name] == ["gemm", "g\\xffm"]
    assert t.warnings == [
        "text that is not Unicode in JSON strings kept as visible escapes: 1 byte that is not UTF-8 (\\xNN); "
        "every event holding one is read"
    ]


@pytest.mark.parametrize("where", ["memory", "tmpdir"])
@pytest.mark.parametrize("damage", [None, "truncated", "second member"])
def test_a_large_gzip_file_inflated_then_read_in_two_halves_gives_the_serial_tables(
    tmp_path, monkeypatch, damage, where
):
    """A large .json.gz is inflated into a memory file (or, without room for one, a temporary file)
    and read as two halves at once; the trace (its source the .gz path) is the serial stream's.
    Damage goes to the serial reader, whose warnings are the precise ones. No descriptor or file
    is left behind."""
    from trainscope.collectors import kineto

    if where == "tmpdir":
        monkeypatch.setattr(kineto, "_memory_file", lambda size: None)
    elif not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create on this platform: the inflated copy always goes to TMPDIR")
    fds_before = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()

    raw = (KINETO / "hta_a100_control.json.gz").read_bytes()
    data = raw if damage is None else raw[: int(len(raw) * 0.9)] if damage == "truncated" else raw + gzip.compress(b" ")
    p = tmp_path / "big.json.gz"
    p.write_bytes(data)
    monkeypatch.setattr(kineto_stream, "_CHUNK", 1 << 20)
    calls = []
    real = kineto._load_halves
    monkeypatch.setattr(kineto, "_load_halves", lambda *a: calls.append(a[0]) or real(*a))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(readers, "usable_cores", lambda: 2)
    halves = load_kineto(str(p))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 1 << 62)
    serial = load_kineto(str(p))
    assert (len(calls) == 1 and calls[0] != str(p)) if damage is None else calls == []
    _same(halves, serial)
    assert halves.source == serial.source == str(p)
    assert halves.warnings == serial.warnings and halves.metadata == serial.metadata
    assert not list(tmp_path.glob("trainscope-*"))  # no temporary file left (they go to TMPDIR anyway)
    if damage is None:
        assert calls[0].startswith("/proc/self/fd/") == (where == "memory")
    if fds_before:
        assert set(os.listdir("/proc/self/fd")) <= fds_before | {str(max(map(int, fds_before)) + 1)}
