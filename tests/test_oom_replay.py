"""A snapshot that ends in an out-of-memory error is judged at the instant of the ``oom`` event,
replayed to it — not at the dump, which ``torch.cuda.memory._dump_snapshot`` in the exception
handler writes after the unwinding has freed the step's tensors.

The snapshots are written as PyTorch 2.1+ writes them (``segments`` with blocks, ``device_traces``
with ``alloc`` / ``free_requested`` / ``segment_alloc`` / ``oom`` events; an ``oom`` event keeps the
failed request in ``size`` and ``cudaMemGetInfo``'s free bytes in ``device_free``) and read through
the real reader and the ``memory`` command."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.fuzzing import run_in_process
from trainscope.analyzers.snapshot.peak import memory_peak
from trainscope.analyzers.snapshot.summary import snapshot_memory
from trainscope.collectors.snapshot import load_snapshot

MiB, GiB = 1 << 20, 1 << 30
BASE = 0x7F0000000000
FRAME = [{"name": "forward", "filename": "train.py", "line": 42}]
FAILED = [{"name": "attention", "filename": "model.py", "line": 7}]


def _snapshot(
    path,
    *,
    activations: int,
    chunk: int,
    request: int,
    device_free: int,
    reserved: int = 10 * GiB,
    weights: int = 1 * GiB,
) -> str:
    """One segment of ``reserved`` bytes: ``weights`` live throughout, then activations allocated in
    ``chunk``-byte tensors until the request of ``request`` bytes fails; the handler's unwinding frees
    every activation, then the snapshot is dumped (weights live, the rest cached free)."""
    events, t = [], 1000
    events.append({"action": "segment_alloc", "addr": BASE, "size": reserved, "time_us": t, "frames": []})
    t += 1
    events.append({"action": "alloc", "addr": BASE, "size": weights, "time_us": t, "frames": FRAME})
    addrs = []
    a = BASE + weights
    while sum(chunk for _ in addrs) + chunk <= activations:
        t += 10
        events.append({"action": "alloc", "addr": a, "size": chunk, "time_us": t, "frames": FRAME})
        addrs.append(a)
        a += chunk
    t += 10
    events.append({"action": "oom", "size": request, "device_free": device_free, "time_us": t, "frames": FAILED})
    for x in addrs:  # the exception unwinds: the step's tensors are freed before the dump
        t += 1
        events.append({"action": "free_requested", "addr": x, "size": chunk, "time_us": t, "frames": []})
        events.append({"action": "free_completed", "addr": x, "size": chunk, "time_us": t, "frames": []})
    blocks = [
        {"address": BASE, "size": weights, "requested_size": weights, "state": "active_allocated", "frames": FRAME},
        {"address": BASE + weights, "size": reserved - weights, "requested_size": 0, "state": "inactive", "frames": []},
    ]
    snap = {
        "segments": [
            {
                "device": 0,
                "address": BASE,
                "total_size": reserved,
                "allocated_size": weights,
                "active_size": weights,
                "requested_size": weights,
                "stream": 0,
                "segment_type": "large",
                "blocks": blocks,
            }
        ],
        "device_traces": [events],
    }
    out = path / "oom.pickle"
    out.write_bytes(pickle.dumps(snap, protocol=4))
    return str(out)


def test_a_capacity_oom_dumped_after_the_unwinding_is_judged_at_the_oom(tmp_path):
    # 8.69 GiB of activations in 10 GiB reserved: 316 MiB cached free and 50 MiB on the device when 1 GiB
    # is asked for — a capacity OOM. At the dump 8.9 GiB more sit cached free, which would read as
    # fragmentation (1 GiB ≤ 9 GiB free) if judged there.
    path = _snapshot(tmp_path, activations=8_900 * MiB, chunk=100 * MiB, request=GiB, device_free=50 * MiB)
    snap = load_snapshot(path)
    (m,) = snapshot_memory(snap)
    o = m.oom
    assert (o.status, o.kind, o.judged_at) == ("oom", "capacity", "oom event")
    assert o.requested == GiB and o.device_free == 50 * MiB
    assert o.cached_free == 10 * GiB - GiB - 89 * 100 * MiB  # reserved − allocated just before the request
    assert m.inactive_end_bytes == 9 * GiB  # what the dump shows after the unwinding
    assert any("the dump follows the unwinding: 8.69 GiB were freed after the oom" in e for e in o.evidence)
    assert "model.py:7 (attention)" in o.evidence[0]
    peak = memory_peak(snap, m)
    assert peak.oom_index is not None and peak.oom_live_bytes == GiB + 89 * 100 * MiB
    assert len(peak.oom_allocations) == 90  # the weights and the 89 activations live when it failed


def test_a_fragmentation_oom_is_judged_from_the_same_instant(tmp_path):
    # 5 GiB of activations: 4 GiB cached free at the oom, a 1 GiB request failed — the memory was there,
    # in blocks too small for it (fragmentation).
    path = _snapshot(tmp_path, activations=5 * GiB, chunk=128 * MiB, request=GiB, device_free=10 * MiB)
    (m,) = snapshot_memory(load_snapshot(path))
    assert (m.oom.kind, m.oom.judged_at) == ("fragmentation", "oom event")
    assert m.oom.cached_free == 4 * GiB


def test_the_memory_report_names_the_instant(tmp_path):
    path = _snapshot(tmp_path, activations=8_900 * MiB, chunk=100 * MiB, request=GiB, device_free=50 * MiB)
    rc, out, err = run_in_process(["memory", path, "--format", "json", "-q"])
    assert rc in (0, 3), err
    doc = json.loads(out)
    o = doc["devices"][0]["oom"]
    assert (o["status"], o["kind"], o["judged_at"]) == ("oom", "capacity", "oom event")
    assert [f["id"] for f in doc["findings"]][0] == "machine/capacity"


@pytest.mark.parametrize("name", ["mem_oom_flexgen_opt.pickle"])
def test_the_real_oom_snapshot_without_events_is_judged_at_the_dump(name):
    """The bundled FlexGen snapshot was dumped at an OOM but kept no allocator events: there is no oom
    instant to replay to, and the judgment (at the limit: capacity) says it comes from the dump."""
    from tests.conftest import DATA

    (m,) = snapshot_memory(load_snapshot(str(DATA / "memory" / name)))
    assert (m.oom.status, m.oom.kind, m.oom.judged_at) == ("at_limit", "capacity", "dump")
