"""Damaged and hostile files that once escaped the readers' checks: each now ends in a one-line
error (exit 2) or is salvaged up to the damage, never an internal error or an exabyte allocation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import DATA
from tests.conftest import edited_sqlite

HEADER = '{"schema":"trainscope.recording/1"}\n'
GOOD = '{"type":"sample","t":0,"dt":1,"gpus":[{"index":0,"util_gpu":50}]}\n'


def analyze(path):
    return subprocess.run(
        [sys.executable, "-m", "trainscope", "analyze", str(path), "--no-tui"],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "bad",
    [
        '{"type":"sample","t":1' + "0" * 400 + ',"dt":1}\n',  # float overflow
        '{"type":"sample","t":NaN,"dt":1}\n',
        '{"type":"sample","t":1,"dt":1,"gpus":[{"index":0,"util_gpu":"x"}]}\n',
        '{"type":"sample","t":1,"dt":1,"gpus":[{"index":"a","util_gpu":5}]}\n',
    ],
    ids=["time-overflow", "time-nan", "metric-string", "index-string"],
)
def test_damaged_recording_sample_is_where_reading_stops(tmp_path, bad):
    f = tmp_path / "rec.jsonl"
    f.write_text(HEADER + GOOD + bad + GOOD)
    p = analyze(f)
    assert p.returncode == 0 and "internal error" not in p.stderr, p.stderr
    assert "line 3 is" in p.stdout and "the 1 " in p.stdout  # read up to the damage, and said so


def test_csv_field_past_the_csv_limit_and_impossible_dates(tmp_path):
    f = tmp_path / "big.csv"
    f.write_text('timestamp, utilization.gpu [%]\n2024/01/01 00:00:00.000, 5 %\n"' + "x" * 200_000 + '"\n')
    p = analyze(f)
    assert p.returncode == 0 and "stopped reading: field larger than field limit" in p.stdout, p.stderr
    f = tmp_path / "years.csv"
    f.write_text(
        "timestamp, utilization.gpu [%]\n0001/01/01 00:00:00.000, 5 %\n9999/01/01 00:00:00.000, 5 %\n"
        "2024/01/01 00:00:00.000, 7 %\n"
    )
    p = analyze(f)
    assert p.returncode == 0 and "2 malformed CSV rows skipped" in p.stdout and "out of range" in p.stdout, p.stderr


def _nsys_copy(tmp_path, sql):
    return edited_sqlite(DATA / "nsys" / "cs336_ddp_2x3090.sqlite", tmp_path / "x.sqlite", sql)


def test_nsys_copy_kind_of_2_to_the_62_does_not_allocate_exabytes(tmp_path):
    f = _nsys_copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 4611686018427387904")
    p = analyze(f)
    assert p.returncode == 0, p.stderr
    # Every copy is still read (the export holds 165 on the analyzed GPU process), each of kind "unknown".
    import numpy as np

    from trainscope.collectors import open_traces
    from trainscope.traces.model import COPY_KINDS

    copies = open_traces(str(f)).traces[0].copies
    assert len(copies) == 165 and set(np.unique(copies.kind).tolist()) == {COPY_KINDS.index("unknown")}


def test_nsys_column_of_the_wrong_type_is_one_line(tmp_path):
    p = analyze(_nsys_copy(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 1"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "unexpected value in the Nsight export" in p.stderr


@pytest.mark.parametrize(
    "datagram",
    [
        b'{"type":"steps","pid":1e400,"n":1,"wait_ns":1,"step_ns":2,"max_wait_ns":1}',
        b'{"type":"steps","pid":1,"n":1e400,"wait_ns":1,"step_ns":2,"max_wait_ns":1}',
        b"[" * 40_000,
    ],
    ids=["pid-overflow", "count-overflow", "deep-nesting"],
)
def test_a_hostile_datagram_is_dropped_and_the_next_one_counts(datagram):
    from trainscope.collectors.step_receiver import StepReceiver

    r = StepReceiver()
    try:
        r.handle(datagram)
        r.handle(
            json.dumps({"type": "steps", "pid": 7, "n": 3, "wait_ns": 10, "step_ns": 30, "max_wait_ns": 5}).encode()
        )
        assert r._n == 3 and r._wait == 10
    finally:
        r.close()


def test_a_gpu_trace_cut_before_its_gpu_events_is_not_called_cpu_only(tmp_path):
    """The first 5,000 bytes of an A100 trace keep its device description but no GPU event: the
    verdict says the GPU's activity was not read, not that the job ran on the CPU."""
    import gzip

    raw = gzip.decompress((DATA / "kineto" / "hta_a100_control.json.gz").read_bytes())[:5000]
    f = tmp_path / "cut.json"
    f.write_bytes(raw)
    from trainscope import api

    r = api.analyze(str(f))
    assert r.verdict.axis == "insufficient_evidence"
    assert "describes a GPU but no GPU activity was read" in r.verdict.summary and "CPU-only" not in r.verdict.summary
