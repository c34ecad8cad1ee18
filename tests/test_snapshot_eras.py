"""Every snapshot era reads the same way, and a snapshot says whether it ends in an OOM and of
which kind. The raw view comes through the project's restricted unpickler, never plain pickle."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from tests.conftest import DATA
from trainscope.analyzers.rules import Rules
from trainscope.analyzers.snapshot.summary import snapshot_findings
from trainscope.analyzers.snapshot.summary import snapshot_memory
from trainscope.collectors.safe_pickle import loads_plain
from trainscope.collectors.safe_pickle import read_bounded
from trainscope.collectors.snapshot import load_snapshot

OOM = DATA / "memory" / "mem_oom_flexgen_opt.pickle"
GIB = 2**30


def _raw(path=OOM) -> dict:
    return loads_plain(read_bounded(str(path), 10**9))


def test_pytorch_2_0_snapshot_reads_from_the_segments():
    raw = _raw()
    assert "history" in raw["segments"][0]["blocks"][0] and "address" not in raw["segments"][0]["blocks"][0]
    active = [b for s in raw["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    allocated = sum(b["requested_size"] for b in active)
    reserved = sum(s["total_size"] for s in raw["segments"])
    assert allocated / GIB == pytest.approx(11.03, abs=0.01) and reserved / GIB == pytest.approx(11.03, abs=0.01)
    snap = load_snapshot(str(OOM))
    # every block keeps its own address (2.0 blocks have none: they were all read as 0 before)
    addrs = [b.address for s in snap.segments for b in s.blocks]
    assert len(set(addrs)) == len(addrs) == sum(len(s["blocks"]) for s in raw["segments"])
    (m,) = snapshot_memory(snap)
    assert m.end_allocated == allocated and m.peak_allocated == allocated and m.end_reserved == reserved
    assert m.fragmentation_pct < 1.0  # not "100 % fragmentation"
    assert sum(s.count for s in m.sites) == len(active)
    assert m.sites[0].site.startswith("pytorch_backend.py:190")  # the stack from the block's history


def test_snapshot_at_its_limit_is_a_capacity_oom():
    (m,) = snapshot_memory(load_snapshot(str(OOM)))
    assert m.oom.status == "at_limit" and m.oom.kind == "capacity" and m.oom.ended_in_oom is None
    found = snapshot_findings([m], None, Rules())
    assert [f.id for f in found] == ["machine/capacity"] and "capacity OOM" in found[0].title


@pytest.mark.parametrize("request_mib, device_free_mib, kind", [(512, 100, "capacity"), (3, 1, "fragmentation")])
def test_recorded_oom_is_capacity_or_fragmentation(tmp_path, request_mib, device_free_mib, kind):
    """The real snapshot with an oom event appended (its cache holds 4.3 MiB free in blocks of at
    most 2 MiB): a 512 MiB request beyond 100 MiB free is capacity; 3 MiB with 1 MiB free on the
    device fits 4.3 + 1 MiB in total but no block: fragmentation."""
    raw = _raw()
    cached = sum(b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "inactive")
    largest = max(b["size"] for s in raw["segments"] for b in s["blocks"] if b["state"] == "inactive")
    req, free = request_mib * 2**20, device_free_mib * 2**20
    assert (req > cached + free) == (kind == "capacity") and req > largest
    raw["device_traces"][0].append({"action": "oom", "size": req, "device_free": free, "stream": 0, "frames": []})
    p = tmp_path / "oom.pickle"
    p.write_bytes(pickle.dumps(raw, protocol=4))  # writing plain data; reading goes through the safe path
    (m,) = snapshot_memory(load_snapshot(str(p)))
    assert m.oom.status == "oom" and m.oom.kind == kind and m.oom.ended_in_oom is True
    assert m.oom.requested == req and m.oom.device_free == free
    ids = [f.id for f in snapshot_findings([m], None, Rules())]
    assert ids[0] == ("machine/capacity" if kind == "capacity" else "machine/fragmentation")


def test_memory_command_reports_the_oom():
    r = subprocess.run(
        [sys.executable, "-m", "trainscope", "memory", str(OOM)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "peak allocated    11.03 GiB" in r.stdout and "capacity OOM" in r.stdout
    assert "machine/fragmentation" not in r.stdout and "[high] machine/capacity" in r.stdout
