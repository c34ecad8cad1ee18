"""The live loop behind ``trainscope watch``, through :class:`trainscope.api.Watch`: push mode (the
dashboard's), pull mode's last partial interval, the recording's first and last lines, and the
errors a caller sees before any sampling starts."""

from __future__ import annotations

import json
import os
import time

import pytest

import trainscope.api as ts


def test_push_mode_feeds_every_sample_and_stop_leaves_nothing_behind(tmp_path):
    record = tmp_path / "run.jsonl"
    got = []
    w = ts.watch(pid=os.getpid(), interval=0.25, duration=1.0, record=record)
    w.start(on_sample=got.append, header={"target": "this test"})
    t0 = time.monotonic()
    while not w.finished():
        assert time.monotonic() - t0 < 60
        time.sleep(0.05)
    assert w.expired and not w.job_done()  # the duration ended it; this process runs on
    assert w.stop() == []  # pushed samples are never queued
    assert got and got[-1] is w.last and all(s.snapshot.host is not None for s in got)
    st = w.finish(exit_code=None)
    lines = [json.loads(x) for x in record.read_text().splitlines()]
    assert lines[0]["target"] == "this test" and lines[0]["pid"] == os.getpid() and lines[0]["interval_s"] == 0.25
    samples = [x for x in lines if x.get("type", "sample") == "sample" and "t" in x]
    assert len(samples) == len(got)  # every sample pushed is recorded, the final partial one included
    assert lines[-1].get("verdict") == st.verdict.axis
    assert w.sampler_cpu_ms_per_sample is not None and w.sampler_cpu_ms_per_sample >= 0


def test_a_recording_that_cannot_be_written_is_bad_input_before_sampling(tmp_path):
    w = ts.watch(pid=os.getpid(), interval=0.25, record=tmp_path / "missing" / "run.jsonl")
    with pytest.raises(ts.BadInput, match="cannot write"):
        w.start()
    assert w._monitor is None  # nothing left sampling


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"replay": "x.jsonl", "pid": 1}, "choose one"),
        ({"interval": 0.1}, "interval"),
        ({"duration": 0}, "duration"),
        ({"window": 0}, "window"),
        ({"thresholds": {"no.such": 1}}, "unknown threshold"),
    ],
)
def test_bad_arguments_are_one_line_bad_input(kwargs, match):
    with pytest.raises(ts.BadInput, match=match) as e:
        ts.watch(**kwargs)
    message, code = ts.describe(e.value)
    assert code == 2 and "\n" not in message
