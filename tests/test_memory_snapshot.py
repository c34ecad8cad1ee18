"""CUDA memory snapshots through the restricted unpickler, and profiler memory timelines.

Peaks are re-derived here independently of the analyzer: a plain forward replay of the raw
events (the analyzer replays backwards from the final state with cumulative sums).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import pickletools
import subprocess
import sys

import pytest

from tests.conftest import DATA
from trainscope.analyzers.plan.ledger import PlanConfig
from trainscope.analyzers.plan.ledger import ledger
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.snapshot.summary import snapshot_findings
from trainscope.analyzers.snapshot.summary import snapshot_memory
from trainscope.analyzers.snapshot.timeline_peak import timeline_peak
from trainscope.collectors.errors import TraceError
from trainscope.collectors.memory_timeline import load_memory_timeline
from trainscope.collectors.safe_pickle import UnsafePickleError
from trainscope.collectors.safe_pickle import check_plain
from trainscope.collectors.safe_pickle import loads_plain
from trainscope.collectors.safe_pickle import read_bounded
from trainscope.collectors.snapshot import load_snapshot

SNAPSHOT = DATA / "memory" / "mem_cs336_nothanmin_trainstep.pickle.gz"
TIMELINE = DATA / "memory" / "hta_memory_timeline.raw.json.gz"


def _raw_snapshot() -> dict:
    # Test-only: the file is the project's own fixture, so a plain load is acceptable *here*, and it
    # gives an independent view of the data the safe path must reproduce.
    with gzip.open(SNAPSHOT, "rb") as f:
        return pickle.load(f)


@pytest.fixture(scope="module")
def snap():
    return load_snapshot(str(SNAPSHOT))


@pytest.fixture(scope="module")
def mem(snap):
    return snapshot_memory(snap, top=100_000)[0]


def test_snapshot_holds_only_plain_data():
    # What the restricted unpickler allows is what the real file needs: no opcode that names a global.
    data = gzip.open(SNAPSHOT).read()
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    assert not ops & {
        "GLOBAL",
        "STACK_GLOBAL",
        "REDUCE",
        "BUILD",
        "INST",
        "OBJ",
        "NEWOBJ",
        "NEWOBJ_EX",
        "EXT1",
        "EXT2",
        "EXT4",
        "PERSID",
        "BINPERSID",
    }
    assert loads_plain(data) == _raw_snapshot()


def test_snapshot_peak_matches_a_forward_replay_of_the_raw_events(snap, mem):
    raw = _raw_snapshot()
    events = raw["device_traces"][0]
    blocks = [b for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    allocated_in_trace = {e["addr"] for e in events if e["action"] == "alloc"}
    live, start = {}, 0
    for e in events:  # allocations freed before being allocated in the trace existed at its start
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_requested" and live.pop(e["addr"], None) is None:
            start += e["size"]
    start += sum(b["requested_size"] for b in blocks if b["address"] not in allocated_in_trace)
    cur = peak = start
    for e in events:
        cur += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_requested" else 0
        peak = max(peak, cur)
    assert cur == sum(b["requested_size"] for b in blocks)  # the replay ends at the dumped state
    assert mem.peak_allocated == peak == 22_827_925_508
    assert mem.events == len(events) == 19_464
    # No segment was ever released, so reserved memory peaks at the final reserved total.
    assert not any(e["action"] == "segment_free" for e in events)
    assert mem.peak_reserved == sum(s["total_size"] for s in raw["segments"]) == 23_842_521_088
    # Fragmentation: reserved but holding no tensor while reserved memory is at its peak.
    assert mem.fragmentation_pct == pytest.approx(100 * (23_842_521_088 - peak) / 23_842_521_088, abs=0.01)
    assert 4.0 < mem.fragmentation_pct < 4.5


def test_live_allocations_at_the_peak_add_up_and_tell_the_story(mem):
    raw = _raw_snapshot()
    assert sum(a.size for a in mem.top_allocations) == mem.peak_allocated
    # The peak falls at the end of the backward pass, before Optimizer.zero_grad opens: no range is open.
    ranges = {a["name"]: [] for a in raw["external_annotations"]}
    for a in raw["external_annotations"]:
        ranges[a["name"]].append(a["time_us"])
    events = raw["device_traces"][0]
    cur = sum(b["requested_size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    best, t_peak = cur, None
    for e in events:
        cur += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_requested" else 0
        if cur > best:
            best, t_peak = cur, e["time_us"]
    assert t_peak < min(t for ts in ranges.values() for t in ts)
    assert mem.peak_phase is None
    sites = {s.site: s.bytes for s in mem.sites}
    # AdamW's m and v (adapters.py lines 887 and 888) each equal the weights, which were allocated
    # before recording began: the ledger's 4 + 4 + 8 bytes per FP32 parameter, seen in a real run.
    weights = sites["no stack recorded (allocated before recording began)"]
    assert sites["adapters.py:887 (step)"] == sites["adapters.py:888 (step)"]
    assert sites["adapters.py:887 (step)"] == pytest.approx(weights, rel=0.001)
    # A third weights-sized set with only the stack where it was freed: the gradients.
    grads = sites["benchmarking_script.py:105 (run_benchmark_with_nvtx) [where freed]"]
    assert grads == pytest.approx(weights, rel=0.01)
    # At the dump (after the step) the weights, gradients, m and v are what is allocated.
    dumped = sum(b["requested_size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    lg = ledger(PlanConfig(params=weights / 4, optimizer="adamw", precision="fp32"))
    assert lg.static_bytes == pytest.approx(dumped, rel=0.02)


def test_capacity_and_fragmentation_findings(mem):
    rules = Rules()
    assert snapshot_findings([mem], 80 * 2**30, rules) == []  # 23.8 GB of 86 GB, 4.3 % fragmentation: fine
    assert snapshot_findings([mem], 27e9, rules) == []  # 88.3 %: just under the 90 % threshold
    cap = snapshot_findings([mem], 26e9, rules)  # 23.8 of 26 GB: 91.7 %
    assert [f.id for f in cap] == ["machine/capacity"]
    assert cap[0].evidence[0].value == pytest.approx(100 * 23_842_521_088 / 26e9, abs=0.01)
    frag = snapshot_findings([mem], None, Rules({"memory.fragmentation": 4.0}))
    assert [f.id for f in frag] == ["machine/fragmentation"]


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_pickle_that_would_run_code_is_rejected(tmp_path, protocol):
    _Evil.marker = str(tmp_path / "pwned")
    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "device_traces": [_Evil()]}, protocol=protocol))
    if protocol < 2:  # protocol 0 has no PROTO header: not a snapshot at all
        with pytest.raises(TraceError):
            load_snapshot(str(bad))
        with pytest.raises(UnsafePickleError, match="system"):
            loads_plain(bad.read_bytes())
    else:
        with pytest.raises(TraceError, match=r"refuses to load (posix|os|nt)\.system"):
            load_snapshot(str(bad))
    assert not os.path.exists(_Evil.marker)
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "memory", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not os.path.exists(_Evil.marker)


def test_hostile_plain_data_is_bounded(tmp_path):
    with pytest.raises(UnsafePickleError, match="set"):
        loads_plain(pickle.dumps({"segments": {1, 2}}, protocol=4))
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(UnsafePickleError, match="deeper"):
        loads_plain(pickle.dumps(deep, protocol=4))
    cyc: list = []
    cyc.append(cyc)
    with pytest.raises(UnsafePickleError, match="cycle"):
        loads_plain(pickle.dumps(cyc, protocol=4))
    # "Billion laughs": 60 levels each referencing the level below twice — checked in linear time.
    x: list = [0]
    for _ in range(60):
        x = [x, x]
    check_plain(x)
    big = tmp_path / "big.pickle"
    big.write_bytes(pickle.dumps(list(range(10_000)), protocol=4))
    with pytest.raises(UnsafePickleError, match="limit"):
        read_bounded(str(big), max_bytes=1000)
    trunc = tmp_path / "trunc.pickle"
    trunc.write_bytes(gzip.open(SNAPSHOT).read()[:5000])
    with pytest.raises(TraceError, match="not a readable pickle"):
        load_snapshot(str(trunc))
    notsnap = tmp_path / "int.pickle"
    notsnap.write_bytes(pickle.dumps(42, protocol=4))
    with pytest.raises(TraceError, match="not a CUDA memory snapshot"):
        load_snapshot(str(notsnap))


def test_memory_timeline_peak_by_category_matches_the_raw_events():
    events = json.load(gzip.open(TIMELINE))
    # Independent: sort by time (pre-existing −1 first), total after each time point, max.
    by_time: dict[int, list] = {}
    for t, _action, nbytes, cat in events:
        by_time.setdefault(t, []).append((nbytes, cat))
    cur, peak, cats, at_peak = 0, 0, [0] * 8, None
    for t in sorted(by_time):
        for nbytes, cat in by_time[t]:
            cur += nbytes
            cats[cat] += nbytes
        if cur > peak:
            peak, at_peak = cur, list(cats)
    p = timeline_peak(load_memory_timeline(str(TIMELINE)))
    assert p.peak_bytes == peak == 3_082_832_104
    assert p.at_peak["activation"] == at_peak[4] == 2_592_465_920
    assert p.at_peak["parameter"] == at_peak[0]
    # A ResNet-50 (25.6 M parameters) with SGD+momentum in FP32: the ledger's weights and momentum
    # agree with the measured PARAMETER and OPTIMIZER_STATE categories to within 1 %.
    lg = ledger(PlanConfig(params=25.6e6, optimizer="momentum", precision="fp32"))
    assert p.at_peak["parameter"] == pytest.approx(lg.item("weights").bytes, rel=0.01)
    assert p.at_peak["optimizer_state"] == pytest.approx(lg.item("optimizer").bytes, rel=0.01)


def test_coalesced_memory_timeline(tmp_path):
    # The other export layout, [times_us, [[0, per-category…], …]], built from the raw events.
    events = sorted(json.load(gzip.open(TIMELINE)), key=lambda e: e[0])
    times, sizes, cats = [], [], [0] * 8
    for t, _a, nbytes, cat in events:
        cats[cat] += nbytes
        if times and times[-1] == t:
            sizes[-1] = [0] + list(cats)
        else:
            times.append(t)
            sizes.append([0] + list(cats))
    f = tmp_path / "timeline.json"
    f.write_text(json.dumps([times, sizes]))
    tl = load_memory_timeline(str(f))
    assert tl.layout == "coalesced" and timeline_peak(tl).peak_bytes == 3_082_832_104
    for text in ("[[1, 2], [[0, 1]]]", '{"a": 1}', "[[1, 2, 3]]", "not json"):
        f.write_text(text)
        with pytest.raises(TraceError):
            load_memory_timeline(str(f))


def test_sites_of_a_snapshot_recorded_on_windows_read_as_on_linux():
    """Frames written with Windows separators: the torch-internal filter still skips torch's own
    frames and the site is the file's name, as for a Linux path."""
    from trainscope.analyzers.snapshot.summary import site_of

    def frames(sep):
        return [
            {
                "filename": sep.join(["D:", "env", "Lib", "site-packages", "torch", "nn", "modules", "module.py"]),
                "line": 1775,
                "name": "_call_impl",
            },
            {"filename": sep.join(["D:", "work", "model.py"]), "line": 532, "name": "silu"},
        ]

    assert site_of(frames("\\")) == site_of(frames("/")) == "model.py:532 (silu)"


