"""Collectives matched across ranks by identity where the trace records it (process group and
sequence number, kind and size must agree), by end instant otherwise; clock offsets from the matches.

Every count is re-derived from the raw JSON by a separate scan. No trace in the corpus records
"Seq" (PyTorch writes it on ``record_param_comms`` and its kernels in recent versions only), so the
identity test derives a second rank from a real one-rank NCCL trace (HTA's A100 all_reduce trace,
which records "Process Group Name" and the message sizes) and writes the sequence numbers the way
PyTorch numbers them: one counter per process group, in issue order."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json

import pytest

from tests.conftest import GLOO_DELAY_MS
from tests.conftest import KINETO
from trainscope.analyzers.ranks.alignment import align_ranks
from trainscope.analyzers.ranks.alignment import summarize
from trainscope.analyzers.trace.analysis import analyze_trace
from trainscope.collectors import open_traces

DLRM = KINETO / "hta_dlrm_ws128_2ranks"
NCCL = KINETO / "hta_a100_nccl.json.gz"


def _summaries(path) -> list:
    return [summarize(t, analyze_trace(t)) for t in open_traces(str(path)).traces]


def _raw(path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _nccl_kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")]


@pytest.fixture(scope="module")
def dlrm():
    return _summaries(DLRM)


def test_dlrm_records_no_identity_so_every_match_is_by_end_instant(dlrm):
    docs = [_raw(DLRM / f"rank{r}.json.gz") for r in (0, 1)]
    # by hand: no event of either rank carries a process group or a sequence number …
    assert not any(
        "Seq" in (e.get("args") or {}) or "Process Group Name" in (e.get("args") or {})
        for d in docs
        for e in d["traceEvents"]
    )
    # … so the NCCL kernels pair by their ends (one clock: within 0.5 ms)
    k0, k1 = ([(e["ts"], e["ts"] + e["dur"]) for e in _nccl_kernels(d)] for d in docs)
    pairs = [(a, b) for a in k0 for b in k1 if abs(a[1] - b[1]) <= 500]
    al = align_ranks(dlrm)
    assert (al.by_seq, al.by_end, al.refused) == (0, len(pairs), 0)
    assert "by process group and sequence: 0; by end instant: 5" in al.method_note and len(pairs) == 5
    assert al.imbalance.rank == 1  # the rank that arrives last
    assert al.ranks[0].wait_ms_per_step > 0 and al.ranks[1].wait_ms_per_step == 0  # rank 0 waits inside all-to-all


SHIFT_US = 1_234_567.891  # rank 1's clock ahead of rank 0's, a value no rounding produces by chance


def _shifted(doc: dict, shift_us: float, rank: int) -> dict:
    out = copy.deepcopy(doc)
    for e in out["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + shift_us
    out["distributedInfo"] = dict(out.get("distributedInfo") or {}, rank=rank)
    return out


def test_a_shifted_rank_clock_is_recovered_from_the_matches(dlrm, tmp_path):
    """Rank 1 rewritten on a clock SHIFT_US ahead: the offset estimated from the matched collective
    ends recovers it to a few µs, and the arrivals (hence the straggler) do not move."""
    (tmp_path / "rank0.json").write_text(json.dumps(_raw(DLRM / "rank0.json.gz")))
    (tmp_path / "rank1.json").write_text(json.dumps(_shifted(_raw(DLRM / "rank1.json.gz"), SHIFT_US, 1)))
    base, moved = align_ranks(dlrm), align_ranks(_summaries(tmp_path))
    assert moved.ranks[0].clock_offset_us == 0.0
    recovered = moved.ranks[1].clock_offset_us - base.ranks[1].clock_offset_us
    assert recovered == pytest.approx(SHIFT_US, abs=3)
    assert f"rank 1 {SHIFT_US / 1e3:+.3f} ms" in moved.offsets_note
    assert moved.imbalance.rank == 1 and moved.by_end == base.by_end
    for a, b in zip(base.ranks, moved.ranks):
        assert b.mean_late_ms == pytest.approx(a.mean_late_ms, abs=0.005)
        assert b.wait_ms_per_step == pytest.approx(a.wait_ms_per_step, abs=0.005)


def _with_seq(doc: dict) -> dict:
    """The sequence number PyTorch writes ("Seq"): per process group, in issue order, on
    record_param_comms and on the kernels that share its External id."""
    out = copy.deepcopy(doc)
    ops = sorted(
        (
            e
            for e in out["traceEvents"]
            if e.get("name") == "record_param_comms" and "Process Group Name" in e.get("args", {})
        ),
        key=lambda e: e["ts"],
    )
    counters: dict[str, int] = {}
    seq_of = {}
    for e in ops:
        pg = e["args"]["Process Group Name"]
        counters[pg] = counters.get(pg, 0) + 1
        e["args"]["Seq"] = seq_of[e["args"]["External id"]] = counters[pg]
    for e in _nccl_kernels(out):
        if e["args"].get("External id") in seq_of:
            e["args"]["Seq"] = seq_of[e["args"]["External id"]]
    return out


def test_identity_matches_count_refuse_and_leave_a_missing_collective_unpaired(tmp_path):
    rank0 = _with_seq(_raw(NCCL))
    rank1 = _shifted(rank0, SHIFT_US, 1)
    keyed = sorted((e for e in _nccl_kernels(rank1) if "Seq" in e["args"]), key=lambda e: e["ts"])
    # rank 1's window opens after the first collective: it is missing there
    first = keyed[0]["args"]["External id"]
    rank1["traceEvents"] = [
        e
        for e in rank1["traceEvents"]
        if (e.get("args") or {}).get("External id") != first or e.get("cat") not in ("kernel", "cpu_op")
    ]
    # one all_reduce of rank 1 reports another message size: the same sequence number, not the same collective
    bad = next(e for e in keyed[1:] if e["args"]["Collective name"] == "allreduce")["args"]["External id"]
    for e in rank1["traceEvents"]:
        if (e.get("args") or {}).get("External id") == bad and "In msg nelems" in e["args"]:
            e["args"]["In msg nelems"] += 1
    (tmp_path / "rank0.json").write_text(json.dumps(rank0))
    (tmp_path / "rank1.json").write_text(json.dumps(rank1))

    # by hand, from the two files: NCCL kernels with the same (process group, Seq); sizes equal or not
    def keys(doc):
        return {
            (e["args"]["Process Group Name"], e["args"]["Seq"]): e["args"]
            for e in _nccl_kernels(doc)
            if "Seq" in e["args"]
        }

    k0, k1 = keys(rank0), keys(rank1)
    shared = set(k0) & set(k1)
    same = [
        k
        for k in shared
        if (k0[k]["In msg nelems"], k0[k]["Out msg nelems"]) == (k1[k]["In msg nelems"], k1[k]["Out msg nelems"])
    ]
    assert len(k0) == len(k1) + 1 >= 10 and len(shared) - len(same) == 1

    al = align_ranks(_summaries(tmp_path))
    assert (al.by_seq, al.refused) == (len(same), 1)
    assert al.by_end == 0  # every kernel carries an identity: the missing one is not paired with a neighbour by time
    assert al.ranks[1].matched == len(same) and al.instances == len(same)
    assert al.ranks[1].clock_offset_us == pytest.approx(SHIFT_US, abs=1)  # identical copies: exact
    assert "refused" in al.method_note


def test_gloo_without_identity_falls_back_to_end_instants(gloo_dir):
    al = align_ranks(_summaries(gloo_dir))
    assert al.source == "host ranges" and al.by_seq == 0 and al.by_end == al.instances >= 3
    assert al.imbalance.rank == 1 and al.ranks[1].mean_late_ms > 0.5 * GLOO_DELAY_MS


def test_per_rank_verdicts_rejudged_with_the_measured_wait(dlrm):
    """Rank 0's imbalance sink becomes the wait the alignment measured (its arrival to rank 1's,
    re-derived from the raw JSON), from the rank map's analyses as from an already-read TraceSet's
    (each rank judged alone: imbalance is decided once, in the reduce); rank 1, the straggler, waits
    for no one; nothing else in the step moves."""
    from trainscope.analyzers.ranks.alignment import with_aligned_imbalance
    from trainscope.analyzers.rules import Rules
    from trainscope.analyzers.trace.analysis import analyze_set

    al = align_ranks(dlrm)
    docs = [_raw(DLRM / f"rank{r}.json.gz") for r in (0, 1)]
    k0, k1 = ([(e["ts"], e["ts"] + e["dur"]) for e in _nccl_kernels(d)] for d in docs)
    wait_us = sum(b[0] - a[0] for a in k0 for b in k1 if abs(a[1] - b[1]) <= 500)  # rank 1 arrives last at each
    fresh = with_aligned_imbalance(dlrm, al)  # per-rank analyses as the rank map makes them
    alone_set = analyze_set(open_traces(str(DLRM)))  # each rank judged alone: no imbalance yet
    assert all(a.sinks.by_key["imbalance"].ns == 0 for a in alone_set)
    again = with_aligned_imbalance([dataclasses.replace(s, analysis=a) for s, a in zip(dlrm, alone_set)], al)
    for out in (fresh, again):
        r0, r1 = out
        assert r0.sinks.by_key["imbalance"].ns == pytest.approx(wait_us * 1e3, rel=1e-3)
        assert r1.sinks.by_key["imbalance"].ns == 0
        alone = dlrm[0].analysis.sinks
        assert (
            r0.sinks.by_key["comm"].ns + r0.sinks.by_key["imbalance"].ns
            == alone.by_key["comm"].ns + alone.by_key["imbalance"].ns
        )
        assert sum(x.pct for x in r0.sinks.by_key.values()) == pytest.approx(100.0, abs=1e-6)
        has = "ranks/imbalance" in [f.id for f in r0.findings]
        assert has == (r0.sinks.pct("imbalance") >= Rules().value("comm.moderate"))
    assert [a.sinks.by_key["imbalance"].ns for a in fresh] == [a.sinks.by_key["imbalance"].ns for a in again]


def test_every_reader_path_keeps_the_collective_identity(tmp_path):
    """Streamed, in memory, and in two halves (the second in a child process), the collective args
    under each External id are those of the raw JSON, operator and kernel merged."""
    from trainscope.collectors.kineto import _load_halves
    from trainscope.collectors.kineto import load_kineto
    from trainscope.collectors.kineto import load_kineto_in_memory

    doc = _with_seq(_raw(NCCL))
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    want = {}
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if e.get("cat") in ("kernel", "cpu_op") and ("Collective name" in a or "Seq" in a):
            got = want.setdefault(a["External id"], {})
            for k in ("Process Group Name", "Seq", "Collective name", "In msg nelems"):
                if k in a:
                    got[k] = a[k]
    assert sum("Seq" in v for v in want.values()) >= 10
    halves = _load_halves(str(path), None)
    assert halves is not None
    for t in (load_kineto(str(path)), load_kineto_in_memory(str(path)), halves):
        assert set(t.collective_args) == set(want)
        for ext, c in t.collective_args.items():
            w = want[ext]
            assert (c.process_group, c.seq, c.name, c.in_nelems) == (
                w.get("Process Group Name"),
                w.get("Seq"),
                w.get("Collective name"),
                w.get("In msg nelems"),
            )