def test_memory_command_names_both_formats_for_an_unreadable_file(tmp_path):
    """`trainscope memory` on a damaged .pickle said only "not JSON (JSONDecodeError …)", and on an
    empty file the same: the error names the file kinds the command reads, or that the file is empty."""
    bad = tmp_path / "snap.pickle"
    bad.write_bytes(b"garbage")
    with pytest.raises(TraceError, match="neither a CUDA memory snapshot"):
        load_memory_timeline(str(bad))
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    with pytest.raises(TraceError, match="file is empty"):
        load_memory_timeline(str(empty))
    p = subprocess.run(
        [sys.executable, "-m", "trainscope", "memory", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "where, size",
    [("segment", 2**70), ("block", 2**64), ("block", 2**60), ("event", 2**63), ("event", -(2**40))],
)
def test_an_impossible_size_is_left_out_and_counted(tmp_path, where, size):
    """A size no device can hold (a fuzzed or damaged file): before, a block of 2^64 bytes gave an
    internal OverflowError in the replay, one of 2^60 a peak of 10⁹ GiB and a negative
    fragmentation. The record is left out, the rest analyzed, and the warning says how many."""
    path = DATA / "memory" / "mem_oom_flexgen_opt.pickle"
    raw = pickle.loads(path.read_bytes())
    clean = snapshot_memory(load_snapshot(str(path)))
    if where == "segment":
        raw["segments"][0]["total_size"] = size
        seg0 = raw["segments"][0]
    elif where == "block":
        dev = next(i for i, t in enumerate(raw["device_traces"]) if t)
        seg = next(s for s in raw["segments"] if s.get("device", 0) == dev and s["blocks"])
        seg["blocks"][0]["requested_size"] = size
    else:
        dev = next(i for i, t in enumerate(raw["device_traces"]) if t)
        raw["device_traces"][dev][0]["size"] = size
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(pickle.dumps(raw))
    snap = load_snapshot(str(bad))
    kind = {"segment": "segment", "block": "block", "event": "trace event"}[where]
    assert any(f"left out 1 {kind} with an impossible size" in w for w in snap.warnings), snap.warnings
    mem = snapshot_memory(snap)
    for m, c in zip(mem, clean):
        assert 0 <= m.peak_allocated <= c.peak_reserved + (1 << 30)  # no exabyte peak
        assert m.peak_reserved <= c.peak_reserved
    if where == "segment":
        assert sum(len(s.blocks) for s in snap.segments) == sum(
            len(s["blocks"]) for s in raw["segments"] if s is not seg0
        )
